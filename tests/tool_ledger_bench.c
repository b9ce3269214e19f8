/*
 * tool_ledger_bench: ledger and usage-query benchmark.
 *
 *   tool_ledger_bench [--rows N] [--writer-rows M] [--threads T]
 *                     [--db FILE] [--reuse] [--keep] [--raw]
 *                     [--lone N [--gap-us U] [--prewake-us P] [--full]]
 *
 * 1. Writer: T threads submit M rows through pr_ledger_submit (the real
 *    path: queue, writer thread, group commit, callback, rollup cells
 *    flushed every 250 ms and by the final pr_ledger_flush) to
 *    a fresh file, then to ":memory:"; prints rows/s and rows per commit;
 *    then the commit latency of lone rows (submit -> callback).
 * 2. Generate: N rows (default 1,000,000; 10,000,000 for the README
 *    number) spread over 30 days, bulk-inserted in one transaction of
 *    prepared inserts (not through the writer: that is phase 1's job), then
 *    the rollup is rebuilt with pr_ledger_rebuild_rollups.  --reuse skips
 *    this and queries an existing --db.
 * 3. Queries: every group_by over the 30 days (hour-aligned and not),
 *    with and without a key filter; best of 3 runs, in ms.  --raw also
 *    times the raw-rows path (slow on big ledgers).
 *
 * --pg: the same on PostgreSQL, on a private cluster the tool starts
 * (tests/lib/pgtest): writer rows/s and lone-row latency through
 * pr_ledger_submit, then the generated SQLite rows copied in with COPY
 * (indexes dropped for it, rebuilt after), the rollups built by SQL
 * (one GROUPING SETS scan for the hourly cells, the daily ones from
 * those), and the same queries.
 *
 * --lone N: only the lone-row commit latency, N rows to a fresh file
 * (NORMAL; --full: synchronous=FULL), each --gap-us after the previous
 * one's callback;
 * --prewake-us P: each announced with pr_ledger_prewake P us of busy work
 * before its submit (the latency counts from the submit).
 *
 * Short runs only on shared machines: the 10M generation takes minutes.
 */
#include "../pricing/pricing.h"
#include "lib/pgtest.h"

#include <libpq-fe.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static _Atomic long n_done;

static void
done_cb(void *ud, int ok)
{
    (void)ud;
    if (ok)
        atomic_fetch_add(&n_done, 1);
}

struct wsub {
    struct pr_ledger *l;
    long first, n;
};

static const char *const wmodels[] = {"gpt-4.1", "deepseek-v3.2",
                                      "claude-sonnet-4.5", "local"};

static void *
wsub_main(void *arg)
{
    struct wsub *w = arg;
    int64_t now = gx_now_ms();
    for (long i = w->first; i < w->first + w->n; i++) {
        char id[32];
        snprintf(id, sizeof(id), "bench-%ld", i);
        struct pr_usage_row r = {.ts_ms = now + i / 100,
                                 .request_id = id,
                                 .key_id = i % 50,
                                 .route = "auto",
                                 .provider = "relay",
                                 .model = wmodels[i % 4],
                                 .status = 200,
                                 .attempts = 1,
                                 .stream = (int)(i & 1),
                                 .prompt_tokens = 500 + i % 1000,
                                 .completion_tokens = 200,
                                 .cached_tokens = 0,
                                 .cost_pusd = 123456789,
                                 .latency_ms = 300 + i % 2000,
                                 .ttft_ms = 120,
                                 .usage_source = "upstream"};
        while (pr_ledger_submit(w->l, &r, done_cb, NULL) == GX_EAGAIN)
            usleep(200);
    }
    return NULL;
}

