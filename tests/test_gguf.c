/*
 * test_gguf.c: the GGUF reader against the real models in
 * $LLMUX_TEST_DATA/models and against hostile files made with the test
 * writer (tests/lib/gguf_writer.h) and then damaged.
 */
#include <stdlib.h>
#include <unistd.h>

#include "../local_engine/le_int.h"
#include "harness.h"
#include "lib/gguf_writer.h"

static const char *
data_dir(void)
{
    const char *d = getenv("LLMUX_TEST_DATA");
    return d && *d ? d : "../shared/data";
}

static void
test_stories(void)
{
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", data_dir());
    for (int mode = 0; mode < 2; mode++) {
        struct le_gguf *g = NULL;
        enum le_status st = le_gguf_open(
            path, mode ? LE_GGUF_READ | LE_GGUF_MLOCK : LE_GGUF_MMAP, &g, err,
            sizeof(err));
        T_EQ_INT(st, LE_OK);
        if (st != LE_OK) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        T_EQ_INT(g->version, 3);
        T_EQ_INT(g->n_tensors, 48);
        T_EQ_INT(g->alignment, 32);
        struct le_gguf_str s;
        T_CHECK(le_gguf_get_str(g, "general.architecture", &s) &&
                le_gguf_str_eq(s, "llama"));
        T_CHECK(le_gguf_get_str(g, "tokenizer.ggml.model", &s) &&
                le_gguf_str_eq(s, "llama"));
        uint32_t u = 0;
        T_CHECK(le_gguf_get_u32(g, "llama.embedding_length", &u) && u == 64);
        T_CHECK(le_gguf_get_u32(g, "llama.block_count", &u) && u == 5);
        T_CHECK(le_gguf_get_u32(g, "llama.feed_forward_length", &u) &&
                u == 172);
        T_CHECK(le_gguf_get_u32(g, "llama.attention.head_count_kv", &u) &&
                u == 4);
        T_CHECK(le_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u) &&
                u == 2);
        T_CHECK(le_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u) &&
                u == 4294967295u);
        float f = 0;
        T_CHECK(le_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon",
                                &f) &&
                fabsf(f - 1e-5f) < 1e-9f);
        T_CHECK(!le_gguf_find(g, "llama.rope.freq_base"));
        const struct le_gguf_kv *kv = le_gguf_find(g, "tokenizer.ggml.tokens");
        T_CHECK(kv && kv->type == LE_GGUF_ARRAY &&
                kv->v.arr.type == LE_GGUF_STRING && kv->v.arr.n == 512);
        if (kv && kv->v.arr.strs) {
            T_CHECK(le_gguf_str_eq(kv->v.arr.strs[0], "<unk>"));
            T_CHECK(le_gguf_str_eq(kv->v.arr.strs[1], "<s>"));
            T_CHECK(le_gguf_str_eq(kv->v.arr.strs[2], "</s>"));
        }
        kv = le_gguf_find(g, "tokenizer.ggml.scores");
        T_CHECK(kv && kv->v.arr.type == LE_GGUF_FLOAT32 && kv->v.arr.n == 512);
        const struct le_gguf_tensor *t = le_gguf_tensor(g, "blk.0.attn_k.weight");
        T_CHECK(t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 32 &&
                t->type == LE_TYPE_F32 && t->nbytes == 64 * 32 * 4);
        t = le_gguf_tensor(g, "blk.4.ffn_down.weight");
        T_CHECK(t && t->ne[0] == 172 && t->ne[1] == 64);
        t = le_gguf_tensor(g, "output_norm.weight");
        T_CHECK(t && t->n_dims == 1 && t->ne[0] == 64 && t->ne[1] == 1);
        T_CHECK(le_gguf_tensor(g, "nope") == NULL);
        int64_t params = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const struct le_gguf_tensor *x = &g->tensors[i];
            params += x->ne[0] * x->ne[1] * x->ne[2] * x->ne[3];
            T_CHECK((uintptr_t)x->data % 32 == 0);
        }
        T_EQ_INT(params, 292800);
        le_gguf_free(g);
    }
}

