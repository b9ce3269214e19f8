/*
 * pricing: the price table (built-in defaults + config), exact cost
 * arithmetic in integer picodollars, keys, budgets and rate-limit leases,
 * and the storage interface: the usage ledger (one writer thread, group
 * commit) and usage queries on SQLite (the default, ledger.c) or
 * PostgreSQL (pg.c, shared by several instances), one table of functions
 * per backend (pricing_int.h, store.c).
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
 * "1e-1"), to exact pUSD per token.  Fails with GX_EINVAL on negatives,
 * malformed text or a price finer than 1 pUSD per token (more than 6
 * decimals), GX_ETOOBIG on overflow; *pusd_per_tok is unchanged then. */
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

/*
 * Every token class of one request (DESIGN.md section 7).  prompt counts
 * all input tokens, as OpenAI does: uncached + cached (cache reads) +
 * cache_write (Anthropic's cache creation).  reasoning is part of
 * completion (thinking tokens are billed as output) and only recorded.
 */
struct pr_tokens {
    int64_t prompt;
    int64_t cached;      /* cache reads */
    int64_t cache_write; /* cache writes (Anthropic cache_creation) */
    int64_t completion;  /* output, reasoning included */
    int64_t reasoning;   /* of completion: thinking tokens */
};

/* A price with every class (pUSD per token).  pr_price is kept as it was
 * (its positional initialisers are used widely); this one adds cache
 * writes.  A provider that never reports cache writes may leave
 * cache_write_pusd = input_pusd. */
struct pr_rates {
    int64_t input_pusd;
    int64_t cached_input_pusd;
    int64_t cache_write_pusd;
    int64_t output_pusd;
};

/* Built-in rates for model (as pr_price_default, plus the cache write
 * price: the published 5-minute cache write price for Anthropic models,
 * the input price elsewhere).  Returns 1 if known. */
int pr_rates_default(const char *model, struct pr_rates *out);

/* cost = (prompt - cached - cache_write) * input + cached * cached_input
 *        + cache_write * cache_write + completion * output
 * exactly, in pUSD.  GX_EINVAL on negative counts or prices, cached +
 * cache_write > prompt or reasoning > completion; GX_ETOOBIG on overflow
 * (*cost_pusd unchanged on error). */
enum gx_status pr_cost_tokens(const struct pr_rates *p,
                              const struct pr_tokens *t, int64_t *cost_pusd);

/* The cache-write price an Anthropic model has when the config gives
 * none: 1.25 x input (Anthropic's published 5-minute write multiplier),
 * rounded half up to whole pUSD per token (exact for every published
 * price).  GX_ETOOBIG on overflow. */
enum gx_status pr_cache_write_from_input(int64_t input_pusd, int64_t *out);

/* A price back as USD per million tokens, exact, at least two decimals:
 * 2000000 -> "2.00", 28000 -> "0.028", 125000 -> "0.125" (for `llmux
 * prices`). */
void pr_usd_per_mtok_format(int64_t pusd_per_tok, char *buf, size_t buflen);

/* *out = a + b; GX_ETOOBIG on overflow (then *out is unchanged). */
enum gx_status pr_pusd_add(int64_t a, int64_t b, int64_t *out);

/* Exact decimal USD text of pusd, e.g. 1234 -> "0.000000001234",
 * trailing zeros trimmed but at least one decimal ("0.0"). */
void pr_pusd_format(int64_t pusd, char *buf, size_t buflen);

