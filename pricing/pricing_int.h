/*
 * pricing_int.h: shared inside pricing/ only (ledger.c, query.c, cli.c).
 * Never include from another folder.
 */
#ifndef LLMUX_PRICING_INT_H
#define LLMUX_PRICING_INT_H

#include <sqlite3.h>
#include <stdint.h>

#include "../common/common.h"
#include "pricing.h"

/* Latency histogram of the rollup table: bucket i counts latencies
 * < pr_lat_bounds[i] (and >= the previous bound); the last bucket is
 * open-ended.  Fixed forever for schema version 1: changing it needs a
 * migration that rebuilds usage_hourly. */
#define PR_LAT_NBUCKETS 18
extern const int64_t pr_lat_bounds[PR_LAT_NBUCKETS - 1];

/* Bucket index of a latency in ms. */
int pr_lat_bucket(int64_t latency_ms);

/* Approximate q-quantile (0..1) of a histogram: linear inside the bucket
 * that holds the rank.  -1 when n is 0. */
int64_t pr_lat_quantile(const int64_t *hist, double q);

/* Appends ", SUM(latency_ms < 50) AS h0, ..., SUM(latency_ms >= 60000)
 * AS h17": the histogram of raw usage rows, same buckets as the rollup. */
enum gx_status pr_sql_hist_sums(struct gx_buf *b);

/* A row counts as an error unless its status is 2xx. */
#define PR_IS_ERROR_SQL "(status < 200 OR status >= 300)"

/* Opens path (":memory:" or a file or a file: URI) with the pragmas every
 * connection needs (busy timeout).  readonly: SQLITE_OPEN_READONLY. */
int pr_db_open(const char *path, int readonly, sqlite3 **out, char *err,
               size_t errlen);

/* ---- storage backends: one table of functions each ------------------
 * `be` is the backend's own ledger handle.  The key and query functions
 * take the database name and connect for the call. */
struct pr_store_ops {
    const char *name; /* "sqlite", "postgres" */
    enum gx_status (*ledger_open)(const char *database,
                                  const struct pr_ledger_opts *opts,
                                  void **be, char *err, size_t errlen);
    void (*ledger_close)(void *be);
    enum gx_status (*ledger_submit)(void *be, const struct pr_usage_row *row,
                                    pr_commit_cb cb, void *ud);
    void (*ledger_flush)(void *be);
    void (*ledger_stats)(void *be, struct pr_ledger_stats *out);
    const char *(*ledger_path)(void *be);
    int (*ledger_available)(void *be); /* NULL = always */
    void (*ledger_attach_budget)(void *be, struct pr_budget *b); /* NULL ok */
    void (*ledger_prewake)(void *be);                            /* NULL ok */
    enum gx_status (*key_create)(const char *database, const struct pr_key *k,
                                 int64_t *id_out, char *err, size_t errlen);
    enum gx_status (*key_revoke)(const char *database, int64_t id,
                                 int64_t now_ms, char *err, size_t errlen);
    enum gx_status (*key_list)(const char *database, pr_key_cb cb, void *ud,
                               char *err, size_t errlen);
    enum gx_status (*usage_query)(const char *database,
                                  const struct pr_usage_query *q,
                                  struct pr_usage_result **out, char *err,
                                  size_t errlen);
};

extern const struct pr_store_ops pr_store_sqlite;
extern const struct pr_store_ops pr_store_pg;

/* SQLite backend pieces in keys.c / query.c. */
enum gx_status pr_sq_key_create(const char *database, const struct pr_key *k,
                                int64_t *id_out, char *err, size_t errlen);
enum gx_status pr_sq_key_revoke(const char *database, int64_t id,
                                int64_t now_ms, char *err, size_t errlen);
enum gx_status pr_sq_key_list(const char *database, pr_key_cb cb, void *ud,
                              char *err, size_t errlen);
enum gx_status pr_sq_usage_query(const char *database,
                                 const struct pr_usage_query *q,
                                 struct pr_usage_result **out, char *err,
                                 size_t errlen);

/* Budget leases (budget.c <-> pg.c): one per leased key per sync. */
struct pr_lease_item {
    int64_t key_id;
    int64_t want;      /* in: lease this much more (0: none) */
    int64_t give_back; /* in: return this much of the lease */
    int64_t granted;   /* out: added to the lease */
    int done;          /* out: the key's transaction committed */
    int lost;          /* out: our lease row was gone (reclaimed) */
    int64_t limit;     /* in (rate leases): the key's per-window limit */
};
/* Makes room for item n in *it (capacity *cap, doubling); 0 on ENOMEM. */
int pr_lease_items_room(struct pr_lease_item **it, size_t n, size_t *cap);
/* One transaction per key: renew this instance's lease row, return
 * give_back, lease up to want atomically; and reclaim the leases of
 * instances silent for PR_LEASE_STALE_MS.  Blocks (aux thread). */
#define PR_LEASE_STALE_MS 15000
enum gx_status pr_pg_lease_sync(const char *database, const char *instance,
                                struct pr_lease_item *it, size_t n,
                                char *err, size_t errlen);

/* Rate leases for window_ms (rate.c <-> pg.c): per item, take up to want
 * of the window's remaining count, or give give_back back. */
enum gx_status pr_pg_rate_sync(const char *database, int64_t window_ms,
                               struct pr_lease_item *it, size_t n,
                               char *err, size_t errlen);

/* Shared by both backends' keys code: 64 lowercase hex digits <-> 32
 * bytes (hex_to_digest: -1 unless exactly 64 hex digits). */
void pr_digest_hex(const unsigned char d[32], char hex[65]);
int pr_hex_digest(const char *hex, unsigned char out[32]);