static void
test_tiny_random(void)
{
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/models/llama-2-tiny-random.gguf",
             data_dir());
    struct le_gguf *g = NULL;
    enum le_status st = le_gguf_open(path, LE_GGUF_MMAP, &g, err, sizeof(err));
    T_EQ_INT(st, LE_OK);
    if (st != LE_OK) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    T_EQ_INT(g->n_tensors, 12);
    uint32_t u = 0;
    T_CHECK(le_gguf_get_u32(g, "general.file_type", &u) && u == 1);
    struct le_gguf_str s;
    T_CHECK(le_gguf_get_str(g, "general.name", &s) &&
            le_gguf_str_eq(s, "LLaMA v2"));
    const struct le_gguf_kv *kv = le_gguf_find(g, "tokenizer.ggml.tokens");
    T_CHECK(kv && kv->v.arr.n == 32000);
    const struct le_gguf_tensor *t = le_gguf_tensor(g, "token_embd.weight");
    T_CHECK(t && t->type == LE_TYPE_F16 && t->ne[0] == 8 && t->ne[1] == 32000);
    int n_f16 = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        n_f16 += g->tensors[i].type == LE_TYPE_F16;
    T_EQ_INT(n_f16, 9);
    le_gguf_free(g);
}


static void
test_vocab_files(void)
{
    static const struct {
        const char *name, *model, *pre;
        uint64_t n_vocab;
    } v[] = {
        {"llama-spm", "llama", "default", 32000},
        {"phi-3", "llama", "default", 32064},
        {"gpt-2", "gpt2", "gpt-2", 50257},
        {"falcon", "gpt2", "falcon", 65024},
        {"deepseek-coder", "gpt2", "deepseek-coder", 32256},
        {"starcoder", "gpt2", "starcoder", 49152},
        {"bert-bge", "bert", "bert-bge", 30522},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char path[1024], err[512];
        snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-%s.gguf",
                 data_dir(), v[i].name);
        struct le_gguf *g = NULL;
        enum le_status st = le_gguf_open(path, i % 2 ? LE_GGUF_READ : 0, &g,
                                         err, sizeof(err));
        T_EQ_INT(st, LE_OK);
        if (st != LE_OK) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        T_EQ_INT(g->n_tensors, 0);
        struct le_gguf_str s;
        T_CHECK(le_gguf_get_str(g, "tokenizer.ggml.model", &s) &&
                le_gguf_str_eq(s, v[i].model));
        if (le_gguf_get_str(g, "tokenizer.ggml.pre", &s))
            T_CHECK(le_gguf_str_eq(s, v[i].pre));
        else /* SPM files may omit it; BPE files must have it */
            T_CHECK(strcmp(v[i].model, "llama") == 0);
        const struct le_gguf_kv *kv = le_gguf_find(g, "tokenizer.ggml.tokens");
        T_CHECK(kv && kv->type == LE_GGUF_ARRAY &&
                kv->v.arr.type == LE_GGUF_STRING &&
                kv->v.arr.n == v[i].n_vocab && kv->v.arr.strs);
        kv = le_gguf_find(g, "tokenizer.ggml.merges");
        if (strcmp(v[i].model, "gpt2") == 0)
            T_CHECK(kv && kv->v.arr.type == LE_GGUF_STRING &&
                    kv->v.arr.n > 1000);
        le_gguf_free(g);
    }
}

/* ------------------------------------------------------------------ */
/* Files made with the writer.                                          */

static float small_f32[32], small_q8[128], small_q4k[256];

/* A file with a key of every type and three tensors of three types. */
static int
build_small(uint8_t **buf, size_t *len, struct gguf_w_layout *lay,
            uint32_t alignment)
{
    struct gguf_w *w = gguf_w_new();
    if (!w)
        return -1;
    for (int i = 0; i < 32; i++)
        small_f32[i] = (float)i * 0.25f - 3.0f;
    for (int i = 0; i < 128; i++)
        small_q8[i] = (float)((i * 37) % 101 - 50) / 25.0f;
    for (int i = 0; i < 256; i++)
        small_q4k[i] = sinf((float)i * 0.1f);
    if (alignment)
        gguf_w_set_alignment(w, alignment);
    gguf_w_add_u8(w, "k.u8", 200);
    gguf_w_add_i8(w, "k.i8", -100);
    gguf_w_add_u16(w, "k.u16", 60000);
    gguf_w_add_i16(w, "k.i16", -30000);
    gguf_w_add_u32(w, "k.u32", 4000000000u);
    gguf_w_add_i32(w, "k.i32", -2000000000);
    gguf_w_add_f32(w, "k.f32", 1.5f);
    gguf_w_add_bool(w, "k.bool", 1);
    gguf_w_add_str(w, "k.str", "hello");
    gguf_w_add_strn(w, "k.empty", "", 0);
    gguf_w_add_u64(w, "k.u64", 1ull << 40);
    gguf_w_add_i64(w, "k.i64", -(1ll << 40));
    gguf_w_add_f64(w, "k.f64", 0.125);
    uint8_t a8[3] = {1, 2, 3};
    gguf_w_add_arr(w, "k.arr.u8", LE_GGUF_UINT8, a8, 3);
    int32_t a32[2] = {-7, 9};
    gguf_w_add_arr(w, "k.arr.i32", LE_GGUF_INT32, a32, 2);
    float af[4] = {0.5f, -1, 2, 3};
    gguf_w_add_arr(w, "k.arr.f32", LE_GGUF_FLOAT32, af, 4);
    const char *strs[] = {"zero", "", "two"};
    gguf_w_add_str_arr(w, "k.arr.str", strs, 3);
    gguf_w_add_arr(w, "k.arr.empty", LE_GGUF_UINT8, a8, 0);
    int64_t ne_a[2] = {8, 4}, ne_b[2] = {64, 2}, ne_c[1] = {256};
    gguf_w_add_tensor(w, "t.alpha", LE_TYPE_F32, 2, ne_a, small_f32);
    gguf_w_add_tensor(w, "t.beta", LE_TYPE_Q8_0, 2, ne_b, small_q8);
    gguf_w_add_tensor(w, "t.gamma", LE_TYPE_Q4_K, 1, ne_c, small_q4k);
    int rc = gguf_w_write_mem(w, buf, len, lay);
    gguf_w_free(w);
    return rc;
}

