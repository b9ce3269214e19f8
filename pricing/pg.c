/*
 * pg.c: the PostgreSQL backend of the storage interface (libpq), for N
 * llmux instances sharing one database.
 *
 * Threads: the ledger's writer thread owns the only long-lived
 * connection; the key and query calls connect for the call on the
 * caller's thread (the gateway's aux thread or the CLI).  Nothing here is
 * ever called on an event loop.
 *
 * Schema (table llmux_schema holds the version; DESIGN.md section 7
 * names): usage, keys, usage_hourly, usage_daily as in ledger.c, with
 *   usage.request_id UNIQUE   a row is written at most once, whoever
 *                             retries it (a commit whose answer was lost,
 *                             a spool replayed twice)
 *   keys.reserved_pusd        in-flight budget reservations (version 1
 *                             carries it; see pr_pg_budget_* below)
 * Migrations run at open in one transaction under an advisory lock, so
 * three instances starting together migrate once; a database whose
 * version is newer than this binary is refused.
 *
 * Group commit: the writer takes everything queued and writes it in ONE
 * transaction: INSERT ... VALUES (...), ... ON CONFLICT (request_id) DO
 * NOTHING RETURNING the inserted rows, from which it sums in C the keys'
 * spend and the rollup cells; then one UPDATE per key in id order and the
 * cells sorted (a fixed lock order: two instances' batches cannot
 * deadlock), then COMMIT, then the callbacks.  Rollup cells are therefore
 * maintained exactly once per row, by whichever instance wrote it, in the
 * row's own transaction: the rollups always equal the raw rows.
 *
 * Database unreachable: a batch is retried (reconnecting) for up to
 * lock_timeout_ms; then, in FAIL mode (the default), its callbacks get
 * ok=0 and pr_ledger_available says 0 until a reconnect succeeds, so the
 * gateway answers 503 instead of serving requests it cannot log.  In
 * SPOOL mode the batch's rows are appended to the spool file (one record
 * per row: "R <len> <instance>\n<SQL tuple>\n", the instance whose
 * budget lease paid for it; written with write(2) before the callback
 * says ok=1, so they survive kill -9 like SQLite's NORMAL commits) and
 * replayed once the database answers, in one transaction per instance
 * that moves the rows' cost off its lease like a live commit; the file
 * is truncated after the replay commits.  A crash between the
 * two replays the file again, which inserts nothing twice (request_id is
 * unique), so each row lands exactly once.  A torn last record (killed
 * mid-write) was never acknowledged and is skipped.
 *
 * Text goes into SQL as standard-conforming literals ('' doubling; the
 * connection forces standard_conforming_strings=on and UTF8): one
 * escaper for the live path and the spool, which needs no connection.
 */
#include "pricing.h"
#include "pricing_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PG_CHUNK_ROWS 500     /* rows per INSERT statement */
#define PG_RETRY_SLEEP_US 100000
#define PG_DOWN_PROBE_MS 500  /* reconnect attempts while down, idle */
#define PG_SPOOL_MAX (1LL << 30) /* spool file cap: 1 GiB, then rows fail */

/* ------------------------------------------------------------------ */
/* Migrations: pg_migrations[i] takes the schema from i to i+1.          */

static const char *const pg_migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE usage ("
    " id BIGSERIAL PRIMARY KEY,"
    " ts_ms BIGINT NOT NULL,"
    " request_id TEXT UNIQUE,"
    " key_id BIGINT,"
    " route TEXT, provider TEXT, model TEXT,"
    " status INTEGER NOT NULL,"
    " attempts INTEGER NOT NULL DEFAULT 1,"
    " stream INTEGER NOT NULL DEFAULT 0,"
    " prompt_tokens BIGINT NOT NULL DEFAULT 0,"
    " completion_tokens BIGINT NOT NULL DEFAULT 0,"
    " cached_tokens BIGINT NOT NULL DEFAULT 0,"
    " cost_pusd BIGINT NOT NULL DEFAULT 0,"
    " latency_ms BIGINT NOT NULL DEFAULT 0,"
    " ttft_ms BIGINT,"
    " usage_source TEXT NOT NULL DEFAULT 'upstream',"
    " error TEXT);"
    "CREATE INDEX usage_ts ON usage(ts_ms);"
    "CREATE INDEX usage_key_ts ON usage(key_id, ts_ms);"
    "CREATE TABLE keys ("
    " id BIGSERIAL PRIMARY KEY,"
    " name TEXT NOT NULL,"
    " hash TEXT NOT NULL UNIQUE,"
    " created_ms BIGINT NOT NULL,"
    " expires_ms BIGINT, revoked_ms BIGINT,"
    " budget_pusd BIGINT,"
    " spent_pusd BIGINT NOT NULL DEFAULT 0,"
    " reserved_pusd BIGINT NOT NULL DEFAULT 0,"
    " rpm BIGINT, tpm BIGINT, models TEXT);"
    "CREATE TABLE usage_hourly ("
    " dim TEXT NOT NULL, key_id BIGINT NOT NULL, hour_ms BIGINT NOT NULL,"
    " value TEXT NOT NULL,"
    " requests BIGINT NOT NULL DEFAULT 0, errors BIGINT NOT NULL DEFAULT 0,"
    " prompt_tokens BIGINT NOT NULL DEFAULT 0,"
    " completion_tokens BIGINT NOT NULL DEFAULT 0,"
    " cached_tokens BIGINT NOT NULL DEFAULT 0,"
    " cost_pusd BIGINT NOT NULL DEFAULT 0,"
    " latency_sum_ms BIGINT NOT NULL DEFAULT 0,"
    " h0 BIGINT NOT NULL DEFAULT 0, h1 BIGINT NOT NULL DEFAULT 0,"
    " h2 BIGINT NOT NULL DEFAULT 0, h3 BIGINT NOT NULL DEFAULT 0,"
    " h4 BIGINT NOT NULL DEFAULT 0, h5 BIGINT NOT NULL DEFAULT 0,"
    " h6 BIGINT NOT NULL DEFAULT 0, h7 BIGINT NOT NULL DEFAULT 0,"
    " h8 BIGINT NOT NULL DEFAULT 0, h9 BIGINT NOT NULL DEFAULT 0,"
    " h10 BIGINT NOT NULL DEFAULT 0, h11 BIGINT NOT NULL DEFAULT 0,"
    " h12 BIGINT NOT NULL DEFAULT 0, h13 BIGINT NOT NULL DEFAULT 0,"
    " h14 BIGINT NOT NULL DEFAULT 0, h15 BIGINT NOT NULL DEFAULT 0,"
    " h16 BIGINT NOT NULL DEFAULT 0, h17 BIGINT NOT NULL DEFAULT 0,"
    " PRIMARY KEY (dim, key_id, hour_ms, value));"
    "CREATE TABLE usage_daily (LIKE usage_hourly INCLUDING DEFAULTS);"
    "ALTER TABLE usage_daily RENAME COLUMN hour_ms TO day_ms;"
    "ALTER TABLE usage_daily ADD PRIMARY KEY (dim, key_id, day_ms, value);",
    /* 1 -> 2: budget leases, one row per (instance, key): the part of
     * keys.reserved_pusd that instance holds; renewed_ms lets the others
     * reclaim the lease of an instance that died. */
    "CREATE TABLE budget_leases ("
    " instance TEXT NOT NULL, key_id BIGINT NOT NULL,"
    " amount BIGINT NOT NULL DEFAULT 0, renewed_ms BIGINT NOT NULL,"
    " PRIMARY KEY (instance, key_id));",
    /* 2 -> 3: request counts per key and UTC minute, leased by instances
     * (rate.c). */
    "CREATE TABLE rate_windows ("
    " key_id BIGINT NOT NULL, window_ms BIGINT NOT NULL,"
    " used BIGINT NOT NULL DEFAULT 0,"
    " PRIMARY KEY (key_id, window_ms));",
    /* 3 -> 4: as SQLite's version 4 (ledger.c): the inbound API, the
     * cache-write and reasoning token classes, and unpriced rows (a flag,
     * also summed in the rollup cells).  ADD COLUMN with a constant
     * default is a catalogue change only (PostgreSQL 11+). */
    "ALTER TABLE usage ADD COLUMN IF NOT EXISTS api TEXT NOT NULL"
    " DEFAULT 'chat';"
    "ALTER TABLE usage ADD COLUMN IF NOT EXISTS cache_write_tokens BIGINT"
    " NOT NULL DEFAULT 0;"
    "ALTER TABLE usage ADD COLUMN IF NOT EXISTS reasoning_tokens BIGINT"
    " NOT NULL DEFAULT 0;"
    "ALTER TABLE usage ADD COLUMN IF NOT EXISTS unpriced INTEGER NOT NULL"
    " DEFAULT 0;"
    "ALTER TABLE usage_hourly ADD COLUMN IF NOT EXISTS unpriced BIGINT"
    " NOT NULL DEFAULT 0;"
    "ALTER TABLE usage_daily ADD COLUMN IF NOT EXISTS unpriced BIGINT"
    " NOT NULL DEFAULT 0;",
    /* 4 -> 5: as SQLite's version 5: the cache-write and reasoning sums in
     * the rollup cells, backfilled exactly from every raw row (the cells
     * are written with their rows, so they hold them all). */
    "ALTER TABLE usage_hourly ADD COLUMN IF NOT EXISTS cache_write_tokens"
    " BIGINT NOT NULL DEFAULT 0;"
    "ALTER TABLE usage_hourly ADD COLUMN IF NOT EXISTS reasoning_tokens"
    " BIGINT NOT NULL DEFAULT 0;"
    "ALTER TABLE usage_daily ADD COLUMN IF NOT EXISTS cache_write_tokens"
    " BIGINT NOT NULL DEFAULT 0;"
    "ALTER TABLE usage_daily ADD COLUMN IF NOT EXISTS reasoning_tokens"
    " BIGINT NOT NULL DEFAULT 0;"
    PR_V5_BACKFILL_SQL("usage_hourly", "hour_ms", "3600000", "")
    PR_V5_BACKFILL_SQL("usage_daily", "day_ms", "86400000", ""),
};
#define PG_N_MIGRATIONS \
    ((int)(sizeof(pg_migrations) / sizeof(pg_migrations[0])))

