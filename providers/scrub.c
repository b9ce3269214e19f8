/*
 * scrub.c: masks a provider's own secrets in anything an upstream sends
 * back (bodies, stream events, headers we forward, error details that
 * reach logs and the ledger).  An upstream that echoes what it received
 * (a misconfigured relay, a debugging proxy, an attacker's endpoint) must
 * not hand llmux's credentials to the client.
 *
 * Secrets of a provider:
 *   api_key                               credential
 *   every headers value                   credential when the header's
 *                                         name says so (key, token, auth,
 *                                         secret, pass, cookie, sig,
 *                                         session, credential), else plain
 *   "SCHEME TOKEN" header values: TOKEN   credential
 *   "Basic B64" values: decoded user:pass and pass   credential
 *   base_url userinfo: user:pass and pass, raw and %-decoded   credential
 * Plain values shorter than 8 bytes and credentials shorter than 4 are not
 * scrubbed (masking "acme" or "1" everywhere would damage ordinary text
 * and protect nothing).
 *
 * Forms matched, for each secret S:
 *   S itself, however JSON-escaped, %-encoded or hex-escaped: the
 *     matcher decodes \" \\ \/ \b \f \n \r \t, \u00XX (ASCII), %XX,
 *     \x73 (C, Python, JS; x and digits in any case), \\x73 and \\u0073
 *     (those inside a JSON string) and C byte lists (0x73, 0x6b / 0X73,0X6B: one ','
 *     and at most one ' ' between bytes) on the fly, so "\u0073k-...",
 *     "a\/b", "sk%2Dproj%2D..." or "{0x73, 0x6b, 0x2d, ...}" match like
 *     the raw bytes, in any mix (a '%', '\', '0' or ',' of S itself
 *     still matches raw);
 *   hex of S's bytes (2 characters a byte) in any mix of lower and upper
 *     case, the bytes run together or apart (one ':', ' ' or '-' between
 *     two, as dump tools write them), and so of each base64 form below
 *     (a Basic header in a hex dump);
 *   base64 of S at each of the three alignments it can have inside a
 *     longer base64 text (e.g. "Authorization: Basic ..." echoed encoded):
 *     the characters that depend on S's bytes only, when >= 8 of them;
 *   prefixes (credentials of length >= 12 only): any run of at least
 *     PV_SCRUB_PREFIX leading characters of S or of one of its base64
 *     forms (2 * PV_SCRUB_PREFIX of a hex form: the same 8 bytes of S), so
 *     an echo cut short by a few characters ("sk-proj-abc...xyz" minus its
 *     tail, a truncated Basic header) is masked too.
 *     Suffixes are not masked: OpenAI's own "sk-...abcd" hints show the
 *     last four characters, which identify a key without revealing it.
 * Of the matches that start at one place the longest is taken (a secret
 * that begins with another is masked whole).  A match is overwritten in
 * place with '*', byte for byte (so lengths, and the validity of the JSON
 * around it, are kept).
 *
 * Streams (pv_scrub_event): each event is masked as above, and a match
 * may also run from the end of a JSON string value of one event into the
 * start of the value under the same key ("content", "text", ...) of a
 * later event of the same stream: the decoded text of consecutive deltas.
 * What is already sent cannot be taken back, and events are never held
 * back: the part of S at the end of the earlier event goes out as it
 * came, and once the joined match counts (all of S, or a prefix long
 * enough, as above) its continuation is masked, over as many events as it
 * spans; an escape cut by an event's end (%2, \\x7, 0x, "0x73, 0") is
 * carried too, as its bytes and as what they may begin.  At most
 * PV_SCRUB_CARRY partial matches are carried at a time; past that a new
 * one replaces the least advanced (fewest characters matched) when it is
 * further on, so false starts (a character or two of a pattern at the
 * ends of many values) do not crowd out a real leak's continuation.
 * A value's last character is carried once for all the patterns it
 * starts (real chunks end their model and fingerprint values in digits,
 * the first characters of many hex forms).
 *
 * Not matched: other encodings (base64 of a %-encoded form, octal
 * escapes, byte lists in other layouts (a newline between bytes, decimal
 * values), case changes of S itself), a secret split across two
 * different keys' values.
 */
#include "providers.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PV_SCRUB_PREFIX 8   /* leading characters that count as a leak */
#define SCRUB_MIN_CRED 4    /* shorter credentials are not scrubbed */
#define SCRUB_MIN_PLAIN 8   /* shorter plain header values neither */
#define SCRUB_MAX_PATTERNS 4096 /* a sanity bound, far above real configs */

struct pat {
    char *s;
    size_t n;
    size_t min; /* a run of this many leading characters counts (n: all) */
    int fold;   /* a hex form: letters match in either case (pat_is) */
};

struct pv_scrub {
    struct pat *p; /* [cap] */
    size_t n, cap;
    size_t maxn;   /* the longest pattern */
    unsigned char first[256]; /* 1: some pattern starts with this byte */
    /* p sorted by first byte: those starting with c are p[from[c]..
     * from[c] + cnt[c]) (index_patterns). */
    uint16_t from[256], cnt[256];
    /* bit (c1 << 8 | c2): some pattern starts with the characters c1 c2
     * (or has only c1) */
    uint64_t pair[65536 / 64];
    unsigned char stop[256];  /* first, and '\\' (an escape may start one) */
    /* bit (c1 << 8 | c2): a match, or a partial one at a string's end,
     * may start at c1 followed by c2: pair, plus c1 an escape ('\\' or
     * '%') whatever follows, plus a first byte followed by an escape or
     * by '"' (the end of a JSON string, where a stream's partial match
     * stops).  The scan's one look-up a byte. */
    unsigned char cand[65536]; /* indexed by pair_ix */
    int refs;  /* holders (pv_scrub_share); pv_scrub_free drops one */
    char *src; /* the provider fields it was built from (src_fields) */
    size_t src_len;
};

/* Pattern txt[0..n); min: leading characters that count (0: all); fold:
 * letters match in either case (hex forms). */