/* Opens a private, exact-size copy so ASan sees any read past the end. */
static enum le_status
open_copy(const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    uint8_t *c = malloc(len ? len : 1);
    if (!c)
        return LE_ENOMEM;
    if (len)
        memcpy(c, buf, len);
    struct le_gguf *g = NULL;
    enum le_status st = le_gguf_open_mem(c, len, &g, err, errlen);
    if (st == LE_OK) {
        /* Touch everything the reader vouched for. */
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const uint8_t *d = g->tensors[i].data;
            for (size_t j = 0; j < g->tensors[i].nbytes; j++)
                sink ^= d[j];
        }
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const struct le_gguf_kv *kv = &g->kv[i];
            for (uint64_t j = 0; j < kv->key.len; j++)
                sink ^= (uint8_t)kv->key.ptr[j];
            if (kv->type == LE_GGUF_ARRAY && kv->v.arr.strs)
                for (uint64_t k = 0; k < kv->v.arr.n; k++)
                    for (uint64_t j = 0; j < kv->v.arr.strs[k].len; j++)
                        sink ^= (uint8_t)kv->v.arr.strs[k].ptr[j];
        }
        (void)sink;
        le_gguf_free(g);
    }
    free(c);
    return st;
}

/* Expects a clean rejection: an error status and a message naming the
 * source; prints the message when VERBOSE is set. */
static int
rejected(const uint8_t *buf, size_t len, const char *what)
{
    char err[512] = "";
    enum le_status st = open_copy(buf, len, err, sizeof(err));
    if (getenv("VERBOSE"))
        fprintf(stderr, "  %s: %s\n", what, err);
    if (st == LE_OK) {
        fprintf(stderr, "  %s: accepted\n", what);
        return 0;
    }
    if (strncmp(err, "<memory>: ", 10) != 0 || strlen(err) < 20) {
        fprintf(stderr, "  %s: bad message '%s'\n", what, err);
        return 0;
    }
    return st == LE_EFORMAT || st == LE_ENOMEM;
}

static void
put32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static void
put64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
get64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* Offset just past the string s (length-prefixed) in buf. */
static size_t
after_str(const uint8_t *buf, size_t len, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 8; i + n <= len; i++)
        if (memcmp(buf + i, s, n) == 0 && get64(buf + i - 8) == n)
            return i + n;
    return 0;
}

