/*
 * test_model: the llama forward pass, generation loop and CLI against
 * real GGUF files.
 *
 *   - greedy generation on stories260K.gguf and llama-2-tiny-random.gguf
 *     for "Once upon a time" (64 tokens) reproduces llama.cpp's token ids
 *     and text from $LLMUX_TEST_DATA/models/reference_greedy_outputs.json;
 *   - `llmux run ... --temp 0` prints that text on stdout;
 *   - a random llama written by the test GGUF writer as F32 and as Q8_0
 *     gives nearly the same logits (tolerance stated below), and a q8_0 KV
 *     cache nearly the same logits as the f16 one;
 *   - 1 and 2 threads, and two sessions decoding at once on two threads,
 *     give identical greedy output;
 *   - context overflow is LE_ECONTEXT, a callback can cancel, a repeated
 *     prompt reuses the KV cache, a wrong tensor shape is a clear error;
 *   - qwen2: NEOX rotation of de-interleaved q/k heads equals llama's
 *     adjacent-pair rotation (same logits), QKV biases are applied and
 *     required; llama3 rope factors (rope_freqs.weight) are applied;
 *   - qwen3 (per-head q/k norms, key_length wider than n_embd / n_head):
 *     logits of a prompt batch and of single steps against a reference
 *     forward written in the test; the norms are required;
 *   - gemma3 (embedding scale, post norms, GELU, a sliding window on 5 of
 *     6 layers with their own rope base): the same reference, with and
 *     without the window;
 *   - mistral3 (YaRN with its log multiplier, the attention temperature
 *     over a prompt three times the original context) and deepseek2 with
 *     that temperature: the same references, with and without it.
 */
#include <dirent.h>
#include <pthread.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../local_engine/le_int.h"
#include "harness.h"
#include "lib/e2e.h"
#include "lib/gguf_writer.h"

static char g_tmp[256];

static const char *
data_dir(void)
{
    const char *d = getenv("LLMUX_TEST_DATA");
    return d && *d ? d : "../shared/data";
}

static char *
slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    while (p) {
        if (n + 1 >= cap) {
            char *np = realloc(p, cap *= 2);
            if (!np) {
                free(p);
                p = NULL;
                break;
            }
            p = np;
        }
        size_t r = fread(p + n, 1, cap - n - 1, f);
        if (r == 0)
            break;
        n += r;
    }
    fclose(f);
    if (p) {
        p[n] = '\0';
        if (len)
            *len = n;
    }
    return p;
}

/* ------------------------------------------------------------------ */
/* A very small reader for the reference JSON (known shape).            */

static void
put_utf8(char **o, unsigned cp)
{
    unsigned char *u = (unsigned char *)*o;
    if (cp < 0x80) {
        *u++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *u++ = (unsigned char)(0xC0 | cp >> 6);
        *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *u++ = (unsigned char)(0xE0 | cp >> 12);
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *u++ = (unsigned char)(0xF0 | cp >> 18);
        *u++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    *o = (char *)u;
}

/* The JSON string value after "key": inside the object starting at from;
 * malloc'd, unescaped. */
static char *
json_str(const char *from, const char *key)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\"", key);
    const char *p = strstr(from, pat);
    if (!p)
        return NULL;
    p = strchr(p + strlen(pat), '"');
    if (!p)
        return NULL;
    p++;
    char *out = malloc(strlen(p) + 1), *o = out;
    if (!out)
        return NULL;
    while (*p && *p != '"') {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        p++;
        char c = *p++;
        switch (c) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'u': {
            unsigned cp = (unsigned)strtoul((char[5]){p[0], p[1], p[2], p[3], 0},
                                            NULL, 16);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo = (unsigned)strtoul(
                    (char[5]){p[2], p[3], p[4], p[5], 0}, NULL, 16);
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(&o, cp);
            break;
        }
        default: *o++ = c; break;
        }
    }
    *o = '\0';
    return out;
}

/* Integers of the array after "key": ; returns the count. */
static int
json_ints(const char *from, const char *key, int32_t *out, int cap)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\"", key);
    const char *p = strstr(from, pat);
    if (!p || !(p = strchr(p, '[')))
        return -1;
    p++;
    int n = 0;
    while (*p && *p != ']') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        if (n < cap)
            out[n] = (int32_t)v;
        n++;
        p = end;
    }
    return n;
}

struct ref {
    int32_t prompt[16];
    int n_prompt;
    int32_t gen[128];
    int n_gen;
    char *text;
};

static int
load_ref(const char *model, struct ref *r)
{
    char path[512];
    memset(r, 0, sizeof(*r)); /* also when the file is missing */
    snprintf(path, sizeof(path), "%s/models/reference_greedy_outputs.json",
             data_dir());
    char *js = slurp(path, NULL);
    if (!js)
        return -1;
    char key[128];
    snprintf(key, sizeof(key), "\"%s\"", model);
    const char *obj = strstr(js, key);
    int rc = -1;
    if (obj) {
        int bos = -1;
        const char *bp = strstr(obj, "\"bos_token_id\"");
        if (bp && sscanf(strchr(bp, ':') + 1, "%d", &bos) != 1)
            bos = -1;
        r->prompt[0] = bos;
        int np = json_ints(obj, "prompt_token_ids_without_bos", r->prompt + 1,
                           15);
        r->n_prompt = np + 1;
        r->n_gen = json_ints(obj, "generated_token_ids", r->gen, 128);
        r->text = json_str(obj, "generated_text");
        rc = np > 0 && r->n_gen > 0 && r->text ? 0 : -1;
    }
    free(js);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Generation helpers                                                   */

struct collect {
    int32_t ids[4096];
    int n;
    char text[65536];
    size_t len;
    int cancel_after; /* 0: never */
};

static int
collect_cb(void *ud, int32_t id, const char *text, size_t len)
{
    struct collect *c = ud;
    if (id >= 0 && c->n < 4096)
        c->ids[c->n++] = id;
    if (c->len + len < sizeof(c->text)) {
        memcpy(c->text + c->len, text, len);
        c->len += len;
        c->text[c->len] = '\0';
    }
    return c->cancel_after && c->n >= c->cancel_after;
}

static struct le_model *
open_model(const char *path, int threads, int n_ctx, enum le_kv_type kv)
{
    struct le_model_params p;
    le_model_params_default(&p);
    p.n_threads = threads;
    p.n_ctx = n_ctx;
    p.kv_type = kv;
    char err[512] = "";
    struct le_model *m = NULL;
    enum le_status st = le_model_open(path, &p, &m, err, sizeof(err));
    if (st != LE_OK)
        fprintf(stderr, "open %s: %s\n", path, err);
    return m;
}

static void
greedy(struct le_model *m, const int32_t *prompt, size_t n, int max_tokens,
       struct collect *c, struct le_gen_result *res)
{
    struct le_session *s = NULL;
    char err[256];
    memset(c, 0, sizeof(*c));
    T_EQ_INT(le_session_new(m, &s, err, sizeof(err)), LE_OK);
    if (!s)
        return;
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    T_EQ_INT(le_session_generate(s, prompt, n, &sp, collect_cb, c, res, err,
                                 sizeof(err)),
             LE_OK);
    le_session_free(s);
}

/*
 * valid: how many reference tokens are real.  llama.cpp's reference for
 * llama-2-tiny-random.gguf is only valid for its first 28 generated tokens;
 * the remaining 36 are token 38 ("#"), which is what llama.cpp's sampler
 * chain for --temp 0 (logit-bias, penalties, top-k 40 by std::partial_sort,
 * typical, top-p, min-p, xtc, temp-ext, dist) returns when every logit is
 * NaN: fed 32000 NaN logits, libllama's own chain picks id 38 (checked by
 * calling llama_sampler_apply on them).  Generated token 28 is sampled
 * from the logits of position 32, the first step with 33 KV cells, when
 * llama.cpp's padded KV view grows from 32 to 64 cells.
 *
 * That NaN run comes from the environment the reference was made in (its
 * CPU kernels or build; not reproducible here), not from the model, nor
 * from llama.cpp's graph, nor from ours (tests/REFERENCE_NOTES.md has the
 * commands and numbers): the same commit c392e5094dea built here
 * (x86-64, AVX2+FMA+F16C, and again with only SSE3) and run with the
 * README's exact llama-cli command prints finite logits at every step
 * (cb_eval over every graph node: no NaN anywhere), and its 64 greedy ids
 * continue after token 27 with tiny_random_tail below, which our engine
 * reproduces.  Its logits equal ours bit for bit over all 68 positions
 * with an f32 KV cache (max |diff| 0) and within 7.7e-5 with an f16 one;
 * -c 48/64/4096, -ub 1, -t 1/4/8, -fa, --no-warmup and -ctk f32 change
 * nothing.  So we hold our output to the file's first 28 ids, to the
 * reproduced llama.cpp ids and text after them, check that the file's
 * tail is the NaN signature, and that our logits stay finite throughout.
 */
static const int32_t tiny_random_tail[36] = {
    19982, 8317,  15492, 19741, 8021,  29710, 4660,  29509, 31364,
    28253, 12321, 12681, 14340, 1189,  30070, 29182, 9645,  20945,
    16138, 2451,  19209, 19982, 8317,  15492, 19741, 8021,  29710,
    4660,  29448, 3870,  13706, 3870,  13706, 3870,  13706, 3870};
/* llama-cli's stdout from that reproduction, minus the echoed prompt and
 * the two newlines it prints at the end. */
static const char tiny_random_text[] =
    "ernalrightarrow \xd0\xbf\xd0\xbe\xd0\xbf\xd1\x83"
    "development Gar(), successo status heutigen\xe0\xb9\x82 zesificate "
    "successo status heutigen\xe0\xb9\x82gele Harttekupsolog\xd0\x95"
    "fahrt\xd0\xbd\xd0\xb8\xd0\xba\xd0\xb8iza\xc3\xa7\xc3\xa3ounta"
    "Exception inwonersleb Ele Werk zesificate successo status "
    "heutigen\xe0\xb9\x82gele Harttekupsolog\xd0\x95"
    "fahrt\xd0\xbd\xd0\xb8\xd0\xba\xd0\xb8iza\xc3\xa7\xc3\xa3ounta"
    "Exception inwonersleb Ele Werk zesificate successo "
    "statusluaanel Walesanel Walesanel Walesanel";

static void
reference_case(const char *file, int valid, const int32_t *tail,
               const char *full_text)
{
    struct ref r;
    char path[512];
    snprintf(path, sizeof(path), "%s/models/%s", data_dir(), file);
    T_EQ_INT(load_ref(file, &r), 0);
    struct le_model *m = open_model(path, 1, 0, LE_KV_F16);
    T_CHECK(m != NULL);
    if (!m || !r.text) {
        free(r.text);
        le_model_free(m);
        return;
    }
    if (valid < 0)
        valid = r.n_gen;
    /* the tokenizer gives the reference prompt ids (BOS added) */
    int32_t ids[32];
    int64_t n = le_model_tokenize(m, "Once upon a time", 16, 1, 0, ids, 32);
    T_EQ_INT(n, r.n_prompt);
    int same_prompt = n == r.n_prompt;
    for (int i = 0; same_prompt && i < n; i++)
        same_prompt = ids[i] == r.prompt[i];
    T_CHECK(same_prompt);

    struct collect *c = malloc(sizeof(*c));
    struct le_gen_result res;
    greedy(m, r.prompt, (size_t)r.n_prompt, r.n_gen, c, &res);
    T_EQ_INT(c->n, r.n_gen);
    int first_diff = -1;
    for (int i = 0; i < r.n_gen && i < c->n; i++) {
        int32_t want = i < valid ? r.gen[i] : tail[i - valid];
        if (c->ids[i] != want) {
            first_diff = i;
            fprintf(stderr, "%s: first differing token at %d: %d vs %d\n",
                    file, i, c->ids[i], want);
            break;
        }
    }
    T_EQ_INT(first_diff, -1);
    T_EQ_INT(res.prompt_tokens, r.n_prompt);
    T_EQ_INT(res.completion_tokens, r.n_gen);
    T_EQ_INT(res.finish, LE_FINISH_LENGTH);
    if (valid == r.n_gen) {
        T_EQ_STR(c->text, r.text);
    } else {
        T_EQ_STR(c->text, full_text);
        /* the rest of the reference is the NaN signature, and its text is
         * the text of the valid part followed by one '#' per token */
        int sig = 1;
        for (int i = valid; i < r.n_gen; i++)
            sig &= r.gen[i] == 38;
        T_CHECK(sig);
        size_t tl = strlen(r.text), nt = (size_t)(r.n_gen - valid);
        T_CHECK(tl >= nt);
        int hashes = tl >= nt;
        for (size_t i = tl - (hashes ? nt : 0); hashes && i < tl; i++)
            hashes = r.text[i] == '#';
        T_CHECK(hashes);
        if (hashes) {
            r.text[tl - nt] = '\0';
            T_CHECK(strncmp(c->text, r.text, strlen(r.text)) == 0);
        }
        /* our own run over the whole length stays finite */
        struct le_session *s = NULL;
        char err[256];
        T_EQ_INT(le_session_new(m, &s, err, sizeof(err)), LE_OK);
        int finite = s != NULL;
        int32_t nv = le_model_n_vocab(m);
        if (s)
            finite = le_session_decode(s, r.prompt, (size_t)r.n_prompt, err,
                                       sizeof(err)) == LE_OK;
        for (int i = 0; finite && i < r.n_gen; i++) {
            const float *l = le_session_logits(s);
            for (int32_t v = 0; v < nv; v++)
                finite &= isfinite(l[v]) != 0;
            int32_t id = le_samp_argmax(l, nv);
            finite &= le_session_decode(s, &id, 1, err, sizeof(err)) == LE_OK;
        }
        T_CHECK(finite);
        le_session_free(s);
    }
    free(c);
    free(r.text);
    le_model_free(m);
}

static void
test_stories_reference(void)
{
    reference_case("stories260K.gguf", -1, NULL, NULL);
}

static void
test_tiny_random_reference(void)
{
    reference_case("llama-2-tiny-random.gguf", 28, tiny_random_tail,
                   tiny_random_text);
}

static void
test_stop_and_seed(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", data_dir());
    struct le_model *m = open_model(path, 1, 0, LE_KV_F16);
    T_CHECK(m != NULL);
    if (!m)
        return;
    int32_t ids[5] = {1, 403, 407, 261, 378};
    struct le_session *s = NULL;
    char err[256];
    T_EQ_INT(le_session_new(m, &s, err, sizeof(err)), LE_OK);
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = 64;
    /* greedy text is ", there was a little girl named Lily. ..." */
    const char *stops[2] = {"zzz", "girl named"};
    sp.stop = stops;
    sp.n_stop = 2;
    struct collect *c = calloc(1, sizeof(*c));
    struct le_gen_result res;
    T_EQ_INT(le_session_generate(s, ids, 5, &sp, collect_cb, c, &res, err,
                                 sizeof(err)),
             LE_OK);
    T_EQ_STR(c->text, ", there was a little ");
    T_EQ_INT(res.finish, LE_FINISH_STOP);
    T_CHECK(res.completion_tokens < 10);

    /* sampling: the same seed gives the same text, another seed another */
    sp.stop = NULL;
    sp.n_stop = 0;
    sp.temperature = 1.0f;
    sp.max_tokens = 40;
    sp.seed = 42;
    struct collect *c2 = calloc(1, sizeof(*c2)),
                   *c3 = calloc(1, sizeof(*c3));
    memset(c, 0, sizeof(*c));
    T_EQ_INT(le_session_generate(s, ids, 5, &sp, collect_cb, c, &res, err,
                                 sizeof(err)),
             LE_OK);
    T_EQ_INT(le_session_generate(s, ids, 5, &sp, collect_cb, c2, &res, err,
                                 sizeof(err)),
             LE_OK);
    sp.seed = 43;
    T_EQ_INT(le_session_generate(s, ids, 5, &sp, collect_cb, c3, &res, err,
                                 sizeof(err)),
             LE_OK);
    T_CHECK(c->n > 0 && c->n == c2->n &&
            memcmp(c->ids, c2->ids, (size_t)c->n * sizeof(int32_t)) == 0);
    T_EQ_STR(c->text, c2->text);
    T_CHECK(strcmp(c->text, c3->text) != 0);
    free(c);
    free(c2);
    free(c3);
    le_session_free(s);
    le_model_free(m);
}

static void
test_cli_run(void)
{
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "test_cli_run: %s not built\n", bin);
        T_CHECK(0);
        return;
    }
    struct ref r;
    T_EQ_INT(load_ref("stories260K.gguf", &r), 0);
    char cmd[1536];
    snprintf(cmd, sizeof(cmd),
             "'%s' run --model '%s/models/stories260K.gguf' -p 'Once upon a "
             "time' -n 64 --temp 0 2>/dev/null",
             bin, data_dir());
    FILE *f = popen(cmd, "r");
    T_CHECK(f != NULL);
    if (!f) {
        free(r.text);
        return;
    }
    char *out = calloc(1, 65536);
    size_t n = out ? fread(out, 1, 65535, f) : 0;
    int rc = pclose(f);
    T_EQ_INT(rc, 0);
    char *want = malloc(strlen(r.text ? r.text : "") + 2);
    if (out && want) {
        strcpy(want, r.text ? r.text : "");
        strcat(want, "\n");
        out[n] = '\0';
        T_EQ_STR(out, want);
    }
    free(want);
    free(out);
    free(r.text);

    /* usage errors exit 2, a bad file exits 1 */
    snprintf(cmd, sizeof(cmd), "'%s' run --bogus >/dev/null 2>&1", bin);
    T_EQ_INT(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof(cmd),
             "'%s' run --model /nonexistent.gguf >/dev/null 2>&1", bin);
    T_EQ_INT(WEXITSTATUS(system(cmd)), 1);
    snprintf(cmd, sizeof(cmd), "'%s' run --help >/dev/null 2>&1", bin);
    T_EQ_INT(WEXITSTATUS(system(cmd)), 0);
    snprintf(cmd, sizeof(cmd),
             "printf 'Once upon a time' | '%s' tokenize --model "
             "'%s/models/stories260K.gguf' 2>/dev/null",
             bin, data_dir());
    f = popen(cmd, "r");
    char line[256] = "";
    if (f) {
        if (!fgets(line, sizeof(line), f))
            line[0] = '\0';
        pclose(f);
    }
    T_EQ_STR(line, "1 403 407 261 378\n");
    snprintf(cmd, sizeof(cmd),
             "'%s' tokenize --no-bos --model '%s/models/stories260K.gguf' "
             "'Once upon a time' 2>/dev/null",
             bin, data_dir());
    f = popen(cmd, "r");
    line[0] = '\0';
    if (f) {
        if (!fgets(line, sizeof(line), f))
            line[0] = '\0';
        pclose(f);
    }
    T_EQ_STR(line, "403 407 261 378\n");
    /* --special parses "<s>" as BOS; a vocabulary-only file works */
    const char *cases[2][2] = {
        {"--no-bos --special --model '%s/models/stories260K.gguf' '<s>hi'",
         "1 270 417\n"},
        {"--model '%s/tokenizer/ggml-vocab-llama-spm.gguf' 'Hello world'",
         "1 15043 3186\n"},
    };
    for (int i = 0; i < 2; i++) {
        char args[512];
        snprintf(args, sizeof(args), cases[i][0], data_dir());
        snprintf(cmd, sizeof(cmd), "'%s' tokenize %s 2>/dev/null", bin,
                 args);
        f = popen(cmd, "r");
        line[0] = '\0';
        if (f) {
            if (!fgets(line, sizeof(line), f))
                line[0] = '\0';
            pclose(f);
        }
        T_EQ_STR(line, cases[i][1]);
    }
    snprintf(cmd, sizeof(cmd),
             "'%s' bench --model '%s/models/stories260K.gguf' -p 8 -n 4 "
             "--json 2>/dev/null",
             bin, data_dir());
    f = popen(cmd, "r");
    line[0] = '\0';
    if (f) {
        if (!fgets(line, sizeof(line), f))
            line[0] = '\0';
        T_EQ_INT(pclose(f), 0);
    }
    T_CHECK(strstr(line, "\"pp\":{\"n_tokens\":8") != NULL);
    T_CHECK(strstr(line, "\"tg\":{\"n_tokens\":4") != NULL);
}