static void
add_pat(struct pv_scrub *s, const char *txt, size_t n, size_t min, int fold)
{
    if (n == 0 || s->n >= SCRUB_MAX_PATTERNS)
        return;
    if (min == 0 || min > n)
        min = n;
    for (size_t i = 0; i < s->n; i++)
        if (s->p[i].n == n && s->p[i].fold == fold &&
            !memcmp(s->p[i].s, txt, n)) {
            if (min < s->p[i].min)
                s->p[i].min = min;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        struct pat *np = realloc(s->p, cap * sizeof(*np));
        if (!np)
            return;
        s->p = np;
        s->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c)
        return; /* out of memory: one form fewer, never a crash */
    memcpy(c, txt, n);
    c[n] = '\0';
    s->p[s->n].s = c;
    s->p[s->n].n = n;
    s->p[s->n].min = min;
    s->p[s->n].fold = fold;
    s->n++;
    if (n > s->maxn)
        s->maxn = n;
    s->first[(unsigned char)c[0]] = 1;
    s->stop[(unsigned char)c[0]] = 1;
    s->stop['\\'] = 1; /* an escape or a %XX may start any pattern */
    s->stop['%'] = 1;
    s->stop['0'] = 1; /* and a "0x73" */
}

static const char b64tab[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Base64 of in's whole 3-byte groups (no padding, no partial group). */
static size_t
b64_groups(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 |
                     in[i + 2];
        out[o++] = b64tab[v >> 18 & 63];
        out[o++] = b64tab[v >> 12 & 63];
        out[o++] = b64tab[v >> 6 & 63];
        out[o++] = b64tab[v & 63];
    }
    return o;
}

static int
b64_val(int c)
{
    const char *p = c ? strchr(b64tab, c) : NULL;
    return p ? (int)(p - b64tab) : -1;
}

/* Decodes standard base64 (padding optional) into out (room for n bytes);
 * returns the length, or -1 when it is not base64. */
static long
b64_decode(const char *in, size_t n, unsigned char *out)
{
    while (n > 0 && in[n - 1] == '=')
        n--;
    unsigned acc = 0;
    int bits = 0;
    long o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = acc << 6 | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits & 0xFF);
        }
    }
    return o;
}

/* Pattern txt[0..n) and its hex form (two digits a byte, so twice the
 * characters count), whose letters match in either case.  The patterns
 * are looked up by their exact first byte, so a form that starts with a
 * letter (a byte from 0xa0 on) is added once more starting upper case;
 * the ASCII bytes of most secrets start with a digit. */
static void
add_form(struct pv_scrub *s, const char *txt, size_t n, size_t min)
{
    add_pat(s, txt, n, min, 0);
    char *h = malloc(2 * n + 1);
    if (!h)
        return;
    static const char *const digits[] = {"0123456789abcdef",
                                         "0123456789ABCDEF"};
    for (size_t c = 0; c < 2; c++) {
        if (c == 1 && (unsigned char)txt[0] < 0xa0)
            break;
        for (size_t i = 0; i < n; i++) {
            h[2 * i] = digits[c][(unsigned char)txt[i] >> 4];
            h[2 * i + 1] = digits[c][(unsigned char)txt[i] & 15];
        }
        add_pat(s, h, 2 * n, 2 * min, 1);
    }
    free(h);
}

/* Adds secret S, raw and its base64 forms, each also in hex. */
static void
add_secret(struct pv_scrub *s, const char *txt, size_t n, int cred)
{
    if (n < (cred ? SCRUB_MIN_CRED : SCRUB_MIN_PLAIN))
        return;
    size_t min = cred && n >= 12 ? PV_SCRUB_PREFIX : 0;
    add_form(s, txt, n, min);
    char *b = malloc(n / 3 * 4 + 4);
    if (!b)
        return;
    for (size_t j = 0; j < 3 && j < n; j++) {
        size_t bl = b64_groups((const unsigned char *)txt + j, n - j, b);
        if (bl >= 8)
            add_form(s, b, bl, min);
    }
    free(b);
}

static int
hexv(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A secret that may be %-encoded (URL userinfo): both forms. */
static void
add_url_secret(struct pv_scrub *s, const char *txt, size_t n)
{
    add_secret(s, txt, n, 1);
    char *d = malloc(n + 1);
    if (!d)
        return;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (txt[i] == '%' && i + 2 < n && hexv(txt[i + 1]) >= 0 &&
            hexv(txt[i + 2]) >= 0) {
            d[o++] = (char)(hexv(txt[i + 1]) * 16 + hexv(txt[i + 2]));
            i += 2;
        } else {
            d[o++] = txt[i];
        }
    }
    if (o != n)
        add_secret(s, d, o, 1);
    free(d);
}

static int
name_is_credential(const char *name)
{
    static const char *const words[] = {"key",  "token",   "auth",
                                        "secret", "pass",  "cookie",
                                        "sig",  "session", "credential"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcasestr(name, words[i]))
            return 1;
    return 0;
}

/* "user:pass": the whole and the password. */
static void
add_userpass(struct pv_scrub *s, const char *up, size_t n, int url)
{
    const char *colon = memchr(up, ':', n);
    if (url) {
        add_url_secret(s, up, n);
        if (colon)
            add_url_secret(s, colon + 1, n - (size_t)(colon + 1 - up));
    } else {
        add_secret(s, up, n, 1);
        if (colon)
            add_secret(s, colon + 1, n - (size_t)(colon + 1 - up), 1);
    }
}

static void
add_header_value(struct pv_scrub *s, const char *name, const char *v)
{
    size_t n = strlen(v);
    /* "Bearer TOKEN", "Basic B64", "Token T": the token is a credential
     * whatever the header is called; the whole value is matched in full
     * only (its first 8 bytes are "Bearer x", not secret). */
    size_t sl = 0;
    while (sl < n && isalpha((unsigned char)v[sl]))
        sl++;
    if (sl == 0 || sl >= n || v[sl] != ' ') {
        add_secret(s, v, n, name_is_credential(name));
        return;
    }
    add_secret(s, v, n, 0);
    const char *tok = v + sl + 1;
    size_t tl = n - sl - 1;
    add_secret(s, tok, tl, 1);
    if (sl == 5 && !strncasecmp(v, "basic", 5)) {
        unsigned char *d = malloc(tl + 1);
        long dl = d ? b64_decode(tok, tl, d) : -1;
        if (dl > 0)
            add_userpass(s, (const char *)d, (size_t)dl, 0);
        free(d);
    }
}

/* One field of a provider's secrets' source: with b, appended to b as a
 * tag byte (1: set, 0: NULL) and the string with its NUL; without b,
 * compared with the next field at *at (-1 when it differs). */