int
pr_pg_schema_version(void)
{
    return PG_N_MIGRATIONS;
}

/* ------------------------------------------------------------------ */
/* Connections.                                                         */

/* libpq's message on one line (it writes several, tab-indented). */
static void
one_line(char *err, size_t errlen, const char *what, const char *m)
{
    gx_errf(err, errlen, "%s: %s", what, m);
    for (char *p = err; p && *p; p++)
        if (*p == '\n' || *p == '\t')
            *p = ' ';
    size_t n = err ? strlen(err) : 0;
    while (n && err[n - 1] == ' ')
        err[--n] = '\0';
}

static void
conn_err(char *err, size_t errlen, const char *what, PGconn *c)
{
    one_line(err, errlen, what, c ? PQerrorMessage(c) : "out of memory");
}

/* Connects to database (a postgres:// URI).  The URI may hold a password;
 * messages name the redacted form only. */
static PGconn *
pg_connect(const char *database, char *err, size_t errlen)
{
    const char *keys[] = {"dbname", "connect_timeout", "application_name",
                          "options", "client_encoding", NULL};
    const char *vals[] = {database, "5", "llmux",
                          "-c standard_conforming_strings=on"
                          " -c client_min_messages=warning",
                          "UTF8", NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (!c || PQstatus(c) != CONNECTION_OK) {
        char red[512], what[600];
        pr_store_redact(database, red, sizeof(red));
        snprintf(what, sizeof(what), "cannot connect to %s", red);
        conn_err(err, errlen, what, c);
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* Runs sql; 0 when its (last) result has the expected status.  *res
 * receives the result when not NULL (caller PQclear()s). */
static int
pg_run(PGconn *c, const char *sql, ExecStatusType want, PGresult **res,
       char *err, size_t errlen)
{
    PGresult *r = PQexec(c, sql);
    if (!r || PQresultStatus(r) != want) {
        if (r && PQresultErrorMessage(r)[0]) {
            one_line(err, errlen, "postgres", PQresultErrorMessage(r));
        } else {
            conn_err(err, errlen, "postgres", c);
        }
        PQclear(r);
        return -1;
    }
    if (res)
        *res = r;
    else
        PQclear(r);
    return 0;
}

static int64_t
val_i64(const PGresult *r, int row, int col, int64_t null_value)
{
    if (PQgetisnull(r, row, col))
        return null_value;
    return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* Creates or upgrades the schema; refuses a newer one. */
static enum gx_status
pg_migrate(PGconn *c, int *applied, char *err, size_t errlen)
{
    *applied = 0;
    PGresult *r = NULL;
    if (pg_run(c,
               "BEGIN; SELECT pg_advisory_xact_lock(7201510015);"
               " CREATE TABLE IF NOT EXISTS llmux_schema ("
               " id INTEGER PRIMARY KEY CHECK (id = 1),"
               " version INTEGER NOT NULL);"
               " INSERT INTO llmux_schema VALUES (1, 0) ON CONFLICT DO NOTHING;"
               " SELECT version FROM llmux_schema WHERE id = 1",
               PGRES_TUPLES_OK, &r, err, errlen) != 0) {
        pg_run(c, "ROLLBACK", PGRES_COMMAND_OK, NULL, NULL, 0);
        return GX_EIO;
    }
    int v = (int)val_i64(r, 0, 0, 0);
    PQclear(r);
    if (v > PG_N_MIGRATIONS) {
        gx_errf(err, errlen,
                "database schema version %d is newer than this llmux (%d);"
                " upgrade llmux",
                v, PG_N_MIGRATIONS);
        pg_run(c, "ROLLBACK", PGRES_COMMAND_OK, NULL, NULL, 0);
        return GX_EINVAL;
    }
    for (; v < PG_N_MIGRATIONS; v++) {
        char bump[96];
        snprintf(bump, sizeof(bump),
                 "UPDATE llmux_schema SET version = %d WHERE id = 1", v + 1);
        if (pg_run(c, pg_migrations[v], PGRES_COMMAND_OK, NULL, err, errlen) ||
            pg_run(c, bump, PGRES_COMMAND_OK, NULL, err, errlen)) {
            pg_run(c, "ROLLBACK", PGRES_COMMAND_OK, NULL, NULL, 0);
            return GX_EIO;
        }
        (*applied)++;
    }
    return pg_run(c, "COMMIT", PGRES_COMMAND_OK, NULL, err, errlen) ? GX_EIO
                                                                    : GX_OK;
}

/* ------------------------------------------------------------------ */
/* SQL text.                                                            */

/* A standard-conforming string literal, or NULL. */
static enum gx_status
lit(struct gx_buf *b, const char *s)
{
    if (!s)
        return gx_buf_append(b, "NULL", 4);
    enum gx_status st = gx_buf_append(b, "'", 1);
    while (st == GX_OK && *s) {
        const char *q = strchr(s, '\'');
        size_t n = q ? (size_t)(q - s) : strlen(s);
        st = gx_buf_append(b, s, n);
        if (st == GX_OK && q)
            st = gx_buf_append(b, "''", 2);
        s += n + (q ? 1 : 0);
    }
    if (st == GX_OK)
        st = gx_buf_append(b, "'", 1);
    return st;
}

static enum gx_status
opt_i64(struct gx_buf *b, int64_t v, int64_t null_below)
{
    return v < null_below ? gx_buf_append(b, "NULL", 4)
                          : gx_buf_printf(b, "%lld", (long long)v);
}

#define USAGE_COLS                                                          \
    "ts_ms, request_id, key_id, route, provider, model, status, attempts," \
    " stream, prompt_tokens, completion_tokens, cached_tokens, cost_pusd,"  \
    " latency_ms, ttft_ms, usage_source, error, api, cache_write_tokens,"  \
    " reasoning_tokens, unpriced"

/* One row as "(v1, ..., v21)". */
static enum gx_status
row_tuple(struct gx_buf *b, const struct pr_usage_row *r)
{
    enum gx_status st = gx_buf_printf(b, "(%lld, ", (long long)r->ts_ms);
    if (st == GX_OK)
        st = lit(b, r->request_id);
    if (st == GX_OK)
        st = gx_buf_append(b, ", ", 2);
    if (st == GX_OK)
        st = opt_i64(b, r->key_id, 0);
    const char *txt[3] = {r->route, r->provider, r->model};
    for (int i = 0; st == GX_OK && i < 3; i++) {
        st = gx_buf_append(b, ", ", 2);
        if (st == GX_OK)
            st = lit(b, txt[i]);
    }
    if (st == GX_OK)
        st = gx_buf_printf(b, ", %d, %d, %d, %lld, %lld, %lld, %lld, %lld, ",
                           r->status, r->attempts, r->stream ? 1 : 0,
                           (long long)r->prompt_tokens,
                           (long long)r->completion_tokens,
                           (long long)r->cached_tokens,
                           (long long)r->cost_pusd, (long long)r->latency_ms);
    if (st == GX_OK)
        st = opt_i64(b, r->ttft_ms, 0);
    if (st == GX_OK)
        st = gx_buf_append(b, ", ", 2);
    if (st == GX_OK)
        st = lit(b, r->usage_source ? r->usage_source : "estimated");
    if (st == GX_OK)
        st = gx_buf_append(b, ", ", 2);
    if (st == GX_OK)
        st = lit(b, r->error);
    if (st == GX_OK)
        st = gx_buf_append(b, ", ", 2);
    if (st == GX_OK)
        st = lit(b, r->api ? r->api : "chat");
    if (st == GX_OK)
        st = gx_buf_printf(b, ", %lld, %lld, %d)",
                           (long long)r->cache_write_tokens,
                           (long long)r->reasoning_tokens,
                           r->unpriced ? 1 : 0);
    return st;
}

/* ------------------------------------------------------------------ */
/* The writer.                                                          */

struct pg_ledger {
    char *database;
    char *spool_path;
    enum pr_unavailable mode;
    PGconn *conn; /* writer thread only (and open/close) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv, idle_cv;
    struct pr_qrow *head, *tail; /* guarded by mu */
    size_t queued, queue_max;    /* guarded by mu */
    int stopping, busy;          /* guarded by mu */
    int lock_timeout_ms;
    int migrations_applied;
    _Atomic int down; /* the last attempt could not reach the database */
    struct pr_budget *_Atomic budget; /* leased budgets, or NULL */
    _Atomic int64_t n_rows, n_commits, n_failed, n_spooled, n_replayed;
};

struct key_spend {
    int64_t key_id, cost;
};

static int
cmp_spend(const void *a, const void *b)
{
    const struct key_spend *x = a, *y = b;
    return (x->key_id > y->key_id) - (x->key_id < y->key_id);
}

static int
cmp_cell(const void *a, const void *b)
{
    const struct pr_cell *x = *(const struct pr_cell *const *)a;
    const struct pr_cell *y = *(const struct pr_cell *const *)b;
    if (x->gran != y->gran)
        return x->gran - y->gran;
    if (x->dim != y->dim)
        return x->dim - y->dim;
    if (x->key_id != y->key_id)
        return (x->key_id > y->key_id) - (x->key_id < y->key_id);
    if (x->t_ms != y->t_ms)
        return (x->t_ms > y->t_ms) - (x->t_ms < y->t_ms);
    return strcmp(x->value, y->value);
}

/* The spend of inserted rows, summed per key (sorted by key id). */
struct spends {
    struct key_spend *a;
    size_t n, cap;
};

static int
spends_add(struct spends *s, int64_t key, int64_t cost)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->a[i].key_id == key) {
            s->a[i].cost += cost;
            return 1;
        }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        struct key_spend *na = realloc(s->a, nc * sizeof(*na));
        if (!na)
            return 0;
        s->a = na;
        s->cap = nc;
    }
    s->a[s->n].key_id = key;
    s->a[s->n].cost = cost;
    s->n++;
    return 1;
}

/* Upserts the cells (sorted: a fixed lock order) in statements of up to
 * PG_CHUNK_ROWS cells. */
static int
write_cells(PGconn *c, const struct pr_cells *cells, char *err, size_t errlen)
{
    if (cells->n == 0)
        return 0;
    const struct pr_cell **v = malloc(cells->n * sizeof(*v));
    if (!v) {
        gx_errf(err, errlen, "out of memory");
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < cells->cap; i++)
        if (cells->a[i].value)
            v[n++] = &cells->a[i];
    qsort(v, n, sizeof(*v), cmp_cell);
    struct gx_buf b;
    gx_buf_init(&b, 64u << 20);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n;) {
        int gran = v[i]->gran;
        const char *tab = gran ? "usage_daily" : "usage_hourly";
        const char *tcol = gran ? "day_ms" : "hour_ms";
        gx_buf_reset(&b);
        enum gx_status st = gx_buf_printf(
            &b,
            "INSERT INTO %s (dim, key_id, %s, value, requests, errors,"
            " prompt_tokens, completion_tokens, cached_tokens, cost_pusd,"
            " latency_sum_ms",
            tab, tcol);
        for (int h = 0; st == GX_OK && h < PR_LAT_NBUCKETS; h++)
            st = gx_buf_printf(&b, ", h%d", h);
        if (st == GX_OK)
            st = gx_buf_printf(&b, ", unpriced, cache_write_tokens,"
                                   " reasoning_tokens) VALUES ");
        size_t k = 0;
        for (; st == GX_OK && i < n && v[i]->gran == gran && k < PG_CHUNK_ROWS;
             i++, k++) {
            const struct pr_cell *x = v[i];
            st = gx_buf_printf(&b, "%s('%s', %lld, %lld, ", k ? ", " : "",
                               pr_dim_names[x->dim], (long long)x->key_id,
                               (long long)x->t_ms);
            if (st == GX_OK)
                st = lit(&b, x->value);
            if (st == GX_OK)
                st = gx_buf_printf(
                    &b, ", %lld, %lld, %lld, %lld, %lld, %lld, %lld",
                    (long long)x->requests, (long long)x->errors,
                    (long long)x->prompt, (long long)x->completion,
                    (long long)x->cached, (long long)x->cost,
                    (long long)x->lat_sum);
            for (int h = 0; st == GX_OK && h < PR_LAT_NBUCKETS; h++)
                st = gx_buf_printf(&b, ", %lld", (long long)x->hist[h]);
            if (st == GX_OK)
                st = gx_buf_printf(&b, ", %lld, %lld, %lld)",
                                   (long long)x->unpriced,
                                   (long long)x->cache_write,
                                   (long long)x->reasoning);
        }
        if (st == GX_OK)
            st = gx_buf_printf(
                &b,
                " ON CONFLICT (dim, key_id, %s, value) DO UPDATE SET"
                " requests = %s.requests + excluded.requests,"
                " errors = %s.errors + excluded.errors,"
                " prompt_tokens = %s.prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = %s.completion_tokens +"
                " excluded.completion_tokens,"
                " cached_tokens = %s.cached_tokens + excluded.cached_tokens,"
                " cost_pusd = %s.cost_pusd + excluded.cost_pusd,"
                " latency_sum_ms = %s.latency_sum_ms +"
                " excluded.latency_sum_ms",
                tcol, tab, tab, tab, tab, tab, tab, tab);
        for (int h = 0; st == GX_OK && h < PR_LAT_NBUCKETS; h++)
            st = gx_buf_printf(&b, ", h%d = %s.h%d + excluded.h%d", h, tab, h,
                               h);
        if (st == GX_OK)
            st = gx_buf_printf(&b,
                               ", unpriced = %s.unpriced + excluded.unpriced,"
                               " cache_write_tokens = %s.cache_write_tokens +"
                               " excluded.cache_write_tokens,"
                               " reasoning_tokens = %s.reasoning_tokens +"
                               " excluded.reasoning_tokens",
                               tab, tab, tab);
        if (st != GX_OK) {
            gx_errf(err, errlen, "out of memory");
            rc = -1;
        } else {
            rc = pg_run(c, b.data, PGRES_COMMAND_OK, NULL, err, errlen);
        }
    }
    gx_buf_cleanup(&b);
    free(v);
    return rc;
}

