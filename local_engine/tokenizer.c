/*
 * tokenizer.c: the vocabularies of GGUF models and their tokenizers.
 *
 * What it does: builds a struct le_vocab from the tokenizer.ggml.* metadata
 * and turns text into token ids and ids back into bytes, id for id the way
 * llama.cpp does (which is checked against Hugging Face tokenizers by the
 * vocab test vectors in tests/test_tokenizer.c):
 *
 *   model "llama"  SentencePiece BPE: spaces become U+2581 (and one is
 *                  prefixed when add_space_prefix), every UTF-8 character
 *                  starts as a symbol, the adjacent pair whose concatenation
 *                  is the best-scoring token merges first (ties: leftmost),
 *                  and a symbol that is no token falls back to <0xNN> bytes.
 *   model "gpt2"   byte-level BPE: the text is split into words by the
 *                  pre-tokenizer rules named by tokenizer.ggml.pre, each
 *                  word's bytes are mapped to printable code points as in
 *                  GPT-2, and the pair with the lowest rank in the merges
 *                  list merges first (ties: leftmost).
 *   model "bert"   WordPiece: lowercase / strip accents, split on spaces and
 *                  punctuation, greedy longest match with a U+2581 word
 *                  prefix as llama.cpp's GGUF conversion stores it.
 *
 * Before either runs, the text is cut at special tokens (longest first):
 * control and unknown tokens only when parse_special, user-defined tokens
 * always (as Hugging Face does for added tokens).
 *
 * The pre-tokenizer rules are hand-written matchers, one per regex
 * alternative list; each rule splits every piece produced by the previous
 * rule, so a rule never sees across a piece boundary (its "end of input"
 * is the end of the piece), exactly as llama.cpp applies its list.
 *
 * What it does not: normalise Unicode for SPM (SentencePiece models here
 * carry no normaliser), or support Unigram (t5) / RWKV vocabularies.
 *
 * Invariants: token text lives in one arena; ids from the GGUF are checked
 * against the token count before use; any byte string, valid UTF-8 or not,
 * tokenizes without reading out of bounds, and for the BPE vocabularies
 * detokenizes back to the same bytes.
 */
#include "le_int.h"
#include "unicode_data.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Token attributes (GGUF token_type 1..6 become one bit each). */
#define TA_NORMAL 0x001u
#define TA_UNKNOWN 0x002u
#define TA_CONTROL 0x004u
#define TA_USER 0x008u
#define TA_UNUSED 0x010u
#define TA_BYTE 0x020u
#define TA_UNDEF 0x040u
#define TA_LSTRIP 0x080u
#define TA_RSTRIP 0x100u

enum vocab_kind { VK_SPM, VK_BPE, VK_WPM };

/* Pre-tokenizer rule sets (tokenizer.ggml.pre names map onto these). */
enum pre_kind {
    PRE_DEFAULT,
    PRE_GPT2,
    PRE_LLAMA3,
    PRE_QWEN2,
    PRE_STARCODER,
    PRE_FALCON,
    PRE_DEEPSEEK_LLM,
    PRE_DEEPSEEK_CODER,
    PRE_BLOOM,
    PRE_VIKING,
    PRE_CHAMELEON,
    PRE_TEKKEN,
    PRE_GPT4O,
    PRE_DEEPSEEK3,
    PRE_QWEN35
};

struct tok {
    uint32_t off, len; /* text in v->arena */
    float score;
    uint16_t attr;
};

struct merge {
    uint32_t a_off, a_len, b_off, b_len; /* the two halves in v->marena */
};

struct le_vocab {
    enum vocab_kind kind;
    enum pre_kind pre;
    int32_t n;
    struct tok *toks;   /* [n] */
    char *arena;        /* token texts, back to back */
    uint32_t *tslot;    /* text -> id hash: id + 1, 0 = empty */
    size_t tmask;
    struct merge *merges; /* [n_merges], index = rank */
    int32_t n_merges;
    char *marena;
    uint32_t *mslot; /* pair -> rank hash: rank + 1 */
    size_t mmask;
    int32_t bos, eos, unk, sep, pad, eot, eom;
    bool add_bos, add_eos, add_sep, add_space_prefix, ignore_merges;
    bool wpm_lower, wpm_strip;
    int32_t max_token_len;
    int32_t byte_tok[256]; /* SPM <0xNN> tokens, -1 if absent */
    int32_t *special;      /* control/user/unknown ids, longest text first */
    size_t n_special;
    int32_t *eog; /* sorted */
    size_t n_eog;
};

/* ================================================================== */
/* Hashing                                                              */

static uint64_t
fnv_more(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t
fnv(const char *s, size_t n)
{
    return fnv_more(0xcbf29ce484222325ull, s, n);
}

static uint64_t
pair_hash(const char *a, size_t na, const char *b, size_t nb)
{
    uint64_t h = fnv(a, na);
    h = fnv_more(h, " ", 1);
    return fnv_more(h, b, nb) ^ (h >> 29);
}

static size_t
table_size(size_t n)
{
    size_t s = 16;
    while (s < n * 2 + 1)
        s <<= 1;
    return s;
}

static int32_t
text_to_id(const struct le_vocab *v, const char *s, size_t n)
{
    size_t i = (size_t)fnv(s, n) & v->tmask;
    for (;;) {
        uint32_t slot = v->tslot[i];
        if (!slot)
            return -1;
        const struct tok *t = &v->toks[slot - 1];
        if (t->len == n && memcmp(v->arena + t->off, s, n) == 0)
            return (int32_t)(slot - 1);
        i = (i + 1) & v->tmask;
    }
}

static int32_t
merge_rank(const struct le_vocab *v, const char *a, size_t na, const char *b,
           size_t nb)
{
    if (!v->mslot)
        return -1;
    size_t i = (size_t)pair_hash(a, na, b, nb) & v->mmask;
    for (;;) {
        uint32_t slot = v->mslot[i];
        if (!slot)
            return -1;
        const struct merge *m = &v->merges[slot - 1];
        if (m->a_len == na && m->b_len == nb &&
            memcmp(v->marena + m->a_off, a, na) == 0 &&
            memcmp(v->marena + m->b_off, b, nb) == 0)
            return (int32_t)(slot - 1);
        i = (i + 1) & v->mmask;
    }
}

/* ================================================================== */
/* GPT-2 byte-level mapping                                             */

/* Bytes that are printable and not a space map to themselves as code
 * points; the other 68 map to 256, 257, ... in byte order. */
static bool
byte_is_direct(unsigned b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
}

static uint32_t
byte_to_cp(unsigned b)
{
    if (byte_is_direct(b))
        return b;
    if (b <= 32)
        return 256 + b;       /* 0..32 -> 256..288 */
    if (b >= 127 && b <= 160)
        return 289 + b - 127; /* 127..160 -> 289..322 */
    return 323;               /* 173 (soft hyphen) */
}

/* -1 if cp is not the image of a byte. */
static int
cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_direct(cp) ? (int)cp : -1;
    if (cp <= 288)
        return (int)(cp - 256);
    if (cp <= 322)
        return (int)(cp - 289 + 127);
    return cp == 323 ? 173 : -1;
}

/* ================================================================== */
/* Growable buffers                                                     */

struct ids_out {
    int32_t *ids;
    size_t cap;
    size_t n;
};

static void
out_push(struct ids_out *o, int32_t id)
{
    if (o->n < o->cap)
        o->ids[o->n] = id;
    o->n++;
}

static int
grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem)
            return -1;
        n *= 2;
    }
    void *q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* ================================================================== */
/* Pre-tokenizer                                                        */

/* One fragment of text decoded: cp[i], flags fl[i] and byte offset
 * off[i] of unit i (off[n] = byte length).  An invalid byte is a unit of
 * its own with cp LE_UCP_INVALID and flags 0. */
struct pt {
    uint32_t *cp;
    uint16_t *fl;
    uint32_t *off;    /* input is at most 2^28 bytes, so 32 bits suffice */
    uint32_t *ws_end; /* end of the whitespace run at i (i if none) */
    size_t n, cap_cp, cap_fl, cap_off, cap_ws;
    struct span *a, *b; /* piece lists, swapped per rule */
    size_t na, cap_a, nb, cap_b;
};

struct span {
    size_t s, e; /* unit indexes, [s, e) */
};

#define F_L LE_UF_LETTER
#define F_N LE_UF_NUMBER
#define F_P LE_UF_PUNCT
#define F_WS LE_UF_SPACE

