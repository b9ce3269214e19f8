/*
 * gguf_writer.c: GGUF v3 writer for tests (see gguf_writer.h).
 *
 * Everything is serialised little-endian at add time into per-item byte
 * buffers; write_mem concatenates header, key/value pairs, tensor infos,
 * padding and tensor data (each tensor padded to the alignment).
 */
#include "gguf_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wbuf {
    uint8_t *p;
    size_t len, cap;
    int failed;
};

static void
wb_put(struct wbuf *b, const void *src, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void
wb_u32(struct wbuf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                    (uint8_t)(v >> 24)};
    wb_put(b, x, 4);
}

static void
wb_u64(struct wbuf *b, uint64_t v)
{
    wb_u32(b, (uint32_t)v);
    wb_u32(b, (uint32_t)(v >> 32));
}

static void
wb_str(struct wbuf *b, const char *s, size_t len)
{
    wb_u64(b, len);
    wb_put(b, s, len);
}

struct wtensor {
    char *name;
    int n_dims;
    int64_t ne[4];
    enum le_type type;
    uint8_t *data;
    size_t nbytes;
};

struct gguf_w {
    struct wbuf kv; /* serialised pairs */
    uint64_t n_kv;
    struct wtensor *t;
    size_t n_t, cap_t;
    uint32_t alignment;
    int failed;
};

struct gguf_w *
gguf_w_new(void)
{
    struct gguf_w *w = calloc(1, sizeof(*w));
    if (w)
        w->alignment = 32;
    return w;
}

void
gguf_w_free(struct gguf_w *w)
{
    if (!w)
        return;
    free(w->kv.p);
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w);
}

void
gguf_w_set_alignment(struct gguf_w *w, uint32_t alignment)
{
    if (w)
        w->alignment = alignment;
}

static void
kv_head(struct gguf_w *w, const char *key, enum le_gguf_vtype t)
{
    wb_str(&w->kv, key, strlen(key));
    wb_u32(&w->kv, (uint32_t)t);
    w->n_kv++;
}

static void
put_scalar(struct wbuf *b, enum le_gguf_vtype t, const void *v)
{
    uint8_t x[8];
    switch (t) {
    case LE_GGUF_UINT8:
    case LE_GGUF_INT8:
    case LE_GGUF_BOOL:
        wb_put(b, v, 1);
        break;
    case LE_GGUF_UINT16:
    case LE_GGUF_INT16: {
        uint16_t u;
        memcpy(&u, v, 2);
        x[0] = (uint8_t)u;
        x[1] = (uint8_t)(u >> 8);
        wb_put(b, x, 2);
        break;
    }
    case LE_GGUF_UINT32:
    case LE_GGUF_INT32:
    case LE_GGUF_FLOAT32: {
        uint32_t u;
        memcpy(&u, v, 4);
        wb_u32(b, u);
        break;
    }
    default: {
        uint64_t u;
        memcpy(&u, v, 8);
        wb_u64(b, u);
        break;
    }
    }
}

static size_t
scalar_size(enum le_gguf_vtype t)
{
    switch (t) {
    case LE_GGUF_UINT8:
    case LE_GGUF_INT8:
    case LE_GGUF_BOOL:
        return 1;
    case LE_GGUF_UINT16:
    case LE_GGUF_INT16:
        return 2;
    case LE_GGUF_UINT32:
    case LE_GGUF_INT32:
    case LE_GGUF_FLOAT32:
        return 4;
    case LE_GGUF_UINT64:
    case LE_GGUF_INT64:
    case LE_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

static void
add_scalar(struct gguf_w *w, const char *key, enum le_gguf_vtype t,
           const void *v)
{
    if (!w)
        return;
    kv_head(w, key, t);
    put_scalar(&w->kv, t, v);
}

void
gguf_w_add_u8(struct gguf_w *w, const char *key, uint8_t v)
{
    add_scalar(w, key, LE_GGUF_UINT8, &v);
}

void
gguf_w_add_i8(struct gguf_w *w, const char *key, int8_t v)
{
    add_scalar(w, key, LE_GGUF_INT8, &v);
}

void
gguf_w_add_u16(struct gguf_w *w, const char *key, uint16_t v)
{
    add_scalar(w, key, LE_GGUF_UINT16, &v);
}

void
gguf_w_add_i16(struct gguf_w *w, const char *key, int16_t v)
{
    add_scalar(w, key, LE_GGUF_INT16, &v);
}

void
gguf_w_add_u32(struct gguf_w *w, const char *key, uint32_t v)
{
    add_scalar(w, key, LE_GGUF_UINT32, &v);
}

void
gguf_w_add_i32(struct gguf_w *w, const char *key, int32_t v)
{
    add_scalar(w, key, LE_GGUF_INT32, &v);
}

void
gguf_w_add_f32(struct gguf_w *w, const char *key, float v)
{
    add_scalar(w, key, LE_GGUF_FLOAT32, &v);
}

void
gguf_w_add_bool(struct gguf_w *w, const char *key, int v)
{
    uint8_t b = v ? 1 : 0;
    add_scalar(w, key, LE_GGUF_BOOL, &b);
}

void
gguf_w_add_u64(struct gguf_w *w, const char *key, uint64_t v)
{
    add_scalar(w, key, LE_GGUF_UINT64, &v);
}

void
gguf_w_add_i64(struct gguf_w *w, const char *key, int64_t v)
{
    add_scalar(w, key, LE_GGUF_INT64, &v);
}

void
gguf_w_add_f64(struct gguf_w *w, const char *key, double v)
{
    add_scalar(w, key, LE_GGUF_FLOAT64, &v);
}

void
gguf_w_add_strn(struct gguf_w *w, const char *key, const char *v, size_t len)
{
    if (!w)
        return;
    kv_head(w, key, LE_GGUF_STRING);
    wb_str(&w->kv, v, len);
}

void
gguf_w_add_str(struct gguf_w *w, const char *key, const char *v)
{
    gguf_w_add_strn(w, key, v, strlen(v));
}

void
gguf_w_add_arr(struct gguf_w *w, const char *key,
               enum le_gguf_vtype elem_type, const void *data, size_t n)
{
    if (!w)
        return;
    size_t sz = scalar_size(elem_type);
    if (sz == 0) {
        w->failed = 1;
        return;
    }
    kv_head(w, key, LE_GGUF_ARRAY);
    wb_u32(&w->kv, (uint32_t)elem_type);
    wb_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++)
        put_scalar(&w->kv, elem_type, (const uint8_t *)data + i * sz);
}

void
gguf_w_add_str_arr(struct gguf_w *w, const char *key, const char *const *strs,
                   size_t n)
{
    if (!w)
        return;
    kv_head(w, key, LE_GGUF_ARRAY);
    wb_u32(&w->kv, LE_GGUF_STRING);
    wb_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++)
        wb_str(&w->kv, strs[i], strlen(strs[i]));
}