/* Rollup cells (ledger.c), shared with the PostgreSQL writer.  A table
 * of (dim, granularity, key, hour or day, value) -> sums. */
struct pr_cell {
    char *value; /* owned copy; NULL = free slot */
    int dim;
    int gran;             /* 0: hourly cell, 1: daily cell */
    int64_t key_id, t_ms; /* t_ms: start of the hour or of the day */
    uint64_t hash;
    int64_t requests, errors, prompt, completion, cached, cost, lat_sum;
    int64_t hist[PR_LAT_NBUCKETS];
    int64_t unpriced; /* rows recorded unpriced (schema version 4) */
    int64_t cache_write, reasoning; /* token sums (schema version 5) */
};
struct pr_cells {
    struct pr_cell *a;
    size_t cap, n; /* cap: power of two */
};
extern const char *const pr_dim_names[4];

/* Schema version 5 on both backends: sets the cache-write and reasoning
 * sums of every rollup cell of table tab (time column tcol, cells span ms
 * long) from the raw rows matching extra (SQL appended to the WHERE), the
 * same cells pr_cells_add_row fills.  Portable SQL (SQLite 3.33+ UPDATE
 * FROM); idempotent (it sets, never adds). */
#define PR_V5_BACKFILL_SQL(tab, tcol, span, extra)                          \
    "UPDATE " tab " AS c SET cache_write_tokens = s.cw,"                   \
    " reasoning_tokens = s.rs FROM (SELECT CASE dd.d WHEN 0 THEN 'none'"   \
    " WHEN 1 THEN 'model' WHEN 2 THEN 'provider' ELSE 'route' END AS dim," \
    " CASE WHEN kk.k = 1 THEN -2 WHEN u.key_id >= 0 THEN u.key_id"         \
    " ELSE -1 END AS key_id,"                                               \
    " u.ts_ms - (((u.ts_ms % " span ") + " span ") % " span ") AS t,"      \
    " CASE dd.d WHEN 0 THEN '' WHEN 1 THEN COALESCE(u.model, '')"          \
    " WHEN 2 THEN COALESCE(u.provider, '') ELSE COALESCE(u.route, '')"     \
    " END AS value, SUM(u.cache_write_tokens) AS cw,"                      \
    " SUM(u.reasoning_tokens) AS rs FROM usage AS u,"                      \
    " (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2"                \
    " UNION ALL SELECT 3) AS dd, (SELECT 0 AS k UNION ALL SELECT 1) AS kk" \
    " WHERE (u.cache_write_tokens <> 0 OR u.reasoning_tokens <> 0)" extra  \
    " GROUP BY 1, 2, 3, 4) AS s WHERE c.dim = s.dim AND"                   \
    " c.key_id = s.key_id AND c." tcol " = s.t AND c.value = s.value;"

/* A queued ledger row (both writers): one allocation holding the row
 * and copies of its strings; free() it. */
struct pr_qrow {
    struct pr_qrow *next;
    struct pr_usage_row row; /* strings point into the same allocation */
    pr_commit_cb cb;
    void *ud;
};
struct pr_qrow *pr_qrow_new(const struct pr_usage_row *r, pr_commit_cb cb,
                            void *ud);
/* Adds row r's 16 cells; 0 on allocation failure. */
int pr_cells_add_row(struct pr_cells *c, const struct pr_usage_row *r);
void pr_cells_reset(struct pr_cells *c);

/* The usage query's SQL (query.c), in SQLite's dialect or, with pg, in
 * PostgreSQL's with the parameters written as literals; *nparams_out
 * the values to bind for SQLite (?1..?7). */
struct pr_usage_plan {
    int64_t p[8]; /* ?1 since, ?2 until, ?3 h0, ?4 h1, ?5 key, ?6 d0, ?7 d1 */
    int levels;
    int have_cw; /* 1 (the default): the rollup cells have the cache-write
                    and reasoning sums (version 5) */
    int have_unpriced; /* 1 (the default): the ledger has the unpriced
                          columns (version 4); 0 reads them as 0 */
};
void pr_usage_plan_make(const struct pr_usage_query *q,
                        struct pr_usage_plan *pl);
/* 1 if group g's value is text (model, provider, route, api), 0 if an
 * integer (key, day, hour). */
int pr_group_is_text(enum pr_group g);
enum gx_status pr_usage_sql(const struct pr_usage_query *q,
                            const struct pr_usage_plan *pl, int watermark,
                            int pg, struct gx_buf *b);
/* Fills one result group from the query's columns: group value as text
 * (model/provider/route) or integer (key, day, hour), then n, errors,
 * prompt, completion, cached, cost, the 18 histogram buckets and the
 * unpriced count: v[0..5] the six sums, v[6] unpriced. */
void pr_usage_group_fill(struct pr_usage_group *g, enum pr_group by,
                         const char *gtext, int64_t gint,
                         const int64_t v[9], const int64_t *hist);
/* Appends s as a JSON string (quoted, escaped). */
enum gx_status pr_json_str(struct gx_buf *b, const char *s);
/* Appends ,"what_if":{...} (whatif.c; see pr_usage_result_json_whatif). */
enum gx_status pr_whatif_json(const struct pr_usage_result *r,
                              const struct pr_whatif_model *m, size_t n,
                              struct gx_buf *out);
/* Appends a group to r (growing it); GX_ENOMEM. */
enum gx_status pr_usage_result_add(struct pr_usage_result *r, size_t *cap,
                                   struct pr_usage_group **g);
/* The single zero row of an empty group-none result. */
enum gx_status pr_usage_result_finish(struct pr_usage_result *r,
                                      enum pr_group by);

#endif
