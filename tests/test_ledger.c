/*
 * test_ledger: the SQLite usage ledger on a real temp file: group commit
 * from several threads, exact values, rollups equal to raw sums, key spend,
 * migrations run once, bounded queue, and a fork()+kill -9 durability test.
 */
#include "../pricing/pricing.h"
#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

static void
make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/llmux-ledger-XXXXXX",
             base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void
db_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

static void
rm_db(const char *path)
{
    char b[520]; /* a 512-byte path + "-wal" */
    unlink(path);
    snprintf(b, sizeof(b), "%s-wal", path);
    unlink(b);
    snprintf(b, sizeof(b), "%s-shm", path);
    unlink(b);
}

static int64_t
sql_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = INT64_MIN;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else
        fprintf(stderr, "sql_int(%s): %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return v;
}

/* ------------------------------------------------------------------ */

#define NTHREADS 4
#define PER_THREAD 1500
#define NROWS (NTHREADS * PER_THREAD)

static _Atomic int cb_count[NROWS];
static _Atomic int cb_bad;

static void
count_cb(void *ud, int ok)
{
    intptr_t i = (intptr_t)ud;
    if (i < 0 || i >= NROWS || !ok)
        atomic_fetch_add(&cb_bad, 1);
    else
        atomic_fetch_add(&cb_count[i], 1);
}

static const char *const models[] = {"gpt-4.1", "deepseek-v3.2",
                                     "claude-sonnet-4.5", NULL};
static const char *const providers[] = {"relay", "direct"};
static const char *const routes[] = {"auto", "fast", NULL};

/* Deterministic row i: the test can recompute what it submitted. */
static void
make_row(int i, struct pr_usage_row *r, char *reqid, size_t n)
{
    memset(r, 0, sizeof(*r));
    snprintf(reqid, n, "req-%d", i);
    r->ts_ms = 1764400000000LL + (int64_t)i * 997 * 13; /* spans hours */
    r->request_id = reqid;
    r->key_id = i % 5 == 0 ? -1 : i % 3 + 1;
    r->route = routes[i % 3];
    r->provider = providers[i % 2];
    r->model = models[i % 4];
    r->status = i % 17 == 0 ? 502 : 200;
    r->attempts = 1 + i % 3;
    r->stream = i % 2;
    r->prompt_tokens = 1000 + i * 7;
    r->cached_tokens = (i % 4) * 100;
    r->completion_tokens = 10 + i % 500;
    r->cache_write_tokens = (i % 3) * 50; /* of the uncached prompt */
    r->reasoning_tokens = i % 7;          /* of the completion */
    struct pr_price p = {280000, 28000, 420000};
    pr_cost(&p, r->prompt_tokens, r->cached_tokens, r->completion_tokens,
            &r->cost_pusd);
    if (r->status != 200)
        r->cost_pusd = 0;
    r->latency_ms = (i * 37) % 12000;
    r->ttft_ms = i % 2 ? (i * 11) % 900 : -1;
    r->usage_source = i % 7 == 0 ? "estimated" : "upstream";
    r->error = r->status != 200 ? "all targets failed" : NULL;
}

struct submitter {
    struct pr_ledger *l;
    int first;
    int nfail;
};

static void *
submit_main(void *arg)
{
    struct submitter *s = arg;
    for (int i = s->first; i < s->first + PER_THREAD; i++) {
        struct pr_usage_row r;
        char reqid[32];
        make_row(i, &r, reqid, sizeof(reqid));
        enum gx_status st;
        while ((st = pr_ledger_submit(s->l, &r, count_cb,
                                      (void *)(intptr_t)i)) == GX_EAGAIN)
            usleep(1000);
        if (st != GX_OK)
            s->nfail++;
    }
    return NULL;
}

static void
check_rows_exact(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        db,
        "SELECT ts_ms, request_id, key_id, route, provider, model, status,"
        " attempts, stream, prompt_tokens, completion_tokens, cached_tokens,"
        " cost_pusd, latency_ms, ttft_ms, usage_source, error FROM usage"
        " WHERE request_id = ?1",
        -1, &st, NULL);
    T_EQ_INT(rc, SQLITE_OK);
    if (rc != SQLITE_OK)
        return;
    int bad = 0;
    for (int i = 0; i < NROWS; i++) {
        struct pr_usage_row r;
        char reqid[32];
        make_row(i, &r, reqid, sizeof(reqid));
        sqlite3_bind_text(st, 1, reqid, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_ROW) {
            bad++;
            sqlite3_reset(st);
            continue;
        }
#define TXT(c) ((const char *)sqlite3_column_text(st, c))
#define SAME_TXT(c, s)                                                         \
    ((s) ? (TXT(c) && strcmp(TXT(c), (s)) == 0)                                \
         : sqlite3_column_type(st, c) == SQLITE_NULL)
        int ok = sqlite3_column_int64(st, 0) == r.ts_ms &&
                 SAME_TXT(1, r.request_id) &&
                 (r.key_id < 0 ? sqlite3_column_type(st, 2) == SQLITE_NULL
                               : sqlite3_column_int64(st, 2) == r.key_id) &&
                 SAME_TXT(3, r.route) && SAME_TXT(4, r.provider) &&
                 SAME_TXT(5, r.model) &&
                 sqlite3_column_int(st, 6) == r.status &&
                 sqlite3_column_int(st, 7) == r.attempts &&
                 sqlite3_column_int(st, 8) == r.stream &&
                 sqlite3_column_int64(st, 9) == r.prompt_tokens &&
                 sqlite3_column_int64(st, 10) == r.completion_tokens &&
                 sqlite3_column_int64(st, 11) == r.cached_tokens &&
                 sqlite3_column_int64(st, 12) == r.cost_pusd &&
                 sqlite3_column_int64(st, 13) == r.latency_ms &&
                 (r.ttft_ms < 0 ? sqlite3_column_type(st, 14) == SQLITE_NULL
                                : sqlite3_column_int64(st, 14) == r.ttft_ms) &&
                 SAME_TXT(15, r.usage_source) && SAME_TXT(16, r.error);
#undef TXT
#undef SAME_TXT
        if (!ok) {
            if (bad < 5)
                fprintf(stderr, "row %d differs\n", i);
            bad++;
        }
        if (sqlite3_step(st) != SQLITE_DONE)
            bad++; /* duplicate */
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    T_EQ_INT(bad, 0);
}

/* Every rollup cell equals the SQL sums over the raw rows, including the
 * histogram, for each dimension, per key and for all keys together; and no
 * raw group is missing from the rollup. */
