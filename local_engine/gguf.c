/*
 * gguf.c: the GGUF v2/v3 reader (little-endian only).
 *
 * What it does: maps (or reads) a file, parses the header, every key/value
 * pair and every tensor info, and checks each count, length, shape, type and
 * offset against the bytes actually present before using it.  Anything
 * wrong becomes LE_EFORMAT with one sentence naming the file and the fault;
 * no input, however hostile, makes it read out of bounds or crash.
 * What it does not: interpret the metadata (model.c, tokenizer.c do), write
 * GGUF (tests/lib/gguf_writer.c does), or support v1 / big-endian files.
 *
 * Layout (all integers little-endian):
 *
 *   offset  size        field
 *   0       4           magic "GGUF"
 *   4       4           u32 version (2 or 3; v1 used u32 counts: rejected)
 *   8       8           u64 n_tensors
 *   16      8           u64 n_kv
 *   24      ...         n_kv x { string key, u32 value_type, value }
 *           ...         n_tensors x { string name, u32 n_dims (1..4),
 *                                     u64 ne[n_dims], u32 ggml_type,
 *                                     u64 offset (from data section) }
 *           pad         zero bytes up to a multiple of general.alignment
 *                       (u32, default 32, a nonzero power of two)
 *           ...         data section: tensor bytes at their offsets
 *
 *   string = u64 len + len bytes (no NUL)
 *   value  = u8|i8|u16|i16|u32|i32|f32|bool(u8)|string|u64|i64|f64
 *          | array = u32 elem_type + u64 n + n elems (nested arrays are
 *            rejected: no model uses them)
 *
 * Invariants after a successful open: every le_gguf_str points inside
 * base[0..size); every tensor's data..data+nbytes lies inside the data
 * section, is aligned to `alignment` from the file start and to 4 bytes in
 * memory (block fields are read in place), and overlaps no other tensor;
 * key and tensor names are unique; string arrays have their arr.strs
 * index.  Lookups (le_gguf_find, le_gguf_tensor) are binary searches over
 * name-sorted indexes built at open.
 */
#include "le_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The public struct plus lookup indexes, kept out of le_int.h. */
struct gguf_priv {
    struct le_gguf g;
    uint64_t *kv_sorted; /* [n_kv] indexes into g.kv, sorted by key */
    uint64_t *t_sorted;  /* [n_tensors] indexes into g.tensors, by name */
    int locked;          /* mlock succeeded: munlock before releasing */
};

#define GGUF_DEFAULT_ALIGNMENT 32u

struct cursor {
    const uint8_t *p; /* next byte */
    size_t left;      /* bytes left in the file from p */
    const uint8_t *base;
    const char *name; /* file name for messages */
    char *err;
    size_t errlen;
};

