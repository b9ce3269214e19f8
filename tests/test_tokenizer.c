/*
 * test_tokenizer.c: the SPM / BPE / WordPiece tokenizers against the
 * llama.cpp vocab test vectors (LLMUX_TEST_DATA/tokenizer/<name>.gguf with
 * .inp/.out), exact id for id, plus round trips, special-token parsing,
 * BOS/EOS flags, invalid UTF-8, large input and the prompts of the two
 * real models in LLMUX_TEST_DATA/models.
 */
#include "../local_engine/le_int.h"
#include "../local_engine/unicode_data.h"
#include "harness.h"
#include "lib/gguf_writer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <pthread.h>
#include <time.h>

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


/* ------------------------------------------------------------------ */
/* Synthetic vocabularies (built with the test GGUF writer)             */

/* GPT-2's byte -> code point image, as UTF-8, for building BPE vocabs. */
static size_t
byte_image(unsigned b, char *o)
{
    static unsigned map[256];
    static int ready;
    if (!ready) {
        unsigned nx = 256;
        for (unsigned i = 0; i < 256; i++)
            map[i] = ((i >= 33 && i <= 126) || (i >= 161 && i <= 172) ||
                      i >= 174)
                         ? i
                         : nx++;
        ready = 1;
    }
    unsigned cp = map[b];
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Byte-level image of a whole string (static buffer). */
static const char *
bl(const char *s)
{
    static char out[8][256];
    static int k;
    char *o = out[k++ & 7];
    size_t n = 0;
    for (; *s && n < 250; s++)
        n += byte_image((unsigned char)*s, o + n);
    o[n] = 0;
    return o;
}

/* A gpt2 vocab: ids 0..255 the byte images, then extra[] (byte-level
 * images of the given strings unless raw), with types; merges as given.
 * Opens it into vf.  Returns 0 or -1. */
struct extra_tok {
    const char *text;
    int type; /* GGUF token_type */
    int raw;  /* store the text as is (control / user-defined tokens) */
};

static uint8_t *synth_buf;

static int
synth_bpe(const char *pre, const struct extra_tok *extra, int n_extra,
          const char *const *merges, int n_merges, int add_bos, int add_eos,
          struct vocab_file *vf)
{
    struct gguf_w *w = gguf_w_new();
    char bytes[256][4];
    const char *toks[300];
    int32_t types[300];
    int n = 0;
    for (int i = 0; i < 256; i++, n++) {
        size_t k = byte_image((unsigned)i, bytes[i]);
        bytes[i][k] = 0;
        toks[n] = bytes[i];
        types[n] = 1;
    }
    static char ebuf[32][256];
    for (int i = 0; i < n_extra && n < 300; i++, n++) {
        snprintf(ebuf[i], sizeof(ebuf[i]), "%s",
                 extra[i].raw ? extra[i].text : bl(extra[i].text));
        toks[n] = ebuf[i];
        types[n] = extra[i].type;
    }
    gguf_w_add_str(w, "general.architecture", "llama");
    gguf_w_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre)
        gguf_w_add_str(w, "tokenizer.ggml.pre", pre);
    gguf_w_add_str_arr(w, "tokenizer.ggml.tokens", toks, (size_t)n);
    gguf_w_add_arr(w, "tokenizer.ggml.token_type", LE_GGUF_INT32, types,
                   (size_t)n);
    gguf_w_add_str_arr(w, "tokenizer.ggml.merges", merges, (size_t)n_merges);
    gguf_w_add_u32(w, "tokenizer.ggml.bos_token_id", 256);
    gguf_w_add_u32(w, "tokenizer.ggml.eos_token_id", 257);
    if (add_bos >= 0)
        gguf_w_add_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    if (add_eos >= 0)
        gguf_w_add_bool(w, "tokenizer.ggml.add_eos_token", add_eos);
    size_t len = 0;
    free(synth_buf);
    synth_buf = NULL;
    int rc = gguf_w_write_mem(w, &synth_buf, &len, NULL);
    gguf_w_free(w);
    if (rc)
        return -1;
    char err[256] = "";
    memset(vf, 0, sizeof(*vf));
    if (le_gguf_open_mem(synth_buf, len, &vf->g, err, sizeof(err)) != LE_OK ||
        le_vocab_load(vf->g, &vf->v, err, sizeof(err)) != LE_OK) {
        fprintf(stderr, "synthetic vocab: %s\n", err);
        le_gguf_free(vf->g);
        return -1;
    }
    return 0;
}

/* Expected word splits, generated from the published regexes of each
 * pre-tokenizer with an independent regex engine (Python's `regex`),
 * applied in sequence piece by piece as llama.cpp does. */
struct pt_case {
    const char *pre;
    const char *text;
    int n;
    const char *words[12];
};