static void
check_rollups(sqlite3 *db)
{
    static const char *const dims[4] = {"none", "model", "provider", "route"};
    static const char *const vals[4] = {"''", "COALESCE(model,'')",
                                        "COALESCE(provider,'')",
                                        "COALESCE(route,'')"};
    static const char *const tables[2] = {"usage_hourly", "usage_daily"};
    static const char *const tcols[2] = {"hour_ms", "day_ms"};
    static const long long spans[2] = {3600000LL, 86400000LL};
    int64_t cells[2] = {0, 0};
    for (int t = 0; t < 2; t++) {
        for (int d = 0; d < 4; d++) {
            for (int all = 0; all < 2; all++) {
                char raw[2048], sql[4096];
                snprintf(
                    raw, sizeof(raw),
                    "SELECT ts_ms - ts_ms %% %lld AS h, %s AS v, %s AS k,"
                    " COUNT(*) AS n, SUM(status < 200 OR status >= 300) AS e,"
                    " SUM(prompt_tokens) AS pt, SUM(completion_tokens) AS ct,"
                    " SUM(cached_tokens) AS cc, SUM(cost_pusd) AS cost,"
                    " SUM(latency_ms) AS ls, SUM(latency_ms < 50) AS b0,"
                    " SUM(latency_ms >= 1000 AND latency_ms < 1500) AS b7,"
                    " SUM(latency_ms >= 7500 AND latency_ms < 10000) AS b12,"
                    " SUM(latency_ms >= 60000) AS b17"
                    " FROM usage GROUP BY 1,2,3",
                    spans[t], vals[d], all ? "-2" : "COALESCE(key_id,-1)");
                snprintf(
                    sql, sizeof(sql),
                    "SELECT COUNT(*) FROM (%s) AS x LEFT JOIN %s u"
                    " ON u.dim = '%s' AND u.%s = x.h AND u.value = x.v"
                    " AND u.key_id = x.k WHERE u.requests IS NULL OR"
                    " u.requests != x.n OR u.errors != x.e OR"
                    " u.prompt_tokens != x.pt OR u.completion_tokens != x.ct"
                    " OR u.cached_tokens != x.cc OR u.cost_pusd != x.cost OR"
                    " u.latency_sum_ms != x.ls OR u.h0 != x.b0 OR"
                    " u.h7 != x.b7 OR u.h12 != x.b12 OR u.h17 != x.b17",
                    raw, tables[t], dims[d], tcols[t]);
                T_EQ_INT(sql_int(db, sql), 0);
                snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM (%s)", raw);
                cells[t] += sql_int(db, sql);
            }
        }
    }
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage_hourly"), cells[0]);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage_daily"), cells[1]);
    T_CHECK(cells[0] > cells[1] && cells[1] > 10);
    /* The histogram columns of each cell add up to its requests. */
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage_hourly WHERE requests !="
                         " h0+h1+h2+h3+h4+h5+h6+h7+h8+h9+h10+h11+h12+h13+h14"
                         "+h15+h16+h17"),
             0);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage_daily WHERE requests !="
                         " h0+h1+h2+h3+h4+h5+h6+h7+h8+h9+h10+h11+h12+h13+h14"
                         "+h15+h16+h17"),
             0);
}

