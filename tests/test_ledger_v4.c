/*
 * Ledger schema version 4 on both backends: the api, cache_write_tokens,
 * reasoning_tokens and unpriced columns are written and read back; the
 * unpriced count reaches the usage query (raw rows and rollup cells
 * alike) and its JSON; and a version-3 database (made by removing what
 * version 4 adds) upgrades in place, once, keeping its old rows (which
 * read back as api 'chat', priced).  PostgreSQL runs on a private
 * cluster (tests/lib/pgtest); without the server binaries it says so and
 * fails only under LLMUX_REQUIRE_PG.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../common/common.h"
#include "../pricing/pricing.h"
#include "harness.h"
#include "lib/e2e.h"
#include "lib/pgtest.h"

#define T0 1764547200000LL /* 2025-12-01T00:00Z */

static void
on_commit(void *ud, int ok)
{
    (void)ud;
    T_CHECK(ok);
}

/* Row i: apis in turn, some cache writes and reasoning, every third row
 * unpriced (cost 0). */
static void
make_row(int i, const char *tag, struct pr_usage_row *r, char *rid,
         size_t n)
{
    static const char *const apis[] = {"chat", "messages", "responses",
                                       "embeddings", "completions"};
    snprintf(rid, n, "%s-%d", tag, i);
    memset(r, 0, sizeof(*r));
    r->ts_ms = T0 + (int64_t)i * 60000; /* spans several hours */
    r->request_id = rid;
    r->key_id = -1;
    r->provider = "p";
    r->model = i % 3 == 0 ? "mystery" : "claude-sonnet-4.5";
    r->status = 200;
    r->attempts = 1;
    r->prompt_tokens = 100 + i;
    r->completion_tokens = 50;
    r->cached_tokens = 10;
    r->cache_write_tokens = 20 + i % 5;
    r->reasoning_tokens = i % 7;
    r->unpriced = i % 3 == 0;
    r->cost_pusd = r->unpriced ? 0 : 1000 + i;
    r->latency_ms = 100;
    r->ttft_ms = -1;
    r->usage_source = "upstream";
    r->api = apis[i % 5];
}

#define NROWS 300

static void
submit(struct pr_ledger *l, int from, int to, const char *tag)
{
    for (int i = from; i < to; i++) {
        struct pr_usage_row r;
        char rid[64];
        make_row(i, tag, &r, rid, sizeof(rid));
        T_EQ_INT(pr_ledger_submit(l, &r, on_commit, NULL), GX_OK);
    }
    pr_ledger_flush(l);
}

/* Expected totals of rows [from, to). */
static void
expect(int from, int to, int64_t *unpriced, int64_t *cost)
{
    *unpriced = *cost = 0;
    for (int i = from; i < to; i++) {
        struct pr_usage_row r;
        char rid[64];
        make_row(i, "x", &r, rid, sizeof(rid));
        *unpriced += r.unpriced;
        *cost += r.cost_pusd;
    }
}

/* The query's unpriced and cost totals, through the rollup or raw. */
static void
check_query(const char *db, int64_t want_unpriced, int64_t want_cost)
{
    char err[512];
    for (int raw = 0; raw < 2; raw++) {
        struct pr_usage_query q = {T0 - 86400000LL, T0 + 3 * 86400000LL,
                                   PR_GROUP_MODEL, PR_KEY_ALL, raw};
        struct pr_usage_result *res = NULL;
        T_EQ_INT(pr_usage_query(db, &q, &res, err, sizeof(err)), GX_OK);
        if (!res) {
            fprintf(stderr, "query: %s\n", err);
            return;
        }
        int64_t u = 0, c = 0, mystery_u = -1;
        for (size_t i = 0; i < res->n; i++) {
            u += res->rows[i].unpriced;
            c += res->rows[i].cost_pusd;
            if (!strcmp(res->rows[i].group, "mystery"))
                mystery_u = res->rows[i].unpriced;
        }
        T_EQ_INT(u, want_unpriced);
        T_EQ_INT(c, want_cost);
        /* Every unpriced row is the model without a price. */
        T_EQ_INT(mystery_u, want_unpriced);
        struct gx_buf b;
        gx_buf_init(&b, 0);
        T_EQ_INT(pr_usage_result_json(res, &b), GX_OK);
        T_CHECK(b.data && strstr(b.data, "\"unpriced\":") != NULL);
        gx_buf_cleanup(&b);
        pr_usage_result_free(res);
    }
}

