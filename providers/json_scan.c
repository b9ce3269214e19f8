/*
 * json_scan.c: a strict, non-allocating JSON validator for a non-stream
 * chat completion body that also picks out the usage counts, so the
 * common case needs no jansson tree (json_loadb was a quarter of the
 * gateway's instructions per request).
 *
 * It accepts exactly what jansson's json_loadb(flags 0) accepts for an
 * object at the top level (RFC 8259 plus jansson's own limits: no \u0000,
 * integers must fit a long long, reals must not overflow a double, UTF-8
 * must be valid with no surrogates or overlong forms), and reads usage the
 * way pv_usage_parse reads the tree jansson builds (for a duplicate key
 * the last occurrence wins, as json_object_set does).  When it cannot be
 * sure of that (nesting deeper than PV_JS_MAX_DEPTH, an escaped key where
 * keys matter, a real too long to convert here) it answers
 * PV_JS_UNSURE and the caller uses jansson (the last two only when the
 * whole input is otherwise valid).  One quirk of jansson is matched on
 * purpose: a single NUL byte right after a number or a literal is
 * skipped (see below).  tests/test_json_scan.c and
 * tests/fuzz/fuzz_json_scan.c compare the two.
 */
#include "providers.h"
#include "providers_int.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Container kinds and roles kept on the stack, one byte per level. */
enum { K_OBJ = 0, K_ARR = 1 };
enum { R_OTHER = 0, R_TOP = 2, R_USAGE = 4, R_DETAILS = 6 };
/* What the next value is for. */
enum { S_NONE, S_CHOICES, S_USAGE, S_DETAILS, S_PT, S_CT, S_CACHED };

int64_t
pv_usage_num(double d)
{
    if (!(d > 0))
        return 0; /* negative, zero or NaN: clamped to 0 anyway */
    if (d >= 9223372036854775808.0)
        return INT64_MAX;
    return (int64_t)d;
}

void
pv_usage_clamp(struct pv_usage *u)
{
    if (u->prompt_tokens < 0)
        u->prompt_tokens = 0;
    if (u->completion_tokens < 0)
        u->completion_tokens = 0;
    if (u->cached_tokens < 0)
        u->cached_tokens = 0;
    if (u->cached_tokens > u->prompt_tokens)
        u->cached_tokens = u->prompt_tokens;
}

int
pv_usage_parse(const json_t *obj, struct pv_usage *u)
{
    json_t *usage = json_object_get(obj, "usage");
    if (!json_is_object(usage))
        return 0;
    memset(u, 0, sizeof(*u));
    u->have = 1;
    json_t *v = json_object_get(usage, "prompt_tokens");
    if (json_is_number(v))
        u->prompt_tokens = pv_usage_num(json_number_value(v));
    v = json_object_get(usage, "completion_tokens");
    if (json_is_number(v))
        u->completion_tokens = pv_usage_num(json_number_value(v));
    json_t *d = json_object_get(usage, "prompt_tokens_details");
    v = json_is_object(d) ? json_object_get(d, "cached_tokens") : NULL;
    if (json_is_number(v))
        u->cached_tokens = pv_usage_num(json_number_value(v));
    pv_usage_clamp(u);
    return 1;
}

static int
is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int
hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at p (n bytes left).  -1 when not there. */
static long
hex4(const unsigned char *p, size_t n)
{
    if (n < 4)
        return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Length of the valid UTF-8 sequence (2..4 bytes) at p, 0 if invalid. */
static size_t
utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && v < 0x10000) ||
        v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    return len;
}

/* 1 for the bytes a string holds as they are: printable ASCII and DEL,
 * not '"' (0x22) or '\\' (0x5c); 0 for controls and bytes >= 0x80. */
#define JS_ROW16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
static const unsigned char str_plain[256] = {
    JS_ROW16(0), JS_ROW16(0),
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20 */
    JS_ROW16(1), JS_ROW16(1),
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50 */
    JS_ROW16(1), JS_ROW16(1),
};
#undef JS_ROW16

/* Scans the string whose opening quote is at s[*i].  On success *i is
 * past the closing quote, *raw and *rawlen give the bytes between the quotes
 * and *esc says whether any escape was in them.  Returns 0 or -1. */