static const struct pt_case pt_cases[] = {
    {"gpt-2", "Hello world's end", 4, {"Hello", " world", "'s", " end"}},
    {"gpt-2", "  two  spaces \n\n x", 6, {" ", " two", " ", " spaces", " \n\n", " x"}},
    {"gpt-2", "I'VE 12345 dogs!!", 6, {"I", "'", "VE", " 12345", " dogs", "!!"}},
    {"gpt-2", "\tTab\xc2\xa0nbsp", 4, {"\t", "Tab", "\xc2\xa0", "nbsp"}},
    {"llama3", "Hello World'S", 3, {"Hello", " World", "'S"}},
    {"llama3", "12345678 x", 4, {"123", "456", "78", " x"}},
    {"llama3", "  hi\n\n\nthere\r\n ok", 6, {" ", " hi", "\n\n\n", "there", "\r\n", " ok"}},
    {"llama3", "'quote ?!?\n\nx", 3, {"'quote", " ?!?\n\n", "x"}},
    {"llama3", "\xc3\xbc""ber \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 test", 4, {"\xc3\xbc""ber", " \xe4\xb8\xad\xe6\x96\x87", " \xf0\x9f\x98\x80", " test"}},
    {"qwen2", "12345 abc", 6, {"1", "2", "3", "4", "5", " abc"}},
    {"qwen2", "I'll  go\n\n", 5, {"I", "'ll", " ", " go", "\n\n"}},
    {"qwen2", "a\xc2\xa0""b ...", 3, {"a", "\xc2\xa0""b", " ..."}},
    {"falcon", "1234567 dogs,cats", 6, {"123", "456", "7", " dogs", ",", "cats"}},
    {"falcon", "a+b=c^2 `x`", 11, {"a", "+", "b", "=", "c", "^", "2", " ", "`", "x", "`"}},
    {"starcoder", "x123 y45", 7, {"x", "1", "2", "3", " y", "4", "5"}},
    {"starcoder", "foo_bar(1)", 6, {"foo", "_", "bar", "(", "1", ")"}},
    {"deepseek-coder", "Hello \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97 123\nx", 9, {"Hello", " ", "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97", " ", "1", "2", "3", "\n", "x"}},
    {"deepseek-coder", "a, b; \xc3\xa9t\xc3\xa9", 5, {"a", ",", " b", ";", " \xc3\xa9t\xc3\xa9"}},
    {"deepseek-llm", "Hello \xce\xa9 \xe2\x84\xaa \xe4\xb8\xad\xe6\x96\x87 12345  ", 9, {"Hello", " \xce\xa9", " ", "\xe2\x84\xaa", " ", "\xe4\xb8\xad\xe6\x96\x87", " ", "12345", "  "}},
    {"deepseek-llm", "x!!\n\ny", 5, {"x", "!!", "\n", "\n", "y"}},
    {"default", "a...b 1234567", 7, {"a", "...", "b", " ", "123", "456", "7"}},
    {"bloom", "hi (there), 1.5", 7, {"hi", " (", "there", "),", " 1", ".", "5"}},
    {"deepseek-v3", "Hello,World 1234567 \xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf\xe4\xb8\x96\xe7\x95\x8c", 8, {"Hello", ",World", " ", "123", "456", "7", " ", "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf\xe4\xb8\x96\xe7\x95\x8c"}},
    {"deepseek-v3", "x = a+b; // \xc3\xa9t\xc3\xa9\n\n\xe2\x82\xac""5", 10, {"x", " =", " a", "+b", ";", " //", " \xc3\xa9t\xc3\xa9", "\n\n", "\xe2\x82\xac", "5"}},
    {"qwen35", "ab\xcc\x81""c 123 \xcc\x81x!\xcc\x81", 7, {"ab\xcc\x81""c", " ", "1", "2", "3", " \xcc\x81x", "!\xcc\x81"}},
    {"qwen35", "I'd  go\n\n", 5, {"I", "'d", " ", " go", "\n\n"}},
    {"tekken", "HelloWorld ABCdef 123", 7, {"Hello", "World", " ABCdef", " ", "1", "2", "3"}},
    {"tekken", "CamelCaseJSONParser's x/y\n\nz", 8, {"Camel", "Case", "JSONParser", "'s", " x", "/y", "\n\n", "z"}},
    {"tekken", "\xc3\x89""COLE \xc7\x85""ab \xca\xb0x", 3, {"\xc3\x89""COLE", " \xc7\x85""ab", " \xca\xb0x"}},
    {"gpt-4o", "I'M HERE doesn'T 12345", 6, {"I'M", " HERE", " doesn'T", " ", "123", "45"}},
    {"gpt-4o", "getHTTPResponse//\r\nok", 4, {"get", "HTTPResponse", "//\r\n", "ok"}},
    {"gpt-4o", "ab\xcc\x81""c \xe3\x80\x85\xe3\x80\x85 x", 3, {"ab\xcc\x81""c", " \xe3\x80\x85\xe3\x80\x85", " x"}},
};