static void
set_err(struct cursor *c, const char *fmt, ...)
{
    if (!c->err || c->errlen == 0)
        return;
    int n = snprintf(c->err, c->errlen, "%s: ", c->name);
    if (n < 0 || (size_t)n >= c->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static size_t
pos(const struct cursor *c)
{
    return (size_t)(c->p - c->base);
}

/* Reads n bytes (n known small) or reports what was being read. */
static int
take(struct cursor *c, void *dst, size_t n, const char *what)
{
    if (c->left < n) {
        set_err(c, "file ends at byte %zu while reading %s (%zu bytes "
                   "needed, %zu left)",
                pos(c), what, n, c->left);
        return 0;
    }
    memcpy(dst, c->p, n);
    c->p += n;
    c->left -= n;
    return 1;
}

/* Little-endian decoders: the host may be big-endian in principle. */
static uint16_t
rd16(const uint8_t *b)
{
    return (uint16_t)(b[0] | (b[1] << 8));
}

static uint32_t
rd32(const uint8_t *b)
{
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}

static uint64_t
rd64(const uint8_t *b)
{
    return (uint64_t)rd32(b) | ((uint64_t)rd32(b + 4) << 32);
}

static int
take_u32(struct cursor *c, uint32_t *v, const char *what)
{
    uint8_t b[4];
    if (!take(c, b, 4, what))
        return 0;
    *v = rd32(b);
    return 1;
}

static int
take_u64(struct cursor *c, uint64_t *v, const char *what)
{
    uint8_t b[8];
    if (!take(c, b, 8, what))
        return 0;
    *v = rd64(b);
    return 1;
}

static int
take_str(struct cursor *c, struct le_gguf_str *s, const char *what)
{
    uint64_t len;
    if (!take_u64(c, &len, what))
        return 0;
    if (len > c->left) {
        set_err(c, "%s at byte %zu claims %llu bytes but only %zu are left "
                   "in the file",
                what, pos(c) - 8, (unsigned long long)len, c->left);
        return 0;
    }
    s->len = len;
    s->ptr = (const char *)c->p;
    c->p += len;
    c->left -= (size_t)len;
    return 1;
}

/* Size of one scalar element, 0 for STRING / ARRAY / unknown. */
static size_t
scalar_size(uint32_t t)
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

/* Printable, bounded copy of a file string for messages. */
static const char *
show(struct le_gguf_str s, char *buf, size_t cap)
{
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        buf[i] = (ch >= 32 && ch < 127) ? (char)ch : '?';
    }
    buf[n] = 0;
    if (s.len > n && n >= 3)
        memcpy(buf + n - 3, "...", 3);
    return buf;
}

static void
decode_scalar(struct le_gguf_kv *kv, const uint8_t *b)
{
    switch (kv->type) {
    case LE_GGUF_UINT8:
    case LE_GGUF_BOOL:
        kv->v.u64 = b[0];
        break;
    case LE_GGUF_INT8:
        kv->v.i64 = (int8_t)b[0];
        break;
    case LE_GGUF_UINT16:
        kv->v.u64 = rd16(b);
        break;
    case LE_GGUF_INT16:
        kv->v.i64 = (int16_t)rd16(b);
        break;
    case LE_GGUF_UINT32:
        kv->v.u64 = rd32(b);
        break;
    case LE_GGUF_INT32:
        kv->v.i64 = (int32_t)rd32(b);
        break;
    case LE_GGUF_FLOAT32: {
        uint32_t u = rd32(b);
        float f;
        memcpy(&f, &u, 4);
        kv->v.f64 = f;
        break;
    }
    case LE_GGUF_UINT64:
        kv->v.u64 = rd64(b);
        break;
    case LE_GGUF_INT64:
        kv->v.i64 = (int64_t)rd64(b);
        break;
    case LE_GGUF_FLOAT64: {
        uint64_t u = rd64(b);
        memcpy(&kv->v.f64, &u, 8);
        break;
    }
    default:
        break;
    }
}

static int
parse_kv(struct cursor *c, uint64_t i, struct le_gguf_kv *kv)
{
    char what[128], kb[80];
    snprintf(what, sizeof(what), "the key of metadata pair %llu",
             (unsigned long long)i);
    if (!take_str(c, &kv->key, what))
        return 0;
    if (kv->key.len == 0) {
        set_err(c, "metadata pair %llu has an empty key",
                (unsigned long long)i);
        return 0;
    }
    show(kv->key, kb, sizeof(kb));
    snprintf(what, sizeof(what), "the type of key '%.40s'", kb);
    uint32_t t;
    if (!take_u32(c, &t, what))
        return 0;
    kv->type = (enum le_gguf_vtype)t;
    snprintf(what, sizeof(what), "the value of key '%.40s'", kb);
    if (t == LE_GGUF_STRING)
        return take_str(c, &kv->v.str, what);
    if (t != LE_GGUF_ARRAY) {
        size_t sz = scalar_size(t);
        uint8_t b[8];
        if (sz == 0) {
            set_err(c, "key '%s' has unknown value type %u", kb, t);
            return 0;
        }
        if (!take(c, b, sz, what))
            return 0;
        decode_scalar(kv, b);
        return 1;
    }
    uint32_t et;
    uint64_t n;
    if (!take_u32(c, &et, what) || !take_u64(c, &n, what))
        return 0;
    kv->v.arr.type = (enum le_gguf_vtype)et;
    kv->v.arr.n = n;
    kv->v.arr.data = c->p;
    if (et == LE_GGUF_ARRAY) {
        set_err(c, "key '%s' is an array of arrays, which is not supported",
                kb);
        return 0;
    }
    if (et == LE_GGUF_STRING) {
        /* Each string takes at least its 8-byte length: bound n before
         * allocating the index. */
        if (n > c->left / 8) {
            set_err(c, "key '%s' claims %llu strings but only %zu bytes are "
                       "left in the file",
                    kb, (unsigned long long)n, c->left);
            return 0;
        }
        struct le_gguf_str *a = calloc(n ? (size_t)n : 1, sizeof(*a));
        if (!a) {
            set_err(c, "out of memory for the %llu strings of key '%s'",
                    (unsigned long long)n, kb);
            return -1;
        }
        kv->v.arr.strs = a;
        for (uint64_t j = 0; j < n; j++) {
            snprintf(what, sizeof(what), "string %llu of key '%.30s'",
                     (unsigned long long)j, kb);
            if (!take_str(c, &a[j], what))
                return 0;
        }
        return 1;
    }
    size_t sz = scalar_size(et);
    if (sz == 0) {
        set_err(c, "key '%s' is an array of unknown element type %u", kb, et);
        return 0;
    }
    if (n > c->left / sz) {
        set_err(c, "key '%s' claims %llu elements of %zu bytes but only %zu "
                   "bytes are left in the file",
                kb, (unsigned long long)n, sz, c->left);
        return 0;
    }
    c->p += (size_t)n * sz;
    c->left -= (size_t)n * sz;
    return 1;
}

static int
parse_tensor_info(struct cursor *c, uint64_t i, struct le_gguf_tensor *t)
{
    char what[128], nb[80];
    snprintf(what, sizeof(what), "the name of tensor %llu",
             (unsigned long long)i);
    if (!take_str(c, &t->name, what))
        return 0;
    if (t->name.len == 0) {
        set_err(c, "tensor %llu has an empty name", (unsigned long long)i);
        return 0;
    }
    show(t->name, nb, sizeof(nb));
    snprintf(what, sizeof(what), "the shape of tensor '%.40s'", nb);
    uint32_t nd;
    if (!take_u32(c, &nd, what))
        return 0;
    if (nd < 1 || nd > 4) {
        set_err(c, "tensor '%s' has %u dimensions (1 to 4 are allowed)", nb,
                nd);
        return 0;
    }
    t->n_dims = nd;
    int64_t nel = 1;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        if (!take_u64(c, &ne, what))
            return 0;
        if (ne == 0 || ne > (uint64_t)INT64_MAX) {
            set_err(c, "tensor '%s' has dimension %u of size %llu", nb, d,
                    (unsigned long long)ne);
            return 0;
        }
        if ((int64_t)ne > INT64_MAX / nel) {
            set_err(c, "tensor '%s' has a shape whose element count "
                       "overflows 64 bits",
                    nb);
            return 0;
        }
        t->ne[d] = (int64_t)ne;
        nel *= (int64_t)ne;
    }
    uint32_t ty;
    snprintf(what, sizeof(what), "the type of tensor '%.40s'", nb);
    if (!take_u32(c, &ty, what))
        return 0;
    const struct le_type_traits *tt = le_type_get(ty);
    if (!tt) {
        set_err(c, "tensor '%s' has unknown or unsupported type %u", nb, ty);
        return 0;
    }
    t->type = (enum le_type)ty;
    if (t->ne[0] % tt->blck_size != 0) {
        set_err(c, "tensor '%s' of type %s has rows of %lld values, not a "
                   "multiple of its block size %d",
                nb, tt->name, (long long)t->ne[0], tt->blck_size);
        return 0;
    }
    snprintf(what, sizeof(what), "the offset of tensor '%.40s'", nb);
    if (!take_u64(c, &t->offset, what))
        return 0;
    /* nbytes = row bytes * rows, checked against overflow. */
    uint64_t row = (uint64_t)(t->ne[0] / tt->blck_size) * tt->type_size;
    uint64_t rows = (uint64_t)(nel / t->ne[0]);
    if (row != 0 && rows > (uint64_t)SIZE_MAX / row) {
        set_err(c, "tensor '%s' is too large (%lld elements)", nb,
                (long long)nel);
        return 0;
    }
    t->nbytes = (size_t)(row * rows);
    return 1;
}