static void
test_writer_roundtrip(void)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    struct gguf_w_layout lay;
    T_EQ_INT(build_small(&buf, &len, &lay, 0), 0);
    if (!buf)
        return;
    T_EQ_INT(lay.data_start % 32, 0);
    T_EQ_INT(lay.size, len);
    struct le_gguf *g = NULL;
    char err[256];
    T_EQ_INT(le_gguf_open_mem(buf, len, &g, err, sizeof(err)), LE_OK);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        free(buf);
        return;
    }
    T_EQ_INT(g->version, 3);
    T_EQ_INT(g->n_kv, 18);
    T_EQ_INT(g->n_tensors, 3);
    uint32_t u;
    int64_t i64;
    float f;
    bool bv;
    struct le_gguf_str s;
    T_CHECK(le_gguf_get_u32(g, "k.u8", &u) && u == 200);
    T_CHECK(le_gguf_get_i64(g, "k.i8", &i64) && i64 == -100);
    T_CHECK(!le_gguf_get_u32(g, "k.i8", &u)); /* negative: out of range */
    T_CHECK(le_gguf_get_u32(g, "k.u16", &u) && u == 60000);
    T_CHECK(le_gguf_get_i64(g, "k.i16", &i64) && i64 == -30000);
    T_CHECK(le_gguf_get_u32(g, "k.u32", &u) && u == 4000000000u);
    T_CHECK(le_gguf_get_i64(g, "k.i32", &i64) && i64 == -2000000000);
    T_CHECK(le_gguf_get_f32(g, "k.f32", &f) && f == 1.5f);
    T_CHECK(le_gguf_get_bool(g, "k.bool", &bv) && bv);
    T_CHECK(!le_gguf_get_u32(g, "k.bool", &u));
    T_CHECK(le_gguf_get_str(g, "k.str", &s) && le_gguf_str_eq(s, "hello"));
    T_CHECK(le_gguf_get_str(g, "k.empty", &s) && s.len == 0);
    T_CHECK(!le_gguf_get_u32(g, "k.u64", &u)); /* 2^40 > u32 */
    T_CHECK(le_gguf_get_i64(g, "k.u64", &i64) && i64 == (1ll << 40));
    T_CHECK(le_gguf_get_i64(g, "k.i64", &i64) && i64 == -(1ll << 40));
    T_CHECK(le_gguf_get_f32(g, "k.f64", &f) && f == 0.125f);
    T_CHECK(!le_gguf_get_f32(g, "k.u8", &f));
    T_CHECK(!le_gguf_get_str(g, "k.u8", &s));
    T_CHECK(!le_gguf_get_u32(g, "k.missing", &u));
    const struct le_gguf_kv *kv = le_gguf_find(g, "k.arr.i32");
    T_CHECK(kv && kv->type == LE_GGUF_ARRAY &&
            kv->v.arr.type == LE_GGUF_INT32 && kv->v.arr.n == 2);
    if (kv) {
        int32_t v[2];
        memcpy(v, kv->v.arr.data, 8);
        T_CHECK(v[0] == -7 && v[1] == 9);
    }
    kv = le_gguf_find(g, "k.arr.f32");
    T_CHECK(kv && kv->v.arr.n == 4 && kv->v.arr.type == LE_GGUF_FLOAT32);
    kv = le_gguf_find(g, "k.arr.str");
    T_CHECK(kv && kv->v.arr.n == 3 && kv->v.arr.strs &&
            le_gguf_str_eq(kv->v.arr.strs[0], "zero") &&
            kv->v.arr.strs[1].len == 0 &&
            le_gguf_str_eq(kv->v.arr.strs[2], "two"));
    kv = le_gguf_find(g, "k.arr.empty");
    T_CHECK(kv && kv->v.arr.n == 0);

    const struct le_gguf_tensor *t = le_gguf_tensor(g, "t.alpha");
    T_CHECK(t && t->type == LE_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 8 &&
            t->ne[1] == 4 && t->nbytes == 128 &&
            memcmp(t->data, small_f32, 128) == 0);
    t = le_gguf_tensor(g, "t.beta");
    T_CHECK(t && t->type == LE_TYPE_Q8_0 && t->nbytes == 4 * 34 &&
            t->offset % 32 == 0);
    if (t) {
        float back[128];
        le_type_get(LE_TYPE_Q8_0)->to_float(t->data, back, 128);
        double md = 0;
        for (int i = 0; i < 128; i++)
            md = fmax(md, fabs(back[i] - small_q8[i]));
        T_CHECK(md < 0.02);
    }
    t = le_gguf_tensor(g, "t.gamma");
    T_CHECK(t && t->type == LE_TYPE_Q4_K && t->n_dims == 1 &&
            t->nbytes == 144);
    le_gguf_free(g);
    free(buf);

    /* A non-default alignment is written and honoured. */
    T_EQ_INT(build_small(&buf, &len, &lay, 128), 0);
    if (buf) {
        T_EQ_INT(lay.data_start % 128, 0);
        T_EQ_INT(le_gguf_open_mem(buf, len, &g, err, sizeof(err)), LE_OK);
        if (g) {
            T_EQ_INT(g->alignment, 128);
            for (uint64_t i = 0; i < g->n_tensors; i++)
                T_EQ_INT(g->tensors[i].offset % 128, 0);
            le_gguf_free(g);
        }
        free(buf);
    }
}