/* ------------------------------------------------------------------ */
/* Random models from the GGUF writer                                   */

static const char *
write_model(const char *name, enum le_type type, int n_embd, int n_head,
            int n_head_kv, int tied)
{
    static char path[8][512];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, 512, "%s/%s", g_tmp, name);
    struct gguf_w_llama lp = {0};
    lp.n_vocab = 320;
    lp.n_embd = n_embd;
    lp.n_layer = 2;
    lp.n_head = n_head;
    lp.n_head_kv = n_head_kv;
    lp.n_ff = 2 * n_embd;
    lp.n_ctx = 256;
    lp.type = type;
    lp.seed = 7;
    lp.tied = tied;
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    return p;
}

static int
logits_after(struct le_model *m, const int32_t *ids, size_t n, float *out)
{
    struct le_session *s = NULL;
    char err[256];
    if (le_session_new(m, &s, err, sizeof(err)) != LE_OK)
        return -1;
    enum le_status st = le_session_decode(s, ids, n, err, sizeof(err));
    if (st == LE_OK)
        memcpy(out, le_session_logits(s),
               (size_t)le_model_n_vocab(m) * sizeof(float));
    le_session_free(s);
    return st == LE_OK ? 0 : -1;
}

/* max |a - b| relative to max |a| */
static double
rel_diff(const float *a, const float *b, int n)
{
    double md = 0, ma = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d > md ? d : md;
        ma = fabs(a[i]) > ma ? fabs(a[i]) : ma;
    }
    return ma > 0 ? md / ma : md;
}

static void
test_f32_vs_q8_0(void)
{
    const char *pf = write_model("f32.gguf", LE_TYPE_F32, 64, 4, 2, 0);
    const char *pq = write_model("q8.gguf", LE_TYPE_Q8_0, 64, 4, 2, 0);
    struct le_model *mf = open_model(pf, 1, 0, LE_KV_F16);
    struct le_model *mq = open_model(pq, 1, 0, LE_KV_F16);
    T_CHECK(mf && mq);
    if (mf && mq) {
        int32_t ids[6] = {1, 300, 17, 255, 4, 299};
        int nv = le_model_n_vocab(mf);
        float *a = malloc((size_t)nv * sizeof(float));
        float *b = malloc((size_t)nv * sizeof(float));
        T_EQ_INT(logits_after(mf, ids, 6, a), 0);
        T_EQ_INT(logits_after(mq, ids, 6, b), 0);
        /* Q8_0 keeps ~8 bits per weight and the activations are quantised
         * to Q8_0 too: the logits stay within 5% of the largest logit
         * (measured: 1.4%).  (Not the argmax: a random model's logits
         * are nearly flat, so near-ties may flip.) */
        double d = rel_diff(a, b, nv);
        fprintf(stderr, "f32 vs q8_0: max |diff| / max |logit| = %.5f\n", d);
        T_CHECK(d < 0.05);
        T_CHECK(d > 0); /* really a different computation */
        free(a);
        free(b);
    }
    le_model_free(mf);
    le_model_free(mq);
}

static void
test_kv_q8_0(void)
{
    /* head_dim 32 so the cache rows hold whole q8_0 blocks */
    const char *pf = write_model("kv.gguf", LE_TYPE_F32, 64, 2, 1, 1);
    struct le_model *a = open_model(pf, 1, 0, LE_KV_F16);
    struct le_model *b = open_model(pf, 1, 0, LE_KV_Q8_0);
    T_CHECK(a && b);
    if (a && b) {
        int32_t ids[8] = {1, 5, 77, 300, 12, 12, 250, 3};
        int nv = le_model_n_vocab(a);
        float *la = malloc((size_t)nv * sizeof(float));
        float *lb = malloc((size_t)nv * sizeof(float));
        T_EQ_INT(logits_after(a, ids, 8, la), 0);
        T_EQ_INT(logits_after(b, ids, 8, lb), 0);
        double d = rel_diff(la, lb, nv);
        fprintf(stderr, "kv f16 vs q8_0: %.5f\n", d);
        T_CHECK(d < 0.05);
        free(la);
        free(lb);
    }
    le_model_free(a);
    le_model_free(b);
    /* head_dim 16: a q8_0 cache is refused with a reason */
    const char *p16 = write_model("kv16.gguf", LE_TYPE_F32, 64, 4, 2, 0);
    struct le_model_params mp;
    le_model_params_default(&mp);
    mp.kv_type = LE_KV_Q8_0;
    struct le_model *m = NULL;
    char err[256] = "";
    T_EQ_INT(le_model_open(p16, &mp, &m, err, sizeof(err)), LE_EINVAL);
    T_CHECK(strstr(err, "multiple of 32") != NULL);
    le_model_free(m);
}

static void
test_kv_f32(void)
{
    /* An f32 KV cache (used to compare with llama.cpp -ctk f32 -ctv f32,
     * see tests/REFERENCE_NOTES.md) stores k and v unrounded: the logits
     * differ from the f16 cache's only by f16 rounding of the cache. */
    const char *pf = write_model("kv32.gguf", LE_TYPE_F32, 64, 4, 2, 0);
    struct le_model *a = open_model(pf, 1, 0, LE_KV_F16);
    struct le_model *b = open_model(pf, 1, 0, LE_KV_F32);
    T_CHECK(a && b);
    if (a && b) {
        int32_t ids[8] = {1, 5, 77, 300, 12, 12, 250, 3};
        int nv = le_model_n_vocab(a);
        float *la = malloc((size_t)nv * sizeof(float));
        float *lb = malloc((size_t)nv * sizeof(float));
        T_EQ_INT(logits_after(a, ids, 8, la), 0);
        T_EQ_INT(logits_after(b, ids, 8, lb), 0);
        double d = rel_diff(la, lb, nv);
        fprintf(stderr, "kv f16 vs f32: %.6f\n", d);
        T_CHECK(d < 0.01);
        T_CHECK(d > 0); /* really a different cache */
        free(la);
        free(lb);
    }
    le_model_free(a);
    le_model_free(b);
}

static void
batch_case(enum le_type type, const char *file)
{
    /* prefill in one batch, in batches of 3 (n_batch) and token by token
     * must give the same logits: the graph is the same per token (for
     * q4_0 the batch goes through vec_dot_multi, one weight row against
     * several tokens, which must equal the per-token dots) */
    const char *p = write_model(file, type, 64, 4, 2, 0);
    struct le_model_params mp;
    le_model_params_default(&mp);
    struct le_model *mb = NULL, *m3 = NULL;
    char err[256];
    T_EQ_INT(le_model_open(p, &mp, &mb, err, sizeof(err)), LE_OK);
    mp.n_batch = 3;
    T_EQ_INT(le_model_open(p, &mp, &m3, err, sizeof(err)), LE_OK);
    if (!mb || !m3) {
        le_model_free(mb);
        le_model_free(m3);
        return;
    }
    int32_t ids[10] = {1, 300, 301, 7, 8, 9, 260, 261, 262, 10};
    int nv = le_model_n_vocab(mb);
    float *a = malloc((size_t)nv * sizeof(float));
    float *b = malloc((size_t)nv * sizeof(float));
    float *c = malloc((size_t)nv * sizeof(float));
    T_EQ_INT(logits_after(mb, ids, 10, a), 0);
    T_EQ_INT(logits_after(m3, ids, 10, b), 0);
    struct le_session *s = NULL;
    T_EQ_INT(le_session_new(mb, &s, err, sizeof(err)), LE_OK);
    for (int i = 0; s && i < 10; i++)
        T_EQ_INT(le_session_decode(s, ids + i, 1, err, sizeof(err)), LE_OK);
    if (s)
        memcpy(c, le_session_logits(s), (size_t)nv * sizeof(float));
    T_EQ_INT(le_session_n_past(s), 10);
    T_CHECK(memcmp(a, b, (size_t)nv * sizeof(float)) == 0);
    T_CHECK(memcmp(a, c, (size_t)nv * sizeof(float)) == 0);
    le_session_free(s);
    free(a);
    free(b);
    free(c);
    le_model_free(mb);
    le_model_free(m3);
}

static void
test_batch_equals_sequential(void)
{
    batch_case(LE_TYPE_Q8_0, "batch.gguf");
    batch_case(LE_TYPE_Q4_0, "batch-q4_0.gguf");
}

static void
test_threads_identical(void)
{
    /* 128-wide so the products are big enough to be split */
    const char *p = write_model("thr.gguf", LE_TYPE_Q8_0, 128, 4, 2, 0);
    struct le_model *m1 = open_model(p, 1, 0, LE_KV_F16);
    struct le_model *m2 = open_model(p, 2, 0, LE_KV_F16);
    T_CHECK(m1 && m2);
    if (m1 && m2) {
        T_EQ_INT(le_model_n_threads(m2), 2);
        int32_t ids[5] = {1, 40, 41, 42, 43};
        struct collect *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
        struct le_gen_result ra, rb;
        greedy(m1, ids, 5, 32, a, &ra);
        greedy(m2, ids, 5, 32, b, &rb);
        T_EQ_INT(a->n, 32);
        T_EQ_INT(b->n, 32);
        T_CHECK(memcmp(a->ids, b->ids, sizeof(int32_t) * 32) == 0);
        free(a);
        free(b);
    }
    le_model_free(m1);
    le_model_free(m2);
}

struct par_arg {
    struct le_model *m;
    struct collect c;
    int ok;
};

static void *
par_main(void *v)
{
    struct par_arg *a = v;
    struct le_session *s = NULL;
    char err[256];
    memset(&a->c, 0, sizeof(a->c));
    if (le_session_new(a->m, &s, err, sizeof(err)) != LE_OK)
        return NULL;
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = 24;
    int32_t ids[4] = {1, 100, 200, 300};
    a->ok = le_session_generate(s, ids, 4, &sp, collect_cb, &a->c, NULL, err,
                                sizeof(err)) == LE_OK;
    le_session_free(s);
    return NULL;
}

static void
test_sessions_in_parallel(void)
{
    const char *p = write_model("par.gguf", LE_TYPE_F16, 128, 4, 2, 0);
    struct le_model *m = open_model(p, 2, 64, LE_KV_F16);
    T_CHECK(m != NULL);
    if (!m)
        return;
    struct par_arg *a = calloc(3, sizeof(*a));
    for (int i = 0; i < 3; i++)
        a[i].m = m;
    par_main(&a[2]); /* serial reference */
    pthread_t t0, t1;
    pthread_create(&t0, NULL, par_main, &a[0]);
    pthread_create(&t1, NULL, par_main, &a[1]);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    T_CHECK(a[0].ok && a[1].ok && a[2].ok);
    T_EQ_INT(a[0].c.n, 24);
    T_CHECK(memcmp(a[0].c.ids, a[2].c.ids, 24 * sizeof(int32_t)) == 0);
    T_CHECK(memcmp(a[1].c.ids, a[2].c.ids, 24 * sizeof(int32_t)) == 0);
    free(a);
    le_model_free(m);
}

static void
test_context_limit(void)
{
    const char *p = write_model("ctx.gguf", LE_TYPE_F32, 32, 4, 4, 1);
    struct le_model *m = open_model(p, 1, 16, LE_KV_F16);
    T_CHECK(m != NULL);
    if (!m)
        return;
    T_EQ_INT(le_model_n_ctx(m), 16);
    struct le_session *s = NULL;
    char err[256] = "";
    T_EQ_INT(le_session_new(m, &s, err, sizeof(err)), LE_OK);
    int32_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = 10 + i;
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = 8;
    struct le_gen_result res;
    /* 10 + 8 > 16: refused before any work, with the numbers */
    T_EQ_INT(le_session_generate(s, ids, 10, &sp, NULL, NULL, &res, err,
                                 sizeof(err)),
             LE_ECONTEXT);
    T_CHECK(strstr(err, "16") != NULL && strstr(err, "10") != NULL);
    T_EQ_INT(res.completion_tokens, 0);
    /* a prompt longer than the window */
    sp.max_tokens = 0;
    T_EQ_INT(le_session_generate(s, ids, 17, &sp, NULL, NULL, &res, err,
                                 sizeof(err)),
             LE_ECONTEXT);
    /* decode past the end */
    T_EQ_INT(le_session_decode(s, ids, 17, err, sizeof(err)), LE_ECONTEXT);
    T_EQ_INT(le_session_n_past(s), 0);
    /* 8 + 8 fits exactly */
    sp.max_tokens = 8;
    sp.ignore_eos = 1;
    T_EQ_INT(le_session_generate(s, ids, 8, &sp, NULL, NULL, &res, err,
                                 sizeof(err)),
             LE_OK);
    T_EQ_INT(res.completion_tokens, 8);
    T_EQ_INT(res.finish, LE_FINISH_LENGTH);
    /* max_tokens 0: runs until the window is full */
    sp.max_tokens = 0;
    le_session_reset(s);
    T_EQ_INT(le_session_generate(s, ids, 10, &sp, NULL, NULL, &res, err,
                                 sizeof(err)),
             LE_OK);
    T_EQ_INT(res.completion_tokens, 7); /* 10 + 6 decoded + 1 last sampled */
    T_EQ_INT(res.finish, LE_FINISH_LENGTH);
    le_session_free(s);
    le_model_free(m);
}