static void
test_group_commit(void)
{
    char path[512];
    db_path(path, sizeof(path), "gc.db");
    rm_db(path);
    char err[256] = "";
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    if (!l) {
        fprintf(stderr, "open: %s\n", err);
        return;
    }
    struct pr_ledger_stats stats;
    pr_ledger_stats(l, &stats);
    T_EQ_INT(stats.migrations_applied, pr_ledger_schema_version());

    /* Keys 1..3 exist so the writer charges their spend. */
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    T_EQ_INT(sqlite3_exec(db,
                          "INSERT INTO keys (id, name, hash, created_ms)"
                          " VALUES (1,'a','h1',0),(2,'b','h2',0),"
                          "(3,'c','h3',0)",
                          NULL, NULL, NULL),
             SQLITE_OK);

    pthread_t th[NTHREADS];
    struct submitter sub[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        sub[t] = (struct submitter){l, t * PER_THREAD, 0};
        pthread_create(&th[t], NULL, submit_main, &sub[t]);
    }
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(th[t], NULL);
        T_EQ_INT(sub[t].nfail, 0);
    }
    pr_ledger_flush(l);
    pr_ledger_stats(l, &stats);
    T_EQ_INT(stats.rows, NROWS);
    T_EQ_INT(stats.failed, 0);
    T_CHECK(stats.commits >= 1 && stats.commits <= NROWS);
    fprintf(stderr, "  %d rows in %lld commits\n", NROWS,
            (long long)stats.commits);
    int once = 1;
    for (int i = 0; i < NROWS; i++)
        if (atomic_load(&cb_count[i]) != 1)
            once = 0;
    T_CHECK(once);
    T_EQ_INT(atomic_load(&cb_bad), 0);

    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), NROWS);
    check_rows_exact(db);

    /* sum(cost) over the ledger equals the sum of the parts. */
    int64_t sum = 0, per_key[4] = {0};
    for (int i = 0; i < NROWS; i++) {
        struct pr_usage_row r;
        char reqid[32];
        make_row(i, &r, reqid, sizeof(reqid));
        sum += r.cost_pusd;
        if (r.key_id > 0)
            per_key[r.key_id] += r.cost_pusd;
    }
    T_EQ_INT(sql_int(db, "SELECT SUM(cost_pusd) FROM usage"), sum);
    T_EQ_INT(sql_int(db, "SELECT SUM(cost_pusd) FROM usage_hourly WHERE"
                         " dim = 'model' AND key_id = -2"),
             sum);
    T_EQ_INT(sql_int(db, "SELECT spent_pusd FROM keys WHERE id = 1"),
             per_key[1]);
    T_EQ_INT(sql_int(db, "SELECT spent_pusd FROM keys WHERE id = 2"),
             per_key[2]);
    T_EQ_INT(sql_int(db, "SELECT spent_pusd FROM keys WHERE id = 3"),
             per_key[3]);
    check_rollups(db);
    T_EQ_INT(sql_int(db, "PRAGMA journal_mode = WAL") == INT64_MIN, 0);

    /* Budgets load the persisted spend. */
    struct pr_budget *b = pr_budget_new();
    T_EQ_INT(sqlite3_exec(db,
                          "UPDATE keys SET budget_pusd = 5 WHERE id = 2;"
                          "UPDATE keys SET revoked_ms = 1 WHERE id = 3",
                          NULL, NULL, NULL),
             SQLITE_OK);
    T_EQ_INT(pr_budget_load(b, path, err, sizeof(err)), GX_OK);
    int64_t lim = 0, spent = 0, res = 0;
    T_EQ_INT(pr_budget_get(b, 1, &lim, &spent, &res), GX_OK);
    T_EQ_INT(lim, -1);
    T_EQ_INT(spent, per_key[1]);
    T_EQ_INT(pr_budget_get(b, 2, &lim, &spent, &res), GX_OK);
    T_EQ_INT(lim, 5);
    T_EQ_INT(pr_budget_reserve(b, 2, 1), GX_EAGAIN); /* already over */
    T_EQ_INT(pr_budget_get(b, 3, &lim, &spent, &res), GX_ENOTFOUND);
    pr_budget_free(b);

    sqlite3_close(db);
    pr_ledger_close(l);

    /* Reopening migrates nothing and keeps the data. */
    l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    pr_ledger_stats(l, &stats);
    T_EQ_INT(stats.migrations_applied, 0);
    pr_ledger_close(l);
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    T_EQ_INT(sql_int(db, "PRAGMA user_version"), pr_ledger_schema_version());
    T_EQ_INT(pr_ledger_schema_version(), 5);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), NROWS);
    /* Rebuilding the rollup from raw rows gives back exactly what the
     * writer maintained incrementally. */
    T_EQ_INT(sqlite3_exec(db,
                          "CREATE TEMP TABLE keep AS SELECT * FROM"
                          " usage_hourly; CREATE TEMP TABLE keepd AS"
                          " SELECT * FROM usage_daily",
                          NULL, NULL, NULL),
             SQLITE_OK);
    T_EQ_INT(pr_ledger_rebuild_rollups(path, err, sizeof(err)), GX_OK);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM (SELECT * FROM keep EXCEPT"
                         " SELECT * FROM usage_hourly)"),
             0);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM (SELECT * FROM usage_hourly"
                         " EXCEPT SELECT * FROM keep)"),
             0);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage_hourly"),
             sql_int(db, "SELECT COUNT(*) FROM keep"));
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM (SELECT * FROM keepd EXCEPT"
                         " SELECT * FROM usage_daily)"),
             0);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage_daily"),
             sql_int(db, "SELECT COUNT(*) FROM keepd"));
    T_CHECK(sql_int(db, "SELECT SUM(cache_write_tokens) FROM keep") > 0);
    T_EQ_INT(sql_int(db, "SELECT SUM(reasoning_tokens) FROM usage_daily"
                         " WHERE dim = 'none' AND key_id = -2"),
             sql_int(db, "SELECT SUM(reasoning_tokens) FROM usage"));
    /* A version-4 database (cells without the cache-write and reasoning
     * sums) upgrades in place: migration 5 backfills them exactly. */
    T_EQ_INT(sqlite3_exec(db,
                          "ALTER TABLE usage_hourly DROP COLUMN"
                          " cache_write_tokens;"
                          " ALTER TABLE usage_hourly DROP COLUMN"
                          " reasoning_tokens;"
                          " ALTER TABLE usage_daily DROP COLUMN"
                          " cache_write_tokens;"
                          " ALTER TABLE usage_daily DROP COLUMN"
                          " reasoning_tokens; PRAGMA user_version = 4",
                          NULL, NULL, NULL),
             SQLITE_OK);
    /* Read before the upgrade (queries never migrate): the cells lack
     * the sums, so the query reads raw rows and stays exact. */
    {
        struct pr_usage_query q = {INT64_MIN / 2, INT64_MAX / 2,
                                   PR_GROUP_NONE, PR_KEY_ALL, 0};
        struct pr_usage_result *v4r = NULL;
        T_EQ_INT(pr_usage_query(path, &q, &v4r, err, sizeof(err)), GX_OK);
        T_EQ_INT(v4r ? v4r->n : 0, 1);
        if (v4r && v4r->n == 1) {
            T_EQ_INT(v4r->rows[0].cache_write_tokens,
                     sql_int(db, "SELECT SUM(cache_write_tokens) FROM usage"));
            T_EQ_INT(v4r->rows[0].reasoning_tokens,
                     sql_int(db, "SELECT SUM(reasoning_tokens) FROM usage"));
            T_EQ_INT(v4r->rows[0].requests, NROWS);
        }
        pr_usage_result_free(v4r);
    }
    l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    pr_ledger_stats(l, &stats);
    T_EQ_INT(stats.migrations_applied, 1);
    pr_ledger_close(l);
    T_EQ_INT(sql_int(db, "PRAGMA user_version"), 5);
    /* This connection prepared against the dropped columns: a stepped
     * statement reloads its schema before EXCEPT is prepared. */
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM pragma_table_info("
                         "'usage_hourly')"),
             sql_int(db, "SELECT COUNT(*) FROM pragma_table_info('keep')"));
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM (SELECT * FROM keep EXCEPT"
                         " SELECT * FROM usage_hourly)"),
             0);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM (SELECT * FROM usage_hourly"
                         " EXCEPT SELECT * FROM keep)"),
             0);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM (SELECT * FROM keepd EXCEPT"
                         " SELECT * FROM usage_daily)"),
             0);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM (SELECT * FROM usage_daily"
                         " EXCEPT SELECT * FROM keepd)"),
             0);
    /* A version-1 database (no usage_daily) gets migration 2 once, and
     * its daily cells, built from the hourly ones, equal the writer's. */
    T_EQ_INT(sqlite3_exec(db,
                          "DROP TABLE usage_daily;"
                          " ALTER TABLE usage DROP COLUMN api;"
                          " ALTER TABLE usage DROP COLUMN cache_write_tokens;"
                          " ALTER TABLE usage DROP COLUMN reasoning_tokens;"
                          " ALTER TABLE usage DROP COLUMN unpriced;"
                          " ALTER TABLE usage_hourly DROP COLUMN unpriced;"
                          " ALTER TABLE usage_hourly DROP COLUMN"
                          " cache_write_tokens;"
                          " ALTER TABLE usage_hourly DROP COLUMN"
                          " reasoning_tokens;"
                          /* its rows never had the two classes */
                          " UPDATE keepd SET cache_write_tokens = 0,"
                          " reasoning_tokens = 0;"
                          " PRAGMA user_version = 1",
                          NULL, NULL, NULL),
             SQLITE_OK);
    l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    pr_ledger_stats(l, &stats);
    T_EQ_INT(stats.migrations_applied, 4);
    pr_ledger_close(l);
    T_EQ_INT(sql_int(db, "PRAGMA user_version"), 5);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM (SELECT * FROM keepd EXCEPT"
                         " SELECT * FROM usage_daily)"),
             0);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM (SELECT * FROM usage_daily"
                         " EXCEPT SELECT * FROM keepd)"),
             0);
    /* A database from the future is refused, not damaged. */
    T_EQ_INT(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL),
             SQLITE_OK);
    sqlite3_close(db);
    l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_EINVAL);
    T_CHECK(l == NULL);
    T_CHECK(strstr(err, "newer") != NULL);
    rm_db(path);
}

/* ------------------------------------------------------------------ */

struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int entered, open;
};

static void
gate_cb(void *ud, int ok)
{
    struct gate *g = ud;
    (void)ok;
    pthread_mutex_lock(&g->mu);
    g->entered = 1;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static _Atomic int simple_ok;
static void
simple_cb(void *ud, int ok)
{
    (void)ud;
    if (ok)
        atomic_fetch_add(&simple_ok, 1);
}

/* With the writer held inside a callback, the queue fills and submit says
 * GX_EAGAIN at once instead of blocking; close commits everything queued. */
static void
test_bounded_queue(void)
{
    char path[512];
    db_path(path, sizeof(path), "q.db");
    rm_db(path);
    char err[256];
    struct pr_ledger *l = NULL;
    struct pr_ledger_opts o = {.queue_max = 8, .sync = PR_LEDGER_SYNC_FULL};
    T_EQ_INT(pr_ledger_open_ex(path, &o, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    struct pr_usage_row r = {.ts_ms = 1000,
                             .request_id = "gate",
                             .key_id = -1,
                             .status = 200,
                             .ttft_ms = -1,
                             .usage_source = "upstream"};
    T_EQ_INT(pr_ledger_submit(l, &r, gate_cb, &g), GX_OK);
    pthread_mutex_lock(&g.mu);
    while (!g.entered)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    r.request_id = "q";
    for (int i = 0; i < 8; i++)
        T_EQ_INT(pr_ledger_submit(l, &r, simple_cb, NULL), GX_OK);
    T_EQ_INT(pr_ledger_submit(l, &r, simple_cb, NULL), GX_EAGAIN);
    struct pr_ledger_stats s;
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.queued, 8);
    pthread_mutex_lock(&g.mu);
    g.open = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pr_ledger_close(l); /* flushes the 8 */
    T_EQ_INT(atomic_load(&simple_ok), 8);
    sqlite3 *db = NULL;
    sqlite3_open(path, &db);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), 9);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage WHERE ttft_ms IS NULL"
                         " AND key_id IS NULL AND model IS NULL"),
             9);
    T_EQ_INT(sql_int(db, "SELECT SUM(requests) FROM usage_hourly WHERE"
                         " dim = 'model' AND value = '' AND key_id = -1 AND"
                         " hour_ms = 0"),
             9);
    sqlite3_close(db);
    rm_db(path);
}