static void
test_truncated(void)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    struct gguf_w_layout lay;
    T_EQ_INT(build_small(&buf, &len, &lay, 0), 0);
    if (!buf)
        return;
    /* Every byte boundary of header, key/values and tensor infos, then a
     * sample of the data section. */
    /* The writer pads after the last tensor too; cutting that padding
     * leaves a valid file, so cut only up to the end of the last tensor. */
    struct le_gguf *g = NULL;
    char err[256];
    size_t end = 0;
    T_EQ_INT(le_gguf_open_mem(buf, len, &g, err, sizeof(err)), LE_OK);
    for (uint64_t i = 0; g && i < g->n_tensors; i++) {
        size_t e = (size_t)((const uint8_t *)g->tensors[i].data - buf) +
                   g->tensors[i].nbytes;
        end = e > end ? e : end;
    }
    le_gguf_free(g);
    T_CHECK(end > lay.data_start && end <= len);
    int bad = 0, n = 0;
    for (size_t cut = 0; cut < end; cut += cut < lay.data_start ? 1 : 7) {
        char what[64];
        snprintf(what, sizeof(what), "cut at %zu", cut);
        if (!rejected(buf, cut, what))
            bad++;
        n++;
    }
    T_EQ_INT(bad, 0);
    T_CHECK(n > 400);
    char e2[256];
    T_EQ_INT(open_copy(buf, end, e2, sizeof(e2)), LE_OK); /* no padding */
    T_EQ_INT(open_copy(buf, len, e2, sizeof(e2)), LE_OK);
    free(buf);
}

/* Applies fn to a fresh copy of the small file and expects rejection. */
#define DAMAGE(desc, stmt)                                                   \
    do {                                                                     \
        uint8_t *b = malloc(len);                                            \
        memcpy(b, buf, len);                                                 \
        size_t blen = len;                                                   \
        (void)blen;                                                          \
        stmt;                                                                \
        T_CHECK(rejected(b, blen, desc));                                    \
        free(b);                                                             \
    } while (0)

