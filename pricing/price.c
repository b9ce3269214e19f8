/*
 * price.c: the built-in price table and exact money arithmetic.
 *
 * Money is int64_t picodollars (pUSD, 1e-12 USD).  A published price of
 * P USD per million tokens is P * 1e6 pUSD per token, which is an integer
 * for every price with up to 6 decimals (all published prices are), so a
 * request's cost is an exact integer and sums never drift.  No floating
 * point touches a total: doubles only enter through
 * pr_usd_per_mtok_from_double, which rounds once to the nearest pUSD.
 *
 * Every multiplication and addition is overflow-checked
 * (__builtin_*_overflow) and fails with GX_ETOOBIG instead of wrapping.
 */
#include "pricing.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

#define PUSD_PER_USD 1000000000000LL /* 1e12 */

struct pr_default_entry {
    const char *model;
    /* pUSD per token == micro-USD per million tokens, written as integers
     * so the table itself is exact (2.00 USD/Mtok = 2000000). */
    int64_t input, cached_input, output;
    int64_t cache_write; /* 5-minute cache write; 0: as input */
};

/*
 * Published list prices, USD per million tokens (input / cached input /
 * output), standard tier, checked 2025-11:
 *  - OpenAI gpt-4.1 2.00 / 0.50 / 8.00, gpt-4.1-mini 0.40 / 0.10 / 1.60
 *    (openai.com/api/pricing; cached input is the automatic prompt cache).
 *  - Anthropic claude-sonnet-4.5 3.00 / 0.30 / 15.00, claude-haiku-4.5
 *    1.00 / 0.10 / 5.00 (docs.anthropic.com pricing; the cached price is
 *    the cache *read* price).  Cache writes: 3.75 and 1.25, the 5-minute
 *    write price (1.25x input); 1-hour writes cost 2x input (6.00 and
 *    2.00) and are configured by setting cache_write_per_mtok to that
 *    price for a model used with 1-hour caching only (the native usage
 *    object reports both tiers as one cache_creation_input_tokens).
 *  - Google gemini-2.5-flash 0.30 / 0.03 / 2.50 (text input; the context
 *    caching price for text), gemini-2.5-pro 1.25 / 0.125 / 10.00 (prompts
 *    <= 200k tokens; longer prompts cost more and are not modelled)
 *    (ai.google.dev/gemini-api/docs/pricing).  Both cached prices are
 *    the current 90%-off context-caching rate of the 2.5 models; the
 *    older 0.075 / 0.31 figures were the earlier 75%-off rate.
 *  - DeepSeek deepseek-v3.2 0.28 / 0.028 (cache hit) / 0.42
 *    (api-docs.deepseek.com/quick_start/pricing; "deepseek-chat" is the
 *    same model under its API name).
 * A provider without a caching price gets cached = input.  Thinking
 * tokens (Gemini thoughtsTokenCount, Anthropic thinking) are billed at the
 * output price by both, so they need no column.  Gemini's explicit
 * context-cache storage (per token-hour) is not a per-request cost and is
 * not modelled.
 */
static const struct pr_default_entry pr_defaults[] = {
    /* model, then pUSD per token (USD/Mtok x 1e6) */
    {"gpt-4.1", 2000000, 500000, 8000000, 0},
    {"gpt-4.1-mini", 400000, 100000, 1600000, 0},
    {"claude-sonnet-4.5", 3000000, 300000, 15000000, 3750000},
    {"claude-haiku-4.5", 1000000, 100000, 5000000, 1250000},
    {"gemini-2.5-flash", 300000, 30000, 2500000, 0},
    {"gemini-2.5-pro", 1250000, 125000, 10000000, 0},
    {"deepseek-v3.2", 280000, 28000, 420000, 0},
    {"deepseek-chat", 280000, 28000, 420000, 0},
};

int
pr_price_default(const char *model, struct pr_price *out)
{
    if (!model)
        return 0;
    for (size_t i = 0; i < sizeof(pr_defaults) / sizeof(pr_defaults[0]); i++) {
        if (strcmp(pr_defaults[i].model, model) == 0) {
            if (out) {
                out->input_pusd = pr_defaults[i].input;
                out->cached_input_pusd = pr_defaults[i].cached_input;
                out->output_pusd = pr_defaults[i].output;
            }
            return 1;
        }
    }
    return 0;
}