/* A database locked by another connection past lock_timeout_ms fails the
 * batch (callback ok=0, bounded wait); a broken schema fails row by row;
 * the ledger recovers when the lock goes. */
static _Atomic int fail_ok, fail_bad;
static void
fail_cb(void *ud, int ok)
{
    (void)ud;
    atomic_fetch_add(ok ? &fail_ok : &fail_bad, 1);
}

static void
test_write_failures(void)
{
    char path[512];
    db_path(path, sizeof(path), "fail.db");
    rm_db(path);
    char err[256];
    struct pr_ledger *l = NULL;
    struct pr_ledger_opts o = {.lock_timeout_ms = 300};
    T_EQ_INT(pr_ledger_open_ex(path, &o, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    T_EQ_INT(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    struct pr_usage_row r = {.ts_ms = 5000,
                             .request_id = "locked",
                             .key_id = -1,
                             .status = 200,
                             .ttft_ms = -1,
                             .usage_source = "upstream"};
    T_EQ_INT(pr_ledger_submit(l, &r, fail_cb, NULL), GX_OK);
    T_EQ_INT(pr_ledger_submit(l, &r, fail_cb, NULL), GX_OK);
    pr_ledger_flush(l); /* returns after ~0.3 s, not forever */
    T_EQ_INT(atomic_load(&fail_bad), 2);
    T_EQ_INT(atomic_load(&fail_ok), 0);
    struct pr_ledger_stats s;
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.failed, 2);
    T_EQ_INT(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    /* Lock gone: writes succeed again. */
    r.request_id = "after";
    T_EQ_INT(pr_ledger_submit(l, &r, fail_cb, NULL), GX_OK);
    pr_ledger_flush(l);
    T_EQ_INT(atomic_load(&fail_ok), 1);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), 1);
    /* Inserts broken under the writer: every row fails (non-transient,
     * row-by-row fallback), none is half-written. */
    T_EQ_INT(sqlite3_exec(db,
                          "CREATE TRIGGER broken BEFORE INSERT ON usage"
                          " BEGIN SELECT RAISE(ABORT, 'broken'); END",
                          NULL, NULL, NULL),
             SQLITE_OK);
    for (int i = 0; i < 3; i++)
        T_EQ_INT(pr_ledger_submit(l, &r, fail_cb, NULL), GX_OK);
    pr_ledger_flush(l);
    T_EQ_INT(atomic_load(&fail_bad), 5);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), 1);
    sqlite3_close(db);
    pr_ledger_close(l);
    rm_db(path);
}

/* Budget + ledger together, as the gateway uses them: threads reserve a
 * request's maximum, "run" it, settle to the actual cost and log the row.
 * The in-memory spend, keys.spent_pusd (written by the ledger) and the sum
 * of the rows agree exactly, and the limit holds. */
#define BL_THREADS 4
#define BL_ITERS 400
#define BL_LIMIT 60000000000LL

struct bl_arg {
    struct pr_ledger *l;
    struct pr_budget *b;
    int id;
    int denied;
};

static void *
bl_main(void *arg)
{
    struct bl_arg *a = arg;
    struct pr_price p = {2000000, 500000, 8000000}; /* gpt-4.1 */
    unsigned seed = 1234u + (unsigned)a->id * 77u;
    for (int i = 0; i < BL_ITERS; i++) {
        seed = seed * 1103515245u + 12345u;
        int64_t prompt = 1 + (seed >> 8) % 40, max_out = 16;
        int64_t out = (seed >> 4) % (max_out + 1);
        int64_t maxc = 0, cost = 0;
        pr_cost(&p, prompt, 0, max_out, &maxc);
        pr_cost(&p, prompt, 0, out, &cost);
        if (pr_budget_reserve(a->b, 1, maxc) != GX_OK) {
            a->denied++;
            continue;
        }
        int fail = (seed >> 20) % 10 == 0; /* upstream failed */
        if (fail)
            pr_budget_release(a->b, 1, maxc);
        else
            pr_budget_settle(a->b, 1, maxc, cost);
        char id[32];
        snprintf(id, sizeof(id), "b%d-%d", a->id, i);
        struct pr_usage_row r = {.ts_ms = 1764400000000LL + i,
                                 .request_id = id,
                                 .key_id = 1,
                                 .model = "gpt-4.1",
                                 .status = fail ? 502 : 200,
                                 .prompt_tokens = prompt,
                                 .completion_tokens = fail ? 0 : out,
                                 .cost_pusd = fail ? 0 : cost,
                                 .ttft_ms = -1,
                                 .usage_source = "upstream"};
        while (pr_ledger_submit(a->l, &r, NULL, NULL) == GX_EAGAIN)
            usleep(1000);
    }
    return NULL;
}