static void
bench_writer(const char *path, long rows, int threads, int sync_full)
{
    char err[256];
    struct pr_ledger *l = NULL;
    struct pr_ledger_opts o = {.queue_max = 1 << 16,
                               .sync = sync_full ? PR_LEDGER_SYNC_FULL
                                                 : PR_LEDGER_SYNC_NORMAL};
    if (pr_ledger_open_ex(path, &o, &l, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "open %s: %s\n", path, err);
        exit(1);
    }
    atomic_store(&n_done, 0);
    pthread_t th[64];
    struct wsub ws[64];
    if (threads > 64)
        threads = 64;
    int64_t t0 = gx_mono_us();
    for (int t = 0; t < threads; t++) {
        ws[t] = (struct wsub){l, t * (rows / threads), rows / threads};
        pthread_create(&th[t], NULL, wsub_main, &ws[t]);
    }
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    pr_ledger_flush(l);
    int64_t t1 = gx_mono_us();
    struct pr_ledger_stats s;
    pr_ledger_stats(l, &s);
    pr_ledger_close(l);
    double secs = (double)(t1 - t0) / 1e6;
    printf("writer %-9s %-6s %d threads: %ld rows in %.2f s = %.0f rows/s,"
           " %lld commits (%.0f rows/commit), %lld rollup flushes\n",
           pr_store_is_pg(path)          ? "postgres"
           : strcmp(path, ":memory:") ? "file"
                                       : ":memory:",
           sync_full ? "FULL" : "NORMAL", threads, (long)atomic_load(&n_done),
           secs, (double)atomic_load(&n_done) / secs, (long long)s.commits,
           s.commits ? (double)s.rows / (double)s.commits : 0.0,
           (long long)s.rollup_flushes);
}

/* Commit latency of a lone row (submit -> callback), as a request sees it
 * on an idle server. */
struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
};