/* Writes tuples[0..n) (row_tuple texts) in one transaction with their
 * keys' spend and rollup cells.  *inserted: rows new to the database
 * (the rest were there already: a retry or a replay).  0 on commit. */
static int
write_tuples(PGconn *c, char *const *tuples, size_t n, int64_t *inserted,
             const char *instance, struct spends *sp_out, char *err,
             size_t errlen)
{
    struct pr_cells cells = {NULL, 0, 0};
    struct spends sp = {NULL, 0, 0};
    struct gx_buf b;
    gx_buf_init(&b, 256u << 20);
    int rc = pg_run(c, "BEGIN", PGRES_COMMAND_OK, NULL, err, errlen);
    int64_t ins = 0;
    for (size_t i = 0; rc == 0 && i < n;) {
        gx_buf_reset(&b);
        enum gx_status st =
            gx_buf_printf(&b, "INSERT INTO usage (" USAGE_COLS ") VALUES ");
        for (size_t k = 0; st == GX_OK && i < n && k < PG_CHUNK_ROWS; i++, k++) {
            if (k)
                st = gx_buf_append(&b, ", ", 2);
            if (st == GX_OK)
                st = gx_buf_append(&b, tuples[i], strlen(tuples[i]));
        }
        if (st == GX_OK)
            st = gx_buf_printf(
                &b, " ON CONFLICT (request_id) DO NOTHING RETURNING ts_ms,"
                    " key_id, model, provider, route, status, prompt_tokens,"
                    " completion_tokens, cached_tokens, cost_pusd,"
                    " latency_ms, unpriced, cache_write_tokens,"
                    " reasoning_tokens");
        PGresult *r = NULL;
        if (st != GX_OK) {
            gx_errf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        rc = pg_run(c, b.data, PGRES_TUPLES_OK, &r, err, errlen);
        for (int j = 0; rc == 0 && j < PQntuples(r); j++) {
            struct pr_usage_row row;
            memset(&row, 0, sizeof(row));
            row.ts_ms = val_i64(r, j, 0, 0);
            row.key_id = val_i64(r, j, 1, -1);
            row.model = PQgetisnull(r, j, 2) ? NULL : PQgetvalue(r, j, 2);
            row.provider = PQgetisnull(r, j, 3) ? NULL : PQgetvalue(r, j, 3);
            row.route = PQgetisnull(r, j, 4) ? NULL : PQgetvalue(r, j, 4);
            row.status = (int)val_i64(r, j, 5, 0);
            row.prompt_tokens = val_i64(r, j, 6, 0);
            row.completion_tokens = val_i64(r, j, 7, 0);
            row.cached_tokens = val_i64(r, j, 8, 0);
            row.cost_pusd = val_i64(r, j, 9, 0);
            row.latency_ms = val_i64(r, j, 10, 0);
            row.unpriced = (int)val_i64(r, j, 11, 0);
            row.cache_write_tokens = val_i64(r, j, 12, 0);
            row.reasoning_tokens = val_i64(r, j, 13, 0);
            if (!pr_cells_add_row(&cells, &row) ||
                (row.key_id >= 0 && row.cost_pusd > 0 &&
                 !spends_add(&sp, row.key_id, row.cost_pusd))) {
                gx_errf(err, errlen, "out of memory");
                rc = -1;
            }
            ins++;
        }
        PQclear(r);
    }
    if (rc == 0 && sp.n) {
        qsort(sp.a, sp.n, sizeof(*sp.a), cmp_spend);
        gx_buf_reset(&b);
        enum gx_status st = GX_OK;
        for (size_t i = 0; st == GX_OK && i < sp.n; i++) {
            long long cost = (long long)sp.a[i].cost,
                      key = (long long)sp.a[i].key_id;
            if (!instance) {
                st = gx_buf_printf(&b,
                                   "UPDATE keys SET spent_pusd = spent_pusd +"
                                   " %lld WHERE id = %lld;",
                                   cost, key);
                continue;
            }
            /* The cost leaves this instance's lease for spent, in the
             * rows' transaction: keys row first, then the lease row (the
             * lock order pr_pg_lease_sync uses too). */
            st = gx_buf_printf(
                &b,
                "UPDATE keys SET spent_pusd = spent_pusd + %lld,"
                " reserved_pusd = GREATEST(reserved_pusd - LEAST(%lld,"
                " COALESCE((SELECT amount FROM budget_leases WHERE"
                " instance = '%s' AND key_id = %lld), 0)), 0)"
                " WHERE id = %lld;"
                "UPDATE budget_leases SET amount = GREATEST(amount - %lld, 0)"
                " WHERE instance = '%s' AND key_id = %lld;",
                cost, cost, instance, key, key, cost, instance, key);
        }
        rc = st != GX_OK ? -1
                         : pg_run(c, b.data, PGRES_COMMAND_OK, NULL, err,
                                  errlen);
    }
    if (rc == 0)
        rc = write_cells(c, &cells, err, errlen);
    if (rc == 0)
        rc = pg_run(c, "COMMIT", PGRES_COMMAND_OK, NULL, err, errlen);
    if (rc != 0 && PQstatus(c) == CONNECTION_OK &&
        PQtransactionStatus(c) != PQTRANS_IDLE)
        pg_run(c, "ROLLBACK", PGRES_COMMAND_OK, NULL, NULL, 0);
    if (rc == 0 && inserted)
        *inserted = ins;
    pr_cells_reset(&cells);
    if (rc == 0 && sp_out) {
        *sp_out = sp;
        sp.a = NULL;
    }
    free(sp.a);
    gx_buf_cleanup(&b);
    return rc;
}

/* The rows of a batch as tuple texts (NULL on allocation failure). */
static char **
batch_tuples(struct pr_qrow *batch, size_t *n_out)
{
    size_t n = 0;
    for (struct pr_qrow *q = batch; q; q = q->next)
        n++;
    char **t = calloc(n ? n : 1, sizeof(*t));
    if (!t)
        return NULL;
    size_t i = 0;
    for (struct pr_qrow *q = batch; q; q = q->next, i++) {
        struct gx_buf b;
        gx_buf_init(&b, 1u << 20);
        if (row_tuple(&b, &q->row) != GX_OK || !b.data) {
            gx_buf_cleanup(&b);
            for (size_t j = 0; j < i; j++)
                free(t[j]);
            free(t);
            return NULL;
        }
        t[i] = b.data; /* gx_buf's storage, now ours */
    }
    *n_out = n;
    return t;
}

static void
tuples_free(char **t, size_t n)
{
    for (size_t i = 0; t && i < n; i++)
        free(t[i]);
    free(t);
}

/* ---- the spool ---------------------------------------------------- */

/* The instance id goes into SQL text: budget.c makes it from hex digits;
 * refuse anything else rather than escape it. */
static int
instance_ok(const char *s)
{
    if (!s || !*s || strlen(s) > 39)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
              *s == '-'))
            return 0;
    return 1;
}