static int
cmp_str(struct le_gguf_str a, struct le_gguf_str b)
{
    size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
    int r = n ? memcmp(a.ptr, b.ptr, n) : 0;
    if (r)
        return r;
    return a.len < b.len ? -1 : a.len > b.len;
}

/* qsort has no context argument in C11: sort (name, index) pairs. */
struct sort_ent {
    struct le_gguf_str s;
    uint64_t i;
};

static int
cmp_ent(const void *a, const void *b)
{
    const struct sort_ent *x = a, *y = b;
    return cmp_str(x->s, y->s);
}

struct off_ent {
    uint64_t off;
    uint64_t i;
};

static int
cmp_off(const void *a, const void *b)
{
    const struct off_ent *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Builds idx sorted by name; returns 0 and sets the error on a duplicate
 * or -1 on allocation failure. */
static int
build_index(struct cursor *c, uint64_t n, const struct le_gguf_str *(*get)(
                                              const struct le_gguf *, uint64_t),
            const struct le_gguf *g, uint64_t **out, const char *kind)
{
    struct sort_ent *e = malloc((n ? (size_t)n : 1) * sizeof(*e));
    uint64_t *idx = malloc((n ? (size_t)n : 1) * sizeof(*idx));
    if (!e || !idx) {
        free(e);
        free(idx);
        set_err(c, "out of memory indexing %llu %ss", (unsigned long long)n,
                kind);
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        e[i].s = *get(g, i);
        e[i].i = i;
    }
    qsort(e, (size_t)n, sizeof(*e), cmp_ent);
    for (uint64_t i = 0; i < n; i++) {
        if (i > 0 && cmp_str(e[i - 1].s, e[i].s) == 0) {
            char nb[80];
            set_err(c, "duplicate %s '%s'", kind, show(e[i].s, nb, sizeof(nb)));
            free(e);
            free(idx);
            return 0;
        }
        idx[i] = e[i].i;
    }
    free(e);
    *out = idx;
    return 1;
}

static const struct le_gguf_str *
kv_key(const struct le_gguf *g, uint64_t i)
{
    return &g->kv[i].key;
}

static const struct le_gguf_str *
t_name(const struct le_gguf *g, uint64_t i)
{
    return &g->tensors[i].name;
}

static int
is_int_type(enum le_gguf_vtype t)
{
    return t == LE_GGUF_UINT8 || t == LE_GGUF_INT8 || t == LE_GGUF_UINT16 ||
           t == LE_GGUF_INT16 || t == LE_GGUF_UINT32 || t == LE_GGUF_INT32 ||
           t == LE_GGUF_UINT64 || t == LE_GGUF_INT64;
}

static int
is_signed_type(enum le_gguf_vtype t)
{
    return t == LE_GGUF_INT8 || t == LE_GGUF_INT16 || t == LE_GGUF_INT32 ||
           t == LE_GGUF_INT64;
}

/* Parses p->g.base[0..size).  Returns LE_OK or an error with the message
 * set. */
static enum le_status
parse(struct gguf_priv *p, const char *name, char *err, size_t errlen)
{
    struct le_gguf *g = &p->g;
    struct cursor c = {g->base, g->size, g->base, name, err, errlen};
    uint8_t magic[4];
    if (g->size < 4 || (memcpy(magic, g->base, 4), memcmp(magic, "GGUF", 4))) {
        set_err(&c, "not a GGUF file (the first 4 bytes are not \"GGUF\")");
        return LE_EFORMAT;
    }
    c.p += 4;
    c.left -= 4;
    if (!take_u32(&c, &g->version, "the version"))
        return LE_EFORMAT;
    if (g->version == 1) {
        set_err(&c, "GGUF version 1 is not supported (it used 32-bit "
                    "counts); convert the model again with a current tool");
        return LE_EFORMAT;
    }
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version != 0)
            set_err(&c, "big-endian GGUF files are not supported");
        else
            set_err(&c, "GGUF version %u is not supported (2 and 3 are)",
                    g->version);
        return LE_EFORMAT;
    }
    if (!take_u64(&c, &g->n_tensors, "the tensor count") ||
        !take_u64(&c, &g->n_kv, "the metadata count"))
        return LE_EFORMAT;

    /* A pair takes at least 8 (key len) + 1 (key) + 4 (type) + 1 (value)
     * bytes, a tensor info at least 8 + 1 + 4 + 8 + 4 + 8: bound both
     * counts by the bytes left before allocating anything. */
    if (g->n_kv > c.left / 14) {
        set_err(&c, "the header claims %llu metadata pairs but the file has "
                    "only %zu bytes after the header",
                (unsigned long long)g->n_kv, c.left);
        return LE_EFORMAT;
    }
    g->kv = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof(*g->kv));
    if (!g->kv) {
        set_err(&c, "out of memory for %llu metadata pairs",
                (unsigned long long)g->n_kv);
        return LE_ENOMEM;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        int r = parse_kv(&c, i, &g->kv[i]);
        if (r <= 0) {
            /* Count only the pairs that may own memory, for le_gguf_free. */
            g->n_kv = i + 1;
            return r < 0 ? LE_ENOMEM : LE_EFORMAT;
        }
    }
    int r = build_index(&c, g->n_kv, kv_key, g, &p->kv_sorted, "key");
    if (r <= 0)
        return r < 0 ? LE_ENOMEM : LE_EFORMAT;

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct le_gguf_kv *al = le_gguf_find(g, "general.alignment");
    if (al) {
        if (!is_int_type(al->type) ||
            (is_signed_type(al->type) ? al->v.i64 <= 0 : al->v.u64 == 0) ||
            al->v.u64 > (1u << 30) || (al->v.u64 & (al->v.u64 - 1)) != 0) {
            set_err(&c, "general.alignment must be a nonzero power of two "
                        "integer (up to 2^30)");
            return LE_EFORMAT;
        }
        g->alignment = (uint32_t)al->v.u64;
    }

    if (g->n_tensors > c.left / 33) {
        set_err(&c, "the header claims %llu tensors but only %zu bytes are "
                    "left for their descriptions",
                (unsigned long long)g->n_tensors, c.left);
        return LE_EFORMAT;
    }
    g->tensors =
        calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof(*g->tensors));
    if (!g->tensors) {
        set_err(&c, "out of memory for %llu tensors",
                (unsigned long long)g->n_tensors);
        return LE_ENOMEM;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!parse_tensor_info(&c, i, &g->tensors[i]))
            return LE_EFORMAT;
    r = build_index(&c, g->n_tensors, t_name, g, &p->t_sorted,
                    "tensor name");
    if (r <= 0)
        return r < 0 ? LE_ENOMEM : LE_EFORMAT;

    /* Data section: starts at the next multiple of the alignment.  A file
     * without tensors may end before it. */
    size_t here = pos(&c);
    size_t a = g->alignment;
    size_t data_start = here % a ? here + (a - here % a) : here;
    size_t data_size = data_start <= g->size ? g->size - data_start : 0;
    if (data_start > g->size && g->n_tensors > 0) {
        set_err(&c, "the file ends at byte %zu, before the data section "
                    "(which starts at byte %zu)",
                g->size, data_start);
        return LE_EFORMAT;
    }

    struct off_ent *o =
        malloc((g->n_tensors ? (size_t)g->n_tensors : 1) * sizeof(*o));
    if (!o) {
        set_err(&c, "out of memory checking tensor offsets");
        return LE_ENOMEM;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct le_gguf_tensor *t = &g->tensors[i];
        char nb[80];
        show(t->name, nb, sizeof(nb));
        if (t->offset % a) {
            set_err(&c, "tensor '%s' data offset %llu is not a multiple of "
                        "the alignment %zu",
                    nb, (unsigned long long)t->offset, a);
            free(o);
            return LE_EFORMAT;
        }
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            set_err(&c, "tensor '%s' data [offset %llu, %zu bytes] runs past "
                        "the end of the file (%zu bytes, data section %zu "
                        "bytes from byte %zu)",
                    nb, (unsigned long long)t->offset, t->nbytes, g->size,
                    data_size, data_start);
            free(o);
            return LE_EFORMAT;
        }
        t->data = g->base + data_start + t->offset;
        /* Blocks hold uint16/float fields read in place: a general.alignment
         * below 4 (or a caller's odd buffer) would make those loads
         * misaligned. */
        if ((uintptr_t)t->data % 4 != 0) {
            set_err(&c, "tensor '%s' data at byte %zu is not 4-byte aligned",
                    nb, data_start + (size_t)t->offset);
            free(o);
            return LE_EFORMAT;
        }
        o[i].off = t->offset;
        o[i].i = i;
    }
    qsort(o, (size_t)g->n_tensors, sizeof(*o), cmp_off);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const struct le_gguf_tensor *x = &g->tensors[o[i - 1].i];
        const struct le_gguf_tensor *y = &g->tensors[o[i].i];
        if (x->offset + x->nbytes > y->offset) {
            char xb[80], yb[80];
            set_err(&c, "tensors '%s' [offset %llu, %zu bytes] and '%s' "
                        "[offset %llu] overlap",
                    show(x->name, xb, sizeof(xb)),
                    (unsigned long long)x->offset, x->nbytes,
                    show(y->name, yb, sizeof(yb)),
                    (unsigned long long)y->offset);
            free(o);
            return LE_EFORMAT;
        }
    }
    free(o);
    return LE_OK;
}