static void
test_hostile(void)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    struct gguf_w_layout lay;
    T_EQ_INT(build_small(&buf, &len, &lay, 0), 0);
    if (!buf)
        return;
    size_t alpha = after_str(buf, len, "t.alpha"); /* -> n_dims */
    size_t beta = after_str(buf, len, "t.beta");
    size_t gamma = after_str(buf, len, "t.gamma");
    size_t kstr = after_str(buf, len, "k.arr.str"); /* -> value type */
    size_t kf32 = after_str(buf, len, "k.arr.f32");
    size_t ku8 = after_str(buf, len, "k.u8");
    T_CHECK(alpha && beta && gamma && kstr && kf32 && ku8);
    if (!(alpha && beta && gamma && kstr && kf32 && ku8)) {
        free(buf);
        return;
    }
    /* alpha: n_dims(4) ne0 ne1 (16) type(4) offset(8) */
    size_t a_type = alpha + 4 + 16, a_off = a_type + 4;
    size_t b_ne0 = beta + 4, b_type = beta + 4 + 16, b_off = b_type + 4;
    size_t g_type = gamma + 4 + 8, g_off = g_type + 4;

    DAMAGE("bad magic", b[0] = 'X');
    DAMAGE("version 1", put32(b + 4, 1));
    DAMAGE("version 4", put32(b + 4, 4));
    DAMAGE("big-endian", put32(b + 4, 3u << 24));
    DAMAGE("n_kv 2^62", put64(b + 16, 1ull << 62));
    DAMAGE("n_kv 2^64-1", put64(b + 16, UINT64_MAX));
    DAMAGE("n_kv + 1", put64(b + 16, get64(b + 16) + 1));
    DAMAGE("n_tensors 2^62", put64(b + 8, 1ull << 62));
    DAMAGE("n_tensors + 1", put64(b + 8, get64(b + 8) + 1));
    DAMAGE("key len huge", put64(b + lay.kv_start, 1ull << 62));
    DAMAGE("key len past end", put64(b + lay.kv_start, len));
    DAMAGE("key len 0", put64(b + lay.kv_start, 0));
    DAMAGE("value type 13", put32(b + ku8, 13));
    DAMAGE("value type ~0", put32(b + ku8, 0xffffffffu));
    DAMAGE("array elem type 13", put32(b + kf32 + 4, 13));
    DAMAGE("nested array", put32(b + kf32 + 4, LE_GGUF_ARRAY));
    DAMAGE("array n huge", put64(b + kf32 + 8, 1ull << 62));
    DAMAGE("array n 2^61 f32 (n*4 overflows 2^63)",
           put64(b + kf32 + 8, 1ull << 61));
    DAMAGE("array n past end", put64(b + kf32 + 8, len / 4));
    DAMAGE("string array n huge", put64(b + kstr + 8, 1ull << 62));
    DAMAGE("string array n past end", put64(b + kstr + 8, len / 8 - 1));
    DAMAGE("string in array len huge", put64(b + kstr + 16, 1ull << 63));
    DAMAGE("tensor type 4 (removed)", put32(b + a_type, 4));
    DAMAGE("tensor type 39", put32(b + a_type, 39));
    DAMAGE("tensor type ~0", put32(b + g_type, 0xffffffffu));
    DAMAGE("n_dims 5", put32(b + alpha, 5));
    DAMAGE("n_dims 0", put32(b + alpha, 0));
    DAMAGE("n_dims ~0", put32(b + alpha, 0xffffffffu));
    DAMAGE("zero dim", put64(b + alpha + 4, 0));
    DAMAGE("dim 2^63", put64(b + alpha + 12, 1ull << 63));
    DAMAGE("dims overflow int64", (put64(b + b_ne0, 1ull << 32),
                                   put64(b + b_ne0 + 8, 1ull << 32)));
    DAMAGE("huge tensor", put64(b + b_ne0 + 8, 1ull << 50));
    DAMAGE("ne0 not a block multiple", put64(b + b_ne0, 48));
    DAMAGE("f32 shape grown", put64(b + alpha + 12, 400));
    DAMAGE("misaligned offset", put64(b + a_off, 1));
    DAMAGE("offset 16", put64(b + g_off, get64(b + g_off) + 16));
    DAMAGE("overlap", put64(b + b_off, get64(b + a_off)));
    DAMAGE("overlap 2", put64(b + g_off, get64(b + b_off)));
    DAMAGE("offset past end", put64(b + g_off, 1ull << 40));
    DAMAGE("offset ~0 aligned", put64(b + g_off, UINT64_MAX & ~31ull));
    DAMAGE("offset = data size",
           put64(b + g_off, (len - lay.data_start + 31) & ~(size_t)31));
    DAMAGE("tensor name len huge", put64(b + alpha - 7 - 8, 1ull << 62));
    DAMAGE("tensor name empty", put64(b + gamma - 7 - 8, 0));
    DAMAGE("duplicate tensor name", memcpy(b + alpha - 7, "t.gamma", 7));
    DAMAGE("duplicate key", memcpy(b + ku8 - 4, "k.i8", 4));
    DAMAGE("no data section", blen = lay.tensors_start + 1);
    free(buf);

    /* Alignment values, written as a real key. */
    static const struct {
        enum le_gguf_vtype t;
        uint64_t v;
    } aligns[] = {{LE_GGUF_UINT32, 0},  {LE_GGUF_UINT32, 3},
                  {LE_GGUF_UINT32, 48}, {LE_GGUF_UINT64, 1ull << 40},
                  {LE_GGUF_INT32, 0},   {LE_GGUF_STRING, 32},
                  {LE_GGUF_FLOAT32, 32}};
    for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
        struct gguf_w *w = gguf_w_new();
        if (aligns[i].t == LE_GGUF_UINT32)
            gguf_w_add_u32(w, "general.alignment", (uint32_t)aligns[i].v);
        else if (aligns[i].t == LE_GGUF_UINT64)
            gguf_w_add_u64(w, "general.alignment", aligns[i].v);
        else if (aligns[i].t == LE_GGUF_INT32)
            gguf_w_add_i32(w, "general.alignment", (int32_t)aligns[i].v);
        else if (aligns[i].t == LE_GGUF_STRING)
            gguf_w_add_str(w, "general.alignment", "32");
        else
            gguf_w_add_f32(w, "general.alignment", 32.0f);
        int64_t ne[1] = {32};
        gguf_w_add_tensor(w, "x", LE_TYPE_F32, 1, ne, small_f32);
        uint8_t *b = NULL;
        size_t bl = 0;
        T_EQ_INT(gguf_w_write_mem(w, &b, &bl, NULL), 0);
        if (b)
            T_CHECK(rejected(b, bl, "bad alignment"));
        free(b);
        gguf_w_free(w);
    }
}

/* general.alignment 1 is a power of two, but tensor data must still be
 * 4-byte aligned for the block loads: such a file is refused unless its
 * data happens to land aligned. */