static void
test_pretokenizer_rules(void)
{
    const char *last = "";
    struct vocab_file vf = {0};
    const char *m[] = {"a b"};
    for (size_t i = 0; i < sizeof(pt_cases) / sizeof(pt_cases[0]); i++) {
        const struct pt_case *c = &pt_cases[i];
        if (strcmp(c->pre, last) != 0) {
            if (vf.v)
                close_vocab(&vf);
            memset(&vf, 0, sizeof(vf));
            T_EQ_INT(synth_bpe(c->pre, NULL, 0, m, 1, -1, -1, &vf), 0);
            last = c->pre;
        }
        if (!vf.v)
            continue;
        size_t ends[32], len = strlen(c->text);
        int64_t n = le_vocab_pretokenize(vf.v, c->text, len, ends, 32);
        bool ok = n == c->n;
        size_t at = 0;
        for (int k = 0; ok && k < c->n; k++) {
            size_t wl = strlen(c->words[k]);
            ok = ends[k] == at + wl && memcmp(c->text + at, c->words[k], wl) == 0;
            at += wl;
        }
        T_CHECK(ok);
        if (!ok) {
            fprintf(stderr, "  %s \"%s\": got", c->pre, c->text);
            for (int64_t k = 0, s = 0; k < n && k < 32; s = (int64_t)ends[k], k++)
                fprintf(stderr, " [%.*s]", (int)(ends[k] - (size_t)s), c->text + s);
            fprintf(stderr, "\n");
        }
    }
    if (vf.v)
        close_vocab(&vf);
    /* an unknown pre-tokenizer name is an error, not a silent default */
    struct vocab_file bad;
    T_CHECK(synth_bpe("no-such-pre", NULL, 0, m, 1, -1, -1, &bad) != 0);
}

/* ids of a tokenization as a string "a b c" for compact checks */
static const char *
ids_str(const struct le_vocab *v, const char *s, bool add_special,
        bool parse_special)
{
    static char out[4096];
    size_t n = 0;
    int32_t *ids = tok(v, s, strlen(s), add_special, parse_special, &n);
    size_t at = 0;
    out[0] = 0;
    for (size_t i = 0; ids && i < n && at < sizeof(out) - 16; i++)
        at += (size_t)snprintf(out + at, sizeof(out) - at, "%s%d",
                               i ? " " : "", ids[i]);
    free(ids);
    return out;
}

static void
test_bpe_merges_and_flags(void)
{
    /* merges rank: "a b" before "b c" so "abc" -> "ab" + "c" */
    struct extra_tok ex[] = {{"<s>", 3, 1},   {"</s>", 3, 1}, {"ab", 1, 0},
                             {"bc", 1, 0},    {"abc", 1, 0},  {"  ", 4, 1},
                             {" hello", 1, 0}};
    const char *m[] = {"a b", "b c", "ab c"};
    struct vocab_file vf;
    if (synth_bpe("gpt-2", ex, 7, m, 2, -1, -1, &vf) != 0) {
        T_CHECK(0);
        return;
    }
    T_EQ_INT(le_vocab_bos(vf.v), 256);
    T_EQ_INT(le_vocab_eos(vf.v), 257);
    T_EQ_STR(ids_str(vf.v, "abc", false, false), "258 99");
    T_EQ_STR(ids_str(vf.v, "bcab", false, false), "259 258");
    /* gpt-2 adds no BOS by default */
    T_EQ_STR(ids_str(vf.v, "abc", true, false), "258 99");
    /* user-defined "  " is cut out even without parse_special */
    T_EQ_STR(ids_str(vf.v, "a  b", false, false), "97 261 98");
    /* control text is plain text unless parse_special */
    T_EQ_STR(ids_str(vf.v, "<s>a", true, true), "256 97");
    T_EQ_STR(ids_str(vf.v, "<s>a", false, false), "60 115 62 97");
    T_CHECK(le_vocab_is_eog(vf.v, 257));
    T_CHECK(!le_vocab_is_eog(vf.v, 256));
    char piece[16];
    T_EQ_INT(le_token_to_piece(vf.v, 256, false, piece, sizeof(piece)), 0);
    T_EQ_INT(le_token_to_piece(vf.v, 256, true, piece, sizeof(piece)), 3);
    T_CHECK(memcmp(piece, "<s>", 3) == 0);
    T_EQ_INT(le_token_to_piece(vf.v, 262, false, piece, sizeof(piece)), 6);
    T_CHECK(memcmp(piece, " hello", 6) == 0);
    T_EQ_INT(le_token_to_piece(vf.v, 261, false, piece, sizeof(piece)), 2);
    T_EQ_INT(le_token_to_piece(vf.v, -1, true, piece, sizeof(piece)), 0);
    T_EQ_INT(le_token_to_piece(vf.v, 1 << 30, true, piece, sizeof(piece)), 0);
    /* short buffer: the needed length comes back, nothing past cap */
    memset(piece, 'X', sizeof(piece));
    T_EQ_INT(le_token_to_piece(vf.v, 262, false, piece, 2), 6);
    T_CHECK(piece[2] == 'X');
    close_vocab(&vf);

    /* add_bos / add_eos from the metadata */
    if (synth_bpe("gpt-2", ex, 7, m, 3, 1, 1, &vf) == 0) {
        T_EQ_STR(ids_str(vf.v, "abc", true, false), "256 260 257");
        T_EQ_STR(ids_str(vf.v, "abc", false, false), "260");
        T_EQ_STR(ids_str(vf.v, "", true, false), "256 257");
        close_vocab(&vf);
    }
    /* GLM's: no BOS even when the file asks for one (its templates
     * write [gMASK]<sop>) */
    if (synth_bpe("glm4", ex, 7, m, 3, 1, -1, &vf) == 0) {
        T_EQ_INT(le_vocab_bos(vf.v), -1);
        T_EQ_STR(ids_str(vf.v, "abc", true, false), "260");
        close_vocab(&vf);
    }
    /* llama3 family: BOS by default, whole-word tokens skip the merges */
    if (synth_bpe("llama-bpe", ex, 7, m, 1, -1, -1, &vf) == 0) {
        T_EQ_STR(ids_str(vf.v, "abc", true, false), "256 260");
        T_EQ_STR(ids_str(vf.v, " hello", false, false), "262");
        close_vocab(&vf);
    }
}