static int
src_field(struct gx_buf *b, const char **at, const char *end, const char *v)
{
    char tag = v ? 1 : 0;
    size_t l = v ? strlen(v) + 1 : 0;
    if (b)
        return gx_buf_append(b, &tag, 1) == GX_OK &&
                       (!v || gx_buf_append(b, v, l) == GX_OK)
                   ? 0
                   : -1;
    if (*at >= end || **at != tag)
        return -1;
    ++*at;
    if ((size_t)(end - *at) < l || (l && memcmp(*at, v, l) != 0))
        return -1;
    *at += l;
    return 0;
}

/* Every field pv_scrub_new reads from p, into b or compared with
 * blob[0..len) (0: the same). */
static int
src_fields(struct gx_buf *b, const char *blob, size_t len,
           const struct cfg_provider *p)
{
    const char *at = blob, *end = blob ? blob + len : NULL;
    if (src_field(b, &at, end, p->api_key) != 0 ||
        src_field(b, &at, end, p->base_url) != 0)
        return -1;
    for (size_t i = 0; i < p->n_headers; i++)
        if (src_field(b, &at, end, p->headers[i].name) != 0 ||
            src_field(b, &at, end, p->headers[i].value) != 0)
            return -1;
    return b || at == end ? 0 : -1;
}

static int
pat_cmp(const void *a, const void *b)
{
    const struct pat *x = a, *y = b;
    return (int)(unsigned char)x->s[0] - (int)(unsigned char)y->s[0];
}

/* The cand index of the two bytes at t: one 16-bit load (the same bytes
 * give the same index whatever the byte order). */
static inline unsigned
pair_ix(const unsigned char *t)
{
    uint16_t v;
    memcpy(&v, t, sizeof(v));
    return v;
}

/* An ASCII letter in the other case, anything else as it is. */
static int
pair_other(unsigned c)
{
    if (c >= 'a' && c <= 'z')
        return (int)(c - ('a' - 'A'));
    if (c >= 'A' && c <= 'Z')
        return (int)(c + ('a' - 'A'));
    return (int)c;
}

/* Sorts the patterns by first byte and fills from/cnt: a byte's look-ups
 * then try only the patterns that start with it (hex forms make digits
 * common first bytes). */
static void
index_patterns(struct pv_scrub *s)
{
    qsort(s->p, s->n, sizeof(*s->p), pat_cmp);
    for (size_t i = s->n; i-- > 0;) {
        const unsigned char *c = (const unsigned char *)s->p[i].s;
        s->from[c[0]] = (uint16_t)i;
        s->cnt[c[0]]++;
        unsigned c1 = c[s->p[i].n > 1 ? 1 : 0];
        for (int u = 0; u < 1 + s->p[i].fold; u++) {
            /* a hex form's second character in either case */
            unsigned c2 = u ? (unsigned)pair_other(c1) : c1;
            unsigned v = (unsigned)c[0] << 8 | c2;
            s->pair[v / 64] |= 1ULL << (v % 64);
        }
    }
    /* cand (s is calloc'd): the pairs, an escape and anything, a first
     * byte and an escape or '"'; a few thousand stores, not 64K tests. */
    for (size_t i = 0; i < s->n; i++) {
        const char *c = s->p[i].s;
        unsigned char b[2] = {(unsigned char)c[0],
                              (unsigned char)c[s->p[i].n > 1 ? 1 : 0]};
        s->cand[pair_ix(b)] = 1;
        if (s->p[i].fold) {
            b[1] = (unsigned char)pair_other(b[1]);
            s->cand[pair_ix(b)] = 1;
        }
    }
    for (unsigned c = 0; c < 256; c++) {
        unsigned char e1[2] = {'\\', (unsigned char)c}, e2[2] = {'%', (unsigned char)c};
        s->cand[pair_ix(e1)] = 1;
        s->cand[pair_ix(e2)] = 1;
        if (c == 'x' || c == 'X' || c == '"') {
            /* "0x73" may start any pattern; a value's "0" end a cut one */
            unsigned char z[2] = {'0', (unsigned char)c};
            s->cand[pair_ix(z)] = 1;
        }
        if (!s->first[c])
            continue;
        static const unsigned char after[] = {'\\', '%', '"'};
        for (size_t j = 0; j < sizeof(after); j++) {
            unsigned char b[2] = {(unsigned char)c, after[j]};
            s->cand[pair_ix(b)] = 1;
        }
    }
}

struct pv_scrub *
pv_scrub_share(struct pv_scrub *s, const struct cfg_provider *p)
{
    if (!s || !p || !s->src || src_fields(NULL, s->src, s->src_len, p) != 0)
        return NULL;
    s->refs++;
    return s;
}

struct pv_scrub *
pv_scrub_new(const struct cfg_provider *p)
{
    if (!p)
        return NULL;
    struct pv_scrub *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (p->api_key)
        add_secret(s, p->api_key, strlen(p->api_key), 1);
    for (size_t i = 0; i < p->n_headers; i++)
        if (p->headers[i].value)
            add_header_value(s, p->headers[i].name ? p->headers[i].name : "",
                             p->headers[i].value);
    const char *u = p->base_url ? strstr(p->base_url, "://") : NULL;
    if (u) {
        u += 3;
        size_t auth = strcspn(u, "/?#");
        const char *at = NULL;
        for (size_t i = 0; i < auth; i++)
            if (u[i] == '@')
                at = u + i; /* the last '@' ends the userinfo */
        if (at)
            add_userpass(s, u, (size_t)(at - u), 1);
    }
    s->refs = 1;
    if (s->n == 0) {
        pv_scrub_free(s);
        return NULL;
    }
    index_patterns(s);
    struct gx_buf b;
    gx_buf_init(&b, 0);
    if (src_fields(&b, NULL, 0, p) == 0 && b.data) {
        s->src = b.data; /* owned now */
        s->src_len = b.len;
    } else {
        if (b.data)
            memset(b.data, 0, b.len);
        gx_buf_cleanup(&b); /* out of memory: never shared, still works */
    }
    return s;
}

void
pv_scrub_free(struct pv_scrub *s)
{
    if (!s || --s->refs > 0)
        return;
    if (s->src) {
        memset(s->src, 0, s->src_len);
        free(s->src);
    }
    for (size_t i = 0; i < s->n; i++) {
        memset(s->p[i].s, 0, s->p[i].n);
        free(s->p[i].s);
    }
    free(s->p);
    free(s);
}