static int
pt_decode(struct pt *t, const char *text, size_t len)
{
    if (grow((void **)&t->cp, &t->cap_cp, len + 1, sizeof(uint32_t)) ||
        grow((void **)&t->off, &t->cap_off, len + 1, sizeof(uint32_t)) ||
        grow((void **)&t->fl, &t->cap_fl, len + 1, sizeof(uint16_t)) ||
        grow((void **)&t->ws_end, &t->cap_ws, len + 1, sizeof(uint32_t)))
        return -1;
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0, n = 0;
    while (i < len) {
        uint32_t c;
        size_t k = le_utf8_decode(s + i, len - i, &c);
        t->cp[n] = c;
        t->fl[n] = (uint16_t)le_ucp_flags(c);
        t->off[n] = (uint32_t)i;
        n++;
        i += k;
    }
    t->off[n] = (uint32_t)len;
    t->n = n;
    /* whitespace run ends, so a rule that fails after a long run (\s+$)
     * does not rescan it from every position: no O(n^2) on long runs */
    t->ws_end[n] = (uint32_t)n;
    for (size_t j = n; j-- > 0;)
        t->ws_end[j] = (t->fl[j] & F_WS) ? t->ws_end[j + 1] : (uint32_t)j;
    return 0;
}

/* Rule matchers: the number of units matched at p within a piece ending
 * at e, 0 for no match.  Each mirrors one regex (alternatives in order,
 * greedy with backtracking where it matters). */
typedef size_t (*pt_match_fn)(const struct pt *t, size_t p, size_t e);

static size_t
run_of(const struct pt *t, size_t p, size_t e, unsigned mask)
{
    if (mask == F_WS) {
        size_t q = t->ws_end[p];
        return (q < e ? q : e) - p;
    }
    size_t q = p;
    while (q < e && (t->fl[q] & mask))
        q++;
    return q - p;
}

/* not whitespace, letter or number: [^\s\p{L}\p{N}] */
static bool
is_other(const struct pt *t, size_t i)
{
    return !(t->fl[i] & (F_WS | F_L | F_N));
}

static size_t
run_other(const struct pt *t, size_t p, size_t e)
{
    size_t q = p;
    while (q < e && is_other(t, q))
        q++;
    return q - p;
}

static bool
is_crlf(uint32_t c)
{
    return c == '\r' || c == '\n';
}