static void
test_cancel_and_cache(void)
{
    const char *p = write_model("cc.gguf", LE_TYPE_F32, 32, 4, 2, 0);
    struct le_model *m = open_model(p, 1, 128, LE_KV_F16);
    T_CHECK(m != NULL);
    if (!m)
        return;
    struct le_session *s = NULL;
    char err[256] = "";
    T_EQ_INT(le_session_new(m, &s, err, sizeof(err)), LE_OK);
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 0;
    sp.max_tokens = 20;
    sp.ignore_eos = 1;
    int32_t ids[6] = {1, 260, 261, 262, 263, 264};
    struct collect *c = calloc(1, sizeof(*c));
    c->cancel_after = 3;
    struct le_gen_result res;
    T_EQ_INT(le_session_generate(s, ids, 6, &sp, collect_cb, c, &res, err,
                                 sizeof(err)),
             LE_ECANCELED);
    T_EQ_INT(c->n, 3);
    T_EQ_INT(res.finish, LE_FINISH_CANCEL);

    /* the same prompt again reuses all but its last token */
    struct collect *c1 = calloc(1, sizeof(*c1)),
                   *c2 = calloc(1, sizeof(*c2));
    T_EQ_INT(le_session_generate(s, ids, 6, &sp, collect_cb, c1, &res, err,
                                 sizeof(err)),
             LE_OK);
    T_EQ_INT(res.cached_tokens, 5);
    T_EQ_INT(le_session_generate(s, ids, 6, &sp, collect_cb, c2, &res, err,
                                 sizeof(err)),
             LE_OK);
    T_EQ_INT(res.cached_tokens, 5);
    T_EQ_INT(c1->n, 20);
    T_CHECK(memcmp(c1->ids, c2->ids, 20 * sizeof(int32_t)) == 0);
    T_CHECK(memcmp(c1->ids, c->ids, 3 * sizeof(int32_t)) == 0);
    /* a fresh session agrees with the cached run */
    struct collect *c3 = calloc(1, sizeof(*c3));
    greedy(m, ids, 6, 20, c3, &res);
    T_EQ_INT(res.cached_tokens, 0);
    T_CHECK(memcmp(c1->ids, c3->ids, 20 * sizeof(int32_t)) == 0);

    /* A cancel flag set from outside stops the prefill between batches
     * (nothing generated) and, cleared, lets the session work again. */
    _Atomic int stop = 1;
    le_session_set_cancel(s, &stop);
    le_session_reset(s);
    struct collect *c4 = calloc(1, sizeof(*c4));
    T_EQ_INT(le_session_generate(s, ids, 6, &sp, collect_cb, c4, &res, err,
                                 sizeof(err)),
             LE_ECANCELED);
    T_EQ_INT(c4->n, 0);
    T_EQ_INT(le_session_decode(s, ids, 6, err, sizeof(err)), LE_ECANCELED);
    stop = 0;
    T_EQ_INT(le_session_decode(s, ids, 6, err, sizeof(err)), LE_OK);
    le_session_set_cancel(s, NULL);
    free(c4);
    free(c);
    free(c1);
    free(c2);
    free(c3);
    le_session_free(s);
    le_model_free(m);
}

static void
test_bad_shapes(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/bad.gguf", g_tmp);
    /* metadata says n_ff 96 while the FFN tensors are 64 wide */
    struct gguf_w *w = gguf_w_new();
    gguf_w_add_str(w, "general.architecture", "llama");
    gguf_w_add_u32(w, "llama.context_length", 64);
    gguf_w_add_u32(w, "llama.embedding_length", 32);
    gguf_w_add_u32(w, "llama.block_count", 1);
    gguf_w_add_u32(w, "llama.feed_forward_length", 96);
    gguf_w_add_u32(w, "llama.attention.head_count", 4);
    float *x = calloc(32 * 300, sizeof(float));
    int64_t ne_e[2] = {32, 300}, ne_n[1] = {32}, ne_q[2] = {32, 32},
            ne_f[2] = {32, 64}, ne_d[2] = {64, 32};
    gguf_w_add_tensor(w, "token_embd.weight", LE_TYPE_F32, 2, ne_e, x);
    gguf_w_add_tensor(w, "output_norm.weight", LE_TYPE_F32, 1, ne_n, x);
    gguf_w_add_tensor(w, "blk.0.attn_norm.weight", LE_TYPE_F32, 1, ne_n, x);
    gguf_w_add_tensor(w, "blk.0.attn_q.weight", LE_TYPE_F32, 2, ne_q, x);
    gguf_w_add_tensor(w, "blk.0.attn_k.weight", LE_TYPE_F32, 2, ne_q, x);
    gguf_w_add_tensor(w, "blk.0.attn_v.weight", LE_TYPE_F32, 2, ne_q, x);
    gguf_w_add_tensor(w, "blk.0.attn_output.weight", LE_TYPE_F32, 2, ne_q, x);
    gguf_w_add_tensor(w, "blk.0.ffn_norm.weight", LE_TYPE_F32, 1, ne_n, x);
    gguf_w_add_tensor(w, "blk.0.ffn_gate.weight", LE_TYPE_F32, 2, ne_f, x);
    gguf_w_add_tensor(w, "blk.0.ffn_up.weight", LE_TYPE_F32, 2, ne_f, x);
    gguf_w_add_tensor(w, "blk.0.ffn_down.weight", LE_TYPE_F32, 2, ne_d, x);
    T_EQ_INT(gguf_w_write_file(w, path), 0);
    gguf_w_free(w);
    free(x);
    struct le_model *m = NULL;
    char err[512] = "";
    T_EQ_INT(le_model_open(path, NULL, &m, err, sizeof(err)), LE_EFORMAT);
    T_CHECK(strstr(err, "blk.0.ffn_gate.weight") != NULL);
    T_CHECK(strstr(err, "96") != NULL);
    T_CHECK(m == NULL);
    le_model_free(m);

    /* metadata alone refused, before any tensor use: hyperparameters out
     * of range; experts without a used count; experts where the layout
     * has none (qwen2 with experts is qwen2moe); an expert architecture
     * without them; architectures we do not run */
    static const struct {
        const char *arch, *keys[5];
        uint32_t vals[5];
        const char *want;
    } bad_meta[] = {
        {"llama",
         {"context_length", "embedding_length", "block_count",
          "feed_forward_length", "attention.head_count"},
         {64, 32, 1, 64, 4000000},
         "out of range"},
        {"llama", {"expert_count", "embedding_length"}, {8, 32},
         "expert_used_count"},
        {"qwen2", {"expert_count", "expert_used_count"}, {8, 2},
         "qwen2 with experts"},
        {"qwen2moe", {NULL}, {0}, "qwen2moe.expert_count is missing"},
        {"granite",
         {"context_length", "embedding_length", "block_count",
          "feed_forward_length", "attention.head_count"},
         {64, 32, 1, 64, 4},
         "needs embedding_scale"},
        {"deepseek2", {NULL}, {0}, "deepseek2.expert_count is missing"},
        {"llama4", {NULL}, {0}, "'llama4' is not supported"},
        {"mamba", {NULL}, {0}, "mamba"},
    };
    for (size_t i = 0; i < sizeof(bad_meta) / sizeof(bad_meta[0]); i++) {
        w = gguf_w_new();
        gguf_w_add_str(w, "general.architecture", bad_meta[i].arch);
        for (int k = 0; k < 5 && bad_meta[i].keys[k]; k++) {
            char key[96];
            snprintf(key, sizeof(key), "%s.%s", bad_meta[i].arch,
                     bad_meta[i].keys[k]);
            gguf_w_add_u32(w, key, bad_meta[i].vals[k]);
        }
        T_EQ_INT(gguf_w_write_file(w, path), 0);
        gguf_w_free(w);
        T_EQ_INT(le_model_open(path, NULL, &m, err, sizeof(err)), LE_EFORMAT);
        T_CHECK(strstr(err, bad_meta[i].want) != NULL);
    }

    /* a file that does not exist: the reader's error */
    err[0] = '\0';
    T_CHECK(le_model_open("/nonexistent/x.gguf", NULL, &m, err,
                          sizeof(err)) != LE_OK);
    T_CHECK(err[0] != '\0');
}

static void
test_tied_output(void)
{
    const char *p = write_model("tied.gguf", LE_TYPE_F16, 32, 4, 2, 1);
    struct le_model *m = open_model(p, 1, 0, LE_KV_F16);
    T_CHECK(m != NULL);
    if (!m)
        return;
    int32_t ids[3] = {1, 270, 280};
    struct collect *c = malloc(sizeof(*c));
    struct le_gen_result res;
    greedy(m, ids, 3, 5, c, &res);
    T_EQ_INT(res.prompt_tokens, 3);
    T_CHECK(res.completion_tokens + (res.finish == LE_FINISH_STOP) >= 1);
    free(c);
    le_model_free(m);
}

/* ------------------------------------------------------------------ */
/* qwen2 (NEOX rope, QKV biases) against llama, and llama3 rope factors */

static uint64_t g_rs;