static void
test_budget_with_ledger(void)
{
    char path[512];
    db_path(path, sizeof(path), "budget.db");
    rm_db(path);
    char err[256];
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    sqlite3 *db = NULL;
    sqlite3_open(path, &db);
    sqlite3_busy_timeout(db, 5000);
    T_EQ_INT(sqlite3_exec(db,
                          "INSERT INTO keys (id, name, hash, created_ms,"
                          " budget_pusd) VALUES (1, 'k', 'h', 0, 60000000000)",
                          NULL, NULL, NULL),
             SQLITE_OK);
    struct pr_budget *b = pr_budget_new();
    T_EQ_INT(pr_budget_load(b, path, err, sizeof(err)), GX_OK);
    pthread_t th[BL_THREADS];
    struct bl_arg a[BL_THREADS];
    for (int i = 0; i < BL_THREADS; i++) {
        a[i] = (struct bl_arg){l, b, i, 0};
        pthread_create(&th[i], NULL, bl_main, &a[i]);
    }
    int denied = 0;
    for (int i = 0; i < BL_THREADS; i++) {
        pthread_join(th[i], NULL);
        denied += a[i].denied;
    }
    pr_ledger_flush(l);
    int64_t lim, spent, res;
    T_EQ_INT(pr_budget_get(b, 1, &lim, &spent, &res), GX_OK);
    T_EQ_INT(res, 0);
    T_CHECK(spent <= BL_LIMIT);
    T_CHECK(spent > BL_LIMIT / 2); /* the budget was really used */
    fprintf(stderr, "  spent %lld of %lld pUSD, %d requests denied\n",
            (long long)spent, (long long)BL_LIMIT, denied);
    T_CHECK(denied > 0);
    T_EQ_INT(sql_int(db, "SELECT spent_pusd FROM keys WHERE id = 1"), spent);
    T_EQ_INT(sql_int(db, "SELECT SUM(cost_pusd) FROM usage WHERE key_id = 1"),
             spent);
    T_EQ_INT(sql_int(db, "SELECT SUM(cost_pusd) FROM usage_daily WHERE"
                         " dim = 'none' AND key_id = 1"),
             spent);
    /* A restart loads the same spend and keeps refusing. */
    struct pr_budget *b2 = pr_budget_new();
    T_EQ_INT(pr_budget_load(b2, path, err, sizeof(err)), GX_OK);
    int64_t spent2 = -1;
    T_EQ_INT(pr_budget_get(b2, 1, &lim, &spent2, &res), GX_OK);
    T_EQ_INT(spent2, spent);
    T_EQ_INT(lim, BL_LIMIT);
    pr_budget_free(b2);
    pr_budget_free(b);
    sqlite3_close(db);
    pr_ledger_close(l);
    rm_db(path);
}

/* An in-memory ledger works, and its path is a URI another connection
 * can read. */
static void
test_memory(void)
{
    char err[256];
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(":memory:", &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    struct pr_usage_row r = {.ts_ms = 7200000,
                             .request_id = "m",
                             .key_id = 4,
                             .model = "local",
                             .status = 200,
                             .prompt_tokens = 3,
                             .completion_tokens = 4,
                             .cost_pusd = 0,
                             .latency_ms = 10,
                             .ttft_ms = 2,
                             .usage_source = "local"};
    T_EQ_INT(pr_ledger_submit(l, &r, NULL, NULL), GX_OK);
    pr_ledger_flush(l);
    T_CHECK(strncmp(pr_ledger_path(l), "file:", 5) == 0);
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open_v2(pr_ledger_path(l), &db,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL),
             SQLITE_OK);
    T_EQ_INT(sql_int(db, "SELECT completion_tokens FROM usage"), 4);
    sqlite3_close(db);
    pr_ledger_close(l);
}

/* ------------------------------------------------------------------ */
/* fork()+kill -9: every row whose commit callback fired (the child printed
 * its number) is in the database after the kill. */

static int kill_pipe_fd = -1;

static void
kill_cb(void *ud, int ok)
{
    if (!ok)
        return;
    char line[32];
    int n = snprintf(line, sizeof(line), "%ld\n", (long)(intptr_t)ud);
    /* < PIPE_BUF: atomic, never interleaved. */
    if (write(kill_pipe_fd, line, (size_t)n) != n)
        _exit(3);
}

struct kill_sub {
    struct pr_ledger *l;
    int first, n;
};

static void *
kill_submit_main(void *arg)
{
    struct kill_sub *s = arg;
    for (int i = s->first; i < s->first + s->n; i++) {
        char reqid[32];
        snprintf(reqid, sizeof(reqid), "k-%d", i);
        struct pr_usage_row r = {.ts_ms = 1764400000000LL + i,
                                 .request_id = reqid,
                                 .key_id = -1,
                                 .model = "gpt-4.1",
                                 .status = 200,
                                 .prompt_tokens = i,
                                 .cost_pusd = i,
                                 .ttft_ms = -1,
                                 .usage_source = "upstream"};
        while (pr_ledger_submit(s->l, &r, kill_cb, (void *)(intptr_t)i) ==
               GX_EAGAIN)
            usleep(500);
        if (i % 64 == 0)
            usleep(200); /* keep the stream going for a while */
    }
    return NULL;
}