/* Appends a tensor entry; takes ownership of data. */
static void
push_tensor(struct gguf_w *w, const char *name, enum le_type type, int n_dims,
            const int64_t *ne, uint8_t *data, size_t nbytes)
{
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 16;
        struct wtensor *t = realloc(w->t, cap * sizeof(*t));
        if (!t) {
            free(data);
            w->failed = 1;
            return;
        }
        w->t = t;
        w->cap_t = cap;
    }
    struct wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name) {
        free(data);
        w->failed = 1;
        return;
    }
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->type = type;
    t->data = data;
    t->nbytes = nbytes;
    w->n_t++;
}

/* Bytes of a tensor of this shape, 0 if the shape does not fit the type. */
static size_t
shape_bytes(enum le_type type, int n_dims, const int64_t *ne)
{
    if (n_dims < 1 || n_dims > 4)
        return 0;
    size_t row = le_row_size(type, ne[0]);
    if (row == 0)
        return 0;
    size_t rows = 1;
    for (int d = 1; d < n_dims; d++) {
        if (ne[d] <= 0)
            return 0;
        rows *= (size_t)ne[d];
    }
    return row * rows;
}

void
gguf_w_add_tensor_raw(struct gguf_w *w, const char *name, enum le_type type,
                      int n_dims, const int64_t *ne, const void *bytes,
                      size_t nbytes)
{
    if (!w)
        return;
    size_t want = shape_bytes(type, n_dims, ne);
    if (want == 0 || want != nbytes) {
        w->failed = 1;
        return;
    }
    uint8_t *copy = malloc(nbytes ? nbytes : 1);
    if (!copy) {
        w->failed = 1;
        return;
    }
    memcpy(copy, bytes, nbytes);
    push_tensor(w, name, type, n_dims, ne, copy, nbytes);
}

void
gguf_w_add_tensor(struct gguf_w *w, const char *name, enum le_type type,
                  int n_dims, const int64_t *ne, const float *x)
{
    if (!w)
        return;
    const struct le_type_traits *tt = le_type_get((uint32_t)type);
    size_t nbytes = shape_bytes(type, n_dims, ne);
    if (!tt || !tt->from_float || nbytes == 0) {
        w->failed = 1;
        return;
    }
    uint8_t *data = malloc(nbytes);
    if (!data) {
        w->failed = 1;
        return;
    }
    size_t row = le_row_size(type, ne[0]);
    size_t rows = nbytes / row;
    for (size_t r = 0; r < rows; r++)
        tt->from_float(x + r * (size_t)ne[0], data + r * row, ne[0]);
    push_tensor(w, name, type, n_dims, ne, data, nbytes);
}

static size_t
pad_to(size_t n, size_t a)
{
    return n % a ? n + (a - n % a) : n;
}