/* One usage row (DESIGN.md section 7).  Strings are copied on submit. */
struct pr_usage_row {
    int64_t ts_ms;
    const char *request_id;
    int64_t key_id; /* -1 = NULL (anonymous); a key's cost_pusd is also
                       added to keys.spent_pusd in the row's transaction */
    const char *route;    /* NULL ok */
    const char *provider; /* NULL ok */
    const char *model;    /* NULL ok */
    int status;           /* HTTP status sent to the client; anything
                             but 2xx counts as an error in queries */
    int attempts;
    int stream;
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens;
    int64_t cost_pusd;    /* 0 when unpriced */
    int64_t latency_ms;
    int64_t ttft_ms;      /* -1 = NULL */
    const char *usage_source; /* "upstream" | "local" | "estimated" */
    const char *error;        /* NULL when none */
    /* Schema version 4 (PostgreSQL 4). */
    const char *api;          /* inbound API: "chat" (NULL = "chat"),
                                 "messages", "responses", "embeddings",
                                 "completions" */
    int64_t cache_write_tokens; /* of prompt_tokens (Anthropic cache
                                   creation), billed at the write price */
    int64_t reasoning_tokens;   /* of completion_tokens (thinking) */
    int unpriced;             /* 1: the model has no price at all, so
                                 cost_pusd is 0 for want of a price, not
                                 because it was free; counted apart in
                                 queries (pr_usage_group.unpriced) */
};

struct pr_ledger;

/* Opens (creating and migrating) the database (a SQLite path, ":memory:"
 * ok, or a PostgreSQL URI) and starts the writer thread.  The caller owns
 * the result. */
enum gx_status pr_ledger_open(const char *path, struct pr_ledger **out,
                              char *err, size_t errlen);
/* Commits everything queued, writes the pending rollup cells, stops the
 * writer thread, closes.  NULL ok. */
void pr_ledger_close(struct pr_ledger *l);

/* Called on the writer thread once the row's transaction committed (ok=1)
 * or failed (ok=0).  Must be quick and must not call the ledger; hop to
 * your own thread (e.g. event_active). */
typedef void (*pr_commit_cb)(void *ud, int ok);

/* Queues a copy of row; thread-safe, never blocks on disk.  cb may be
 * NULL.  Rows from all threads go into one transaction per wake-up.
 * GX_EAGAIN when the queue is full (see pr_ledger_opts), GX_ECANCELED
 * once closing, GX_ENOMEM; cb is not called when submit fails. */
enum gx_status pr_ledger_submit(struct pr_ledger *l,
                                const struct pr_usage_row *row,
                                pr_commit_cb cb, void *ud);

/* A hint that a row is about to be submitted (e.g. an upstream answer's
 * head arrived): if the writer thread sleeps, it is woken now and waits
 * for the row a bounded while (at most 200 us, yielding the CPU
 * between looks) instead of being woken only by the submit, so its
 * wake-up overlaps the caller's remaining work.  Thread-safe, never
 * blocks on disk; a no-op while the writer is awake or committed less
 * than 500 us ago (under load its wake-up latency gathers the batches),
 * for a NULL ledger and for backends without it (PostgreSQL).  A hint no row follows costs
 * the writer one bounded spin, nothing else. */
void pr_ledger_prewake(struct pr_ledger *l);

/* ---- ledger extras ------------------------------------------------- */

/* Durability of a commit.  NORMAL (default): WAL, fsync at checkpoints
 * only; a committed row survives the process being killed (kill -9,
 * crash) but not an OS crash or power loss.  FULL: one fsync per group
 * commit, shared by every row in it. */
enum pr_ledger_sync { PR_LEDGER_SYNC_NORMAL = 0, PR_LEDGER_SYNC_FULL = 1 };

/* What to do with a ledger row while PostgreSQL is unreachable. */
enum pr_unavailable {
    PR_UNAVAILABLE_FAIL = 0, /* the row fails (callback ok=0): the gateway
                                answers 503 (fail closed, the default) */
    PR_UNAVAILABLE_SPOOL = 1 /* the row is appended to a local spool file
                                (callback ok=1) and replayed exactly once,
                                by request_id, when the database returns */
};