static struct gguf_priv *
priv(const struct le_gguf *g)
{
    /* g is the first member of gguf_priv. */
    return (struct gguf_priv *)(uintptr_t)g;
}

void
le_gguf_free(struct le_gguf *g)
{
    if (!g)
        return;
    struct gguf_priv *p = priv(g);
    if (g->kv) {
        for (uint64_t i = 0; i < g->n_kv; i++)
            if (g->kv[i].type == LE_GGUF_ARRAY)
                free(g->kv[i].v.arr.strs);
        free(g->kv);
    }
    free(g->tensors);
    free(p->kv_sorted);
    free(p->t_sorted);
    if (p->locked)
        munlock(g->base, g->size);
    if (g->owns_map == 1)
        munmap((void *)(uintptr_t)g->base, g->size);
    else if (g->owns_map == 2)
        free((void *)(uintptr_t)g->base);
    free(p);
}

static enum le_status
finish_open(struct gguf_priv *p, const char *name, struct le_gguf **out,
            char *err, size_t errlen)
{
    enum le_status st = parse(p, name, err, errlen);
    if (st != LE_OK) {
        le_gguf_free(&p->g);
        return st;
    }
    *out = &p->g;
    return LE_OK;
}

enum le_status
le_gguf_open_mem(const void *buf, size_t len, struct le_gguf **out,
                 char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    struct gguf_priv *p = calloc(1, sizeof(*p));
    if (!p) {
        if (err && errlen)
            snprintf(err, errlen, "<memory>: out of memory");
        return LE_ENOMEM;
    }
    p->g.base = buf ? buf : (const uint8_t *)"";
    p->g.size = buf ? len : 0;
    p->g.owns_map = 0;
    return finish_open(p, "<memory>", out, err, errlen);
}