static void
test_sqlite(void)
{
    char err[512];
    char *dir = e2e_temp_dir();
    char path[600];
    snprintf(path, sizeof(path), "%s/l.db", dir);
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_schema_version(), 5);
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    submit(l, 0, NROWS, "a");
    pr_ledger_close(l);

    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    T_EQ_INT(e2e_db_int(path, "SELECT COUNT(*) FROM usage WHERE api = 'messages'"),
             NROWS / 5);
    T_EQ_INT(e2e_db_int(path, "SELECT cache_write_tokens FROM usage WHERE"
                        " request_id = 'a-7'"),
             22);
    T_EQ_INT(e2e_db_int(path, "SELECT reasoning_tokens FROM usage WHERE"
                        " request_id = 'a-13'"),
             6);
    T_EQ_INT(e2e_db_int(path, "SELECT unpriced FROM usage WHERE request_id = 'a-9'"),
             1);
    T_EQ_INT(e2e_db_int(path, "SELECT unpriced FROM usage WHERE request_id = 'a-10'"),
             0);
    int64_t wu, wc;
    expect(0, NROWS, &wu, &wc);
    T_EQ_INT(e2e_db_int(path, "SELECT SUM(unpriced) FROM usage_hourly WHERE"
                        " dim = 'none' AND key_id = -2"),
             wu);
    check_query(path, wu, wc);

    /* Make it a version-3 database again: drop what version 4 added, as
     * an older llmux left it, and write one row the old way. */
    T_EQ_INT(sqlite3_exec(db,
                          "ALTER TABLE usage DROP COLUMN api;"
                          "ALTER TABLE usage DROP COLUMN cache_write_tokens;"
                          "ALTER TABLE usage DROP COLUMN reasoning_tokens;"
                          "ALTER TABLE usage DROP COLUMN unpriced;"
                          "ALTER TABLE usage_hourly DROP COLUMN unpriced;"
                          "ALTER TABLE usage_daily DROP COLUMN unpriced;"
                          /* and what version 5 added */
                          "ALTER TABLE usage_hourly DROP COLUMN"
                          " cache_write_tokens;"
                          "ALTER TABLE usage_hourly DROP COLUMN"
                          " reasoning_tokens;"
                          "ALTER TABLE usage_daily DROP COLUMN"
                          " cache_write_tokens;"
                          "ALTER TABLE usage_daily DROP COLUMN"
                          " reasoning_tokens;"
                          "INSERT INTO usage (ts_ms, request_id, status,"
                          " prompt_tokens, cost_pusd) VALUES"
                          " (1764547200000, 'old-1', 200, 7, 5);"
                          "PRAGMA user_version = 3",
                          NULL, NULL, NULL),
             SQLITE_OK);
    l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    struct pr_ledger_stats stats;
    pr_ledger_stats(l, &stats);
    T_EQ_INT(stats.migrations_applied, 2);
    submit(l, NROWS, NROWS + 30, "b");
    pr_ledger_close(l);
    T_EQ_INT(e2e_db_int(path, "PRAGMA user_version"), 5);
    T_EQ_INT(e2e_db_int(path, "SELECT COUNT(*) FROM usage WHERE request_id ="
                        " 'old-1' AND api = 'chat' AND unpriced = 0 AND"
                        " cache_write_tokens = 0 AND reasoning_tokens = 0"),
             1);
    T_EQ_INT(e2e_db_int(path, "SELECT COUNT(*) FROM usage WHERE api = 'messages'"
                        " AND request_id LIKE 'b-%'"),
             30 / 5);
    /* The rows from before lost their flags with the dropped column (as
     * a real version-3 database never had them): only the new rows are
     * unpriced, in the raw rows, the rollup cells and a rebuild alike. */
    int64_t wu2, wc2;
    expect(NROWS, NROWS + 30, &wu2, &wc2);
    T_CHECK(wu2 > 0);
    check_query(path, wu2, wc + wc2 + 5);
    T_EQ_INT(pr_ledger_rebuild_rollups(path, err, sizeof(err)), GX_OK);
    T_EQ_INT(e2e_db_int(path, "SELECT SUM(unpriced) FROM usage_hourly WHERE"
                        " dim = 'none' AND key_id = -2"),
             wu2);
    check_query(path, wu2, wc + wc2 + 5);
    /* `llmux usage` shows them: a column in the table and CSV, a note. */
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    {
        char cmd[1400], out[8192];
        for (int f = 0; f < 2; f++) {
            snprintf(cmd, sizeof(cmd),
                     "%s usage --db %s --since 2025-11-30 --until 2025-12-05 "
                     "--group-by model --format %s",
                     bin, path, f ? "csv" : "table");
            FILE *pp = popen(cmd, "r");
            size_t n = pp ? fread(out, 1, sizeof(out) - 1, pp) : 0;
            out[n] = '\0';
            T_EQ_INT(pp ? pclose(pp) : -1, 0);
            T_CHECK(strstr(out, "unpriced") != NULL);
            if (f == 0) {
                char note[64];
                snprintf(note, sizeof(note), "note: %lld requests had no price",
                         (long long)wu2);
                T_CHECK(strstr(out, note) != NULL);
            } else {
                T_CHECK(strstr(out, "p95_ms,unpriced,cache_write_tokens,"
                                    "reasoning_tokens\n") != NULL);
            }
        }
    }
    /* Reopening migrates nothing. */
    l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    pr_ledger_stats(l, &stats);
    T_EQ_INT(stats.migrations_applied, 0);
    pr_ledger_close(l);
    sqlite3_close(db);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    T_EQ_INT(system(cmd), 0);
    free(dir);
}