static void
test_spm_special_and_bos(void)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-llama-spm.gguf",
             data_dir);
    struct vocab_file vf;
    if (open_vocab(path, &vf)) {
        T_CHECK(0);
        return;
    }
    T_EQ_INT(le_vocab_n_tokens(vf.v), 32000);
    T_EQ_INT(le_vocab_bos(vf.v), 1);
    T_EQ_INT(le_vocab_eos(vf.v), 2);
    T_CHECK(le_vocab_is_eog(vf.v, 2));
    T_CHECK(!le_vocab_is_eog(vf.v, 15043));
    T_EQ_STR(ids_str(vf.v, "Hello", false, false), "15043");
    T_EQ_STR(ids_str(vf.v, "Hello", true, false), "1 15043");
    T_EQ_STR(ids_str(vf.v, "", true, false), "1");
    T_EQ_STR(ids_str(vf.v, "", false, false), "");
    /* parse_special: <s> and </s> become tokens; text after a special
     * token gets the SentencePiece space prefix again */
    T_EQ_STR(ids_str(vf.v, "<s>Hello</s>", false, true), "1 15043 2");
    const char *plain = ids_str(vf.v, "<s>Hello</s>", false, false);
    T_CHECK(strlen(plain) > 0 && strncmp(plain, "1 ", 2) != 0 &&
            strstr(plain, " 2 ") == NULL);
    char piece[16];
    T_EQ_INT(le_token_to_piece(vf.v, 1, false, piece, sizeof(piece)), 0);
    T_EQ_INT(le_token_to_piece(vf.v, 1, true, piece, sizeof(piece)), 3);
    T_EQ_INT(le_token_to_piece(vf.v, 15043, false, piece, sizeof(piece)), 6);
    T_CHECK(memcmp(piece, " Hello", 6) == 0);
    /* byte token <0x0A> is the newline byte */
    T_EQ_INT(le_token_to_piece(vf.v, 13, false, piece, sizeof(piece)), 1);
    T_EQ_INT(piece[0], '\n');
    close_vocab(&vf);
}

static void
test_gpt2_special(void)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-gpt-2.gguf",
             data_dir);
    struct vocab_file vf;
    if (open_vocab(path, &vf)) {
        T_CHECK(0);
        return;
    }
    T_EQ_STR(ids_str(vf.v, "<|endoftext|>", false, true), "50256");
    T_CHECK(strcmp(ids_str(vf.v, "<|endoftext|>", false, false), "50256") != 0);
    T_EQ_STR(ids_str(vf.v, "a<|endoftext|>b", false, true), "64 50256 65");
    T_CHECK(le_vocab_is_eog(vf.v, 50256));
    T_EQ_STR(ids_str(vf.v, "Hello world", true, false),
             ids_str(vf.v, "Hello world", false, false));
    close_vocab(&vf);
}

/* Random bytes (mostly invalid UTF-8) never crash and give ids in range;
 * where the vocabulary can spell every byte (GPT-2's 256 byte images, SPM's
 * <0xNN> fallback) they come back byte for byte.  Falcon and StarCoder lack
 * some byte images and DeepSeek-Coder has user-defined tokens that shadow
 * some, so for them the text cannot always survive (the reference drops
 * those bytes too). */