static int
scan_string_dec(const unsigned char *s, size_t n, size_t *i, size_t *raw,
                size_t *rawlen, int *esc, size_t *dec)
{
    size_t p = *i + 1;
    size_t saved = 0; /* raw bytes minus decoded bytes, over escapes */
    *raw = p;
    *esc = 0;
    for (;;) {
        /* Plain ASCII run: one table look-up a byte, four at a time. */
        while (p + 4 <= n && (str_plain[s[p]] & str_plain[s[p + 1]] &
                              str_plain[s[p + 2]] & str_plain[s[p + 3]]))
            p += 4;
        while (p < n && str_plain[s[p]])
            p++;
        if (p >= n)
            return -1;
        unsigned char c = s[p];
        if (c == '"') {
            *rawlen = p - *raw;
            *dec = *rawlen - saved;
            *i = p + 1;
            return 0;
        }
        if (c < 0x20)
            return -1;
        if (c >= 0x80) {
            size_t l = utf8_len(s + p, n - p);
            if (!l)
                return -1;
            p += l;
            continue;
        }
        /* backslash */
        *esc = 1;
        if (p + 1 >= n)
            return -1;
        c = s[p + 1];
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' ||
            c == 'n' || c == 'r' || c == 't') {
            p += 2;
            saved += 1;
            continue;
        }
        if (c != 'u')
            return -1;
        long v = hex4(s + p + 2, n - p - 2);
        if (v < 0 || v == 0)
            return -1; /* bad hex, or \u0000 (jansson without ALLOW_NUL) */
        p += 6;
        if (v >= 0xDC00 && v <= 0xDFFF)
            return -1; /* lone low surrogate */
        if (v >= 0xD800 && v <= 0xDBFF) {
            if (p + 1 >= n || s[p] != '\\' || s[p + 1] != 'u')
                return -1;
            long lo = hex4(s + p + 2, n - p - 2);
            if (lo < 0xDC00 || lo > 0xDFFF)
                return -1;
            p += 6;
            saved += 12 - 4; /* a pair is one 4-byte sequence */
        } else {
            saved += 6 - (v < 0x80 ? 1 : v < 0x800 ? 2 : 3);
        }
    }
}

static int
scan_string(const unsigned char *s, size_t n, size_t *i, size_t *raw,
            size_t *rawlen, int *esc)
{
    size_t dec;
    return scan_string_dec(s, n, i, raw, rawlen, esc, &dec);
}

/* Scans a number at s[*i].  Returns 0 (valid; *d its value as jansson
 * would hold it, when want), -1 (invalid as jansson sees it) or -2
 * (cannot tell here). */
static int
scan_number(const unsigned char *s, size_t n, size_t *i, int want,
            double *d)
{
    size_t p = *i, start = p;
    int neg = 0, real = 0;
    if (s[p] == '-') {
        neg = 1;
        p++;
    }
    if (p >= n || s[p] < '0' || s[p] > '9')
        return -1;
    size_t int_start = p;
    if (s[p] == '0') {
        p++;
        if (p < n && s[p] >= '0' && s[p] <= '9')
            return -1; /* leading zero */
    } else {
        while (p < n && s[p] >= '0' && s[p] <= '9')
            p++;
    }
    size_t int_end = p;
    if (p < n && s[p] == '.') {
        real = 1;
        p++;
        if (p >= n || s[p] < '0' || s[p] > '9')
            return -1;
        while (p < n && s[p] >= '0' && s[p] <= '9')
            p++;
    }
    long exp = 0;
    if (p < n && (s[p] == 'e' || s[p] == 'E')) {
        real = 1;
        p++;
        int eneg = 0;
        if (p < n && (s[p] == '+' || s[p] == '-')) {
            eneg = s[p] == '-';
            p++;
        }
        if (p >= n || s[p] < '0' || s[p] > '9')
            return -1;
        while (p < n && s[p] >= '0' && s[p] <= '9') {
            if (exp < 1000000)
                exp = exp * 10 + (s[p] - '0');
            p++;
        }
        if (eneg)
            exp = -exp;
    }
    *i = p;
    if (!real) {
        /* jansson: strtoll, an error when out of range. */
        uint64_t v = 0;
        uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        for (size_t k = int_start; k < int_end; k++) {
            unsigned dg = (unsigned)(s[k] - '0');
            if (v > (lim - dg) / 10)
                return -1;
            v = v * 10 + dg;
        }
        if (want) {
            long long ll = neg ? (v == (uint64_t)INT64_MAX + 1
                                      ? INT64_MIN
                                      : -(long long)v)
                               : (long long)v;
            *d = (double)ll;
        }
        return 0;
    }
    /* A real: jansson's strtod fails on overflow (not on underflow).
     * Below 10^307 it cannot overflow; only then is strtod needed. */
    size_t ni = int_end - int_start;
    if (ni == 1 && s[int_start] == '0')
        ni = 0;
    if (!want && (long)ni + exp <= 307)
        return 0;
    char buf[64];
    size_t len = p - start;
    if (len >= sizeof(buf))
        return -2;
    memcpy(buf, s + start, len);
    buf[len] = 0;
    double v = strtod(buf, NULL);
    if (isinf(v))
        return -1;
    *d = v;
    return 0;
}

static int
key_is(const unsigned char *s, size_t raw, size_t len, const char *k)
{
    size_t kl = strlen(k);
    return len == kl && memcmp(s + raw, k, kl) == 0;
}

/* ---- one walker, two visitors --------------------------------------------
 * pv_json_scan_chat and pv_json_scan_members are one loop (js_walk): it
 * validates with the rules above and tells its visitor (struct jw) what
 * it meets: a container opening (jw_open: the visitor's tag for it comes
 * back and is handed to jw_key for its keys and to jw_close), a key of an
 * object (jw_key: which slot, if any, the value is for) and a scalar that
 * is the value of a slot (jw_scalar).  The chat visitor keeps roles as
 * tags and fills struct pv_js_chat; the member visitor keeps entries of
 * out as tags and fills their spans. */
#define JM_MAX_PATHS 8

struct jm_path {
    const char *k0, *k1; /* k1 NULL: a top-level member */
    size_t l0, l1;
};