static int
spool_append(struct pg_ledger *l, char *const *t, size_t n)
{
    int fd = open(l->spool_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                  0600);
    if (fd < 0) {
        GX_LOG(GX_LOG_ERROR, NULL, "ledger spool %s: %s", l->spool_path,
               strerror(errno));
        return -1;
    }
    struct stat sb;
    int rc = fstat(fd, &sb) == 0 && sb.st_size < PG_SPOOL_MAX ? 0 : -1;
    struct gx_buf b;
    gx_buf_init(&b, 256u << 20);
    /* Each record names the instance whose budget lease paid for the row
     * (leased mode), so the replay moves the cost off that lease. */
    const char *inst = pr_budget_instance(atomic_load(&l->budget));
    if (!instance_ok(inst))
        inst = NULL;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (gx_buf_printf(&b, "R %zu%s%s\n%s\n", strlen(t[i]),
                          inst ? " " : "", inst ? inst : "",
                          t[i]) != GX_OK)
            rc = -1;
    for (size_t off = 0; rc == 0 && off < b.len;) {
        ssize_t w = write(fd, b.data + off, b.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = -1;
            break;
        }
        off += (size_t)w;
    }
    if (rc != 0)
        GX_LOG(GX_LOG_ERROR, NULL, "ledger spool %s: cannot append",
               l->spool_path);
    gx_buf_cleanup(&b);
    close(fd);
    return rc;
}

