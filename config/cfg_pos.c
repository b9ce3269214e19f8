/*
 * cfg_pos: the position index of config_int.h.  A second, tiny JSON
 * tokenizer over text jansson has already accepted (or, for a duplicate
 * key, accepted up to that key): it does not validate beyond what it needs
 * to walk, and stops with GX_EINVAL at anything unexpected, so it is safe
 * on any input.  Keys are decoded (escapes, \uXXXX with surrogate pairs)
 * so paths match the keys jansson hands to the validator.
 */
#include "config_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* jansson's own nesting limit is 2048; we never see deeper text. */
#define POS_MAX_DEPTH 2048

struct scan {
    const char *s;
    size_t len, i;
    int line;
    int ncol; /* characters consumed on this line */
    struct gx_buf path;
    const char *key; /* the member key being scanned, NULL in arrays */
    struct cfg_pos *p;
};

static uint64_t
hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static size_t *
slot_for(const struct cfg_pos *p, const char *path)
{
    size_t mask = p->nslots - 1;
    for (size_t h = (size_t)hash_str(path) & mask;; h = (h + 1) & mask) {
        size_t *slot = &p->slots[h];
        if (*slot == 0 || strcmp(p->a[*slot - 1].path, path) == 0)
            return slot;
    }
}

static enum gx_status
grow_slots(struct cfg_pos *p)
{
    size_t n = p->nslots ? p->nslots * 2 : 64;
    size_t *old = p->slots, oldn = p->nslots;
    p->slots = calloc(n, sizeof(*p->slots));
    if (!p->slots) {
        p->slots = old;
        return GX_ENOMEM;
    }
    p->nslots = n;
    for (size_t k = 0; k < oldn; k++)
        if (old[k])
            *slot_for(p, p->a[old[k] - 1].path) = old[k];
    free(old);
    return GX_OK;
}

/* Adds the current path; GX_EINVAL (and p->dup) if it is already there. */
static enum gx_status
add(struct scan *sc, int kline, int kcol, int line, int col)
{
    struct cfg_pos *p = sc->p;
    const char *path = sc->path.data ? sc->path.data : "";
    if ((p->n + 1) * 2 > p->nslots && grow_slots(p) != GX_OK)
        return GX_ENOMEM;
    size_t *slot = slot_for(p, path);
    if (*slot) {
        p->dup = 1;
        p->dup_first = *slot - 1;
        p->dup_line = kline;
        p->dup_col = kcol;
        p->dup_key = strdup(sc->key ? sc->key : "");
        return p->dup_key ? GX_EINVAL : GX_ENOMEM;
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct cfg_pos_entry *a = realloc(p->a, cap * sizeof(*a));
        if (!a)
            return GX_ENOMEM;
        p->a = a;
        p->cap = cap;
    }
    char *copy = strdup(path);
    if (!copy)
        return GX_ENOMEM;
    p->a[p->n] = (struct cfg_pos_entry){copy, kline, kcol, line, col};
    *slot = ++p->n;
    return GX_OK;
}

static void
advance(struct scan *sc)
{
    unsigned char b = (unsigned char)sc->s[sc->i++];
    if (b == '\n') {
        sc->line++;
        sc->ncol = 0;
    } else if ((b & 0xC0) != 0x80) {
        sc->ncol++;
    }
}

static void
skip_ws(struct scan *sc)
{
    while (sc->i < sc->len && strchr(" \t\r\n", sc->s[sc->i]) &&
           sc->s[sc->i] != '\0')
        advance(sc);
}

static int
hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int
read_hex4(struct scan *sc, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        if (sc->i >= sc->len)
            return -1;
        int h = hexval((unsigned char)sc->s[sc->i]);
        if (h < 0)
            return -1;
        v = v * 16 + (unsigned)h;
        advance(sc);
    }
    *out = v;
    return 0;
}

static enum gx_status
put_utf8(struct gx_buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return gx_buf_append(b, u, n);
}

/* At a '"': skips the string; when out is not NULL appends its decoded
 * bytes to out. */