int
pr_rates_default(const char *model, struct pr_rates *out)
{
    if (!model)
        return 0;
    for (size_t i = 0; i < sizeof(pr_defaults) / sizeof(pr_defaults[0]); i++) {
        const struct pr_default_entry *d = &pr_defaults[i];
        if (strcmp(d->model, model) == 0) {
            if (out) {
                out->input_pusd = d->input;
                out->cached_input_pusd = d->cached_input;
                out->cache_write_pusd =
                    d->cache_write ? d->cache_write : d->input;
                out->output_pusd = d->output;
            }
            return 1;
        }
    }
    return 0;
}

size_t
pr_price_default_count(void)
{
    return sizeof(pr_defaults) / sizeof(pr_defaults[0]);
}

const char *
pr_price_default_at(size_t i, struct pr_price *out)
{
    if (i >= pr_price_default_count())
        return NULL;
    if (out) {
        out->input_pusd = pr_defaults[i].input;
        out->cached_input_pusd = pr_defaults[i].cached_input;
        out->output_pusd = pr_defaults[i].output;
    }
    return pr_defaults[i].model;
}

/* Decimal text -> pUSD per token.  Grammar: digits [ '.' digits ]
 * [ ('e'|'E') ['+'|'-'] digits ], surrounding spaces allowed.  The value
 * times 1e6 must be an integer; anything finer is rejected, not rounded,
 * because a price that cannot be represented exactly is a config error. */
enum gx_status
pr_usd_per_mtok_parse(const char *text, int64_t *pusd_per_tok)
{
    if (!text || !pusd_per_tok)
        return GX_EINVAL;
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '+')
        p++;
    /* Collect significant digits into an int64 while tracking the decimal
     * exponent: value = mant * 10^exp10. */
    int64_t mant = 0;
    long exp10 = 0;
    int ndig = 0, any_nonzero_dropped = 0;
    while (isdigit((unsigned char)*p)) {
        int d = *p - '0';
        if (__builtin_mul_overflow(mant, 10, &mant) ||
            __builtin_add_overflow(mant, d, &mant))
            return GX_ETOOBIG;
        ndig++;
        p++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            int d = *p - '0';
            int64_t m2;
            if (__builtin_mul_overflow(mant, 10, &m2) ||
                __builtin_add_overflow(m2, d, &m2)) {
                /* Past int64 precision: only zeros may follow. */
                if (d != 0)
                    any_nonzero_dropped = 1;
            } else {
                mant = m2;
                exp10--;
            }
            ndig++;
            p++;
        }
    }
    if (ndig == 0)
        return GX_EINVAL;
    if (*p == 'e' || *p == 'E') {
        p++;
        int neg = 0;
        if (*p == '+' || *p == '-')
            neg = *p++ == '-';
        if (!isdigit((unsigned char)*p))
            return GX_EINVAL;
        long e = 0;
        while (isdigit((unsigned char)*p)) {
            if (e < 100000)
                e = e * 10 + (*p - '0');
            p++;
        }
        exp10 += neg ? -e : e;
    }
    while (isspace((unsigned char)*p))
        p++;
    if (*p != '\0' || any_nonzero_dropped)
        return GX_EINVAL;
    exp10 += 6; /* USD per Mtok -> pUSD per token */
    if (mant == 0) {
        *pusd_per_tok = 0;
        return GX_OK;
    }
    while (exp10 < 0) {
        if (mant % 10 != 0)
            return GX_EINVAL; /* finer than 1 pUSD per token */
        mant /= 10;
        exp10++;
    }
    while (exp10 > 0) {
        if (__builtin_mul_overflow(mant, 10, &mant))
            return GX_ETOOBIG;
        exp10--;
    }
    *pusd_per_tok = mant;
    return GX_OK;
}

enum gx_status
pr_usd_per_mtok_from_double(double usd, int64_t *pusd_per_tok)
{
    if (!pusd_per_tok || !isfinite(usd) || usd < 0)
        return GX_EINVAL;
    double v = usd * 1e6;
    /* 9.2e18 is INT64_MAX; stay well inside so llround is defined. */
    if (v >= 9.0e18)
        return GX_ETOOBIG;
    *pusd_per_tok = (int64_t)llround(v);
    return GX_OK;
}

enum gx_status
pr_cost(const struct pr_price *p, int64_t prompt_tokens, int64_t cached_tokens,
        int64_t completion_tokens, int64_t *cost_pusd)
{
    if (!p)
        return GX_EINVAL;
    struct pr_rates r = {p->input_pusd, p->cached_input_pusd, p->input_pusd,
                         p->output_pusd};
    struct pr_tokens t = {prompt_tokens, cached_tokens, 0, completion_tokens,
                          0};
    return pr_cost_tokens(&r, &t, cost_pusd);
}