/* Replays the spool, then empties it: one transaction per instance
 * that spooled rows (records name it; none in fail-over from an
 * unleased ledger), each moving its rows' cost off that instance's
 * budget lease as a live commit does, so a replay charges the budget
 * once, in the lease that paid for it.  A lease already reclaimed (the
 * instance was silent for PR_LEASE_STALE_MS while the database was up)
 * is gone: then the cost only adds to spent (README: the bound).  0 when
 * there was nothing or every transaction committed. */
static int
spool_replay(struct pg_ledger *l)
{
    FILE *f = fopen(l->spool_path, "r");
    if (!f)
        return 0;
    char **t = NULL;
    char (*inst)[40] = NULL; /* per record; "" = none */
    size_t n = 0, cap = 0;
    int rc = 0;
    char hdr[96];
    while (fgets(hdr, sizeof(hdr), f)) {
        char *end = NULL;
        if (hdr[0] != 'R' || hdr[1] != ' ')
            break;
        size_t len = strtoull(hdr + 2, &end, 10);
        char who[40] = "";
        if (end && *end == ' ') { /* "R <len> <instance>\n" */
            size_t wl = strcspn(end + 1, "\n");
            if (wl >= sizeof(who))
                break;
            memcpy(who, end + 1, wl);
            who[wl] = '\0';
            end += 1 + wl;
            if (!instance_ok(who))
                break;
        }
        if (!end || *end != '\n' || len > (64u << 20))
            break;
        char *s = malloc(len + 2);
        if (!s) {
            rc = -1;
            break;
        }
        if (fread(s, 1, len + 1, f) != len + 1 || s[len] != '\n') {
            free(s); /* torn last record: never acknowledged */
            break;
        }
        s[len] = '\0';
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            char **nt = realloc(t, nc * sizeof(*nt));
            if (nt)
                t = nt;
            char(*ni)[40] = nt ? realloc(inst, nc * sizeof(*ni)) : NULL;
            if (!nt || !ni) {
                free(s);
                rc = -1;
                break;
            }
            inst = ni;
            cap = nc;
        }
        memcpy(inst[n], who, sizeof(who));
        t[n++] = s;
    }
    fclose(f);
    char err[512];
    int64_t ins = 0;
    struct pr_budget *bud = atomic_load(&l->budget);
    const char *self = pr_budget_instance(bud);
    /* Records of one instance are contiguous runs in practice; sort them
     * into groups without reordering within a group. */
    char **g = rc == 0 && n ? malloc(n * sizeof(*g)) : NULL;
    if (n && !g)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!t[i])
            continue; /* taken by an earlier group */
        const char *who = inst[i];
        size_t k = 0;
        for (size_t j = i; j < n; j++)
            if (t[j] && strcmp(inst[j], who) == 0) {
                g[k++] = t[j];
                t[j] = NULL;
            }
        struct spends sp = {NULL, 0, 0};
        int64_t gi = 0;
        rc = write_tuples(l->conn, g, k, &gi, who[0] ? who : NULL, &sp, err,
                          sizeof(err));
        if (rc != 0)
            GX_LOG(GX_LOG_WARN, NULL, "ledger spool replay: %s", err);
        else if (self && strcmp(self, who) == 0)
            for (size_t x = 0; x < sp.n; x++) /* our own lease, in memory */
                pr_budget_committed(bud, sp.a[x].key_id, sp.a[x].cost);
        free(sp.a);
        ins += gi;
        for (size_t j = 0; j < k; j++)
            free(g[j]);
    }
    free(g);
    if (rc == 0) {
        /* Committed: a crash before this truncate replays the file again,
         * which inserts (and charges) nothing twice. */
        if (truncate(l->spool_path, 0) != 0 && errno != ENOENT)
            GX_LOG(GX_LOG_ERROR, NULL, "ledger spool %s: %s", l->spool_path,
                   strerror(errno));
        if (n > 0) {
            atomic_fetch_add(&l->n_replayed, ins);
            atomic_fetch_add(&l->n_rows, ins);
            GX_LOG(GX_LOG_INFO, NULL,
                   "ledger: replayed %zu spooled rows (%lld new)", n,
                   (long long)ins);
        }
    }
    tuples_free(t, n);
    free(inst);
    return rc;
}

/* A working connection (reconnecting when needed); 0 when connected. */
static int
ensure_conn(struct pg_ledger *l, char *err, size_t errlen)
{
    if (l->conn && PQstatus(l->conn) == CONNECTION_OK)
        return 0;
    if (l->conn) {
        PQreset(l->conn);
        if (PQstatus(l->conn) == CONNECTION_OK)
            goto connected;
        conn_err(err, errlen, "postgres reconnect", l->conn);
        PQfinish(l->conn);
        l->conn = NULL;
        return -1;
    }
    l->conn = pg_connect(l->database, err, errlen);
    if (!l->conn)
        return -1;
connected:
    if (l->mode == PR_UNAVAILABLE_SPOOL && spool_replay(l) != 0)
        return -1;
    if (atomic_exchange(&l->down, 0))
        GX_LOG(GX_LOG_WARN, NULL, "ledger: the database is reachable again");
    return 0;
}