struct pr_ledger_opts {
    size_t queue_max;         /* rows queued before submit says GX_EAGAIN;
                                 0 = 65536 */
    enum pr_ledger_sync sync;
    int lock_timeout_ms;      /* how long a batch waits for a database
                                 locked by another process before its rows
                                 fail (callback ok=0); 0 = 10000 */
    int rollup_flush_ms;      /* the rollup cells of committed rows are
                                 kept in memory and written at most this
                                 long after (or sooner, when many); 0 =
                                 250.  Queries stay exact meanwhile. */
    enum pr_unavailable unavailable; /* PostgreSQL only */
    const char *spool_path;   /* PostgreSQL + SPOOL: the spool file;
                                 NULL = "llmux-spool.jsonl" (copied) */
};

/* pr_ledger_open with options (opts may be NULL = defaults).  The queue is
 * bounded: pr_ledger_submit returns GX_EAGAIN when queue_max rows wait
 * (it never blocks), GX_ECANCELED once pr_ledger_close has begun. */
enum gx_status pr_ledger_open_ex(const char *path,
                                 const struct pr_ledger_opts *opts,
                                 struct pr_ledger **out, char *err,
                                 size_t errlen);

/* Blocks until every row submitted before the call is committed (or
 * failed) and its callback has returned, then until the rollup cells of
 * the committed rows are written (one attempt).  Not for event-loop
 * threads. */
void pr_ledger_flush(struct pr_ledger *l);

/* The name readers open for usage queries: the file path, or for
 * ":memory:" a shared-cache URI ("file:...?mode=memory&cache=shared") that
 * lives as long as the ledger.  Owned by the ledger. */
const char *pr_ledger_path(const struct pr_ledger *l);

struct pr_ledger_stats {
    int64_t rows;    /* rows committed since open */
    int64_t commits; /* transactions committed (rows/commits = batch) */
    int64_t failed;  /* rows whose callback got ok=0 */
    int64_t queued;  /* rows waiting now */
    int migrations_applied; /* schema migrations run by this open */
    int64_t rollup_flushes;    /* rollup cell flushes since open */
    int64_t rollup_pending;    /* committed rows not yet in the rollups */
    int64_t rolled_up_at_open; /* rows rolled up from the raw rows at open
                                  (committed after the last flush of a
                                  process that was killed) */
    int64_t spooled;  /* PostgreSQL: rows appended to the spool */
    int64_t replayed; /* PostgreSQL: spooled rows committed on replay */
    int64_t wal_checkpoints; /* SQLite: WAL checkpoints run by the
                                checkpointer thread, off the commit path */
    int64_t prewake_hits;   /* SQLite: pr_ledger_prewake woke the writer
                               and a row came within its spin */
    int64_t prewake_misses; /* ... and none came: it slept again */
};
void pr_ledger_stats(struct pr_ledger *l, struct pr_ledger_stats *out);

/* Recomputes usage_hourly and usage_daily from the raw usage rows, and
 * sets the rollup watermark to the last row, in one transaction (for
 * bulk imports, benchmarks and future migrations that change the rollup).
 * Do not run while a ledger is writing the same file: the writer would
 * wait on busy_timeout.  Blocks; not for event loops. */
enum gx_status pr_ledger_rebuild_rollups(const char *path, char *err,
                                         size_t errlen);

/* Schema version this code writes (PRAGMA user_version after open). */
int pr_ledger_schema_version(void);
/* The PostgreSQL schema version (llmux_schema.version after open). */
int pr_pg_schema_version(void);

/* 0 while rows cannot be committed and would fail (PostgreSQL
 * unreachable, fail-closed mode): the gateway refuses requests with 503
 * then.  1 otherwise (always for SQLite).  Thread-safe, never blocks. */
int pr_ledger_available(struct pr_ledger *l);

/* ---- storage backends -----------------------------------------------
 *
 * `database` names the store everywhere below: a SQLite path (the
 * embedded default; ":memory:" for the ledger only) or a PostgreSQL URI
 * ("postgres://user[:password]@host[:port]/db[?param=value]"), shared by
 * several llmux instances.  Every pr_ledger_*, pr_key_*, pr_usage_query
 * and pr_budget_load call dispatches on it to the backend's table of
 * functions (pricing_int.h).  PostgreSQL connections are made only by
 * the caller's thread in the blocking calls (aux thread, CLI) and by the
 * ledger's own writer thread, never on an event loop.
 */