struct jw {
    int members; /* 0: the chat visitor, 1: the member visitor */
    int unsure;  /* decided only if the rest turns out valid */
    struct pv_js_chat *chat;
    const struct jm_path *pp;
    int np;
    struct pv_js_member *out;
    size_t max, *n_out;
    size_t top[3]; /* the current top-level key: raw, len, esc */
};

/* Whether the key whose raw bytes (between the quotes, validated by
 * scan_string) are s[raw, raw + rl) is k[0..kl) (ASCII) once unescaped. */
static int
key_eq(const unsigned char *s, size_t raw, size_t rl, int esc, const char *k,
       size_t kl)
{
    if (!esc)
        return rl == kl && memcmp(s + raw, k, kl) == 0;
    size_t p = raw, e = raw + rl, j = 0;
    while (p < e) {
        unsigned ch = s[p++];
        if (ch == '\\') {
            unsigned c2 = s[p++];
            switch (c2) {
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'u': {
                long v = hex4(s + p, e - p);
                if (v < 0 || v >= 0x80)
                    return 0; /* not ASCII: no path key matches */
                ch = (unsigned)v;
                p += 4;
                break;
            }
            default: ch = c2; /* " \ / */
            }
        }
        if (j >= kl || (unsigned char)k[j] != ch)
            return 0;
        j++;
    }
    return j == kl;
}

/* Index of the path that s[raw..) names at this depth (1: a top-level
 * key; 2: a key of the object under top-level key top), or -1. */
static int
jm_match(const struct jm_path *pp, int np, int depth, const unsigned char *s,
         size_t raw, size_t rl, int esc, const size_t top[3])
{
    for (int k = 0; k < np; k++) {
        const struct jm_path *p = &pp[k];
        if (depth == 1 && !p->k1 && key_eq(s, raw, rl, esc, p->k0, p->l0))
            return k;
        if (depth == 2 && p->k1 &&
            key_eq(s, top[0], top[1], (int)top[2], p->k0, p->l0) &&
            key_eq(s, raw, rl, esc, p->k1, p->l1))
            return k;
    }
    return -1;
}


static inline size_t
skip_ws(const unsigned char *s, size_t n, size_t i)
{
    while (i < n && s[i] <= ' ' && is_ws(s[i]))
        i++;
    return i;
}

/* 1 when none of the 8 bytes at p is special in a string (a control,
 * '"', '\\' or a byte >= 0x80): the word-at-a-time form of str_plain
 * (a byte below 0x20 is found by subtracting 0x20 from every byte, '"'
 * and '\\' by a zero byte after an XOR; only whether any byte matched is
 * used, which these tests give exactly). */
static inline int
plain8(const unsigned char *p)
{
    const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
    uint64_t x;
    memcpy(&x, p, 8);
    uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    uint64_t hit = x | ((x - ones * 0x20) & ~x) | ((q - ones) & ~q) |
                   ((b - ones) & ~b);
    return (hit & high) == 0;
}

/* scan_string with its common case here: a run of plain bytes up to the
 * closing quote; anything else (an escape, UTF-8, the end) the long way. */
static inline int
scan_string_fast(const unsigned char *s, size_t n, size_t *i, size_t *raw,
                 size_t *rawlen, int *esc)
{
    size_t p = *i + 1;
    while (p + 8 <= n && plain8(s + p))
        p += 8;
    while (p < n && str_plain[s[p]])
        p++;
    if (p < n && s[p] == '"') {
        *raw = *i + 1;
        *rawlen = p - *raw;
        *esc = 0;
        *i = p + 1;
        return 0;
    }
    return scan_string(s, n, i, raw, rawlen, esc);
}

/* A new entry of out for the value at at (the member visitor), or -1. */
static int
jm_entry(struct jw *w, int slot, size_t at)
{
    if (*w->n_out >= w->max) {
        w->unsure = 1; /* more occurrences than room */
        return -1;
    }
    int e = (int)(*w->n_out)++;
    w->out[e].path = slot;
    w->out[e].at = at;
    w->out[e].len = 0;
    return e;
}

/* A container c ('{' or '[') opens at depth, the value of slot (-1:
 * none); empty: it closes right away.  Returns its tag. */
static int
jw_open(struct jw *w, int slot, int depth, unsigned char c, size_t at,
        int empty)
{
    if (w->members)
        return slot >= 0 ? jm_entry(w, slot, at) : -1;
    struct pv_js_chat *out = w->chat;
    if (slot == S_CHOICES)
        out->choices_empty = c == '[' && empty;
    if (slot == S_USAGE) {
        /* A later "usage" replaces an earlier one entirely. */
        memset(&out->usage, 0, sizeof(out->usage));
        out->usage.have = c == '{';
    } else if (slot == S_DETAILS) {
        out->usage.cached_tokens = 0;
    } else if (slot >= S_PT) {
        int64_t *f = slot == S_PT   ? &out->usage.prompt_tokens
                     : slot == S_CT ? &out->usage.completion_tokens
                                    : &out->usage.cached_tokens;
        *f = 0;
    }
    if (c != '{')
        return R_OTHER;
    return depth == 0           ? R_TOP
           : slot == S_USAGE   ? R_USAGE
           : slot == S_DETAILS ? R_DETAILS
                               : R_OTHER;
}