static void
finish_batch(struct pg_ledger *l, struct pr_qrow *batch, int ok)
{
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

/* One attempt at committing tuples t[0..n): 0 committed, 1 the server
 * refused it (a bad row, a deadlock), -1 the database is unreachable. */
static int
try_commit(struct pg_ledger *l, char *const *t, size_t n, char *err,
           size_t errlen)
{
    if (ensure_conn(l, err, errlen) != 0)
        return -1;
    int64_t ins = 0;
    struct pr_budget *bud = atomic_load(&l->budget);
    struct spends sp = {NULL, 0, 0};
    if (write_tuples(l->conn, t, n, &ins, pr_budget_instance(bud), &sp, err,
                     errlen) != 0)
        return PQstatus(l->conn) == CONNECTION_OK ? 1 : -1;
    for (size_t i = 0; i < sp.n; i++)
        pr_budget_committed(bud, sp.a[i].key_id, sp.a[i].cost);
    free(sp.a);
    atomic_fetch_add(&l->n_rows, ins);
    atomic_fetch_add(&l->n_commits, 1);
    if (atomic_exchange(&l->down, 0))
        GX_LOG(GX_LOG_WARN, NULL, "ledger: the database is reachable again");
    return 0;
}

static void
write_batch(struct pg_ledger *l, struct pr_qrow *batch)
{
    size_t n = 0;
    char **t = batch_tuples(batch, &n);
    if (!t) {
        GX_LOG(GX_LOG_ERROR, NULL, "ledger: out of memory");
        finish_batch(l, batch, 0);
        return;
    }
    char err[512] = "";
    int64_t deadline = gx_mono_us() + (int64_t)l->lock_timeout_ms * 1000;
    int rc, refusals = 0;
    for (;;) {
        rc = try_commit(l, t, n, err, sizeof(err));
        if (rc == 0)
            break;
        if (rc > 0) {
            /* The server answered with an error: a deadlock or a
             * serialization failure passes on a retry, a bad row not. */
            if (++refusals >= 3)
                break;
            continue;
        }
        if (!atomic_exchange(&l->down, 1))
            GX_LOG(GX_LOG_ERROR, NULL, "ledger: %s", err);
        if (gx_mono_us() >= deadline)
            break;
        usleep(PG_RETRY_SLEEP_US);
    }
    if (rc > 0 && n > 1) {
        /* A bad row fails its whole transaction; it must not take its
         * neighbours down: write them one by one. */
        GX_LOG(GX_LOG_ERROR, NULL, "ledger: %s; writing the batch's %zu rows"
               " one by one", err, n);
        size_t i = 0;
        for (struct pr_qrow *q = batch; q; i++) {
            struct pr_qrow *next = q->next;
            q->next = NULL;
            int r1 = try_commit(l, &t[i], 1, err, sizeof(err));
            if (r1 != 0)
                GX_LOG(GX_LOG_ERROR, q->row.request_id,
                       "ledger: row not committed: %s", err);
            finish_batch(l, q, r1 == 0);
            q = next;
        }
        tuples_free(t, n);
        return;
    }
    int ok = rc == 0;
    if (!ok && rc < 0 && l->mode == PR_UNAVAILABLE_SPOOL &&
        spool_append(l, t, n) == 0) {
        atomic_fetch_add(&l->n_spooled, (int64_t)n);
        ok = 1;
    } else if (!ok) {
        GX_LOG(GX_LOG_ERROR, NULL, "ledger: %zu rows not committed: %s", n,
               err);
    }
    tuples_free(t, n);
    finish_batch(l, batch, ok);
}

static void *
pg_writer_main(void *arg)
{
    struct pg_ledger *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->head && !l->stopping) {
            if (atomic_load(&l->down)) {
                /* Probe while down, so admission reopens (and the spool
                 * replays) without waiting for a row. */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += PG_DOWN_PROBE_MS * 1000000L;
                ts.tv_sec += ts.tv_nsec / 1000000000L;
                ts.tv_nsec %= 1000000000L;
                if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) != 0 &&
                    !l->head) {
                    l->busy = 1;
                    pthread_mutex_unlock(&l->mu);
                    char err[512];
                    ensure_conn(l, err, sizeof(err));
                    pthread_mutex_lock(&l->mu);
                    l->busy = 0;
                    pthread_cond_broadcast(&l->idle_cv);
                }
            } else {
                pthread_cond_wait(&l->cv, &l->mu);
            }
        }
        if (!l->head && l->stopping)
            break;
        struct pr_qrow *batch = l->head;
        l->head = l->tail = NULL;
        l->queued = 0;
        l->busy = 1;
        pthread_mutex_unlock(&l->mu);
        write_batch(l, batch);
        pthread_mutex_lock(&l->mu);
        l->busy = 0;
        pthread_cond_broadcast(&l->idle_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void
pg_ledger_destroy(struct pg_ledger *l)
{
    PQfinish(l->conn);
    free(l->database);
    free(l->spool_path);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    pthread_cond_destroy(&l->idle_cv);
    free(l);
}

static enum gx_status
pg_open(const char *database, const struct pr_ledger_opts *opts, void **out,
        char *err, size_t errlen)
{
    struct pg_ledger *l = calloc(1, sizeof(*l));
    if (!l) {
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_cond_init(&l->idle_cv, NULL);
    l->queue_max = opts && opts->queue_max ? opts->queue_max : 65536;
    l->lock_timeout_ms =
        opts && opts->lock_timeout_ms > 0 ? opts->lock_timeout_ms : 10000;
    l->mode = opts ? opts->unavailable : PR_UNAVAILABLE_FAIL;
    l->database = strdup(database);
    l->spool_path = strdup(opts && opts->spool_path ? opts->spool_path
                                                    : "llmux-spool.jsonl");
    enum gx_status st = GX_ENOMEM;
    if (!l->database || !l->spool_path) {
        gx_errf(err, errlen, "out of memory");
        goto fail;
    }
    st = GX_EIO;
    /* At start the database must answer, whatever the mode: migrations
     * and the keys need it. */
    l->conn = pg_connect(database, err, errlen);
    if (!l->conn)
        goto fail;
    st = pg_migrate(l->conn, &l->migrations_applied, err, errlen);
    if (st != GX_OK)
        goto fail;
    if (l->mode == PR_UNAVAILABLE_SPOOL && spool_replay(l) != 0) {
        gx_errf(err, errlen, "the spool %s could not be replayed",
                l->spool_path);
        st = GX_EIO;
        goto fail;
    }
    if (pthread_create(&l->thread, NULL, pg_writer_main, l) != 0) {
        gx_errf(err, errlen, "cannot start the ledger writer thread");
        st = GX_ENOMEM;
        goto fail;
    }
    *out = l;
    return GX_OK;
fail:
    pg_ledger_destroy(l);
    return st;
}

static void
pg_close(void *be)
{
    struct pg_ledger *l = be;
    pthread_mutex_lock(&l->mu);
    l->stopping = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pg_ledger_destroy(l);
}

static enum gx_status
pg_submit(void *be, const struct pr_usage_row *row, pr_commit_cb cb, void *ud)
{
    struct pg_ledger *l = be;
    struct pr_qrow *q = pr_qrow_new(row, cb, ud);
    if (!q)
        return GX_ENOMEM;
    enum gx_status st = GX_OK;
    pthread_mutex_lock(&l->mu);
    if (l->stopping)
        st = GX_ECANCELED;
    else if (l->queued >= l->queue_max)
        st = GX_EAGAIN;
    if (st == GX_OK) {
        if (l->tail)
            l->tail->next = q;
        else
            l->head = q;
        l->tail = q;
        l->queued++;
        pthread_cond_signal(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    if (st != GX_OK)
        free(q);
    return st;
}

static void
pg_flush(void *be)
{
    struct pg_ledger *l = be;
    pthread_mutex_lock(&l->mu);
    while (l->head || l->busy)
        pthread_cond_wait(&l->idle_cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

static void
pg_stats(void *be, struct pr_ledger_stats *out)
{
    struct pg_ledger *l = be;
    out->rows = atomic_load(&l->n_rows);
    out->commits = atomic_load(&l->n_commits);
    out->failed = atomic_load(&l->n_failed);
    out->spooled = atomic_load(&l->n_spooled);
    out->replayed = atomic_load(&l->n_replayed);
    out->migrations_applied = l->migrations_applied;
    pthread_mutex_lock(&l->mu);
    out->queued = (int64_t)l->queued;
    pthread_mutex_unlock(&l->mu);
}

static const char *
pg_path(void *be)
{
    return ((struct pg_ledger *)be)->database;
}

static void
pg_attach_budget(void *be, struct pr_budget *b)
{
    atomic_store(&((struct pg_ledger *)be)->budget, b);
}

static int
pg_available(void *be)
{
    struct pg_ledger *l = be;
    return l->mode == PR_UNAVAILABLE_SPOOL || !atomic_load(&l->down);
}

/* ------------------------------------------------------------------ */
/* ------------------------------------------------------------------ */
/* The blocking calls' connection: one per calling thread, kept between */
/* calls (the aux thread makes several a second: key reload, lease      */
/* syncs, usage queries; a new connection is a new server process).     */
/* Checked with an empty query before each use, dropped when broken,    */
/* closed by the thread-exit destructor.                                */

struct aux_cached {
    PGconn *conn;
    char *database;
};

static pthread_key_t aux_key;
static pthread_once_t aux_once = PTHREAD_ONCE_INIT;

static void
aux_free(void *p)
{
    struct aux_cached *a = p;
    if (!a)
        return;
    PQfinish(a->conn);
    free(a->database);
    free(a);
}

static void
aux_init(void)
{
    pthread_key_create(&aux_key, aux_free);
}

static PGconn *
aux_conn(const char *database, char *err, size_t errlen)
{
    pthread_once(&aux_once, aux_init);
    struct aux_cached *a = pthread_getspecific(aux_key);
    if (a && a->conn && strcmp(a->database, database) == 0 &&
        PQstatus(a->conn) == CONNECTION_OK) {
        PGresult *r = PQexec(a->conn, "");
        int alive = r && PQresultStatus(r) == PGRES_EMPTY_QUERY;
        PQclear(r);
        if (alive)
            return a->conn;
    }
    if (a) {
        pthread_setspecific(aux_key, NULL);
        aux_free(a);
    }
    PGconn *c = pg_connect(database, err, errlen);
    if (!c)
        return NULL;
    a = calloc(1, sizeof(*a));
    if (a && (a->database = strdup(database)) != NULL &&
        pthread_setspecific(aux_key, a) == 0) {
        a->conn = c;
        return c;
    }
    if (a)
        free(a->database);
    free(a);
    return c; /* uncached: aux_done closes it */
}

/* After a call: a broken or uncached connection is closed. */
static void
aux_done(PGconn *c)
{
    if (!c)
        return;
    struct aux_cached *a = pthread_getspecific(aux_key);
    if (!a || a->conn != c) {
        PQfinish(c);
        return;
    }
    if (PQstatus(c) != CONNECTION_OK ||
        PQtransactionStatus(c) != PQTRANS_IDLE) {
        pthread_setspecific(aux_key, NULL);
        aux_free(a);
    }
}

/* Budget leases (budget.c's leased mode).                              */

enum gx_status
pr_pg_lease_sync(const char *database, const char *instance,
                 struct pr_lease_item *it, size_t n, char *err,
                 size_t errlen)
{
    if (!instance_ok(instance)) {
        gx_errf(err, errlen, "bad instance id");
        return GX_EINVAL;
    }
    PGconn *c = aux_conn(database, err, errlen);
    if (!c)
        return GX_EIO;
    int64_t now = gx_now_ms();
    char sql[2048];
    /* Leases of instances silent for PR_LEASE_STALE_MS go back to their
     * budgets (keys rows first, then the lease rows: the writer's lock
     * order).  Silent while the server was up: after a restart every
     * instance gets PR_LEASE_STALE_MS to renew its lease and replay its
     * spool (which moves the spooled rows' cost off that lease) before
     * anything is reclaimed. */
    char up[160];
    snprintf(up, sizeof(up),
             " AND now() - pg_postmaster_start_time() > interval '%d"
             " milliseconds'",
             PR_LEASE_STALE_MS);
    snprintf(sql, sizeof(sql),
             "BEGIN;"
             "UPDATE keys SET reserved_pusd = GREATEST(reserved_pusd -"
             " d.amount, 0) FROM (SELECT key_id, sum(amount) AS amount FROM"
             " budget_leases WHERE renewed_ms < %lld AND instance <> '%s'%s"
             " GROUP BY key_id ORDER BY key_id) d WHERE keys.id = d.key_id;"
             "DELETE FROM budget_leases WHERE renewed_ms < %lld AND"
             " instance <> '%s'%s;"
             "COMMIT",
             (long long)(now - PR_LEASE_STALE_MS), instance, up,
             (long long)(now - PR_LEASE_STALE_MS), instance, up);
    enum gx_status rs = GX_OK;
    if (pg_run(c, sql, PGRES_COMMAND_OK, NULL, err, errlen) != 0) {
        pg_run(c, "ROLLBACK", PGRES_COMMAND_OK, NULL, NULL, 0);
        rs = GX_EIO;
    }
    for (size_t i = 0; i < n && PQstatus(c) == CONNECTION_OK; i++) {
        struct pr_lease_item *x = &it[i];
        long long key = (long long)x->key_id;
        PGresult *r = NULL;
        /* The lease row (creating it, and telling whether it was gone). */
        snprintf(sql, sizeof(sql),
                 "BEGIN; SELECT reserved_pusd FROM keys WHERE id = %lld FOR"
                 " UPDATE; INSERT INTO budget_leases VALUES ('%s', %lld, 0,"
                 " %lld) ON CONFLICT (instance, key_id) DO UPDATE SET"
                 " renewed_ms = excluded.renewed_ms RETURNING (xmax = 0)",
                 key, instance, key, (long long)now);
        if (pg_run(c, sql, PGRES_TUPLES_OK, &r, err, errlen) != 0)
            goto fail;
        x->lost = PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
        PQclear(r);
        r = NULL;
        if (x->give_back > 0 && !x->lost) {
            snprintf(sql, sizeof(sql),
                     "UPDATE keys SET reserved_pusd = GREATEST(reserved_pusd"
                     " - LEAST(%lld, (SELECT amount FROM budget_leases WHERE"
                     " instance = '%s' AND key_id = %lld)), 0) WHERE id ="
                     " %lld; UPDATE budget_leases SET amount = GREATEST(amount"
                     " - %lld, 0) WHERE instance = '%s' AND key_id = %lld",
                     (long long)x->give_back, instance, key, key,
                     (long long)x->give_back, instance, key);
            if (pg_run(c, sql, PGRES_COMMAND_OK, NULL, err, errlen) != 0)
                goto fail;
        }
        x->granted = 0;
        if (x->want > 0) {
            /* Atomic: the grant is what is left, at most want, and the
             * UPDATE's WHERE holds it to spent + reserved + grant <=
             * budget on the row's latest version (which we also hold
             * locked since BEGIN), so concurrent instances never lease
             * past the budget. */
            snprintf(sql, sizeof(sql),
                     "WITH old AS (SELECT id, LEAST(%lld, budget_pusd -"
                     " spent_pusd - reserved_pusd) AS g FROM keys WHERE id ="
                     " %lld AND revoked_ms IS NULL AND budget_pusd IS NOT"
                     " NULL), up AS (UPDATE keys SET reserved_pusd ="
                     " keys.reserved_pusd + old.g FROM old WHERE keys.id ="
                     " old.id AND old.g > 0 AND keys.spent_pusd +"
                     " keys.reserved_pusd + old.g <= keys.budget_pusd"
                     " RETURNING old.g AS g) UPDATE budget_leases SET amount"
                     " = amount + up.g FROM up WHERE instance = '%s' AND"
                     " key_id = %lld RETURNING up.g",
                     (long long)x->want, key, instance, key);
            if (pg_run(c, sql, PGRES_TUPLES_OK, &r, err, errlen) != 0)
                goto fail;
            if (PQntuples(r) == 1)
                x->granted = val_i64(r, 0, 0, 0);
            PQclear(r);
            r = NULL;
        }
        if (pg_run(c, "COMMIT", PGRES_COMMAND_OK, NULL, err, errlen) != 0)
            goto fail;
        x->done = 1;
        continue;
    fail:
        rs = GX_EIO;
        if (PQstatus(c) == CONNECTION_OK)
            pg_run(c, "ROLLBACK", PGRES_COMMAND_OK, NULL, NULL, 0);
    }
    aux_done(c);
    return rs;
}

enum gx_status
pr_pg_rate_sync(const char *database, int64_t window_ms,
                struct pr_lease_item *it, size_t n, char *err, size_t errlen)
{
    PGconn *c = aux_conn(database, err, errlen);
    if (!c)
        return GX_EIO;
    char sql[1024];
    enum gx_status rs = GX_OK;
    /* Old windows are of no use to anyone. */
    snprintf(sql, sizeof(sql),
             "DELETE FROM rate_windows WHERE window_ms < %lld",
             (long long)(window_ms - 120000));
    pg_run(c, sql, PGRES_COMMAND_OK, NULL, NULL, 0);
    for (size_t i = 0; i < n && PQstatus(c) == CONNECTION_OK; i++) {
        struct pr_lease_item *x = &it[i];
        long long key = (long long)x->key_id, w = (long long)window_ms;
        x->granted = 0;
        if (x->want <= 0 && x->give_back <= 0) {
            x->done = 1;
            continue;
        }
        /* Under the row's lock: the grant is what is left of the
         * window, at most want; give_back lowers the count. */
        PGresult *r = NULL;
        if (x->want > 0) {
            /* Create the row (a separate statement: a CTE's INSERT is
             * not visible to its sibling's SELECT). */
            snprintf(sql, sizeof(sql),
                     "INSERT INTO rate_windows VALUES (%lld, %lld, 0) ON"
                     " CONFLICT DO NOTHING",
                     key, w);
            if (pg_run(c, sql, PGRES_COMMAND_OK, NULL, err, errlen) != 0) {
                rs = GX_EIO;
                continue;
            }
            snprintf(sql, sizeof(sql),
                     "WITH old AS (SELECT used, LEAST(%lld, %lld - used) AS g"
                     " FROM rate_windows WHERE key_id = %lld AND window_ms ="
                     " %lld FOR UPDATE) UPDATE rate_windows SET used ="
                     " rate_windows.used + old.g FROM old WHERE key_id ="
                     " %lld AND window_ms = %lld AND old.g > 0 AND"
                     " rate_windows.used + old.g <= %lld RETURNING old.g",
                     (long long)x->want, (long long)x->limit, key, w, key,
                     w, (long long)x->limit);
        } else {
            snprintf(sql, sizeof(sql),
                     "UPDATE rate_windows SET used = GREATEST(used - %lld, 0)"
                     " WHERE key_id = %lld AND window_ms = %lld RETURNING 0",
                     (long long)x->give_back, key, w);
        }
        if (pg_run(c, sql, PGRES_TUPLES_OK, &r, err, errlen) != 0) {
            rs = GX_EIO;
            continue;
        }
        if (x->want > 0 && PQntuples(r) == 1)
            x->granted = val_i64(r, 0, 0, 0);
        PQclear(r);
        x->done = 1;
    }
    aux_done(c);
    return rs;
}

/* ------------------------------------------------------------------ */
/* Keys.                                                                */

static enum gx_status
pg_key_create(const char *database, const struct pr_key *k, int64_t *id_out,
              char *err, size_t errlen)
{
    PGconn *c = aux_conn(database, err, errlen);
    if (!c)
        return GX_EIO;
    char hex[65];
    pr_digest_hex(k->hash, hex);
    struct gx_buf b;
    gx_buf_init(&b, 1u << 20);
    enum gx_status st = gx_buf_printf(
        &b,
        "INSERT INTO keys (name, hash, created_ms, expires_ms, budget_pusd,"
        " rpm, tpm, models) VALUES (");
    if (st == GX_OK)
        st = lit(&b, k->name);
    if (st == GX_OK)
        st = gx_buf_printf(&b, ", '%s', %lld, ", hex,
                           (long long)(k->created_ms ? k->created_ms
                                                     : gx_now_ms()));
    if (st == GX_OK)
        st = opt_i64(&b, k->expires_ms, 0);
    if (st == GX_OK)
        st = gx_buf_append(&b, ", ", 2);
    if (st == GX_OK)
        st = opt_i64(&b, k->budget_pusd, 0);
    if (st == GX_OK)
        st = gx_buf_append(&b, ", ", 2);
    if (st == GX_OK)
        st = opt_i64(&b, k->rpm, 1);
    if (st == GX_OK)
        st = gx_buf_append(&b, ", ", 2);
    if (st == GX_OK)
        st = opt_i64(&b, k->tpm, 1);
    if (st == GX_OK)
        st = gx_buf_append(&b, ", ", 2);
    if (st == GX_OK)
        st = lit(&b, k->models && k->models[0] ? k->models : NULL);
    if (st == GX_OK)
        st = gx_buf_append(&b, ") RETURNING id", 14);
    PGresult *r = NULL;
    enum gx_status rs = GX_EIO;
    if (st != GX_OK) {
        gx_errf(err, errlen, "out of memory");
        rs = GX_ENOMEM;
    } else if (pg_run(c, b.data, PGRES_TUPLES_OK, &r, err, errlen) == 0) {
        *id_out = val_i64(r, 0, 0, -1);
        rs = GX_OK;
    }
    PQclear(r);
    gx_buf_cleanup(&b);
    aux_done(c);
    return rs;
}

static enum gx_status
pg_key_revoke(const char *database, int64_t id, int64_t now_ms, char *err,
              size_t errlen)
{
    PGconn *c = aux_conn(database, err, errlen);
    if (!c)
        return GX_EIO;
    char sql[160];
    snprintf(sql, sizeof(sql),
             "UPDATE keys SET revoked_ms = COALESCE(revoked_ms, %lld)"
             " WHERE id = %lld",
             (long long)now_ms, (long long)id);
    PGresult *r = NULL;
    enum gx_status rs = GX_EIO;
    if (pg_run(c, sql, PGRES_COMMAND_OK, &r, err, errlen) == 0) {
        rs = strcmp(PQcmdTuples(r), "0") == 0 ? GX_ENOTFOUND : GX_OK;
        if (rs == GX_ENOTFOUND)
            gx_errf(err, errlen, "no key with id %lld", (long long)id);
    }
    PQclear(r);
    aux_done(c);
    return rs;
}

static enum gx_status
pg_key_list(const char *database, pr_key_cb cb, void *ud, char *err,
            size_t errlen)
{
    PGconn *c = aux_conn(database, err, errlen);
    if (!c)
        return GX_EIO;
    PGresult *r = NULL;
    enum gx_status rs = GX_EIO;
    if (pg_run(c,
               "SELECT id, name, hash, created_ms, expires_ms, revoked_ms,"
               " budget_pusd, spent_pusd, rpm, tpm, models FROM keys"
               " ORDER BY id",
               PGRES_TUPLES_OK, &r, err, errlen) == 0) {
        rs = GX_OK;
        for (int i = 0; i < PQntuples(r); i++) {
            struct pr_key k;
            memset(&k, 0, sizeof(k));
            k.id = val_i64(r, i, 0, 0);
            k.name = PQgetvalue(r, i, 1);
            if (pr_hex_digest(PQgetvalue(r, i, 2), k.hash))
                memset(k.hash, 0, sizeof(k.hash));
            k.created_ms = val_i64(r, i, 3, 0);
            k.expires_ms = val_i64(r, i, 4, -1);
            k.revoked_ms = val_i64(r, i, 5, -1);
            k.budget_pusd = val_i64(r, i, 6, -1);
            k.spent_pusd = val_i64(r, i, 7, 0);
            k.rpm = val_i64(r, i, 8, 0);
            k.tpm = val_i64(r, i, 9, 0);
            k.models = PQgetisnull(r, i, 10) ? NULL : PQgetvalue(r, i, 10);
            if (cb(ud, &k)) {
                rs = GX_ECANCELED;
                break;
            }
        }
    }
    PQclear(r);
    aux_done(c);
    return rs;
}

/* ------------------------------------------------------------------ */
/* Usage queries: query.c's SQL in PostgreSQL's dialect.  The rollups   */
/* are written in each row's own transaction, so no watermark branch.   */

static enum gx_status
pg_usage_query(const char *database, const struct pr_usage_query *q,
               struct pr_usage_result **out, char *err, size_t errlen)
{
    struct pr_usage_plan pl;
    pr_usage_plan_make(q, &pl);
    struct gx_buf sql;
    gx_buf_init(&sql, 256 * 1024);
    struct pr_usage_result *res = NULL;
    PGresult *r = NULL;
    PGconn *c = NULL;
    enum gx_status rs = pr_usage_sql(q, &pl, 0, 1, &sql);
    if (rs != GX_OK) {
        gx_errf(err, errlen, "internal: query text too long");
        goto out;
    }
    rs = GX_EIO;
    c = aux_conn(database, err, errlen);
    if (!c || pg_run(c, sql.data, PGRES_TUPLES_OK, &r, err, errlen) != 0)
        goto out;
    rs = GX_ENOMEM;
    res = calloc(1, sizeof(*res));
    if (!res)
        goto out;
    size_t cap = 0;
    int is_text = pr_group_is_text(q->group_by);
    for (int i = 0; i < PQntuples(r); i++) {
        struct pr_usage_group *g;
        if (pr_usage_result_add(res, &cap, &g) != GX_OK)
            goto out;
        int64_t v[9], hist[PR_LAT_NBUCKETS];
        for (int j = 0; j < 6; j++)
            v[j] = val_i64(r, i, 1 + j, 0);
        for (int j = 0; j < PR_LAT_NBUCKETS; j++)
            hist[j] = val_i64(r, i, 7 + j, 0);
        for (int j = 6; j < 9; j++)
            v[j] = val_i64(r, i, 1 + PR_LAT_NBUCKETS + j, 0);
        pr_usage_group_fill(g, q->group_by,
                            is_text ? PQgetvalue(r, i, 0) : NULL,
                            is_text ? 0 : val_i64(r, i, 0, -1), v, hist);
    }
    rs = pr_usage_result_finish(res, q->group_by);
    if (rs == GX_OK) {
        *out = res;
        res = NULL;
    }
out:
    pr_usage_result_free(res);
    PQclear(r);
    aux_done(c);
    gx_buf_cleanup(&sql);
    return rs;
}

const struct pr_store_ops pr_store_pg = {
    .name = "postgres",
    .ledger_open = pg_open,
    .ledger_close = pg_close,
    .ledger_submit = pg_submit,
    .ledger_flush = pg_flush,
    .ledger_stats = pg_stats,
    .ledger_path = pg_path,
    .ledger_available = pg_available,
    .ledger_attach_budget = pg_attach_budget,
    .key_create = pg_key_create,
    .key_revoke = pg_key_revoke,
    .key_list = pg_key_list,
    .usage_query = pg_usage_query,
};