static void
test_invalid_utf8_roundtrip(void)
{
    const char *names[] = {"llama-spm", "gpt-2", "falcon", "deepseek-coder",
                           "starcoder", "bert-bge"};
    uint64_t x = 88172645463325252ull;
    for (size_t vi = 0; vi < sizeof(names) / sizeof(names[0]); vi++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-%s.gguf",
                 data_dir, names[vi]);
        struct vocab_file vf;
        if (open_vocab(path, &vf)) {
            T_CHECK(0);
            continue;
        }
        bool is_spm = strcmp(names[vi], "llama-spm") == 0;
        bool exact = is_spm || strcmp(names[vi], "gpt-2") == 0;
        int bad = 0;
        for (int iter = 0; iter < 200; iter++) {
            char buf[64];
            size_t n = (size_t)(iter % 40) + 1;
            for (size_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                /* mix of ASCII, spaces, lead and continuation bytes */
                unsigned r = (unsigned)(x >> 24);
                buf[i] = (char)((r & 3) == 0 ? ' ' + (r >> 8) % 95
                                             : (r >> 8) & 0xFF);
            }
            size_t nt = 0;
            int32_t *ids = tok(vf.v, buf, n, true, true, &nt);
            if (!ids) {
                bad++;
                continue;
            }
            for (size_t i = 0; i < nt; i++)
                if (ids[i] < 0 || ids[i] >= le_vocab_n_tokens(vf.v))
                    bad++;
            if (exact) {
                size_t dl = 0;
                /* without special parsing, so pieces are plain text */
                free(ids);
                ids = tok(vf.v, buf, n, false, false, &nt);
                char *d = detok(vf.v, ids, nt, false, &dl);
                bool rt = (dl == n && memcmp(d, buf, n) == 0) ||
                          (is_spm && dl == n + 1 && d[0] == ' ' &&
                           memcmp(d + 1, buf, n) == 0);
                if (!rt) {
                    if (bad < 2) {
                        fprintf(stderr, "  %s round trip differs: in", names[vi]);
                        for (size_t i = 0; i < n; i++)
                            fprintf(stderr, " %02x", (unsigned char)buf[i]);
                        fprintf(stderr, "\n  out");
                        for (size_t i = 0; i < dl; i++)
                            fprintf(stderr, " %02x", (unsigned char)d[i]);
                        fprintf(stderr, "\n");
                    }
                    bad++;
                }
                free(d);
            }
            free(ids);
        }
        if (bad)
            fprintf(stderr, "%s: %d random-byte failures\n", names[vi], bad);
        T_EQ_INT(bad, 0);
        close_vocab(&vf);
    }
}

/* ~100 KB of mixed text: finishes, round-trips, and the count protocol
 * (cap too small returns the full count, writes nothing past cap) holds. */
static void
test_large_input(void)
{
    const char *names[] = {"llama-spm", "gpt-2", "deepseek-coder"};
    const char *unit = "The quick brown fox, 12345 \xe4\xb8\xad\xe6\x96\x87 "
                       "\xf0\x9f\x98\x80 jumps\tover\n\n   the lazy dog's "
                       "back!!! ";
    size_t ul = strlen(unit), total = 0;
    char *text = malloc(110000);
    while (total + ul < 100000) {
        memcpy(text + total, unit, ul);
        total += ul;
    }
    for (size_t vi = 0; vi < sizeof(names) / sizeof(names[0]); vi++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-%s.gguf",
                 data_dir, names[vi]);
        struct vocab_file vf;
        if (open_vocab(path, &vf)) {
            T_CHECK(0);
            continue;
        }
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        size_t n = 0;
        int32_t *ids = tok(vf.v, text, total, false, false, &n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        fprintf(stderr, "%s: %zu bytes -> %zu tokens in %.1f ms (x2 calls)\n",
                names[vi], total, n, ms);
        T_CHECK(ids != NULL && n > total / 8);
        if (ids) {
            size_t dl = 0;
            char *d = detok(vf.v, ids, n, false, &dl);
            bool rt = (dl == total && memcmp(d, text, total) == 0) ||
                      (dl == total + 1 && memcmp(d + 1, text, total) == 0);
            T_CHECK(rt);
            free(d);
            int32_t small[5] = {-7, -7, -7, -7, -7};
            T_EQ_INT(le_tokenize(vf.v, text, total, false, false, small, 4),
                     (int64_t)n);
            T_CHECK(memcmp(small, ids, 4 * sizeof(int32_t)) == 0);
            T_EQ_INT(small[4], -7);
        }
        free(ids);
        close_vocab(&vf);
    }
    free(text);
}

/* Inputs that would be quadratic for a naive matcher or merge loop: a
 * long whitespace run before a non-matching character (deepseek-llm's
 * \s+$ rule), one 100 KB word, a long run of newlines and spaces.  No
 * timing assertion: the test's own time bound is the check. */