static void
wait_cb(void *ud, int ok)
{
    struct waiter *w = ud;
    (void)ok;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Pause between lone rows (--gap-us), so the writer is asleep when a row
 * comes, as on a server at ~1000 req/s; 0 = back to back. */
static long lone_gap_us;
/* --prewake-us P: pr_ledger_prewake, then P us of busy work (a worker
 * finishing its request), then the submit; -1 = no hint. */
static long lone_prewake_us = -1;

static void
bench_latency(const char *path, int sync_full, int n)
{
    char err[256];
    struct pr_ledger *l = NULL;
    struct pr_ledger_opts o = {.sync = sync_full ? PR_LEDGER_SYNC_FULL
                                                 : PR_LEDGER_SYNC_NORMAL};
    if (pr_ledger_open_ex(path, &o, &l, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "open %s: %s\n", path, err);
        exit(1);
    }
    int64_t *lat = calloc((size_t)n, sizeof(*lat));
    struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    for (int i = 0; i < n; i++) {
        char rid[48];
        snprintf(rid, sizeof(rid), "lat-%d-%lld", i, (long long)gx_now_ms());
        struct pr_usage_row r = {.ts_ms = gx_now_ms(),
                                 .request_id = rid,
                                 .key_id = 1,
                                 .model = "gpt-4.1",
                                 .status = 200,
                                 .prompt_tokens = 100,
                                 .completion_tokens = 10,
                                 .cost_pusd = 1000,
                                 .latency_ms = 250,
                                 .ttft_ms = 50,
                                 .usage_source = "upstream"};
        w.done = 0;
        if (lone_gap_us > 0)
            usleep((useconds_t)lone_gap_us);
        if (lone_prewake_us >= 0) {
            pr_ledger_prewake(l);
            for (int64_t until = gx_mono_us() + lone_prewake_us;
                 gx_mono_us() < until;)
                ;
        }
        int64_t t0 = gx_mono_us();
        pr_ledger_submit(l, &r, wait_cb, &w);
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        lat[i] = gx_mono_us() - t0;
    }
    pr_ledger_close(l);
    qsort(lat, (size_t)n, sizeof(*lat), cmp_i64);
    printf("commit latency %-9s %-6s lone rows: p50 %lld us, p90 %lld us,"
           " p99 %lld us (gap %ld us, prewake %ld us before)\n",
           pr_store_is_pg(path)          ? "postgres"
           : strcmp(path, ":memory:") ? "file"
                                       : ":memory:",
           sync_full ? "FULL" : "NORMAL", (long long)lat[n / 2],
           (long long)lat[n * 9 / 10], (long long)lat[n * 99 / 100],
           lone_gap_us, lone_prewake_us);
    free(lat);
}

/* ------------------------------------------------------------------ */

struct pick {
    const char *route, *model, *provider;
};
/* What a realistic config produces: each route reaches a few targets. */
static const struct pick picks[] = {
    {"auto", "deepseek-v3.2", "relay"},
    {"auto", "gpt-4.1", "relay"},
    {"auto", "local", "local"},
    {"fast", "gpt-4.1", "relay"},
    {"fast", "claude-sonnet-4.5", "relay"},
    {"fast", "deepseek-v3.2", "deepseek"},
    {"gpt", "gpt-4.1", "relay"},
    {"gpt", "gpt-4.1-mini", "relay"},
    {"mix", "gemini-2.5-flash", "google"},
    {"mix", "deepseek-v3.2", "relay"},
    {NULL, "claude-haiku-4.5", "relay"}, /* a bare model name */
};
#define NPICKS (sizeof(picks) / sizeof(picks[0]))
#define NKEYS 50

static int
generate(const char *path, long rows, int64_t t_end)
{
    char err[256];
    struct pr_ledger *l = NULL;
    /* The ledger creates the schema. */
    if (pr_ledger_open(path, &l, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    pr_ledger_close(l);
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK)
        return 1;
    sqlite3_exec(db,
                 "PRAGMA synchronous=OFF; PRAGMA cache_size=-262144;"
                 " BEGIN",
                 NULL, NULL, NULL);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(
            db,
            "INSERT INTO usage (ts_ms, request_id, key_id, route, provider,"
            " model, status, attempts, stream, prompt_tokens,"
            " completion_tokens, cached_tokens, cost_pusd, latency_ms,"
            " ttft_ms, usage_source, error) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,"
            "?9,?10,?11,?12,?13,?14,?15,?16,?17)",
            -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "prepare: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    int64_t span = 30LL * 86400000;
    int64_t t_start = t_end - span;
    unsigned s = 99;
    int64_t t0 = gx_mono_us();
    for (long i = 0; i < rows; i++) {
        s = s * 1103515245u + 12345u;
        const struct pick *p = &picks[(s >> 8) % NPICKS];
        s = s * 1103515245u + 12345u;
        int64_t key = (s >> 8) % 10 == 0 ? -1 : (int64_t)((s >> 12) % NKEYS);
        int status = (s >> 4) % 50 == 0 ? 502 : 200;
        s = s * 1103515245u + 12345u;
        int64_t prompt = 100 + (s >> 6) % 8000;
        int64_t cached = (s >> 3) % 3 == 0 ? prompt / 2 : 0;
        int64_t completion = 20 + (s >> 9) % 1500;
        int64_t lat = 80 + (s >> 10) % 6000;
        struct pr_price price;
        if (!pr_price_default(p->model, &price))
            price = (struct pr_price){0, 0, 0};
        int64_t cost = 0;
        pr_cost(&price, prompt, cached, completion, &cost);
        if (status != 200)
            cost = 0;
        char id[32];
        snprintf(id, sizeof(id), "g%ld", i);
        sqlite3_bind_int64(
            st, 1,
            t_start + (int64_t)((double)i * (double)span / (double)rows));
        sqlite3_bind_text(st, 2, id, -1, SQLITE_TRANSIENT);
        if (key >= 0)
            sqlite3_bind_int64(st, 3, key);
        else
            sqlite3_bind_null(st, 3);
        if (p->route)
            sqlite3_bind_text(st, 4, p->route, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 4);
        sqlite3_bind_text(st, 5, p->provider, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, p->model, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 7, status);
        sqlite3_bind_int(st, 8, status == 200 ? 1 : 3);
        sqlite3_bind_int(st, 9, (int)(i & 1));
        sqlite3_bind_int64(st, 10, prompt);
        sqlite3_bind_int64(st, 11, completion);
        sqlite3_bind_int64(st, 12, cached);
        sqlite3_bind_int64(st, 13, cost);
        sqlite3_bind_int64(st, 14, lat);
        sqlite3_bind_int64(st, 15, lat / 4);
        sqlite3_bind_text(st, 16, "upstream", -1, SQLITE_STATIC);
        if (status != 200)
            sqlite3_bind_text(st, 17, "upstream 502", -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 17);
        if (sqlite3_step(st) != SQLITE_DONE) {
            fprintf(stderr, "insert: %s\n", sqlite3_errmsg(db));
            return 1;
        }
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "commit: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    sqlite3_close(db);
    int64_t t1 = gx_mono_us();
    printf("generate: %ld rows in %.1f s = %.0f rows/s (bulk, one"
           " transaction)\n",
           rows, (double)(t1 - t0) / 1e6,
           (double)rows / ((double)(t1 - t0) / 1e6));
    if (pr_ledger_rebuild_rollups(path, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "rollup: %s\n", err);
        return 1;
    }
    int64_t t2 = gx_mono_us();
    printf("rollup rebuild: %.1f s\n", (double)(t2 - t1) / 1e6);
    return 0;
}

static double
time_query(const char *path, const struct pr_usage_query *q, size_t *ngroups,
           int64_t *requests)
{
    double best = 1e18;
    for (int rep = 0; rep < 3; rep++) {
        char err[256];
        struct pr_usage_result *r = NULL;
        int64_t t0 = gx_mono_us();
        if (pr_usage_query(path, q, &r, err, sizeof(err)) != GX_OK) {
            fprintf(stderr, "query: %s\n", err);
            exit(1);
        }
        int64_t t1 = gx_mono_us();
        double ms = (double)(t1 - t0) / 1000.0;
        if (ms < best)
            best = ms;
        *ngroups = r->n;
        *requests = 0;
        for (size_t i = 0; i < r->n; i++)
            *requests += r->rows[i].requests;
        pr_usage_result_free(r);
    }
    return best;
}

static void query_set(const char *path, int64_t t_end, int raw);

static void
bench_queries(const char *path, int64_t t_end, int raw)
{
    sqlite3 *db = NULL;
    sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    sqlite3_stmt *st = NULL;
    long long nrows = 0, nroll = 0, nday = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT (SELECT MAX(id) FROM usage),"
                           " (SELECT COUNT(*) FROM usage_hourly),"
                           " (SELECT COUNT(*) FROM usage_daily)",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        nrows = sqlite3_column_int64(st, 0);
        nroll = sqlite3_column_int64(st, 1);
        nday = sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    struct stat sb;
    stat(path, &sb);
    printf("ledger: %lld rows, %lld hourly + %lld daily rollup cells,"
           " %.0f MB\n",
           nrows, nroll, nday, (double)sb.st_size / 1e6);
    query_set(path, t_end, raw);
}

static void
query_set(const char *path, int64_t t_end, int raw)
{
    int64_t month = 30LL * 86400000;
    for (int g = PR_GROUP_NONE; g <= PR_GROUP_HOUR; g++) {
        for (int variant = 0; variant < 3; variant++) {
            struct pr_usage_query q = {.group_by = (enum pr_group)g,
                                       .key_filter = PR_KEY_ALL};
            const char *what;
            if (variant == 0) {
                q.since_ms = t_end - month;
                q.until_ms = t_end;
                what = "30d aligned";
            } else if (variant == 1) {
                q.since_ms = t_end - month + 1234567;
                q.until_ms = t_end - 7654321;
                what = "30d unaligned";
            } else {
                q.since_ms = t_end - month + 1234567;
                q.until_ms = t_end - 7654321;
                q.key_filter = 7;
                what = "30d unaligned, key 7";
            }
            size_t ng;
            int64_t req;
            double ms = time_query(path, &q, &ng, &req);
            printf("query group_by=%-8s %-22s %8.1f ms  (%zu groups, %lld"
                   " requests)\n",
                   pr_group_name(q.group_by), what, ms, ng, (long long)req);
            if (raw && variant == 1) {
                q.raw_only = 1;
                ms = time_query(path, &q, &ng, &req);
                printf("query group_by=%-8s %-22s %8.1f ms  (raw rows)\n",
                       pr_group_name(q.group_by), what, ms);
            }
        }
    }
}

/* ---- PostgreSQL ------------------------------------------------ */

static int
pg_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK ||
             PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "pg: %s", PQresultErrorMessage(r));
    PQclear(r);
    return ok ? 0 : -1;
}

/* Copies the SQLite ledger's usage rows into PostgreSQL (COPY: the very
 * rows the SQLite queries ran on), then builds the rollup cells there
 * with SQL, the writer's cell layout.  Bulk-load order: the usage
 * indexes (and request_id's unique constraint) are dropped for the COPY
 * and built after it; the hourly cells of all 8 (dimension x key or all
 * keys) sets in one scan (GROUPING SETS), the daily cells summed from
 * the hourly ones (a day is 24 whole UTC hours). */
static int
pg_load(const char *sqlite_path, const char *uri)
{
    char err[256];
    struct pr_ledger *l = NULL;
    if (pr_ledger_open(uri, &l, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    pr_ledger_close(l);
    PGconn *c = PQconnectdb(uri);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    if (PQstatus(c) != CONNECTION_OK ||
        sqlite3_open_v2(sqlite_path, &db, SQLITE_OPEN_READONLY, NULL) ||
        sqlite3_prepare_v2(db,
                           "SELECT ts_ms, request_id, key_id, route, provider,"
                           " model, status, attempts, stream, prompt_tokens,"
                           " completion_tokens, cached_tokens, cost_pusd,"
                           " latency_ms, ttft_ms, usage_source FROM usage",
                           -1, &st, NULL)) {
        fprintf(stderr, "pg_load: cannot open the sources\n");
        return 1;
    }
    int64_t t0 = gx_mono_us();
    if (pg_exec(c, "SET maintenance_work_mem = '512MB'") ||
        pg_exec(c, "SET work_mem = '512MB'") ||
        pg_exec(c, "TRUNCATE usage, usage_hourly, usage_daily") ||
        pg_exec(c, "ALTER TABLE usage DROP CONSTRAINT usage_request_id_key;"
                   " DROP INDEX usage_ts; DROP INDEX usage_key_ts"))
        return 1;
    PGresult *r = PQexec(c, "COPY usage (ts_ms, request_id, key_id, route,"
                            " provider, model, status, attempts, stream,"
                            " prompt_tokens, completion_tokens,"
                            " cached_tokens, cost_pusd, latency_ms, ttft_ms,"
                            " usage_source) FROM STDIN");
    int copying = PQresultStatus(r) == PGRES_COPY_IN;
    if (!copying)
        fprintf(stderr, "copy: %s", PQresultErrorMessage(r));
    PQclear(r);
    if (!copying)
        return 1;
    long n = 0;
    char line[1024];
    while (sqlite3_step(st) == SQLITE_ROW) {
        int len = 0;
        for (int i = 0; i < 16; i++) {
            const char *v = (const char *)sqlite3_column_text(st, i);
            len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%s",
                            i ? "\t" : "", v ? v : "\\N");
        }
        line[len++] = '\n';
        if (PQputCopyData(c, line, len) != 1)
            break;
        n++;
    }
    PQputCopyEnd(c, NULL);
    while ((r = PQgetResult(c)) != NULL) {
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            fprintf(stderr, "copy: %s", PQresultErrorMessage(r));
        PQclear(r);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    int64_t t1 = gx_mono_us();
    if (pg_exec(c, "ALTER TABLE usage ADD CONSTRAINT usage_request_id_key"
                   " UNIQUE (request_id);"
                   " CREATE INDEX usage_ts ON usage(ts_ms);"
                   " CREATE INDEX usage_key_ts ON usage(key_id, ts_ms)"))
        return 1;
    int64_t t2 = gx_mono_us();
    printf("postgres: %ld rows copied in %.1f s (COPY, indexes dropped),"
           " indexes built in %.1f s\n",
           n, (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6);
    /* The cells: 4 dims x {the key (-1 anonymous), all keys (-2)} x
     * {hour, day}, each with the 18-bucket latency histogram
     * (width_bucket over the 17 bounds: bucket i holds bounds[i-1] <=
     * latency < bounds[i]). */
    char sql[8192];
    int k = snprintf(
        sql, sizeof(sql),
        "INSERT INTO usage_hourly SELECT CASE WHEN GROUPING(m) = 0 THEN"
        " 'model' WHEN GROUPING(p) = 0 THEN 'provider' WHEN GROUPING(rt) = 0"
        " THEN 'route' ELSE 'none' END, CASE WHEN GROUPING(k) = 0 THEN k"
        " ELSE -2 END, hr, CASE WHEN GROUPING(m) = 0 THEN m WHEN"
        " GROUPING(p) = 0 THEN p WHEN GROUPING(rt) = 0 THEN rt ELSE '' END,"
        " count(*), count(*) FILTER (WHERE status < 200 OR status >= 300),"
        " sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens),"
        " sum(cost_pusd), sum(latency_ms)");
    for (int h = 0; h < 18; h++)
        k += snprintf(sql + k, sizeof(sql) - (size_t)k,
                      ", count(*) FILTER (WHERE b = %d)", h);
    snprintf(sql + k, sizeof(sql) - (size_t)k,
             " FROM (SELECT COALESCE(key_id, -1) AS k, ts_ms - ts_ms %%"
             " 3600000 AS hr, COALESCE(model, '') AS m, COALESCE(provider,"
             " '') AS p, COALESCE(route, '') AS rt, status, prompt_tokens,"
             " completion_tokens, cached_tokens, cost_pusd, latency_ms,"
             " width_bucket(latency_ms, ARRAY[50, 100, 200, 300, 500, 750,"
             " 1000, 1500, 2000, 3000, 5000, 7500, 10000, 15000, 20000,"
             " 30000, 60000]::bigint[]) AS b FROM usage) s GROUP BY GROUPING"
             " SETS ((k, hr), (k, hr, m), (k, hr, p), (k, hr, rt), (hr),"
             " (hr, m), (hr, p), (hr, rt))");
    if (pg_exec(c, sql) != 0)
        return 1;
    k = snprintf(sql, sizeof(sql),
                 "INSERT INTO usage_daily SELECT dim, key_id, hour_ms -"
                 " hour_ms %% 86400000, value, sum(requests), sum(errors),"
                 " sum(prompt_tokens), sum(completion_tokens),"
                 " sum(cached_tokens), sum(cost_pusd), sum(latency_sum_ms)");
    for (int h = 0; h < 18; h++)
        k += snprintf(sql + k, sizeof(sql) - (size_t)k, ", sum(h%d)", h);
    snprintf(sql + k, sizeof(sql) - (size_t)k,
             " FROM usage_hourly GROUP BY 1, 2, 3, 4");
    if (pg_exec(c, sql) != 0)
        return 1;
    pg_exec(c, "ANALYZE");
    int64_t t3 = gx_mono_us();
    r = PQexec(c, "SELECT (SELECT count(*) FROM usage), (SELECT count(*)"
                  " FROM usage_hourly), (SELECT count(*) FROM usage_daily),"
                  " pg_database_size(current_database())");
    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        printf("postgres: rollups built in %.1f s; ledger: %s rows, %s hourly"
               " + %s daily rollup cells, %.0f MB\n",
               (double)(t3 - t2) / 1e6, PQgetvalue(r, 0, 0),
               PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2),
               atof(PQgetvalue(r, 0, 3)) / 1e6);
    PQclear(r);
    PQfinish(c);
    return 0;
}

int
main(int argc, char **argv)
{
    long rows = 1000000, wrows = 200000, lone = 0;
    int lone_full = 0;
    int threads = 4, reuse = 0, keep = 0, raw = 0, pg = 0;
    const char *path = "/tmp/llmux-ledger-bench.db";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atol(argv[++i]);
        else if (!strcmp(argv[i], "--writer-rows") && i + 1 < argc)
            wrows = atol(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--db") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "--reuse"))
            reuse = 1;
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else if (!strcmp(argv[i], "--raw"))
            raw = 1;
        else if (!strcmp(argv[i], "--pg"))
            pg = 1;
        else if (!strcmp(argv[i], "--lone") && i + 1 < argc)
            lone = atol(argv[++i]);
        else if (!strcmp(argv[i], "--gap-us") && i + 1 < argc)
            lone_gap_us = atol(argv[++i]);
        else if (!strcmp(argv[i], "--full"))
            lone_full = 1;
        else if (!strcmp(argv[i], "--prewake-us") && i + 1 < argc)
            lone_prewake_us = atol(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s [--rows N] [--writer-rows M] [--threads T]"
                    " [--db FILE] [--reuse] [--keep] [--raw] [--pg]"
                    " [--lone N [--gap-us U] [--prewake-us P] [--full]]\n",
                    argv[0]);
            return 2;
        }
    }
    if (threads < 1)
        threads = 1;
    char uri[256] = "";
    if (pg && (pgt_start() != 0 || pgt_createdb("bench", uri, sizeof(uri)))) {
        fprintf(stderr, "--pg: no PostgreSQL cluster\n");
        return 1;
    }
    char wpath[600], side[700];
    snprintf(wpath, sizeof(wpath), "%s.writer", path);
    if (lone > 0) {
        /* Only the lone-row commit latency, on a fresh file. */
        for (int k = 0; k < 3; k++) {
            const char *sfx[] = {"", "-wal", "-shm"};
            snprintf(side, sizeof(side), "%s%s", wpath, sfx[k]);
            unlink(side);
        }
        bench_latency(wpath, lone_full, (int)lone);
        for (int k = 0; k < 3; k++) {
            const char *sfx[] = {"", "-wal", "-shm"};
            snprintf(side, sizeof(side), "%s%s", wpath, sfx[k]);
            unlink(side);
        }
        return 0;
    }
    if (wrows > 0) {
        for (int k = 0; k < 3; k++) {
            const char *sfx[] = {"", "-wal", "-shm"};
            snprintf(side, sizeof(side), "%s%s", wpath, sfx[k]);
            unlink(side);
        }
        bench_writer(wpath, wrows, threads, 0);
        for (int k = 0; k < 3; k++) {
            const char *sfx[] = {"", "-wal", "-shm"};
            snprintf(side, sizeof(side), "%s%s", wpath, sfx[k]);
            unlink(side);
        }
        bench_writer(wpath, wrows, threads, 1);
        for (int k = 0; k < 3; k++) {
            const char *sfx[] = {"", "-wal", "-shm"};
            snprintf(side, sizeof(side), "%s%s", wpath, sfx[k]);
            unlink(side);
        }
        bench_writer(":memory:", wrows, threads, 0);
        for (int full = 0; full < 2; full++) {
            bench_latency(wpath, full, 500);
            for (int k = 0; k < 3; k++) {
                const char *sfx[] = {"", "-wal", "-shm"};
                snprintf(side, sizeof(side), "%s%s", wpath, sfx[k]);
                unlink(side);
            }
        }
        bench_latency(":memory:", 0, 500);
        if (pg) {
            bench_writer(uri, wrows, threads, 0);
            bench_latency(uri, 0, 500);
        }
    }
    /* A fixed, hour-aligned end so runs are comparable. */
    int64_t t_end = 1764547200000LL; /* 2025-12-01T00:00:00Z */
    if (rows > 0) {
        if (!reuse) {
            for (int k = 0; k < 3; k++) {
                const char *sfx[] = {"", "-wal", "-shm"};
                snprintf(side, sizeof(side), "%s%s", path, sfx[k]);
                unlink(side);
            }
            if (generate(path, rows, t_end) != 0)
                return 1;
        }
        bench_queries(path, t_end, raw);
        if (pg && pg_load(path, uri) == 0)
            query_set(uri, t_end, raw);
        if (!keep && !reuse) {
            for (int k = 0; k < 3; k++) {
                const char *sfx[] = {"", "-wal", "-shm"};
                snprintf(side, sizeof(side), "%s%s", path, sfx[k]);
                unlink(side);
            }
        }
    }
    return 0;
}