static uint32_t
ascii_lower(uint32_t c)
{
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

/* 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive */
static size_t
m_contraction(const struct pt *t, size_t p, size_t e, bool icase)
{
    if (t->cp[p] != '\'' || p + 1 >= e)
        return 0;
    uint32_t c1 = t->cp[p + 1];
    if (icase)
        c1 = ascii_lower(c1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return 2;
    if (p + 2 < e) {
        uint32_t c2 = t->cp[p + 2];
        if (icase)
            c2 = ascii_lower(c2);
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
            (c1 == 'l' && c2 == 'l'))
            return 3;
    }
    return 0;
}

/* \s+(?!\S)|\s+ at a whitespace unit */
static size_t
m_trailing_ws(const struct pt *t, size_t p, size_t e)
{
    size_t k = run_of(t, p, e, F_WS);
    if (k == 0)
        return 0;
    if (p + k == e || k == 1)
        return k;
    return k - 1; /* leave the last space to the next word */
}

/* \s*[\r\n]+|\s+(?!\S)|\s+ at a whitespace unit: a whitespace run up to
 * and including its last \r or \n, else as m_trailing_ws */
static size_t
m_newline_ws(const struct pt *t, size_t p, size_t e)
{
    size_t k = run_of(t, p, e, F_WS);
    for (size_t j = p + k; j > p; j--)
        if (is_crlf(t->cp[j - 1]))
            return j - p;
    return m_trailing_ws(t, p, e);
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 */
static size_t
m_gpt2(const struct pt *t, size_t p, size_t e)
{
    size_t k = m_contraction(t, p, e, false);
    if (k)
        return k;
    size_t q = (t->cp[p] == ' ' && p + 1 < e) ? p + 1 : p;
    if ((k = run_of(t, q, e, F_L)))
        return q - p + k;
    if ((k = run_of(t, q, e, F_N)))
        return q - p + k;
    if ((k = run_other(t, q, e)))
        return q - p + k;
    return m_trailing_ws(t, p, e);
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?W+|\p{N}{1,max_n}|
 *  ?[^\s W \p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with W = \p{L} (llama3, qwen2) or [\p{L}\p{M}] (qwen35). */
static size_t
m_llama3_n(const struct pt *t, size_t p, size_t e, size_t max_n,
           unsigned word)
{
    size_t k = m_contraction(t, p, e, true);
    if (k)
        return k;
    uint32_t c = t->cp[p];
    if (!is_crlf(c) && !(t->fl[p] & (F_L | F_N)) && p + 1 < e &&
        (t->fl[p + 1] & word))
        return 1 + run_of(t, p + 1, e, word);
    if ((k = run_of(t, p, e, word)))
        return k;
    if ((k = run_of(t, p, e, F_N)))
        return k < max_n ? k : max_n;
    size_t q = (c == ' ' && p + 1 < e) ? p + 1 : p;
    size_t r = q;
    while (r < e && !(t->fl[r] & (F_WS | F_N | word)))
        r++;
    if (r > q) {
        while (r < e && is_crlf(t->cp[r]))
            r++;
        return r - p;
    }
    return m_newline_ws(t, p, e);
}

static size_t
m_llama3(const struct pt *t, size_t p, size_t e)
{
    return m_llama3_n(t, p, e, 3, F_L);
}

static size_t
m_qwen2(const struct pt *t, size_t p, size_t e)
{
    return m_llama3_n(t, p, e, 1, F_L);
}

static size_t
m_qwen35(const struct pt *t, size_t p, size_t e)
{
    return m_llama3_n(t, p, e, 1, F_L | LE_UF_MARK);
}

/* Case-aware words (tekken, gpt-4o):
 *   A = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], B = [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
static bool
is_case_a(const struct pt *t, size_t i)
{
    unsigned f = t->fl[i];
    return ((f & F_L) && !(f & LE_UF_LL)) || (f & LE_UF_MARK);
}

static bool
is_case_b(const struct pt *t, size_t i)
{
    unsigned f = t->fl[i];
    return ((f & F_L) && !(f & LE_UF_LU_LT)) || (f & LE_UF_MARK);
}

/* A*B+ at q: the end of the match, 0 if none.  When the greedy A* leaves
 * no B behind it, backtracking gives back A's until one that is also a B
 * (Lm, Lo, M) can be the B+. */
static size_t
case_ab_plus(const struct pt *t, size_t q, size_t e)
{
    size_t a = q;
    while (a < e && is_case_a(t, a))
        a++;
    if (a < e && is_case_b(t, a)) {
        size_t b = a;
        while (b < e && is_case_b(t, b))
            b++;
        return b;
    }
    for (size_t j = a; j > q; j--)
        if (is_case_b(t, j - 1))
            return j;
    return 0;
}

/* A+B* at q */
static size_t
case_a_plus(const struct pt *t, size_t q, size_t e)
{
    size_t a = q;
    while (a < e && is_case_a(t, a))
        a++;
    if (a == q)
        return 0;
    while (a < e && is_case_b(t, a))
        a++;
    return a;
}

/* [^\r\n\p{L}\p{N}]?A*B+C?|[^\r\n\p{L}\p{N}]?A+B*C?|\p{N}{1,max_n}|
 *  ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with C the optional case-insensitive contraction (gpt-4o) or nothing
 * (tekken). */
static size_t
m_case_words(const struct pt *t, size_t p, size_t e, size_t max_n,
             bool contractions)
{
    uint32_t c = t->cp[p];
    bool pre = !is_crlf(c) && !(t->fl[p] & (F_L | F_N)) && p + 1 < e;
    size_t r = 0;
    for (int alt = 0; alt < 2 && !r; alt++) {
        size_t (*f)(const struct pt *, size_t, size_t) =
            alt == 0 ? case_ab_plus : case_a_plus;
        if (pre)
            r = f(t, p + 1, e);
        if (!r)
            r = f(t, p, e);
    }
    if (r) {
        if (contractions && r < e)
            r += m_contraction(t, r, e, true);
        return r - p;
    }
    size_t k = run_of(t, p, e, F_N);
    if (k)
        return k < max_n ? k : max_n;
    size_t q = (c == ' ' && p + 1 < e) ? p + 1 : p;
    if ((k = run_other(t, q, e))) {
        size_t z = q + k;
        while (z < e && (is_crlf(t->cp[z]) || t->cp[z] == '/'))
            z++;
        return z - p;
    }
    return m_newline_ws(t, p, e);
}

static size_t
m_tekken(const struct pt *t, size_t p, size_t e)
{
    return m_case_words(t, p, e, 1, false);
}

static size_t
m_gpt4o(const struct pt *t, size_t p, size_t e)
{
    return m_case_words(t, p, e, 3, true);
}

/* [\p{P}\$\+<=>\^~\|`]+ (falcon) and the same without ` (default) */
static size_t
punct_run(const struct pt *t, size_t p, size_t e, const char *extra)
{
    size_t q = p;
    while (q < e && ((t->fl[q] & F_P) ||
                     (t->cp[q] < 128 && t->cp[q] &&
                      strchr(extra, (int)t->cp[q]))))
        q++;
    return q - p;
}

static size_t
m_falcon_punct(const struct pt *t, size_t p, size_t e)
{
    return punct_run(t, p, e, "$+<=>^~|`");
}

static size_t
m_default_punct(const struct pt *t, size_t p, size_t e)
{
    return punct_run(t, p, e, "$+<=>^~|");
}

static bool
is_ascii_digit(uint32_t c)
{
    return c >= '0' && c <= '9';
}

/* [0-9][0-9][0-9] */
static size_t
m_digits3(const struct pt *t, size_t p, size_t e)
{
    if (p + 3 <= e && is_ascii_digit(t->cp[p]) &&
        is_ascii_digit(t->cp[p + 1]) && is_ascii_digit(t->cp[p + 2]))
        return 3;
    return 0;
}

/* \p{N} */
static size_t
m_one_number(const struct pt *t, size_t p, size_t e)
{
    (void)e;
    return (t->fl[p] & F_N) ? 1 : 0;
}

/* \p{N}+ */
static size_t
m_numbers(const struct pt *t, size_t p, size_t e)
{
    return run_of(t, p, e, F_N);
}

/* [\r\n] */
static size_t
m_one_crlf(const struct pt *t, size_t p, size_t e)
{
    (void)e;
    return is_crlf(t->cp[p]) ? 1 : 0;
}

/* \s?X+ for a flag class X */
static size_t
ws_opt_run(const struct pt *t, size_t p, size_t e, unsigned mask)
{
    if ((t->fl[p] & F_WS) && p + 1 < e && (t->fl[p + 1] & mask))
        return 1 + run_of(t, p + 1, e, mask);
    return run_of(t, p, e, mask);
}

static size_t
m_ws_letters(const struct pt *t, size_t p, size_t e)
{
    return ws_opt_run(t, p, e, F_L);
}

static size_t
m_ws_puncts(const struct pt *t, size_t p, size_t e)
{
    return ws_opt_run(t, p, e, F_P);
}

struct cp_range {
    uint32_t lo, hi;
};

static bool
in_ranges(uint32_t c, const struct cp_range *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (c >= r[i].lo && c <= r[i].hi)
            return true;
    return false;
}

/* [一-龥ࠀ-一가-퟿] (deepseek's CJK / Hangul class, code point ranges) */
static const struct cp_range cjk_ranges[] = {
    {0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF}};

static size_t
m_cjk(const struct pt *t, size_t p, size_t e)
{
    size_t q = p;
    while (q < e && in_ranges(t->cp[q], cjk_ranges, 3))
        q++;
    return q - p;
}

/* deepseek-llm's explicit letter class (the cased letters of Unicode as
 * its tokenizer.json lists them) */
static const struct cp_range dsl_letters[] = {
    {0x0041, 0x005A},   {0x0061, 0x007A},   {0x00B5, 0x00B5},
    {0x00C0, 0x00D6},   {0x00D8, 0x00F6},   {0x00F8, 0x01BA},
    {0x01BC, 0x01BF},   {0x01C4, 0x0293},   {0x0295, 0x02AF},
    {0x0370, 0x0373},   {0x0376, 0x0377},   {0x037B, 0x037D},
    {0x037F, 0x037F},   {0x0386, 0x0386},   {0x0388, 0x038A},
    {0x038C, 0x038C},   {0x038E, 0x03A1},   {0x03A3, 0x03F5},
    {0x03F7, 0x0481},   {0x048A, 0x052F},   {0x0531, 0x0556},
    {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},
    {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},
    {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC},   {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},
    {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},
    {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},
    {0x2126, 0x2126},   {0x2128, 0x2128},   {0x212A, 0x212D},
    {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},
    {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},
    {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943}};

/* [!-/:-~！-／：-～‘-‟　-。] */
static const struct cp_range dsl_puncts[] = {
    {0x0021, 0x002F}, {0x003A, 0x007E}, {0xFF01, 0xFF0F},
    {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002}};

static size_t
ws_opt_ranges(const struct pt *t, size_t p, size_t e,
              const struct cp_range *r, size_t nr)
{
    size_t q = ((t->fl[p] & F_WS) && p + 1 < e &&
                in_ranges(t->cp[p + 1], r, nr))
                   ? p + 1
                   : p;
    size_t k = q;
    while (k < e && in_ranges(t->cp[k], r, nr))
        k++;
    return k > q ? k - p : 0;
}

static size_t
m_dsl_letters(const struct pt *t, size_t p, size_t e)
{
    return ws_opt_ranges(t, p, e, dsl_letters,
                         sizeof(dsl_letters) / sizeof(dsl_letters[0]));
}

static size_t
m_dsl_puncts(const struct pt *t, size_t p, size_t e)
{
    return ws_opt_ranges(t, p, e, dsl_puncts,
                         sizeof(dsl_puncts) / sizeof(dsl_puncts[0]));
}

/* \s+$ */
static size_t
m_ws_at_end(const struct pt *t, size_t p, size_t e)
{
    size_t k = run_of(t, p, e, F_WS);
    return (k && p + k == e) ? k : 0;
}

/*  ?[^(\s|.,!?…。，、।۔،)]+ (bloom, poro, gpt3-finnish, viking) */
static bool
bloom_stop(const struct pt *t, size_t i)
{
    uint32_t c = t->cp[i];
    if (t->fl[i] & F_WS)
        return true;
    switch (c) {
    case '(': case '|': case '.': case ',': case '!': case '?': case ')':
    case 0x2026: case 0x3002: case 0xFF0C: case 0x3001: case 0x0964:
    case 0x06D4: case 0x060C:
        return true;
    default:
        return false;
    }
}

static size_t
m_bloom(const struct pt *t, size_t p, size_t e)
{
    size_t q = (t->cp[p] == ' ' && p + 1 < e && !bloom_stop(t, p + 1))
                   ? p + 1
                   : p;
    size_t k = q;
    while (k < e && !bloom_stop(t, k))
        k++;
    return k > q ? k - p : 0;
}

/* chameleon: ([\t\n]|    |  ) and [\p{P}!-/:-@\[-`{-~] */
static size_t
m_cham_ws(const struct pt *t, size_t p, size_t e)
{
    uint32_t c = t->cp[p];
    if (c == '\t' || c == '\n')
        return 1;
    size_t k = 0;
    while (p + k < e && k < 4 && t->cp[p + k] == ' ')
        k++;
    if (k == 4)
        return 4;
    return k >= 2 ? 2 : 0;
}

static size_t
m_cham_punct(const struct pt *t, size_t p, size_t e)
{
    (void)e;
    uint32_t c = t->cp[p];
    if (t->fl[p] & F_P)
        return 1;
    if ((c >= '!' && c <= '/') || (c >= ':' && c <= '@') ||
        (c >= '[' && c <= '`') || (c >= '{' && c <= '~'))
        return 1;
    return 0;
}

/* deepseek-v3:
 *   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|
 *   [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+ */
static bool
is_ascii_alpha(uint32_t c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static size_t
m_ds3(const struct pt *t, size_t p, size_t e)
{
    uint32_t c = t->cp[p];
    if (c < 128 && c > ' ' && c != 127 && !is_ascii_alpha(c) &&
        !(c >= '0' && c <= '9') && p + 1 < e &&
        is_ascii_alpha(t->cp[p + 1])) {
        size_t q = p + 1;
        while (q < e && is_ascii_alpha(t->cp[q]))
            q++;
        return q - p;
    }
    const unsigned lm = F_L | LE_UF_MARK, ps = F_P | LE_UF_SYMBOL;
    if (!is_crlf(c) && !(t->fl[p] & (F_L | ps)) && p + 1 < e &&
        (t->fl[p + 1] & lm))
        return 1 + run_of(t, p + 1, e, lm);
    size_t k = run_of(t, p, e, lm);
    if (k)
        return k;
    size_t q = (c == ' ' && p + 1 < e) ? p + 1 : p;
    if ((k = run_of(t, q, e, ps))) {
        size_t z = q + k;
        while (z < e && is_crlf(t->cp[z]))
            z++;
        return z - p;
    }
    return m_newline_ws(t, p, e);
}

/* \p{N}{1,3} */
static size_t
m_numbers3(const struct pt *t, size_t p, size_t e)
{
    size_t k = run_of(t, p, e, F_N);
    return k < 3 ? k : 3;
}

/* [一-龥぀-ゟ゠-ヿ]+ (CJK ideographs, hiragana, katakana) */
static const struct cp_range cjk_kana_ranges[] = {
    {0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}};

static size_t
m_cjk_kana(const struct pt *t, size_t p, size_t e)
{
    size_t q = p;
    while (q < e && in_ranges(t->cp[q], cjk_kana_ranges, 3))
        q++;
    return q - p;
}

/* Rule lists per pre-tokenizer, applied in order. */
static const pt_match_fn rules_default[] = {m_default_punct, m_gpt2,
                                            m_numbers, m_digits3, NULL};
static const pt_match_fn rules_gpt2[] = {m_gpt2, NULL};
static const pt_match_fn rules_llama3[] = {m_llama3, NULL};
static const pt_match_fn rules_qwen2[] = {m_qwen2, NULL};
static const pt_match_fn rules_starcoder[] = {m_one_number, m_gpt2, NULL};
static const pt_match_fn rules_falcon[] = {m_falcon_punct, m_gpt2,
                                           m_digits3, NULL};
static const pt_match_fn rules_ds_llm[] = {
    m_one_crlf, m_dsl_letters, m_dsl_puncts, m_ws_at_end, m_cjk,
    m_numbers,  NULL};
static const pt_match_fn rules_ds_coder[] = {
    m_one_crlf, m_ws_letters, m_ws_puncts, m_cjk, m_one_number, NULL};
static const pt_match_fn rules_bloom[] = {m_bloom, NULL};
static const pt_match_fn rules_viking[] = {m_bloom, m_one_number, NULL};
static const pt_match_fn rules_tekken[] = {m_tekken, NULL};
static const pt_match_fn rules_qwen35[] = {m_qwen35, NULL};
static const pt_match_fn rules_ds3[] = {m_numbers3, m_cjk_kana, m_ds3, NULL};
static const pt_match_fn rules_gpt4o[] = {m_gpt4o, NULL};
static const pt_match_fn rules_chameleon[] = {m_cham_ws, m_one_number,
                                              m_cham_punct, m_gpt2, NULL};

static const pt_match_fn *
pre_rules(enum pre_kind k)
{
    switch (k) {
    case PRE_GPT2: return rules_gpt2;
    case PRE_LLAMA3: return rules_llama3;
    case PRE_QWEN2: return rules_qwen2;
    case PRE_STARCODER: return rules_starcoder;
    case PRE_FALCON: return rules_falcon;
    case PRE_DEEPSEEK_LLM: return rules_ds_llm;
    case PRE_DEEPSEEK_CODER: return rules_ds_coder;
    case PRE_BLOOM: return rules_bloom;
    case PRE_VIKING: return rules_viking;
    case PRE_CHAMELEON: return rules_chameleon;
    case PRE_TEKKEN: return rules_tekken;
    case PRE_QWEN35: return rules_qwen35;
    case PRE_DEEPSEEK3: return rules_ds3;
    case PRE_GPT4O: return rules_gpt4o;
    case PRE_DEFAULT: break;
    }
    return rules_default;
}

static int
span_push(struct span **a, size_t *n, size_t *cap, size_t s, size_t e)
{
    if (grow((void **)a, cap, *n + 1, sizeof(**a)))
        return -1;
    (*a)[*n].s = s;
    (*a)[*n].e = e;
    (*n)++;
    return 0;
}

/* Splits t's text into words; the result is t->a[0..na). */
static int
pt_split(struct pt *t, const pt_match_fn *rules)
{
    t->na = 0;
    if (t->n == 0)
        return 0;
    if (span_push(&t->a, &t->na, &t->cap_a, 0, t->n))
        return -1;
    for (; *rules; rules++) {
        t->nb = 0;
        for (size_t i = 0; i < t->na; i++) {
            size_t s = t->a[i].s, e = t->a[i].e, gap = s, p = s;
            while (p < e) {
                size_t k = (*rules)(t, p, e);
                if (k == 0) {
                    p++;
                    continue;
                }
                if (gap < p && span_push(&t->b, &t->nb, &t->cap_b, gap, p))
                    return -1;
                if (span_push(&t->b, &t->nb, &t->cap_b, p, p + k))
                    return -1;
                p += k;
                gap = p;
            }
            if (gap < e && span_push(&t->b, &t->nb, &t->cap_b, gap, e))
                return -1;
        }
        struct span *sw = t->a;
        size_t swcap = t->cap_a;
        t->a = t->b;
        t->cap_a = t->cap_b;
        t->na = t->nb;
        t->b = sw;
        t->cap_b = swcap;
    }
    return 0;
}

static void
pt_free(struct pt *t)
{
    free(t->cp);
    free(t->fl);
    free(t->off);
    free(t->ws_end);
    free(t->a);
    free(t->b);
}

/* ================================================================== */
/* Merge queue: a binary heap of candidate pairs                        */

struct bigram {
    int32_t left, right;
    double key;    /* higher merges first: SPM score, BPE -rank */
    uint32_t size; /* bytes of left + right when queued */
};

struct heap {
    struct bigram *a;
    size_t n, cap;
};

static bool
bg_before(const struct bigram *x, const struct bigram *y)
{
    return x->key > y->key || (x->key == y->key && x->left < y->left);
}

static int
heap_push(struct heap *h, struct bigram b)
{
    if (grow((void **)&h->a, &h->cap, h->n + 1, sizeof(*h->a)))
        return -1;
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bg_before(&b, &h->a[parent]))
            break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = b;
    return 0;
}

static struct bigram
heap_pop(struct heap *h)
{
    struct bigram top = h->a[0], last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bg_before(&h->a[c + 1], &h->a[c]))
            c++;
        if (!bg_before(&h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = last;
    return top;
}

struct sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes in the word buffer; n == 0 once merged away */
};

/* Scratch for one le_tokenize call. */
struct tk_ctx {
    const struct le_vocab *v;
    struct ids_out out;
    struct pt pt;
    struct sym *syms;
    size_t cap_syms;
    struct heap heap;
    char *buf; /* SPM escaped text / BPE byte-level word */
    size_t cap_buf;
    int failed;
};

static int
syms_init(struct tk_ctx *c, size_t len)
{
    if (grow((void **)&c->syms, &c->cap_syms, len + 1, sizeof(*c->syms)))
        return -1;
    size_t off = 0;
    int32_t k = 0;
    while (off < len) {
        uint32_t cp;
        size_t l = le_utf8_decode((const uint8_t *)c->buf + off, len - off,
                                  &cp);
        c->syms[k].off = (uint32_t)off;
        c->syms[k].n = (uint32_t)l;
        c->syms[k].prev = k - 1;
        off += l;
        c->syms[k].next = off == len ? -1 : k + 1;
        k++;
    }
    return k;
}

/* ================================================================== */
/* SentencePiece                                                        */

static int
spm_try_bigram(struct tk_ctx *c, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const struct sym *a = &c->syms[l], *b = &c->syms[r];
    int32_t id = text_to_id(c->v, c->buf + a->off, a->n + b->n);
    if (id < 0)
        return 0;
    struct bigram bg = {l, r, c->v->toks[id].score, a->n + b->n};
    return heap_push(&c->heap, bg);
}

static void
spm_byte_fallback(struct tk_ctx *c, const char *s, size_t n)
{
    const struct le_vocab *v = c->v;
    for (size_t j = 0; j < n; j++) {
        unsigned char b = (unsigned char)s[j];
        int32_t id = v->byte_tok[b];
        if (id < 0)
            id = text_to_id(v, (const char *)&b, 1);
        if (id < 0)
            id = v->unk;
        if (id >= 0)
            out_push(&c->out, id);
    }
}

static int
spm_tokenize(struct tk_ctx *c, const char *text, size_t len, bool prefix)
{
    /* escape: optional leading space, then ' ' -> U+2581 (3 bytes) */
    size_t need = (len + 1) * 3;
    if (grow((void **)&c->buf, &c->cap_buf, need, 1))
        return -1;
    size_t n = 0;
    if (prefix) {
        memcpy(c->buf, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(c->buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            c->buf[n++] = text[i];
        }
    }
    if (n == 0)
        return 0;
    int k = syms_init(c, n);
    if (k < 0)
        return -1;
    c->heap.n = 0;
    for (int32_t i = 1; i < k; i++)
        if (spm_try_bigram(c, i - 1, i))
            return -1;
    while (c->heap.n) {
        struct bigram bg = heap_pop(&c->heap);
        struct sym *a = &c->syms[bg.left], *b = &c->syms[bg.right];
        if (a->n == 0 || b->n == 0 || a->n + b->n != bg.size)
            continue;
        a->n += b->n;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0)
            c->syms[b->next].prev = bg.left;
        if (spm_try_bigram(c, a->prev, bg.left) ||
            spm_try_bigram(c, bg.left, a->next))
            return -1;
    }
    for (int32_t i = 0; i != -1; i = c->syms[i].next) {
        const struct sym *s = &c->syms[i];
        int32_t id = text_to_id(c->v, c->buf + s->off, s->n);
        if (id >= 0)
            out_push(&c->out, id);
        else
            spm_byte_fallback(c, c->buf + s->off, s->n);
    }
    return 0;
}

/* ================================================================== */
/* Byte-level BPE                                                       */

static int
bpe_try_bigram(struct tk_ctx *c, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const struct sym *a = &c->syms[l], *b = &c->syms[r];
    int32_t rank = merge_rank(c->v, c->buf + a->off, a->n, c->buf + b->off,
                              b->n);
    if (rank < 0)
        return 0;
    struct bigram bg = {l, r, -(double)rank, a->n + b->n};
    return heap_push(&c->heap, bg);
}

/* One pre-tokenized word (raw bytes). */
static int
bpe_word(struct tk_ctx *c, const char *w, size_t len)
{
    const struct le_vocab *v = c->v;
    if (grow((void **)&c->buf, &c->cap_buf, len * 2 + 1, 1))
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += le_utf8_encode(byte_to_cp((unsigned char)w[i]), c->buf + n);
    if (v->ignore_merges) {
        int32_t id = text_to_id(v, c->buf, n);
        if (id >= 0) {
            out_push(&c->out, id);
            return 0;
        }
    }
    int k = syms_init(c, n);
    if (k < 0)
        return -1;
    c->heap.n = 0;
    for (int32_t i = 1; i < k; i++)
        if (bpe_try_bigram(c, i - 1, i))
            return -1;
    while (c->heap.n) {
        struct bigram bg = heap_pop(&c->heap);
        struct sym *a = &c->syms[bg.left], *b = &c->syms[bg.right];
        if (a->n == 0 || b->n == 0 || a->n + b->n != bg.size)
            continue;
        a->n += b->n;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0)
            c->syms[b->next].prev = bg.left;
        if (bpe_try_bigram(c, a->prev, bg.left) ||
            bpe_try_bigram(c, bg.left, a->next))
            return -1;
    }
    for (int32_t i = 0; i != -1 && k > 0; i = c->syms[i].next) {
        const struct sym *s = &c->syms[i];
        int32_t id = text_to_id(v, c->buf + s->off, s->n);
        if (id >= 0) {
            out_push(&c->out, id);
            continue;
        }
        /* not a token: its single bytes, where those are tokens */
        for (uint32_t j = 0; j < s->n; j++) {
            id = text_to_id(v, c->buf + s->off + j, 1);
            if (id >= 0)
                out_push(&c->out, id);
        }
    }
    return 0;
}

static int
bpe_tokenize(struct tk_ctx *c, const char *text, size_t len)
{
    if (pt_decode(&c->pt, text, len) || pt_split(&c->pt, pre_rules(c->v->pre)))
        return -1;
    for (size_t i = 0; i < c->pt.na; i++) {
        size_t b0 = c->pt.off[c->pt.a[i].s], b1 = c->pt.off[c->pt.a[i].e];
        if (bpe_word(c, text + b0, b1 - b0))
            return -1;
    }
    return 0;
}

/* ================================================================== */
/* WordPiece                                                            */

static bool
wpm_is_chinese(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Appends the canonical decomposition of cp (recursively) to the word. */
static int
wpm_append(struct tk_ctx *c, size_t *n, uint32_t cp, bool strip, int depth)
{
    uint32_t d[2];
    int k = (strip && depth < 8) ? le_ucp_decomp(cp, d) : 0;
    if (k > 0) {
        for (int i = 0; i < k; i++)
            if (wpm_append(c, n, d[i], strip, depth + 1))
                return -1;
        return 0;
    }
    if (strip && (le_ucp_flags(cp) & LE_UF_MARK))
        return 0;
    if (grow((void **)&c->buf, &c->cap_buf, *n + 8, 1))
        return -1;
    *n += le_utf8_encode(cp, c->buf + *n);
    return 0;
}

/* Greedy longest-match of one word (already in c->buf[3..n), after the
 * U+2581 prefix in c->buf[0..3)). */
static void
wpm_word(struct tk_ctx *c, size_t n)
{
    const struct le_vocab *v = c->v;
    size_t start_out = c->out.n;
    for (size_t i = 0; i < n;) {
        size_t j = n - i > (size_t)v->max_token_len ? i + v->max_token_len
                                                    : n;
        int32_t id = -1;
        for (; j > i; j--) {
            id = text_to_id(v, c->buf + i, j - i);
            if (id >= 0)
                break;
        }
        if (id < 0) {
            c->out.n = start_out; /* discard the whole word */
            break;
        }
        out_push(&c->out, id);
        i = j;
    }
    if (c->out.n == start_out && v->unk >= 0)
        out_push(&c->out, v->unk);
}

static int
wpm_tokenize(struct tk_ctx *c, const char *text, size_t len)
{
    const struct le_vocab *v = c->v;
    const uint8_t *s = (const uint8_t *)text;
    size_t n = 0, i = 0;
    if (grow((void **)&c->buf, &c->cap_buf, 16, 1))
        return -1;
    memcpy(c->buf, "\xe2\x96\x81", 3);
    n = 3;
    while (i < len) {
        uint32_t cp;
        size_t k = le_utf8_decode(s + i, len - i, &cp);
        i += k;
        if (cp == LE_UCP_INVALID)
            cp = 0xFFFD;
        unsigned fl = le_ucp_flags(cp);
        if (fl & LE_UF_SPACE) {
            if (n > 3)
                wpm_word(c, n);
            n = 3;
            continue;
        }
        if (cp == 0 || cp == 0xFFFD || (fl & LE_UF_CONTROL))
            continue;
        if (v->wpm_lower)
            cp = le_ucp_lower(cp);
        if ((fl & LE_UF_PUNCT) || (cp < 0x7F && (fl & LE_UF_SYMBOL)) ||
            wpm_is_chinese(cp)) {
            if (n > 3)
                wpm_word(c, n);
            n = 3;
            if (wpm_append(c, &n, cp, false, 0))
                return -1;
            wpm_word(c, n);
            n = 3;
            continue;
        }
        if (wpm_append(c, &n, cp, v->wpm_strip, 0))
            return -1;
    }
    if (n > 3)
        wpm_word(c, n);
    return 0;
}

/* ================================================================== */
/* Special-token partition                                              */

struct frag {
    int32_t id;      /* >= 0: a special token; -1: raw text */
    size_t off, len; /* raw text */
};

static int
frag_push(struct frag **a, size_t *n, size_t *cap, struct frag f)
{
    if (grow((void **)a, cap, *n + 1, sizeof(**a)))
        return -1;
    (*a)[(*n)++] = f;
    return 0;
}

/* Cuts text at every special token (longest first); returns the fragment
 * list in *out (caller frees) or -1. */
static int
partition(const struct le_vocab *v, const char *text, size_t len,
          bool parse_special, struct frag **out, size_t *nout)
{
    struct frag *a = NULL, *b = NULL;
    size_t na = 0, cap_a = 0, nb = 0, cap_b = 0;
    struct frag whole = {-1, 0, len};
    if (frag_push(&a, &na, &cap_a, whole))
        goto fail;
    for (size_t si = 0; si < v->n_special; si++) {
        int32_t id = v->special[si];
        const struct tok *t = &v->toks[id];
        if (!parse_special && (t->attr & (TA_CONTROL | TA_UNKNOWN)))
            continue;
        const char *z = v->arena + t->off;
        size_t zl = t->len;
        nb = 0;
        bool changed = false;
        for (size_t fi = 0; fi < na; fi++) {
            struct frag f = a[fi];
            if (f.id >= 0 || f.len < zl) {
                if (frag_push(&b, &nb, &cap_b, f))
                    goto fail;
                continue;
            }
            size_t off = f.off, rem = f.len;
            for (;;) {
                const char *m = rem >= zl ? memmem(text + off, rem, z, zl)
                                          : NULL;
                if (!m) {
                    if (rem) {
                        struct frag r = {-1, off, rem};
                        if (frag_push(&b, &nb, &cap_b, r))
                            goto fail;
                    }
                    break;
                }
                changed = true;
                size_t mo = (size_t)(m - text);
                size_t left = mo - off;
                if (t->attr & TA_LSTRIP)
                    while (left && isspace((unsigned char)text[off + left - 1]))
                        left--;
                if (left) {
                    struct frag l = {-1, off, left};
                    if (frag_push(&b, &nb, &cap_b, l))
                        goto fail;
                }
                struct frag sp = {id, 0, 0};
                if (frag_push(&b, &nb, &cap_b, sp))
                    goto fail;
                rem -= (mo - off) + zl;
                off = mo + zl;
                if (t->attr & TA_RSTRIP)
                    while (rem && isspace((unsigned char)text[off]))
                        off++, rem--;
            }
        }
        if (changed) {
            struct frag *sw = a;
            size_t swcap = cap_a;
            a = b;
            cap_a = cap_b;
            na = nb;
            b = sw;
            cap_b = swcap;
        }
    }
    free(b);
    *out = a;
    *nout = na;
    return 0;
fail:
    free(a);
    free(b);
    return -1;
}

/* ================================================================== */
/* Public: tokenize                                                     */

int64_t
le_tokenize(const struct le_vocab *v, const char *text, size_t len,
            bool add_special, bool parse_special, int32_t *ids, size_t cap)
{
    if (!v || (!text && len) || (!ids && cap) || len > ((size_t)1 << 28))
        return -1;
    struct tk_ctx c;
    memset(&c, 0, sizeof(c));
    c.v = v;
    c.out.ids = ids;
    c.out.cap = cap;
    struct frag *fr = NULL;
    size_t nfr = 0;
    int rc = 0;
    if (len && partition(v, text, len, parse_special, &fr, &nfr))
        return -1;

    if (add_special && v->add_bos && v->bos >= 0)
        out_push(&c.out, v->bos);
    bool prev_special = true; /* SPM: a space prefix starts each text run */
    for (size_t i = 0; i < nfr && rc == 0; i++) {
        if (fr[i].id >= 0) {
            out_push(&c.out, fr[i].id);
            prev_special = true;
            continue;
        }
        const char *s = text + fr[i].off;
        switch (v->kind) {
        case VK_SPM:
            rc = spm_tokenize(&c, s, fr[i].len,
                              v->add_space_prefix && prev_special);
            break;
        case VK_BPE:
            rc = bpe_tokenize(&c, s, fr[i].len);
            break;
        case VK_WPM:
            rc = wpm_tokenize(&c, s, fr[i].len);
            break;
        }
        prev_special = false;
    }
    if (add_special && v->kind == VK_WPM && v->add_sep && v->sep >= 0)
        out_push(&c.out, v->sep);
    if (add_special && v->add_eos && v->eos >= 0)
        out_push(&c.out, v->eos);

    free(fr);
    pt_free(&c.pt);
    free(c.syms);
    free(c.heap.a);
    free(c.buf);
    if (rc)
        return -1;
    return (int64_t)c.out.n;
}

/* ================================================================== */
/* Public: detokenize                                                   */

static size_t
copy_out(char *buf, size_t cap, size_t at, const char *s, size_t n)
{
    if (at < cap) {
        size_t k = cap - at < n ? cap - at : n;
        memcpy(buf + at, s, k);
    }
    return at + n;
}

static int
hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t
le_token_to_piece(const struct le_vocab *v, int32_t id, bool special,
                  char *buf, size_t cap)
{
    if (!v || id < 0 || id >= v->n)
        return 0;
    const struct tok *t = &v->toks[id];
    const char *s = v->arena + t->off;
    if (!buf)
        cap = 0;
    if (t->attr & (TA_CONTROL | TA_UNKNOWN)) {
        if (!special)
            return 0;
        return copy_out(buf, cap, 0, s, t->len);
    }
    if (t->attr & TA_USER)
        return copy_out(buf, cap, 0, s, t->len);
    size_t at = 0;
    if (v->kind == VK_BPE) {
        if (!(t->attr & TA_NORMAL))
            return 0;
        /* undo the byte-level mapping; a character that is no byte's
         * image (it cannot come from our own encoder) is kept as is */
        const uint8_t *u = (const uint8_t *)s;
        size_t i = 0;
        while (i < t->len) {
            uint32_t cp;
            size_t k = le_utf8_decode(u + i, t->len - i, &cp);
            int b = cp == LE_UCP_INVALID ? -1 : cp_to_byte(cp);
            if (b >= 0) {
                char ch = (char)b;
                at = copy_out(buf, cap, at, &ch, 1);
            } else {
                at = copy_out(buf, cap, at, s + i, k);
            }
            i += k;
        }
        return at;
    }
    if (t->attr & TA_BYTE) {
        /* "<0xNN>": parsed within the token's 6 bytes (token text in the
         * arena is not NUL-terminated, so no sscanf here). */
        int hi, lo;
        if (t->len == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' &&
            (hi = hex_val(s[3])) >= 0 && (lo = hex_val(s[4])) >= 0) {
            char ch = (char)(hi * 16 + lo);
            return copy_out(buf, cap, 0, &ch, 1);
        }
        return 0;
    }
    if (!(t->attr & TA_NORMAL))
        return 0;
    /* SPM / WPM: U+2581 is a space */
    size_t i = 0, run = 0;
    while (i < t->len) {
        if (t->len - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            at = copy_out(buf, cap, at, s + run, i - run);
            at = copy_out(buf, cap, at, " ", 1);
            i += 3;
            run = i;
        } else {
            i++;
        }
    }
    return copy_out(buf, cap, at, s + run, t->len - run);
}

int32_t
le_vocab_n_tokens(const struct le_vocab *v)
{
    return v ? v->n : 0;
}

int32_t
le_vocab_bos(const struct le_vocab *v)
{
    return v ? v->bos : -1;
}

int32_t
le_vocab_eos(const struct le_vocab *v)
{
    return v ? v->eos : -1;
}

int
le_vocab_is_eog(const struct le_vocab *v, int32_t id)
{
    if (!v || id < 0)
        return 0;
    size_t lo = 0, hi = v->n_eog;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->eog[mid] == id)
            return 1;
        if (v->eog[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* ================================================================== */
/* Loading                                                              */

void
le_vocab_free(struct le_vocab *v)
{
    if (!v)
        return;
    free(v->toks);
    free(v->arena);
    free(v->tslot);
    free(v->merges);
    free(v->marena);
    free(v->mslot);
    free(v->special);
    free(v->eog);
    free(v);
}

static enum le_status
fail(char *err, size_t errlen, enum le_status st, const char *fmt,
     const char *arg)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, arg);
    return st;
}

struct pre_name {
    const char *name;
    enum pre_kind kind;
    bool ignore_merges, add_bos;
};

/* tokenizer.ggml.pre names, grouped as llama.cpp groups them */
static const struct pre_name pre_names[] = {
    {"default", PRE_DEFAULT, false, false},
    {"llama3", PRE_LLAMA3, true, true},
    {"llama-v3", PRE_LLAMA3, true, true},
    {"llama-bpe", PRE_LLAMA3, true, true},
    {"falcon3", PRE_LLAMA3, true, true},
    {"pixtral", PRE_LLAMA3, true, true},
    {"falcon-h1", PRE_LLAMA3, true, true},
    {"midm-2.0", PRE_LLAMA3, true, true},
    {"lfm2", PRE_LLAMA3, true, true},
    {"dbrx", PRE_LLAMA3, false, false},
    {"smaug-bpe", PRE_LLAMA3, false, false},
    {"chatglm-bpe", PRE_LLAMA3, false, false},
    {"glm4", PRE_LLAMA3, false, false},
    {"deepseek-llm", PRE_DEEPSEEK_LLM, false, false},
    {"deepseek-coder", PRE_DEEPSEEK_CODER, false, false},
    {"falcon", PRE_FALCON, false, false},
    {"mpt", PRE_GPT2, false, false},
    {"gpt-2", PRE_GPT2, false, false},
    {"phi-2", PRE_GPT2, false, false},
    {"jina-es", PRE_GPT2, false, false},
    {"jina-de", PRE_GPT2, false, false},
    {"gigachat", PRE_GPT2, false, false},
    {"jina-v1-en", PRE_GPT2, false, false},
    {"jina-v2-es", PRE_GPT2, false, false},
    {"jina-v2-de", PRE_GPT2, false, false},
    {"jina-v2-code", PRE_GPT2, false, false},
    {"roberta-bpe", PRE_GPT2, false, false},
    {"olmo", PRE_GPT2, false, false},
    {"jais", PRE_GPT2, false, false},
    {"exaone4", PRE_GPT2, false, false},
    {"a.x-4.0", PRE_GPT2, false, false},
    {"mellum", PRE_GPT2, false, false},
    {"trillion", PRE_GPT2, false, false},
    {"granite-docling", PRE_GPT2, false, false},
    {"starcoder", PRE_STARCODER, false, false},
    {"refact", PRE_STARCODER, false, false},
    {"command-r", PRE_STARCODER, false, false},
    {"smollm", PRE_STARCODER, false, false},
    {"codeshell", PRE_STARCODER, false, false},
    {"exaone", PRE_STARCODER, false, false},
    {"minerva-7b", PRE_STARCODER, false, false},
    {"mellum2", PRE_STARCODER, false, false},
    {"qwen2", PRE_QWEN2, false, false},
    {"deepseek-r1-qwen", PRE_QWEN2, false, false},
    {"stablelm2", PRE_QWEN2, false, false},
    {"megrez", PRE_QWEN2, false, false},
    {"hunyuan", PRE_QWEN2, false, false},
    {"grok-2", PRE_QWEN2, false, false},
    {"solar-open", PRE_QWEN2, false, false},
    {"kormo", PRE_QWEN2, false, false},
    {"qwen35", PRE_QWEN35, false, false},
    {"poro-chat", PRE_BLOOM, false, false},
    {"bloom", PRE_BLOOM, false, false},
    {"gpt3-finnish", PRE_BLOOM, false, false},
    {"viking", PRE_VIKING, false, false},
    {"chameleon", PRE_CHAMELEON, false, true},
    {"tekken", PRE_TEKKEN, true, true},
    {"deepseek-v3", PRE_DEEPSEEK3, false, false},
    {"hunyuan-dense", PRE_DEEPSEEK3, false, false},
    {"joyai-llm", PRE_DEEPSEEK3, false, false},
    {"hy_v4", PRE_DEEPSEEK3, false, false},
    {"gpt-4o", PRE_GPT4O, false, false},
    {"llama4", PRE_GPT4O, false, false},
    {"kanana2", PRE_GPT4O, false, false},
};

static const char *const eog_texts[] = {
    "<|eot_id|>",      "<|im_end|>", "<|end|>",       "<end_of_turn>",
    "<|endoftext|>",   "<|eom_id|>", "<EOT>",         "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>", "<|return|>", "<|call|>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"};

static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",       "<end_of_turn>",
    "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"};

static int32_t
find_text(const struct le_vocab *v, const char *z)
{
    return text_to_id(v, z, strlen(z));
}

static int
cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* (text length, id) pairs: longest first, then by id, so the cut order is
 * deterministic.  (A key array rather than a comparator that reads the
 * vocab through a global, which two threads loading models would race
 * on.) */
struct len_id {
    uint32_t len;
    int32_t id;
};

static int
cmp_len_id(const void *a, const void *b)
{
    const struct len_id *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void
set_special_id(const struct le_gguf *g, const char *key, int32_t n,
               int32_t *id)
{
    uint32_t u;
    if (*id >= n)
        *id = -1;
    if (le_gguf_get_u32(g, key, &u) && u < (uint32_t)n)
        *id = (int32_t)u;
}

static bool
contains_ci(struct le_gguf_str s, const char *z)
{
    size_t zl = strlen(z);
    for (size_t i = 0; i + zl <= s.len; i++) {
        size_t j = 0;
        while (j < zl && tolower((unsigned char)s.ptr[i + j]) == z[j])
            j++;
        if (j == zl)
            return true;
    }
    return false;
}

static enum le_status
load_tokens(struct le_vocab *v, const struct le_gguf *g, char *err,
            size_t errlen)
{
    const struct le_gguf_kv *kt = le_gguf_find(g, "tokenizer.ggml.tokens");
    if (!kt || kt->type != LE_GGUF_ARRAY || kt->v.arr.type != LE_GGUF_STRING)
        return fail(err, errlen, LE_EFORMAT,
                    "%s: no string array tokenizer.ggml.tokens",
                    "tokenizer");
    if (kt->v.arr.n == 0 || kt->v.arr.n > (1u << 24))
        return fail(err, errlen, LE_EFORMAT,
                    "%s: tokenizer.ggml.tokens has a bad token count",
                    "tokenizer");
    int32_t n = (int32_t)kt->v.arr.n;
    v->n = n;

    const struct le_gguf_kv *ks = le_gguf_find(g, "tokenizer.ggml.scores");
    if (ks && (ks->type != LE_GGUF_ARRAY ||
               (ks->v.arr.type != LE_GGUF_FLOAT32 &&
                ks->v.arr.type != LE_GGUF_INT32) ||
               ks->v.arr.n < (uint64_t)n))
        return fail(err, errlen, LE_EFORMAT,
                    "%s: tokenizer.ggml.scores is not a float array as "
                    "long as the token list", "tokenizer");
    const struct le_gguf_kv *ky =
        le_gguf_find(g, "tokenizer.ggml.token_type");
    if (ky && (ky->type != LE_GGUF_ARRAY ||
               ky->v.arr.type != LE_GGUF_INT32 ||
               ky->v.arr.n < (uint64_t)n))
        return fail(err, errlen, LE_EFORMAT,
                    "%s: tokenizer.ggml.token_type is not an int32 array "
                    "as long as the token list", "tokenizer");

    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        uint64_t l = kt->v.arr.strs[i].len;
        if (l == 0)
            l = 32; /* "[EMPTY_<i>]" */
        if (l > (1u << 20) || total > ((size_t)1 << 31))
            return fail(err, errlen, LE_EFORMAT,
                        "%s: a token text is too long", "tokenizer");
        total += l;
    }
    v->toks = calloc((size_t)n, sizeof(*v->toks));
    v->arena = malloc(total + 1);
    v->tmask = table_size((size_t)n) - 1;
    v->tslot = calloc(v->tmask + 1, sizeof(*v->tslot));
    if (!v->toks || !v->arena || !v->tslot)
        return LE_ENOMEM;
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        struct tok *t = &v->toks[i];
        const struct le_gguf_str *s = &kt->v.arr.strs[i];
        t->off = (uint32_t)at;
        if (s->len == 0) {
            int k = snprintf(v->arena + at, 33, "[EMPTY_%d]", (int)i);
            t->len = (uint32_t)k;
        } else {
            memcpy(v->arena + at, s->ptr, s->len);
            t->len = (uint32_t)s->len;
        }
        at += t->len;
        if (ks) {
            const uint8_t *p = (const uint8_t *)ks->v.arr.data + 4 * (size_t)i;
            if (ks->v.arr.type == LE_GGUF_FLOAT32) {
                memcpy(&t->score, p, 4);
            } else {
                int32_t iv;
                memcpy(&iv, p, 4);
                t->score = (float)iv;
            }
        }
        int32_t ty = 1;
        if (ky)
            memcpy(&ty, (const uint8_t *)ky->v.arr.data + 4 * (size_t)i, 4);
        switch (ty) {
        case 1: t->attr = TA_NORMAL; break;
        case 2: t->attr = TA_UNKNOWN; break;
        case 3: t->attr = TA_CONTROL; break;
        case 4: t->attr = TA_USER; break;
        case 5: t->attr = TA_UNUSED; break;
        case 6: t->attr = TA_BYTE; break;
        default: t->attr = TA_UNDEF; break;
        }
        if ((int32_t)t->len > v->max_token_len)
            v->max_token_len = (int32_t)t->len;
        /* insert; a duplicate text maps to the last id, as llama.cpp's
         * map assignment did */
        const char *z = v->arena + t->off;
        size_t h = (size_t)fnv(z, t->len) & v->tmask;
        for (;;) {
            uint32_t slot = v->tslot[h];
            if (!slot) {
                v->tslot[h] = (uint32_t)i + 1;
                break;
            }
            const struct tok *o = &v->toks[slot - 1];
            if (o->len == t->len && memcmp(v->arena + o->off, z, t->len) == 0) {
                v->tslot[h] = (uint32_t)i + 1;
                break;
            }
            h = (h + 1) & v->tmask;
        }
    }
    return LE_OK;
}

static enum le_status
load_merges(struct le_vocab *v, const struct le_gguf *g, char *err,
            size_t errlen)
{
    const struct le_gguf_kv *km = le_gguf_find(g, "tokenizer.ggml.merges");
    if (!km || km->type != LE_GGUF_ARRAY || km->v.arr.type != LE_GGUF_STRING)
        return fail(err, errlen, LE_EFORMAT,
                    "%s: gpt2 vocabulary without a string array "
                    "tokenizer.ggml.merges", "tokenizer");
    if (km->v.arr.n > (1u << 24))
        return fail(err, errlen, LE_EFORMAT, "%s: too many merges",
                    "tokenizer");
    int32_t n = (int32_t)km->v.arr.n;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (km->v.arr.strs[i].len > (1u << 20) || total > ((size_t)1 << 31))
            return fail(err, errlen, LE_EFORMAT, "%s: a merge is too long",
                        "tokenizer");
        total += km->v.arr.strs[i].len;
    }
    v->n_merges = n;
    v->merges = calloc((size_t)n + 1, sizeof(*v->merges));
    v->marena = malloc(total + 1);
    v->mmask = table_size((size_t)n) - 1;
    v->mslot = calloc(v->mmask + 1, sizeof(*v->mslot));
    if (!v->merges || !v->marena || !v->mslot)
        return LE_ENOMEM;
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        const struct le_gguf_str *s = &km->v.arr.strs[i];
        struct merge *m = &v->merges[i];
        memcpy(v->marena + at, s->ptr, s->len);
        /* split at the first space after the first byte; a line without
         * one is the pair ("", "") as in llama.cpp, which never matches */
        size_t sp = 0;
        for (size_t k = 1; k < s->len; k++)
            if (s->ptr[k] == ' ') {
                sp = k;
                break;
            }
        if (sp) {
            m->a_off = (uint32_t)at;
            m->a_len = (uint32_t)sp;
            m->b_off = (uint32_t)(at + sp + 1);
            m->b_len = (uint32_t)(s->len - sp - 1);
        }
        at += s->len;
        if (!sp)
            continue;
        const char *a = v->marena + m->a_off, *b = v->marena + m->b_off;
        size_t h = (size_t)pair_hash(a, m->a_len, b, m->b_len) & v->mmask;
        for (;;) {
            uint32_t slot = v->mslot[h];
            if (!slot) {
                v->mslot[h] = (uint32_t)i + 1;
                break;
            }
            const struct merge *o = &v->merges[slot - 1];
            if (o->a_len == m->a_len && o->b_len == m->b_len &&
                memcmp(v->marena + o->a_off, a, m->a_len) == 0 &&
                memcmp(v->marena + o->b_off, b, m->b_len) == 0)
                break; /* duplicate pair: the first (best) rank stays */
            h = (h + 1) & v->mmask;
        }
    }
    return LE_OK;
}