/* Text-level escapes of one byte, each ending in its two hex digits:
 * H a hex digit, 7 one of 0-7, X 'x' or 'X', anything else itself.  A
 * model or an echo writes them in the text (C, Python and JS "\x73", a
 * C array's "0x73, 0x6b", %XX, and a JSON "\u0073" written as text);
 * inside a JSON string the backslash is itself escaped ("\\x73",
 * "\\u0073": what a client that decodes the text once more gets).  The ", 0x" forms go on a byte list and
 * count only after a first character (mid).  SCRUB_ESC_MAX bounds them
 * (and the JSON escapes). */
#define SCRUB_ESC_MAX 7
static const char *const esc_forms[] = {
    "%HH", "\\XHH", "\\\\XHH", "\\\\u007H", "0XHH", ",0XHH", ", 0XHH",
};
#define ESC_MID 5 /* esc_forms[ESC_MID..]: only after a first character */

/* How t[0..len) stands to escape form f: 1 it starts with all of it, 0
 * it is a proper prefix of it (a cut one), -1 neither. */
static int
esc_form(const char *f, const char *t, size_t len)
{
    size_t i = 0;
    for (; f[i] && i < len; i++) {
        int c = (unsigned char)t[i];
        if (f[i] == 'H' ? hexv(c) < 0
            : f[i] == 'X' ? (c != 'x' && c != 'X')
            : f[i] == '7' ? !(c >= '0' && c <= '7')
                          : c != f[i])
            return -1;
    }
    return f[i] ? 0 : 1;
}

/* 1 when t[0..len) (len < SCRUB_ESC_MAX) is a text-level escape cut short
 * by the text's end, which the next text of a stream may complete. */
/* 1 when an escape may start with the byte c (mid: after a first
 * character, where the ", 0x" forms count). */
static const unsigned char esc_first[256] = {
    ['%'] = 1, ['\\'] = 1, ['0'] = 1, [','] = 2,
};
static inline int
esc_start(int c, int mid)
{
    return esc_first[c] & (mid ? 3 : 1);
}

static int
esc_cut(const char *t, size_t len, int mid)
{
    if (!esc_start((unsigned char)t[0], mid))
        return 0; /* the usual case: no escape starts here */
    size_t nf = mid ? sizeof(esc_forms) / sizeof(esc_forms[0]) : ESC_MID;
    for (size_t f = 0; f < nf; f++)
        if (esc_form(esc_forms[f], t, len) == 0)
            return 1;
    return 0;
}

/* One logical character of text at t[j..n): the byte, or what a JSON
 * escape or a text-level escape (esc_forms) stands for.  *adv gets the
 * bytes it spans. */
static int
decode_at(const char *t, size_t j, size_t n, size_t *adv, int mid)
{
    *adv = 1;
    /* the forms that start with t[j]: esc_forms[f0..f1) */
    size_t f0 = t[j] == '%' ? 0 : t[j] == '\\' ? 1 : t[j] == '0' ? 4 : 5;
    size_t f1 = f0 == 0 ? 1 : f0 == 1 ? 4 : f0 == 4 ? 5 : mid ? 7 : 5;
    for (size_t f = f0; f < f1; f++) {
        size_t fl = strlen(esc_forms[f]);
        if (j + fl <= n && esc_form(esc_forms[f], t + j, fl) == 1) {
            *adv = fl;
            return hexv(t[j + fl - 2]) << 4 | hexv(t[j + fl - 1]);
        }
    }
    if (t[j] != '\\' || j + 1 >= n)
        return (unsigned char)t[j];
    switch (t[j + 1]) {
    case '"': case '\\': case '/':
        *adv = 2;
        return t[j + 1];
    case 'b': *adv = 2; return '\b';
    case 'f': *adv = 2; return '\f';
    case 'n': *adv = 2; return '\n';
    case 'r': *adv = 2; return '\r';
    case 't': *adv = 2; return '\t';
    case 'u':
        if (j + 5 < n && hexv(t[j + 2]) >= 0 && hexv(t[j + 3]) >= 0 &&
            hexv(t[j + 4]) >= 0 && hexv(t[j + 5]) >= 0) {
            int cp = hexv(t[j + 2]) << 12 | hexv(t[j + 3]) << 8 |
                     hexv(t[j + 4]) << 4 | hexv(t[j + 5]);
            if (cp < 0x80) {
                *adv = 6;
                return cp;
            }
        }
        return '\\';
    default:
        return '\\';
    }
}

/* decode_at with the common case (a plain byte) inline: only '\\', '%',
 * '0' and (mid) ',' may start an escape. */
static inline int
dec(const char *t, size_t j, size_t n, size_t *adv, int mid)
{
    unsigned char c = (unsigned char)t[j];
    if (!esc_start(c, mid)) {
        *adv = 1;
        return c;
    }
    return decode_at(t, j, n, adv, mid);
}

/* ASCII upper case to lower, anything else as it is. */
static inline int
fold_c(int c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* A separator a hex dump may put between two bytes' digits ("73:6b",
 * "73 6b", "73-6b"): skipped before a hex form's byte (pat.fold). */
static inline int
hex_sep(int c)
{
    return c == ':' || c == ' ' || c == '-';
}

/* 1 when the (decoded) character ch is p's k-th. */
static inline int
pat_is(const struct pat *p, size_t k, int ch)
{
    int c = (unsigned char)p->s[k];
    return ch == c || (p->fold && fold_c(ch) == fold_c(c));
}

/* Where a match of one pattern stands: k characters matched, and an
 * escape cut by the end of the last text (esc_cut): its pend bytes in pb.
 * rawn: those bytes also matched as they are (rawn characters, counted
 * in k), so k - rawn is where the escape's character goes. */
struct mstate {
    size_t k;
    int pend, rawn;
    char pb[SCRUB_ESC_MAX];
};

/* A match in progress over one text. */
struct run {
    size_t j;     /* the next byte */
    size_t last;  /* the end of the last character matched */
    size_t kk;    /* characters of the pattern matched */
    size_t sep_k; /* the byte a hex separator was skipped before */
};

/* Goes on with p over t[r->j..lim) (lim <= n).  Returns 0 at a mismatch
 * or p's end, 1 when it reached lim with p unfinished, 2 when (cut) the
 * rest, t[r->j..n), is an escape the text's end cut (esc_cut). */