/* 1 if database is a PostgreSQL URI (postgres:// or postgresql://). */
int pr_store_is_pg(const char *database);
/* database with any password replaced by "***", for logs and messages. */
void pr_store_redact(const char *database, char *buf, size_t buflen);

/* ---- keys -----------------------------------------------------------
 *
 * The keys table (DESIGN.md section 7) is owned by this module: the
 * gateway creates, lists, revokes and loads keys through these calls.
 * They block (one connection per call): aux thread or CLI only.
 */
struct pr_key {
    int64_t id;
    const char *name;
    unsigned char hash[32]; /* SHA-256 of the secret (stored as hex) */
    int64_t created_ms;
    int64_t expires_ms;  /* -1 = never */
    int64_t revoked_ms;  /* -1 = active */
    int64_t budget_pusd; /* -1 = unlimited */
    int64_t spent_pusd;
    int64_t rpm, tpm;    /* 0 = unlimited */
    const char *models;  /* "a,b,c"; NULL or "" = every model */
};

/* Called once per key row; k and its strings are valid for the call only.
 * Return nonzero to stop (the list call then returns GX_ECANCELED). */
typedef int (*pr_key_cb)(void *ud, const struct pr_key *k);

/* Inserts k (id and spent ignored; created_ms 0 = now) into the keys
 * table of database (which must exist: pr_ledger_open creates it). */
enum gx_status pr_key_create(const char *database, const struct pr_key *k,
                             int64_t *id_out, char *err, size_t errlen);
/* Sets revoked_ms (first revocation wins); GX_ENOTFOUND: no such id. */
enum gx_status pr_key_revoke(const char *database, int64_t id, int64_t now_ms,
                             char *err, size_t errlen);
/* Every key row in id order (revoked ones included), to cb. */
enum gx_status pr_key_list(const char *database, pr_key_cb cb, void *ud,
                           char *err, size_t errlen);

/* ---- budgets --------------------------------------------------------
 *
 * An in-memory spend counter per key, exact under concurrency (one
 * mutex, held for a few instructions).  Per key: limit (budget_pusd),
 * spent (settled cost) and reserved (sum of in-flight reservations).
 *
 *   before sending:  pr_budget_reserve(b, key, max_cost)
 *                    GX_EAGAIN if spent + reserved + max_cost > limit
 *                    (the gateway answers 429 insufficient_quota)
 *   after success:   pr_budget_settle(b, key, max_cost, actual_cost)
 *                    reserved -= max_cost; spent += actual_cost
 *   after failure:   pr_budget_release(b, key, max_cost)
 *
 * So spent never exceeds limit unless a request's actual cost exceeded its
 * reservation (then by at most that excess).  Keys never set with
 * pr_budget_set have no limit: reserve always succeeds and nothing is
 * tracked.  The persisted spend is keys.spent_pusd, updated by the ledger
 * writer in the row's transaction; load it at start with pr_budget_set
 * (or pr_budget_load).  All functions are thread-safe.
 */
struct pr_budget;

struct pr_budget *pr_budget_new(void);
void pr_budget_free(struct pr_budget *b);

/* Sets (or replaces) key's limit and settled spend; limit_pusd < 0 means
 * unlimited but tracked.  Keeps the key's current reservations. */
enum gx_status pr_budget_set(struct pr_budget *b, int64_t key_id,
                             int64_t limit_pusd, int64_t spent_pusd);
/* Forgets a key (revoked). */
void pr_budget_remove(struct pr_budget *b, int64_t key_id);
/* GX_OK (reserved), GX_EAGAIN (would exceed the budget), GX_EINVAL
 * (negative amount), GX_ETOOBIG (overflow). */
enum gx_status pr_budget_reserve(struct pr_budget *b, int64_t key_id,
                                 int64_t amount_pusd);