/* The container tagged tag closed; end is past its last byte. */
static void
jw_close(struct jw *w, int tag, size_t end)
{
    if (w->members && tag >= 0)
        w->out[tag].len = end - w->out[tag].at;
}

/* A scalar s[at..end) is the value of slot (>= 0); num is a number's
 * value (when jw_want asked for it). */
static void
jw_scalar(struct jw *w, int slot, size_t at, size_t end, int is_num,
          double num)
{
    if (w->members) {
        int e = jm_entry(w, slot, at);
        if (e >= 0)
            w->out[e].len = end - at;
        return;
    }
    struct pv_js_chat *out = w->chat;
    if (slot == S_CHOICES) {
        out->choices_empty = 0;
    } else if (slot == S_USAGE) {
        memset(&out->usage, 0, sizeof(out->usage));
    } else if (slot == S_DETAILS) {
        out->usage.cached_tokens = 0;
    } else if (slot >= S_PT) {
        int64_t v = is_num ? pv_usage_num(num) : 0;
        if (slot == S_PT)
            out->usage.prompt_tokens = v;
        else if (slot == S_CT)
            out->usage.completion_tokens = v;
        else
            out->usage.cached_tokens = v;
    }
}

/* The key s[raw, raw + rl) of an object at depth tagged tag: the slot
 * its value is for, or -1. */
static int
jw_key(struct jw *w, int depth, int tag, const unsigned char *s, size_t raw,
       size_t rl, int esc)
{
    if (w->members) {
        if (depth == 1) {
            w->top[0] = raw;
            w->top[1] = rl;
            w->top[2] = (size_t)esc;
        }
        return depth <= 2 ? jm_match(w->pp, w->np, depth, s, raw, rl, esc,
                                     w->top)
                          : -1;
    }
    struct pv_js_chat *out = w->chat;
    if (tag == R_OTHER)
        return -1;
    if (esc)
        w->unsure = 1; /* "us\u0061ge" is "usage" too */
    if (tag == R_TOP) {
        if (key_is(s, raw, rl, "usage"))
            return S_USAGE;
        if (key_is(s, raw, rl, "choices")) {
            out->has_choices = 1;
            return S_CHOICES;
        }
        if (key_is(s, raw, rl, "error"))
            out->has_error = 1;
    } else if (tag == R_USAGE) {
        if (key_is(s, raw, rl, "prompt_tokens"))
            return S_PT;
        if (key_is(s, raw, rl, "completion_tokens"))
            return S_CT;
        if (key_is(s, raw, rl, "prompt_tokens_details"))
            return S_DETAILS;
    } else if (tag == R_DETAILS) {
        if (key_is(s, raw, rl, "cached_tokens"))
            return S_CACHED;
    }
    return -1;
}

static enum pv_js_verdict
js_walk(const unsigned char *s, size_t n, struct jw *w)
{
    unsigned char kind[PV_JS_MAX_DEPTH];
    int tag[PV_JS_MAX_DEPTH];
    int depth = 0, slot = -1;
    size_t i = skip_ws(s, n, 0);
    if (i >= n || s[i] != '{')
        return PV_JS_INVALID; /* jansson: '[' or '{' expected; or an array */

    /* Each turn parses one value at s[i], then the separators after it. */
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n)
            return PV_JS_INVALID;
        unsigned char c = s[i];
        int cur = slot;
        size_t at = i;
        slot = -1;
        if (c == '{' || c == '[') {
            if (depth >= PV_JS_MAX_DEPTH)
                return PV_JS_UNSURE;
            i = skip_ws(s, n, i + 1);
            if (i >= n)
                return PV_JS_INVALID;
            int empty = s[i] == (c == '{' ? '}' : ']');
            int t = jw_open(w, cur, depth, c, at, empty);
            if (empty) {
                i++;
                jw_close(w, t, i);
                goto after_value;
            }
            kind[depth] = c == '[' ? K_ARR : K_OBJ;
            tag[depth] = t;
            depth++;
            if (c == '[')
                continue; /* first element */
            goto object_key;
        }
        /* A scalar. */
        {
            double num = 0;
            int is_num = 0;
            size_t end;
            if (c == '"') {
                size_t raw, rl;
                int esc;
                if (scan_string_fast(s, n, &i, &raw, &rl, &esc) != 0)
                    return PV_JS_INVALID;
                end = i;
            } else {
                if (c == '-' || (c >= '0' && c <= '9')) {
                    is_num = 1;
                    int r = scan_number(s, n, &i, !w->members && cur >= S_PT,
                                        &num);
                    if (r == -1)
                        return PV_JS_INVALID;
                    if (r == -2)
                        w->unsure = 1;
                } else if (c == 't' && n - i >= 4 && !memcmp(s + i, "true", 4)) {
                    i += 4;
                } else if (c == 'f' && n - i >= 5 &&
                           !memcmp(s + i, "false", 5)) {
                    i += 5;
                } else if (c == 'n' && n - i >= 4 && !memcmp(s + i, "null", 4)) {
                    i += 4;
                } else {
                    return PV_JS_INVALID;
                }
                end = i;
                /* jansson's quirk: its lexer reads one byte past a number
                 * or a literal and puts it back; a NUL put back that way
                 * is taken for "buffer empty" and skipped.  So exactly one
                 * NUL right after a number or literal is ignored (a second
                 * one is an error). */
                if (i < n && s[i] == 0)
                    i++;
            }
            if (cur >= 0)
                jw_scalar(w, cur, at, end, is_num, num);
        }

    after_value:
        /* After a value: end of input at depth 0, else , or the close. */
        i = skip_ws(s, n, i);
        if (depth == 0) {
            if (i != n)
                return PV_JS_INVALID; /* jansson: end of file expected */
            if (w->unsure)
                return PV_JS_UNSURE;
            if (!w->members)
                pv_usage_clamp(&w->chat->usage);
            return PV_JS_OBJECT;
        }
        if (i >= n)
            return PV_JS_INVALID;
        if (s[i] == (kind[depth - 1] == K_ARR ? ']' : '}')) {
            i++;
            depth--;
            jw_close(w, tag[depth], i);
            goto after_value;
        }
        if (s[i] != ',')
            return PV_JS_INVALID;
        i++;
        if (kind[depth - 1] == K_ARR)
            continue;
    object_key:
        /* At a key of the object on top of the stack. */
        i = skip_ws(s, n, i);
        if (i >= n || s[i] != '"')
            return PV_JS_INVALID;
        {
            size_t raw, rl;
            int esc;
            if (scan_string_fast(s, n, &i, &raw, &rl, &esc) != 0)
                return PV_JS_INVALID;
            if (w->members || tag[depth - 1] != R_OTHER)
                slot = jw_key(w, depth, tag[depth - 1], s, raw, rl, esc);
        }
        i = skip_ws(s, n, i);
        if (i >= n || s[i] != ':')
            return PV_JS_INVALID;
        i++;
    }
}