static int
run_to(const struct pat *p, const char *t, size_t n, size_t lim, int cut,
       struct run *r)
{
    /* in locals: the loop keeps them in registers */
    size_t j = r->j, last = r->last, kk = r->kk, sep_k = r->sep_k;
    int st = 1;
    while (j < lim && kk < p->n) {
        if (p->fold && kk && !(kk & 1) && kk != sep_k && hex_sep(t[j])) {
            sep_k = kk; /* one between two bytes' digits */
            j++;
            continue;
        }
        if (cut && n - j < SCRUB_ESC_MAX && esc_start((unsigned char)t[j], kk > 0) &&
            esc_cut(t + j, n - j, kk > 0)) {
            st = 2;
            break;
        }
        size_t adv;
        int ch = dec(t, j, n, &adv, kk > 0);
        if (!pat_is(p, kk, ch)) {
            if (adv > 1 && t[j] == p->s[kk]) {
                /* a raw '\\', '%', '0' or ',' in the secret itself */
                adv = 1;
            } else {
                st = 0;
                break;
            }
        }
        kk++;
        j += adv;
        last = j;
    }
    r->j = j;
    r->last = last;
    r->kk = kk;
    r->sep_k = sep_k;
    return st == 1 ? kk < p->n : st;
}

/* An escape cut at b[r->j..n), the text's end: the match as the escape
 * would go on into *ms (and as the bytes are, when they match so), or
 * the whole match when those bytes, as they are, end it (*wend: where,
 * in b).  Returns as match_run. */
static int
cut_escape(const struct pat *p, struct mstate *ms, const char *b, size_t n,
           const struct run *r, size_t *wend)
{
    struct run raw = *r;
    run_to(p, b, n, n, 0, &raw);
    int whole = raw.kk == p->n;
    *wend = raw.last;
    ms->rawn = raw.j >= n && !whole ? (int)(raw.kk - r->kk) : 0;
    ms->k = whole ? p->n : r->kk + (size_t)ms->rawn;
    ms->pend = whole ? 0 : (int)(n - r->j);
    memset(ms->pb, 0, sizeof(ms->pb));
    if (!whole)
        memcpy(ms->pb, b + r->j, n - r->j);
    return !whole;
}

/* Pattern p from state *ms on against t[i..n): *ms becomes the state
 * after it, *end where the text matched ends.  Returns 1 when the text ran
 * out before the pattern did (a match that may go on in the next text),
 * 0 when it stopped at a mismatch or p's end. */
static int
match_run(const struct pat *p, struct mstate *ms, const char *t, size_t i,
          size_t n, size_t *end)
{
    struct run r = {i, i, ms->k, 0};
    *end = i;
    if (ms->pend) {
        /* The bytes of the escape the last text cut, then t's first: the
         * characters that start in those bytes are matched over the
         * join, from where the escape's character goes. */
        char jb[2 * SCRUB_ESC_MAX];
        size_t pl = (size_t)ms->pend;
        size_t tl = n - i < SCRUB_ESC_MAX ? n - i : SCRUB_ESC_MAX;
        memcpy(jb, ms->pb, pl);
        memcpy(jb + pl, t + i, tl);
        struct run q = {0, 0, ms->k - (size_t)ms->rawn, 0};
        int st = run_to(p, jb, pl + tl, pl, tl == n - i, &q);
        r.kk = q.kk;
        r.sep_k = q.sep_k;
        r.j = q.j > pl ? i + q.j - pl : i;
        r.last = q.last > pl ? i + q.last - pl : i;
        ms->pend = 0;
        ms->rawn = 0;
        if (st == 2) { /* t ended inside the escape again */
            size_t we;
            int more = cut_escape(p, ms, jb, pl + tl, &q, &we);
            *end = more ? n : we > pl ? i + we - pl : i;
            return more;
        }
        if (st == 0) {
            ms->k = r.kk;
            *end = r.last;
            return 0;
        }
    }
    int st = run_to(p, t, n, n, 1, &r);
    if (st == 2) {
        size_t we;
        int more = cut_escape(p, ms, t, n, &r, &we);
        *end = more ? n : we;
        return more;
    }
    ms->k = r.kk;
    ms->pend = 0;
    ms->rawn = 0;
    *end = r.last; /* a separator the match did not go on after is not in */
    return r.j >= n && r.kk < p->n;
}

/* End of the match of pattern p at t[i..n), or 0 for none. */
static size_t
match_at(const struct pat *p, const char *t, size_t i, size_t n)
{
    struct mstate ms = {0, 0, 0, {0}};
    size_t e;
    match_run(p, &ms, t, i, n, &e);
    return ms.k >= p->min ? e : 0;
}

/* Cheap test before any pattern is tried: some pattern can start with
 * the character ch at t[i] (of adv bytes) and the byte after it (an
 * escape, or the text's end, may go on with any). */
static int
may_start(const struct pv_scrub *s, int ch, const char *t, size_t i,
          size_t adv, size_t n)
{
    if (i + adv >= n || adv > 1)
        return 1;
    unsigned char c2 = (unsigned char)t[i + adv];
    unsigned v = (unsigned)ch << 8 | c2;
    return c2 == '\\' || c2 == '%' || (s->pair[v / 64] >> (v % 64) & 1);
}

/* Cheap test before the escape-aware match: the byte after a first
 * character at t[i] (of adv bytes) can go on with p. */
static int
may_go_on(const struct pat *p, const char *t, size_t i, size_t adv, size_t n)
{
    if (p->n < 2 || i + adv >= n || adv > 1)
        return 1;
    char c = t[i + adv];
    return pat_is(p, 1, (unsigned char)c) || c == '\\' || c == '%';
}

/* The first position at or after i (< n) where some match may start (a
 * cand pair, or the last byte), eight look-ups tested at once: most text
 * has none. */
static inline size_t
next_cand(const struct pv_scrub *s, const unsigned char *t, size_t i,
          size_t n)
{
    const unsigned char *c = s->cand;
    while (i + 8 < n &&
           !(c[pair_ix(t + i)] | c[pair_ix(t + i + 1)] |
             c[pair_ix(t + i + 2)] | c[pair_ix(t + i + 3)] |
             c[pair_ix(t + i + 4)] | c[pair_ix(t + i + 5)] |
             c[pair_ix(t + i + 6)] | c[pair_ix(t + i + 7)]))
        i += 8;
    /* Which of the (at most) eight: no bound test but the last's. */
    if (i + 8 < n) {
        for (size_t e = i + 7; i < e && !c[pair_ix(t + i)]; i++)
            ;
        return i;
    }
    while (i + 1 < n && !c[pair_ix(t + i)])
        i++;
    return i;
}

/* Where a stream's scan saw a partial match may start (cand bits, in
 * order): the only places tail_partials needs to look.  all: too many, or
 * a match was found (its inside is not scanned): look everywhere. */
