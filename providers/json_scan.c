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

/* Scans the string whose opening quote is at s[*i].  On success *i is
 * past the closing quote, *raw and *rawlen give the bytes between the quotes
 * and *esc says whether any escape was in them.  Returns 0 or -1. */
static int
scan_string(const unsigned char *s, size_t n, size_t *i, size_t *raw,
            size_t *rawlen, int *esc)
{
    size_t p = *i + 1;
    *raw = p;
    *esc = 0;
    for (;;) {
        /* Plain ASCII run. */
        while (p < n && s[p] >= 0x20 && s[p] < 0x80 && s[p] != '"' &&
               s[p] != '\\')
            p++;
        if (p >= n)
            return -1;
        unsigned char c = s[p];
        if (c == '"') {
            *rawlen = p - *raw;
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
        }
    }
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

enum pv_js_verdict
pv_json_scan_chat(const char *data, size_t n, struct pv_js_chat *out)
{
    const unsigned char *s = (const unsigned char *)data;
    unsigned char st[PV_JS_MAX_DEPTH];
    int depth = 0;
    size_t i = 0;
    int slot = S_NONE;
    int unsure = 0; /* decided only if the rest turns out invalid */
    memset(out, 0, sizeof(*out));
    while (i < n && is_ws(s[i]))
        i++;
    if (i >= n || s[i] != '{')
        return PV_JS_INVALID; /* jansson: '[' or '{' expected; or an array */

    /* Each turn parses one value at s[i], then the separators after it. */
    for (;;) {
        while (i < n && is_ws(s[i]))
            i++;
        if (i >= n)
            return PV_JS_INVALID;
        unsigned char c = s[i];
        int cur_slot = slot;
        slot = S_NONE;
        if (c == '{' || c == '[') {
            if (depth >= PV_JS_MAX_DEPTH)
                return PV_JS_UNSURE;
            int role = R_OTHER;
            if (c == '{') {
                if (depth == 0)
                    role = R_TOP;
                else if (cur_slot == S_USAGE)
                    role = R_USAGE;
                else if (cur_slot == S_DETAILS)
                    role = R_DETAILS;
            }
            if (cur_slot == S_CHOICES) {
                size_t k = i + 1;
                while (k < n && is_ws(s[k]))
                    k++;
                out->choices_empty = c == '[' && k < n && s[k] == ']';
            }
            if (cur_slot == S_USAGE) {
                /* A later "usage" replaces an earlier one entirely. */
                memset(&out->usage, 0, sizeof(out->usage));
                out->usage.have = c == '{';
            } else if (cur_slot == S_DETAILS) {
                out->usage.cached_tokens = 0;
            } else if (cur_slot >= S_PT) {
                int64_t *f = cur_slot == S_PT ? &out->usage.prompt_tokens
                             : cur_slot == S_CT ? &out->usage.completion_tokens
                                                : &out->usage.cached_tokens;
                *f = 0;
            }
            st[depth++] = (unsigned char)((c == '[' ? K_ARR : K_OBJ) | role);
            i++;
            while (i < n && is_ws(s[i]))
                i++;
            if (i >= n)
                return PV_JS_INVALID;
            if (s[i] == (c == '{' ? '}' : ']')) {
                i++;
                depth--;
                goto after_value;
            }
            if (c == '[')
                continue; /* first element */
            goto object_key;
        }
        /* A scalar. */
        double num = 0;
        int is_num = 0;
        if (c == '"') {
            size_t raw, rl;
            int esc;
            if (scan_string(s, n, &i, &raw, &rl, &esc) != 0)
                return PV_JS_INVALID;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            int r = scan_number(s, n, &i, cur_slot >= S_PT, &num);
            if (r == -1)
                return PV_JS_INVALID;
            if (r == -2)
                unsure = 1;
            is_num = 1;
        } else if (n - i >= 4 && memcmp(s + i, "true", 4) == 0) {
            i += 4;
        } else if (n - i >= 5 && memcmp(s + i, "false", 5) == 0) {
            i += 5;
        } else if (n - i >= 4 && memcmp(s + i, "null", 4) == 0) {
            i += 4;
        } else {
            return PV_JS_INVALID;
        }
        /* jansson's quirk: its lexer reads one byte past a number or a
         * literal and puts it back; a NUL put back that way is taken for
         * "buffer empty" and skipped.  So exactly one NUL right after a
         * number or literal is ignored (a second one is an error). */
        if (c != '"' && i < n && s[i] == 0)
            i++;
        if (cur_slot == S_CHOICES) {
            out->choices_empty = 0;
        } else if (cur_slot == S_USAGE) {
            memset(&out->usage, 0, sizeof(out->usage));
        } else if (cur_slot == S_DETAILS) {
            out->usage.cached_tokens = 0;
        } else if (cur_slot >= S_PT) {
            int64_t v = is_num ? pv_usage_num(num) : 0;
            if (cur_slot == S_PT)
                out->usage.prompt_tokens = v;
            else if (cur_slot == S_CT)
                out->usage.completion_tokens = v;
            else
                out->usage.cached_tokens = v;
        }

    after_value:
        /* After a value: end of input at depth 0, else , or the close. */
        while (i < n && is_ws(s[i]))
            i++;
        if (depth == 0) {
            if (i != n)
                return PV_JS_INVALID; /* jansson: end of file expected */
            if (unsure)
                return PV_JS_UNSURE;
            pv_usage_clamp(&out->usage);
            return PV_JS_OBJECT;
        }
        if (i >= n)
            return PV_JS_INVALID;
        {
            int kind = st[depth - 1] & 1;
            if (s[i] == (kind == K_ARR ? ']' : '}')) {
                i++;
                depth--;
                goto after_value;
            }
            if (s[i] != ',')
                return PV_JS_INVALID;
            i++;
            if (kind == K_ARR)
                continue;
        }
    object_key:
        /* At a key of the object on top of the stack. */
        while (i < n && is_ws(s[i]))
            i++;
        if (i >= n || s[i] != '"')
            return PV_JS_INVALID;
        {
            size_t raw, rl;
            int esc;
            if (scan_string(s, n, &i, &raw, &rl, &esc) != 0)
                return PV_JS_INVALID;
            int role = st[depth - 1] & ~1;
            if (role != R_OTHER) {
                if (esc)
                    unsure = 1; /* "us\u0061ge" is "usage" too */
                if (role == R_TOP) {
                    if (key_is(s, raw, rl, "usage"))
                        slot = S_USAGE;
                    else if (key_is(s, raw, rl, "choices")) {
                        out->has_choices = 1;
                        slot = S_CHOICES;
                    } else if (key_is(s, raw, rl, "error")) {
                        out->has_error = 1;
                    }
                } else if (role == R_USAGE) {
                    if (key_is(s, raw, rl, "prompt_tokens"))
                        slot = S_PT;
                    else if (key_is(s, raw, rl, "completion_tokens"))
                        slot = S_CT;
                    else if (key_is(s, raw, rl, "prompt_tokens_details"))
                        slot = S_DETAILS;
                } else if (role == R_DETAILS) {
                    if (key_is(s, raw, rl, "cached_tokens"))
                        slot = S_CACHED;
                }
            }
        }
        while (i < n && is_ws(s[i]))
            i++;
        if (i >= n || s[i] != ':')
            return PV_JS_INVALID;
        i++;
    }
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
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
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