enum pv_js_verdict
pv_json_scan_chat(const char *data, size_t n, struct pv_js_chat *out)
{
    struct jw w;
    memset(&w, 0, sizeof(w));
    memset(out, 0, sizeof(*out));
    w.chat = out;
    return js_walk((const unsigned char *)data, n, &w);
}

/* Members by key path: pv_json_scan_members validates like
 * pv_json_scan_chat (the same walker: the same string,
 * number and literal rules, the same NUL quirk, PV_JS_UNSURE past
 * PV_JS_MAX_DEPTH or for a real it cannot convert) and reports where the
 * values of the asked members lie, so a passthrough can change one value
 * (the model name) and keep every other byte.  A path is "key" (a member
 * of the top object) or "key.sub" (a member of an object that is the value
 * of the top-level member key).  Keys are compared unescaped, so
 * "mod\u0065l" is "model" (paths are ASCII).  Every occurrence is
 * reported, in the order values start; a container's span is complete
 * once the scan returns PV_JS_OBJECT. */
enum pv_js_verdict
pv_json_scan_members(const char *data, size_t n, const char *const *paths,
                     int n_paths, struct pv_js_member *out, size_t max,
                     size_t *n_out)
{
    struct jw w;
    struct jm_path pp[JM_MAX_PATHS];
    *n_out = 0;
    if (n_paths < 0 || n_paths > JM_MAX_PATHS)
        return PV_JS_UNSURE;
    for (int k = 0; k < n_paths; k++) {
        const char *dot = strchr(paths[k], '.');
        pp[k].k0 = paths[k];
        pp[k].l0 = dot ? (size_t)(dot - paths[k]) : strlen(paths[k]);
        pp[k].k1 = dot ? dot + 1 : NULL;
        pp[k].l1 = dot ? strlen(dot + 1) : 0;
    }
    memset(&w, 0, sizeof(w));
    w.members = 1;
    w.pp = pp;
    w.np = n_paths;
    w.out = out;
    w.max = max;
    w.n_out = n_out;
    return js_walk((const unsigned char *)data, n, &w);
}

/* ---- the client's chat request -------------------------------------------
 * pv_json_scan_request reads the facts pv_chat needs from a request body
 * in one pass without building a tree (json_loadb with
 * JSON_REJECT_DUPLICATES was the largest part of the gateway's own
 * instructions per request).  It only ever answers "valid, and these are
 * the facts" (0) or "not decided here" (-1): the caller then takes the
 * jansson way, which also words every error.  So it may refuse more than
 * jansson does (an escaped key, a NUL after a literal, more than
 * RQ_MAX_KEYS keys open at once, a value breaking one of pv_chat's
 * rules), never less: what it accepts is exactly a body json_loadb
 * accepts, with each fact as request.c's validate() reads it from the
 * tree.  Duplicate keys (which jansson refuses with this flag) are found
 * by comparing each key with the others of its object. */
#define RQ_MAX_KEYS 512
enum rq_role { RQ_ANY, RQ_TOP, RQ_MSGS, RQ_MSG, RQ_CONTENT, RQ_PART, RQ_SO };
enum rq_type { RQ_OBJ, RQ_ARR, RQ_STR, RQ_INT, RQ_REAL, RQ_TRUE, RQ_FALSE,
               RQ_NULL };

struct rq {
    const unsigned char *s;
    size_t n, i;
    struct pv_js_req *out;
    size_t key[RQ_MAX_KEYS][2]; /* raw offset, length: open objects' keys */
    int n_keys;
};

