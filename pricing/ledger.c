/*
 * ledger.c: the SQLite usage ledger.  One writer thread owns the only
 * write connection; every other thread hands it rows through a bounded
 * queue (pr_ledger_submit), and the writer commits everything queued at
 * each wake-up in ONE transaction (group commit), then calls each row's
 * callback.  The cost of a commit is shared by every row that arrived
 * while the previous one was being written, so throughput grows with load.
 *
 * Schema (user_version 5; DESIGN.md section 7 names are the contract):
 *
 *   usage         one row per request that reached routing
 *     id INTEGER PRIMARY KEY, ts_ms, request_id, key_id (NULL = anonymous),
 *     route, provider, model, status, attempts, stream, prompt_tokens,
 *     completion_tokens, cached_tokens, cost_pusd, latency_ms,
 *     ttft_ms (NULL = unknown), usage_source, error,
 *     (version 4) api ('chat' | 'messages' | 'responses' | 'embeddings' |
 *     'completions'), cache_write_tokens (of prompt_tokens),
 *     reasoning_tokens (of completion_tokens), unpriced (1: the model had
 *     no price at all; cost_pusd is then 0 for want of a price, never a
 *     claim that it was free).  A flag rather than cost_pusd NULL: the
 *     column is NOT NULL since version 1 and SQLite can only drop that by
 *     copying the whole table; every SUM stays an exact integer too.
 *     indexes: (ts_ms), (key_id, ts_ms)
 *   keys          id, name, hash, created_ms, expires_ms, revoked_ms,
 *                 budget_pusd, spent_pusd, rpm, tpm, models
 *                 (rows are created by the keys code; the writer adds each
 *                 committed row's cost to keys.spent_pusd)
 *   usage_hourly  rollup maintained by the writer (see deferred rollups),
 *     one cell per (dim, key_id, hour_ms, value):
 *       dim    'none' | 'model' | 'provider' | 'route' (what value is)
 *       key_id the key, -1 anonymous, -2 = all keys together
 *       value  the model/provider/route name ('' when the row had none;
 *              always '' for dim 'none')
 *     with requests, errors, prompt_tokens, completion_tokens,
 *     cached_tokens, cost_pusd, latency_sum_ms and the latency histogram
 *     h0..h17 (bounds in pr_lat_bounds).  Each row lands in 8 cells (4 dims
 *     x {its key, all keys}).  Why not one cell per (hour, model, provider,
 *     route, key)?  Queries group by one dimension at a time, optionally for
 *     one key; the cross product would make a month's query scan up to
 *     hours x models x routes x keys cells (400k at 50 keys), while here it
 *     reads one contiguous PK range of hours x values cells (~5k); grouping
 *     by key reads hours x keys.  Measured in tests/tool_ledger_bench.
 *   usage_daily   (version 2) the same cells per UTC day (day_ms), so a
 *     month reads days x values cells, plus hourly cells for the partial
 *     days at the edges.
 *   usage_rollup_state  (version 3) one row: rolled_through_id.  The two
 *     rollup tables hold exactly the usage rows with id <= it.
 *
 * Deferred rollups (version 3): each row lands in 16 cells (hour and day
 * x 4 dims x {its key, all keys}); upserting them in every batch's
 * transaction cost ~230k instructions per lone row, more than the whole
 * request path.  So a batch's transaction holds its rows and the keys'
 * spend only, and commits before the callbacks as before; the rows' cells
 * are summed in memory (pending) and upserted, with the new watermark, in
 * one transaction at most PR_ROLLUP_FLUSH_MS (250 ms) after the oldest
 * pending row committed, or sooner past PR_ROLLUP_MAX_ROWS / _CELLS, on
 * pr_ledger_flush and on close: either riding along with the next batch's
 * transaction or on its own when idle.  Queries add the raw rows with id >
 * watermark (usage_rollup_state and the cells are read in one statement,
 * one snapshot), so they stay exact.  After a kill -9 the pending cells
 * are lost but the rows are not: open rolls up the rows past the
 * watermark (a bounded scan: at most one flush interval's rows).  A flush
 * checks that the stored watermark is the one it last wrote and that the
 * rowid range it covers holds exactly its pending rows; otherwise
 * (another process wrote or opened the ledger meanwhile) it rolls up from
 * the raw rows past the watermark instead of its memory.
 *
 * Durability: WAL with synchronous=NORMAL by default.  A commit has been
 * write()n to the WAL file before COMMIT returns, so it is in the kernel's
 * page cache and survives the process being killed (kill -9, crash); only
 * an OS crash or power loss can lose the last transactions, because NORMAL
 * fsyncs at checkpoints only.  That is the promise the gateway makes ("a
 * client that saw a complete response has its row, even if the process is
 * killed right after").  For power-loss durability open with
 * PR_LEDGER_SYNC_FULL (one fsync per group commit, shared by the batch).
 *
 * Queue: bounded (opts.queue_max, default 65536 rows); when full, submit
 * fails with GX_EAGAIN instead of blocking an event loop.  The gateway
 * then answers 503 rather than serve a response it cannot log.
 */
#include "pricing.h"
#include "pricing_int.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Deferred rollups: pending cells are upserted at the latest this long
 * after their oldest row committed (opts.rollup_flush_ms), or sooner when
 * they hold this many rows or cells. */
#define PR_ROLLUP_FLUSH_MS 250
#define PR_ROLLUP_MAX_ROWS 20000
#define PR_ROLLUP_MAX_CELLS 16384

/* pr_ledger_prewake: how long a woken writer waits for the announced row
 * before it sleeps again.  tool_handoff measures a sleeping thread's
 * wake-up at 5-11 us p50 on an idle 2-core VM; under load the scheduler's
 * delay is the larger part, and the hint is given when an upstream
 * answer's head arrives, tens of microseconds of the worker's work
 * before the row: the bound covers that with room, and at ~1000 req/s
 * costs at most a fifth of a core (yielding, so a runnable thread on the
 * writer's CPU goes first). */
#define PR_PREWAKE_SPIN_US 200
/* ... and only when the writer has been idle this long since its last
 * commit: under a load that keeps it committing back to back, its
 * wake-up latency is what gathers the next batch (fewer, larger
 * commits: less CPU on a machine the benchmark shares), and a hint
 * would only make the batches smaller. */
#define PR_PREWAKE_IDLE_US 500

/* The WAL is checkpointed (PASSIVE, on the checkpointer's connection)
 * once a commit leaves it this many bytes long: SQLite's own
 * wal_autocheckpoint default (1000 pages of 4 KiB), moved off the commit
 * path, kept in bytes whatever the file's page size. */
#define PR_WAL_CHECKPOINT_BYTES (1000 * 4096)

/* Page size of a ledger file this writer creates (an existing file keeps
 * its own: SQLite fixes it when the first table is written).  A lone
 * row's commit writes one WAL frame per b-tree it touches (the row, its
 * two indexes, the key's spend: 3-4 pages), and SQLite checksums and
 * writes every byte of each: with 4 KiB pages that was 19k of the
 * writer's ~50k instructions a row (callgrind, tool_ledger_bench --lone).
 * 1 KiB pages: ~39k a row, lone-row commit p50 ~60 -> ~48 us.  The cost
 * is on the usage queries that read many cells: over 1M rows grouping by
 * key took 24 ms best of three runs vs 9.7 ms with 4 KiB pages (the other
 * groupings the same within noise; a 2% larger file); a request's commit
 * runs far more often than a dashboard's query. */
#define PR_LEDGER_PAGE_SIZE 1024

/* ---------------------------------------------------------------------
 * Histogram helpers (shared with query.c)
 */
const int64_t pr_lat_bounds[PR_LAT_NBUCKETS - 1] = {
    50,   100,  200,  300,   500,   750,   1000,  1500, 2000,
    3000, 5000, 7500, 10000, 15000, 20000, 30000, 60000};

int
pr_lat_bucket(int64_t latency_ms)
{
    int i = 0;
    while (i < PR_LAT_NBUCKETS - 1 && latency_ms >= pr_lat_bounds[i])
        i++;
    return i;
}

int64_t
pr_lat_quantile(const int64_t *hist, double q)
{
    int64_t n = 0;
    for (int i = 0; i < PR_LAT_NBUCKETS; i++)
        n += hist[i];
    if (n <= 0)
        return -1;
    /* rank in 1..n */
    double rank = q * (double)n;
    if (rank < 1)
        rank = 1;
    int64_t cum = 0;
    for (int i = 0; i < PR_LAT_NBUCKETS; i++) {
        if (hist[i] == 0)
            continue;
        if ((double)(cum + hist[i]) >= rank) {
            int64_t lo = i == 0 ? 0 : pr_lat_bounds[i - 1];
            if (i == PR_LAT_NBUCKETS - 1)
                return lo; /* open-ended: report the lower bound */
            int64_t hi = pr_lat_bounds[i];
            double frac = (rank - (double)cum) / (double)hist[i];
            return lo + (int64_t)((double)(hi - lo) * frac + 0.5);
        }
        cum += hist[i];
    }
    return pr_lat_bounds[PR_LAT_NBUCKETS - 2];
}