static long long
pg_int(const char *sql)
{
    char out[64] = "";
    if (pgt_sql("llmux_v4", sql, out, sizeof(out)) != 0)
        return -1;
    return atoll(out);
}

static void
test_pg(void)
{
    char err[512], uri[256];
    if (pgt_start() != 0) {
        fprintf(stderr, "test_ledger_v4: PostgreSQL not available: SQLite"
                        " only%s\n",
                getenv("LLMUX_REQUIRE_PG") ? " (required: failing)" : "");
        T_CHECK(!getenv("LLMUX_REQUIRE_PG"));
        return;
    }
    if (pgt_createdb("llmux_v4", uri, sizeof(uri)) != 0) {
        T_CHECK(!"createdb");
        return;
    }
    T_EQ_INT(pr_pg_schema_version(), 5);
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(uri, &l, err, sizeof(err)), GX_OK);
    if (!l) {
        fprintf(stderr, "pg open: %s\n", err);
        return;
    }
    submit(l, 0, NROWS, "a");
    pr_ledger_close(l);
    T_EQ_INT(pg_int("SELECT count(*) FROM usage WHERE api = 'messages'"),
             NROWS / 5);
    T_EQ_INT(pg_int("SELECT cache_write_tokens FROM usage WHERE"
                    " request_id = 'a-7'"),
             22);
    T_EQ_INT(pg_int("SELECT reasoning_tokens FROM usage WHERE"
                    " request_id = 'a-13'"),
             6);
    T_EQ_INT(pg_int("SELECT unpriced FROM usage WHERE request_id = 'a-9'"),
             1);
    int64_t wu, wc;
    expect(0, NROWS, &wu, &wc);
    T_EQ_INT(pg_int("SELECT sum(unpriced) FROM usage_hourly WHERE"
                    " dim = 'none' AND key_id = -2"),
             wu);
    check_query(uri, wu, wc);

    /* Back to version 3, one old row, then upgrade in place. */
    T_EQ_INT(pgt_sql("llmux_v4",
                     "ALTER TABLE usage DROP COLUMN api,"
                     " DROP COLUMN cache_write_tokens,"
                     " DROP COLUMN reasoning_tokens, DROP COLUMN unpriced;"
                     "ALTER TABLE usage_hourly DROP COLUMN unpriced;"
                     "ALTER TABLE usage_daily DROP COLUMN unpriced;"
                     "ALTER TABLE usage_hourly DROP COLUMN cache_write_tokens,"
                     " DROP COLUMN reasoning_tokens;"
                     "ALTER TABLE usage_daily DROP COLUMN cache_write_tokens,"
                     " DROP COLUMN reasoning_tokens;"
                     "INSERT INTO usage (ts_ms, request_id, status,"
                     " prompt_tokens, cost_pusd) VALUES"
                     " (1764547200000, 'old-1', 200, 7, 5);"
                     "UPDATE llmux_schema SET version = 3",
                     NULL, 0),
             0);
    l = NULL;
    T_EQ_INT(pr_ledger_open(uri, &l, err, sizeof(err)), GX_OK);
    if (!l) {
        fprintf(stderr, "pg reopen: %s\n", err);
        return;
    }
    struct pr_ledger_stats stats;
    pr_ledger_stats(l, &stats);
    T_EQ_INT(stats.migrations_applied, 2);
    submit(l, NROWS, NROWS + 30, "b");
    pr_ledger_close(l);
    T_EQ_INT(pg_int("SELECT version FROM llmux_schema"), 5);
    T_EQ_INT(pg_int("SELECT count(*) FROM usage WHERE request_id = 'old-1'"
                    " AND api = 'chat' AND unpriced = 0"),
             1);
    int64_t wu2, wc2;
    expect(NROWS, NROWS + 30, &wu2, &wc2);
    /* Cells written before the downgrade lost their counts with the
     * column; the new rows' counts are there. */
    T_EQ_INT(pg_int("SELECT sum(unpriced) FROM usage_hourly WHERE"
                    " dim = 'none' AND key_id = -2"),
             wu2);
}

int
main(void)
{
    T_RUN(test_sqlite);
    T_RUN(test_pg);
    pgt_stop();
    return T_END();
}