/* Releases reserved_pusd and adds actual_pusd to spent.  A key unknown
 * (or removed meanwhile) is ignored. */
void pr_budget_settle(struct pr_budget *b, int64_t key_id,
                      int64_t reserved_pusd, int64_t actual_pusd);
void pr_budget_release(struct pr_budget *b, int64_t key_id,
                       int64_t reserved_pusd);
/* Reads a key's counters; GX_ENOTFOUND if it has none. */
enum gx_status pr_budget_get(struct pr_budget *b, int64_t key_id,
                             int64_t *limit_pusd, int64_t *spent_pusd,
                             int64_t *reserved_pusd);
/* Leased mode, for several instances over one PostgreSQL database (see
 * budget.c): limits are this instance's leases of each budget, taken and
 * returned by pr_budget_sync.  instance: a unique id of this process
 * (copied).  Call before pr_budget_set. */
enum gx_status pr_budget_use_leases(struct pr_budget *b,
                                    const char *database,
                                    const char *instance);
/* The instance id in leased mode, else NULL. */
const char *pr_budget_instance(const struct pr_budget *b);
/* Blocks (one PostgreSQL transaction per leased key): returns surplus,
 * leases what recent demand needs.  No-op unless leased.  Aux thread. */
enum gx_status pr_budget_sync(struct pr_budget *b, char *err, size_t errlen);
/* At shutdown (nothing in flight): gives every lease back at once, so
 * the other instances need not wait for it to go stale.  Blocks. */
enum gx_status pr_budget_release_leases(struct pr_budget *b, char *err,
                                        size_t errlen);
/* The ledger writer: a committed row's cost left this instance's lease
 * (moved to spent_pusd in the row's transaction). */
void pr_budget_committed(struct pr_budget *b, int64_t key_id,
                         int64_t cost_pusd);
/* The ledger moves committed rows' cost off b's leases (PostgreSQL; no-op
 * for SQLite or a budget not in leased mode).  Call before serving. */
void pr_ledger_attach_budget(struct pr_ledger *l, struct pr_budget *b);

/* Loads every non-revoked key's budget_pusd (NULL = unlimited) and
 * spent_pusd from the keys table of the database at path. */
enum gx_status pr_budget_load(struct pr_budget *b, const char *path,
                              char *err, size_t errlen);

/* ---- rate limits across instances ----------------------------------
 *
 * Requests (pr_rate_new) or tokens (pr_rate_new_tokens) per minute of
 * each key counted across every instance sharing a PostgreSQL database,
 * in fixed UTC-minute windows.  Requests: per window the cluster admits
 * at most the key's rpm (over any sliding 60 s at most twice that).
 * Tokens: per window the cluster admits requests whose estimates sum to
 * at most tpm; what a request uses beyond its estimate is charged to a
 * later lease (rate.c states the bound).  Admission is in memory (a
 * leased allowance, rate.c); pr_rate_sync moves the leases.  Thread-safe;
 * sync blocks (aux thread).
 */
struct pr_rate;
struct pr_rate *pr_rate_new(const char *database);
struct pr_rate *pr_rate_new_tokens(const char *database);
void pr_rate_free(struct pr_rate *r);
/* Limits key_id to per_min a minute (<= 0: no-op). */
enum gx_status pr_rate_set(struct pr_rate *r, int64_t key_id,
                           int64_t per_min);
/* Takes one request (n tokens, capped at the limit) of key_id's
 * allowance: GX_OK, or GX_EAGAIN with *retry_s (1 until the next lease,
 * or the seconds to the next window when the cluster spent this one).
 * Unknown keys and r NULL: GX_OK. */
enum gx_status pr_rate_take(struct pr_rate *r, int64_t key_id,
                            int64_t now_ms, int64_t *retry_s);
enum gx_status pr_rate_take_n(struct pr_rate *r, int64_t key_id,
                              int64_t now_ms, int64_t n, int64_t *retry_s);