static void
test_alignment_one(void)
{
    int n_misaligned = 0;
    for (int extra = 1; extra <= 4; extra++) {
        struct gguf_w *w = gguf_w_new();
        gguf_w_set_alignment(w, 1);
        gguf_w_add_strn(w, "pad", "xxxx", (size_t)extra);
        int64_t ne[1] = {8};
        gguf_w_add_tensor(w, "x", LE_TYPE_F32, 1, ne, small_f32);
        uint8_t *b = NULL;
        size_t bl = 0;
        struct gguf_w_layout lay;
        T_EQ_INT(gguf_w_write_mem(w, &b, &bl, &lay), 0);
        if (b) {
            char err[256] = "";
            enum le_status st = open_copy(b, bl, err, sizeof(err));
            if (lay.data_start % 4) {
                n_misaligned++;
                T_EQ_INT(st, LE_EFORMAT);
                T_CHECK(strstr(err, "4-byte aligned") != NULL);
            } else {
                T_EQ_INT(st, LE_OK);
            }
        }
        free(b);
        gguf_w_free(w);
    }
    T_EQ_INT(n_misaligned, 3);
}

static void
test_bitflips(void)
{
    /* Random damage: each must be handled (accepted or rejected with a
     * message) without a crash or an out-of-bounds read. */
    uint8_t *buf = NULL;
    size_t len = 0;
    struct gguf_w_layout lay;
    T_EQ_INT(build_small(&buf, &len, &lay, 0), 0);
    if (!buf)
        return;
    uint64_t r = 12345;
    int n_err_ok = 0, n_bad_msg = 0;
    for (int it = 0; it < 3000; it++) {
        uint8_t *b = malloc(len);
        memcpy(b, buf, len);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            size_t at = (size_t)(r % lay.data_start);
            b[at] ^= (uint8_t)(1u << ((r >> 32) % 8));
            if (it % 3 == 0) /* sometimes a whole byte of garbage */
                b[at] = (uint8_t)(r >> 40);
        }
        char err[512] = "";
        enum le_status st = open_copy(b, len, err, sizeof(err));
        if (st != LE_OK) {
            n_err_ok++;
            if (strlen(err) < 12)
                n_bad_msg++;
        }
        free(b);
    }
    T_EQ_INT(n_bad_msg, 0);
    T_CHECK(n_err_ok > 100);
    free(buf);
}