enum le_status
le_gguf_open(const char *path, int mode, struct le_gguf **out, char *err,
             size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    struct gguf_priv *p = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err)
            snprintf(err, errlen, "%s: cannot open: %s", path,
                     strerror(errno));
        return LE_EIO;
    }
    struct stat stt;
    if (fstat(fd, &stt) != 0 || !S_ISREG(stt.st_mode)) {
        if (err)
            snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return LE_EIO;
    }
    if ((uint64_t)stt.st_size > (uint64_t)SIZE_MAX) {
        if (err)
            snprintf(err, errlen, "%s: too large to map on this system", path);
        close(fd);
        return LE_EIO;
    }
    size_t size = (size_t)stt.st_size;
    if (size < 24) {
        if (err)
            snprintf(err, errlen, "%s: only %zu bytes, too short for a GGUF "
                     "header (24 bytes)", path, size);
        close(fd);
        return LE_EFORMAT;
    }
    p = calloc(1, sizeof(*p));
    if (!p) {
        close(fd);
        if (err)
            snprintf(err, errlen, "%s: out of memory", path);
        return LE_ENOMEM;
    }
    if ((mode & LE_GGUF_READ) == 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            if (err)
                snprintf(err, errlen, "%s: mmap failed: %s", path,
                         strerror(errno));
            close(fd);
            free(p);
            return LE_EIO;
        }
        p->g.base = m;
        p->g.owns_map = 1;
    } else {
        /* Page-aligned like a mapping, so tensor data keeps the file's
         * alignment (SIMD loads and the float types rely on it). */
        void *vb = NULL;
        if (posix_memalign(&vb, 4096, size) != 0)
            vb = NULL;
        uint8_t *b = vb;
        if (!b) {
            if (err)
                snprintf(err, errlen, "%s: out of memory reading %zu bytes",
                         path, size);
            close(fd);
            free(p);
            return LE_ENOMEM;
        }
        size_t got = 0;
        while (got < size) {
            ssize_t n = read(fd, b + got, size - got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                if (err)
                    snprintf(err, errlen, "%s: read failed at byte %zu: %s",
                             path, got, n < 0 ? strerror(errno) : "early EOF");
                close(fd);
                free(b);
                free(p);
                return LE_EIO;
            }
            got += (size_t)n;
        }
        p->g.base = b;
        p->g.owns_map = 2;
    }
    close(fd);
    p->g.size = size;
    if (mode & LE_GGUF_MLOCK) {
        /* A failed mlock (RLIMIT_MEMLOCK is often 64 KiB) only costs
         * page-ins later: warn and go on rather than refuse the model. */
        if (mlock(p->g.base, size) != 0)
            fprintf(stderr, "llmux: warning: %s: mlock of %zu bytes failed "
                            "(%s); continuing without it\n",
                    path, size, strerror(errno));
        else
            p->locked = 1;
    }
    return finish_open(p, path, out, err, errlen);
}