int
gguf_w_write_mem(struct gguf_w *w, uint8_t **out, size_t *len,
                 struct gguf_w_layout *layout)
{
    if (!w || w->failed || w->kv.failed)
        return -1;
    size_t a = w->alignment ? w->alignment : 32;
    struct wbuf b = {0};
    wb_put(&b, "GGUF", 4);
    wb_u32(&b, 3);
    wb_u64(&b, w->n_t);
    int add_align = w->alignment != 32;
    wb_u64(&b, w->n_kv + (uint64_t)add_align);
    size_t kv_start = b.len;
    wb_put(&b, w->kv.p, w->kv.len);
    if (add_align) {
        const char *k = "general.alignment";
        wb_str(&b, k, strlen(k));
        wb_u32(&b, LE_GGUF_UINT32);
        wb_u32(&b, w->alignment);
    }
    size_t tensors_start = b.len;
    size_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        wb_str(&b, t->name, strlen(t->name));
        wb_u32(&b, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            wb_u64(&b, (uint64_t)t->ne[d]);
        wb_u32(&b, (uint32_t)t->type);
        wb_u64(&b, off);
        off = pad_to(off + t->nbytes, a);
    }
    static const uint8_t zeros[64];
    while (b.len % a && !b.failed)
        wb_put(&b, zeros, 1);
    size_t data_start = b.len;
    for (size_t i = 0; i < w->n_t; i++) {
        wb_put(&b, w->t[i].data, w->t[i].nbytes);
        while ((b.len - data_start) % a && !b.failed)
            wb_put(&b, zeros, 1);
    }
    if (b.failed) {
        free(b.p);
        return -1;
    }
    if (layout) {
        layout->kv_start = kv_start;
        layout->tensors_start = tensors_start;
        layout->data_start = data_start;
        layout->size = b.len;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

int
gguf_w_write_file(struct gguf_w *w, const char *path)
{
    uint8_t *buf;
    size_t len;
    if (gguf_w_write_mem(w, &buf, &len, NULL) != 0)
        return -1;
    FILE *f = fopen(path, "wb");
    int rc = -1;
    if (f) {
        rc = fwrite(buf, 1, len, f) == len ? 0 : -1;
        if (fclose(f) != 0)
            rc = -1;
    }
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Random llama model.                                                  */

static uint64_t
xs_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static float
xs_uniform(uint64_t *s) /* [-1, 1) */
{
    return (float)((xs_next(s) >> 40) * 0x1p-24 * 2.0 - 1.0);
}

/* Each tensor gets its own stream (seed mixed with the tensor's number),
 * so values do not depend on the order or type of other tensors: x[i] =
 * center + amp * uniform[-1, 1) for n floats. */
static void
fill_stream(float *x, size_t n, uint64_t seed, uint64_t salt, float center,
            float amp)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + salt * 0xbf58476d1ce4e5b9ull;
    s ^= s >> 31;
    if (s == 0)
        s = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < 8; i++)
        xs_next(&s);
    for (size_t i = 0; i < n; i++)
        x[i] = center + amp * xs_uniform(&s);
}

/* type, or F32 when rows of ne0 do not fill whole blocks of it */
static enum le_type
weight_type(enum le_type type, int64_t ne0)
{
    const struct le_type_traits *tt = le_type_get((uint32_t)type);
    return !tt || ne0 % tt->blck_size != 0 ? LE_TYPE_F32 : type;
}

static void
add_weight3(struct gguf_w *w, const char *name, enum le_type type,
            int64_t ne0, int64_t ne1, int64_t ne2, uint64_t seed,
            uint64_t salt, int is_norm)
{
    size_t n = (size_t)ne0 * (size_t)ne1 * (size_t)ne2;
    float *x = malloc(n * sizeof(float));
    if (!x) {
        w->failed = 1;
        return;
    }
    fill_stream(x, n, seed, salt, is_norm ? 1.0f : 0.0f,
                is_norm ? 0.1f : 1.0f / sqrtf((float)ne0));
    int64_t ne[3] = {ne0, ne1, ne2};
    type = is_norm ? LE_TYPE_F32 : weight_type(type, ne0);
    gguf_w_add_tensor(w, name, type, ne2 > 1 ? 3 : ne1 == 1 ? 1 : 2, ne, x);
    free(x);
}

static void
add_weight(struct gguf_w *w, const char *name, enum le_type type, int64_t ne0,
           int64_t ne1, uint64_t seed, uint64_t salt, int is_norm)
{
    add_weight3(w, name, type, ne0, ne1, 1, seed, salt, is_norm);
}

/* Piece i (0-based) of the generated vocabulary, written to buf. */
static void
make_piece(int i, char *buf, size_t cap)
{
    static const char sp[] = "\xe2\x96\x81"; /* U+2581 */
    if (i == 0) {
        snprintf(buf, cap, "%s", sp);
        return;
    }
    i--;
    if (i < 26) {
        snprintf(buf, cap, "%s%c", sp, 'a' + i);
        return;
    }
    i -= 26;
    if (i < 26) {
        snprintf(buf, cap, "%c", 'a' + i);
        return;
    }
    i -= 26;
    if (i < 26 * 26) {
        snprintf(buf, cap, "%c%c", 'a' + i / 26, 'a' + i % 26);
        return;
    }
    i -= 26 * 26;
    if (i < 26 * 26) {
        snprintf(buf, cap, "%s%c%c", sp, 'a' + i / 26, 'a' + i % 26);
        return;
    }
    i -= 26 * 26;
    snprintf(buf, cap, "%sw%d", sp, i);
}

/* deepseek2's attention of layer l, attn_output included.  kv_b is drawn
 * once as the legacy matrix W (H * (nope + v) rows of kv_lora floats,
 * row h * (nope + v) + i) and written as it is (ds_mla 0) or cut into
 * k_b[h][j][i] = W[h * (nope + v) + i][j] and v_b[h][vv][j] =
 * W[h * (nope + v) + nope + vv][j] (ds_mla 1), so the two layouts hold
 * the same floats from the same stream. */
static void
ds2_attention(struct gguf_w *w, const struct gguf_w_llama *p, int l,
              uint64_t salt)
{
    enum le_type t = p->type;
    uint64_t sd = p->seed;
    int64_t E = p->n_embd, H = p->n_head, L = p->kv_lora;
    int64_t nope = p->ds_nope, rope = p->ds_rope, nv = p->ds_v;
    char name[64];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%d." suffix, l), name)
    if (p->q_lora > 0) {
        add_weight(w, NAME("attn_q_a.weight"), t, E, p->q_lora, sd,
                   salt + 4001, 0);
        add_weight(w, NAME("attn_q_a_norm.weight"), t, p->q_lora, 1, sd,
                   salt + 4002, 1);
        add_weight(w, NAME("attn_q_b.weight"), t, p->q_lora,
                   H * (nope + rope), sd, salt + 4003, 0);
    } else {
        add_weight(w, NAME("attn_q.weight"), t, E, H * (nope + rope), sd,
                   salt + 1, 0);
    }
    add_weight(w, NAME("attn_kv_a_mqa.weight"), t, E, L + rope, sd,
               salt + 4004, 0);
    add_weight(w, NAME("attn_kv_a_norm.weight"), t, L, 1, sd, salt + 4005,
               1);
    size_t rows = (size_t)(H * (nope + nv)), n = rows * (size_t)L;
    float *kv = malloc(n * sizeof(float));
    float *kb = p->ds_mla ? malloc(n * sizeof(float)) : NULL;
    if (!kv || (p->ds_mla && !kb)) {
        w->failed = 1;
    } else {
        fill_stream(kv, n, sd, salt + 4006, 0.0f, 1.0f / sqrtf((float)L));
        if (!p->ds_mla) {
            int64_t ne[2] = {L, (int64_t)rows};
            gguf_w_add_tensor(w, NAME("attn_kv_b.weight"), weight_type(t, L),
                              2, ne, kv);
        } else {
            /* kb: k_b [nope, L, H] then v_b [L, nv, H] */
            float *vb = kb + (size_t)(H * L * nope);
            for (int64_t h = 0; h < H; h++) {
                const float *wh = kv + (size_t)(h * (nope + nv) * L);
                for (int64_t j = 0; j < L; j++)
                    for (int64_t i = 0; i < nope; i++)
                        kb[(size_t)((h * L + j) * nope + i)] =
                            wh[(size_t)(i * L + j)];
                memcpy(vb + (size_t)(h * nv * L), wh + (size_t)(nope * L),
                       (size_t)(nv * L) * sizeof(float));
            }
            int64_t nek[3] = {nope, L, H}, nev[3] = {L, nv, H};
            gguf_w_add_tensor(w, NAME("attn_k_b.weight"),
                              weight_type(t, nope), 3, nek, kb);
            gguf_w_add_tensor(w, NAME("attn_v_b.weight"), weight_type(t, L),
                              3, nev, vb);
        }
    }
    free(kv);
    free(kb);
    add_weight(w, NAME("attn_output.weight"), t, H * nv, E, sd, salt + 4,
               0);
#undef NAME
}

int
gguf_w_llama_fill(struct gguf_w *w, const struct gguf_w_llama *p)
{
    if (!w)
        return -1;
    const char *arch = p->arch ? p->arch : "llama";
    int ds2 = !strcmp(arch, "deepseek2"); /* no n_head_kv, own head sizes */
    int m3 = !strcmp(arch, "mistral3");
    if (p->n_vocab < 259 || p->n_embd <= 0 || p->n_layer <= 0 ||
        p->n_head <= 0 || p->n_ff <= 0 || p->head_dim < 0 ||
        p->head_dim % 2 || !le_type_get((uint32_t)p->type) ||
        (!ds2 && (p->n_head_kv <= 0 || p->n_head % p->n_head_kv != 0 ||
                  (!p->head_dim && p->n_embd % p->n_head != 0)))) {
        w->failed = 1;
        return -1;
    }
    int n_shared = p->n_shared > 0 ? p->n_shared : 1;
    if (ds2 ? p->n_expert <= 0 || p->n_ff_exp <= 0 || p->kv_lora <= 0 ||
                  p->q_lora < 0 || p->ds_nope <= 0 || p->ds_rope <= 0 ||
                  p->ds_rope % 2 || p->ds_v <= 0 || p->head_dim ||
                  p->n_dense_lead < 0 || p->n_dense_lead > p->n_layer ||
                  p->n_shared < 0 || !(p->ds_wscale >= 0) ||
                  p->ds_gating < 0 || p->ds_gating > 2 ||
                  (p->ds_mla != 0 && p->ds_mla != 1)
            : p->kv_lora || p->q_lora || p->ds_nope || p->ds_rope ||
                  p->ds_v || p->n_dense_lead || p->n_shared ||
                  p->ds_wscale != 0 || p->ds_wnorm || p->ds_gating ||
                  p->ds_probs_b || p->ds_mla ||
                  (p->yarn_log_mul != 0 && !m3 && strcmp(arch, "llama"))) {
        w->failed = 1; /* deepseek2's fields set wrong, or on another arch */
        return -1;
    }
    /* the attention temperature: mistral3's and deepseek2's only, its
     * length deepseek2's */
    if ((p->attn_temp != 0 && !m3 && !ds2) || p->attn_temp_len < 0 ||
        (p->attn_temp_len && !ds2) || !(p->yarn_log_mul >= 0)) {
        w->failed = 1;
        return -1;
    }
    int gemma3 = !strcmp(arch, "gemma3"), gemma2 = !strcmp(arch, "gemma2");
    int q3moe = !strcmp(arch, "qwen3moe"), q2moe = !strcmp(arch, "qwen2moe");
    int phi3 = !strcmp(arch, "phi3");
    int granite = !strcmp(arch, "granite"), gmoe = !strcmp(arch, "granitemoe");
    int oss = !strcmp(arch, "gpt-oss");
    int qwen3 = !strcmp(arch, "qwen3") || gemma3 || q3moe; /* q/k norms */
    int NX = p->n_expert, n_ffx = p->n_ff_exp > 0 ? p->n_ff_exp : p->n_ff;
    int n_ffs = p->n_ff_shexp > 0 ? p->n_ff_shexp : p->n_ff;
    if ((strcmp(arch, "llama") && !qwen3 && !gemma2 && !q2moe && !phi3 &&
         !granite && !gmoe && !oss && !ds2 && !m3) ||
        (phi3 && NX > 0) || (granite && NX > 0) || (gmoe && NX <= 0) ||
        (oss && (NX <= 0 || p->n_swa <= 0)) ||
        ((q3moe || q2moe) && NX <= 0) || (NX > 0 && (gemma3 || gemma2)) ||
        NX < 0 ||
        (NX > 0 && (p->n_expert_used <= 0 || p->n_expert_used > NX))) {
        w->failed = 1;
        return -1;
    }
    int head_dim = p->head_dim > 0 ? p->head_dim : p->n_embd / p->n_head;
    int n_embd_kv = head_dim * p->n_head_kv, n_q = head_dim * p->n_head;
    char key[96];
#define KEY(k) (snprintf(key, sizeof(key), "%s." k, arch), key)
    gguf_w_add_str(w, "general.architecture", arch);
    gguf_w_add_str(w, "general.name", "llmux-test");
    gguf_w_add_u32(w, KEY("context_length"),
                   (uint32_t)(p->n_ctx > 0 ? p->n_ctx : 512));
    gguf_w_add_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd);
    gguf_w_add_u32(w, KEY("block_count"), (uint32_t)p->n_layer);
    gguf_w_add_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff);
    gguf_w_add_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head);
    if (ds2 && p->ds_mla) { /* MLA: one latent "kv head" of kv_lora */
        gguf_w_add_u32(w, KEY("attention.head_count_kv"), 1);
        gguf_w_add_u32(w, KEY("attention.key_length"),
                       (uint32_t)(p->kv_lora + p->ds_rope));
        gguf_w_add_u32(w, KEY("attention.value_length"),
                       (uint32_t)p->kv_lora);
        gguf_w_add_u32(w, KEY("attention.key_length_mla"),
                       (uint32_t)(p->ds_nope + p->ds_rope));
        gguf_w_add_u32(w, KEY("attention.value_length_mla"),
                       (uint32_t)p->ds_v);
    } else if (ds2) { /* legacy: decompressed to n_head full heads */
        gguf_w_add_u32(w, KEY("attention.head_count_kv"),
                       (uint32_t)p->n_head);
        gguf_w_add_u32(w, KEY("attention.key_length"),
                       (uint32_t)(p->ds_nope + p->ds_rope));
        gguf_w_add_u32(w, KEY("attention.value_length"), (uint32_t)p->ds_v);
    } else {
        gguf_w_add_u32(w, KEY("attention.head_count_kv"),
                       (uint32_t)p->n_head_kv);
    }
    if (p->head_dim > 0) {
        gguf_w_add_u32(w, KEY("attention.key_length"), (uint32_t)head_dim);
        gguf_w_add_u32(w, KEY("attention.value_length"), (uint32_t)head_dim);
    }
    gguf_w_add_u32(w, KEY("rope.dimension_count"),
                   (uint32_t)(ds2 ? p->ds_rope : head_dim));
    gguf_w_add_f32(w, KEY("rope.freq_base"), gemma3 ? 1e6f : 10000.0f);
    if ((gemma3 || gemma2) && p->n_swa > 0)
        gguf_w_add_u32(w, KEY("attention.sliding_window"),
                       (uint32_t)p->n_swa);
    if (gemma2 && p->attn_softcap > 0)
        gguf_w_add_f32(w, KEY("attn_logit_softcapping"), p->attn_softcap);
    if (gemma2 && p->final_softcap > 0)
        gguf_w_add_f32(w, KEY("final_logit_softcapping"), p->final_softcap);
    gguf_w_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    if (granite || gmoe) { /* Granite 3's multipliers */
        gguf_w_add_f32(w, KEY("embedding_scale"), 12.0f);
        gguf_w_add_f32(w, KEY("residual_scale"), 0.22f);
        gguf_w_add_f32(w, KEY("attention.scale"), 0.0625f);
        gguf_w_add_f32(w, KEY("logit_scale"), 8.0f);
    }
    if ((phi3 || oss) && p->n_swa > 0)
        gguf_w_add_u32(w, KEY("attention.sliding_window"), (uint32_t)p->n_swa);
    if (phi3 && p->longrope_orig > 0) {
        gguf_w_add_u32(w, KEY("rope.scaling.original_context_length"),
                       (uint32_t)p->longrope_orig);
        if (p->longrope_attn > 0)
            gguf_w_add_f32(w, KEY("rope.scaling.attn_factor"),
                           p->longrope_attn);
    }
    if (p->yarn_factor > 0) {
        gguf_w_add_str(w, KEY("rope.scaling.type"), "yarn");
        gguf_w_add_f32(w, KEY("rope.scaling.factor"), p->yarn_factor);
        if (p->yarn_orig > 0)
            gguf_w_add_u32(w, KEY("rope.scaling.original_context_length"),
                           (uint32_t)p->yarn_orig);
    }
    if (!ds2 && p->yarn_log_mul != 0) /* mistral3 or llama */
        gguf_w_add_f32(w, KEY("rope.scaling.yarn_log_multiplier"),
                       p->yarn_log_mul);
    if (p->attn_temp != 0)
        gguf_w_add_f32(w, KEY("attention.temperature_scale"), p->attn_temp);
    if (p->attn_temp_len > 0)
        gguf_w_add_u32(w, KEY("attention.temperature_length"),
                       (uint32_t)p->attn_temp_len);
    if (NX > 0) {
        gguf_w_add_u32(w, KEY("expert_count"), (uint32_t)NX);
        gguf_w_add_u32(w, KEY("expert_used_count"),
                       (uint32_t)p->n_expert_used);
        if (p->n_ff_exp > 0 || q2moe || oss)
            gguf_w_add_u32(w, KEY("expert_feed_forward_length"),
                           (uint32_t)n_ffx);
        if (q2moe && p->n_ff_shexp > 0)
            gguf_w_add_u32(w, KEY("expert_shared_feed_forward_length"),
                           (uint32_t)p->n_ff_shexp);
    }
    if (ds2) {
        gguf_w_add_u32(w, KEY("attention.kv_lora_rank"),
                       (uint32_t)p->kv_lora);
        if (p->q_lora > 0)
            gguf_w_add_u32(w, KEY("attention.q_lora_rank"),
                           (uint32_t)p->q_lora);
        gguf_w_add_u32(w, KEY("leading_dense_block_count"),
                       (uint32_t)p->n_dense_lead);
        gguf_w_add_u32(w, KEY("expert_shared_count"), (uint32_t)n_shared);
        gguf_w_add_f32(w, KEY("expert_weights_scale"),
                       p->ds_wscale > 0 ? p->ds_wscale : 1.0f);
        gguf_w_add_bool(w, KEY("expert_weights_norm"), p->ds_wnorm);
        if (p->ds_gating)
            gguf_w_add_u32(w, KEY("expert_gating_func"),
                           (uint32_t)p->ds_gating);
        gguf_w_add_f32(w, KEY("rope.scaling.yarn_log_multiplier"),
                       p->yarn_log_mul);
    }