enum gx_status
pr_sql_hist_sums(struct gx_buf *b)
{
    enum gx_status st = GX_OK;
    for (int i = 0; st == GX_OK && i < PR_LAT_NBUCKETS; i++) {
        if (i == 0)
            st = gx_buf_printf(b, ", SUM(latency_ms < %lld) AS h0",
                               (long long)pr_lat_bounds[0]);
        else if (i == PR_LAT_NBUCKETS - 1)
            st = gx_buf_printf(b, ", SUM(latency_ms >= %lld) AS h%d",
                               (long long)pr_lat_bounds[i - 1], i);
        else
            st = gx_buf_printf(
                b, ", SUM(latency_ms >= %lld AND latency_ms < %lld) AS h%d",
                (long long)pr_lat_bounds[i - 1], (long long)pr_lat_bounds[i],
                i);
    }
    return st;
}

int
pr_db_open(const char *path, int readonly, sqlite3 **out, char *err,
           size_t errlen)
{
    sqlite3 *db = NULL;
    int flags = SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX |
                (readonly ? SQLITE_OPEN_READONLY
                          : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    int rc = sqlite3_open_v2(path, &db, flags, NULL);
    if (rc != SQLITE_OK) {
        gx_errf(err, errlen, "cannot open %s: %s", path,
                db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return rc;
    }
    sqlite3_busy_timeout(db, 5000);
    *out = db;
    return SQLITE_OK;
}

/* ---------------------------------------------------------------------
 * Migrations: migrations[i] takes the schema from version i to i+1.  Add
 * version 2 by appending a string; never edit a released one.
 */
static const char *const migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE usage ("
    " id INTEGER PRIMARY KEY,"
    " ts_ms INTEGER NOT NULL,"
    " request_id TEXT,"
    " key_id INTEGER,"
    " route TEXT,"
    " provider TEXT,"
    " model TEXT,"
    " status INTEGER NOT NULL,"
    " attempts INTEGER NOT NULL DEFAULT 1,"
    " stream INTEGER NOT NULL DEFAULT 0,"
    " prompt_tokens INTEGER NOT NULL DEFAULT 0,"
    " completion_tokens INTEGER NOT NULL DEFAULT 0,"
    " cached_tokens INTEGER NOT NULL DEFAULT 0,"
    " cost_pusd INTEGER NOT NULL DEFAULT 0,"
    " latency_ms INTEGER NOT NULL DEFAULT 0,"
    " ttft_ms INTEGER,"
    " usage_source TEXT NOT NULL DEFAULT 'upstream',"
    " error TEXT);"
    "CREATE INDEX usage_ts ON usage(ts_ms);"
    "CREATE INDEX usage_key_ts ON usage(key_id, ts_ms);"
    "CREATE TABLE IF NOT EXISTS keys ("
    " id INTEGER PRIMARY KEY,"
    " name TEXT NOT NULL,"
    " hash TEXT NOT NULL UNIQUE,"
    " created_ms INTEGER NOT NULL,"
    " expires_ms INTEGER,"
    " revoked_ms INTEGER,"
    " budget_pusd INTEGER,"
    " spent_pusd INTEGER NOT NULL DEFAULT 0,"
    " rpm INTEGER,"
    " tpm INTEGER,"
    " models TEXT);"
    "CREATE TABLE usage_hourly ("
    " dim TEXT NOT NULL,"
    " key_id INTEGER NOT NULL,"
    " hour_ms INTEGER NOT NULL,"
    " value TEXT NOT NULL,"
    " requests INTEGER NOT NULL DEFAULT 0,"
    " errors INTEGER NOT NULL DEFAULT 0,"
    " prompt_tokens INTEGER NOT NULL DEFAULT 0,"
    " completion_tokens INTEGER NOT NULL DEFAULT 0,"
    " cached_tokens INTEGER NOT NULL DEFAULT 0,"
    " cost_pusd INTEGER NOT NULL DEFAULT 0,"
    " latency_sum_ms INTEGER NOT NULL DEFAULT 0,"
    " h0 INTEGER NOT NULL DEFAULT 0, h1 INTEGER NOT NULL DEFAULT 0,"
    " h2 INTEGER NOT NULL DEFAULT 0, h3 INTEGER NOT NULL DEFAULT 0,"
    " h4 INTEGER NOT NULL DEFAULT 0, h5 INTEGER NOT NULL DEFAULT 0,"
    " h6 INTEGER NOT NULL DEFAULT 0, h7 INTEGER NOT NULL DEFAULT 0,"
    " h8 INTEGER NOT NULL DEFAULT 0, h9 INTEGER NOT NULL DEFAULT 0,"
    " h10 INTEGER NOT NULL DEFAULT 0, h11 INTEGER NOT NULL DEFAULT 0,"
    " h12 INTEGER NOT NULL DEFAULT 0, h13 INTEGER NOT NULL DEFAULT 0,"
    " h14 INTEGER NOT NULL DEFAULT 0, h15 INTEGER NOT NULL DEFAULT 0,"
    " h16 INTEGER NOT NULL DEFAULT 0, h17 INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (dim, key_id, hour_ms, value)"
    ") WITHOUT ROWID;",
    /* 1 -> 2: daily cells, so month-long queries grouped by key read
     * days x keys cells instead of hours x keys; filled from the hourly
     * cells, which sum to the same totals exactly. */
    "CREATE TABLE usage_daily ("
    " dim TEXT NOT NULL,"
    " key_id INTEGER NOT NULL,"
    " day_ms INTEGER NOT NULL,"
    " value TEXT NOT NULL,"
    " requests INTEGER NOT NULL DEFAULT 0,"
    " errors INTEGER NOT NULL DEFAULT 0,"
    " prompt_tokens INTEGER NOT NULL DEFAULT 0,"
    " completion_tokens INTEGER NOT NULL DEFAULT 0,"
    " cached_tokens INTEGER NOT NULL DEFAULT 0,"
    " cost_pusd INTEGER NOT NULL DEFAULT 0,"
    " latency_sum_ms INTEGER NOT NULL DEFAULT 0,"
    " h0 INTEGER NOT NULL DEFAULT 0, h1 INTEGER NOT NULL DEFAULT 0,"
    " h2 INTEGER NOT NULL DEFAULT 0, h3 INTEGER NOT NULL DEFAULT 0,"
    " h4 INTEGER NOT NULL DEFAULT 0, h5 INTEGER NOT NULL DEFAULT 0,"
    " h6 INTEGER NOT NULL DEFAULT 0, h7 INTEGER NOT NULL DEFAULT 0,"
    " h8 INTEGER NOT NULL DEFAULT 0, h9 INTEGER NOT NULL DEFAULT 0,"
    " h10 INTEGER NOT NULL DEFAULT 0, h11 INTEGER NOT NULL DEFAULT 0,"
    " h12 INTEGER NOT NULL DEFAULT 0, h13 INTEGER NOT NULL DEFAULT 0,"
    " h14 INTEGER NOT NULL DEFAULT 0, h15 INTEGER NOT NULL DEFAULT 0,"
    " h16 INTEGER NOT NULL DEFAULT 0, h17 INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (dim, key_id, day_ms, value)"
    ") WITHOUT ROWID;"
    "INSERT INTO usage_daily SELECT dim, key_id,"
    " hour_ms - ((hour_ms % 86400000) + 86400000) % 86400000, value,"
    " SUM(requests), SUM(errors), SUM(prompt_tokens),"
    " SUM(completion_tokens), SUM(cached_tokens), SUM(cost_pusd),"
    " SUM(latency_sum_ms), SUM(h0), SUM(h1), SUM(h2), SUM(h3), SUM(h4),"
    " SUM(h5), SUM(h6), SUM(h7), SUM(h8), SUM(h9), SUM(h10), SUM(h11),"
    " SUM(h12), SUM(h13), SUM(h14), SUM(h15), SUM(h16), SUM(h17)"
    " FROM usage_hourly GROUP BY 1, 2, 3, 4;",
    /* 2 -> 3: deferred rollups.  The writer keeps the cells of recent
     * batches in memory and upserts them every PR_ROLLUP_FLUSH_MS; the
     * rollup tables include exactly the usage rows with id <=
     * rolled_through_id.  Version 2 wrote them with every row, so all
     * rows are in.  IF NOT EXISTS / OR REPLACE: a database whose version
     * was lowered by hand still upgrades. */
    "CREATE TABLE IF NOT EXISTS usage_rollup_state ("
    " id INTEGER PRIMARY KEY CHECK (id = 1),"
    " rolled_through_id INTEGER NOT NULL);"
    "INSERT OR REPLACE INTO usage_rollup_state VALUES"
    " (1, COALESCE((SELECT MAX(id) FROM usage), 0));",
    /* 3 -> 4: which inbound API, the cache-write and reasoning token
     * classes pricing already bills, and unpriced rows (a flag, counted in
     * the rollup cells too, so `llmux usage` shows them exactly).  Old
     * rows were all chat; their unpriced flag is unknown and stays 0.
     * ADD COLUMN with a constant default rewrites nothing. */
    "ALTER TABLE usage ADD COLUMN api TEXT NOT NULL DEFAULT 'chat';"
    "ALTER TABLE usage ADD COLUMN cache_write_tokens INTEGER NOT NULL"
    " DEFAULT 0;"
    "ALTER TABLE usage ADD COLUMN reasoning_tokens INTEGER NOT NULL"
    " DEFAULT 0;"
    "ALTER TABLE usage ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE usage_hourly ADD COLUMN unpriced INTEGER NOT NULL"
    " DEFAULT 0;"
    "ALTER TABLE usage_daily ADD COLUMN unpriced INTEGER NOT NULL"
    " DEFAULT 0;",
    /* 4 -> 5: the cache-write and reasoning sums in the rollup cells, so
     * what-if re-prices cache writes exactly.  Backfilled from the raw rows
     * the cells already hold (id <= the watermark; later rows are rolled
     * up by the writer with the new sums); only rows with either class
     * non-zero touch a cell. */
    "ALTER TABLE usage_hourly ADD COLUMN cache_write_tokens INTEGER NOT NULL"
    " DEFAULT 0;"
    "ALTER TABLE usage_hourly ADD COLUMN reasoning_tokens INTEGER NOT NULL"
    " DEFAULT 0;"
    "ALTER TABLE usage_daily ADD COLUMN cache_write_tokens INTEGER NOT NULL"
    " DEFAULT 0;"
    "ALTER TABLE usage_daily ADD COLUMN reasoning_tokens INTEGER NOT NULL"
    " DEFAULT 0;"
    PR_V5_BACKFILL_SQL("usage_hourly", "hour_ms", "3600000",
                       " AND u.id <= (SELECT rolled_through_id FROM"
                       " usage_rollup_state WHERE id = 1)")
    PR_V5_BACKFILL_SQL("usage_daily", "day_ms", "86400000",
                       " AND u.id <= (SELECT rolled_through_id FROM"
                       " usage_rollup_state WHERE id = 1)"),
};
#define N_MIGRATIONS ((int)(sizeof(migrations) / sizeof(migrations[0])))
_Static_assert(PR_LAT_NBUCKETS == 18, "usage_hourly has h0..h17");

int
pr_ledger_schema_version(void)
{
    return N_MIGRATIONS;
}

static int
exec_sql(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        gx_errf(err, errlen, "%s", msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
    }
    return rc;
}

static int
get_user_version(sqlite3 *db, int *v)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        *v = sqlite3_column_int(st, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/* Runs the missing migrations, each in its own transaction together with
 * its user_version bump, so a crash mid-way leaves a consistent version.
 * BEGIN IMMEDIATE takes the write lock first: two processes opening the
 * same new file migrate once. */
static enum gx_status
migrate(sqlite3 *db, int *applied, char *err, size_t errlen)
{
    *applied = 0;
    for (;;) {
        if (exec_sql(db, "BEGIN IMMEDIATE", err, errlen) != SQLITE_OK)
            return GX_EIO;
        int v = 0;
        if (get_user_version(db, &v) != SQLITE_OK) {
            gx_errf(err, errlen, "user_version: %s", sqlite3_errmsg(db));
            goto fail;
        }
        if (v > N_MIGRATIONS) {
            gx_errf(err, errlen,
                    "database schema version %d is newer than this "
                    "llmux (%d)",
                    v, N_MIGRATIONS);
            exec_sql(db, "ROLLBACK", NULL, 0);
            return GX_EINVAL;
        }
        if (v == N_MIGRATIONS)
            return exec_sql(db, "COMMIT", err, errlen) == SQLITE_OK ? GX_OK
                                                                    : GX_EIO;
        char bump[64];
        snprintf(bump, sizeof(bump), "PRAGMA user_version = %d", v + 1);
        if (exec_sql(db, migrations[v], err, errlen) != SQLITE_OK ||
            exec_sql(db, bump, err, errlen) != SQLITE_OK ||
            exec_sql(db, "COMMIT", err, errlen) != SQLITE_OK)
            goto fail;
        (*applied)++;
    }
fail:
    exec_sql(db, "ROLLBACK", NULL, 0);
    return GX_EIO;
}

/* ---------------------------------------------------------------------
 * Rollup cells of one batch, summed in C before they are upserted, so a
 * batch of 20,000 rows costs a few hundred upserts rather than 160,000.
 */
/* Runs a write statement and readies it for reuse.  The bindings stay:
 * every caller binds all of a statement's parameters before each step
 * (clearing them cost ~140 instructions a statement, ~4 a row). */
static int
step_reset(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

const char *const pr_dim_names[4] = {"none", "model", "provider",
                                      "route"};

/* A cell's hash: its value string's (str_hash, computed once per row for
 * the 16 cells it lands in) mixed with the rest of the key.  In memory
 * only, never stored. */
static uint64_t
str_hash(const char *v)
{
    uint64_t h = 1469598103934665603ull;
    for (; *v; v++)
        h = (h ^ (unsigned char)*v) * 1099511628211ull;
    return h;
}

static uint64_t
cell_hash(uint64_t sh, int dim, int gran, int64_t key, int64_t t)
{
    uint64_t h = (sh ^ (uint64_t)(dim * 2 + gran)) * 1099511628211ull;
    h = (h ^ (uint64_t)key) * 1099511628211ull;
    h = (h ^ (uint64_t)t) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int
cells_grow(struct pr_cells *c)
{
    size_t ncap = c->cap ? c->cap * 2 : 256;
    struct pr_cell *na = calloc(ncap, sizeof(*na));
    if (!na)
        return 0;
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->a[i].value)
            continue;
        size_t j = c->a[i].hash & (ncap - 1);
        while (na[j].value)
            j = (j + 1) & (ncap - 1);
        na[j] = c->a[i];
    }
    free(c->a);
    c->a = na;
    c->cap = ncap;
    return 1;
}

/* Adds row r to cell (dim, gran, key, t, value); sh = str_hash(value),
 * bucket = pr_lat_bucket(r->latency_ms).  0 on allocation failure. */
static int
cells_add(struct pr_cells *c, int dim, int gran, int64_t key, int64_t t,
          const char *value, uint64_t sh, int bucket,
          const struct pr_usage_row *r)
{
    if ((c->n + 1) * 2 > c->cap && !cells_grow(c))
        return 0;
    uint64_t h = cell_hash(sh, dim, gran, key, t);
    size_t j = h & (c->cap - 1);
    struct pr_cell *x;
    for (;;) {
        x = &c->a[j];
        if (!x->value) {
            x->value = strdup(value);
            if (!x->value)
                return 0;
            x->dim = dim;
            x->gran = gran;
            x->key_id = key;
            x->t_ms = t;
            x->hash = h;
            c->n++;
            break;
        }
        if (x->hash == h && x->dim == dim && x->gran == gran &&
            x->key_id == key && x->t_ms == t && strcmp(x->value, value) == 0)
            break;
        j = (j + 1) & (c->cap - 1);
    }
    x->requests++;
    x->errors += r->status < 200 || r->status >= 300;
    x->prompt += r->prompt_tokens;
    x->completion += r->completion_tokens;
    x->cached += r->cached_tokens;
    x->cost += r->cost_pusd;
    x->unpriced += r->unpriced != 0;
    x->cache_write += r->cache_write_tokens;
    x->reasoning += r->reasoning_tokens;
    x->lat_sum += r->latency_ms;
    x->hist[bucket]++;
    return 1;
}

int
pr_cells_add_row(struct pr_cells *c, const struct pr_usage_row *r)
{
    int64_t hour = r->ts_ms - (((r->ts_ms % 3600000) + 3600000) % 3600000);
    int64_t day = r->ts_ms - (((r->ts_ms % 86400000) + 86400000) % 86400000);
    int64_t key = r->key_id >= 0 ? r->key_id : -1;
    int bucket = pr_lat_bucket(r->latency_ms);
    const char *v[4] = {"", r->model ? r->model : "",
                        r->provider ? r->provider : "",
                        r->route ? r->route : ""};
    for (int d = 0; d < 4; d++) {
        uint64_t sh = str_hash(v[d]);
        if (!cells_add(c, d, 0, key, hour, v[d], sh, bucket, r) ||
            !cells_add(c, d, 0, -2, hour, v[d], sh, bucket, r) ||
            !cells_add(c, d, 1, key, day, v[d], sh, bucket, r) ||
            !cells_add(c, d, 1, -2, day, v[d], sh, bucket, r))
            return 0;
    }
    return 1;
}

void
pr_cells_reset(struct pr_cells *c)
{
    for (size_t i = 0; i < c->cap; i++)
        free(c->a[i].value);
    free(c->a);
    c->a = NULL;
    c->cap = c->n = 0;
}

/* Upserts every cell: hourly ones with st_hour, daily ones with st_day. */
static int
cells_write(sqlite3_stmt *st_hour, sqlite3_stmt *st_day,
            const struct pr_cells *c)
{
    for (size_t i = 0; i < c->cap; i++) {
        const struct pr_cell *x = &c->a[i];
        if (!x->value)
            continue;
        sqlite3_stmt *st = x->gran ? st_day : st_hour;
        sqlite3_bind_text(st, 1, pr_dim_names[x->dim], -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, x->key_id);
        sqlite3_bind_int64(st, 3, x->t_ms);
        sqlite3_bind_text(st, 4, x->value, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, x->requests);
        sqlite3_bind_int64(st, 6, x->errors);
        sqlite3_bind_int64(st, 7, x->prompt);
        sqlite3_bind_int64(st, 8, x->completion);
        sqlite3_bind_int64(st, 9, x->cached);
        sqlite3_bind_int64(st, 10, x->cost);
        sqlite3_bind_int64(st, 11, x->lat_sum);
        for (int b = 0; b < PR_LAT_NBUCKETS; b++)
            sqlite3_bind_int64(st, 12 + b, x->hist[b]);
        sqlite3_bind_int64(st, 12 + PR_LAT_NBUCKETS, x->unpriced);
        sqlite3_bind_int64(st, 13 + PR_LAT_NBUCKETS, x->cache_write);
        sqlite3_bind_int64(st, 14 + PR_LAT_NBUCKETS, x->reasoning);
        int rc = step_reset(st);
        if (rc != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}

/* A lock held by another connection of the shared-cache memory database
 * (SQLITE_LOCKED; busy_timeout does not cover it) or, past busy_timeout,
 * by another process (SQLITE_BUSY): worth retrying the whole batch. */
/* ---------------------------------------------------------------------
 * The queue and the writer
 */

struct sq_ledger {
    sqlite3 *db;
    char *path; /* what readers open (a shared-cache URI for :memory:) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t idle_cv;
    struct pr_qrow *head, *tail; /* guarded by mu */
    size_t queued;               /* guarded by mu */
    size_t queue_max;
    int lock_timeout_ms;
    int stopping; /* guarded by mu */
    int busy;     /* writer holds a batch; guarded by mu */
    /* pr_ledger_prewake: the writer is in its condition wait (written
     * under mu; read without it for a cheap first look), a hint came
     * (mu), and whether rows are queued (written under mu, read by the
     * spinning writer without it). */
    _Atomic int w_sleeping;
    int prewake;
    _Atomic int q_nonempty;
    _Atomic int64_t last_commit_us; /* gx_mono_us at the last batch's end */
    int migrations_applied;
    sqlite3_stmt *ins_usage, *up_hourly, *up_daily, *up_key;
    sqlite3_stmt *get_wm, *set_wm, *count_ids, *sel_after, *begin, *commit;
    /* Deferred rollups: the cells of committed rows not yet upserted
     * (ids wm+1 .. pending_max_id), writer thread only, except
     * pending_rows (written under mu, read by pr_ledger_flush). */
    struct pr_cells pending;
    int64_t pending_rows;     /* guarded by mu */
    int64_t pending_max_id;
    int64_t pending_since_us; /* when the oldest pending row committed */
    int pending_broken; /* a pending row's cells could not be added:
                           the next flush rolls up from the raw rows */
    int64_t wm;         /* rolled_through_id as this writer last saw it */
    int64_t flush_us;   /* opts.rollup_flush_ms */
    int flush_req;      /* pr_ledger_flush wants the cells; guarded by mu */
    uint64_t idle_flushes; /* flush attempts between batches; mu */
    int64_t rolled_at_open;
    /* The WAL checkpointer (file databases only): its own connection
     * and thread, so a checkpoint (page copies and, in NORMAL mode, the
     * database file's fsync) never runs inside a group commit. */
    sqlite3 *ck_db;
    pthread_t ck_thread;
    int ck_started;
    pthread_mutex_t ck_mu;
    pthread_cond_t ck_cv;
    /* Held by the writer over each transaction; the checkpointer takes it
     * to copy the WAL's last frames between two transactions. */
    pthread_mutex_t ck_gate;
    int ck_req;      /* the WAL passed ck_pages; ck_mu */
    int ck_pages;    /* PR_WAL_CHECKPOINT_BYTES in this file's pages */
    int ck_stopping; /* ck_mu */
    /* statistics; written by the writer, read by anyone */
    _Atomic int64_t n_rows, n_commits, n_failed, n_flushes, n_pending;
    _Atomic int64_t n_checkpoints, n_prewake_hits, n_prewake_misses;
};

static char *
copy_str(char **pp, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = *pp;
    memcpy(d, s, n);
    *pp += n;
    return d;
}

struct pr_qrow *
pr_qrow_new(const struct pr_usage_row *r, pr_commit_cb cb, void *ud)
{
    const char *strs[] = {r->request_id,   r->route, r->provider, r->model,
                          r->usage_source, r->error, r->api};
    size_t extra = 0;
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        if (strs[i])
            extra += strlen(strs[i]) + 1;
    struct pr_qrow *q = malloc(sizeof(*q) + extra);
    if (!q)
        return NULL;
    q->next = NULL;
    q->row = *r;
    q->cb = cb;
    q->ud = ud;
    char *p = (char *)(q + 1);
    q->row.request_id = copy_str(&p, r->request_id);
    q->row.route = copy_str(&p, r->route);
    q->row.provider = copy_str(&p, r->provider);
    q->row.model = copy_str(&p, r->model);
    q->row.usage_source = copy_str(&p, r->usage_source);
    q->row.error = copy_str(&p, r->error);
    q->row.api = copy_str(&p, r->api);
    return q;
}

static void
bind_text_or_null(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static int
write_row(struct sq_ledger *l, const struct pr_usage_row *r)
{
    sqlite3_stmt *st = l->ins_usage;
    sqlite3_bind_int64(st, 1, r->ts_ms);
    bind_text_or_null(st, 2, r->request_id);
    if (r->key_id >= 0)
        sqlite3_bind_int64(st, 3, r->key_id);
    else
        sqlite3_bind_null(st, 3);
    bind_text_or_null(st, 4, r->route);
    bind_text_or_null(st, 5, r->provider);
    bind_text_or_null(st, 6, r->model);
    sqlite3_bind_int(st, 7, r->status);
    sqlite3_bind_int(st, 8, r->attempts);
    sqlite3_bind_int(st, 9, r->stream ? 1 : 0);
    sqlite3_bind_int64(st, 10, r->prompt_tokens);
    sqlite3_bind_int64(st, 11, r->completion_tokens);
    sqlite3_bind_int64(st, 12, r->cached_tokens);
    sqlite3_bind_int64(st, 13, r->cost_pusd);
    sqlite3_bind_int64(st, 14, r->latency_ms);
    if (r->ttft_ms >= 0)
        sqlite3_bind_int64(st, 15, r->ttft_ms);
    else
        sqlite3_bind_null(st, 15);
    sqlite3_bind_text(st, 16, r->usage_source ? r->usage_source : "upstream",
                      -1, SQLITE_STATIC);
    bind_text_or_null(st, 17, r->error);
    sqlite3_bind_text(st, 18, r->api ? r->api : "chat", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 19, r->cache_write_tokens);
    sqlite3_bind_int64(st, 20, r->reasoning_tokens);
    sqlite3_bind_int(st, 21, r->unpriced ? 1 : 0);
    return step_reset(st);
}

/* A lock held by another connection of the shared-cache memory database
 * (SQLITE_LOCKED; busy_timeout does not cover it) or, past busy_timeout,
 * by another process (SQLITE_BUSY): worth retrying the whole batch. */
static int
is_transient(int rc)
{
    return (rc & 0xff) == SQLITE_LOCKED || (rc & 0xff) == SQLITE_BUSY;
}

/* The rows of sel (columns: id, ts_ms, key_id, model, provider, route,
 * status, prompt_tokens, completion_tokens, cached_tokens, cost_pusd,
 * latency_ms, unpriced, cache_write_tokens, reasoning_tokens) -> *r; strings valid until the next step. */
static void
row_from_stmt(sqlite3_stmt *sel, struct pr_usage_row *r)
{
    memset(r, 0, sizeof(*r));
    r->ts_ms = sqlite3_column_int64(sel, 1);
    r->key_id = sqlite3_column_type(sel, 2) == SQLITE_NULL
                    ? -1
                    : sqlite3_column_int64(sel, 2);
    r->model = (const char *)sqlite3_column_text(sel, 3);
    r->provider = (const char *)sqlite3_column_text(sel, 4);
    r->route = (const char *)sqlite3_column_text(sel, 5);
    r->status = sqlite3_column_int(sel, 6);
    r->prompt_tokens = sqlite3_column_int64(sel, 7);
    r->completion_tokens = sqlite3_column_int64(sel, 8);
    r->cached_tokens = sqlite3_column_int64(sel, 9);
    r->cost_pusd = sqlite3_column_int64(sel, 10);
    r->latency_ms = sqlite3_column_int64(sel, 11);
    r->unpriced = sqlite3_column_int(sel, 12);
    r->cache_write_tokens = sqlite3_column_int64(sel, 13);
    r->reasoning_tokens = sqlite3_column_int64(sel, 14);
}

#define SEL_ROWS_SQL                                                      \
    "SELECT id, ts_ms, key_id, model, provider, route, status,"          \
    " prompt_tokens, completion_tokens, cached_tokens, cost_pusd,"       \
    " latency_ms, unpriced, cache_write_tokens, reasoning_tokens FROM usage"

/* Rolls up, from the raw rows, every usage row with id > from (sel:
 * SEL_ROWS_SQL " WHERE id > ?1 ORDER BY id"), upserting the cells in
 * chunks so memory stays bounded.  *last = the highest id seen (from when
 * none), *nrows = how many.  Inside the caller's transaction. */
static int
rollup_after(sqlite3_stmt *sel, sqlite3_stmt *up, sqlite3_stmt *upd,
             int64_t from, int64_t *last, int64_t *nrows)
{
    struct pr_cells c = {NULL, 0, 0};
    int64_t lastid = from, n = 0;
    sqlite3_bind_int64(sel, 1, from);
    int rc;
    while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
        struct pr_usage_row r;
        row_from_stmt(sel, &r);
        if (!pr_cells_add_row(&c, &r)) {
            rc = SQLITE_NOMEM;
            break;
        }
        lastid = sqlite3_column_int64(sel, 0);
        n++;
        if (c.n >= PR_ROLLUP_MAX_CELLS) {
            rc = cells_write(up, upd, &c);
            pr_cells_reset(&c);
            if (rc != SQLITE_OK)
                break;
        }
    }
    if (rc == SQLITE_DONE)
        rc = cells_write(up, upd, &c);
    sqlite3_reset(sel);
    sqlite3_clear_bindings(sel);
    pr_cells_reset(&c);
    *last = lastid;
    *nrows = n;
    return rc;
}

static int
step_int64(sqlite3_stmt *st, int64_t *out)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_CORRUPT; /* the one-row table lost its row */
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

/* Inside a write transaction: brings the rollup tables up to date and
 * moves the watermark, *new_wm.  The in-memory cells are used when they
 * are known to hold exactly the rows after the stored watermark (nobody
 * else moved it, no row of ours is missing, no other writer's row is in
 * between: one COUNT over a short rowid range); otherwise the rows after
 * the watermark are read back and rolled up from scratch. */
static int
flush_pending(struct sq_ledger *l, int64_t *new_wm)
{
    int64_t wdb = 0, cnt = -1;
    int rc = step_int64(l->get_wm, &wdb);
    if (rc != SQLITE_OK)
        return rc;
    int use_mem = !l->pending_broken && wdb == l->wm;
    if (use_mem && l->pending_rows > 0) {
        sqlite3_bind_int64(l->count_ids, 1, wdb);
        sqlite3_bind_int64(l->count_ids, 2, l->pending_max_id);
        rc = step_int64(l->count_ids, &cnt);
        if (rc != SQLITE_OK)
            return rc;
        use_mem = cnt == l->pending_rows;
    }
    if (use_mem) {
        rc = cells_write(l->up_hourly, l->up_daily, &l->pending);
        *new_wm = l->pending_rows > 0 ? l->pending_max_id : wdb;
    } else {
        int64_t n = 0;
        rc = rollup_after(l->sel_after, l->up_hourly, l->up_daily, wdb,
                          new_wm, &n);
        /* Normal when another process opened the ledger meanwhile (e.g.
         * `llmux keys`: its open rolled up our pending rows). */
        GX_LOG(GX_LOG_INFO, NULL,
               "ledger: rollups caught up from %lld raw rows (watermark %lld,"
               " expected %lld)",
               (long long)n, (long long)wdb, (long long)l->wm);
    }
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(l->set_wm, 1, *new_wm);
    return step_reset(l->set_wm);
}

struct key_spend {
    int64_t key_id, cost;
};

static int
key_spend_cmp(const void *a, const void *b)
{
    const struct key_spend *x = a, *y = b;
    return x->key_id < y->key_id ? -1 : x->key_id > y->key_id;
}

/* keys.spent_pusd += each key's cost in the batch: one UPDATE per key. */
static int
write_key_spend(struct sq_ledger *l, struct pr_qrow *batch, int64_t n)
{
    struct key_spend one, *ks = n > 1 ? malloc((size_t)n * sizeof(*ks)) : &one;
    if (!ks)
        return SQLITE_NOMEM;
    size_t m = 0;
    for (struct pr_qrow *q = batch; q; q = q->next)
        if (q->row.key_id >= 0 && q->row.cost_pusd != 0)
            ks[m++] = (struct key_spend){q->row.key_id, q->row.cost_pusd};
    if (m > 1)
        qsort(ks, m, sizeof(*ks), key_spend_cmp);
    int rc = SQLITE_OK;
    for (size_t i = 0; rc == SQLITE_OK && i < m;) {
        int64_t sum = 0;
        size_t j = i;
        for (; j < m && ks[j].key_id == ks[i].key_id; j++)
            sum += ks[j].cost;
        if (sum != 0) {
            sqlite3_bind_int64(l->up_key, 1, sum);
            sqlite3_bind_int64(l->up_key, 2, ks[i].key_id);
            rc = step_reset(l->up_key);
        }
        i = j;
    }
    if (ks != &one)
        free(ks);
    return rc;
}

/* Empties the cells, keeping the table's memory. */
static void
cells_clear(struct pr_cells *c)
{
    for (size_t i = 0; i < c->cap; i++)
        free(c->a[i].value);
    if (c->a)
        memset(c->a, 0, c->cap * sizeof(*c->a));
    c->n = 0;
}

/* One attempt at one transaction: the rows of batch (may be NULL) and,
 * when flush, the pending rollup cells with the watermark.  Returns
 * SQLITE_OK if committed; only then is the in-memory state changed (the
 * flushed cells dropped, the batch's rows added as pending). */
static int
write_batch_once(struct sq_ledger *l, struct pr_qrow *batch, int log,
                 int flush)
{
    const char *what = "begin";
    int64_t new_wm = l->wm, last_id = 0;
    int rc = step_reset(l->begin); /* prepared once: ~4k instructions */
    if (rc != SQLITE_OK)
        goto out;
    if (flush) {
        what = "rollup";
        rc = flush_pending(l, &new_wm);
        if (rc != SQLITE_OK)
            goto out;
    }
    int64_t n = 0;
    what = "insert";
    for (struct pr_qrow *q = batch; q; q = q->next) {
        rc = write_row(l, &q->row);
        if (rc != SQLITE_OK)
            goto out;
        last_id = sqlite3_last_insert_rowid(l->db);
        n++;
    }
    what = "key spend";
    if (n > 0 && (rc = write_key_spend(l, batch, n)) != SQLITE_OK)
        goto out;
    what = "commit";
    rc = step_reset(l->commit);
    if (rc != SQLITE_OK)
        goto out;
    if (n > 0) {
        atomic_fetch_add(&l->n_rows, n);
        atomic_fetch_add(&l->n_commits, 1);
    }
    int64_t now = gx_mono_us();
    int64_t pending = l->pending_rows;
    if (flush) {
        cells_clear(&l->pending);
        l->wm = new_wm;
        l->pending_broken = 0;
        pending = 0;
        atomic_fetch_add(&l->n_flushes, 1);
    }
    if (n > 0) {
        for (struct pr_qrow *q = batch; q; q = q->next)
            if (!l->pending_broken && !pr_cells_add_row(&l->pending, &q->row))
                l->pending_broken = 1;
        /* Flushes keep failing (they are retried every interval): bound
         * the memory; the next flush that works reads the raw rows. */
        if (l->pending_broken || l->pending.n > 4 * PR_ROLLUP_MAX_CELLS) {
            pr_cells_reset(&l->pending);
            l->pending_broken = 1;
        }
        if (pending == 0)
            l->pending_since_us = now;
        l->pending_max_id = last_id;
        pending += n;
    }
    atomic_store(&l->n_pending, pending);
    pthread_mutex_lock(&l->mu);
    l->pending_rows = pending;
    pthread_mutex_unlock(&l->mu);
out:
    if (rc != SQLITE_OK) {
        if (log || !is_transient(rc))
            GX_LOG(GX_LOG_ERROR, NULL, "ledger: %s: %s", what,
                   sqlite3_errmsg(l->db));
        if (!sqlite3_get_autocommit(l->db))
            sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
    }
    return rc;
}

/* Writes one transaction, retrying transient lock errors until
 * lock_timeout_ms (default 10 s) has passed (a time bound, not a count:
 * with busy_timeout one attempt may itself wait).  Returns the last SQLite
 * result. */
static int
write_batch(struct sq_ledger *l, struct pr_qrow *batch, int flush)
{
    int64_t deadline = gx_mono_us() + (int64_t)l->lock_timeout_ms * 1000;
    for (;;) {
        int last = gx_mono_us() >= deadline;
        pthread_mutex_lock(&l->ck_gate);
        int rc = write_batch_once(l, batch, last, flush);
        pthread_mutex_unlock(&l->ck_gate);
        if (rc == SQLITE_OK || !is_transient(rc) || last)
            return rc;
        usleep(2000);
    }
}

/* Whether the pending cells are due: old enough, or too many to keep. */
static int
flush_due(const struct sq_ledger *l, int64_t now)
{
    return l->pending_rows > 0 &&
           (now - l->pending_since_us >= l->flush_us ||
            l->pending_rows >= PR_ROLLUP_MAX_ROWS ||
            l->pending.n >= PR_ROLLUP_MAX_CELLS);
}

/* After a pr_ledger_prewake: until a row is queued, at most
 * PR_PREWAKE_SPIN_US, giving the CPU to any other runnable thread
 * between looks (the worker that is about to submit may share it). */
static void
spin_for_row(struct sq_ledger *l)
{
    int64_t until = gx_mono_us() + PR_PREWAKE_SPIN_US;
    for (;;) {
        if (atomic_load(&l->q_nonempty)) {
            atomic_fetch_add(&l->n_prewake_hits, 1);
            return;
        }
        if (gx_mono_us() >= until) {
            atomic_fetch_add(&l->n_prewake_misses, 1);
            return;
        }
        sched_yield();
    }
}

static void *
writer_main(void *arg)
{
    struct sq_ledger *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        /* Wait for rows, or for the pending cells to fall due (on their
         * age, a pr_ledger_flush or close). */
        for (;;) {
            if (l->head)
                break;
            if (l->prewake) {
                /* A row is announced: wait for it awake, outside the
                 * lock so the submit does not contend with us. */
                l->prewake = 0;
                pthread_mutex_unlock(&l->mu);
                spin_for_row(l);
                pthread_mutex_lock(&l->mu);
                continue;
            }
            if (l->pending_rows > 0 &&
                (l->stopping || l->flush_req || flush_due(l, gx_mono_us())))
                break;
            if (l->stopping)
                goto done;
            atomic_store(&l->w_sleeping, 1);
            if (l->pending_rows > 0) {
                int64_t at = l->pending_since_us + l->flush_us;
                struct timespec ts = {(time_t)(at / 1000000),
                                      (long)(at % 1000000) * 1000};
                pthread_cond_timedwait(&l->cv, &l->mu, &ts);
            } else {
                pthread_cond_wait(&l->cv, &l->mu);
            }
            atomic_store(&l->w_sleeping, 0);
        }
        if (!l->head) {
            /* Idle: the cells in their own transaction. */
            l->flush_req = 0;
            l->busy = 1;
            pthread_mutex_unlock(&l->mu);
            int rc = write_batch(l, NULL, 1);
            pthread_mutex_lock(&l->mu);
            l->busy = 0;
            l->idle_flushes++;
            pthread_cond_broadcast(&l->idle_cv);
            if (rc != SQLITE_OK) {
                /* Try again one interval later; the rows are safe and a
                 * reopen rolls them up from the raw rows anyway. */
                l->pending_since_us = gx_mono_us();
                if (l->stopping)
                    goto done;
            }
            continue;
        }
        struct pr_qrow *batch = l->head;
        l->head = l->tail = NULL;
        l->queued = 0;
        atomic_store(&l->q_nonempty, 0);
        if (l->prewake) {
            /* The announced row came before the spin began. */
            l->prewake = 0;
            atomic_fetch_add(&l->n_prewake_hits, 1);
        }
        l->busy = 1;
        /* Due cells ride along with this batch's transaction. */
        int flush = flush_due(l, gx_mono_us());
        pthread_mutex_unlock(&l->mu);

        int rc = write_batch(l, batch, flush);
        if (rc != SQLITE_OK && !is_transient(rc) && flush) {
            /* The rollup part must not fail the rows: write them alone;
             * the cells stay pending and are retried later. */
            pthread_mutex_lock(&l->mu);
            l->pending_since_us = gx_mono_us();
            pthread_mutex_unlock(&l->mu);
            rc = write_batch(l, batch, 0);
        }
        if (rc != SQLITE_OK && !is_transient(rc)) {
            /* A bad row fails its whole transaction; it must not take its
             * neighbours down, so write the rows one by one (no lock was
             * in the way, so these are quick). */
            struct pr_qrow *q = batch;
            while (q) {
                struct pr_qrow *next = q->next;
                q->next = NULL;
                pthread_mutex_lock(&l->ck_gate);
                int ok1 = write_batch_once(l, q, 1, 0) == SQLITE_OK;
                pthread_mutex_unlock(&l->ck_gate);
                if (!ok1)
                    atomic_fetch_add(&l->n_failed, 1);
                if (q->cb)
                    q->cb(q->ud, ok1);
                free(q);
                q = next;
            }
        } else {
            /* Committed, or the database stayed locked for 10 s: every
             * row shares the batch's fate. */
            int ok = rc == SQLITE_OK;
            while (batch) {
                struct pr_qrow *next = batch->next;
                if (!ok)
                    atomic_fetch_add(&l->n_failed, 1);
                if (batch->cb)
                    batch->cb(batch->ud, ok);
                free(batch);
                batch = next;
            }
        }
        atomic_store(&l->last_commit_us, gx_mono_us());
        pthread_mutex_lock(&l->mu);
        l->busy = 0;
        pthread_cond_broadcast(&l->idle_cv);
    }
done:
    pthread_cond_broadcast(&l->idle_cv);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* The rollup upsert into usage_hourly (daily = 0) or usage_daily: ?1 dim,
 * ?2 key_id, ?3 hour_ms/day_ms, ?4 value, ?5..?11 requests..latency_sum_ms,
 * ?12..?29 h0..h17, ?30 unpriced, ?31 cache_write_tokens, ?32
 * reasoning_tokens, all added to the cell. */
static int
upsert_sql(char *up, size_t cap, int daily)
{
    const char *table = daily ? "usage_daily" : "usage_hourly";
    const char *tcol = daily ? "day_ms" : "hour_ms";
    int n = snprintf(
        up, cap,
        "INSERT INTO %s (dim, key_id, %s, value,"
        " requests, errors, prompt_tokens, completion_tokens, cached_tokens,"
        " cost_pusd, latency_sum_ms",
        table, tcol);
    for (int i = 0; i < PR_LAT_NBUCKETS; i++)
        n += snprintf(up + n, cap - (size_t)n, ", h%d", i);
    n += snprintf(up + n, cap - (size_t)n,
                  ", unpriced, cache_write_tokens, reasoning_tokens)"
                  " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11");
    for (int i = 0; i <= PR_LAT_NBUCKETS + 2; i++)
        n += snprintf(up + n, cap - (size_t)n, ", ?%d", 12 + i);
    n += snprintf(up + n, cap - (size_t)n,
                  ") ON CONFLICT (dim, key_id, %s, value)"
                  " DO UPDATE SET requests = requests + excluded.requests,"
                  " errors = errors + excluded.errors,"
                  " prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
                  " completion_tokens = completion_tokens +"
                  " excluded.completion_tokens,"
                  " cached_tokens = cached_tokens + excluded.cached_tokens,"
                  " cost_pusd = cost_pusd + excluded.cost_pusd,"
                  " latency_sum_ms = latency_sum_ms + excluded.latency_sum_ms",
                  tcol);
    for (int i = 0; i < PR_LAT_NBUCKETS; i++)
        n += snprintf(up + n, cap - (size_t)n, ", h%d = h%d + excluded.h%d", i,
                      i, i);
    n += snprintf(up + n, cap - (size_t)n,
                  ", unpriced = unpriced + excluded.unpriced,"
                  " cache_write_tokens = cache_write_tokens +"
                  " excluded.cache_write_tokens,"
                  " reasoning_tokens = reasoning_tokens +"
                  " excluded.reasoning_tokens");
    return n > 0 && (size_t)n < cap;
}

static enum gx_status
prepare_all(struct sq_ledger *l, char *err, size_t errlen)
{
    static const char ins[] =
        "INSERT INTO usage (ts_ms, request_id, key_id, route, provider,"
        " model, status, attempts, stream, prompt_tokens,"
        " completion_tokens, cached_tokens, cost_pusd, latency_ms,"
        " ttft_ms, usage_source, error, api, cache_write_tokens,"
        " reasoning_tokens, unpriced)"
        " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,"
        "?17,?18,?19,?20,?21)";
    char up[4096], upd[4096];
    if (!upsert_sql(up, sizeof(up), 0) || !upsert_sql(upd, sizeof(upd), 1)) {
        gx_errf(err, errlen, "internal: rollup statement too long");
        return GX_EINVAL;
    }
    static const char key[] =
        "UPDATE keys SET spent_pusd = spent_pusd + ?1 WHERE id = ?2";
    static const char get_wm[] =
        "SELECT rolled_through_id FROM usage_rollup_state WHERE id = 1";
    static const char set_wm[] =
        "UPDATE usage_rollup_state SET rolled_through_id = ?1 WHERE id = 1";
    static const char count_ids[] =
        "SELECT COUNT(*) FROM usage WHERE id > ?1 AND id <= ?2";
    static const char sel_after[] = SEL_ROWS_SQL " WHERE id > ?1 ORDER BY id";
    if (sqlite3_prepare_v3(l->db, ins, -1, SQLITE_PREPARE_PERSISTENT,
                           &l->ins_usage, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(l->db, up, -1, SQLITE_PREPARE_PERSISTENT,
                           &l->up_hourly, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(l->db, upd, -1, SQLITE_PREPARE_PERSISTENT,
                           &l->up_daily, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(l->db, key, -1, SQLITE_PREPARE_PERSISTENT,
                           &l->up_key, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(l->db, get_wm, -1, SQLITE_PREPARE_PERSISTENT,
                           &l->get_wm, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(l->db, set_wm, -1, SQLITE_PREPARE_PERSISTENT,
                           &l->set_wm, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(l->db, count_ids, -1, SQLITE_PREPARE_PERSISTENT,
                           &l->count_ids, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(l->db, sel_after, -1, SQLITE_PREPARE_PERSISTENT,
                           &l->sel_after, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(l->db, "BEGIN IMMEDIATE", -1,
                           SQLITE_PREPARE_PERSISTENT, &l->begin,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(l->db, "COMMIT", -1, SQLITE_PREPARE_PERSISTENT,
                           &l->commit, NULL) != SQLITE_OK) {
        gx_errf(err, errlen, "prepare: %s", sqlite3_errmsg(l->db));
        return GX_EIO;
    }
    return GX_OK;
}

/* ---------------------------------------------------------------------
 * The WAL checkpointer.  SQLite's automatic checkpoint runs inside the
 * COMMIT that pushes the WAL past 1000 pages: every few hundred group
 * commits one of them copied the WAL into the database file and fsynced
 * it, a stall of milliseconds for every request waiting on that batch
 * (a p99 spike).  The writer's connection has no automatic checkpoint;
 * its WAL hook (run after each commit, cheap: a flag and a signal) wakes
 * this thread, which runs a PASSIVE checkpoint on its own connection.
 * PASSIVE takes no lock a writer waits for: the writer keeps appending
 * while it copies, and it copies what is there, never blocking on a
 * reader.  The WAL restarts from its beginning at the writer's next
 * transaction once a checkpoint has copied all of it.
 */
static int
wal_hook(void *ud, sqlite3 *db, const char *name, int pages)
{
    (void)db;
    (void)name;
    struct sq_ledger *l = ud;
    if (pages >= l->ck_pages) {
        pthread_mutex_lock(&l->ck_mu);
        if (!l->ck_req) {
            l->ck_req = 1;
            pthread_cond_signal(&l->ck_cv);
        }
        pthread_mutex_unlock(&l->ck_mu);
    }
    return SQLITE_OK;
}

/* One PASSIVE checkpoint on the checkpointer's connection.  Returns 1 if
 * frames are left that it could not copy. */
static int
checkpoint_once(struct sq_ledger *l)
{
    int nlog = 0, nckpt = 0;
    int rc = sqlite3_wal_checkpoint_v2(l->ck_db, NULL,
                                       SQLITE_CHECKPOINT_PASSIVE, &nlog,
                                       &nckpt);
    if (rc == SQLITE_OK) {
        atomic_fetch_add(&l->n_checkpoints, 1);
        return nckpt < nlog;
    }
    if (!is_transient(rc))
        GX_LOG(GX_LOG_WARN, NULL, "ledger: WAL checkpoint: %s",
               sqlite3_errmsg(l->ck_db));
    return 1;
}

static void *
checkpointer_main(void *arg)
{
    struct sq_ledger *l = arg;
    pthread_mutex_lock(&l->ck_mu);
    for (;;) {
        while (!l->ck_req && !l->ck_stopping)
            pthread_cond_wait(&l->ck_cv, &l->ck_mu);
        if (l->ck_stopping)
            break;
        pthread_mutex_unlock(&l->ck_mu);
        /* The bulk of the copy, while the writer goes on committing. */
        (void)checkpoint_once(l);
        /* The writer appended while the pages were copied (its frames are
         * not even counted in that pass's totals), so the WAL could not
         * restart and would grow for ever under a steady load.  Copy the
         * rest (the frames of the last few commits; nothing, and no
         * fsync, if there are none) with the writer held between
         * transactions; its next BEGIN then restarts the WAL. */
        pthread_mutex_lock(&l->ck_gate);
        int lag = checkpoint_once(l);
        pthread_mutex_unlock(&l->ck_gate);
        /* Still behind: a reader holds old frames.  A pause bounds the
         * checkpoints the commits ask for until it is gone. */
        if (lag)
            usleep(20000);
        pthread_mutex_lock(&l->ck_mu);
        l->ck_req = 0;
    }
    pthread_mutex_unlock(&l->ck_mu);
    return NULL;
}

/* Starts the checkpointer and takes the checkpoints off the writer's
 * connection.  Without it (it could not start) SQLite's inline automatic
 * checkpoint stays on: slower commits now and then, but a bounded WAL. */
static void
checkpointer_start(struct sq_ledger *l, const char *sync_sql)
{
    char err[256];
    if (pr_db_open(l->path, 0, &l->ck_db, err, sizeof(err)) != SQLITE_OK) {
        GX_LOG(GX_LOG_WARN, NULL,
               "ledger: no WAL checkpointer (%s); checkpoints stay inline",
               err);
        l->ck_db = NULL;
        return;
    }
    /* A first read opens the WAL on this connection (a checkpoint on a
     * connection that never read does nothing); the writer's sync level
     * decides the checkpoint's fsyncs. */
    if (sqlite3_exec(l->ck_db, sync_sql, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(l->ck_db, "SELECT count(*) FROM sqlite_master", NULL,
                     NULL, NULL) != SQLITE_OK) {
        GX_LOG(GX_LOG_WARN, NULL,
               "ledger: no WAL checkpointer (%s); checkpoints stay inline",
               sqlite3_errmsg(l->ck_db));
        sqlite3_close(l->ck_db);
        l->ck_db = NULL;
        return;
    }
    if (pthread_create(&l->ck_thread, NULL, checkpointer_main, l) != 0) {
        GX_LOG(GX_LOG_WARN, NULL,
               "ledger: no WAL checkpointer thread; checkpoints stay inline");
        return;
    }
    l->ck_started = 1;
    /* Replaces the automatic checkpoint (sqlite3_wal_hook and
     * sqlite3_wal_autocheckpoint share one slot). */
    sqlite3_wal_hook(l->db, wal_hook, l);
}

static void
checkpointer_stop(struct sq_ledger *l)
{
    if (!l->ck_started)
        return;
    pthread_mutex_lock(&l->ck_mu);
    l->ck_stopping = 1;
    pthread_cond_signal(&l->ck_cv);
    pthread_mutex_unlock(&l->ck_mu);
    pthread_join(l->ck_thread, NULL);
    l->ck_started = 0;
}

static void
ledger_destroy(struct sq_ledger *l)
{
    sqlite3_finalize(l->ins_usage);
    sqlite3_finalize(l->up_hourly);
    sqlite3_finalize(l->up_daily);
    sqlite3_finalize(l->up_key);
    sqlite3_finalize(l->get_wm);
    sqlite3_finalize(l->set_wm);
    sqlite3_finalize(l->count_ids);
    sqlite3_finalize(l->sel_after);
    sqlite3_finalize(l->begin);
    sqlite3_finalize(l->commit);
    pr_cells_reset(&l->pending);
    checkpointer_stop(l);
    sqlite3_close(l->ck_db);
    sqlite3_close(l->db);
    free(l->path);
    pthread_mutex_destroy(&l->ck_mu);
    pthread_mutex_destroy(&l->ck_gate);
    pthread_cond_destroy(&l->ck_cv);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    pthread_cond_destroy(&l->idle_cv);
    free(l);
}

/* At open: rows committed after the watermark (the cells that were still
 * in memory when the last process died) are rolled up from the raw rows,
 * so the rollups again equal the raw sums.  A bounded scan: at most what
 * one flush interval (or PR_ROLLUP_MAX_ROWS) held. */
static enum gx_status
catch_up(struct sq_ledger *l, char *err, size_t errlen)
{
    for (int64_t deadline = gx_mono_us() + (int64_t)l->lock_timeout_ms * 1000;;) {
        int64_t wdb = 0, last = 0, n = 0;
        int rc = sqlite3_exec(l->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = step_int64(l->get_wm, &wdb);
        if (rc == SQLITE_OK)
            rc = rollup_after(l->sel_after, l->up_hourly, l->up_daily, wdb,
                              &last, &n);
        if (rc == SQLITE_OK && n > 0) {
            sqlite3_bind_int64(l->set_wm, 1, last);
            rc = step_reset(l->set_wm);
        }
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(l->db, "COMMIT", NULL, NULL, NULL);
        if (rc == SQLITE_OK) {
            l->wm = last;
            l->rolled_at_open = n;
            if (n > 0)
                GX_LOG(GX_LOG_INFO, NULL,
                       "ledger: rolled up %lld rows committed after the last"
                       " rollup flush",
                       (long long)n);
            return GX_OK;
        }
        gx_errf(err, errlen, "rollup catch-up: %s", sqlite3_errmsg(l->db));
        if (!sqlite3_get_autocommit(l->db))
            sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
        if (!is_transient(rc) || gx_mono_us() >= deadline)
            return GX_EIO;
        usleep(2000);
    }
}

static enum gx_status
sq_open(const char *path, const struct pr_ledger_opts *opts, void **out,
        char *err, size_t errlen)
{
    if (!path || !out) {
        gx_errf(err, errlen, "no database path");
        return GX_EINVAL;
    }
    enum gx_status st = GX_ENOMEM;
    struct sq_ledger *l = calloc(1, sizeof(*l));
    if (!l) {
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    pthread_mutex_init(&l->mu, NULL);
    /* The writer's timed wait for due cells uses gx_mono_us's clock. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&l->idle_cv, NULL);
    pthread_mutex_init(&l->ck_mu, NULL);
    pthread_mutex_init(&l->ck_gate, NULL);
    pthread_cond_init(&l->ck_cv, NULL);
    l->flush_us = (int64_t)(opts && opts->rollup_flush_ms > 0
                                ? opts->rollup_flush_ms
                                : PR_ROLLUP_FLUSH_MS) *
                  1000;
    l->queue_max = opts && opts->queue_max ? opts->queue_max : 65536;
    l->lock_timeout_ms =
        opts && opts->lock_timeout_ms > 0 ? opts->lock_timeout_ms : 10000;

    int is_mem = strcmp(path, ":memory:") == 0;
    const char *sync = NULL;
    if (is_mem) {
        /* A named shared-cache memory database, so usage queries on their
         * own connection see the same data. */
        static _Atomic unsigned long seq;
        char uri[128];
        snprintf(uri, sizeof(uri),
                 "file:llmux-ledger-%ld-%lu?mode=memory&cache=shared",
                 (long)getpid(), (unsigned long)atomic_fetch_add(&seq, 1));
        l->path = strdup(uri);
    } else {
        l->path = strdup(path);
    }
    if (!l->path)
        goto fail;
    st = GX_EIO;
    if (pr_db_open(l->path, 0, &l->db, err, errlen) != SQLITE_OK)
        goto fail;
    if (!is_mem) {
        /* Before the WAL switch, which writes the first page of a new
         * file; a no-op on an existing one. */
        char ps[48];
        snprintf(ps, sizeof(ps), "PRAGMA page_size=%d", PR_LEDGER_PAGE_SIZE);
        if (exec_sql(l->db, ps, err, errlen) != SQLITE_OK ||
            exec_sql(l->db, "PRAGMA journal_mode=WAL", err, errlen) !=
                SQLITE_OK)
            goto fail;
        sync = opts && opts->sync == PR_LEDGER_SYNC_FULL
                               ? "PRAGMA synchronous=FULL"
                               : "PRAGMA synchronous=NORMAL";
        if (exec_sql(l->db, sync, err, errlen) != SQLITE_OK)
            goto fail;
    }
    st = migrate(l->db, &l->migrations_applied, err, errlen);
    if (st != GX_OK)
        goto fail;
    int page = 4096;
    sqlite3_stmt *pst = NULL;
    if (sqlite3_prepare_v2(l->db, "PRAGMA page_size", -1, &pst, NULL) ==
            SQLITE_OK &&
        sqlite3_step(pst) == SQLITE_ROW && sqlite3_column_int(pst, 0) > 0)
        page = sqlite3_column_int(pst, 0);
    sqlite3_finalize(pst);
    l->ck_pages = PR_WAL_CHECKPOINT_BYTES / page;
    /* One attempt waits at most this long; write_batch retries up to
     * lock_timeout_ms overall. */
    sqlite3_busy_timeout(l->db,
                         l->lock_timeout_ms < 1000 ? l->lock_timeout_ms : 1000);
    st = prepare_all(l, err, errlen);
    if (st != GX_OK)
        goto fail;
    st = catch_up(l, err, errlen);
    if (st != GX_OK)
        goto fail;
    if (!is_mem)
        checkpointer_start(l, sync);
    if (pthread_create(&l->thread, NULL, writer_main, l) != 0) {
        gx_errf(err, errlen, "cannot start the ledger writer thread");
        st = GX_ENOMEM;
        goto fail;
    }
    *out = l;
    return GX_OK;
fail:
    ledger_destroy(l);
    return st;
}

static void
sq_close(void *be)
{
    struct sq_ledger *l = be;
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stopping = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    checkpointer_stop(l);
    /* A checkpoint on close keeps the WAL file from growing across
     * restarts; failure is harmless. */
    sqlite3_exec(l->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
    ledger_destroy(l);
}

static enum gx_status
sq_submit(void *be, const struct pr_usage_row *row, pr_commit_cb cb, void *ud)
{
    struct sq_ledger *l = be;
    if (!l || !row)
        return GX_EINVAL;
    struct pr_qrow *q = pr_qrow_new(row, cb, ud);
    if (!q)
        return GX_ENOMEM;
    pthread_mutex_lock(&l->mu);
    enum gx_status st = GX_OK;
    if (l->stopping)
        st = GX_ECANCELED;
    else if (l->queued >= l->queue_max)
        st = GX_EAGAIN;
    if (st != GX_OK) {
        pthread_mutex_unlock(&l->mu);
        free(q);
        return st;
    }
    if (l->tail)
        l->tail->next = q;
    else
        l->head = q;
    l->tail = q;
    l->queued++;
    atomic_store(&l->q_nonempty, 1);
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return GX_OK;
}

static void
sq_prewake(void *be)
{
    struct sq_ledger *l = be;
    /* The common cases under load (the writer is busy, or was a moment
     * ago) cost two loads and a clock read, no lock. */
    if (!l || !atomic_load(&l->w_sleeping) ||
        gx_mono_us() - atomic_load(&l->last_commit_us) < PR_PREWAKE_IDLE_US)
        return;
    pthread_mutex_lock(&l->mu);
    if (atomic_load(&l->w_sleeping) && !l->head && !l->stopping) {
        l->prewake = 1;
        pthread_cond_signal(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
}

static void
sq_flush(void *be)
{
    struct sq_ledger *l = be;
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    /* The rows first, then one flush attempt of the cells (not forever:
     * a failed attempt also ends the wait). */
    uint64_t start = l->idle_flushes;
    l->flush_req = 1;
    pthread_cond_signal(&l->cv);
    while (l->head || l->busy ||
           (l->pending_rows > 0 && l->idle_flushes == start && !l->stopping))
        pthread_cond_wait(&l->idle_cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

static const char *
sq_path(void *be)
{
    struct sq_ledger *l = be;
    return l ? l->path : NULL;
}

static void
sq_stats(void *be, struct pr_ledger_stats *out)
{
    struct sq_ledger *l = be;
    memset(out, 0, sizeof(*out));
    if (!l)
        return;
    out->rows = atomic_load(&l->n_rows);
    out->commits = atomic_load(&l->n_commits);
    out->failed = atomic_load(&l->n_failed);
    out->migrations_applied = l->migrations_applied;
    out->rollup_flushes = atomic_load(&l->n_flushes);
    out->rollup_pending = atomic_load(&l->n_pending);
    out->rolled_up_at_open = l->rolled_at_open;
    out->wal_checkpoints = atomic_load(&l->n_checkpoints);
    out->prewake_hits = atomic_load(&l->n_prewake_hits);
    out->prewake_misses = atomic_load(&l->n_prewake_misses);
    pthread_mutex_lock(&l->mu);
    out->queued = (int64_t)l->queued;
    pthread_mutex_unlock(&l->mu);
}

/* One pass over the rows in time order, summed in C per hour with the
 * writer's own cell code (daily cells are upserted once per hour too) (an 8-way
 * GROUP BY in SQL took minutes on 10M rows; this reads each row once). */
enum gx_status
pr_ledger_rebuild_rollups(const char *path, char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *sel = NULL, *up = NULL, *upd = NULL;
    struct pr_cells cells = {NULL, 0, 0};
    enum gx_status st = GX_EIO;
    char sql[4096], sqld[4096];
    if (!upsert_sql(sql, sizeof(sql), 0) ||
        !upsert_sql(sqld, sizeof(sqld), 1)) {
        gx_errf(err, errlen, "internal: rollup statement too long");
        return GX_EINVAL;
    }
    if (pr_db_open(path, 0, &db, err, errlen) != SQLITE_OK)
        goto out;
    if (exec_sql(db,
                 "BEGIN IMMEDIATE; DELETE FROM usage_hourly;"
                 " DELETE FROM usage_daily",
                 err, errlen) != SQLITE_OK)
        goto out;
    if (sqlite3_prepare_v2(db, sql, -1, &up, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, sqld, -1, &upd, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT ts_ms, key_id, model, provider, route,"
                           " status, prompt_tokens, completion_tokens,"
                           " cached_tokens, cost_pusd, latency_ms, unpriced,"
                           " cache_write_tokens, reasoning_tokens"
                           " FROM usage ORDER BY ts_ms",
                           -1, &sel, NULL) != SQLITE_OK) {
        gx_errf(err, errlen, "rebuild: %s", sqlite3_errmsg(db));
        goto rollback;
    }
    int64_t cur_hour = INT64_MIN;
    int rc;
    while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
        struct pr_usage_row r;
        memset(&r, 0, sizeof(r));
        r.ts_ms = sqlite3_column_int64(sel, 0);
        r.key_id = sqlite3_column_type(sel, 1) == SQLITE_NULL
                       ? -1
                       : sqlite3_column_int64(sel, 1);
        r.model = (const char *)sqlite3_column_text(sel, 2);
        r.provider = (const char *)sqlite3_column_text(sel, 3);
        r.route = (const char *)sqlite3_column_text(sel, 4);
        r.status = sqlite3_column_int(sel, 5);
        r.prompt_tokens = sqlite3_column_int64(sel, 6);
        r.completion_tokens = sqlite3_column_int64(sel, 7);
        r.cached_tokens = sqlite3_column_int64(sel, 8);
        r.cost_pusd = sqlite3_column_int64(sel, 9);
        r.latency_ms = sqlite3_column_int64(sel, 10);
        r.unpriced = sqlite3_column_int(sel, 11);
        r.cache_write_tokens = sqlite3_column_int64(sel, 12);
        r.reasoning_tokens = sqlite3_column_int64(sel, 13);
        int64_t hour = r.ts_ms - (((r.ts_ms % 3600000) + 3600000) % 3600000);
        if (hour != cur_hour && cells.n > 0) {
            if (cells_write(up, upd, &cells) != SQLITE_OK) {
                gx_errf(err, errlen, "rebuild: %s", sqlite3_errmsg(db));
                goto rollback;
            }
            pr_cells_reset(&cells);
        }
        cur_hour = hour;
        if (!pr_cells_add_row(&cells, &r)) {
            gx_errf(err, errlen, "rebuild: out of memory");
            st = GX_ENOMEM;
            goto rollback;
        }
    }
    if (rc != SQLITE_DONE || cells_write(up, upd, &cells) != SQLITE_OK) {
        gx_errf(err, errlen, "rebuild: %s", sqlite3_errmsg(db));
        goto rollback;
    }
    sqlite3_finalize(sel);
    sqlite3_finalize(up);
    sqlite3_finalize(upd);
    sel = up = upd = NULL;
    /* The rollups now hold every row (version 3's watermark). */
    int version = 0;
    if (get_user_version(db, &version) != SQLITE_OK ||
        (version >= 3 &&
         exec_sql(db,
                  "UPDATE usage_rollup_state SET rolled_through_id ="
                  " COALESCE((SELECT MAX(id) FROM usage), 0) WHERE id = 1",
                  err, errlen) != SQLITE_OK) ||
        exec_sql(db, "COMMIT", err, errlen) != SQLITE_OK)
        goto rollback;
    st = GX_OK;
    goto out;
rollback:
    sqlite3_finalize(sel);
    sqlite3_finalize(up);
    sqlite3_finalize(upd);
    sel = up = upd = NULL;
    exec_sql(db, "ROLLBACK", NULL, 0);
out:
    pr_cells_reset(&cells);
    sqlite3_finalize(sel);
    sqlite3_finalize(up);
    sqlite3_finalize(upd);
    sqlite3_close(db);
    return st;
}

const struct pr_store_ops pr_store_sqlite = {
    .name = "sqlite",
    .ledger_open = sq_open,
    .ledger_close = sq_close,
    .ledger_submit = sq_submit,
    .ledger_flush = sq_flush,
    .ledger_prewake = sq_prewake,
    .ledger_stats = sq_stats,
    .ledger_path = sq_path,
    .key_create = pr_sq_key_create,
    .key_revoke = pr_sq_key_revoke,
    .key_list = pr_sq_key_list,
    .usage_query = pr_sq_usage_query,
};