static enum le_status
finish_special(struct le_vocab *v, const struct le_gguf *g)
{
    /* harmony's vocabulary (o200k_harmony, gpt-oss): "<|end|>" ends a
     * message, not the answer, which ends at "<|return|>" or "<|call|>"
     * (as llama.cpp reads it) */
    int32_t h_end = -1;
    if (find_text(v, "<|return|>") >= 0 && find_text(v, "<|call|>") >= 0) {
        h_end = find_text(v, "<|end|>");
        if (v->eot >= 0 && v->eot == h_end)
            v->eot = -1;
        if (v->eos >= 0 && v->eos == h_end)
            v->eos = find_text(v, "<|return|>");
    }
    /* EOT by text when the metadata names none; such tokens are control
     * tokens whatever their type says */
    if (v->eot < 0) {
        for (size_t i = 0; i < sizeof(eot_texts) / sizeof(*eot_texts); i++) {
            int32_t id = find_text(v, eot_texts[i]);
            if (id >= 0 && id != h_end) {
                v->eot = id;
                break;
            }
        }
    }
    if (v->eom < 0)
        v->eom = find_text(v, "<|eom_id|>");

    size_t cap = sizeof(eog_texts) / sizeof(*eog_texts) + 3;
    v->eog = malloc(cap * sizeof(*v->eog));
    if (!v->eog)
        return LE_ENOMEM;
    for (size_t i = 0; i < sizeof(eog_texts) / sizeof(*eog_texts); i++) {
        int32_t id = find_text(v, eog_texts[i]);
        if (id >= 0 && id != h_end) {
            v->eog[v->n_eog++] = id;
            if (!(v->toks[id].attr & TA_CONTROL))
                v->toks[id].attr = (uint16_t)(v->toks[id].attr | TA_CONTROL);
        }
    }
    if (v->eot >= 0 && !(v->toks[v->eot].attr & TA_CONTROL))
        v->toks[v->eot].attr = (uint16_t)(v->toks[v->eot].attr | TA_CONTROL);
    int32_t extra[3] = {v->eos, v->eot, v->eom};
    for (int i = 0; i < 3; i++)
        if (extra[i] >= 0)
            v->eog[v->n_eog++] = extra[i];
    qsort(v->eog, v->n_eog, sizeof(*v->eog), cmp_i32);
    size_t k = 0;
    for (size_t i = 0; i < v->n_eog; i++)
        if (k == 0 || v->eog[k - 1] != v->eog[i])
            v->eog[k++] = v->eog[i];
    v->n_eog = k;

    /* the cut list: control, user-defined and unknown tokens */
    size_t ns = 0;
    for (int32_t i = 0; i < v->n; i++)
        if (v->toks[i].attr & (TA_CONTROL | TA_USER | TA_UNKNOWN))
            ns++;
    v->special = malloc((ns ? ns : 1) * sizeof(*v->special));
    struct len_id *order = malloc((ns ? ns : 1) * sizeof(*order));
    if (!v->special || !order) {
        free(order);
        return LE_ENOMEM;
    }
    for (int32_t i = 0; i < v->n; i++)
        if (v->toks[i].attr & (TA_CONTROL | TA_USER | TA_UNKNOWN)) {
            order[v->n_special].len = v->toks[i].len;
            order[v->n_special++].id = i;
        }
    qsort(order, v->n_special, sizeof(*order), cmp_len_id);
    for (size_t i = 0; i < v->n_special; i++)
        v->special[i] = order[i].id;
    free(order);

    /* Phi-3 strips spaces right of its special tokens (llama.cpp sets
     * this by model name: the GGUF carries no per-token strip flags) */
    struct le_gguf_str name;
    if (le_gguf_get_str(g, "general.name", &name) &&
        (contains_ci(name, "phi-3") || contains_ci(name, "phi3"))) {
        for (size_t i = 0; i < v->n_special; i++)
            v->toks[v->special[i]].attr |= TA_RSTRIP;
        int32_t id = find_text(v, "</s>");
        if (id >= 0)
            v->toks[id].attr |= TA_RSTRIP;
        const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (int i = 0; i < 3; i++)
            if ((id = find_text(v, keep[i])) >= 0)
                v->toks[id].attr &= (uint16_t)~TA_RSTRIP;
    }
    return LE_OK;
}