/* Gives back a take (made at taken_ms) that was not used (refused by
 * another check). */
void pr_rate_untake(struct pr_rate *r, int64_t key_id, int64_t taken_ms);
void pr_rate_untake_n(struct pr_rate *r, int64_t key_id, int64_t taken_ms,
                      int64_t n);
/* A request that took `reserved` at taken_ms used `actual`: the rest goes
 * back (same window only), an overrun is charged now. */
void pr_rate_settle(struct pr_rate *r, int64_t key_id, int64_t taken_ms,
                    int64_t reserved, int64_t actual, int64_t now_ms);
enum gx_status pr_rate_sync(struct pr_rate *r, int64_t now_ms, char *err,
                            size_t errlen);

/* ---- usage queries --------------------------------------------------
 *
 * Run on their own read-only connection: call them from a thread that may
 * block (never an event loop).  Totals (requests, errors, tokens, cost)
 * are exact for any range.  Whole hours inside [since, until) are read
 * from the usage_hourly rollup (whole days from usage_daily), the partial
 * hours at the edges from raw rows, plus the few recent raw rows the
 * writer has not rolled up yet (id > the rollup watermark), so a month
 * over 10M rows costs a scan of the rollup.  p50/p95 are
 * estimated from a fixed latency histogram (buckets 0-50-100-200-300-500-
 * 750-1000-1500-2000-3000-5000-7500-10000-15000-20000-30000-60000 ms,
 * linear inside a bucket): approximate, to within the bucket holding the
 * percentile.  Set raw_only to ignore the rollup (for tests/benchmarks).
 */
enum pr_group {
    PR_GROUP_NONE = 0,
    PR_GROUP_MODEL,
    PR_GROUP_PROVIDER,
    PR_GROUP_ROUTE,
    PR_GROUP_KEY,
    PR_GROUP_DAY,  /* UTC, group text "YYYY-MM-DD" */
    PR_GROUP_HOUR, /* UTC, group text "YYYY-MM-DDTHH:00Z" */
    PR_GROUP_API   /* the inbound API: chat, messages, responses, ...
                      (the rollup cells do not carry it: raw rows only,
                      exact, a scan of the range's rows) */
};

/* "none"|""|"model"|"provider"|"route"|"key"|"day"|"hour"|"api" -> *out;
 * GX_EINVAL otherwise. */
enum gx_status pr_group_parse(const char *s, enum pr_group *out);
const char *pr_group_name(enum pr_group g);

#define PR_KEY_ALL INT64_MIN /* key_filter: every key */

struct pr_usage_query {
    int64_t since_ms;   /* inclusive */
    int64_t until_ms;   /* exclusive */
    enum pr_group group_by;
    int64_t key_filter; /* PR_KEY_ALL, a key id, or -1 = anonymous rows */
    int raw_only;       /* 1: skip the rollup */
};

struct pr_usage_group {
    char group[64]; /* model/provider/route name ("" if none), key id as
                       decimal ("" = anonymous), day or hour, "" for none */
    int64_t requests;
    int64_t errors; /* status not 2xx */
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens;
    int64_t cache_write_tokens; /* of prompt_tokens */
    int64_t reasoning_tokens;   /* of completion_tokens */
    int64_t cost_pusd;
    char cost_usd[32]; /* exact decimal of cost_pusd */
    int64_t unpriced;  /* requests recorded unpriced (their cost is not
                          in cost_pusd: it is unknown) */
    int64_t p50_ms;    /* approximate; -1 when no requests */
    int64_t p95_ms;
};

struct pr_usage_result {
    size_t n;
    struct pr_usage_group *rows; /* sorted by group text */
};

/* Runs q against the database at path (a file, or pr_ledger_path()).
 * On success *out is owned by the caller (pr_usage_result_free). */
enum gx_status pr_usage_query(const char *path,
                              const struct pr_usage_query *q,
                              struct pr_usage_result **out, char *err,
                              size_t errlen);