static void
test_pathological_inputs(void)
{
    const char *m[] = {"a a", "aa aa"};
    size_t n = 200000;
    char *text = malloc(n + 8);
    struct vocab_file vf;
    size_t ends[4];
    if (synth_bpe("deepseek-llm", NULL, 0, m, 2, -1, -1, &vf) == 0) {
        memset(text, ' ', n);
        memcpy(text + n, "\xe4\xb8\xad", 3);
        T_EQ_INT(le_vocab_pretokenize(vf.v, text, n + 3, ends, 4), 2);
        T_EQ_INT(ends[0], n);
        close_vocab(&vf);
    }
    if (synth_bpe("llama3", NULL, 0, m, 2, -1, -1, &vf) == 0) {
        text[0] = '\n';
        memset(text + 1, ' ', n);
        text[n + 1] = 'x';
        T_EQ_INT(le_vocab_pretokenize(vf.v, text, n + 2, ends, 4), 3);
        T_EQ_INT(ends[0], 1);
        T_EQ_INT(ends[1], n);
        memset(text, 'a', 100000);
        size_t nt = 0;
        int32_t *ids = tok(vf.v, text, 100000, false, false, &nt);
        /* the merges build "aaaa" symbols, which are no tokens in this
         * vocab, so each falls back to its single bytes: 100000 ids */
        T_CHECK(ids != NULL && nt == 100000);
        free(ids);
        close_vocab(&vf);
    }
    free(text);
}

static void
model_prompt(const char *file, const char *want)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/models/%s", data_dir, file);
    struct vocab_file vf;
    if (open_vocab(path, &vf)) {
        T_CHECK(0);
        return;
    }
    T_EQ_STR(ids_str(vf.v, "Once upon a time", false, false), want);
    char with_bos[256];
    snprintf(with_bos, sizeof(with_bos), "1 %s", want);
    T_EQ_STR(ids_str(vf.v, "Once upon a time", true, false), with_bos);
    close_vocab(&vf);
}

/* The reference generations (llama.cpp, greedy) detokenize to the
 * reference text, piece by piece, and re-tokenize to the same prompt ids. */
static void
test_reference_detok(void)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/models/reference_greedy_outputs.json",
             data_dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    T_CHECK(root != NULL);
    if (!root)
        return;
    json_t *models = json_object_get(root, "models");
    const char *name;
    json_t *m;
    int seen = 0;
    json_object_foreach(models, name, m)
    {
        char mpath[1400];
        snprintf(mpath, sizeof(mpath), "%s/models/%s", data_dir, name);
        struct vocab_file vf;
        if (open_vocab(mpath, &vf)) {
            T_CHECK(0);
            continue;
        }
        json_t *ids = json_object_get(m, "generated_token_ids");
        const char *want = json_string_value(json_object_get(m, "generated_text"));
        size_t n = json_array_size(ids);
        int32_t *a = malloc((n + 1) * sizeof(*a));
        for (size_t i = 0; i < n; i++)
            a[i] = (int32_t)json_integer_value(json_array_get(ids, i));
        size_t dl = 0;
        char *d = detok(vf.v, a, n, false, &dl);
        T_CHECK(n == 64);
        T_CHECK(want != NULL && strlen(want) == dl && memcmp(d, want, dl) == 0);
        if (want && (strlen(want) != dl || memcmp(d, want, dl) != 0))
            fprintf(stderr, "  %s: detok \"%s\"\n  want \"%s\"\n", name, d, want);
        free(d);
        free(a);
        close_vocab(&vf);
        seen++;
    }
    T_EQ_INT(seen, 2);
    json_decref(root);
}

static void
test_model_prompts(void)
{
    model_prompt("stories260K.gguf", "403 407 261 378");
    model_prompt("llama-2-tiny-random.gguf", "9038 2501 263 931");
}