static void
test_files(void)
{
    char err[512];
    struct le_gguf *g = NULL;
    T_EQ_INT(le_gguf_open("/nonexistent/x.gguf", 0, &g, err, sizeof(err)),
             LE_EIO);
    T_CHECK(strstr(err, "/nonexistent/x.gguf") != NULL);
    T_CHECK(le_gguf_open("/tmp", 0, &g, err, sizeof(err)) != LE_OK);
    T_CHECK(strstr(err, "/tmp") != NULL);

    char path[] = "/tmp/llmux_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    T_CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    /* Empty and short files. */
    T_EQ_INT(le_gguf_open(path, 0, &g, err, sizeof(err)), LE_EFORMAT);
    T_CHECK(strstr(err, path) != NULL);

    struct gguf_w_llama p = {.n_vocab = 300,
                             .n_embd = 64,
                             .n_layer = 2,
                             .n_head = 4,
                             .n_head_kv = 2,
                             .n_ff = 96,
                             .type = LE_TYPE_Q8_0,
                             .seed = 7};
    T_EQ_INT(gguf_w_llama_write(&p, path), 0);
    for (int mode = 0; mode < 3; mode++) {
        int m = mode == 0 ? LE_GGUF_MMAP
                : mode == 1 ? LE_GGUF_READ
                            : LE_GGUF_MMAP | LE_GGUF_MLOCK;
        T_EQ_INT(le_gguf_open(path, m, &g, err, sizeof(err)), LE_OK);
        if (!g) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        T_EQ_INT(g->n_tensors, 3 + 9 * 2);
        struct le_gguf_str s;
        T_CHECK(le_gguf_get_str(g, "general.architecture", &s) &&
                le_gguf_str_eq(s, "llama"));
        uint32_t u;
        T_CHECK(le_gguf_get_u32(g, "llama.rope.dimension_count", &u) &&
                u == 16);
        const struct le_gguf_kv *kv = le_gguf_find(g, "tokenizer.ggml.tokens");
        T_CHECK(kv && kv->v.arr.n == 300 &&
                le_gguf_str_eq(kv->v.arr.strs[3], "<0x00>") &&
                le_gguf_str_eq(kv->v.arr.strs[258], "<0xFF>") &&
                le_gguf_str_eq(kv->v.arr.strs[259], "\xe2\x96\x81"));
        const struct le_gguf_tensor *t =
            le_gguf_tensor(g, "blk.1.attn_k.weight");
        T_CHECK(t && t->type == LE_TYPE_Q8_0 && t->ne[0] == 64 &&
                t->ne[1] == 32);
        t = le_gguf_tensor(g, "blk.0.ffn_down.weight");
        T_CHECK(t && t->type == LE_TYPE_Q8_0 && t->ne[0] == 96 &&
                t->ne[1] == 64);
        t = le_gguf_tensor(g, "blk.0.ffn_norm.weight");
        T_CHECK(t && t->type == LE_TYPE_F32 && t->n_dims == 1);
        le_gguf_free(g);
    }
    /* Same seed, F32: the Q8_0 weights are those floats quantised. */
    struct gguf_w *w32 = gguf_w_new(), *w8 = gguf_w_new();
    p.type = LE_TYPE_F32;
    T_EQ_INT(gguf_w_llama_fill(w32, &p), 0);
    p.type = LE_TYPE_Q8_0;
    T_EQ_INT(gguf_w_llama_fill(w8, &p), 0);
    uint8_t *b32 = NULL, *b8 = NULL;
    size_t l32 = 0, l8 = 0;
    struct le_gguf *g32 = NULL, *g8 = NULL;
    if (gguf_w_write_mem(w32, &b32, &l32, NULL) == 0 &&
        gguf_w_write_mem(w8, &b8, &l8, NULL) == 0 &&
        le_gguf_open_mem(b32, l32, &g32, err, sizeof(err)) == LE_OK &&
        le_gguf_open_mem(b8, l8, &g8, err, sizeof(err)) == LE_OK) {
        const struct le_gguf_tensor *a = le_gguf_tensor(g32, "output.weight");
        const struct le_gguf_tensor *q = le_gguf_tensor(g8, "output.weight");
        T_CHECK(a && q && a->type == LE_TYPE_F32 && q->type == LE_TYPE_Q8_0);
        if (a && q) {
            float *x = malloc(64 * 300 * sizeof(float));
            le_type_get(LE_TYPE_Q8_0)->to_float(q->data, x, 64 * 300);
            double md = 0;
            const float *af = a->data;
            for (int i = 0; i < 64 * 300; i++)
                md = fmax(md, fabs(x[i] - af[i]));
            T_CHECK(md < 0.125 / 127 + 1e-4); /* |w| < 1/8: half a step */
            free(x);
        }
    } else {
        T_CHECK(0);
    }
    le_gguf_free(g32);
    le_gguf_free(g8);
    free(b32);
    free(b8);
    gguf_w_free(w32);
    gguf_w_free(w8);
    /* Bad parameters fail cleanly. */
    struct gguf_w *wb = gguf_w_new();
    p.n_head = 5;
    T_EQ_INT(gguf_w_llama_fill(wb, &p), -1);
    uint8_t *bb = NULL;
    size_t lb;
    T_EQ_INT(gguf_w_write_mem(wb, &bb, &lb, NULL), -1);
    gguf_w_free(wb);
    unlink(path);
}

static void
test_v2(void)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    T_EQ_INT(build_small(&buf, &len, NULL, 0), 0);
    if (!buf)
        return;
    put32(buf + 4, 2);
    struct le_gguf *g = NULL;
    char err[256];
    T_EQ_INT(le_gguf_open_mem(buf, len, &g, err, sizeof(err)), LE_OK);
    if (g) {
        T_EQ_INT(g->version, 2);
        le_gguf_free(g);
    }
    /* Zero tensors and zero keys is a valid (empty) file. */
    struct gguf_w *w = gguf_w_new();
    uint8_t *b = NULL;
    size_t bl = 0;
    T_EQ_INT(gguf_w_write_mem(w, &b, &bl, NULL), 0);
    T_CHECK(bl == 24 || bl == 32);
    /* Without tensors the file may end right after the header. */
    T_EQ_INT(le_gguf_open_mem(b, 24, &g, err, sizeof(err)), LE_OK);
    if (g) {
        T_EQ_INT(g->n_kv, 0);
        T_CHECK(le_gguf_find(g, "x") == NULL);
        T_CHECK(le_gguf_tensor(g, "x") == NULL);
        le_gguf_free(g);
    }
    free(b);
    gguf_w_free(w);
    free(buf);
}

int
main(void)
{
    T_RUN(test_stories);
    T_RUN(test_tiny_random);
    T_RUN(test_vocab_files);
    T_RUN(test_writer_roundtrip);
    T_RUN(test_truncated);
    T_RUN(test_hostile);
    T_RUN(test_alignment_one);
    T_RUN(test_bitflips);
    T_RUN(test_files);
    T_RUN(test_v2);
    return T_END();
}
