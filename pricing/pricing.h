/*
 * pricing: the price table (built-in defaults + config), exact cost
 * arithmetic in integer picodollars, budgets, the SQLite usage ledger
 * (one writer thread, group commit) and usage queries.
 *
 * Money is int64_t picodollars (1e-12 USD).  A price of P USD per million
 * tokens is P*1e6 pUSD per token.  int64 holds 9.2e6 USD, far beyond any
 * one request; sums overflow-check and fail rather than wrap.
 *
 * Depends on common/ only (config/ may use it; it never uses config/).
 */
#ifndef LLMUX_PRICING_H
#define LLMUX_PRICING_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/common.h"

struct pr_price {
    int64_t input_pusd;        /* per uncached prompt token */
    int64_t cached_input_pusd; /* per cached prompt token */
    int64_t output_pusd;       /* per completion token */
};

/* Built-in published prices; returns 1 and fills *out if model is known. */
int pr_price_default(const char *model, struct pr_price *out);
/* The built-in table, for `llmux prices`: number of entries, and the i-th
 * model name (static string; NULL past the end) with its price in *out. */
size_t pr_price_default_count(void);
const char *pr_price_default_at(size_t i, struct pr_price *out);

/* Converts USD per million tokens, given as decimal text ("0.42", "2.5",
 * "1e-1"), to exact pUSD per token.  Fails (GX_EINVAL) on negatives, more
 * than 6 decimals after scaling, or overflow. */
enum gx_status pr_usd_per_mtok_parse(const char *text, int64_t *pusd_per_tok);
/* Same from a double as jansson gives it: rounds to the nearest pUSD, which
 * is exact for any price with up to 6 decimals. */
enum gx_status pr_usd_per_mtok_from_double(double usd, int64_t *pusd_per_tok);

/* cost = (prompt - cached) * input + cached * cached_input
 *        + completion * output.  (OpenAI's prompt_tokens includes the
 * cached ones.)  GX_EINVAL on negatives or cached > prompt, GX_ETOOBIG on
 * overflow. */
enum gx_status pr_cost(const struct pr_price *p, int64_t prompt_tokens,
                       int64_t cached_tokens, int64_t completion_tokens,
                       int64_t *cost_pusd);

/* *out = a + b; GX_ETOOBIG on overflow (then *out is unchanged). */
enum gx_status pr_pusd_add(int64_t a, int64_t b, int64_t *out);

/* Exact decimal USD text of pusd, e.g. 1234 -> "0.000000001234",
 * trailing zeros trimmed but at least one decimal ("0.0"). */
void pr_pusd_format(int64_t pusd, char *buf, size_t buflen);

/* One usage row (DESIGN.md section 7).  Strings are copied on submit. */
struct pr_usage_row {
    int64_t ts_ms;
    const char *request_id;
    int64_t key_id; /* -1 = NULL (anonymous) */
    const char *route;    /* NULL ok */
    const char *provider; /* NULL ok */
    const char *model;    /* NULL ok */
    int status;           /* HTTP status sent to the client */
    int attempts;
    int stream;
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens;
    int64_t cost_pusd;
    int64_t latency_ms;
    int64_t ttft_ms;      /* -1 = NULL */
    const char *usage_source; /* "upstream" | "local" | "estimated" */
    const char *error;        /* NULL when none */
};

struct pr_ledger;

/* Opens (creating and migrating) the database at path (":memory:" ok) and
 * starts the writer thread.  The caller owns the result. */
enum gx_status pr_ledger_open(const char *path, struct pr_ledger **out,
                              char *err, size_t errlen);
/* Commits everything queued, stops the writer thread, closes.  NULL ok. */
void pr_ledger_close(struct pr_ledger *l);

/* Called on the writer thread once the row's transaction committed (ok=1)
 * or failed (ok=0).  Must be quick and must not call the ledger; hop to
 * your own thread (e.g. event_active). */
typedef void (*pr_commit_cb)(void *ud, int ok);

/* Queues a copy of row; thread-safe, never blocks on disk.  cb may be
 * NULL.  Rows from all threads go into one transaction per wake-up. */
enum gx_status pr_ledger_submit(struct pr_ledger *l,
                                const struct pr_usage_row *row,
                                pr_commit_cb cb, void *ud);

#endif