enum le_status
le_vocab_load(const struct le_gguf *g, struct le_vocab **out, char *err,
              size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!g || !out)
        return LE_EINVAL;
    struct le_gguf_str model, pre = {0};
    if (!le_gguf_get_str(g, "tokenizer.ggml.model", &model))
        return fail(err, errlen, LE_EFORMAT,
                    "%s: no tokenizer.ggml.model in the file", "tokenizer");
    struct le_vocab *v = calloc(1, sizeof(*v));
    if (!v)
        return LE_ENOMEM;
    enum le_status st = LE_OK;
    v->bos = v->eos = v->unk = v->sep = v->pad = v->eot = v->eom = -1;
    for (int i = 0; i < 256; i++)
        v->byte_tok[i] = -1;

    if (le_gguf_str_eq(model, "llama")) {
        v->kind = VK_SPM;
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
    } else if (le_gguf_str_eq(model, "gpt2")) {
        v->kind = VK_BPE;
        v->bos = 11, v->eos = 11; /* llama.cpp's defaults */
        v->pre = PRE_DEFAULT;
        if (le_gguf_get_str(g, "tokenizer.ggml.pre", &pre)) {
            size_t i, np = sizeof(pre_names) / sizeof(pre_names[0]);
            for (i = 0; i < np; i++)
                if (le_gguf_str_eq(pre, pre_names[i].name))
                    break;
            if (i == np) {
                char nm[64];
                size_t l = pre.len < sizeof(nm) - 1 ? pre.len : sizeof(nm) - 1;
                memcpy(nm, pre.ptr, l);
                nm[l] = 0;
                st = fail(err, errlen, LE_EFORMAT,
                          "tokenizer: unsupported pre-tokenizer "
                          "tokenizer.ggml.pre = '%s'", nm);
                goto out;
            }
            v->pre = pre_names[i].kind;
            v->ignore_merges = pre_names[i].ignore_merges;
            v->add_bos = pre_names[i].add_bos;
        }
    } else if (le_gguf_str_eq(model, "bert")) {
        v->kind = VK_WPM;
        v->bos = 101, v->unk = 100, v->sep = 102, v->pad = 0;
        v->add_bos = true;
        v->add_sep = true;
        v->wpm_lower = true;
    } else {
        char nm[64];
        size_t l = model.len < sizeof(nm) - 1 ? model.len : sizeof(nm) - 1;
        memcpy(nm, model.ptr, l);
        nm[l] = 0;
        st = fail(err, errlen, LE_EFORMAT,
                  "tokenizer: unsupported tokenizer.ggml.model '%s'", nm);
        goto out;
    }
    bool b;
    if (le_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b))
        v->add_space_prefix = b;

    if ((st = load_tokens(v, g, err, errlen)) != LE_OK)
        goto out;
    if (v->kind == VK_BPE && (st = load_merges(v, g, err, errlen)) != LE_OK)
        goto out;

    set_special_id(g, "tokenizer.ggml.bos_token_id", v->n, &v->bos);
    /* GLM's (glm4, chatglm-bpe): no BOS, whatever the file names (its
     * converter names [gMASK]), as llama.cpp: the chat templates write
     * "[gMASK]<sop>" themselves */
    if (v->kind == VK_BPE && pre.ptr &&
        (le_gguf_str_eq(pre, "glm4") || le_gguf_str_eq(pre, "chatglm-bpe")))
        v->bos = -1;
    set_special_id(g, "tokenizer.ggml.eos_token_id", v->n, &v->eos);
    set_special_id(g, "tokenizer.ggml.eot_token_id", v->n, &v->eot);
    set_special_id(g, "tokenizer.ggml.eom_token_id", v->n, &v->eom);
    set_special_id(g, "tokenizer.ggml.unknown_token_id", v->n, &v->unk);
    set_special_id(g, "tokenizer.ggml.seperator_token_id", v->n, &v->sep);
    set_special_id(g, "tokenizer.ggml.padding_token_id", v->n, &v->pad);
    if (le_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b))
        v->add_bos = b;
    if (le_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b))
        v->add_eos = b;
    if (le_gguf_get_bool(g, "tokenizer.ggml.add_sep_token", &b))
        v->add_sep = b;
    if (v->kind == VK_WPM) {
        v->wpm_strip = v->wpm_lower;
        if (le_gguf_get_bool(g, "tokenizer.ggml.normalizer.lowercase", &b))
            v->wpm_lower = v->wpm_strip = b;
        if (le_gguf_get_bool(g, "tokenizer.ggml.normalizer.strip_accents",
                             &b))
            v->wpm_strip = b;
    }

    if (v->kind == VK_SPM) {
        for (int i = 0; i < 256; i++) {
            char z[8];
            snprintf(z, sizeof(z), "<0x%02X>", i);
            v->byte_tok[i] = find_text(v, z);
        }
    }
    st = finish_special(v, g);
out:
    if (st == LE_OK) {
        *out = v;
        v = NULL;
    }
    le_vocab_free(v);
    return st;
}

int64_t
le_vocab_pretokenize(const struct le_vocab *v, const char *text, size_t len,
                     size_t *ends, size_t cap)
{
    if (!v || v->kind != VK_BPE || (!text && len) || (!ends && cap) ||
        len > ((size_t)1 << 28))
        return -1;
    struct pt t;
    memset(&t, 0, sizeof(t));
    int64_t n = -1;
    if (pt_decode(&t, text, len) == 0 && pt_split(&t, pre_rules(v->pre)) == 0) {
        for (size_t i = 0; i < t.na && i < cap; i++)
            ends[i] = t.off[t.a[i].e];
        n = (int64_t)t.na;
    }
    pt_free(&t);
    return n;
}