static float
frand(void)
{
    g_rs ^= g_rs << 13;
    g_rs ^= g_rs >> 7;
    g_rs ^= g_rs << 17;
    return (float)((g_rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

enum { QE = 32, QH = 2, QHD = 16, QF = 64, QV = 300, QL = 2 };

struct qw {
    float emb[QV * QE], out[QV * QE], onorm[QE];
    float anorm[QL][QE], fnorm[QL][QE];
    float wq[QL][QE * QE], wk[QL][QE * QE], wv[QL][QE * QE], wo[QL][QE * QE];
    float gate[QL][QE * QF], up[QL][QE * QF], down[QL][QF * QE];
    float bq[QL][QE], bk[QL][QE], bv[QL][QE];
};

static void
add_vocab(struct gguf_w *w)
{
    const char *toks[QV];
    char store[QV][16];
    float scores[QV];
    int32_t types[QV];
    for (int i = 0; i < QV; i++) {
        if (i == 0)
            snprintf(store[i], 16, "<unk>");
        else if (i == 1)
            snprintf(store[i], 16, "<s>");
        else if (i == 2)
            snprintf(store[i], 16, "</s>");
        else if (i < 259)
            snprintf(store[i], 16, "<0x%02X>", i - 3);
        else
            snprintf(store[i], 16, "\xe2\x96\x81w%d", i);
        toks[i] = store[i];
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    gguf_w_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_add_str_arr(w, "tokenizer.ggml.tokens", toks, QV);
    gguf_w_add_arr(w, "tokenizer.ggml.scores", LE_GGUF_FLOAT32, scores, QV);
    gguf_w_add_arr(w, "tokenizer.ggml.token_type", LE_GGUF_INT32, types, QV);
    gguf_w_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_w_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
}

/* Writes the weights as arch ("llama" or "qwen2"); neox_perm: store each
 * head's q/k rows de-interleaved (row 2j -> j, 2j+1 -> j + hd/2), which
 * makes NEOX rotation of the result equal to llama's rotation of the
 * original; biases: write the bias tensors (qwen2). */
static int
write_qw(const struct qw *q, const char *arch, int neox_perm, int biases,
         const char *path)
{
    struct gguf_w *w = gguf_w_new();
    char k[96];
    gguf_w_add_str(w, "general.architecture", arch);
#define U(key, v)                                                            \
    snprintf(k, sizeof(k), "%s." key, arch);                                 \
    gguf_w_add_u32(w, k, v)
    U("context_length", 128);
    U("embedding_length", QE);
    U("block_count", QL);
    U("feed_forward_length", QF);
    U("attention.head_count", QH);
    U("attention.head_count_kv", QH);
#undef U
    snprintf(k, sizeof(k), "%s.attention.layer_norm_rms_epsilon", arch);
    gguf_w_add_f32(w, k, 1e-6f);
    snprintf(k, sizeof(k), "%s.rope.freq_base", arch);
    gguf_w_add_f32(w, k, 10000.0f);
    add_vocab(w);
    int64_t ne_e[2] = {QE, QV}, ne_n[1] = {QE}, ne_q[2] = {QE, QE},
            ne_f[2] = {QE, QF}, ne_d[2] = {QF, QE};
    gguf_w_add_tensor(w, "token_embd.weight", LE_TYPE_F32, 2, ne_e, q->emb);
    gguf_w_add_tensor(w, "output.weight", LE_TYPE_F32, 2, ne_e, q->out);
    gguf_w_add_tensor(w, "output_norm.weight", LE_TYPE_F32, 1, ne_n,
                      q->onorm);
    static float pq[QE * QE], pk[QE * QE], pbq[QE], pbk[QE];
    for (int l = 0; l < QL; l++) {
        for (int r = 0; r < QE; r++) {
            int h = r / QHD, j = r % QHD;
            int src = h * QHD + (neox_perm ? (j < QHD / 2 ? 2 * j
                                                          : 2 * (j - QHD / 2) + 1)
                                           : j);
            memcpy(pq + r * QE, q->wq[l] + src * QE, QE * sizeof(float));
            memcpy(pk + r * QE, q->wk[l] + src * QE, QE * sizeof(float));
            pbq[r] = q->bq[l][src];
            pbk[r] = q->bk[l][src];
        }
#define T(name, ty, nd, ne, x)                                               \
    snprintf(k, sizeof(k), "blk.%d." name, l);                               \
    gguf_w_add_tensor(w, k, ty, nd, ne, x)
        T("attn_norm.weight", LE_TYPE_F32, 1, ne_n, q->anorm[l]);
        T("attn_q.weight", LE_TYPE_F32, 2, ne_q, pq);
        T("attn_k.weight", LE_TYPE_F32, 2, ne_q, pk);
        T("attn_v.weight", LE_TYPE_F32, 2, ne_q, q->wv[l]);
        if (biases) {
            T("attn_q.bias", LE_TYPE_F32, 1, ne_n, pbq);
            T("attn_k.bias", LE_TYPE_F32, 1, ne_n, pbk);
            T("attn_v.bias", LE_TYPE_F32, 1, ne_n, q->bv[l]);
        }
        T("attn_output.weight", LE_TYPE_F32, 2, ne_q, q->wo[l]);
        T("ffn_norm.weight", LE_TYPE_F32, 1, ne_n, q->fnorm[l]);
        T("ffn_gate.weight", LE_TYPE_F32, 2, ne_f, q->gate[l]);
        T("ffn_up.weight", LE_TYPE_F32, 2, ne_f, q->up[l]);
        T("ffn_down.weight", LE_TYPE_F32, 2, ne_d, q->down[l]);
#undef T
    }
    int rc = gguf_w_write_file(w, path);
    gguf_w_free(w);
    return rc;
}

static void
fill(float *x, size_t n, float scale, float base)
{
    for (size_t i = 0; i < n; i++)
        x[i] = base + scale * frand();
}

static int
qw_logits(const char *path, const int32_t *ids, size_t n, float *out,
          char *err, size_t errlen)
{
    struct le_model *m = NULL;
    if (le_model_open(path, NULL, &m, err, errlen) != LE_OK)
        return -1;
    int rc = logits_after(m, ids, n, out);
    le_model_free(m);
    return rc;
}

static void
test_qwen2(void)
{
    struct qw *q = calloc(1, sizeof(*q));
    g_rs = 0x9e3779b97f4a7c15ULL;
    fill(q->emb, QV * QE, 1.0f, 0);
    fill(q->out, QV * QE, 0.2f, 0);
    fill(q->onorm, QE, 0.1f, 1);
    for (int l = 0; l < QL; l++) {
        fill(q->anorm[l], QE, 0.1f, 1);
        fill(q->fnorm[l], QE, 0.1f, 1);
        fill(q->wq[l], QE * QE, 0.5f, 0);
        fill(q->wk[l], QE * QE, 0.5f, 0);
        fill(q->wv[l], QE * QE, 0.2f, 0);
        fill(q->wo[l], QE * QE, 0.2f, 0);
        fill(q->gate[l], QE * QF, 0.2f, 0);
        fill(q->up[l], QE * QF, 0.2f, 0);
        fill(q->down[l], QF * QE, 0.15f, 0);
    }
    char pl[600], pq2[600], pb[600], pnb[600], err[512] = "";
    snprintf(pl, sizeof(pl), "%s/qw_llama.gguf", g_tmp);
    snprintf(pq2, sizeof(pq2), "%s/qw_qwen2.gguf", g_tmp);
    snprintf(pb, sizeof(pb), "%s/qw_bias.gguf", g_tmp);
    snprintf(pnb, sizeof(pnb), "%s/qw_nobias.gguf", g_tmp);
    T_EQ_INT(write_qw(q, "llama", 0, 0, pl), 0);
    T_EQ_INT(write_qw(q, "qwen2", 1, 1, pq2), 0); /* zero biases */
    T_EQ_INT(write_qw(q, "qwen2", 1, 0, pnb), 0);
    char pu[600];
    snprintf(pu, sizeof(pu), "%s/qw_unperm.gguf", g_tmp);
    T_EQ_INT(write_qw(q, "qwen2", 0, 1, pu), 0); /* zero biases, as llama */
    for (int l = 0; l < QL; l++) {
        fill(q->bq[l], QE, 0.5f, 0);
        fill(q->bk[l], QE, 0.5f, 0);
        fill(q->bv[l], QE, 0.5f, 0);
    }
    T_EQ_INT(write_qw(q, "qwen2", 1, 1, pb), 0);
    int32_t ids[7] = {1, 260, 270, 280, 290, 299, 265};
    float *a = malloc(QV * sizeof(float)), *b = malloc(QV * sizeof(float)),
          *c = malloc(QV * sizeof(float));
    T_EQ_INT(qw_logits(pl, ids, 7, a, err, sizeof(err)), 0);
    T_EQ_INT(qw_logits(pq2, ids, 7, b, err, sizeof(err)), 0);
    T_EQ_INT(qw_logits(pb, ids, 7, c, err, sizeof(err)), 0);
    /* NEOX rotation of de-interleaved heads == llama's adjacent pairs: the
     * same numbers summed in another order (float rounding only) */
    double d = rel_diff(a, b, QV);
    fprintf(stderr, "llama vs qwen2 (permuted q/k): %.2g\n", d);
    T_CHECK(d < 1e-4);
    /* without the permutation the rotation style shows */
    T_EQ_INT(qw_logits(pu, ids, 7, c, err, sizeof(err)), 0);
    double du = rel_diff(a, c, QV);
    fprintf(stderr, "llama vs qwen2 (same q/k): %.2g\n", du);
    T_CHECK(du > 1e-3);
    T_EQ_INT(qw_logits(pb, ids, 7, c, err, sizeof(err)), 0);
    /* the biases are applied */
    double db = rel_diff(b, c, QV);
    T_CHECK(db > 1e-2);
    /* and required */
    struct le_model *m = NULL;
    T_EQ_INT(le_model_open(pnb, NULL, &m, err, sizeof(err)), LE_EFORMAT);
    T_CHECK(strstr(err, "attn_q.bias") != NULL);
    free(a);
    free(b);
    free(c);
    free(q);
}

/* ------------------------------------------------------------------ */
/* qwen3 (per-head q/k RMSNorm before the NEOX rotation, q wider than
 * the embedding) against a plain reference forward written here from the
 * published architecture, one token at a time, in double precision with
 * the engine's (and llama.cpp's) fp16 rounding of the query and the KV
 * cache. */

static const float *
tf(const struct le_gguf *g, const char *fmt, int l)
{
    char n[96];
    snprintf(n, sizeof(n), fmt, l);
    const struct le_gguf_tensor *t = le_gguf_tensor(g, n);
    return t && t->type == LE_TYPE_F32 ? (const float *)t->data : NULL;
}

/* y[r] = sum_c w[r * in + c] x[c], r < out (GGUF [in, out] layout) */
static void
ref_mv(double *y, const float *w, const double *x, int in, int out)
{
    for (int r = 0; r < out; r++) {
        double s = 0;
        for (int c = 0; c < in; c++)
            s += (double)w[(size_t)r * in + c] * x[c];
        y[r] = s;
    }
}

static void
ref_norm(double *v, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += v[i] * v[i];
    double sc = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        v[i] = v[i] * sc * w[i];
}

/* The YaRN paper's ramp (beta_fast 32, beta_slow 1): the angle th of
 * rotation pair i of nd rotated values at base, factor over an original
 * context of orig */
static double
ref_yarn(double th, int i, int nd, double base, double factor, int orig)
{
    double cd = 2 * log(base), oc = orig,
           lo = floor(nd * log(oc / (32 * 2 * M_PI)) / cd),
           hi = ceil(nd * log(oc / (2 * M_PI)) / cd);
    lo = lo > 0 ? lo : 0;
    hi = hi < nd - 1 ? hi : nd - 1;
    double y = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
    double mix = 1 - (y < 0 ? 0 : y > 1 ? 1 : y);
    return th / factor * (1 - mix) + th * mix;
}

/* the k largest of p[0, n) into sel, largest first (the lower index
 * first among equal ones) */
static void
ref_topk(const double *p, int n, int k, int *sel)
{
    for (int i = 0; i < k; i++) {
        sel[i] = -1;
        for (int e = 0; e < n; e++) {
            int taken = 0;
            for (int j = 0; j < i; j++)
                taken |= sel[j] == e;
            if (!taken && (sel[i] < 0 || p[e] > p[sel[i]]))
                sel[i] = e;
        }
    }
}

enum { R3E = 32, R3H = 4, R3KV = 2, R3HD = 16, R3F = 48, R3V = 300,
       R3L = 2, R3T = 6, RL_MAX = 6, RT_MAX = 8 };
/* the references' capacity in tokens (RT_MAX: most tests' prompt; the
 * attention temperature's test needs several steps of its floor) */
enum { RT_CAP = 48 };

/* What the reference computes: qwen3 (2 layers), or gemma3 (gemma set:
 * 6 layers, the embeddings scaled by sqrt(n_embd), post norms, GELU,
 * layers l % 6 < 5 attending to their last n_swa positions with rope base
 * 10000, the others 1e6); qk_norm 0 leaves the head norms out, n_swa 0
 * the window (to show that they matter). */
struct ref_arch {
    int gemma, n_layer, qk_norm, n_swa;
    int f32; /* 1: no fp16 rounding (the engine with an F32 KV cache) */
    /* gemma2 (gemma set too): the even layers on the window, one rope
     * base (10000), these soft caps of the attention logits and the
     * output (0: none) */
    int gemma2;
    double attn_cap, final_cap;
    /* llama's adjacent-pair rotation instead of NEOX halves */
    int llama;
    /* > 0: the FFN is a mixture of n_expert experts (ffn_*_exps, R3F
     * wide), n_used of them a token by the router's softmax, their
     * weights renormalised to sum 1 */
    int n_expert, n_used;
    /* qwen2moe: q/k/v biases, the chosen weights not renormalised, and a
     * shared expert (R3F wide) weighted by sigmoid(gate . x) */
    int qwen2moe;
    /* > 0: YaRN with this factor over an original context of yarn_orig
     * (beta_fast 32, beta_slow 1, attn_factor 1) */
    double yarn_factor;
    int yarn_orig;
    /* phi3: q, k, v the row ranges of attn_qkv, gate and up the halves
     * of ffn_up, every layer on the window (n_swa); longrope 1 / 2: the
     * file's short / long rope factors divide the angles and cos, sin are
     * times rope_ms */
    int phi3, longrope;
    double rope_ms;
    /* granite (llama's rotation): embeddings x 12, q.k x 0.0625, each
     * branch x 0.22 into the residual, logits / 8 */
    int granite;
    /* gpt-oss: q/k/v and output biases, the window (n_swa) on the even
     * layers, the pre-FFN norm named post_attention_norm, the router's
     * bias, the experts of the n_used largest logits weighted by the
     * softmax of those, biased experts with the clamped SwiGLU; sinks 1:
     * each head's sink logit in its softmax (0: left out, to show it
     * matters) */
    int oss, sinks;
    /* mistral3 (llama set): YaRN's boost m(factor, 1) divided by
     * m(factor, yarn_log_mul) (0: not divided; m(s, k) = 1 + 0.1 k ln s),
     * and with temp_beta each query after its rotation times 1 +
     * temp_beta ln(floor(t / temp_floor) + 1) */
    double yarn_log_mul, temp_beta;
    int temp_floor;
};

/* YaRN's magnitude, transformers' get_mscale */
static double
ref_mscale(double s, double k)
{
    return s <= 1 ? 1.0 : 1 + 0.1 * k * log(s);
}

enum { RX_MAX = 16 };

/* x += the mixture-of-experts FFN of the normed xb at layer l */
static void
ref_moe(const struct le_gguf *g, int l, const struct ref_arch *ra,
        const double *xb, double *x)
{
    double rl[RX_MAX], p[RX_MAX], hg[R3F], hu[R3F], o[R3E], mx = -1e300,
                                                              sum = 0;
    int NX = ra->n_expert, sel[RX_MAX];
    ref_mv(rl, tf(g, "blk.%d.ffn_gate_inp.weight", l), xb, R3E, NX);
    const float *rb = tf(g, "blk.%d.ffn_gate_inp.bias", l);
    for (int e = 0; e < NX && ra->oss; e++)
        rl[e] += rb[e];
    for (int e = 0; e < NX; e++)
        mx = rl[e] > mx ? rl[e] : mx;
    for (int e = 0; e < NX; e++)
        sum += p[e] = exp(rl[e] - mx);
    double wsum = 0;
    ref_topk(p, NX, ra->n_used, sel);
    for (int i = 0; i < ra->n_used; i++)
        wsum += p[sel[i]] / sum;
    const float *wg = tf(g, "blk.%d.ffn_gate_exps.weight", l),
                *wu = tf(g, "blk.%d.ffn_up_exps.weight", l),
                *wd = tf(g, "blk.%d.ffn_down_exps.weight", l),
                *bg = tf(g, "blk.%d.ffn_gate_exps.bias", l),
                *bu = tf(g, "blk.%d.ffn_up_exps.bias", l),
                *bd = tf(g, "blk.%d.ffn_down_exps.bias", l);
    for (int i = 0; i < ra->n_used; i++) {
        size_t off = (size_t)sel[i] * R3F * R3E;
        ref_mv(hg, wg + off, xb, R3E, R3F);
        ref_mv(hu, wu + off, xb, R3E, R3F);
        for (int k = 0; k < R3F && ra->oss; k++) { /* gpt-oss */
            double a = hg[k] + bg[sel[i] * R3F + k],
                   b = hu[k] + bu[sel[i] * R3F + k];
            a = a < 7 ? a : 7;
            b = b < -7 ? -7 : b > 7 ? 7 : b;
            hg[k] = a / (1.0 + exp(-1.702 * a)) * (b + 1);
        }
        for (int k = 0; k < R3F && !ra->oss; k++)
            hg[k] = hg[k] / (1.0 + exp(-hg[k])) * hu[k];
        ref_mv(o, wd + off, hg, R3F, R3E);
        for (int k = 0; k < R3E && ra->oss; k++)
            o[k] += bd[sel[i] * R3E + k];
        double w = p[sel[i]] / sum / (ra->qwen2moe ? 1.0 : wsum);
        for (int k = 0; k < R3E; k++)
            x[k] += w * o[k] * (ra->granite ? 0.22 : 1.0);
    }
    if (!ra->qwen2moe)
        return;
    const float *gi = tf(g, "blk.%d.ffn_gate_inp_shexp.weight", l);
    double d = 0;
    for (int k = 0; k < R3E; k++)
        d += gi[k] * xb[k];
    ref_mv(hg, tf(g, "blk.%d.ffn_gate_shexp.weight", l), xb, R3E, R3F);
    ref_mv(hu, tf(g, "blk.%d.ffn_up_shexp.weight", l), xb, R3E, R3F);
    for (int k = 0; k < R3F; k++)
        hg[k] = hg[k] / (1.0 + exp(-hg[k])) * hu[k];
    ref_mv(o, tf(g, "blk.%d.ffn_down_shexp.weight", l), hg, R3F, R3E);
    for (int k = 0; k < R3E; k++)
        x[k] += o[k] / (1.0 + exp(-d));
}

static int
ref_forward(const char *path, const int32_t *ids, int n,
            const struct ref_arch *ra, float *out)
{
    struct le_gguf *g = NULL;
    char err[256];
    if (le_gguf_open(path, LE_GGUF_READ, &g, err, sizeof(err)) != LE_OK)
        return -1;
    enum { QD = R3H * R3HD, KD = R3KV * R3HD };
    static double kc[RL_MAX][RT_CAP][KD], vc[RL_MAX][RT_CAP][KD];
    double x[R3E], xb[R3E], q[QD], k[KD], v[KD], att[QD], o[R3E];
    double hg[R3F], hu[R3F];
    const float *emb = tf(g, "token_embd.weight", 0);
    int rc = emb && n <= RT_CAP && ra->n_layer <= RL_MAX &&
                     ra->n_expert <= RX_MAX
                 ? 0
                 : -1;
    for (int t = 0; rc == 0 && t < n; t++) {
        for (int i = 0; i < R3E; i++)
            x[i] = emb[(size_t)ids[t] * R3E + i] *
                   (ra->gemma ? sqrt((double)R3E) : ra->granite ? 12.0 : 1.0);
        for (int l = 0; l < ra->n_layer; l++) {
            int swa = (ra->gemma || ra->phi3 || ra->oss) && ra->n_swa &&
                      (ra->phi3 ||
                       (ra->gemma2 || ra->oss ? l % 2 == 0 : l % 6 < 5));
            double base = ra->gemma && !ra->gemma2 && !swa ? 1e6 : 10000.0;
            int p0 = swa && t >= ra->n_swa ? t - ra->n_swa + 1 : 0;
            memcpy(xb, x, sizeof(x));
            ref_norm(xb, tf(g, "blk.%d.attn_norm.weight", l), R3E, 1e-5);
            const float *wqkv = tf(g, "blk.%d.attn_qkv.weight", l);
            ref_mv(q, ra->phi3 ? wqkv : tf(g, "blk.%d.attn_q.weight", l), xb,
                   R3E, QD);
            ref_mv(k,
                   ra->phi3 ? wqkv + QD * R3E
                            : tf(g, "blk.%d.attn_k.weight", l),
                   xb, R3E, KD);
            ref_mv(v,
                   ra->phi3 ? wqkv + (QD + KD) * R3E
                            : tf(g, "blk.%d.attn_v.weight", l),
                   xb, R3E, KD);
            if (ra->qwen2moe || ra->oss) { /* qwen2's biases */
                const float *bq = tf(g, "blk.%d.attn_q.bias", l),
                            *bk = tf(g, "blk.%d.attn_k.bias", l),
                            *bv = tf(g, "blk.%d.attn_v.bias", l);
                for (int i = 0; i < QD; i++)
                    q[i] += bq[i];
                for (int i = 0; i < KD; i++) {
                    k[i] += bk[i];
                    v[i] += bv[i];
                }
            }
            for (int h = 0; h < R3H + R3KV; h++) {
                double *hv = h < R3H ? q + h * R3HD : k + (h - R3H) * R3HD;
                if (ra->qk_norm)
                    ref_norm(hv, tf(g, h < R3H ? "blk.%d.attn_q_norm.weight"
                                               : "blk.%d.attn_k_norm.weight",
                                    l),
                             R3HD, 1e-5);
                for (int i = 0; i < R3HD / 2; i++) { /* NEOX halves */
                    double th = t * pow(base, -2.0 * i / R3HD), ms = 1;
                    if (ra->longrope) {
                        th /= tf(g, ra->longrope == 2
                                        ? "rope_factors_long.weight"
                                        : "rope_factors_short.weight",
                                 0)[i];
                        ms = ra->rope_ms;
                    }
                    if (ra->yarn_factor > 0) {
                        th = ref_yarn(th, i, R3HD, base, ra->yarn_factor,
                                      ra->yarn_orig);
                        ms = ref_mscale(ra->yarn_factor, 1) /
                             (ra->yarn_log_mul != 0
                                  ? ref_mscale(ra->yarn_factor,
                                               ra->yarn_log_mul)
                                  : 1.0);
                    }
                    int i0 = ra->llama ? 2 * i : i,
                        i1 = ra->llama ? 2 * i + 1 : i + R3HD / 2;
                    double a = hv[i0], b = hv[i1];
                    hv[i0] = (a * cos(th) - b * sin(th)) * ms;
                    hv[i1] = (a * sin(th) + b * cos(th)) * ms;
                }
            }
            for (int i = 0; i < QD && ra->temp_beta != 0; i++)
                q[i] *= 1 + ra->temp_beta *
                                log(floor((double)t / ra->temp_floor) + 1);
            for (int i = 0; i < QD && !ra->f32; i++) /* fp16 query */
                q[i] = le_fp16_to_fp32(le_fp32_to_fp16((float)q[i]));
            for (int i = 0; i < KD; i++) { /* the f16 KV cache */
                kc[l][t][i] = ra->f32 ? k[i]
                                      : le_fp16_to_fp32(
                                            le_fp32_to_fp16((float)k[i]));
                vc[l][t][i] = ra->f32 ? v[i]
                                      : le_fp16_to_fp32(
                                            le_fp32_to_fp16((float)v[i]));
            }
            for (int h = 0; h < R3H; h++) {
                int kh = h / (R3H / R3KV);
                double sc[RT_CAP], mx = -1e300, sum = 0;
                for (int p = p0; p <= t; p++) {
                    double d = 0;
                    for (int i = 0; i < R3HD; i++)
                        d += q[h * R3HD + i] * kc[l][p][kh * R3HD + i];
                    sc[p] = ra->granite ? d * 0.0625 : d / sqrt((double)R3HD);
                    if (ra->attn_cap > 0)
                        sc[p] = ra->attn_cap * tanh(sc[p] / ra->attn_cap);
                    mx = sc[p] > mx ? sc[p] : mx;
                }
                /* gpt-oss: the head's sink logit, with no value */
                double sk = ra->oss && ra->sinks
                                ? tf(g, "blk.%d.attn_sinks.weight", l)[h]
                                : -1e300;
                mx = sk > mx ? sk : mx;
                sum = exp(sk - mx);
                for (int p = p0; p <= t; p++)
                    sum += sc[p] = exp(sc[p] - mx);
                for (int i = 0; i < R3HD; i++) {
                    double a = 0;
                    for (int p = p0; p <= t; p++)
                        a += sc[p] / sum * vc[l][p][kh * R3HD + i];
                    att[h * R3HD + i] = a;
                }
            }
            ref_mv(o, tf(g, "blk.%d.attn_output.weight", l), att, QD, R3E);
            for (int i = 0; i < R3E && ra->oss; i++)
                o[i] += tf(g, "blk.%d.attn_output.bias", l)[i];
            if (ra->gemma)
                ref_norm(o, tf(g, "blk.%d.post_attention_norm.weight", l),
                         R3E, 1e-5);
            for (int i = 0; i < R3E; i++)
                x[i] += o[i] * (ra->granite ? 0.22 : 1.0);
            memcpy(xb, x, sizeof(x));
            ref_norm(xb,
                     tf(g, ra->oss ? "blk.%d.post_attention_norm.weight"
                                   : "blk.%d.ffn_norm.weight",
                        l),
                     R3E, 1e-5);
            if (ra->n_expert > 0) {
                ref_moe(g, l, ra, xb, x);
                continue;
            }
            const float *wup = tf(g, "blk.%d.ffn_up.weight", l);
            ref_mv(hg, ra->phi3 ? wup : tf(g, "blk.%d.ffn_gate.weight", l),
                   xb, R3E, R3F);
            ref_mv(hu, ra->phi3 ? wup + R3F * R3E : wup, xb, R3E, R3F);
            for (int i = 0; i < R3F; i++) {
                double a = hg[i];
                hg[i] = ra->gemma ? 0.5 * a *
                                        (1 + tanh(sqrt(2 / M_PI) *
                                                  (a + 0.044715 * a * a * a)))
                                  : a / (1.0 + exp(-a));
                hg[i] *= hu[i];
            }
            ref_mv(o, tf(g, "blk.%d.ffn_down.weight", l), hg, R3F, R3E);
            if (ra->gemma)
                ref_norm(o, tf(g, "blk.%d.post_ffw_norm.weight", l), R3E,
                         1e-5);
            for (int i = 0; i < R3E; i++)
                x[i] += o[i] * (ra->granite ? 0.22 : 1.0);
        }
    }
    if (rc == 0) {
        static double lg[R3V];
        ref_norm(x, tf(g, "output_norm.weight", 0), R3E, 1e-5);
        ref_mv(lg, tf(g, "output.weight", 0), x, R3E, R3V);
        for (int i = 0; i < R3V; i++)
            out[i] = (float)(ra->final_cap > 0
                                 ? ra->final_cap * tanh(lg[i] / ra->final_cap)
                             : ra->granite ? lg[i] / 8
                                           : lg[i]);
    }
    le_gguf_free(g);
    return rc;
}

/* The reference models' shape: R3E wide, R3H heads (R3KV kv) of R3HD,
 * R3F feed-forward, R3V tokens, F32 weights. */
static void
ref_params(struct gguf_w_llama *lp, const char *arch, int n_layer,
           uint64_t seed)
{
    memset(lp, 0, sizeof(*lp));
    lp->n_vocab = R3V;
    lp->n_embd = R3E;
    lp->n_layer = n_layer;
    lp->n_head = R3H;
    lp->n_head_kv = R3KV;
    lp->head_dim = R3HD;
    lp->n_ff = R3F;
    lp->type = LE_TYPE_F32;
    lp->seed = seed;
    lp->arch = arch;
}

/* The logits of ids[0, n) of the file at path as one prompt batch and as
 * n single steps; its description names arch. */
static void
batch_and_steps(const char *path, const char *arch, const int32_t *ids,
                int n, float *batch, float *step)
{
    char err[256] = "";
    struct le_model *m = NULL;
    T_EQ_INT(le_model_open(path, NULL, &m, err, sizeof(err)), LE_OK);
    if (!m)
        return;
    T_CHECK(strstr(le_model_desc(m), arch) != NULL);
    T_EQ_INT(logits_after(m, ids, (size_t)n, batch), 0);
    struct le_session *s = NULL;
    T_EQ_INT(le_session_new(m, &s, err, sizeof(err)), LE_OK);
    for (int t = 0; s && t < n; t++)
        T_EQ_INT(le_session_decode(s, ids + t, 1, err, sizeof(err)), LE_OK);
    if (s)
        memcpy(step, le_session_logits(s),
               (size_t)le_model_n_vocab(m) * sizeof(float));
    le_session_free(s);
    le_model_free(m);
}

static void
test_qwen3(void)
{
    char p[600], pn[600], err[256] = "";
    snprintf(p, sizeof(p), "%s/qwen3.gguf", g_tmp);
    struct gguf_w_llama lp;
    ref_params(&lp, "qwen3", R3L, 11); /* q: 64 wide on a 32-wide embedding */
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    int32_t ids[R3T] = {1, 270, 281, 265, 299, 290};
    float ref[R3V], bare[R3V], got[R3V], step[R3V];
    struct ref_arch qa = {.n_layer = R3L, .qk_norm = 1},
                    qb = {.n_layer = R3L};
    T_EQ_INT(ref_forward(p, ids, R3T, &qa, ref), 0);
    T_EQ_INT(ref_forward(p, ids, R3T, &qb, bare), 0);
    /* the whole prompt as one batch, and one token at a time */
    batch_and_steps(p, "qwen3", ids, R3T, got, step);
    struct le_model *m = NULL;
    double d = rel_diff(ref, got, R3V), ds = rel_diff(ref, step, R3V),
           db = rel_diff(ref, bare, R3V);
    fprintf(stderr, "qwen3 vs reference: batch %.2g, steps %.2g; without "
                    "the head norms %.2g\n",
            d, ds, db);
    T_CHECK(d < 1e-5); /* 2.2e-06 measured: float against double sums */
    T_CHECK(ds < 1e-5);
    T_CHECK(db > 1e-2); /* the norms change the answer, so they are tested */
    /* the head norms are required: the same file with their names
     * changed (same length, so nothing else moves) is refused by name */
    snprintf(pn, sizeof(pn), "%s/qwen3_nonorm.gguf", g_tmp);
    FILE *f = fopen(p, "rb");
    T_CHECK(f != NULL);
    static char buf[1 << 20];
    size_t len = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f)
        fclose(f);
    T_CHECK(len > 0 && len < sizeof(buf));
    int renamed = 0;
    for (char *c = buf; (c = memmem(c, len - (size_t)(c - buf), "attn_q_norm",
                                    11)) != NULL;
         c += 11, renamed++)
        memcpy(c, "attn_q_nrom", 11);
    T_EQ_INT(renamed, R3L);
    f = fopen(pn, "wb");
    T_CHECK(f && fwrite(buf, 1, len, f) == len);
    if (f)
        fclose(f);
    m = NULL;
    T_EQ_INT(le_model_open(pn, NULL, &m, err, sizeof(err)), LE_EFORMAT);
    T_CHECK(strstr(err, "blk.0.attn_q_norm.weight is missing") != NULL);
}

/* gemma3 against the reference: 6 layers (the sixth global), a window of
 * 3 positions under 8 tokens, so the window, the two rope bases, the post
 * norms, GELU and the embedding scale all count */
static void
test_gemma3(void)
{
    char p[600], pn[600], err[256] = "";
    snprintf(p, sizeof(p), "%s/gemma3.gguf", g_tmp);
    snprintf(pn, sizeof(pn), "%s/gemma3_nowin.gguf", g_tmp);
    struct gguf_w_llama lp;
    ref_params(&lp, "gemma3", RL_MAX, 12);
    lp.n_swa = 3;
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    lp.n_swa = 0;
    T_EQ_INT(gguf_w_llama_write(&lp, pn), 0);
    int32_t ids[RT_MAX] = {1, 270, 281, 265, 299, 290, 277, 263};
    float ref[R3V], nowin[R3V], got[R3V], step[R3V], got_nw[R3V];
    struct ref_arch ga = {.gemma = 1, .n_layer = RL_MAX, .qk_norm = 1, .n_swa = 3},
                    gn = {.gemma = 1, .n_layer = RL_MAX, .qk_norm = 1},
                    g32 = {.gemma = 1, .n_layer = RL_MAX, .qk_norm = 1, .n_swa = 3, .f32 = 1};
    float r32[R3V], got32[R3V];
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &g32, r32), 0);
    {
        struct le_model *m32 = open_model(p, 1, 0, LE_KV_F32);
        T_CHECK(m32 != NULL);
        if (m32)
            T_EQ_INT(logits_after(m32, ids, RT_MAX, got32), 0);
        le_model_free(m32);
        double d32 = rel_diff(r32, got32, R3V);
        fprintf(stderr, "gemma3 f32 KV vs reference: %.2g\n", d32);
        T_CHECK(d32 < 1e-5); /* 2.1e-07 measured */
    }
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &ga, ref), 0);
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &gn, nowin), 0);
    batch_and_steps(p, "gemma3", ids, RT_MAX, got, step);
    struct le_model *m = NULL;
    T_EQ_INT(le_model_open(pn, NULL, &m, err, sizeof(err)), LE_OK);
    T_EQ_INT(logits_after(m, ids, RT_MAX, got_nw), 0);
    le_model_free(m);
    double d = rel_diff(ref, got, R3V), ds = rel_diff(ref, step, R3V),
           dn = rel_diff(nowin, got_nw, R3V), dw = rel_diff(ref, nowin, R3V);
    fprintf(stderr, "gemma3 vs reference: batch %.2g, steps %.2g, without "
                    "the window %.2g; the window changes %.2g\n",
            d, ds, dn, dw);
    /* with the fp16 cache a value the reference has in double can round
     * to the other fp16 neighbour than the engine's float (4e-05
     * measured with the window, 1.5e-07 without); the f32 cache above
     * holds the window to 1e-5 */
    T_CHECK(d < 1e-3);
    T_CHECK(ds < 1e-3);
    T_CHECK(dn < 1e-3);
    T_CHECK(dw > 0.05); /* the window matters (0.52), so it is tested */
}