static void
child_main(const char *path, int fd)
{
    kill_pipe_fd = fd;
    char err[256];
    struct pr_ledger *l = NULL;
    if (pr_ledger_open(path, &l, err, sizeof(err)) != GX_OK)
        _exit(2);
    struct kill_sub s[2] = {{l, 0, 20000}, {l, 20000, 20000}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, kill_submit_main, &s[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pr_ledger_close(l);
    _exit(0);
}

static void
test_kill9(void)
{
    char path[512];
    db_path(path, sizeof(path), "kill.db");
    rm_db(path);
    int p[2];
    T_EQ_INT(pipe(p), 0);
    pid_t pid = fork();
    T_CHECK(pid >= 0);
    if (pid < 0)
        return;
    if (pid == 0) {
        close(p[0]);
        child_main(path, p[1]);
    }
    close(p[1]);
    static char seen[40000];
    memset(seen, 0, sizeof(seen));
    int nseen = 0, killed = 0;
    char buf[4096], line[32];
    size_t ll = 0;
    for (;;) {
        ssize_t n = read(p[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                line[ll] = '\0';
                long id = strtol(line, NULL, 10);
                if (id >= 0 && id < 40000 && !seen[id]) {
                    seen[id] = 1;
                    nseen++;
                }
                ll = 0;
            } else if (ll < sizeof(line) - 1) {
                line[ll++] = buf[i];
            }
        }
        /* Kill mid-stream, once enough rows are confirmed. */
        if (!killed && nseen >= 3000) {
            kill(pid, SIGKILL);
            killed = 1;
        }
    }
    close(p[0]);
    int wst = 0;
    waitpid(pid, &wst, 0);
    T_CHECK(killed);
    T_CHECK(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL);
    fprintf(stderr, "  child killed after %d confirmed rows\n", nseen);

    /* Reopen through the ledger (recovers the WAL) and count. */
    char err[256];
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    pr_ledger_close(l);
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    sqlite3_prepare_v2(db, "SELECT prompt_tokens FROM usage", -1, &st, NULL);
    static char present[40000];
    memset(present, 0, sizeof(present));
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t v = sqlite3_column_int64(st, 0);
        if (v >= 0 && v < 40000)
            present[v] = 1;
    }
    sqlite3_finalize(st);
    int missing = 0;
    for (int i = 0; i < 40000; i++)
        if (seen[i] && !present[i])
            missing++;
    T_EQ_INT(missing, 0);
    int64_t total = sql_int(db, "SELECT COUNT(*) FROM usage");
    T_CHECK(total >= nseen);
    /* Rollups survived consistently with the raw rows. */
    T_EQ_INT(sql_int(db, "SELECT SUM(requests) FROM usage_hourly WHERE"
                         " dim = 'none' AND key_id = -2"),
             total);
    T_EQ_INT(sql_int(db, "SELECT SUM(cost_pusd) FROM usage_hourly WHERE"
                         " dim = 'route' AND key_id = -1"),
             sql_int(db, "SELECT SUM(cost_pusd) FROM usage"));
    sqlite3_close(db);
    rm_db(path);
}

/* ------------------------------------------------------------------ */
/* Deferred rollups: the writer keeps the cells of committed rows in
 * memory (here for an hour: rollup_flush_ms) and the rollup tables hold
 * exactly the rows up to usage_rollup_state.rolled_through_id.  Queries
 * are exact meanwhile, a flush makes the tables equal the raw sums, and
 * after a kill -9 with cells pending the reopen rolls the rest up. */

#define PEND_N 1500
#define PEND_T0 1764400000000LL

static _Atomic int pend_done;

static void
pend_cb(void *ud, int ok)
{
    (void)ud;
    if (ok)
        atomic_fetch_add(&pend_done, 1);
}

/* Rows first..first+n-1 of make_row, stretched to 3 min apart (3 days in
 * all, so queries use daily and hourly cells and raw edges); returns once
 * their commit callbacks have run (bounded). */
static int
pend_submit(struct pr_ledger *l, int first, int n)
{
    for (int i = first; i < first + n; i++) {
        struct pr_usage_row r;
        char reqid[32];
        make_row(i, &r, reqid, sizeof(reqid));
        r.ts_ms = PEND_T0 + (int64_t)i * 180000;
        if (pr_ledger_submit(l, &r, pend_cb, NULL) != GX_OK)
            return 0;
    }
    for (int w = 0; w < 60000 && atomic_load(&pend_done) < first + n; w++)
        usleep(1000);
    return atomic_load(&pend_done) == first + n;
}

/* Every grouping, with and without key filters, over a range that is not
 * hour-aligned: the rollup path equals the raw rows exactly (histograms
 * too, so p50/p95 agree), and the total is nrows. */
static void
compare_queries(const char *path, int64_t nrows)
{
    static const enum pr_group gs[] = {
        PR_GROUP_NONE,  PR_GROUP_MODEL, PR_GROUP_PROVIDER, PR_GROUP_ROUTE,
        PR_GROUP_KEY,   PR_GROUP_DAY,   PR_GROUP_HOUR};
    static const int64_t keys[] = {PR_KEY_ALL, -1, 2};
    char err[256];
    int bad = 0;
    for (size_t gi = 0; gi < sizeof(gs) / sizeof(gs[0]); gi++) {
        for (size_t ki = 0; ki < sizeof(keys) / sizeof(keys[0]); ki++) {
            struct pr_usage_query q = {PEND_T0 - 5000,
                                       PEND_T0 + 80 * 3600000LL + 1234,
                                       gs[gi], keys[ki], 0};
            struct pr_usage_query qr = q;
            qr.raw_only = 1;
            struct pr_usage_result *a = NULL, *b = NULL;
            T_EQ_INT(pr_usage_query(path, &q, &a, err, sizeof(err)), GX_OK);
            T_EQ_INT(pr_usage_query(path, &qr, &b, err, sizeof(err)), GX_OK);
            if (!a || !b || a->n != b->n || a->n == 0) {
                bad++;
            } else {
                for (size_t i = 0; i < a->n; i++) {
                    const struct pr_usage_group *x = &a->rows[i],
                                                *y = &b->rows[i];
                    if (strcmp(x->group, y->group) != 0 ||
                        x->requests != y->requests || x->errors != y->errors ||
                        x->prompt_tokens != y->prompt_tokens ||
                        x->completion_tokens != y->completion_tokens ||
                        x->cached_tokens != y->cached_tokens ||
                        x->cost_pusd != y->cost_pusd ||
                        x->p50_ms != y->p50_ms || x->p95_ms != y->p95_ms)
                        bad++;
                }
                if (gs[gi] == PR_GROUP_NONE && keys[ki] == PR_KEY_ALL)
                    T_EQ_INT(a->rows[0].requests, nrows);
            }
            pr_usage_result_free(a);
            pr_usage_result_free(b);
        }
    }
    T_EQ_INT(bad, 0);
}

static void
pend_run(const char *path)
{
    char err[256];
    struct pr_ledger *l = NULL;
    struct pr_ledger_opts o = {.rollup_flush_ms = 3600000};
    atomic_store(&pend_done, 0);
    T_EQ_INT(pr_ledger_open_ex(path, &o, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    const char *rpath = pr_ledger_path(l);
    int is_file = strcmp(path, ":memory:") != 0;
    sqlite3 *db = NULL;
    if (is_file)
        T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    T_CHECK(pend_submit(l, 0, PEND_N / 2));
    struct pr_ledger_stats s;
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.rows, PEND_N / 2);
    T_EQ_INT(s.rollup_pending, PEND_N / 2);
    T_EQ_INT(s.rollup_flushes, 0);
    if (db) { /* committed, not rolled up yet */
        T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), PEND_N / 2);
        T_EQ_INT(sql_int(db, "SELECT rolled_through_id FROM"
                             " usage_rollup_state"),
                 0);
        T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage_hourly"), 0);
    }
    compare_queries(rpath, PEND_N / 2);
    pr_ledger_flush(l); /* writes the cells */
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.rollup_pending, 0);
    T_EQ_INT(s.rollup_flushes, 1);
    if (db) {
        T_EQ_INT(sql_int(db, "SELECT rolled_through_id FROM"
                             " usage_rollup_state"),
                 sql_int(db, "SELECT MAX(id) FROM usage"));
        check_rollups(db);
    }
    compare_queries(rpath, PEND_N / 2);
    /* Half flushed, half pending. */
    T_CHECK(pend_submit(l, PEND_N / 2, PEND_N - PEND_N / 2));
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.rollup_pending, PEND_N - PEND_N / 2);
    compare_queries(rpath, PEND_N);
    pr_ledger_close(l); /* flushes too */
    if (db) {
        T_EQ_INT(sql_int(db, "SELECT rolled_through_id FROM"
                             " usage_rollup_state"),
                 PEND_N);
        check_rollups(db);
        sqlite3_close(db);
    }
}

static void
test_pending_rollups(void)
{
    char path[512];
    db_path(path, sizeof(path), "pend.db");
    rm_db(path);
    pend_run(path);
    rm_db(path);
    pend_run(":memory:");
}

/* The child commits half the rows and flushes their cells, commits the
 * other half (cells only in memory), says so, and waits to be killed. */
static void
pend_child(const char *path, int fd)
{
    char err[256];
    struct pr_ledger *l = NULL;
    struct pr_ledger_opts o = {.rollup_flush_ms = 3600000};
    if (pr_ledger_open_ex(path, &o, &l, err, sizeof(err)) != GX_OK)
        _exit(2);
    if (!pend_submit(l, 0, PEND_N / 2))
        _exit(3);
    pr_ledger_flush(l);
    if (!pend_submit(l, PEND_N / 2, PEND_N - PEND_N / 2))
        _exit(4);
    if (write(fd, "k", 1) != 1)
        _exit(5);
    for (;;)
        pause();
}