static void
test_bad_metadata(void)
{
    /* no tokenizer.ggml.model, unknown model, missing merges: clear
     * errors, no crash */
    struct gguf_w *w = gguf_w_new();
    gguf_w_add_str(w, "general.architecture", "llama");
    uint8_t *buf = NULL;
    size_t len = 0;
    struct le_gguf *g = NULL;
    struct le_vocab *v = NULL;
    char err[256] = "";
    T_EQ_INT(gguf_w_write_mem(w, &buf, &len, NULL), 0);
    T_EQ_INT(le_gguf_open_mem(buf, len, &g, err, sizeof(err)), LE_OK);
    T_CHECK(le_vocab_load(g, &v, err, sizeof(err)) != LE_OK);
    T_CHECK(strlen(err) > 0);
    le_gguf_free(g);
    free(buf);
    gguf_w_add_str(w, "tokenizer.ggml.model", "gpt2");
    const char *toks[] = {"a", "b"};
    gguf_w_add_str_arr(w, "tokenizer.ggml.tokens", toks, 2);
    T_EQ_INT(gguf_w_write_mem(w, &buf, &len, NULL), 0);
    T_EQ_INT(le_gguf_open_mem(buf, len, &g, err, sizeof(err)), LE_OK);
    err[0] = 0;
    T_CHECK(le_vocab_load(g, &v, err, sizeof(err)) != LE_OK);
    T_CHECK(strstr(err, "merges") != NULL);
    le_gguf_free(g);
    free(buf);
    gguf_w_free(w);
    /* arrays that disagree with the token list, and ids out of range */
    {
        const char *t3[] = {"<unk>", "<s>", "</s>"};
        float sc[2] = {0, 0};
        float sc3[3] = {0, 0, 0};
        int32_t ty3[3] = {2, 3, 3};
        for (int k = 0; k < 4; k++) {
            struct gguf_w *w2 = gguf_w_new();
            gguf_w_add_str(w2, "tokenizer.ggml.model", "llama");
            gguf_w_add_str_arr(w2, "tokenizer.ggml.tokens", t3, 3);
            if (k == 0) /* scores shorter than the tokens */
                gguf_w_add_arr(w2, "tokenizer.ggml.scores", LE_GGUF_FLOAT32,
                               sc, 2);
            if (k == 1) /* token_type of the wrong element type */
                gguf_w_add_arr(w2, "tokenizer.ggml.token_type",
                               LE_GGUF_FLOAT32, sc3, 3);
            if (k >= 2) {
                gguf_w_add_arr(w2, "tokenizer.ggml.scores", LE_GGUF_FLOAT32,
                               sc3, 3);
                gguf_w_add_arr(w2, "tokenizer.ggml.token_type",
                               LE_GGUF_INT32, ty3, 3);
                /* out of range: ignored, the default (2) stays */
                gguf_w_add_u32(w2, "tokenizer.ggml.eos_token_id",
                               k == 2 ? 4294967295u : 7u);
            }
            T_EQ_INT(gguf_w_write_mem(w2, &buf, &len, NULL), 0);
            T_EQ_INT(le_gguf_open_mem(buf, len, &g, err, sizeof(err)), LE_OK);
            v = NULL;
            enum le_status st = le_vocab_load(g, &v, err, sizeof(err));
            if (k < 2) {
                T_CHECK(st != LE_OK);
            } else {
                T_EQ_INT(st, LE_OK);
                T_EQ_INT(le_vocab_eos(v), 2);
                T_EQ_INT(le_vocab_bos(v), 1);
                /* no token, no byte tokens: <unk> per byte of "\xe2\x96\x81ab" */
                T_EQ_STR(ids_str(v, "ab", false, false), "0 0 0 0 0");
                le_vocab_free(v);
            }
            le_gguf_free(g);
            free(buf);
            gguf_w_free(w2);
        }
    }
    /* NULL and out-of-range arguments */
    T_EQ_INT(le_tokenize(NULL, "a", 1, false, false, NULL, 0), -1);
    T_EQ_INT(le_vocab_n_tokens(NULL), 0);
    T_EQ_INT(le_token_to_piece(NULL, 0, true, err, sizeof(err)), 0);
}

/* A vocab is read-only after loading: threads may tokenize with it at
 * once (the engine's workers do).  Each thread must get the ids a single
 * thread gets. */
struct thr_arg {
    const struct le_vocab *v;
    const char *text;
    const int32_t *want;
    size_t n_want;
    int mismatches;
};

static void *
thr_main(void *p)
{
    struct thr_arg *a = p;
    for (int i = 0; i < 20; i++) {
        size_t n = 0;
        int32_t *ids = tok(a->v, a->text, strlen(a->text), true, true, &n);
        if (!ids || n != a->n_want || memcmp(ids, a->want, n * 4) != 0)
            a->mismatches++;
        free(ids);
    }
    return NULL;
}

static void
test_threads(void)
{
    const char *names[] = {"llama-spm", "gpt-2"};
    const char *text = "<s>Hello, world! \xe4\xb8\xad\xe6\x96\x87 12345 "
                       "<|endoftext|> don't \xf0\x9f\x98\x80\n\n  x";
    for (size_t vi = 0; vi < 2; vi++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-%s.gguf",
                 data_dir, names[vi]);
        struct vocab_file vf;
        if (open_vocab(path, &vf)) {
            T_CHECK(0);
            continue;
        }
        size_t n = 0;
        int32_t *want = tok(vf.v, text, strlen(text), true, true, &n);
        struct thr_arg args[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            args[i] = (struct thr_arg){vf.v, text, want, n, 0};
            pthread_create(&th[i], NULL, thr_main, &args[i]);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            T_EQ_INT(args[i].mismatches, 0);
        }
        free(want);
        close_vocab(&vf);
    }
}