/* gemma2 against the reference: the even layers on a 3-position window,
 * one rope base, attention logits and output soft-capped (caps small
 * enough to bite on a random model: 1 and 2), no q/k norms; with an f32
 * cache */
static void
test_gemma2(void)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/gemma2.gguf", g_tmp);
    struct gguf_w_llama lp;
    ref_params(&lp, "gemma2", 4, 13);
    lp.n_swa = 3;
    lp.attn_softcap = 1.0f;
    lp.final_softcap = 2.0f;
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    int32_t ids[RT_MAX] = {1, 270, 281, 265, 299, 290, 277, 263};
    struct ref_arch ra = {.gemma = 1, .n_layer = 4, .n_swa = 3, .f32 = 1, .gemma2 = 1, .attn_cap = 1.0, .final_cap = 2.0},
                    nocap = {.gemma = 1, .n_layer = 4, .n_swa = 3, .f32 = 1, .gemma2 = 1};
    float ref[R3V], ref_nc[R3V], got[R3V];
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &ra, ref), 0);
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &nocap, ref_nc), 0);
    struct le_model *m = open_model(p, 1, 0, LE_KV_F32);
    T_CHECK(m != NULL);
    if (m) {
        T_CHECK(strstr(le_model_desc(m), "gemma2") != NULL);
        T_EQ_INT(logits_after(m, ids, RT_MAX, got), 0);
    }
    le_model_free(m);
    /* the f16 cache's fused kernels cap the same way */
    struct ref_arch r16 = ra;
    r16.f32 = 0;
    float ref16[R3V], got16[R3V];
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &r16, ref16), 0);
    m = open_model(p, 1, 0, LE_KV_F16);
    T_CHECK(m != NULL);
    if (m)
        T_EQ_INT(logits_after(m, ids, RT_MAX, got16), 0);
    le_model_free(m);
    double d = rel_diff(ref, got, R3V), dc = rel_diff(ref, ref_nc, R3V),
           d16 = rel_diff(ref16, got16, R3V);
    fprintf(stderr, "gemma2 vs reference: f32 KV %.2g, f16 KV %.2g; the "
                    "caps change %.2g\n",
            d, d16, dc);
    T_CHECK(d < 1e-5);
    T_CHECK(d16 < 1e-3); /* fp16 rounding flips, as gemma3's */
    T_CHECK(dc > 0.05); /* the caps bite, so they are tested */
}

/* YaRN rope scaling (qwen3, factor 4 over an original 4096 positions:
 * the ramp spans rotation pairs 2-6 of 8) against the reference's
 * double-precision angles and the magnitude factor 1 + 0.1 ln 4; without
 * the scaling the logits move, so it is tested. */
static void
test_yarn(void)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/yarn.gguf", g_tmp);
    struct gguf_w_llama lp;
    ref_params(&lp, "qwen3", R3L, 17);
    lp.yarn_factor = 4;
    lp.yarn_orig = 4096;
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    int32_t ids[RT_MAX] = {1, 270, 281, 265, 299, 290, 277, 263};
    struct ref_arch ra = {.n_layer = R3L, .qk_norm = 1, .f32 = 1,
                          .yarn_factor = 4, .yarn_orig = 4096},
                    plain = {.n_layer = R3L, .qk_norm = 1, .f32 = 1};
    float ref[R3V], ref0[R3V], got[R3V];
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &ra, ref), 0);
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &plain, ref0), 0);
    struct le_model *m = open_model(p, 1, 0, LE_KV_F32);
    T_CHECK(m != NULL);
    if (m)
        T_EQ_INT(logits_after(m, ids, RT_MAX, got), 0);
    le_model_free(m);
    double d = rel_diff(ref, got, R3V), d0 = rel_diff(ref, ref0, R3V);
    fprintf(stderr, "yarn vs reference: %.2g; without the scaling %.2g\n",
            d, d0);
    T_CHECK(d < 1e-5);
    T_CHECK(d0 > 1e-2);
}

/* mistral3 (Ministral 3): llama's layout and rotation, YaRN x2 over an
 * original 16 positions with Ministral's log multiplier 1 (which cancels
 * the magnitude boost), and the attention temperature (beta 0.5, one step
 * every 16 positions) over a 48-token prompt, so that three steps are
 * used; dense and with Mixtral's experts.  Each against the reference on
 * an F32 cache and, on the F16 one, as one batch and as single steps.
 * Without the temperature and without the multiplier the logits move, so
 * both are tested; the original context's positions are left exactly as
 * they were (the factor there is 1, and no pass multiplies by it). */
enum { M3T = 48, M3O = 16 };

/* The file lp describes with one key more (the u32 u when u32, else the
 * f32 f), written to path: refused (LE_EFORMAT) by an error naming
 * want. */
static void
refused_with(const struct gguf_w_llama *lp, const char *path,
             const char *key, int u32, uint32_t u, float f, const char *want)
{
    struct gguf_w *w = gguf_w_new();
    T_EQ_INT(gguf_w_llama_fill(w, lp), 0);
    if (u32)
        gguf_w_add_u32(w, key, u);
    else
        gguf_w_add_f32(w, key, f);
    T_EQ_INT(gguf_w_write_file(w, path), 0);
    gguf_w_free(w);
    struct le_model *m = NULL;
    char err[256] = "";
    T_EQ_INT(le_model_open(path, NULL, &m, err, sizeof(err)), LE_EFORMAT);
    if (!strstr(err, want))
        fprintf(stderr, "  %s: '%s' does not name %s\n", key, err, want);
    T_CHECK(strstr(err, want) != NULL);
    le_model_free(m);
}

static void
m3_params(struct gguf_w_llama *lp, int n_expert, float beta, float log_mul,
          uint64_t seed)
{
    ref_params(lp, "mistral3", 2, seed);
    lp->n_ctx = 64;
    lp->yarn_factor = 2;
    lp->yarn_orig = M3O;
    lp->yarn_log_mul = log_mul;
    lp->attn_temp = beta;
    lp->n_expert = n_expert;
    lp->n_expert_used = n_expert ? 2 : 0;
}

/* the logits after ids[0, n) of the file at path (one thread, a context
 * of n_ctx, cache kv) into out; 0 or -1 */
static int
file_logits(const char *path, int n_ctx, enum le_kv_type kv,
            const int32_t *ids, int n, float *out)
{
    struct le_model *m = open_model(path, 1, n_ctx, kv);
    int rc = m ? logits_after(m, ids, (size_t)n, out) : -1;
    le_model_free(m);
    return rc;
}