static enum gx_status
scan_string(struct scan *sc, struct gx_buf *out)
{
    advance(sc); /* opening quote */
    for (;;) {
        if (sc->i >= sc->len)
            return GX_EINVAL;
        char c = sc->s[sc->i];
        if (c == '"') {
            advance(sc);
            return GX_OK;
        }
        if (c != '\\') {
            size_t start = sc->i;
            while (sc->i < sc->len && sc->s[sc->i] != '"' &&
                   sc->s[sc->i] != '\\')
                advance(sc);
            if (out && gx_buf_append(out, sc->s + start, sc->i - start))
                return GX_ENOMEM;
            continue;
        }
        advance(sc);
        if (sc->i >= sc->len)
            return GX_EINVAL;
        c = sc->s[sc->i];
        advance(sc);
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *m = c ? strchr(from, c) : NULL;
        if (m) {
            if (out && gx_buf_append(out, to + (m - from), 1))
                return GX_ENOMEM;
            continue;
        }
        if (c != 'u')
            return GX_EINVAL;
        unsigned cp;
        if (read_hex4(sc, &cp))
            return GX_EINVAL;
        if (cp >= 0xD800 && cp <= 0xDBFF && sc->i + 1 < sc->len &&
            sc->s[sc->i] == '\\' && sc->s[sc->i + 1] == 'u') {
            advance(sc);
            advance(sc);
            unsigned lo;
            if (read_hex4(sc, &lo))
                return GX_EINVAL;
            if (lo >= 0xDC00 && lo <= 0xDFFF)
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (out && put_utf8(out, cp))
            return GX_ENOMEM;
    }
}

static enum gx_status scan_value(struct scan *sc, int kline, int kcol,
                                 int depth);

static enum gx_status
scan_object(struct scan *sc, int depth)
{
    enum gx_status st;
    struct gx_buf key;
    gx_buf_init(&key, 0);
    advance(sc); /* { */
    skip_ws(sc);
    if (sc->i < sc->len && sc->s[sc->i] == '}') {
        advance(sc);
        return GX_OK;
    }
    for (;;) {
        skip_ws(sc);
        st = GX_EINVAL;
        if (sc->i >= sc->len || sc->s[sc->i] != '"')
            goto out;
        int kline = sc->line, kcol = sc->ncol + 1;
        gx_buf_reset(&key);
        if ((st = gx_buf_append(&key, "", 0)) != GX_OK ||
            (st = scan_string(sc, &key)) != GX_OK)
            goto out;
        skip_ws(sc);
        st = GX_EINVAL;
        if (sc->i >= sc->len || sc->s[sc->i] != ':')
            goto out;
        advance(sc);
        size_t keep = sc->path.len;
        if ((keep && (st = gx_buf_append(&sc->path, ".", 1)) != GX_OK) ||
            (st = gx_buf_append(&sc->path, key.data, key.len)) != GX_OK)
            goto out;
        sc->key = key.data;
        st = scan_value(sc, kline, kcol, depth + 1);
        sc->key = NULL;
        sc->path.len = keep;
        sc->path.data[keep] = '\0';
        if (st != GX_OK)
            goto out;
        skip_ws(sc);
        st = GX_EINVAL;
        if (sc->i >= sc->len)
            goto out;
        if (sc->s[sc->i] == '}') {
            advance(sc);
            st = GX_OK;
            goto out;
        }
        if (sc->s[sc->i] != ',')
            goto out;
        advance(sc);
    }
out:
    gx_buf_cleanup(&key);
    return st;
}

static enum gx_status
scan_array(struct scan *sc, int depth)
{
    enum gx_status st;
    advance(sc); /* [ */
    skip_ws(sc);
    if (sc->i < sc->len && sc->s[sc->i] == ']') {
        advance(sc);
        return GX_OK;
    }
    for (size_t k = 0;; k++) {
        size_t keep = sc->path.len;
        if ((st = gx_buf_printf(&sc->path, "[%zu]", k)) != GX_OK)
            return st;
        st = scan_value(sc, 0, 0, depth + 1);
        sc->path.len = keep;
        sc->path.data[keep] = '\0';
        if (st != GX_OK)
            return st;
        skip_ws(sc);
        if (sc->i >= sc->len)
            return GX_EINVAL;
        if (sc->s[sc->i] == ']') {
            advance(sc);
            return GX_OK;
        }
        if (sc->s[sc->i] != ',')
            return GX_EINVAL;
        advance(sc);
    }
}

static enum gx_status
scan_value(struct scan *sc, int kline, int kcol, int depth)
{
    enum gx_status st;
    if (depth > POS_MAX_DEPTH)
        return GX_EINVAL;
    skip_ws(sc);
    if (sc->i >= sc->len)
        return GX_EINVAL;
    if ((st = add(sc, kline, kcol, sc->line, sc->ncol + 1)) != GX_OK)
        return st;
    char c = sc->s[sc->i];
    if (c == '{')
        return scan_object(sc, depth);
    if (c == '[')
        return scan_array(sc, depth);
    if (c == '"')
        return scan_string(sc, NULL);
    /* number, true, false, null */
    size_t start = sc->i;
    while (sc->i < sc->len && sc->s[sc->i] &&
           strchr("+-.0123456789eEtrufalsn", sc->s[sc->i]))
        advance(sc);
    return sc->i > start ? GX_OK : GX_EINVAL;
}

enum gx_status
cfg_pos_build(struct cfg_pos *p, const char *text, size_t len)
{
    struct scan sc = {.s = text, .len = len, .line = 1, .p = p};
    gx_buf_init(&sc.path, 0);
    enum gx_status st = gx_buf_append(&sc.path, "", 0);
    if (st == GX_OK)
        st = scan_value(&sc, 0, 0, 0);
    gx_buf_cleanup(&sc.path);
    return st;
}

const struct cfg_pos_entry *
cfg_pos_get(const struct cfg_pos *p, const char *path)
{
    if (!p->nslots)
        return NULL;
    size_t *slot = slot_for(p, path);
    return *slot ? &p->a[*slot - 1] : NULL;
}

void
cfg_pos_cleanup(struct cfg_pos *p)
{
    for (size_t k = 0; k < p->n; k++)
        free(p->a[k].path);
    free(p->a);
    free(p->slots);
    free(p->dup_key);
    memset(p, 0, sizeof(*p));
}

int
cfg_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return 255;
    int row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] > 255 ? 255 : row[lb];
}