static void
test_kill9_pending_cells(void)
{
    char path[512];
    db_path(path, sizeof(path), "killpend.db");
    rm_db(path);
    int p[2];
    T_EQ_INT(pipe(p), 0);
    pid_t pid = fork();
    T_CHECK(pid >= 0);
    if (pid < 0)
        return;
    if (pid == 0) {
        close(p[0]);
        pend_child(path, p[1]);
    }
    close(p[1]);
    char c = 0;
    ssize_t n;
    while ((n = read(p[0], &c, 1)) < 0 && errno == EINTR)
        ;
    T_EQ_INT(n, 1);
    kill(pid, SIGKILL);
    close(p[0]);
    int wst = 0;
    waitpid(pid, &wst, 0);
    T_CHECK(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL);

    /* As the kill left it: every row, half of them rolled up. */
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), PEND_N);
    T_EQ_INT(sql_int(db, "SELECT rolled_through_id FROM usage_rollup_state"),
             PEND_N / 2);
    T_EQ_INT(sql_int(db, "SELECT SUM(requests) FROM usage_hourly WHERE"
                         " dim = 'none' AND key_id = -2"),
             PEND_N / 2);
    /* Queries are exact even so (rollup + rows past the watermark). */
    compare_queries(path, PEND_N);
    /* Reopening rolls the rest up from the raw rows. */
    char err[256];
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    struct pr_ledger_stats s;
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.rolled_up_at_open, PEND_N - PEND_N / 2);
    T_EQ_INT(s.migrations_applied, 0);
    pr_ledger_close(l);
    T_EQ_INT(sql_int(db, "SELECT rolled_through_id FROM usage_rollup_state"),
             PEND_N);
    check_rollups(db);
    compare_queries(path, PEND_N);
    /* A second open finds nothing to do. */
    l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.rolled_up_at_open, 0);
    pr_ledger_close(l);
    check_rollups(db);
    sqlite3_close(db);
    rm_db(path);
}

/* Two writers on one file (the gateway and `llmux keys`, whose open
 * catches up): neither's pending cells are counted twice or lost. */
static void
test_two_writers_pending(void)
{
    char path[512];
    db_path(path, sizeof(path), "two.db");
    rm_db(path);
    char err[256];
    struct pr_ledger_opts o = {.rollup_flush_ms = 3600000};
    struct pr_ledger *a = NULL, *b = NULL;
    atomic_store(&pend_done, 0);
    T_EQ_INT(pr_ledger_open_ex(path, &o, &a, err, sizeof(err)), GX_OK);
    if (!a)
        return;
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    /* a has 300 rows pending; b's open rolls them up. */
    T_CHECK(pend_submit(a, 0, 300));
    T_EQ_INT(pr_ledger_open_ex(path, &o, &b, err, sizeof(err)), GX_OK);
    if (!b) {
        pr_ledger_close(a);
        sqlite3_close(db);
        return;
    }
    struct pr_ledger_stats s;
    pr_ledger_stats(b, &s);
    T_EQ_INT(s.rolled_up_at_open, 300);
    T_EQ_INT(sql_int(db, "SELECT rolled_through_id FROM usage_rollup_state"),
             300);
    /* Interleaved: both hold pending cells of rows between the other's. */
    T_CHECK(pend_submit(a, 300, 400));
    T_CHECK(pend_submit(b, 700, 400));
    T_CHECK(pend_submit(a, 1100, PEND_N - 1100));
    compare_queries(path, PEND_N);
    pr_ledger_flush(a);
    compare_queries(path, PEND_N);
    check_rollups(db);
    pr_ledger_close(b);
    pr_ledger_close(a);
    T_EQ_INT(sql_int(db, "SELECT rolled_through_id FROM usage_rollup_state"),
             PEND_N);
    check_rollups(db);
    compare_queries(path, PEND_N);
    sqlite3_close(db);
    rm_db(path);
}

/* A failing rollup flush never fails the rows: they commit, their cells
 * stay pending, and a later flush that works brings the rollups up to the
 * raw sums. */
static void
test_flush_failure(void)
{
    char path[512];
    db_path(path, sizeof(path), "flushfail.db");
    rm_db(path);
    char err[256];
    struct pr_ledger *l = NULL;
    struct pr_ledger_opts o = {.rollup_flush_ms = 1};
    atomic_store(&pend_done, 0);
    T_EQ_INT(pr_ledger_open_ex(path, &o, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    T_EQ_INT(sqlite3_exec(db,
                          "CREATE TRIGGER nohourly BEFORE INSERT ON"
                          " usage_hourly BEGIN SELECT RAISE(ABORT,"
                          " 'rollup broken'); END",
                          NULL, NULL, NULL),
             SQLITE_OK);
    for (int i = 0; i < 6; i++)
        T_CHECK(pend_submit(l, i * 50, 50)); /* all 300 commit, ok=1 */
    pr_ledger_flush(l); /* one failed attempt, then returns */
    struct pr_ledger_stats s;
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.rows, 300);
    T_EQ_INT(s.failed, 0);
    T_EQ_INT(s.rollup_pending, 300);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), 300);
    T_EQ_INT(sql_int(db, "SELECT rolled_through_id FROM usage_rollup_state"),
             0);
    compare_queries(path, 300);
    T_EQ_INT(sqlite3_exec(db, "DROP TRIGGER nohourly", NULL, NULL, NULL),
             SQLITE_OK);
    pr_ledger_flush(l);
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.rollup_pending, 0);
    T_EQ_INT(sql_int(db, "SELECT rolled_through_id FROM usage_rollup_state"),
             300);
    check_rollups(db);
    pr_ledger_close(l);
    sqlite3_close(db);
    rm_db(path);
}

/* The WAL is checkpointed by the checkpointer thread on its own
 * connection, never inside a group commit (the writer's connection has
 * no automatic checkpoint): single-row commits push the WAL past 1000
 * pages several times, the checkpointer's count rises, the WAL file stays
 * bounded (it restarts after a complete checkpoint), and every row is
 * there. */
#define CKPT_ROWS 2400
static void
test_wal_checkpoint_off_commit(void)
{
    char path[512], wal[600];
    db_path(path, sizeof(path), "ckpt.db");
    rm_db(path);
    snprintf(wal, sizeof(wal), "%s-wal", path);
    char err[256];
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    atomic_store(&simple_ok, 0);
    long max_wal = 0;
    for (int i = 0; i < CKPT_ROWS; i++) {
        struct pr_usage_row r;
        char reqid[32];
        make_row(i, &r, reqid, sizeof(reqid));
        if (pr_ledger_submit(l, &r, simple_cb, NULL) != GX_OK)
            break;
        /* One row per transaction: wait for its commit (bounded). */
        for (int w = 0; w < 5000 && atomic_load(&simple_ok) <= i; w++)
            usleep(200);
        struct stat sb;
        if (stat(wal, &sb) == 0 && sb.st_size > max_wal)
            max_wal = (long)sb.st_size;
    }
    T_EQ_INT(atomic_load(&simple_ok), CKPT_ROWS);
    struct pr_ledger_stats s;
    for (int w = 0; w < 200; w++) { /* the last request may still run */
        pr_ledger_stats(l, &s);
        if (s.wal_checkpoints >= 2)
            break;
        usleep(10000);
    }
    printf("  %d single-row commits: %lld checkpoints off the commit path,"
           " WAL peak %ld bytes\n",
           CKPT_ROWS, (long long)s.wal_checkpoints, max_wal);
    T_EQ_INT(s.commits, CKPT_ROWS);
    T_CHECK(s.wal_checkpoints >= 2);
    /* The WAL restarts after each checkpoint: about 1000 frames of 4 KiB
     * plus what commits add while one is copied (it grew past 30 MB when
     * the writer's appends kept the checkpoint from ever catching up). */
    T_CHECK(max_wal < 8L * 1024 * 1024);
    pr_ledger_close(l);
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), CKPT_ROWS);
    sqlite3_close(db);
    rm_db(path);
}