struct rq_val {
    enum rq_type type;
    size_t raw, rawlen, dec; /* a string: its bytes, decoded length */
    int esc;
    double num;       /* a number */
    size_t count;     /* an array: its elements */
    int has_text;     /* a part object: "text" is a string (dec_text) */
    size_t dec_text;
    int has_role;     /* a message object: "role" is a string */
};

static int rq_value(struct rq *r, int depth, enum rq_role role,
                    struct rq_val *v);

static void
rq_ws(struct rq *r)
{
    while (r->i < r->n && is_ws(r->s[r->i]))
        r->i++;
}

/* The value of key (raw bytes k[0..kl)) in an object of role: checked
 * against pv_chat's rules, facts recorded.  0 or -1 (not decided). */
static int
rq_member(struct rq *r, int depth, enum rq_role role, const char *k,
          size_t kl, struct rq_val *obj)
{
    struct pv_js_req *o = r->out;
    enum rq_role sub = RQ_ANY;
#define KEY(lit) (kl == sizeof(lit) - 1 && !memcmp(k, lit, kl))
    if (role == RQ_TOP && KEY("messages"))
        sub = RQ_MSGS;
    else if (role == RQ_TOP && KEY("stream_options"))
        sub = RQ_SO;
    else if (role == RQ_MSG && KEY("content"))
        sub = RQ_CONTENT;
    struct rq_val v;
    memset(&v, 0, sizeof(v));
    rq_ws(r);
    size_t at = r->i;
    if (rq_value(r, depth, sub, &v) != 0)
        return -1;
    int null = v.type == RQ_NULL;
    int is_bool = v.type == RQ_TRUE || v.type == RQ_FALSE;
    if (role == RQ_TOP) {
        if (KEY("model")) {
            if (v.type != RQ_STR || !v.rawlen || v.esc)
                return -1;
            o->model_at = at;
            o->model_len = r->i - at;
            o->has_model = 1;
        } else if (KEY("messages")) {
            if (v.type != RQ_ARR || v.count == 0)
                return -1;
            o->n_messages = v.count;
            o->has_messages = 1;
        } else if (KEY("stream")) {
            if (!is_bool && !null)
                return -1;
            o->stream = v.type == RQ_TRUE;
        } else if (KEY("max_tokens") || KEY("max_completion_tokens") ||
                   KEY("n")) {
            double hi = KEY("n") ? PV_MAX_N : PV_MAX_COMPLETION_TOKENS;
            if (null)
                return 0;
            if (v.type != RQ_INT || v.num < 1 || v.num > hi)
                return -1;
            if (KEY("n"))
                o->n = (int64_t)v.num;
            else if ((int64_t)v.num > o->max_tokens)
                o->max_tokens = (int64_t)v.num;
        } else if (KEY("seed")) {
            if (v.type != RQ_INT && !null)
                return -1;
        } else if (KEY("temperature") || KEY("top_p") ||
                   KEY("presence_penalty") || KEY("frequency_penalty")) {
            if (v.type != RQ_INT && v.type != RQ_REAL && !null)
                return -1;
        } else if (KEY("stream_options")) {
            if (v.type != RQ_OBJ && !null)
                return -1;
            o->has_stream_options = !null;
        }
    } else if (role == RQ_SO) {
        if (KEY("include_usage")) {
            if (!is_bool && !null)
                return -1;
            o->include_usage = v.type == RQ_TRUE;
        }
    } else if (role == RQ_MSG) {
        if (KEY("role")) {
            if (v.type != RQ_STR)
                return -1;
            obj->has_role = 1;
        } else if (KEY("content")) {
            if (v.type == RQ_STR)
                o->text_bytes += (int64_t)v.dec;
            else if (v.type != RQ_ARR && !null)
                return -1;
        }
    } else if (role == RQ_PART) {
        if (KEY("text") && v.type == RQ_STR) {
            obj->has_text = 1;
            obj->dec_text = v.dec;
        }
    }
#undef KEY
    return 0;
}

static int
rq_object(struct rq *r, int depth, enum rq_role role, struct rq_val *v)
{
    int first_key = r->n_keys;
    r->i++; /* { */
    rq_ws(r);
    if (r->i < r->n && r->s[r->i] == '}') {
        r->i++;
        return 0;
    }
    for (;;) {
        rq_ws(r);
        if (r->i >= r->n || r->s[r->i] != '"')
            return -1;
        size_t raw, rl, dec;
        int esc;
        if (scan_string_dec(r->s, r->n, &r->i, &raw, &rl, &esc, &dec) != 0 ||
            esc || r->n_keys >= RQ_MAX_KEYS)
            return -1; /* an escaped key may equal another one */
        for (int k = first_key; k < r->n_keys; k++)
            if (r->key[k][1] == rl &&
                !memcmp(r->s + r->key[k][0], r->s + raw, rl))
                return -1; /* a duplicate key */
        r->key[r->n_keys][0] = raw;
        r->key[r->n_keys][1] = rl;
        r->n_keys++;
        rq_ws(r);
        if (r->i >= r->n || r->s[r->i] != ':')
            return -1;
        r->i++;
        if (rq_member(r, depth, role, (const char *)r->s + raw, rl, v) != 0)
            return -1;
        rq_ws(r);
        if (r->i >= r->n)
            return -1;
        if (r->s[r->i] == '}') {
            r->i++;
            r->n_keys = first_key;
            return 0;
        }
        if (r->s[r->i] != ',')
            return -1;
        r->i++;
    }
}