static void
test_unicode(void)
{
    T_EQ_INT(le_ucp_cat('a'), LE_UCAT_L);
    T_EQ_INT(le_ucp_cat(0x4E2D), LE_UCAT_L);   /* CJK, from a First/Last range */
    T_EQ_INT(le_ucp_cat(0xAC01), LE_UCAT_L);   /* Hangul syllable range */
    T_EQ_INT(le_ucp_cat(0x0661), LE_UCAT_N);   /* Arabic-Indic one */
    T_EQ_INT(le_ucp_cat(0x2167), LE_UCAT_N);   /* Roman numeral eight (Nl) */
    T_EQ_INT(le_ucp_cat(0x3001), LE_UCAT_P);
    T_EQ_INT(le_ucp_cat(0x20AC), LE_UCAT_S);   /* euro sign */
    T_EQ_INT(le_ucp_cat(0x0301), LE_UCAT_M);
    T_EQ_INT(le_ucp_cat(0x200D), LE_UCAT_C);   /* ZWJ (Cf) */
    T_EQ_INT(le_ucp_cat(0x0378), LE_UCAT_NONE); /* unassigned */
    T_EQ_INT(le_ucp_cat(0x110000), LE_UCAT_NONE);
    T_CHECK(le_ucp_flags(' ') & LE_UF_SPACE);
    T_CHECK(le_ucp_flags(0x3000) & LE_UF_SPACE);
    T_CHECK(le_ucp_flags(0x0085) & LE_UF_SPACE);
    T_CHECK(!(le_ucp_flags(0x200B) & LE_UF_SPACE)); /* ZWSP is not */
    T_CHECK(!(le_ucp_flags(0x1C) & LE_UF_SPACE));
    T_EQ_INT(le_ucp_flags('$'), LE_UF_SYMBOL);
    T_EQ_INT(le_ucp_flags('_'), LE_UF_PUNCT);
    T_EQ_INT(le_ucp_lower('Q'), 'q');
    T_EQ_INT(le_ucp_lower(0x0416), 0x0436); /* Ж -> ж */
    T_EQ_INT(le_ucp_lower(0x4E2D), 0x4E2D);
    uint32_t d[2];
    T_EQ_INT(le_ucp_decomp(0x00E9, d), 2); /* é = e + U+0301 */
    T_EQ_INT(d[0], 'e');
    T_EQ_INT(d[1], 0x0301);
    T_EQ_INT(le_ucp_decomp('e', d), 0);
    /* strict decoding: each bad byte is one unit */
    uint32_t cp;
    T_EQ_INT(le_utf8_decode((const uint8_t *)"\xe4\xb8\xad", 3, &cp), 3);
    T_EQ_INT(cp, 0x4E2D);
    T_EQ_INT(le_utf8_decode((const uint8_t *)"\xc0\x80", 2, &cp), 1);
    T_EQ_INT(cp, LE_UCP_INVALID); /* overlong NUL */
    T_EQ_INT(le_utf8_decode((const uint8_t *)"\xed\xa0\x80", 3, &cp), 1);
    T_EQ_INT(cp, LE_UCP_INVALID); /* surrogate */
    T_EQ_INT(le_utf8_decode((const uint8_t *)"\xf4\x90\x80\x80", 4, &cp), 1);
    T_EQ_INT(cp, LE_UCP_INVALID); /* > U+10FFFF */
    T_EQ_INT(le_utf8_decode((const uint8_t *)"\xe4\xb8", 2, &cp), 1);
    T_EQ_INT(cp, LE_UCP_INVALID); /* truncated */
    T_EQ_INT(le_utf8_decode((const uint8_t *)"\x80", 1, &cp), 1);
    T_EQ_INT(cp, LE_UCP_INVALID); /* stray continuation */
    char buf[4];
    T_EQ_INT(le_utf8_encode(0x1F600, buf), 4);
    T_EQ_INT(le_utf8_decode((const uint8_t *)buf, 4, &cp), 4);
    T_EQ_INT(cp, 0x1F600);
}

int
main(void)
{
    const char *d = getenv("LLMUX_TEST_DATA");
    snprintf(data_dir, sizeof(data_dir), "%s", d ? d : "../shared/data");
    T_RUN(test_unicode);
    T_RUN(test_llama_spm);
    T_RUN(test_phi3);
    T_RUN(test_gpt2);
    T_RUN(test_falcon);
    T_RUN(test_deepseek_coder);
    T_RUN(test_starcoder);
    T_RUN(test_bert_bge);
    T_RUN(test_pretokenizer_rules);
    T_RUN(test_bpe_merges_and_flags);
    T_RUN(test_spm_special_and_bos);
    T_RUN(test_gpt2_special);
    T_RUN(test_invalid_utf8_roundtrip);
    T_RUN(test_large_input);
    T_RUN(test_pathological_inputs);
    T_RUN(test_threads);
    T_RUN(test_model_prompts);
    T_RUN(test_reference_detok);
    T_RUN(test_bad_metadata);
    free(synth_buf);
    return T_END();
}