static void
test_mistral3(void)
{
    int32_t ids[M3T];
    for (int i = 0; i < M3T; i++)
        ids[i] = i ? 259 + (i * 17) % (R3V - 259) : 1;
    for (int moe = 0; moe < 2; moe++) {
        char p[600], p0[600], pl[600];
        snprintf(p, sizeof(p), "%s/mistral3_%d.gguf", g_tmp, moe);
        snprintf(p0, sizeof(p0), "%s/mistral3_%d_notemp.gguf", g_tmp, moe);
        snprintf(pl, sizeof(pl), "%s/mistral3_%d_nolm.gguf", g_tmp, moe);
        struct gguf_w_llama lp;
        uint64_t seed = 31 + (uint64_t)moe;
        m3_params(&lp, moe ? 4 : 0, 0.0f, 1.0f, seed);
        T_EQ_INT(gguf_w_llama_write(&lp, p0), 0);
        m3_params(&lp, moe ? 4 : 0, 0.5f, 0.0f, seed);
        T_EQ_INT(gguf_w_llama_write(&lp, pl), 0);
        m3_params(&lp, moe ? 4 : 0, 0.5f, 1.0f, seed);
        T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
        struct ref_arch ra = {.n_layer = 2, .f32 = 1, .llama = 1,
                              .n_expert = lp.n_expert,
                              .n_used = lp.n_expert_used, .yarn_factor = 2,
                              .yarn_orig = M3O, .yarn_log_mul = 1,
                              .temp_beta = 0.5, .temp_floor = M3O};
        struct ref_arch r0 = ra, rl = ra, r16 = ra;
        r0.temp_beta = 0;
        rl.yarn_log_mul = 0;
        r16.f32 = 0;
        float ref[R3V], ref0[R3V], refl[R3V], ref16[R3V], got[R3V],
            got0[R3V], gotl[R3V];
        T_EQ_INT(ref_forward(p, ids, M3T, &ra, ref), 0);
        T_EQ_INT(ref_forward(p, ids, M3T, &r0, ref0), 0);
        T_EQ_INT(ref_forward(p, ids, M3T, &rl, refl), 0);
        T_EQ_INT(ref_forward(p, ids, M3T, &r16, ref16), 0);
        T_EQ_INT(file_logits(p, 0, LE_KV_F32, ids, M3T, got), 0);
        T_EQ_INT(file_logits(p0, 0, LE_KV_F32, ids, M3T, got0), 0);
        T_EQ_INT(file_logits(pl, 0, LE_KV_F32, ids, M3T, gotl), 0);
        double d = rel_diff(ref, got, R3V), d0 = rel_diff(ref0, got0, R3V),
               dl = rel_diff(refl, gotl, R3V);
        fprintf(stderr, "mistral3%s vs reference: %.2g, without the "
                        "temperature %.2g, without the log multiplier "
                        "%.2g; the temperature changes %.2g (the engine's "
                        "%.2g), the multiplier %.2g\n",
                moe ? " (experts)" : "", d, d0, dl, rel_diff(ref, ref0, R3V),
                rel_diff(got, got0, R3V), rel_diff(ref, refl, R3V));
        T_CHECK(d < 1e-5);
        T_CHECK(d0 < 1e-5);
        T_CHECK(dl < 1e-5);
        T_CHECK(rel_diff(ref, ref0, R3V) > 1e-2);
        T_CHECK(rel_diff(got, got0, R3V) > 1e-2);
        T_CHECK(rel_diff(ref, refl, R3V) > 1e-2);
        /* within the first step: the same bits with and without */
        T_EQ_INT(file_logits(p, 0, LE_KV_F32, ids, M3O, got), 0);
        T_EQ_INT(file_logits(p0, 0, LE_KV_F32, ids, M3O, got0), 0);
        T_CHECK(memcmp(got, got0, sizeof(got)) == 0);
        /* the F16 cache: batch and steps the same bits, near the
         * reference with its fp16 rounding */
        float batch[R3V], step[R3V];
        batch_and_steps(p, "mistral3", ids, M3T, batch, step);
        T_CHECK(memcmp(batch, step, sizeof(batch)) == 0);
        fprintf(stderr, "mistral3%s f16 KV vs reference: %.2g\n",
                moe ? " (experts)" : "", rel_diff(ref16, batch, R3V));
        T_CHECK(rel_diff(ref16, batch, R3V) < 1e-3);
    }
    /* without original_context_length the steps are context_length's
     * (llama.cpp's n_ctx_orig_yarn); no YaRN here */
    char p[600];
    snprintf(p, sizeof(p), "%s/mistral3_ctx.gguf", g_tmp);
    struct gguf_w_llama lp;
    ref_params(&lp, "mistral3", 2, 37);
    lp.n_ctx = M3O;
    lp.attn_temp = 0.5f;
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    struct ref_arch rc = {.n_layer = 2, .f32 = 1, .llama = 1,
                          .temp_beta = 0.5, .temp_floor = M3O};
    float ref[R3V], got[R3V];
    T_EQ_INT(ref_forward(p, ids, M3T, &rc, ref), 0);
    T_EQ_INT(file_logits(p, 64, LE_KV_F32, ids, M3T, got), 0);
    fprintf(stderr, "mistral3 steps of context_length vs reference: %.2g\n",
            rel_diff(ref, got, R3V));
    T_CHECK(rel_diff(ref, got, R3V) < 1e-5);
    /* a llama file with YaRN's log multiplier (a Mistral-format model as
     * llama.cpp's converter writes it without a temperature): applied as
     * on mistral3, which it changes */
    snprintf(p, sizeof(p), "%s/llama_lm.gguf", g_tmp);
    m3_params(&lp, 0, 0.0f, 1.0f, 41);
    lp.arch = "llama";
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    struct ref_arch rlm = {.n_layer = 2, .f32 = 1, .llama = 1,
                           .yarn_factor = 2, .yarn_orig = M3O,
                           .yarn_log_mul = 1},
                    rno = rlm;
    rno.yarn_log_mul = 0;
    float refno[R3V];
    T_EQ_INT(ref_forward(p, ids, M3T, &rlm, ref), 0);
    T_EQ_INT(ref_forward(p, ids, M3T, &rno, refno), 0);
    T_EQ_INT(file_logits(p, 0, LE_KV_F32, ids, M3T, got), 0);
    fprintf(stderr, "llama with a YaRN log multiplier vs reference: %.2g "
                    "(the multiplier changes %.2g)\n",
            rel_diff(ref, got, R3V), rel_diff(ref, refno, R3V));
    T_CHECK(rel_diff(ref, got, R3V) < 1e-5);
    T_CHECK(rel_diff(ref, refno, R3V) > 1e-2);
    /* refused by name: the temperature over an original context of 0, a
     * negative log multiplier, on mistral3 and on llama */
    static const struct {
        const char *arch, *key, *want;
        int u32;
        float f;
    } bad[] = {
        {"mistral3", "mistral3.rope.scaling.original_context_length",
         "original_context_length", 1, 0},
        {"mistral3", "mistral3.rope.scaling.yarn_log_multiplier",
         "yarn_log_multiplier", 0, -1.0f},
        {"llama", "llama.rope.scaling.yarn_log_multiplier",
         "yarn_log_multiplier", 0, -1.0f},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        m3_params(&lp, 0, 0.5f, 0.0f, 37);
        lp.arch = bad[k].arch;
        lp.yarn_orig = 0; /* the key only as the table adds it */
        if (strcmp(bad[k].arch, "mistral3"))
            lp.attn_temp = 0;
        refused_with(&lp, p, bad[k].key, bad[k].u32, 0, bad[k].f,
                     bad[k].want);
    }
}

/* phi3: fused attn_qkv and ffn_up read as row views, a window of 3 on
 * every layer, LongRoPE's short factors for a context within the
 * original one and the long ones past it, cos and sin times the file's
 * attn_factor; each against the reference (the window, the factors
 * and the attn factor each change the logits, so each is tested). */
static void
test_phi3(void)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/phi3.gguf", g_tmp);
    struct gguf_w_llama lp;
    ref_params(&lp, "phi3", 3, 19);
    lp.n_swa = 3;
    lp.longrope_orig = 256;
    lp.longrope_attn = 1.25f;
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    int32_t ids[RT_MAX] = {1, 270, 281, 265, 299, 290, 277, 263};
    struct ref_arch ra = {.n_layer = 3, .n_swa = 3, .f32 = 1, .phi3 = 1,
                          .longrope = 1, .rope_ms = 1.25};
    struct ref_arch rl = ra, nw = ra, r1 = ra;
    rl.longrope = 2;
    nw.n_swa = 0;
    r1.rope_ms = 1;
    float ref[R3V], refl[R3V], refnw[R3V], ref1[R3V], got[R3V], gotl[R3V];
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &ra, ref), 0);
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &rl, refl), 0);
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &nw, refnw), 0);
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &r1, ref1), 0);
    /* a 256-position context: the short factors; 512: the long ones */
    for (int k = 0; k < 2; k++) {
        struct le_model *m = open_model(p, 1, k ? 512 : 256, LE_KV_F32);
        T_CHECK(m != NULL);
        if (m) {
            T_CHECK(strstr(le_model_desc(m), "phi3") != NULL);
            T_EQ_INT(logits_after(m, ids, RT_MAX, k ? gotl : got), 0);
        }
        le_model_free(m);
    }
    double d = rel_diff(ref, got, R3V), dl = rel_diff(refl, gotl, R3V);
    fprintf(stderr, "phi3 vs reference: short %.2g, long %.2g; the long "
                    "factors change %.2g, no window %.2g, no attn factor "
                    "%.2g\n",
            d, dl, rel_diff(ref, refl, R3V), rel_diff(ref, refnw, R3V),
            rel_diff(ref, ref1, R3V));
    T_CHECK(d < 1e-5);
    T_CHECK(dl < 1e-5);
    T_CHECK(rel_diff(ref, refl, R3V) > 1e-2);
    T_CHECK(rel_diff(ref, refnw, R3V) > 1e-2);
    T_CHECK(rel_diff(ref, ref1, R3V) > 1e-2);
}

/* granite and granitemoe: the llama layout (and Mixtral's experts) with
 * Granite 3's four multipliers, against the reference; the same file
 * read without them (as llama) is far off, so they are tested. */
static void
test_granite(void)
{
    int32_t ids[RT_MAX] = {1, 270, 281, 265, 299, 290, 277, 263};
    for (int moe = 0; moe < 2; moe++) {
        char p[600];
        snprintf(p, sizeof(p), "%s/granite%d.gguf", g_tmp, moe);
        struct gguf_w_llama lp;
        ref_params(&lp, moe ? "granitemoe" : "granite", 2, 23);
        lp.n_expert = moe ? 4 : 0;
        lp.n_expert_used = moe ? 2 : 0;
        T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
        struct ref_arch ra = {.n_layer = 2, .f32 = 1, .llama = 1,
                              .granite = 1, .n_expert = lp.n_expert,
                              .n_used = lp.n_expert_used},
                        plain = ra;
        plain.granite = 0;
        float ref[R3V], ref0[R3V], got[R3V];
        T_EQ_INT(ref_forward(p, ids, RT_MAX, &ra, ref), 0);
        T_EQ_INT(ref_forward(p, ids, RT_MAX, &plain, ref0), 0);
        struct le_model *m = open_model(p, 1, 0, LE_KV_F32);
        T_CHECK(m != NULL);
        if (m) {
            T_CHECK(strstr(le_model_desc(m), moe ? "granitemoe" : "granite") !=
                    NULL);
            T_EQ_INT(logits_after(m, ids, RT_MAX, got), 0);
        }
        le_model_free(m);
        double d = rel_diff(ref, got, R3V), d0 = rel_diff(ref, ref0, R3V);
        fprintf(stderr, "%s vs reference: %.2g; without the multipliers "
                        "%.2g\n",
                moe ? "granitemoe" : "granite", d, d0);
        T_CHECK(d < 1e-5);
        T_CHECK(d0 > 1e-2);
    }
}

/* gpt-oss (3 layers, a window of 3 on layers 0 and 2, 4 experts of
 * which 2 are used, YaRN x4 over 64 positions) against the reference;
 * the reference without the sinks and without the window is far off, so
 * both are tested (the biases and the SwiGLU's clamp were checked
 * against llama.cpp's text, tests/REFERENCE_NOTES.md).  Its prompt as
 * one batch equals its single steps. */
static void
test_gptoss(void)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/gptoss.gguf", g_tmp);
    struct gguf_w_llama lp;
    ref_params(&lp, "gpt-oss", 3, 29);
    lp.n_swa = 3;
    lp.n_expert = 4;
    lp.n_expert_used = 2;
    lp.yarn_factor = 4;
    lp.yarn_orig = 64;
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    int32_t ids[RT_MAX] = {1, 270, 281, 265, 299, 290, 277, 263};
    struct ref_arch ra = {.n_layer = 3, .f32 = 1, .oss = 1, .sinks = 1,
                          .n_swa = 3, .n_expert = 4, .n_used = 2,
                          .yarn_factor = 4, .yarn_orig = 64},
                    ns = ra, nw = ra;
    ns.sinks = 0;
    nw.n_swa = 0;
    float ref[R3V], refns[R3V], refnw[R3V], got[R3V];
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &ra, ref), 0);
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &ns, refns), 0);
    T_EQ_INT(ref_forward(p, ids, RT_MAX, &nw, refnw), 0);
    struct le_model *m = open_model(p, 1, 0, LE_KV_F32);
    T_CHECK(m != NULL);
    if (m) {
        T_CHECK(strstr(le_model_desc(m), "gpt-oss") != NULL);
        T_EQ_INT(logits_after(m, ids, RT_MAX, got), 0);
    }
    le_model_free(m);
    double d = rel_diff(ref, got, R3V);
    fprintf(stderr, "gpt-oss vs reference: %.2g; without the sinks %.2g, "
                    "without the window %.2g\n",
            d, rel_diff(ref, refns, R3V), rel_diff(ref, refnw, R3V));
    T_CHECK(d < 1e-5);
    T_CHECK(rel_diff(ref, refns, R3V) > 1e-2);
    T_CHECK(rel_diff(ref, refnw, R3V) > 1e-2);
    /* f16 KV cache (the fused attention kernels): near the reference */
    m = open_model(p, 2, 0, LE_KV_F16);
    T_CHECK(m != NULL);
    if (m)
        T_EQ_INT(logits_after(m, ids, RT_MAX, got), 0);
    le_model_free(m);
    fprintf(stderr, "gpt-oss f16 KV vs reference: %.2g\n",
            rel_diff(ref, got, R3V));
    T_CHECK(rel_diff(ref, got, R3V) < 1e-3);
    float batch[R3V], step[R3V];
    batch_and_steps(p, "gpt-oss", ids, RT_MAX, batch, step);
    T_CHECK(memcmp(batch, step, sizeof(batch)) == 0);
    /* YaRN keys llmux does not implement are refused by name, and a
     * sliding-window base of its own */
    static const char *const bad[][2] = {
        {"gpt-oss.rope.scaling.yarn_log_multiplier", "yarn_log_multiplier"},
        {"gpt-oss.rope.scaling.yarn_attn_factor", "yarn_attn_factor"},
        {"gpt-oss.rope.freq_base_swa", "freq_base_swa"},
    };
    for (int k = 0; k < 3; k++)
        refused_with(&lp, p, bad[k][0], 0, 0, 0.5f, bad[k][1]);
}

/* ------------------------------------------------------------------ */
/* deepseek2 against a reference written here from DeepSeek-V2's
 * published attention in its plain (not absorbed) form: each head's key
 * and value decompressed from the normed latent by attn_kv_b, the rotary
 * part (adjacent pairs) shared by the heads, q.k scaled by mscale^2 /
 * sqrt(nope + rope); the first layer dense, the others experts (softmax
 * or sigmoid, the selection bias, the weights normalised and scaled) and
 * two shared experts; double precision, the engine on an F32 KV cache. */

enum { DSE = 32, DSH = 4, DSNP = 8, DSR = 4, DSV = 8, DSLR = 32, DSQL = 32,
       DSL = 3, DSX = 4, DSK = 2, DSFX = 16, DSFD = 48, DSSH = 2 };

struct ds_ref {
    int q_lora, sigmoid, probs_b, norm, shared;
    double wscale, yarn_factor, log_mul;
    int yarn_orig;
    /* Mistral Large 3's attention temperature: every query (nope and
     * rope parts) times 1 + temp ln(floor(t / temp_len) + 1) */
    double temp;
    int temp_len;
};

static void
ds_ffn(const struct le_gguf *g, int l, const char *gate, const char *up,
       const char *down, size_t off, int nf, const double *xb, double w,
       double *x)
{
    double hg[DSFD], hu[DSFD], o[DSE];
    ref_mv(hg, tf(g, gate, l) + off * (size_t)nf * DSE, xb, DSE, nf);
    ref_mv(hu, tf(g, up, l) + off * (size_t)nf * DSE, xb, DSE, nf);
    for (int k = 0; k < nf; k++)
        hg[k] = hg[k] / (1.0 + exp(-hg[k])) * hu[k];
    ref_mv(o, tf(g, down, l) + off * (size_t)nf * DSE, hg, nf, DSE);
    for (int k = 0; k < DSE; k++)
        x[k] += w * o[k];
}