#define SCRUB_CANDS 32
struct cands {
    size_t at[SCRUB_CANDS];
    unsigned n;
    int all;
    int esc; /* one of them is a '\\' or a '%' */
};

/* The end of the longest match at t[i..n) of the patterns that start
 * with the character d (of adv bytes there), or 0. */
static size_t
best_at(const struct pv_scrub *s, const char *t, size_t i, size_t n, int d,
        size_t adv)
{
    size_t best = 0;
    for (size_t k = s->from[d]; k < (size_t)s->from[d] + s->cnt[d]; k++) {
        const struct pat *p = &s->p[k];
        /* Most false starts ("s" of "usage" for an "sk-" key) end at the
         * next byte: rejected before the escape-aware match. */
        if (!may_go_on(p, t, i, adv, n))
            continue;
        size_t e = match_at(p, t, i, n);
        if (e > best)
            best = e;
    }
    return best;
}

/* First match at or after from (the longest of those starting there, so
 * a secret that begins with another is masked whole): its start in *at,
 * its end returned; 0 when there is none.  rec (may be NULL) gets the
 * places the scan stopped at. */
static size_t
find(const struct pv_scrub *s, const char *t, size_t n, size_t from,
     size_t *at, struct cands *rec)
{
    const unsigned char *u = (const unsigned char *)t;
    for (size_t i = from; i < n; i++) {
        i = next_cand(s, u, i, n);
        if (i + 1 < n) {
            /* A byte before a key's closing quote ("choices":) ends no
             * value: no partial match starts there. */
            if (rec && !rec->all &&
                !(u[i + 1] == '"' && i + 2 < n && u[i + 2] == ':' &&
                  u[i] != '\\' && u[i] != '%')) {
                if (rec->n < SCRUB_CANDS)
                    rec->at[rec->n++] = i;
                else
                    rec->all = 1;
                rec->esc |= u[i] == '\\' || u[i] == '%';
            }
        } else if (!s->stop[u[i]]) {
            break; /* the last byte, which no match starts at */
        }
        size_t adv, best = 0;
        int d = dec(t, i, n, &adv, 0);
        if (s->first[(unsigned char)d] && may_start(s, d, t, i, adv, n))
            best = best_at(s, t, i, n, d, adv);
        if (adv > 1 && s->first[u[i]] && may_start(s, u[i], t, i, 1, n)) {
            /* an escape's first byte as it is: a key may itself start
             * with "0x" or "%" */
            size_t e = best_at(s, t, i, n, u[i], 1);
            if (e > best)
                best = e;
        }
        if (best > i) {
            *at = i;
            if (rec)
                rec->all = 1;
            return best;
        }
    }
    return 0;
}

int
pv_scrub_has(const struct pv_scrub *s, const char *buf, size_t len)
{
    size_t at;
    return s && buf && find(s, buf, len, 0, &at, NULL) > 0;
}

size_t
pv_scrub(const struct pv_scrub *s, char *buf, size_t len)
{
    if (!s || !buf)
        return 0;
    size_t hits = 0, i = 0, at;
    size_t e;
    while ((e = find(s, buf, len, i, &at, NULL)) > 0) {
        memset(buf + at, '*', e - at);
        hits++;
        i = e;
    }
    return hits;
}

/* ---- streams ------------------------------------------------------------- */

/* One event's masking: data stays as it came; the first mask makes the
 * copy that all masks go to. */
struct ev_mask {
    const char *data;
    size_t len;
    char *copy;
    int oom;
    int hits;
};

static void
ev_mask(struct ev_mask *m, size_t from, size_t to)
{
    if (to <= from || m->oom)
        return;
    if (!m->copy) {
        if (!(m->copy = malloc(m->len ? m->len : 1))) {
            m->oom = 1;
            return;
        }
        memcpy(m->copy, m->data, m->len);
    }
    memset(m->copy + from, '*', to - from);
    m->hits++;
}

/* The closing quote of the JSON string whose first byte is at d[i], or
 * len when it is not closed. */
static size_t
string_end(const char *d, size_t i, size_t len)
{
    while (i < len) {
        const char *q = memchr(d + i, '"', len - i);
        if (!q)
            return len;
        size_t at = (size_t)(q - d), bs = 0;
        while (at - bs > i && d[at - bs - 1] == '\\')
            bs++;
        if (bs % 2 == 0)
            return at;
        i = at + 1;
    }
    return len;
}

#define PAT_ANY UINT32_MAX /* a carried %XX cut before any pattern began */
/* A value's last character, pv, as the first of every pattern that starts
 * with it: one entry, not one a pattern (a model name's last digit starts
 * every hex form whose first digit it is; they would crowd the carry). */
#define PAT_FIRST (UINT32_MAX - 1)

/* How far a carried entry has come: its characters matched (a value's
 * last character, PAT_FIRST, is one). */
static size_t
carry_prog(size_t pat, size_t k)
{
    return k + (pat == PAT_FIRST);
}

static void
carry_add(struct pv_scrub_carry *cy, const char *key, size_t kl, size_t pat,
          const struct mstate *ms)
{
    /* key[0..kl), kl < sizeof(key): the caller's */
    for (unsigned i = 0; i < cy->n; i++)
        if (cy->m[i].pat == pat && cy->m[i].k == ms->k &&
            cy->m[i].pend == ms->pend && cy->m[i].rawn == ms->rawn &&
            !memcmp(cy->m[i].pb, ms->pb, sizeof(ms->pb)) &&
            cy->m[i].key[kl] == '\0' && !memcmp(cy->m[i].key, key, kl))
            return;
    unsigned at = cy->n;
    if (at >= PV_SCRUB_CARRY) {
        /* Full: the new one replaces the least advanced entry when it is
         * further on itself (a real leak's continuation is not crowded
         * out by false starts, which end after a character or two). */
        at = 0;
        for (unsigned i = 1; i < cy->n; i++)
            if (carry_prog(cy->m[i].pat, cy->m[i].k) <
                carry_prog(cy->m[at].pat, cy->m[at].k))
                at = i;
        if (carry_prog(pat, ms->k) <= carry_prog(cy->m[at].pat, cy->m[at].k))
            return;
    } else {
        cy->n++;
    }
    memcpy(cy->m[at].key, key, kl);
    cy->m[at].key[kl] = '\0';
    cy->m[at].pat = (uint32_t)pat;
    cy->m[at].k = (uint32_t)ms->k;
    cy->m[at].pend = (unsigned char)ms->pend;
    cy->m[at].rawn = (unsigned char)ms->rawn;
    memcpy(cy->m[at].pb, ms->pb, sizeof(ms->pb));
}