void pr_usage_result_free(struct pr_usage_result *r);

/* Appends {"data":[{"group","requests","errors","prompt_tokens",
 * "completion_tokens","cached_tokens","cache_write_tokens",
 * "reasoning_tokens","cost_usd","cost_pusd","unpriced",
 * "p50_ms","p95_ms"}...]} (cost_usd is the exact decimal as a JSON number; p50/p95
 * null when no requests): the body of GET /v1/usage. */
enum gx_status pr_usage_result_json(const struct pr_usage_result *r,
                                    struct gx_buf *out);

/* ---- what would this have cost elsewhere ---------------------------
 *
 * The period's actual token counts (the sum over a result's groups:
 * prompt, cached, cache writes, completion, reasoning) re-priced at other
 * models' rates, exactly (pr_cost_tokens, integer pUSD: cache writes at
 * each model's cache-write price), next to the actual cost.
 */
struct pr_whatif_model {
    const char *name;   /* "gpt-4.1" or "model@provider" (borrowed) */
    const char *source; /* "config" | "built-in" (borrowed) */
    struct pr_rates rates;
};
struct pr_whatif_row {
    const struct pr_whatif_model *m;
    int ok;           /* 0: the cost overflowed int64 pUSD */
    int64_t cost_pusd;
    int64_t delta_pusd; /* cost - actual */
};
/* The period's totals of r into *t (cached clamped to prompt, cache_write
 * to prompt - cached, reasoning to completion), *actual_pusd (GX_ETOOBIG on overflow) and
 * *requests. */
enum gx_status pr_usage_totals(const struct pr_usage_result *r,
                               struct pr_tokens *t, int64_t *actual_pusd,
                               int64_t *requests);
/* Re-prices r's totals at each of m[0..n) into rows[0..n), sorted by
 * cost ascending (overflows last, ties by name).  GX_ETOOBIG when the
 * actual total overflows. */
enum gx_status pr_whatif_price(const struct pr_usage_result *r,
                               const struct pr_whatif_model *m, size_t n,
                               struct pr_whatif_row *rows);
/* The built-in table as what-if models (source "built-in"): fills up to
 * max entries of out, returns how many there are. */
size_t pr_whatif_builtin(struct pr_whatif_model *out, size_t max);
/* pr_usage_result_json plus, when m is not NULL, a "what_if" member:
 * {"requests","prompt_tokens","cached_tokens","cache_write_tokens",
 * "completion_tokens","reasoning_tokens","actual_cost_usd",
 * "actual_cost_pusd","models":[{"model","source","input_per_mtok",
 * "cached_input_per_mtok","cache_write_per_mtok","output_per_mtok","cost_usd","cost_pusd","delta_usd","delta_pusd"}]}
 * with models sorted by cost (an overflowed cost is null). */
enum gx_status pr_usage_result_json_whatif(const struct pr_usage_result *r,
                                           const struct pr_whatif_model *m,
                                           size_t n, struct gx_buf *out);
/* `llmux usage` with extra what-if models (the config's priced targets;
 * may be NULL): --what-if re-prices at them and the built-in table. */
int pr_cli_usage_ex(int argc, char **argv, const struct pr_whatif_model *m,
                    size_t n);

/* Parses a --since/--until value: "24h", "7d", "30m", "90s" (relative to
 * now_ms, in the past), an integer of epoch ms, or ISO 8601 UTC
 * ("2026-11-29", "2026-11-29T15:00", "2026-11-29T15:00:00Z"). */
enum gx_status pr_time_parse(const char *s, int64_t now_ms, int64_t *out_ms);

/* `llmux usage [--since 24h|7d|ISO] [--until ...] [--group-by G]
 * [--format table|json|csv] [--key ID] [--db FILE]`; argv[0] = "usage".
 * Prints to stdout; returns the exit code (0 ok, 1 bad input or database
 * error, 2 usage error). */
int pr_cli_usage(int argc, char **argv);

#endif