static int
ds_ref_forward(const char *path, const int32_t *ids, int n,
               const struct ds_ref *ra, float *out)
{
    struct le_gguf *g = NULL;
    char err[256];
    if (le_gguf_open(path, LE_GGUF_READ, &g, err, sizeof(err)) != LE_OK)
        return -1;
    enum { QW = DSNP + DSR, KW = DSNP + DSV };
    static double kc[DSL][RT_CAP][DSH][QW], vc[DSL][RT_CAP][DSH][DSV];
    double x[DSE], xb[DSE], qa[DSQL], q[DSH * QW], kva[DSLR + DSR],
        kv[DSH * KW], att[DSH * DSV], o[DSE];
    const float *emb = tf(g, "token_embd.weight", 0);
    int rc = emb && n <= RT_CAP ? 0 : -1;
    double lf = ra->yarn_factor > 0 ? log(ra->yarn_factor) : 0,
           ms = 1 + ra->log_mul * lf,
           scale = ms * ms / sqrt((double)(DSNP + DSR));
    for (int t = 0; rc == 0 && t < n; t++) {
        for (int i = 0; i < DSE; i++)
            x[i] = emb[(size_t)ids[t] * DSE + i];
        for (int l = 0; l < DSL; l++) {
            memcpy(xb, x, sizeof(x));
            ref_norm(xb, tf(g, "blk.%d.attn_norm.weight", l), DSE, 1e-5);
            if (ra->q_lora) {
                ref_mv(qa, tf(g, "blk.%d.attn_q_a.weight", l), xb, DSE,
                       DSQL);
                ref_norm(qa, tf(g, "blk.%d.attn_q_a_norm.weight", l), DSQL,
                         1e-5);
                ref_mv(q, tf(g, "blk.%d.attn_q_b.weight", l), qa, DSQL,
                       DSH * QW);
            } else {
                ref_mv(q, tf(g, "blk.%d.attn_q.weight", l), xb, DSE,
                       DSH * QW);
            }
            ref_mv(kva, tf(g, "blk.%d.attn_kv_a_mqa.weight", l), xb, DSE,
                   DSLR + DSR);
            ref_norm(kva, tf(g, "blk.%d.attn_kv_a_norm.weight", l), DSLR,
                     1e-5);
            ref_mv(kv, tf(g, "blk.%d.attn_kv_b.weight", l), kva, DSLR,
                   DSH * KW);
            /* the rotation of each head's q_pe and of the shared k_pe */
            double *kpe = kva + DSLR;
            for (int h = 0; h <= DSH; h++) {
                double *v = h < DSH ? q + h * QW + DSNP : kpe;
                for (int i = 0; i < DSR / 2; i++) {
                    double th = t * pow(10000.0, -2.0 * i / DSR);
                    if (ra->yarn_factor > 0)
                        th = ref_yarn(th, i, DSR, 10000.0, ra->yarn_factor,
                                      ra->yarn_orig);
                    double a = v[2 * i], b = v[2 * i + 1];
                    v[2 * i] = a * cos(th) - b * sin(th);
                    v[2 * i + 1] = a * sin(th) + b * cos(th);
                }
            }
            for (int i = 0; i < DSH * QW && ra->temp != 0; i++)
                q[i] *= 1 + ra->temp *
                                log(floor((double)t / ra->temp_len) + 1);
            for (int h = 0; h < DSH; h++) {
                for (int i = 0; i < DSNP; i++)
                    kc[l][t][h][i] = kv[h * KW + i];
                for (int i = 0; i < DSR; i++)
                    kc[l][t][h][DSNP + i] = kpe[i];
                for (int i = 0; i < DSV; i++)
                    vc[l][t][h][i] = kv[h * KW + DSNP + i];
            }
            for (int h = 0; h < DSH; h++) {
                double sc[RT_CAP], mx = -1e300, sum = 0;
                for (int p = 0; p <= t; p++) {
                    double d = 0;
                    for (int i = 0; i < QW; i++)
                        d += q[h * QW + i] * kc[l][p][h][i];
                    sc[p] = d * scale;
                    mx = sc[p] > mx ? sc[p] : mx;
                }
                for (int p = 0; p <= t; p++)
                    sum += sc[p] = exp(sc[p] - mx);
                for (int i = 0; i < DSV; i++) {
                    double a = 0;
                    for (int p = 0; p <= t; p++)
                        a += sc[p] / sum * vc[l][p][h][i];
                    att[h * DSV + i] = a;
                }
            }
            ref_mv(o, tf(g, "blk.%d.attn_output.weight", l), att, DSH * DSV,
                   DSE);
            for (int i = 0; i < DSE; i++)
                x[i] += o[i];
            memcpy(xb, x, sizeof(x));
            ref_norm(xb, tf(g, "blk.%d.ffn_norm.weight", l), DSE, 1e-5);
            if (l == 0) { /* leading_dense_block_count 1 */
                ds_ffn(g, l, "blk.%d.ffn_gate.weight", "blk.%d.ffn_up.weight",
                       "blk.%d.ffn_down.weight", 0, DSFD, xb, 1.0, x);
                continue;
            }
            double rl[DSX], pr[DSX], pick[DSX], wsum = 0, mx = -1e300,
                                                sum = 0;
            int sel[DSK];
            ref_mv(rl, tf(g, "blk.%d.ffn_gate_inp.weight", l), xb, DSE, DSX);
            for (int e = 0; e < DSX; e++)
                mx = rl[e] > mx ? rl[e] : mx;
            for (int e = 0; e < DSX; e++)
                sum += pr[e] = ra->sigmoid ? 1 / (1 + exp(-rl[e]))
                                           : exp(rl[e] - mx);
            for (int e = 0; e < DSX; e++) {
                pr[e] = ra->sigmoid ? pr[e] : pr[e] / sum;
                pick[e] = pr[e] + (ra->probs_b
                                       ? tf(g, "blk.%d.exp_probs_b.bias",
                                            l)[e]
                                       : 0);
            }
            ref_topk(pick, DSX, DSK, sel);
            for (int i = 0; i < DSK; i++)
                wsum += pr[sel[i]];
            for (int i = 0; i < DSK; i++)
                ds_ffn(g, l, "blk.%d.ffn_gate_exps.weight",
                       "blk.%d.ffn_up_exps.weight",
                       "blk.%d.ffn_down_exps.weight", (size_t)sel[i], DSFX,
                       xb,
                       pr[sel[i]] / (ra->norm ? wsum : 1.0) * ra->wscale, x);
            if (ra->shared)
                ds_ffn(g, l, "blk.%d.ffn_gate_shexp.weight",
                       "blk.%d.ffn_up_shexp.weight",
                       "blk.%d.ffn_down_shexp.weight", 0, DSFX * DSSH, xb,
                       1.0, x);
        }
    }
    if (rc == 0) {
        static double lg[R3V];
        ref_norm(x, tf(g, "output_norm.weight", 0), DSE, 1e-5);
        ref_mv(lg, tf(g, "output.weight", 0), x, DSE, R3V);
        for (int i = 0; i < R3V; i++)
            out[i] = (float)lg[i];
    }
    le_gguf_free(g);
    return rc;
}

static void
ds_params(struct gguf_w_llama *lp, const struct ds_ref *ra, int mla,
          uint64_t seed)
{
    memset(lp, 0, sizeof(*lp));
    lp->arch = "deepseek2";
    lp->n_vocab = R3V;
    lp->n_embd = DSE;
    lp->n_layer = DSL;
    lp->n_head = DSH;
    lp->n_head_kv = DSH;
    lp->n_ff = DSFD;
    lp->type = LE_TYPE_F32;
    lp->seed = seed;
    lp->n_expert = DSX;
    lp->n_expert_used = DSK;
    lp->n_ff_exp = DSFX;
    lp->kv_lora = DSLR;
    lp->q_lora = ra->q_lora ? DSQL : 0;
    lp->ds_nope = DSNP;
    lp->ds_rope = DSR;
    lp->ds_v = DSV;
    lp->n_dense_lead = 1;
    lp->n_shared = DSSH;
    lp->ds_wscale = (float)ra->wscale;
    lp->ds_wnorm = ra->norm;
    lp->ds_gating = ra->sigmoid ? 2 : 1;
    lp->ds_probs_b = ra->probs_b;
    lp->ds_mla = mla;
    lp->yarn_factor = (float)ra->yarn_factor;
    lp->yarn_orig = ra->yarn_orig;
    lp->yarn_log_mul = (float)ra->log_mul;
    lp->attn_temp = (float)ra->temp;
    lp->attn_temp_len = ra->temp_len;
}

static void
test_deepseek2(void)
{
    /* V2-like (q LoRA, softmax, no normalisation) and V3-like (no q
     * LoRA, sigmoid with the selection bias, normalised and scaled,
     * YaRN with its log multiplier) */
    static const struct ds_ref cfg[2] = {
        {.q_lora = 1, .shared = 1, .wscale = 1.0},
        {.sigmoid = 1, .probs_b = 1, .norm = 1, .shared = 1, .wscale = 2.5,
         .yarn_factor = 4, .yarn_orig = 64, .log_mul = 0.0707},
    };
    int32_t ids[RT_MAX] = {1, 270, 281, 265, 299, 290, 277, 263};
    for (int c = 0; c < 2; c++) {
        char p[600], pm[600];
        snprintf(p, sizeof(p), "%s/ds%d.gguf", g_tmp, c);
        snprintf(pm, sizeof(pm), "%s/ds%d_mla.gguf", g_tmp, c);
        struct gguf_w_llama lp;
        ds_params(&lp, &cfg[c], 0, 41 + (uint64_t)c);
        T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
        ds_params(&lp, &cfg[c], 1, 41 + (uint64_t)c);
        T_EQ_INT(gguf_w_llama_write(&lp, pm), 0);
        struct ds_ref noshared = cfg[c], plain = cfg[c];
        noshared.shared = 0;
        plain.log_mul = 0;
        plain.probs_b = 0;
        float ref[R3V], refns[R3V], refpl[R3V], got[R3V], gotm[R3V];
        T_EQ_INT(ds_ref_forward(p, ids, RT_MAX, &cfg[c], ref), 0);
        T_EQ_INT(ds_ref_forward(p, ids, RT_MAX, &noshared, refns), 0);
        T_EQ_INT(ds_ref_forward(p, ids, RT_MAX, &plain, refpl), 0);
        struct le_model *m = open_model(p, 1, 0, LE_KV_F32);
        T_CHECK(m != NULL);
        if (m) {
            T_CHECK(strstr(le_model_desc(m), "deepseek2") != NULL);
            T_EQ_INT(logits_after(m, ids, RT_MAX, got), 0);
        }
        le_model_free(m);
        /* the split layout (attn_k_b / attn_v_b) is the same network */
        m = open_model(pm, 1, 0, LE_KV_F32);
        T_CHECK(m != NULL);
        if (m)
            T_EQ_INT(logits_after(m, ids, RT_MAX, gotm), 0);
        le_model_free(m);
        double d = rel_diff(ref, got, R3V), dm = rel_diff(ref, gotm, R3V);
        fprintf(stderr, "deepseek2 (%s) vs reference: %.2g, split layout "
                        "%.2g; without the shared experts %.2g, without "
                        "the selection bias and log multiplier %.2g\n",
                c ? "V3-like" : "V2-like", d, dm,
                rel_diff(ref, refns, R3V), rel_diff(ref, refpl, R3V));
        T_CHECK(d < 1e-5);
        T_CHECK(dm < 1e-5);
        T_CHECK(rel_diff(ref, refns, R3V) > 1e-2);
        if (c == 1)
            T_CHECK(rel_diff(ref, refpl, R3V) > 1e-2);
        /* f16 KV cache, two threads: near it; batch equals steps */
        m = open_model(p, 2, 0, LE_KV_F16);
        T_CHECK(m != NULL);
        if (m)
            T_EQ_INT(logits_after(m, ids, RT_MAX, got), 0);
        le_model_free(m);
        T_CHECK(rel_diff(ref, got, R3V) < 1e-3);
        float batch[R3V], step[R3V];
        batch_and_steps(pm, "deepseek2", ids, RT_MAX, batch, step);
        T_CHECK(memcmp(batch, step, sizeof(batch)) == 0);
        /* the same weights at Q8_0 (the repacked kernels, quantised
         * activations, k_b transposed from a Q8_0 attn_kv_b): near the
         * reference.  A step that reused the activations of q_a where
         * those of the layer's input were due gave 1.2 here. */
        char pq[600];
        snprintf(pq, sizeof(pq), "%s/ds%d_q8.gguf", g_tmp, c);
        ds_params(&lp, &cfg[c], 0, 41 + (uint64_t)c);
        lp.type = LE_TYPE_Q8_0;
        T_EQ_INT(gguf_w_llama_write(&lp, pq), 0);
        m = open_model(pq, 2, 0, LE_KV_F16);
        T_CHECK(m != NULL);
        if (m)
            T_EQ_INT(logits_after(m, ids, RT_MAX, got), 0);
        le_model_free(m);
        fprintf(stderr, "deepseek2 Q8_0 vs reference: %.2g\n",
                rel_diff(ref, got, R3V));
        /* 0.017 and 0.047 measured (the sigmoid router's near ties) */
        T_CHECK(rel_diff(ref, got, R3V) < (c ? 0.15 : 0.05));
    }
    /* a multi-token-prediction layer after the model's own (V3's and
     * GLM's files) is left out: the same logits as without it */
    {
        char pa[600], pb[600];
        snprintf(pa, sizeof(pa), "%s/ds_mtp.gguf", g_tmp);
        snprintf(pb, sizeof(pb), "%s/ds_nomtp.gguf", g_tmp);
        struct gguf_w_llama lm;
        ds_params(&lm, &cfg[1], 1, 47);
        T_EQ_INT(gguf_w_llama_write(&lm, pb), 0);
        lm.n_layer = DSL + 1;
        struct gguf_w *w = gguf_w_new();
        T_EQ_INT(gguf_w_llama_fill(w, &lm), 0);
        gguf_w_add_u32(w, "deepseek2.nextn_predict_layers", 1);
        T_EQ_INT(gguf_w_write_file(w, pa), 0);
        gguf_w_free(w);
        float la[R3V], lb[R3V];
        memset(la, 0, sizeof(la));
        memset(lb, 0xff, sizeof(lb));
        struct le_model *ma = open_model(pa, 1, 0, LE_KV_F32),
                        *mb = open_model(pb, 1, 0, LE_KV_F32);
        T_CHECK(ma && mb);
        if (ma && mb) {
            T_EQ_INT(logits_after(ma, ids, RT_MAX, la), 0);
            T_EQ_INT(logits_after(mb, ids, RT_MAX, lb), 0);
            T_CHECK(memcmp(la, lb, sizeof(la)) == 0);
            T_CHECK(strstr(le_model_desc(ma), "3 layers") != NULL);
        }
        le_model_free(ma);
        le_model_free(mb);
    }
    /* what llmux does not implement is refused by name: grouped routing,
     * another gating function, an attn_factor of its own */
    char p[600], err[256];
    snprintf(p, sizeof(p), "%s/ds_bad.gguf", g_tmp);
    struct gguf_w_llama lp;
    ds_params(&lp, &cfg[0], 0, 41);
    lp.ds_gating = 0;
    static const struct {
        const char *key, *want;
        uint32_t u;
        float f;
    } bad[] = {
        {"deepseek2.expert_group_count", "expert_group_count", 4, 0},
        {"deepseek2.expert_gating_func", "expert_gating_func 3", 3, 0},
        {"deepseek2.rope.scaling.attn_factor", "attn_factor", 0, 2.0f},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
        refused_with(&lp, p, bad[k].key, bad[k].u != 0, bad[k].u, bad[k].f,
                     bad[k].want);
    /* Mistral Large 3's attention temperature (beta 0.5, a step every 3
     * positions, so 8 tokens take three), both layouts: against the
     * reference (of the attn_kv_b file, the split one the same network),
     * and the temperature changes the logits; without temperature_length
     * the file is refused by name */
    const struct ds_ref ct = {.q_lora = 1, .shared = 1, .wscale = 1.0,
                              .temp = 0.5, .temp_len = 3};
    struct ds_ref c0 = ct;
    c0.temp = 0;
    float ref[R3V], ref0[R3V], got[R3V];
    for (int mla = 0; mla < 2; mla++) {
        ds_params(&lp, &ct, mla, 43);
        T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
        if (!mla) {
            T_EQ_INT(ds_ref_forward(p, ids, RT_MAX, &ct, ref), 0);
            T_EQ_INT(ds_ref_forward(p, ids, RT_MAX, &c0, ref0), 0);
        }
        T_EQ_INT(file_logits(p, 0, LE_KV_F32, ids, RT_MAX, got), 0);
        fprintf(stderr, "deepseek2 with the attention temperature (%s) vs "
                        "reference: %.2g; the temperature changes %.2g\n",
                mla ? "split" : "attn_kv_b", rel_diff(ref, got, R3V),
                rel_diff(ref, ref0, R3V));
        T_CHECK(rel_diff(ref, got, R3V) < 1e-5);
        T_CHECK(rel_diff(ref, ref0, R3V) > 1e-2);
    }
    ds_params(&lp, &ct, 1, 43);
    lp.attn_temp_len = 0;
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    struct le_model *m = NULL;
    err[0] = '\0';
    T_EQ_INT(le_model_open(p, NULL, &m, err, sizeof(err)), LE_EFORMAT);
    T_CHECK(strstr(err, "temperature_length") != NULL);
}

/* A harmony vocabulary (o200k_harmony's markers as control tokens) and
 * template: the channel markers give their text in the answer (so that
 * the provider can split the channels) while other controls give none;
 * "<|return|>" and "<|call|>" end an answer and "<|end|>" does not, as
 * llama.cpp reads such a vocabulary. */
static void
test_harmony_vocab(void)
{
    static const char *const marks[] = {
        "<|start|>", "<|channel|>", "<|message|>", "<|end|>",
        "<|constrain|>", "<|return|>", "<|call|>", "<|endoftext|>", NULL};
    char p[600];
    snprintf(p, sizeof(p), "%s/harmony.gguf", g_tmp);
    struct gguf_w_llama lp;
    ref_params(&lp, "gpt-oss", 1, 31);
    lp.n_swa = 4;
    lp.n_expert = 2;
    lp.n_expert_used = 1;
    lp.controls = marks;
    lp.chat_template = "<|start|>assistant<|channel|>final<|message|>";
    T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
    struct le_model *m = open_model(p, 1, 0, LE_KV_F16);
    T_CHECK(m != NULL);
    if (!m)
        return;
    T_EQ_INT(le_model_chat_template(m), LE_CHAT_HARMONY);
    for (int i = 0; marks[i]; i++) {
        int32_t id = R3V - 8 + i;
        char buf[32];
        size_t n = le_model_token_to_piece(m, id, 0, buf, sizeof(buf));
        int shown = i < 5; /* the first five are harmony's markers */
        T_EQ_INT(n, shown ? strlen(marks[i]) : 0);
        if (shown && n == strlen(marks[i]))
            T_CHECK(!memcmp(buf, marks[i], n));
        T_EQ_INT(le_model_is_eog(m, id),
                 !strcmp(marks[i], "<|return|>") ||
                     !strcmp(marks[i], "<|call|>") ||
                     !strcmp(marks[i], "<|endoftext|>"));
    }
    le_model_free(m);
}

/* The logits after ids (8) of a random llama of type (256 wide, 2
 * layers, n_ff, n_expert experts 2 used if > 0, vocab 330: a partial
 * group of 16 rows) written at path, on 1 and 2 threads, with its
 * repacked weights and then over the GGUF rows (le_model_drop_packed):
 * equal bit for bit when exact (or at the plain C level), else within
 * 1e-4; 1 and 2 threads equal.  Returns the packed bytes of the 1-thread
 * model, or 0. */
static size_t
packed_vs_rows(enum le_type type, uint64_t seed, int n_ff, int n_expert,
               const char *path, const int32_t *ids, int exact)
{
    enum { NV = 330 };
    char err[256];
    size_t packed = 0;
    struct gguf_w_llama lp = {0};
    lp.n_vocab = NV;
    lp.n_embd = 256;
    lp.n_layer = 2;
    lp.n_head = 4;
    lp.n_head_kv = 2;
    lp.n_ff = n_ff;
    lp.n_expert = n_expert;
    lp.n_expert_used = n_expert ? 2 : 0;
    lp.type = type;
    lp.seed = seed;
    T_EQ_INT(gguf_w_llama_write(&lp, path), 0);
    float a[NV], b[NV], c[NV];
    for (int th = 1; th <= 2; th++) {
        struct le_model_params mp;
        le_model_params_default(&mp);
        mp.n_threads = th;
        struct le_model *m = NULL;
        T_EQ_INT(le_model_open(path, &mp, &m, err, sizeof(err)), LE_OK);
        if (!m)
            return 0;
        if (th == 1)
            packed = le_model_packed_bytes(m);
        /* 7 prompt tokens in one batch, then one more */
        T_EQ_INT(logits_after(m, ids, 8, th == 1 ? a : c), 0);
        le_model_drop_packed(m);
        T_EQ_INT(le_model_packed_bytes(m), 0);
        T_EQ_INT(logits_after(m, ids, 8, b), 0);
        if (exact || le_isa_active() == LE_ISA_NONE)
            T_CHECK(memcmp(th == 1 ? a : c, b, sizeof(b)) == 0);
        else
            T_CHECK(rel_diff(b, th == 1 ? a : c, NV) < 1e-4);
        le_model_free(m);
    }
    T_CHECK(memcmp(a, c, sizeof(a)) == 0);
    return packed;
}

/* Mixture-of-experts layers: qwen3moe (8 experts, 2 used, the experts'
 * width apart from the dense one), Mixtral's llama layout (4, 2) and
 * qwen2moe (8, 2, unnormalised, a shared expert, biases) against the
 * reference, as a prompt batch and one token at a time (the
 * experts' rows are gathered differently, the floats are the same); one
 * expert a token instead of two changes the answer, so the routing is
 * tested.  Quantised, the repacked expert views give the per-row path's
 * logits (Q4_K bit for bit, Q4_0 within 1e-4) on 1 and 2 threads. */
static void
test_moe(void)
{
    char p[600], err[256] = "";
    int32_t ids[RT_MAX] = {1, 270, 281, 265, 299, 290, 277, 263};
    static const char *const archs[3] = {"qwen3moe", "llama", "qwen2moe"};
    for (int a = 0; a < 3; a++) {
        snprintf(p, sizeof(p), "%s/moe_%s.gguf", g_tmp, archs[a]);
        struct gguf_w_llama lp;
        ref_params(&lp, archs[a], a == 1 ? 2 : 3, 21 + (uint64_t)a);
        lp.n_expert = a == 1 ? 4 : 8;
        lp.n_expert_used = 2;
        if (a != 1) {
            lp.n_ff = 96; /* the dense width, which such a file has */
            lp.n_ff_exp = R3F;
            lp.n_ff_shexp = a == 2 ? R3F : 0;
        }
        T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
        struct ref_arch ra = {.n_layer = lp.n_layer, .qk_norm = a == 0,
                              .llama = a == 1, .n_expert = lp.n_expert,
                              .n_used = 2, .qwen2moe = a == 2};
        struct ref_arch r1 = ra;
        r1.n_used = 1;
        float ref[R3V], one[R3V], got[R3V], step[R3V];
        T_EQ_INT(ref_forward(p, ids, RT_MAX, &ra, ref), 0);
        T_EQ_INT(ref_forward(p, ids, RT_MAX, &r1, one), 0);
        batch_and_steps(p, archs[a], ids, RT_MAX, got, step);
        double d = rel_diff(ref, got, R3V), ds = rel_diff(ref, step, R3V),
               d1 = rel_diff(ref, one, R3V);
        fprintf(stderr, "%s experts vs reference: batch %.2g, steps %.2g; "
                        "one expert a token %.2g\n",
                archs[a], d, ds, d1);
        /* qwen2moe's biases make q and k larger: the f16 cache's
         * rounding can then flip one way in double and the other in
         * float, as gemma3's (test_gemma3); with an f32 cache the floats
         * are the reference's */
        T_CHECK(d < (a == 2 ? 1e-4 : 1e-5));
        T_CHECK(ds < (a == 2 ? 1e-4 : 1e-5));
        T_CHECK(memcmp(got, step, sizeof(got)) == 0);
        T_CHECK(d1 > 1e-2);
        struct le_model *m = open_model(p, 1, 0, LE_KV_F32);
        T_CHECK(m != NULL);
        if (m) {
            T_CHECK(strstr(le_model_desc(m), "experts (2 used)") != NULL);
            struct ref_arch r32 = ra;
            r32.f32 = 1;
            T_EQ_INT(ref_forward(p, ids, RT_MAX, &r32, ref), 0);
            T_EQ_INT(logits_after(m, ids, RT_MAX, got), 0);
            double d32 = rel_diff(ref, got, R3V);
            fprintf(stderr, "  f32 KV cache: %.2g\n", d32);
            T_CHECK(d32 < 1e-5);
        }
        le_model_free(m);
    }
    /* quantised: the repacked views against the GGUF rows */
    static const enum le_type types[] = {LE_TYPE_Q4_K, LE_TYPE_Q4_0,
                                         LE_TYPE_MXFP4};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/moe_q%d.gguf", g_tmp, (int)types[i]);
        size_t packed = packed_vs_rows(types[i], 8, 256, 6, p, ids,
                                       types[i] == LE_TYPE_Q4_K);
        /* the experts are repacked: 2 layers x 3 x 6 of 256 x 256 */
        if (le_isa_active() != LE_ISA_NONE)
            T_CHECK(packed >= (size_t)36 * le_row_size(types[i], 256) * 256);
    }
    /* an older Mixtral file, one tensor per expert, is refused as such */
    struct gguf_w *w = gguf_w_new();
    struct gguf_w_llama lp;
    ref_params(&lp, "llama", 1, 3);
    lp.n_expert = 2;
    lp.n_expert_used = 1;
    T_EQ_INT(gguf_w_llama_fill(w, &lp), 0);
    float z[R3E * R3F] = {0};
    int64_t ne[2] = {R3E, R3F};
    gguf_w_add_tensor(w, "blk.0.ffn_gate.0.weight", LE_TYPE_F32, 2, ne, z);
    snprintf(p, sizeof(p), "%s/moe_old.gguf", g_tmp);
    T_EQ_INT(gguf_w_write_file(w, p), 0);
    gguf_w_free(w);
    struct le_model *m = NULL;
    T_EQ_INT(le_model_open(p, NULL, &m, err, sizeof(err)), LE_EFORMAT);
    T_CHECK(strstr(err, "one tensor each") != NULL);
}