static int
rq_array(struct rq *r, int depth, enum rq_role role, struct rq_val *v)
{
    r->i++; /* [ */
    rq_ws(r);
    if (r->i < r->n && r->s[r->i] == ']') {
        r->i++;
        return 0;
    }
    enum rq_role el = role == RQ_MSGS      ? RQ_MSG
                      : role == RQ_CONTENT ? RQ_PART
                                           : RQ_ANY;
    for (;;) {
        struct rq_val e;
        memset(&e, 0, sizeof(e));
        if (rq_value(r, depth, el, &e) != 0)
            return -1;
        if (role == RQ_MSGS && (e.type != RQ_OBJ || !e.has_role))
            return -1;
        if (role == RQ_CONTENT) {
            if (e.has_text)
                r->out->text_bytes += (int64_t)e.dec_text;
            else
                r->out->n_other_parts++;
        }
        v->count++;
        rq_ws(r);
        if (r->i >= r->n)
            return -1;
        if (r->s[r->i] == ']') {
            r->i++;
            return 0;
        }
        if (r->s[r->i] != ',')
            return -1;
        r->i++;
    }
}

static int
rq_value(struct rq *r, int depth, enum rq_role role, struct rq_val *v)
{
    rq_ws(r);
    if (r->i >= r->n)
        return -1;
    const unsigned char *s = r->s;
    unsigned char c = s[r->i];
    if (c == '{' || c == '[') {
        if (depth >= PV_JS_MAX_DEPTH)
            return -1;
        v->type = c == '{' ? RQ_OBJ : RQ_ARR;
        /* Only an object or an array of the expected kind keeps its role. */
        enum rq_role sub =
            (c == '{') == (role == RQ_TOP || role == RQ_MSG ||
                           role == RQ_PART || role == RQ_SO)
                ? role
                : RQ_ANY;
        return c == '{' ? rq_object(r, depth + 1, sub, v)
                        : rq_array(r, depth + 1, sub, v);
    }
    if (c == '"') {
        v->type = RQ_STR;
        return scan_string_dec(s, r->n, &r->i, &v->raw, &v->rawlen, &v->esc,
                               &v->dec);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        size_t start = r->i;
        if (scan_number(s, r->n, &r->i, 1, &v->num) != 0)
            return -1;
        v->type = RQ_INT;
        for (size_t k = start; k < r->i; k++)
            if (s[k] == '.' || s[k] == 'e' || s[k] == 'E')
                v->type = RQ_REAL;
        return 0;
    }
    if (r->n - r->i >= 4 && !memcmp(s + r->i, "true", 4)) {
        v->type = RQ_TRUE;
        r->i += 4;
    } else if (r->n - r->i >= 5 && !memcmp(s + r->i, "false", 5)) {
        v->type = RQ_FALSE;
        r->i += 5;
    } else if (r->n - r->i >= 4 && !memcmp(s + r->i, "null", 4)) {
        v->type = RQ_NULL;
        r->i += 4;
    } else {
        return -1;
    }
    return 0;
}

int
pv_json_scan_request(const char *data, size_t n, struct pv_js_req *out)
{
    struct rq rs; /* the key stack is 8 KiB */
    struct rq *r = &rs;
    memset(out, 0, sizeof(*out));
    r->s = (const unsigned char *)data;
    r->n = n;
    r->i = 0;
    r->out = out;
    r->n_keys = 0;
    struct rq_val v;
    memset(&v, 0, sizeof(v));
    rq_ws(r);
    int rc = -1;
    if (r->i < n && r->s[r->i] == '{' && rq_value(r, 0, RQ_TOP, &v) == 0) {
        rq_ws(r);
        /* A NUL anywhere outside a string is left to jansson (it skips
         * one after a literal); so is everything after the object. */
        rc = r->i == n && out->has_model && out->has_messages ? 0 : -1;
    }
    if (rc != 0)
        memset(out, 0, sizeof(*out));
    return rc;
}

/* ---- compact dump ------------------------------------------------------
 * pv_json_dump_compact writes what json_dumps(j, JSON_COMPACT) writes for
 * an object or array, byte for byte, without jansson's per-container
 * cycle bookkeeping (a hashtable insert with a formatted pointer key for
 * every object and array) and its per-piece callbacks.  Reals go through
 * jansson's own formatter (json_dumpb of the one value), so they match
 * whatever jansson was built with.  Anything unusual (invalid UTF-8 in a
 * string, nesting past PV_JD_MAX_DEPTH, which also covers cycles) makes
 * it return NULL and the caller uses json_dumps. */
#define PV_JD_MAX_DEPTH 4096

struct jd_buf {
    char *p;
    size_t len, cap;
    int fail;
};