static const struct le_gguf_str *
sorted_find(const struct le_gguf *g, const uint64_t *idx, uint64_t n,
            const char *z, const struct le_gguf_str *(*get)(
                               const struct le_gguf *, uint64_t),
            uint64_t *where)
{
    if (!idx || !z)
        return NULL;
    struct le_gguf_str k = {strlen(z), z};
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const struct le_gguf_str *s = get(g, idx[mid]);
        int r = cmp_str(*s, k);
        if (r == 0) {
            *where = idx[mid];
            return s;
        }
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const struct le_gguf_kv *
le_gguf_find(const struct le_gguf *g, const char *key)
{
    uint64_t i;
    if (!g)
        return NULL;
    if (!sorted_find(g, priv(g)->kv_sorted, g->n_kv, key, kv_key, &i))
        return NULL;
    return &g->kv[i];
}

const struct le_gguf_tensor *
le_gguf_tensor(const struct le_gguf *g, const char *name)
{
    uint64_t i;
    if (!g)
        return NULL;
    if (!sorted_find(g, priv(g)->t_sorted, g->n_tensors, name, t_name, &i))
        return NULL;
    return &g->tensors[i];
}

int
le_gguf_get_u32(const struct le_gguf *g, const char *key, uint32_t *out)
{
    const struct le_gguf_kv *kv = le_gguf_find(g, key);
    if (!kv || !is_int_type(kv->type))
        return 0;
    if (is_signed_type(kv->type)) {
        if (kv->v.i64 < 0 || kv->v.i64 > (int64_t)UINT32_MAX)
            return 0;
        *out = (uint32_t)kv->v.i64;
    } else {
        if (kv->v.u64 > UINT32_MAX)
            return 0;
        *out = (uint32_t)kv->v.u64;
    }
    return 1;
}

int
le_gguf_get_i64(const struct le_gguf *g, const char *key, int64_t *out)
{
    const struct le_gguf_kv *kv = le_gguf_find(g, key);
    if (!kv || !is_int_type(kv->type))
        return 0;
    if (is_signed_type(kv->type)) {
        *out = kv->v.i64;
    } else {
        if (kv->v.u64 > (uint64_t)INT64_MAX)
            return 0;
        *out = (int64_t)kv->v.u64;
    }
    return 1;
}

int
le_gguf_get_f32(const struct le_gguf *g, const char *key, float *out)
{
    const struct le_gguf_kv *kv = le_gguf_find(g, key);
    if (!kv || (kv->type != LE_GGUF_FLOAT32 && kv->type != LE_GGUF_FLOAT64))
        return 0;
    *out = (float)kv->v.f64;
    return 1;
}

int
le_gguf_get_bool(const struct le_gguf *g, const char *key, bool *out)
{
    const struct le_gguf_kv *kv = le_gguf_find(g, key);
    if (!kv || kv->type != LE_GGUF_BOOL)
        return 0;
    *out = kv->v.u64 != 0;
    return 1;
}

int
le_gguf_get_str(const struct le_gguf *g, const char *key,
                struct le_gguf_str *out)
{
    const struct le_gguf_kv *kv = le_gguf_find(g, key);
    if (!kv || kv->type != LE_GGUF_STRING)
        return 0;
    *out = kv->v.str;
    return 1;
}

int
le_gguf_str_eq(struct le_gguf_str s, const char *z)
{
    size_t n = strlen(z);
    return s.len == n && (n == 0 || memcmp(s.ptr, z, n) == 0);
}