static void
test_rope_freqs(void)
{
    /* llama 3.x rope factors: all 1 changes nothing, others do */
    char p1[600], p2[600], p0[600];
    snprintf(p0, sizeof(p0), "%s/rf0.gguf", g_tmp);
    snprintf(p1, sizeof(p1), "%s/rf1.gguf", g_tmp);
    snprintf(p2, sizeof(p2), "%s/rf2.gguf", g_tmp);
    struct gguf_w_llama lp = {0};
    lp.n_vocab = 300;
    lp.n_embd = 32;
    lp.n_layer = 1;
    lp.n_head = 2;
    lp.n_head_kv = 2;
    lp.n_ff = 64;
    lp.type = LE_TYPE_F32;
    lp.seed = 3;
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    float fac[8] = {1, 1, 2, 4, 8, 8, 8, 8};
    int64_t ne[1] = {8}; /* n_rot / 2 = 16 / 2 */
    const char *paths[3] = {p0, p1, p2};
    for (int i = 0; i < 3; i++) {
        struct gguf_w *w = gguf_w_new();
        T_EQ_INT(gguf_w_llama_fill(w, &lp), 0);
        if (i)
            gguf_w_add_tensor(w, "rope_freqs.weight", LE_TYPE_F32, 1, ne,
                              i == 1 ? ones : fac);
        T_EQ_INT(gguf_w_write_file(w, paths[i]), 0);
        gguf_w_free(w);
    }
    int32_t ids[6] = {1, 261, 262, 263, 264, 265};
    float a[300], b[300], c[300];
    char err[256];
    T_EQ_INT(qw_logits(p0, ids, 6, a, err, sizeof(err)), 0);
    T_EQ_INT(qw_logits(p1, ids, 6, b, err, sizeof(err)), 0);
    T_EQ_INT(qw_logits(p2, ids, 6, c, err, sizeof(err)), 0);
    T_CHECK(memcmp(a, b, sizeof(a)) == 0);
    T_CHECK(rel_diff(a, c, 300) > 1e-4);
    /* a wrongly sized factor tensor is refused */
    char p3[600];
    snprintf(p3, sizeof(p3), "%s/rf3.gguf", g_tmp);
    struct gguf_w *w = gguf_w_new();
    gguf_w_llama_fill(w, &lp);
    int64_t ne3[1] = {5};
    gguf_w_add_tensor(w, "rope_freqs.weight", LE_TYPE_F32, 1, ne3, fac);
    T_EQ_INT(gguf_w_write_file(w, p3), 0);
    gguf_w_free(w);
    struct le_model *m = NULL;
    T_EQ_INT(le_model_open(p3, NULL, &m, err, sizeof(err)), LE_EFORMAT);
    T_CHECK(strstr(err, "rope_freqs") != NULL);
}

/* Every weight type through the whole model: the same random model
 * written as F32 and as each type gives logits within a per-type bound of
 * the F32 ones: max |diff| / max |logit| below the bound (about twice
 * what was measured; the error doubles per bit removed, as quantisation
 * noise does: q8_0 0.014, q6_K 0.035, q5 0.072, q4 0.15, q3_K 0.36, q2_K
 * 0.60) and a Pearson correlation with the F32 logits above 1 - bound/2.
 * The activations are quantised too (Q8_0 / Q8_K), as in the engine. */
static void
test_all_types(void)
{
    struct {
        enum le_type t;
        double tol;
    } types[] = {
        {LE_TYPE_F16, 0.005}, {LE_TYPE_BF16, 0.01}, {LE_TYPE_Q8_0, 0.03},
        {LE_TYPE_Q6_K, 0.07}, {LE_TYPE_Q5_0, 0.15}, {LE_TYPE_Q5_1, 0.15},
        {LE_TYPE_Q5_K, 0.15}, {LE_TYPE_Q4_0, 0.3},  {LE_TYPE_Q4_1, 0.3},
        {LE_TYPE_Q4_K, 0.3},  {LE_TYPE_Q3_K, 0.6},  {LE_TYPE_Q2_K, 1.0},
        {LE_TYPE_MXFP4, 0.6},
    };
    struct gguf_w_llama lp = {0};
    lp.n_vocab = 320;
    lp.n_embd = 256; /* a multiple of the K-quant super-block */
    lp.n_layer = 1;
    lp.n_head = 4;
    lp.n_head_kv = 2;
    lp.n_ff = 512;
    lp.seed = 11;
    lp.type = LE_TYPE_F32;
    char pf[600];
    snprintf(pf, sizeof(pf), "%s/all_f32.gguf", g_tmp);
    T_EQ_INT(gguf_w_llama_write(&lp, pf), 0);
    int32_t ids[4] = {1, 300, 42, 7};
    float ref[320], got[320];
    char err[256];
    T_EQ_INT(qw_logits(pf, ids, 4, ref, err, sizeof(err)), 0);
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        char p[600];
        snprintf(p, sizeof(p), "%s/all_%d.gguf", g_tmp, (int)types[i].t);
        lp.type = types[i].t;
        T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
        int rc = qw_logits(p, ids, 4, got, err, sizeof(err));
        T_EQ_INT(rc, 0);
        if (rc != 0) {
            fprintf(stderr, "type %d: %s\n", (int)types[i].t, err);
            continue;
        }
        double d = rel_diff(ref, got, 320);
        /* and the logits move together: Pearson correlation */
        double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
        for (int v = 0; v < 320; v++) {
            ma += ref[v] / 320.0;
            mb += got[v] / 320.0;
        }
        for (int v = 0; v < 320; v++) {
            sab += (ref[v] - ma) * (got[v] - mb);
            saa += (ref[v] - ma) * (ref[v] - ma);
            sbb += (got[v] - mb) * (got[v] - mb);
        }
        double corr = sab / sqrt(saa * sbb);
        fprintf(stderr, "  %-5s vs f32: %.4f (bound %.3f), corr %.4f\n",
                le_type_get(types[i].t)->name, d, types[i].tol, corr);
        T_CHECK(d < types[i].tol);
        T_CHECK(corr > 1.0 - types[i].tol / 2);
    }
}

/* Repacked weights (the GEMM of a prompt batch and the GEMV of one token)
 * give the same logits as the per-row vec_dot path over the GGUF bytes:
 * bit for bit for Q4_K, Q5_K, Q6_K (both paths do the plain C float
 * steps) and F16 / BF16 (exact products summed in double), and
 * within 1e-4 of the largest logit for Q4_0 / Q8_0, whose unpacked AVX2
 * vec_dot sums blocks in 8 float lanes (quants_avx2.c) while the packed
 * kernels keep the plain C order.  1 and 2 threads agree bit for bit;
 * vocab 330 leaves a partial group of 16 rows. */
static void
test_packed_logits(void)
{
    static const enum le_type types[] = {LE_TYPE_Q4_0, LE_TYPE_Q8_0,
                                         LE_TYPE_Q4_K, LE_TYPE_Q5_K,
                                         LE_TYPE_Q6_K, LE_TYPE_F16,
                                         LE_TYPE_BF16};
    int32_t ids[8] = {1, 300, 42, 7, 99, 260, 3, 17};
    int packed_models = 0;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        char p[600];
        snprintf(p, sizeof(p), "%s/packed_%d.gguf", g_tmp, (int)types[i]);
        packed_models +=
            packed_vs_rows(types[i], 5, 768, 0, p, ids,
                           types[i] != LE_TYPE_Q4_0 &&
                               types[i] != LE_TYPE_Q8_0) > 0;
    }
    /* every type repacks when the CPU has a SIMD level */
    T_EQ_INT(packed_models, (le_isa_active() == LE_ISA_NONE ? 0 : 7));
}

/* The real binary at each ISA level (LLMUX_SIMD; a level the CPU lacks
 * falls back to the best one below) generates the same greedy text from
 * a Q4_0 and a Q4_K llama as the plain C level: the repacked kernels and
 * quantisers give the plain C bits, and the attention's F16 dot agrees
 * for values of normal magnitude. */
static void
test_levels_same_text(void)
{
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    static const enum le_type types[] = {LE_TYPE_Q4_0, LE_TYPE_Q4_K};
    static const char *const levels[] = {"none", "avx2", "avxvnni", "avx512"};
    struct gguf_w_llama lp = {0};
    lp.n_vocab = 330;
    lp.n_embd = 256;
    lp.n_layer = 2;
    lp.n_head = 4;
    lp.n_head_kv = 2;
    lp.n_ff = 768;
    lp.seed = 9;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        char p[600];
        snprintf(p, sizeof(p), "%s/levels_%d.gguf", g_tmp, (int)types[i]);
        lp.type = types[i];
        T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
        char *ref = NULL;
        for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
            char cmd[1536];
            snprintf(cmd, sizeof(cmd),
                     "LLMUX_SIMD=%s '%s' run --model '%s' -p 'Once upon a "
                     "time' -n 24 --temp 0 2>/dev/null",
                     levels[l], bin, p);
            FILE *f = popen(cmd, "r");
            T_CHECK(f != NULL);
            if (!f)
                continue;
            char *out = calloc(1, 65536);
            size_t n = out ? fread(out, 1, 65535, f) : 0;
            T_EQ_INT(pclose(f), 0);
            if (!out)
                continue;
            out[n] = '\0';
            T_CHECK(n > 0);
            if (!ref) {
                ref = out;
                continue;
            }
            if (strcmp(out, ref) != 0)
                fprintf(stderr, "  %s at %s differs from none\n",
                        le_type_get(types[i])->name, levels[l]);
            T_CHECK(strcmp(out, ref) == 0);
            free(out);
        }
        free(ref);
    }
}

static void
cleanup_tmp(void)
{
    DIR *dir = opendir(g_tmp);
    struct dirent *e;
    char p[600];
    while (dir && (e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%s", g_tmp, e->d_name);
        unlink(p);
    }
    if (dir)
        closedir(dir);
    rmdir(g_tmp);
}

int
main(void)
{
    char *d = e2e_temp_dir();
    snprintf(g_tmp, sizeof(g_tmp), "%s", d ? d : "/tmp");
    free(d);
    T_RUN(test_stories_reference);
    T_RUN(test_tiny_random_reference);
    T_RUN(test_stop_and_seed);
    T_RUN(test_cli_run);
    T_RUN(test_f32_vs_q8_0);
    T_RUN(test_kv_q8_0);
    T_RUN(test_kv_f32);
    T_RUN(test_batch_equals_sequential);
    T_RUN(test_threads_identical);
    T_RUN(test_sessions_in_parallel);
    T_RUN(test_context_limit);
    T_RUN(test_cancel_and_cache);
    T_RUN(test_bad_shapes);
    T_RUN(test_tied_output);
    T_RUN(test_qwen2);
    T_RUN(test_qwen3);
    T_RUN(test_gemma3);
    T_RUN(test_gemma2);
    T_RUN(test_moe);
    T_RUN(test_yarn);
    T_RUN(test_mistral3);
    T_RUN(test_phi3);
    T_RUN(test_granite);
    T_RUN(test_gptoss);
    T_RUN(test_deepseek2);
    T_RUN(test_harmony_vocab);
    T_RUN(test_rope_freqs);
    T_RUN(test_all_types);
    T_RUN(test_packed_logits);
    T_RUN(test_levels_same_text);
    cleanup_tmp();
    return T_END();
}