/* pr_ledger_prewake: a hint with no row behind it wakes the sleeping
 * writer, which waits a bounded while and sleeps again (a miss); a hint
 * followed by the row is met awake (a hit); hints from several threads
 * racing their submits lose no row and answer every callback once; a
 * NULL ledger ignores the hint. */
#define PREWAKE_THREADS 4
#define PREWAKE_PER 300

struct prewaker {
    struct pr_ledger *l;
    int first;
};

static void *
prewake_main(void *arg)
{
    struct prewaker *p = arg;
    for (int i = p->first; i < p->first + PREWAKE_PER; i++) {
        struct pr_usage_row r;
        char reqid[32];
        make_row(i, &r, reqid, sizeof(reqid));
        pr_ledger_prewake(p->l);
        if (i % 3)
            usleep(50); /* the worker's remaining work */
        if (pr_ledger_submit(p->l, &r, count_cb, (void *)(intptr_t)i) !=
            GX_OK)
            atomic_fetch_add(&cb_bad, 1);
        if (i % 7 == 0)
            usleep(1500); /* the writer falls asleep between some rows */
    }
    return NULL;
}

static void
test_prewake(void)
{
    char path[512], err[256];
    db_path(path, sizeof(path), "prewake.db");
    rm_db(path);
    pr_ledger_prewake(NULL);
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    struct pr_ledger_stats s;
    /* No row follows: the writer gives up and sleeps again (bounded: a
     * hint only acts once the writer is in its wait). */
    for (int w = 0; w < 400; w++) {
        pr_ledger_prewake(l);
        usleep(5000);
        pr_ledger_stats(l, &s);
        if (s.prewake_misses >= 1)
            break;
    }
    T_CHECK(s.prewake_misses >= 1);
    T_EQ_INT(s.rows, 0);
    /* Idle without hints: no spin starts by itself. */
    int64_t misses = s.prewake_misses, hits = s.prewake_hits;
    usleep(50000);
    pr_ledger_stats(l, &s);
    T_EQ_INT(s.prewake_misses, misses);
    T_EQ_INT(s.prewake_hits, hits);
    /* The row right after the hint: met by the awake writer. */
    atomic_store(&simple_ok, 0);
    int sent = 0;
    for (int w = 0; w < 100 && s.prewake_hits == hits; w++) {
        usleep(5000); /* the writer is asleep again */
        struct pr_usage_row r;
        char reqid[32];
        make_row(w, &r, reqid, sizeof(reqid));
        pr_ledger_prewake(l);
        T_EQ_INT(pr_ledger_submit(l, &r, simple_cb, NULL), GX_OK);
        sent++;
        for (int k = 0; k < 5000 && atomic_load(&simple_ok) < sent; k++)
            usleep(200);
        pr_ledger_stats(l, &s);
    }
    T_CHECK(s.prewake_hits > hits);
    T_EQ_INT(atomic_load(&simple_ok), sent);
    pr_ledger_close(l);
    rm_db(path);

    /* Hints racing submits from several threads. */
    memset(cb_count, 0, sizeof(cb_count));
    atomic_store(&cb_bad, 0);
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    pthread_t th[PREWAKE_THREADS];
    struct prewaker pw[PREWAKE_THREADS];
    for (int t = 0; t < PREWAKE_THREADS; t++) {
        pw[t] = (struct prewaker){l, t * PREWAKE_PER};
        pthread_create(&th[t], NULL, prewake_main, &pw[t]);
    }
    for (int t = 0; t < PREWAKE_THREADS; t++)
        pthread_join(th[t], NULL);
    pr_ledger_flush(l);
    pr_ledger_stats(l, &s);
    printf("  prewake: %lld hits, %lld misses over %d rows in %lld commits\n",
           (long long)s.prewake_hits, (long long)s.prewake_misses,
           PREWAKE_THREADS * PREWAKE_PER, (long long)s.commits);
    T_EQ_INT(atomic_load(&cb_bad), 0);
    int once = 1;
    for (int i = 0; i < PREWAKE_THREADS * PREWAKE_PER; i++)
        once &= atomic_load(&cb_count[i]) == 1;
    T_CHECK(once);
    T_EQ_INT(s.rows, PREWAKE_THREADS * PREWAKE_PER);
    pr_ledger_close(l);
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"),
             PREWAKE_THREADS * PREWAKE_PER);
    sqlite3_close(db);
    rm_db(path);
}

/* New ledger files get 1 KiB pages (a lone row's commit checksums and
 * writes a page per b-tree it touches); a file that already exists keeps
 * its page size, migrates and takes rows as before. */
static void
test_page_size(void)
{
    char path[512], err[256];
    db_path(path, sizeof(path), "pages.db");
    for (int old = 0; old < 2; old++) {
        rm_db(path);
        sqlite3 *db = NULL;
        if (old) {
            /* A pre-existing database with SQLite's default pages. */
            T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
            T_EQ_INT(sqlite3_exec(db,
                                  "PRAGMA page_size=4096;"
                                  " CREATE TABLE other(a); INSERT INTO other"
                                  " VALUES (1)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
            sqlite3_close(db);
        }
        struct pr_ledger *l = NULL;
        T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
        if (!l)
            return;
        atomic_store(&simple_ok, 0);
        for (int i = 0; i < 50; i++) {
            struct pr_usage_row r;
            char reqid[32];
            make_row(i, &r, reqid, sizeof(reqid));
            T_EQ_INT(pr_ledger_submit(l, &r, simple_cb, NULL), GX_OK);
        }
        pr_ledger_flush(l);
        T_EQ_INT(atomic_load(&simple_ok), 50);
        pr_ledger_close(l);
        T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
        T_EQ_INT(sql_int(db, "PRAGMA page_size"), old ? 4096 : 1024);
        T_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM usage"), 50);
        T_EQ_INT(sql_int(db, "SELECT SUM(requests) FROM usage_hourly"
                             " WHERE dim = 'none' AND key_id = -2"),
                 50);
        T_EQ_INT(sql_int(db, "SELECT integrity_check = 'ok' FROM"
                             " pragma_integrity_check"),
                 1);
        sqlite3_close(db);
    }
    rm_db(path);
}

int
main(void)
{
    make_tmpdir();
    /* First, while this process has no threads (fork safety). */
    T_RUN(test_kill9);
    T_RUN(test_kill9_pending_cells);
    T_RUN(test_group_commit);
    T_RUN(test_bounded_queue);
    T_RUN(test_memory);
    T_RUN(test_pending_rollups);
    T_RUN(test_two_writers_pending);
    T_RUN(test_flush_failure);
    T_RUN(test_wal_checkpoint_off_commit);
    T_RUN(test_prewake);
    T_RUN(test_page_size);
    T_RUN(test_write_failures);
    T_RUN(test_budget_with_ledger);
    rmdir(tmpdir);
    return T_END();
}