static void
jd_put(struct jd_buf *b, const char *s, size_t n)
{
    if (b->fail)
        return;
    if (b->cap - b->len < n + 1) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap - b->len < n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->fail = 1;
                return;
            }
            cap *= 2;
        }
        char *np = realloc(b->p, cap);
        if (!np) {
            b->fail = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void
jd_str(struct jd_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, start = 0;
    jd_put(b, "\"", 1);
    while (i < n) {
        unsigned char c = u[i];
        if (str_plain[c]) {
            i++;
            continue;
        }
        if (c >= 0x80) {
            size_t l = utf8_len(u + i, n - i);
            if (!l) {
                b->fail = 1; /* jansson refuses to dump it */
                return;
            }
            i += l;
            continue;
        }
        jd_put(b, s + start, i - start);
        char esc[6] = {'\\', 0, '0', '0', 0, 0};
        size_t el = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            el = 6;
        }
        jd_put(b, esc, el);
        start = ++i;
    }
    jd_put(b, s + start, n - start);
    jd_put(b, "\"", 1);
}

static void
jd_value(struct jd_buf *b, const json_t *j, int depth)
{
    if (b->fail)
        return;
    if (depth > PV_JD_MAX_DEPTH) {
        b->fail = 1;
        return;
    }
    switch (json_typeof(j)) {
    case JSON_NULL:
        jd_put(b, "null", 4);
        return;
    case JSON_TRUE:
        jd_put(b, "true", 4);
        return;
    case JSON_FALSE:
        jd_put(b, "false", 5);
        return;
    case JSON_INTEGER: {
        char tmp[24];
        long long v = json_integer_value(j);
        unsigned long long m = v < 0 ? 0ULL - (unsigned long long)v
                                     : (unsigned long long)v;
        size_t k = sizeof(tmp);
        do {
            tmp[--k] = (char)('0' + m % 10);
            m /= 10;
        } while (m);
        if (v < 0)
            tmp[--k] = '-';
        jd_put(b, tmp + k, sizeof(tmp) - k);
        return;
    }
    case JSON_REAL: {
        char tmp[128];
        size_t k = json_dumpb(j, tmp, sizeof(tmp),
                              JSON_ENCODE_ANY | JSON_COMPACT);
        if (k == 0 || k > sizeof(tmp))
            b->fail = 1;
        else
            jd_put(b, tmp, k);
        return;
    }
    case JSON_STRING:
        jd_str(b, json_string_value(j), json_string_length(j));
        return;
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jd_put(b, "[", 1);
        for (size_t i = 0; i < n; i++) {
            if (i)
                jd_put(b, ",", 1);
            jd_value(b, json_array_get(j, i), depth + 1);
        }
        jd_put(b, "]", 1);
        return;
    }
    case JSON_OBJECT: {
        jd_put(b, "{", 1);
        int first = 1;
        for (void *it = json_object_iter((json_t *)j); it;
             it = json_object_iter_next((json_t *)j, it)) {
            if (!first)
                jd_put(b, ",", 1);
            first = 0;
            jd_str(b, json_object_iter_key(it), json_object_iter_key_len(it));
            jd_put(b, ":", 1);
            jd_value(b, json_object_iter_value(it), depth + 1);
        }
        jd_put(b, "}", 1);
        return;
    }
    }
    b->fail = 1;
}

char *
pv_json_dump_compact(const json_t *j, size_t *len)
{
    if (!json_is_object(j) && !json_is_array(j))
        return NULL;
    struct jd_buf b = {0};
    jd_value(&b, j, 0);
    if (b.fail || !b.p) {
        free(b.p);
        return NULL;
    }
    b.p[b.len] = 0;
    if (len)
        *len = b.len;
    return b.p;
}

/* ---- the splice --------------------------------------------------------- */
char *
pv_json_put_string(char *o, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    *o++ = '"';
    for (const char *p = s; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        const char *short_esc = ch == '"'    ? "\\\""
                                : ch == '\\' ? "\\\\"
                                : ch == '\n' ? "\\n"
                                : ch == '\t' ? "\\t"
                                : ch == '\r' ? "\\r"
                                : ch == '\b' ? "\\b"
                                : ch == '\f' ? "\\f"
                                              : NULL;
        if (short_esc) {
            memcpy(o, short_esc, 2);
            o += 2;
        } else if (ch < 0x20) {
            memcpy(o, "\\u00", 4);
            o[4] = hex[ch >> 4];
            o[5] = hex[ch & 15];
            o += 6;
        } else {
            *o++ = (char)ch;
        }
    }
    *o++ = '"';
    return o;
}

char *
pv_json_splice(const char *text, size_t len, const struct pv_js_member *m,
               size_t nm, const char *s, size_t *out_len)
{
    size_t sl = strlen(s), prev = 0;
    for (size_t k = 0; k < nm; k++) {
        if (m[k].at < prev || m[k].at > len || m[k].len > len - m[k].at)
            return NULL; /* out of order, overlapping or out of bounds */
        prev = m[k].at + m[k].len;
    }
    if (sl > (SIZE_MAX - len - 1) / 6 / (nm + 1) - 2)
        return NULL;
    char *out = malloc(len + nm * (2 + 6 * sl) + 1);
    if (!out)
        return NULL;
    char *o = out;
    size_t from = 0;
    for (size_t k = 0; k < nm; k++) {
        memcpy(o, text + from, m[k].at - from);
        o = pv_json_put_string(o + (m[k].at - from), s);
        from = m[k].at + m[k].len;
    }
    memcpy(o, text + from, len - from);
    o += len - from;
    *o = '\0';
    if (out_len)
        *out_len = (size_t)(o - out);
    return out;
}