static void
carried(const struct pv_scrub_carry *cy, unsigned c, struct mstate *ms)
{
    ms->k = cy->m[c].k;
    ms->pend = cy->m[c].pend;
    ms->rawn = cy->m[c].rawn;
    memcpy(ms->pb, cy->m[c].pb, sizeof(ms->pb));
}

/* The partial matches of the patterns starting at d[i] that run to the
 * end of the value d[..ve) (a pattern's first k < n characters), into nw
 * under key. */
static void
tail_at(const struct pv_scrub *s, const char *d, size_t i, size_t ve,
        const char *key, size_t kl, struct pv_scrub_carry *nw)
{
    if (!s->stop[(unsigned char)d[i]])
        return;
    size_t adv;
    int ch = dec(d, i, ve, &adv, 0);
    /* an escape's character, then its first byte as it is (as find) */
    for (int raw = 0; raw < 1 + (adv > 1); raw++) {
        if (raw) {
            ch = (unsigned char)d[i];
            adv = 1;
        }
        if (!s->first[(unsigned char)ch] || !may_start(s, ch, d, i, adv, ve))
            continue;
        if (adv == 1 && i + 1 == ve) {
            /* The value's last byte (a "6" of a model name, an "s"): the
             * first character of each pattern that starts with it. */
            const struct mstate one = {0, 0, 0, {(char)ch}};
            carry_add(nw, key, kl, PAT_FIRST, &one);
            return;
        }
        for (size_t k = s->from[ch]; k < (size_t)s->from[ch] + s->cnt[ch];
             k++) {
            const struct pat *p = &s->p[k];
            if (ch != (unsigned char)p->s[0] || !may_go_on(p, d, i, adv, ve))
                continue;
            struct mstate ms = {0, 0, 0, {0}};
            size_t e;
            if (match_run(p, &ms, d, i, ve, &e) && (ms.k > 0 || ms.pend))
                carry_add(nw, key, kl, k, &ms);
        }
    }
}

/* The key of the value being looked at: the raw text d[ks..ke), decoded
 * into key only when a carry needs it (most values need none), and not
 * even then when the event has no escape at all (plain). */
struct evkey {
    size_t ks, ke;
    int plain; /* no '\\' or '%' in the event: a key's bytes are its text */
    int ready; /* txt, len and ok are set */
    int ok;    /* short enough to carry */
    const char *txt; /* the key's text, len bytes (no NUL) */
    size_t len;
    char key[sizeof(((struct pv_scrub_carry *)0)->m[0].key)];
};

/* The key as text (an upstream may escape it too), its length in
 * k->len; NULL when too long. */
static const char *
key_text(struct evkey *k, const char *d)
{
    if (!k->ready) {
        size_t kl = k->ke - k->ks, adv;
        if (k->plain) {
            k->txt = d + k->ks;
        } else {
            k->txt = k->key;
            kl = 0;
            for (size_t j = k->ks; j < k->ke && kl < sizeof(k->key); j += adv)
                k->key[kl++] = (char)dec(d, j, k->ke, &adv, 0);
        }
        k->ok = kl < sizeof(k->key);
        k->len = kl;
        k->ready = 1;
    }
    return k->ok ? k->txt : NULL;
}

/* 1 when the key is the text ck (a carried key, NUL-terminated). */
static int
key_is(struct evkey *k, const char *d, const char *ck)
{
    const char *key = key_text(k, d);
    return key && ck[k->len] == '\0' && memcmp(ck, key, k->len) == 0;
}

/* The partial matches that run to the end of the value d[vs..ve), into
 * nw under the key: only from the places the scan recorded (rc, from
 * *cur on), or from every byte when it recorded too many. */
static void
tail_partials(const struct pv_scrub *s, const char *d, size_t vs, size_t ve,
              struct evkey *k, const struct cands *rc, unsigned *cur,
              struct pv_scrub_carry *nw)
{
    /* A partial match has under maxn characters of at most
     * SCRUB_ESC_MAX bytes. */
    size_t from = ve - vs > SCRUB_ESC_MAX * s->maxn
                      ? ve - SCRUB_ESC_MAX * s->maxn
                      : vs;
    /* An escape cut before its byte may be any pattern's first: it
     * starts at a place the scan stops at, among the last bytes. */
    size_t cut = ve, near = ve - vs >= SCRUB_ESC_MAX ? ve - SCRUB_ESC_MAX + 1
                                                     : vs;
    const char *key = NULL;
    if (rc->all) {
        for (size_t i = from; i < ve; i++)
            if (s->stop[(unsigned char)d[i]] && (key || (key = key_text(k, d)))) {
                tail_at(s, d, i, ve, key, k->len, nw);
                if (cut == ve && i >= near && esc_cut(d + i, ve - i, 0))
                    cut = i;
            }
    } else {
        while (*cur < rc->n && rc->at[*cur] < from)
            ++*cur;
        for (; *cur < rc->n && rc->at[*cur] < ve; ++*cur) {
            size_t i = rc->at[*cur];
            if (key || (key = key_text(k, d)))
                tail_at(s, d, i, ve, key, k->len, nw);
            if (cut == ve && i >= near && esc_cut(d + i, ve - i, 0))
                cut = i;
        }
    }
    if (cut < ve && (key || (key = key_text(k, d)))) {
        struct mstate ms = {0, (int)(ve - cut), 0, {0}};
        memcpy(ms.pb, d + cut, ve - cut);
        carry_add(nw, key, k->len, PAT_ANY, &ms);
    }
}

/* Every pattern whose first character is c0 (carried) goes on at d[j..ve)
 * of the value that starts at vs: masked from vs once the joined match
 * counts, what may still go on into nw. */
static void
first_on(const struct pv_scrub *s, int c0, const char *d, size_t j,
         size_t vs, size_t ve, const char *key, size_t kl, struct ev_mask *m,
         struct pv_scrub_carry *nw)
{
    for (size_t k = s->from[c0]; k < (size_t)s->from[c0] + s->cnt[c0]; k++) {
        const struct pat *p = &s->p[k];
        struct mstate m2 = {1, 0, 0, {0}};
        size_t end;
        int more = match_run(p, &m2, d, j, ve, &end);
        if (m2.k >= p->min)
            ev_mask(m, vs, end);
        if (more)
            carry_add(nw, key, kl, k, &m2);
    }
}