enum gx_status
pr_cost_tokens(const struct pr_rates *p, const struct pr_tokens *t,
               int64_t *cost_pusd)
{
    if (!p || !t || !cost_pusd || t->prompt < 0 || t->cached < 0 ||
        t->cache_write < 0 || t->completion < 0 || t->reasoning < 0 ||
        t->reasoning > t->completion || t->cached > t->prompt ||
        t->cache_write > t->prompt - t->cached || p->input_pusd < 0 ||
        p->cached_input_pusd < 0 || p->cache_write_pusd < 0 ||
        p->output_pusd < 0)
        return GX_EINVAL;
    int64_t uncached = t->prompt - t->cached - t->cache_write;
    int64_t a, b, w, c, sum;
    if (__builtin_mul_overflow(uncached, p->input_pusd, &a) ||
        __builtin_mul_overflow(t->cached, p->cached_input_pusd, &b) ||
        __builtin_mul_overflow(t->cache_write, p->cache_write_pusd, &w) ||
        __builtin_mul_overflow(t->completion, p->output_pusd, &c) ||
        __builtin_add_overflow(a, b, &sum) ||
        __builtin_add_overflow(sum, w, &sum) ||
        __builtin_add_overflow(sum, c, &sum))
        return GX_ETOOBIG;
    *cost_pusd = sum;
    return GX_OK;
}

enum gx_status
pr_cache_write_from_input(int64_t input_pusd, int64_t *out)
{
    int64_t x5;
    if (!out || input_pusd < 0)
        return GX_EINVAL;
    if (__builtin_mul_overflow(input_pusd, 5, &x5) ||
        __builtin_add_overflow(x5, 2, &x5))
        return GX_ETOOBIG;
    *out = x5 / 4; /* 1.25x, half up */
    return GX_OK;
}

enum gx_status
pr_pusd_add(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (!out)
        return GX_EINVAL;
    if (__builtin_add_overflow(a, b, &r))
        return GX_ETOOBIG;
    *out = r;
    return GX_OK;
}

void
pr_pusd_format(int64_t pusd, char *buf, size_t buflen)
{
    if (!buf || buflen == 0)
        return;
    /* Work in uint64 so INT64_MIN has a magnitude.  Digits by hand, not
     * printf: this runs for every reply's x-llmux-cost header (two
     * snprintf were 2.2k instructions a request). */
    int neg = pusd < 0;
    uint64_t mag = neg ? (uint64_t)0 - (uint64_t)pusd : (uint64_t)pusd;
    uint64_t whole = mag / (uint64_t)PUSD_PER_USD;
    uint64_t frac = mag % (uint64_t)PUSD_PER_USD;
    char t[48]; /* '-', 20 digits, '.', 12 digits */
    char *e = t + sizeof(t);
    char *p = e;
    int keep = 0; /* the 12 fraction digits without trailing zeros, >= 1 */
    for (int i = 0; i < 12; i++) {
        char d = (char)('0' + frac % 10);
        frac /= 10;
        if (keep || d != '0' || i == 11)
            keep = 1;
        if (keep)
            *--p = d;
    }
    *--p = '.';
    do {
        *--p = (char)('0' + whole % 10);
        whole /= 10;
    } while (whole);
    if (neg)
        *--p = '-';
    size_t n = (size_t)(e - p);
    if (n > buflen - 1)
        n = buflen - 1; /* cut as snprintf cuts */
    memcpy(buf, p, n);
    buf[n] = '\0';
}

void
pr_usd_per_mtok_format(int64_t pusd_per_tok, char *buf, size_t buflen)
{
    if (!buf || buflen == 0)
        return;
    /* pUSD per token == micro-USD per million tokens: 6 decimals. */
    int neg = pusd_per_tok < 0;
    uint64_t mag =
        neg ? (uint64_t)0 - (uint64_t)pusd_per_tok : (uint64_t)pusd_per_tok;
    char fbuf[8];
    snprintf(fbuf, sizeof(fbuf), "%06llu", (unsigned long long)(mag % 1000000));
    size_t n = 6;
    while (n > 2 && fbuf[n - 1] == '0')
        n--;
    fbuf[n] = '\0';
    snprintf(buf, buflen, "%s%llu.%s", neg ? "-" : "",
             (unsigned long long)(mag / 1000000), fbuf);
}