#undef KEY

    /* Tokenizer. */
    size_t nv = (size_t)p->n_vocab, nc = 0, nu = 0;
    while (p->controls && p->controls[nc])
        nc++;
    while (p->user_tokens && p->user_tokens[nu])
        nu++;
    nc += nu; /* the specials: nu user-defined, then the controls */
    if (nc + 259 > nv) {
        w->failed = 1;
        return -1;
    }
    char **toks = calloc(nv, sizeof(*toks));
    float *scores = calloc(nv, sizeof(float));
    int32_t *types = calloc(nv, sizeof(int32_t));
    int ok = toks && scores && types;
    for (size_t i = 0; ok && i < nv; i++) {
        char buf[32];
        if (i == 0)
            snprintf(buf, sizeof(buf), "<unk>");
        else if (i == 1)
            snprintf(buf, sizeof(buf), "<s>");
        else if (i == 2)
            snprintf(buf, sizeof(buf), "</s>");
        else if (i < 259)
            snprintf(buf, sizeof(buf), "<0x%02X>", (unsigned)(i - 3));
        else if (i < nv - nc)
            make_piece((int)(i - 259), buf, sizeof(buf));
        size_t sp = i - (nv - nc); /* the i-th special */
        toks[i] = strdup(i < nv - nc ? buf
                         : sp < nu   ? p->user_tokens[sp]
                                     : p->controls[sp - nu]);
        ok = toks[i] != NULL;
        scores[i] = i < 259 || i >= nv - nc ? 0.0f : -(float)(i - 259);
        types[i] = i == 0                    ? 2
                   : i >= nv - nc && sp < nu ? 4
                   : i < 3 || i >= nv - nc   ? 3
                   : i < 259                 ? 6
                                             : 1;
    }
    if (ok) {
        gguf_w_add_str(w, "tokenizer.ggml.model", "llama");
        gguf_w_add_str_arr(w, "tokenizer.ggml.tokens",
                           (const char *const *)toks, nv);
        gguf_w_add_arr(w, "tokenizer.ggml.scores", LE_GGUF_FLOAT32, scores,
                       nv);
        gguf_w_add_arr(w, "tokenizer.ggml.token_type", LE_GGUF_INT32, types,
                       nv);
        gguf_w_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
        gguf_w_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
        gguf_w_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        gguf_w_add_bool(w, "tokenizer.ggml.add_bos_token", 1);
        gguf_w_add_bool(w, "tokenizer.ggml.add_eos_token", 0);
        if (p->chat_template)
            gguf_w_add_str(w, "tokenizer.chat_template", p->chat_template);
    } else {
        w->failed = 1;
    }
    if (toks)
        for (size_t i = 0; i < nv; i++)
            free(toks[i]);
    free(toks);
    free(scores);
    free(types);

    /* Weights: salt = a fixed number per tensor role and layer. */
    enum le_type t = p->type;
    uint64_t sd = p->seed;
    add_weight(w, "token_embd.weight", t, p->n_embd, p->n_vocab, sd, 1, 0);
    add_weight(w, "output_norm.weight", t, p->n_embd, 1, sd, 2, 1);
    if (!p->tied)
        add_weight(w, "output.weight", t, p->n_embd, p->n_vocab, sd, 3, 0);
    if (phi3 && p->longrope_orig > 0) {
        int half = head_dim / 2;
        float *fs = malloc((size_t)half * 2 * sizeof(float));
        if (!fs) {
            w->failed = 1;
        } else {
            for (int i = 0; i < half; i++) {
                fs[i] = 1.0f + (float)i / 8;
                fs[half + i] = 1.0f + (float)i;
            }
            int64_t ne[1] = {half};
            gguf_w_add_tensor(w, "rope_factors_short.weight", LE_TYPE_F32, 1,
                              ne, fs);
            gguf_w_add_tensor(w, "rope_factors_long.weight", LE_TYPE_F32, 1,
                              ne, fs + half);
            free(fs);
        }
    }
    for (int l = 0; l < p->n_layer; l++) {
        char name[64];
        uint64_t salt = 100 + (uint64_t)l * 16;
#define W(suffix, ne0, ne1, k, norm)                                         \
    snprintf(name, sizeof(name), "blk.%d." suffix, l);                       \
    add_weight(w, name, t, ne0, ne1, sd, salt + k, norm)
        W("attn_norm.weight", p->n_embd, 1, 0, 1);
        if (ds2) {
            ds2_attention(w, p, l, salt);
        } else if (phi3) {
            W("attn_qkv.weight", p->n_embd, n_q + 2 * n_embd_kv, 1, 0);
        } else {
            W("attn_q.weight", p->n_embd, n_q, 1, 0);
            W("attn_k.weight", p->n_embd, n_embd_kv, 2, 0);
            W("attn_v.weight", p->n_embd, n_embd_kv, 3, 0);
        }
        if (!ds2) {
            W("attn_output.weight", n_q, p->n_embd, 4, 0);
        }
        if (q2moe || oss) { /* qwen2's biases, small values around 0 */
            snprintf(name, sizeof(name), "blk.%d.attn_q.bias", l);
            add_weight(w, name, LE_TYPE_F32, n_q, 1, sd, salt + 14, 0);
            snprintf(name, sizeof(name), "blk.%d.attn_k.bias", l);
            add_weight(w, name, LE_TYPE_F32, n_embd_kv, 1, sd, salt + 15, 0);
            snprintf(name, sizeof(name), "blk.%d.attn_v.bias", l);
            add_weight(w, name, LE_TYPE_F32, n_embd_kv, 1, sd,
                       salt + 3000, 0);
        }
        if (oss) { /* gpt-oss: the output's bias, a sink logit per head */
            snprintf(name, sizeof(name), "blk.%d.attn_output.bias", l);
            add_weight(w, name, LE_TYPE_F32, p->n_embd, 1, sd, salt + 3001,
                       0);
            snprintf(name, sizeof(name), "blk.%d.attn_sinks.weight", l);
            add_weight(w, name, LE_TYPE_F32, p->n_head, 1, sd, salt + 3002,
                       1);
        }
        if (qwen3) {
            W("attn_q_norm.weight", head_dim, 1, 9, 1);
            W("attn_k_norm.weight", head_dim, 1, 10, 1);
        }
        if (gemma3 || gemma2) {
            W("post_attention_norm.weight", p->n_embd, 1, 11, 1);
            W("post_ffw_norm.weight", p->n_embd, 1, 12, 1);
        }
        if (oss) {
            W("post_attention_norm.weight", p->n_embd, 1, 5, 1);
        } else {
            W("ffn_norm.weight", p->n_embd, 1, 5, 1);
        }
        if (NX > 0 && !(ds2 && l < p->n_dense_lead)) {
            /* the router stays F32, as llama.cpp's quantiser leaves it */
            snprintf(name, sizeof(name), "blk.%d.ffn_gate_inp.weight", l);
            add_weight(w, name, LE_TYPE_F32, p->n_embd, NX, sd, salt + 13, 0);
            enum le_type xt = p->exp_typed ? p->exp_type : t;
            snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.weight", l);
            add_weight3(w, name, xt, p->n_embd, n_ffx, NX, sd, salt + 6, 0);
            snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.weight", l);
            add_weight3(w, name, xt, p->n_embd, n_ffx, NX, sd, salt + 7, 0);
            snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.weight", l);
            add_weight3(w, name, xt, n_ffx, p->n_embd, NX, sd, salt + 8, 0);
            if (oss) { /* the router's and the experts' biases */
                snprintf(name, sizeof(name), "blk.%d.ffn_gate_inp.bias", l);
                add_weight(w, name, LE_TYPE_F32, NX, 1, sd, salt + 3003, 0);
                snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.bias", l);
                add_weight(w, name, LE_TYPE_F32, n_ffx, NX, sd, salt + 3004,
                           0);
                snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.bias", l);
                add_weight(w, name, LE_TYPE_F32, n_ffx, NX, sd, salt + 3005,
                           0);
                snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.bias", l);
                add_weight(w, name, LE_TYPE_F32, p->n_embd, NX, sd,
                           salt + 3006, 0);
            }
            if (q2moe) {
                uint64_t ss = salt + 2000; /* apart from the others */
                snprintf(name, sizeof(name),
                         "blk.%d.ffn_gate_inp_shexp.weight", l);
                add_weight(w, name, LE_TYPE_F32, p->n_embd, 1, sd, ss, 0);
                W("ffn_gate_shexp.weight", p->n_embd, n_ffs, 2001, 0);
                W("ffn_up_shexp.weight", p->n_embd, n_ffs, 2002, 0);
                W("ffn_down_shexp.weight", n_ffs, p->n_embd, 2003, 0);
            }
            if (ds2) { /* the selection bias, n_shared fused shared experts */
                int n_sh = n_ffx * n_shared;
                if (p->ds_probs_b) {
                    float *b = malloc((size_t)NX * sizeof(float));
                    int64_t ne[1] = {NX};
                    if (!b) {
                        w->failed = 1;
                    } else {
                        fill_stream(b, (size_t)NX, sd, salt + 4007, 0.0f,
                                    0.05f);
                        snprintf(name, sizeof(name),
                                 "blk.%d.exp_probs_b.bias", l);
                        gguf_w_add_tensor(w, name, LE_TYPE_F32, 1, ne, b);
                        free(b);
                    }
                }
                W("ffn_gate_shexp.weight", p->n_embd, n_sh, 4008, 0);
                W("ffn_up_shexp.weight", p->n_embd, n_sh, 4009, 0);
                W("ffn_down_shexp.weight", n_sh, p->n_embd, 4010, 0);
            }
            continue;
        }
        if (phi3) {
            W("ffn_up.weight", p->n_embd, 2 * p->n_ff, 7, 0);
        } else {
            W("ffn_gate.weight", p->n_embd, p->n_ff, 6, 0);
            W("ffn_up.weight", p->n_embd, p->n_ff, 7, 0);
        }
        W("ffn_down.weight", p->n_ff, p->n_embd, 8, 0);
#undef W
    }
    return w->failed ? -1 : 0;
}

int
gguf_w_llama_write(const struct gguf_w_llama *p, const char *path)
{
    struct gguf_w *w = gguf_w_new();
    int rc = -1;
    if (w && gguf_w_llama_fill(w, p) == 0)
        rc = gguf_w_write_file(w, path);
    gguf_w_free(w);
    return rc;
}