/* Carried entry c goes on in the value d[vs..ve): its continuation
 * masked once the joined match counts, what may still go on into nw. */
static void
go_on(const struct pv_scrub *s, const struct pv_scrub_carry *cy, unsigned c,
      const char *d, size_t vs, size_t ve, const char *key, size_t kl,
      struct ev_mask *m, struct pv_scrub_carry *nw)
{
    struct mstate ms;
    carried(cy, c, &ms);
    size_t end;
    if (cy->m[c].pat == PAT_FIRST) {
        unsigned char c0 = vs < ve ? (unsigned char)d[vs] : 0;
        unsigned char c1 = (unsigned char)ms.pb[0];
        unsigned v = (unsigned)c1 << 8 | c0;
        if (vs < ve && c0 != '\\' && c0 != '%' &&
            !(s->pair[v / 64] >> (v % 64) & 1))
            return; /* no pattern goes on with c0 */
        first_on(s, c1, d, vs, vs, ve, key, kl, m, nw);
        return;
    }
    if (cy->m[c].pat != PAT_ANY) {
        const struct pat *p = &s->p[cy->m[c].pat];
        unsigned char c0 = vs < ve ? (unsigned char)d[vs] : 0;
        if (vs < ve && !ms.pend && !pat_is(p, ms.k, c0) &&
            c0 != '\\' && c0 != '%' && c0 != '0' && c0 != ',' &&
            !(p->fold && !(ms.k & 1) && hex_sep(c0)))
            return; /* the usual case: it does not go on */
        int more = match_run(p, &ms, d, vs, ve, &end);
        if (ms.k >= p->min)
            ev_mask(m, vs, end); /* the joined match counts */
        if (more)
            carry_add(nw, key, kl, cy->m[c].pat, &ms);
        return;
    }
    /* The character of an escape cut before any pattern began (its
     * bytes, then the value's first), then every pattern that starts
     * with it. */
    char jb[2 * SCRUB_ESC_MAX];
    size_t pl = (size_t)ms.pend;
    size_t tl = ve - vs < SCRUB_ESC_MAX ? ve - vs : SCRUB_ESC_MAX, adv;
    memcpy(jb, ms.pb, pl);
    memcpy(jb + pl, d + vs, tl);
    int ch = decode_at(jb, 0, pl + tl, &adv, 0);
    if (adv > pl) {
        first_on(s, ch, d, vs + adv - pl, vs, ve, key, kl, m, nw);
    } else if (tl == ve - vs && pl + tl < SCRUB_ESC_MAX &&
               esc_cut(jb, pl + tl, 0)) {
        ms.pend = (int)(pl + tl); /* the value ended inside it too */
        memcpy(ms.pb, jb, pl + tl);
        carry_add(nw, key, kl, PAT_ANY, &ms);
    }
}

int
pv_scrub_event(const struct pv_scrub *s, struct pv_scrub_carry *cy,
               const char *data, size_t len, char **masked)
{
    *masked = NULL;
    if (!s || !data)
        return 0;
    struct ev_mask m = {.data = data, .len = len};
    struct cands rc;
    rc.n = 0;
    rc.all = 0;
    rc.esc = 0;
    size_t i = 0, at, e;
    while ((e = find(s, data, len, i, &at, &rc)) > 0) {
        ev_mask(&m, at, e);
        i = e;
    }
    struct pv_scrub_carry nw;
    nw.n = 0;
    /* Nothing carried and no place a partial match could start: no value
     * of this event can end in one (the usual event). */
    if (cy->n == 0 && rc.n == 0 && !rc.all) {
        *masked = m.copy;
        return m.oom ? -1 : m.hits;
    }
    /* The event's JSON string values, each with the key before it. */
    unsigned char used[PV_SCRUB_CARRY] = {0}; /* cy's entries taken up */
    struct evkey k = {.ready = 1, .plain = !rc.all && !rc.esc}; /* no key yet */
    unsigned cur = 0; /* rc.at[cur..]: the places not yet passed */
    uint64_t kf[4] = {0, 0, 0, 0}; /* the first bytes of cy's keys */
    for (unsigned c = 0; c < cy->n; c++) {
        unsigned char c0 = (unsigned char)cy->m[c].key[0];
        kf[c0 / 64] |= 1ULL << (c0 % 64);
    }
    size_t pos = 0;
    while (pos < len) {
        const char *q = memchr(data + pos, '"', len - pos);
        if (!q)
            break;
        size_t vs = (size_t)(q - data) + 1, ve = string_end(data, vs, len);
        if (ve >= len)
            break;
        size_t after = ve + 1;
        while (after < len && (data[after] == ' ' || data[after] == '\t' ||
                               data[after] == '\n' || data[after] == '\r'))
            after++;
        pos = ve + 1;
        if (after < len && data[after] == ':') {
            k.ks = vs;
            k.ke = ve;
            k.ready = 0;
            pos = after + 1;
            continue;
        }
        if (k.ready && !k.ok)
            continue;
        /* A match carried from an earlier event goes on here.  The key's
         * first raw byte, unless escaped, is its first. */
        unsigned char k0 = k.ks < k.ke ? (unsigned char)data[k.ks] : 0;
        int maybe = k.ready || k0 == '\\' || k0 == '%' ||
                    (kf[k0 / 64] >> (k0 % 64) & 1);
        for (unsigned c = 0; maybe && c < cy->n; c++) {
            if (used[c] ||
                (cy->m[c].pat >= s->n && cy->m[c].pat != PAT_ANY &&
                 cy->m[c].pat != PAT_FIRST))
                continue;
            if (!key_is(&k, data, cy->m[c].key))
                continue;
            used[c] = 1;
            go_on(s, cy, c, data, vs, ve, k.txt, k.len, &m, &nw);
        }
        tail_partials(s, data, vs, ve, &k, &rc, &cur, &nw);
    }
    /* What no value of this event took up waits for a later one (a ping
     * between two deltas); what it took up is replaced by nw. */
    for (unsigned c = 0; c < cy->n; c++)
        if (!used[c]) {
            struct mstate ms;
            carried(cy, c, &ms);
            carry_add(&nw, cy->m[c].key, strlen(cy->m[c].key), cy->m[c].pat,
                      &ms);
        }
    cy->n = nw.n;
    memcpy(cy->m, nw.m, nw.n * sizeof(nw.m[0]));
    if (m.oom)
        return -1;
    *masked = m.copy;
    return m.hits;
}
