/*
 * The storage interface on both backends: the same keys, ledger and
 * usage-query checks run on SQLite and on a real PostgreSQL server (a
 * private cluster started by tests/lib/pgtest), and every query's
 * answer must be identical on the two.  Then PostgreSQL's own promises:
 * migrations once and a newer schema refused, a request id written at
 * most once, fail-closed when the server is down and open again when it
 * is back, the spool replayed exactly once (also when replayed twice),
 * and a server restart in the middle of concurrent writes losing and
 * duplicating nothing.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/common.h"
#include "../pricing/pricing.h"
#include "harness.h"
#include "lib/e2e.h"
#include "lib/pgtest.h"

static char sq_db[512], pg_uri[256];
static int have_pg;

static _Atomic int n_ok, n_fail;

static void
on_commit(void *ud, int ok)
{
    (void)ud;
    if (ok)
        atomic_fetch_add(&n_ok, 1);
    else
        atomic_fetch_add(&n_fail, 1);
}

static void
reset_counts(void)
{
    atomic_store(&n_ok, 0);
    atomic_store(&n_fail, 0);
}

/* Row i of the common data set: 3 days from T0, 3 models, keys k1, k2
 * and anonymous, some errors, costs and latencies that vary. */
#define T0 1764547200000LL /* 2025-12-01T00:00Z */
#define NROWS 3000
static int64_t key_ids[2];

static void
make_row(int i, const char *tag, struct pr_usage_row *r, char *rid,
         size_t ridlen)
{
    static const char *const models[] = {"gpt-4.1", "deepseek-v3.2", "local"};
    static const char *const provs[] = {"relay", "relay", "local"};
    snprintf(rid, ridlen, "%s-%d", tag, i);
    memset(r, 0, sizeof(*r));
    r->ts_ms = T0 + (int64_t)i * (3 * 86400000LL / NROWS) + 17;
    r->request_id = rid;
    r->key_id = i % 3 == 2 ? -1 : key_ids[i % 3];
    r->route = i % 4 == 0 ? "auto" : NULL;
    r->provider = provs[i % 3];
    r->model = models[i % 3];
    r->status = i % 11 == 0 ? 502 : 200;
    r->attempts = 1 + i % 2;
    r->stream = i % 5 == 0;
    r->prompt_tokens = 10 + i % 37;
    r->completion_tokens = 5 + i % 23;
    r->cached_tokens = i % 7;
    r->cache_write_tokens = i % 3; /* prompt - cached >= 4 */
    r->reasoning_tokens = i % 5;   /* completion >= 5 */
    r->cost_pusd = 1000003LL * (i % 13);
    r->latency_ms = (i * 37) % 4000;
    r->ttft_ms = i % 3 ? (i * 11) % 900 : -1;
    r->usage_source = "upstream";
    r->api = i % 4 == 1 ? "messages" : i % 4 == 3 ? "embeddings" : NULL;
    r->error = r->status != 200 ? "upstream 'bad' gateway" : NULL;
}

struct submitter {
    struct pr_ledger *l;
    int from, to;
    const char *tag;
};

static void *
submit_range(void *arg)
{
    struct submitter *s = arg;
    for (int i = s->from; i < s->to; i++) {
        struct pr_usage_row r;
        char rid[64];
        make_row(i, s->tag, &r, rid, sizeof(rid));
        while (pr_ledger_submit(s->l, &r, on_commit, NULL) == GX_EAGAIN)
            usleep(1000);
    }
    return NULL;
}

/* Submits rows [0, n) from 4 threads and waits for them. */
static void
submit_all(struct pr_ledger *l, int n, const char *tag)
{
    pthread_t th[4];
    struct submitter s[4];
    for (int t = 0; t < 4; t++) {
        s[t] = (struct submitter){l, n * t / 4, n * (t + 1) / 4, tag};
        pthread_create(&th[t], NULL, submit_range, &s[t]);
    }
    for (int t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    pr_ledger_flush(l);
}

struct keyseen {
    int n, revoked;
    int64_t spent[2];
    char name0[64];
};

static int
see_key(void *ud, const struct pr_key *k)
{
    struct keyseen *s = ud;
    if (s->n == 0)
        snprintf(s->name0, sizeof(s->name0), "%s", k->name);
    for (int i = 0; i < 2; i++)
        if (k->id == key_ids[i])
            s->spent[i] = k->spent_pusd;
    s->n++;
    s->revoked += k->revoked_ms >= 0;
    return 0;
}

/* The same checks on either backend. */
static void
backend_suite(const char *db)
{
    char err[512];
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(db, &l, err, sizeof(err)), GX_OK);
    if (!l) {
        fprintf(stderr, "open %s: %s\n", db, err);
        return;
    }
    struct pr_ledger_stats st;
    pr_ledger_stats(l, &st);
    T_CHECK(st.migrations_applied >= 1);

    struct pr_key k = {.name = "team 'a'", .expires_ms = -1,
                       .revoked_ms = -1, .budget_pusd = 5000000,
                       .rpm = 60, .tpm = 0, .models = "gpt-4.1,local"};
    memset(k.hash, 0xab, sizeof(k.hash));
    T_EQ_INT(pr_key_create(db, &k, &key_ids[0], err, sizeof(err)), GX_OK);
    k.name = "b";
    k.budget_pusd = -1;
    k.models = NULL;
    memset(k.hash, 0xcd, sizeof(k.hash));
    T_EQ_INT(pr_key_create(db, &k, &key_ids[1], err, sizeof(err)), GX_OK);
    /* The hash is unique: the same secret twice is refused. */
    int64_t dup = 0;
    T_CHECK(pr_key_create(db, &k, &dup, err, sizeof(err)) != GX_OK);

    reset_counts();
    submit_all(l, NROWS, "r");
    T_EQ_INT(atomic_load(&n_ok), NROWS);
    T_EQ_INT(atomic_load(&n_fail), 0);
    pr_ledger_stats(l, &st);
    T_EQ_INT(st.rows, NROWS);

    /* Each key was charged the cost of its committed rows. */
    int64_t want[2] = {0, 0};
    for (int i = 0; i < NROWS; i++) {
        struct pr_usage_row r;
        char rid[64];
        make_row(i, "r", &r, rid, sizeof(rid));
        for (int j = 0; j < 2; j++)
            if (r.key_id == key_ids[j])
                want[j] += r.cost_pusd;
    }
    struct keyseen ks;
    memset(&ks, 0, sizeof(ks));
    T_EQ_INT(pr_key_list(db, see_key, &ks, err, sizeof(err)), GX_OK);
    T_EQ_INT(ks.n, 2);
    T_EQ_STR(ks.name0, "team 'a'");
    T_EQ_INT(ks.spent[0], want[0]);
    T_EQ_INT(ks.spent[1], want[1]);
    T_EQ_INT(pr_key_revoke(db, key_ids[1], 1234, err, sizeof(err)), GX_OK);
    T_EQ_INT(pr_key_revoke(db, 987654, 1234, err, sizeof(err)),
             GX_ENOTFOUND);
    memset(&ks, 0, sizeof(ks));
    T_EQ_INT(pr_key_list(db, see_key, &ks, err, sizeof(err)), GX_OK);
    T_EQ_INT(ks.revoked, 1);
    pr_ledger_close(l);

    /* The cache-write and reasoning sums, exact from the rollup cells
     * (whole range) and with raw-row edges (partial hours and days), as
     * from the raw rows alone. */
    const int64_t span[2][2] = {
        {T0, T0 + 3 * 86400000LL},
        {T0 + 1234567, T0 + 2 * 86400000LL + 7654321}};
    for (int sp = 0; sp < 2; sp++) {
        int64_t cw = 0, rs = 0;
        for (int i = 0; i < NROWS; i++) {
            struct pr_usage_row r;
            char rid[64];
            make_row(i, "r", &r, rid, sizeof(rid));
            if (r.ts_ms >= span[sp][0] && r.ts_ms < span[sp][1]) {
                cw += r.cache_write_tokens;
                rs += r.reasoning_tokens;
            }
        }
        T_CHECK(cw > 0 && rs > 0);
        for (int raw = 0; raw < 2; raw++) {
            struct pr_usage_query q = {span[sp][0], span[sp][1],
                                       PR_GROUP_NONE,
                                       PR_KEY_ALL, raw};
            struct pr_usage_result *res = NULL;
            T_EQ_INT(pr_usage_query(db, &q, &res, err, sizeof(err)), GX_OK);
            T_EQ_INT(res ? res->n : 0, 1);
            if (res && res->n == 1) {
                T_EQ_INT(res->rows[0].cache_write_tokens, cw);
                T_EQ_INT(res->rows[0].reasoning_tokens, rs);
            }
            pr_usage_result_free(res);
        }
    }

    /* Reopen: nothing left to migrate. */
    T_EQ_INT(pr_ledger_open(db, &l, err, sizeof(err)), GX_OK);
    pr_ledger_stats(l, &st);
    T_EQ_INT(st.migrations_applied, 0);
    pr_ledger_close(l);
}

/* One query on both backends: identical answers, and the rollup path
 * equal to the raw rows. */
static void
same_answer(int64_t since, int64_t until, enum pr_group g, int64_t key)
{
    char err[512];
    struct pr_usage_query q = {since, until, g, key, 0};
    struct pr_usage_result *a = NULL, *b = NULL, *c = NULL;
    T_EQ_INT(pr_usage_query(sq_db, &q, &a, err, sizeof(err)), GX_OK);
    T_EQ_INT(pr_usage_query(pg_uri, &q, &b, err, sizeof(err)), GX_OK);
    q.raw_only = 1;
    T_EQ_INT(pr_usage_query(pg_uri, &q, &c, err, sizeof(err)), GX_OK);
    if (!a || !b || !c) {
        fprintf(stderr, "query: %s\n", err);
        goto out;
    }
    T_EQ_INT(a->n, b->n);
    T_EQ_INT(b->n, c->n);
    for (size_t i = 0; i < a->n && i < b->n && i < c->n; i++) {
        const struct pr_usage_group *x = &a->rows[i], *y = &b->rows[i],
                                    *z = &c->rows[i];
        T_EQ_STR(x->group, y->group);
        T_EQ_INT(x->requests, y->requests);
        T_EQ_INT(x->errors, y->errors);
        T_EQ_INT(x->prompt_tokens, y->prompt_tokens);
        T_EQ_INT(x->completion_tokens, y->completion_tokens);
        T_EQ_INT(x->cached_tokens, y->cached_tokens);
        T_EQ_INT(x->cache_write_tokens, y->cache_write_tokens);
        T_EQ_INT(x->reasoning_tokens, y->reasoning_tokens);
        T_EQ_INT(y->cache_write_tokens, z->cache_write_tokens);
        T_EQ_INT(y->reasoning_tokens, z->reasoning_tokens);
        T_EQ_INT(x->cost_pusd, y->cost_pusd);
        T_EQ_INT(x->p50_ms, y->p50_ms);
        T_EQ_INT(x->p95_ms, y->p95_ms);
        T_EQ_INT(y->requests, z->requests);
        T_EQ_INT(y->cost_pusd, z->cost_pusd);
        T_EQ_INT(y->p95_ms, z->p95_ms);
    }
out:
    pr_usage_result_free(a);
    pr_usage_result_free(b);
    pr_usage_result_free(c);
}

static void
test_both_backends(void)
{
    backend_suite(sq_db);
    int64_t sq_keys[2] = {key_ids[0], key_ids[1]};
    if (!have_pg)
        return;
    backend_suite(pg_uri);
    /* Both databases got their keys in the same order: same ids. */
    T_EQ_INT(key_ids[0], sq_keys[0]);
    T_EQ_INT(key_ids[1], sq_keys[1]);
    static const enum pr_group groups[] = {
        PR_GROUP_NONE, PR_GROUP_MODEL, PR_GROUP_PROVIDER, PR_GROUP_ROUTE,
        PR_GROUP_KEY,  PR_GROUP_DAY,   PR_GROUP_HOUR, PR_GROUP_API};
    for (size_t gi = 0; gi < sizeof(groups) / sizeof(groups[0]); gi++) {
        same_answer(T0, T0 + 3 * 86400000LL, groups[gi], PR_KEY_ALL);
        /* partial hours and days at both edges */
        same_answer(T0 + 1234567, T0 + 2 * 86400000LL + 7654321, groups[gi],
                    PR_KEY_ALL);
        same_answer(T0 + 1234567, T0 + 2 * 86400000LL + 7654321, groups[gi],
                    key_ids[0]);
        same_answer(T0, T0 + 3 * 86400000LL, groups[gi], -1);
    }
    /* By api (raw rows on both): the three APIs make_row uses. */
    char err[512];
    struct pr_usage_query q = {T0, T0 + 3 * 86400000LL, PR_GROUP_API,
                               PR_KEY_ALL, 0};
    struct pr_usage_result *r = NULL;
    T_EQ_INT(pr_usage_query(pg_uri, &q, &r, err, sizeof(err)), GX_OK);
    T_CHECK(r && r->n == 3);
    for (size_t i = 0; r && i < r->n && i < 3; i++)
        T_EQ_STR(r->rows[i].group,
                 ((const char *[]){"chat", "embeddings", "messages"})[i]);
    pr_usage_result_free(r);
}

/* ---- PostgreSQL only -------------------------------------------- */

static long long
pg_count(const char *sql)
{
    char out[128];
    if (pgt_sql("llmux_t", sql, out, sizeof(out)) != 0)
        return -1;
    return atoll(out);
}

static void
test_pg_once_and_schema(void)
{
    char err[512];
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(pg_uri, &l, err, sizeof(err)), GX_OK);
    long long before = pg_count("SELECT count(*) FROM usage");
    reset_counts();
    struct pr_usage_row r;
    char rid[64];
    make_row(5, "dup", &r, rid, sizeof(rid));
    for (int i = 0; i < 3; i++)
        T_EQ_INT(pr_ledger_submit(l, &r, on_commit, NULL), GX_OK);
    pr_ledger_flush(l);
    T_EQ_INT(atomic_load(&n_ok), 3);
    T_EQ_INT(pg_count("SELECT count(*) FROM usage"), before + 1);
    pr_ledger_close(l);

    /* A database from a newer llmux is refused, clearly. */
    T_EQ_INT(pgt_sql("llmux_t", "UPDATE llmux_schema SET version = 99",
                     NULL, 0),
             0);
    err[0] = '\0';
    T_CHECK(pr_ledger_open(pg_uri, &l, err, sizeof(err)) != GX_OK);
    T_CHECK(strstr(err, "newer than this llmux") != NULL);
    char v[32];
    snprintf(v, sizeof(v), "%d", pr_pg_schema_version());
    char sql[128];
    snprintf(sql, sizeof(sql), "UPDATE llmux_schema SET version = %s", v);
    T_EQ_INT(pgt_sql("llmux_t", sql, NULL, 0), 0);

    /* A version-4 database (cells without the cache-write and reasoning
     * sums) upgrades in place: migration 5 backfills every cell exactly. */
    static const char *const digest[2] = {
        "SELECT md5(string_agg(dim || key_id || '/' || hour_ms || value ||"
        " '/' || cache_write_tokens || '/' || reasoning_tokens, ';' ORDER BY"
        " dim, key_id, hour_ms, value)) FROM usage_hourly",
        "SELECT md5(string_agg(dim || key_id || '/' || day_ms || value ||"
        " '/' || cache_write_tokens || '/' || reasoning_tokens, ';' ORDER BY"
        " dim, key_id, day_ms, value)) FROM usage_daily"};
    char want[2][64], got[64];
    for (int i = 0; i < 2; i++) {
        T_EQ_INT(pgt_sql("llmux_t", digest[i], want[i], sizeof(want[i])), 0);
        T_EQ_INT(strlen(want[i]), 32);
    }
    T_CHECK(pg_count("SELECT sum(cache_write_tokens) FROM usage_daily") > 0);
    T_EQ_INT(pgt_sql("llmux_t",
                     "ALTER TABLE usage_hourly DROP COLUMN cache_write_tokens,"
                     " DROP COLUMN reasoning_tokens;"
                     " ALTER TABLE usage_daily DROP COLUMN cache_write_tokens,"
                     " DROP COLUMN reasoning_tokens;"
                     " UPDATE llmux_schema SET version = 4",
                     NULL, 0),
             0);
    l = NULL;
    T_EQ_INT(pr_ledger_open(pg_uri, &l, err, sizeof(err)), GX_OK);
    struct pr_ledger_stats st;
    pr_ledger_stats(l, &st);
    T_EQ_INT(st.migrations_applied, 1);
    pr_ledger_close(l);
    for (int i = 0; i < 2; i++) {
        T_EQ_INT(pgt_sql("llmux_t", digest[i], got, sizeof(got)), 0);
        T_EQ_STR(got, want[i]);
    }

    /* Unreachable at start: a clear error, no password in it. */
    char red[256];
    pr_store_redact("postgres://u:hunter2@127.0.0.1:1/x", red, sizeof(red));
    T_EQ_STR(red, "postgres://u:***@127.0.0.1:1/x");
    pr_store_redact("postgres://127.0.0.1/x?user=u&password=hunter2&a=b", red,
                    sizeof(red));
    T_EQ_STR(red, "postgres://127.0.0.1/x?user=u&password=***&a=b");
    T_CHECK(pr_ledger_open("postgres://u:hunter2@127.0.0.1:1/x", &l, err,
                           sizeof(err)) != GX_OK);
    T_CHECK(strstr(err, "cannot connect") != NULL);
    T_CHECK(strstr(err, "hunter2") == NULL);
}

static int
wait_available(struct pr_ledger *l, int want)
{
    for (int i = 0; i < 200; i++) {
        if (pr_ledger_available(l) == want)
            return 1;
        usleep(50000);
    }
    return 0;
}

static void
test_pg_fail_closed(void)
{
    char err[512];
    struct pr_ledger_opts o = {.lock_timeout_ms = 300};
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open_ex(pg_uri, &o, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    T_EQ_INT(pr_ledger_available(l), 1);
    T_EQ_INT(pgt_server_stop(), 0);
    reset_counts();
    struct pr_usage_row r;
    char rid[64];
    make_row(1, "closed", &r, rid, sizeof(rid));
    T_EQ_INT(pr_ledger_submit(l, &r, on_commit, NULL), GX_OK);
    pr_ledger_flush(l);
    T_EQ_INT(atomic_load(&n_fail), 1);
    T_EQ_INT(pr_ledger_available(l), 0);
    T_EQ_INT(pgt_server_start(), 0);
    T_CHECK(wait_available(l, 1));
    make_row(2, "closed", &r, rid, sizeof(rid));
    T_EQ_INT(pr_ledger_submit(l, &r, on_commit, NULL), GX_OK);
    pr_ledger_flush(l);
    T_EQ_INT(atomic_load(&n_ok), 1);
    pr_ledger_close(l);
    T_EQ_INT(pg_count("SELECT count(*) FROM usage WHERE request_id LIKE"
                      " 'closed-%'"),
             1);
}

static void
test_pg_spool(void)
{
    char err[512];
    char *tmp = e2e_temp_dir();
    char spool[512], copy[600];
    snprintf(spool, sizeof(spool), "%s/spool", tmp);
    snprintf(copy, sizeof(copy), "%s/spool.copy", tmp);
    struct pr_ledger_opts o = {.lock_timeout_ms = 300,
                               .unavailable = PR_UNAVAILABLE_SPOOL,
                               .spool_path = spool};
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open_ex(pg_uri, &o, &l, err, sizeof(err)), GX_OK);
    if (!l) {
        free(tmp);
        return;
    }
    T_EQ_INT(pgt_server_stop(), 0);
    reset_counts();
    submit_all(l, 200, "spool");
    T_EQ_INT(atomic_load(&n_ok), 200); /* served: the rows are spooled */
    T_EQ_INT(pr_ledger_available(l), 1);
    struct pr_ledger_stats st;
    pr_ledger_stats(l, &st);
    T_EQ_INT(st.spooled, 200);
    char cmd[1300];
    snprintf(cmd, sizeof(cmd), "cp %s %s", spool, copy);
    T_EQ_INT(system(cmd), 0);
    T_EQ_INT(pgt_server_start(), 0);
    for (int i = 0; i < 200 && st.replayed < 200; i++) {
        usleep(50000);
        pr_ledger_stats(l, &st);
    }
    T_EQ_INT(st.replayed, 200);
    pr_ledger_close(l);
    T_EQ_INT(pg_count("SELECT count(*) FROM usage WHERE request_id LIKE"
                      " 'spool-%'"),
             200);
    long long spent = pg_count("SELECT spent_pusd FROM keys ORDER BY id"
                               " LIMIT 1");
    /* A crash after the replay committed but before the truncate: the
     * same spool again at the next open inserts and charges nothing. */
    snprintf(cmd, sizeof(cmd), "cp %s %s", copy, spool);
    T_EQ_INT(system(cmd), 0);
    T_EQ_INT(pr_ledger_open_ex(pg_uri, &o, &l, err, sizeof(err)), GX_OK);
    pr_ledger_close(l);
    T_EQ_INT(pg_count("SELECT count(*) FROM usage WHERE request_id LIKE"
                      " 'spool-%'"),
             200);
    T_EQ_INT(pg_count("SELECT spent_pusd FROM keys ORDER BY id LIMIT 1"),
             spent);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    T_EQ_INT(system(cmd), 0);
    free(tmp);
}

/* Spool mode with a leased budget: rows served while the database is
 * down are charged to the lease that paid for them when replayed (by
 * this instance, or by the next process from the same spool), so the
 * books balance: spent + reserved never passes the budget, reserved is
 * what the lease rows hold, and the local lease shrank by the cost. */
static long long
key_col(const char *col, int64_t id)
{
    char sql[160];
    snprintf(sql, sizeof(sql), "SELECT %s FROM keys WHERE id = %lld", col,
             (long long)id);
    return pg_count(sql);
}

static void
spool_rows(struct pr_ledger *l, struct pr_budget *b, int64_t key, int from,
           int to)
{
    for (int i = from; i < to; i++) {
        struct pr_usage_row r;
        char rid[64];
        make_row(i, "spbud", &r, rid, sizeof(rid));
        r.key_id = key;
        r.cost_pusd = 1000000;
        T_EQ_INT(pr_budget_reserve(b, key, 2000000), GX_OK);
        pr_budget_settle(b, key, 2000000, r.cost_pusd);
        T_EQ_INT(pr_ledger_submit(l, &r, on_commit, NULL), GX_OK);
    }
    pr_ledger_flush(l);
}

static void
test_pg_spool_budget(void)
{
    char err[512];
    char *tmp = e2e_temp_dir();
    char spool[512];
    snprintf(spool, sizeof(spool), "%s/spool", tmp);
    struct pr_key k = {.name = "spooled", .expires_ms = -1,
                       .revoked_ms = -1, .budget_pusd = 1600000000};
    memset(k.hash, 0x5b, sizeof(k.hash));
    int64_t id = -1;
    T_EQ_INT(pr_key_create(pg_uri, &k, &id, err, sizeof(err)), GX_OK);
    struct pr_budget *b = pr_budget_new();
    T_EQ_INT(pr_budget_use_leases(b, pg_uri, "spooltest-1"), GX_OK);
    T_EQ_INT(pr_budget_set(b, id, k.budget_pusd, 0), GX_OK);
    T_EQ_INT(pr_budget_sync(b, err, sizeof(err)), GX_OK);
    int64_t lease = 0, spent = 0, resv = 0;
    T_EQ_INT(pr_budget_get(b, id, &lease, &spent, &resv), GX_OK);
    T_EQ_INT(lease, k.budget_pusd / 16); /* an idle instance's share */
    T_EQ_INT(key_col("reserved_pusd", id), lease);
    struct pr_ledger_opts o = {.lock_timeout_ms = 300,
                               .unavailable = PR_UNAVAILABLE_SPOOL,
                               .spool_path = spool};
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open_ex(pg_uri, &o, &l, err, sizeof(err)), GX_OK);
    if (!l)
        goto out;
    pr_ledger_attach_budget(l, b);
    T_EQ_INT(pgt_server_stop(), 0);
    reset_counts();
    spool_rows(l, b, id, 0, 10);
    T_EQ_INT(atomic_load(&n_ok), 10);
    T_EQ_INT(pgt_server_start(), 0);
    struct pr_ledger_stats st;
    pr_ledger_stats(l, &st);
    for (int i = 0; i < 200 && st.replayed < 10; i++) {
        usleep(50000);
        pr_ledger_stats(l, &st);
    }
    T_EQ_INT(st.replayed, 10);
    /* The cost left the lease for spent, in the database and here. */
    T_EQ_INT(key_col("spent_pusd", id), 10000000);
    T_EQ_INT(key_col("reserved_pusd", id), lease - 10000000);
    int64_t lim2 = 0;
    T_EQ_INT(pr_budget_get(b, id, &lim2, &spent, &resv), GX_OK);
    T_EQ_INT(lim2, lease - 10000000);
    T_EQ_INT(spent, 0);
    /* Down again; this process dies with 5 rows spooled (the ledger
     * closes with the server down), a new one replays them at open: the
     * cost still comes off the dead instance's lease, not on top. */
    T_EQ_INT(pgt_server_stop(), 0);
    spool_rows(l, b, id, 10, 15);
    pr_ledger_close(l);
    T_EQ_INT(pgt_server_start(), 0);
    /* A lease silent for longer than PR_LEASE_STALE_MS, but the server
     * has just restarted: nobody reclaims it yet (its owner may still be
     * replaying a spool). */
    T_EQ_INT(pgt_sql("llmux_t",
                     "UPDATE budget_leases SET renewed_ms = 1 WHERE"
                     " instance = 'spooltest-1'",
                     NULL, 0),
             0);
    struct pr_budget *b2 = pr_budget_new();
    T_EQ_INT(pr_budget_use_leases(b2, pg_uri, "spooltest-2"), GX_OK);
    T_EQ_INT(pr_budget_set(b2, id, k.budget_pusd, 0), GX_OK);
    T_EQ_INT(pr_budget_sync(b2, err, sizeof(err)), GX_OK);
    T_EQ_INT(pg_count("SELECT count(*) FROM budget_leases WHERE instance ="
                      " 'spooltest-1'"),
             1);
    T_EQ_INT(pr_ledger_open_ex(pg_uri, &o, &l, err, sizeof(err)), GX_OK);
    if (l)
        pr_ledger_close(l);
    T_EQ_INT(key_col("spent_pusd", id), 15000000);
    T_EQ_INT(pg_count("SELECT amount FROM budget_leases WHERE instance ="
                      " 'spooltest-1'"),
             lease - 15000000);
    T_EQ_INT(pg_count("SELECT count(*) FROM keys k WHERE reserved_pusd <>"
                      " COALESCE((SELECT sum(amount) FROM budget_leases b"
                      " WHERE b.key_id = k.id), 0)"),
             0);
    T_CHECK(key_col("spent_pusd + reserved_pusd", id) <= k.budget_pusd);
    T_EQ_INT(pr_budget_release_leases(b2, err, sizeof(err)), GX_OK);
    pr_budget_free(b2);
out:
    T_EQ_INT(pr_budget_release_leases(b, err, sizeof(err)), GX_OK);
    pr_budget_free(b);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    T_EQ_INT(system(cmd), 0);
    free(tmp);
}

struct restarter {
    int done;
};

static void *
restart_server(void *arg)
{
    struct restarter *r = arg;
    usleep(150000);
    pgt_server_stop();
    usleep(300000);
    pgt_server_start();
    r->done = 1;
    return NULL;
}

static void
test_pg_restart_mid_load(void)
{
    char err[512];
    struct pr_ledger *l = NULL;
    struct pr_ledger_opts o = {.lock_timeout_ms = 20000};
    T_EQ_INT(pr_ledger_open_ex(pg_uri, &o, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    reset_counts();
    struct restarter rs = {0};
    pthread_t th;
    pthread_create(&th, NULL, restart_server, &rs);
    /* Rows arrive before, during and after the outage. */
    for (int round = 0; round < 20; round++) {
        pthread_t sub[4];
        struct submitter s[4];
        for (int t = 0; t < 4; t++) {
            int base = round * 200;
            s[t] = (struct submitter){l, base + 50 * t, base + 50 * (t + 1),
                                      "restart"};
            pthread_create(&sub[t], NULL, submit_range, &s[t]);
        }
        for (int t = 0; t < 4; t++)
            pthread_join(sub[t], NULL);
        usleep(40000);
    }
    pthread_join(th, NULL);
    pr_ledger_flush(l);
    T_CHECK(rs.done);
    T_EQ_INT(atomic_load(&n_ok), 4000);
    T_EQ_INT(atomic_load(&n_fail), 0);
    pr_ledger_close(l);
    T_EQ_INT(pg_count("SELECT count(*) FROM usage WHERE request_id LIKE"
                      " 'restart-%'"),
             4000);
    T_EQ_INT(pg_count("SELECT count(DISTINCT request_id) FROM usage WHERE"
                      " request_id LIKE 'restart-%'"),
             4000);
    /* and the rollups still equal the raw rows */
    T_EQ_INT(pg_count("SELECT (SELECT count(*) FROM usage) - (SELECT"
                      " sum(requests) FROM usage_hourly WHERE dim = 'none'"
                      " AND key_id = -2)"),
             0);
}

/* A row PostgreSQL refuses (not UTF-8) fails alone: its neighbours in the
 * batch commit, and the database is not taken for down. */
static void
test_pg_bad_row(void)
{
    char err[512];
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(pg_uri, &l, err, sizeof(err)), GX_OK);
    if (!l)
        return;
    reset_counts();
    for (int i = 0; i < 21; i++) {
        struct pr_usage_row r;
        char rid[64];
        make_row(i, "badrow", &r, rid, sizeof(rid));
        if (i == 10)
            r.model = "bad \xff\xfe model";
        T_EQ_INT(pr_ledger_submit(l, &r, on_commit, NULL), GX_OK);
    }
    pr_ledger_flush(l);
    T_EQ_INT(atomic_load(&n_ok), 20);
    T_EQ_INT(atomic_load(&n_fail), 1);
    T_EQ_INT(pr_ledger_available(l), 1);
    pr_ledger_close(l);
    T_EQ_INT(pg_count("SELECT count(*) FROM usage WHERE request_id LIKE"
                      " 'badrow-%'"),
             20);
}

/* Rate leases: one instance alone gets the whole limit; a second one,
 * in the same minute, gets nothing more; a new minute starts afresh. */
static void
test_pg_rate_alone(void)
{
    char err[512];
    struct pr_rate *a = pr_rate_new(pg_uri), *b = pr_rate_new(pg_uri);
    T_CHECK(a && b);
    if (!a || !b)
        goto out;
    int64_t key = 424242, now = 1764547200000LL + 5000; /* fixed minute */
    T_EQ_INT(pr_rate_set(a, key, 40), GX_OK);
    T_EQ_INT(pr_rate_set(b, key, 40), GX_OK);
    int taken = 0;
    for (int round = 0; round < 12; round++) {
        T_EQ_INT(pr_rate_sync(a, now, err, sizeof(err)), GX_OK);
        int64_t retry = 0;
        while (pr_rate_take(a, key, now, &retry) == GX_OK)
            taken++;
    }
    T_EQ_INT(taken, 40);
    int64_t retry = 0;
    T_EQ_INT(pr_rate_take(a, key, now, &retry), GX_EAGAIN);
    T_CHECK(retry >= 50); /* the cluster spent this minute: wait for it */
    T_EQ_INT(pr_rate_sync(b, now, err, sizeof(err)), GX_OK);
    T_EQ_INT(pr_rate_take(b, key, now, &retry), GX_EAGAIN);
    /* given back and taken again: an untake makes room locally only */
    now += 60000;
    T_EQ_INT(pr_rate_sync(b, now, err, sizeof(err)), GX_OK);
    T_EQ_INT(pr_rate_take(b, key, now, &retry), GX_OK);
out:
    pr_rate_free(a);
    pr_rate_free(b);
}

/* Token leases: estimates taken, actual counts settled.  One instance
 * alone gets the whole tpm; an estimate above the use goes back (same
 * window); an overrun is a debt the next window's lease pays first; the
 * token rows do not touch the same key's request count. */
static void
test_pg_tokens(void)
{
    char err[512];
    struct pr_rate *a = pr_rate_new_tokens(pg_uri),
                   *b = pr_rate_new_tokens(pg_uri), *c = pr_rate_new(pg_uri);
    T_CHECK(a && b && c);
    if (!a || !b || !c)
        goto out;
    int64_t key = 515151, now = 1764547200000LL + 7000, retry = 0;
    T_EQ_INT(pr_rate_set(a, key, 1000), GX_OK);
    T_EQ_INT(pr_rate_set(b, key, 1000), GX_OK);
    T_EQ_INT(pr_rate_set(c, key, 5), GX_OK);
    int64_t taken = 0;
    for (int round = 0; round < 12; round++) {
        T_EQ_INT(pr_rate_sync(a, now, err, sizeof(err)), GX_OK);
        while (pr_rate_take_n(a, key, now, 100, &retry) == GX_OK)
            taken += 100;
    }
    T_EQ_INT(taken, 1000);
    T_EQ_INT(pr_rate_take_n(a, key, now, 1, &retry), GX_EAGAIN);
    T_CHECK(retry >= 50);
    /* used 40 of an estimate of 100: 60 back */
    pr_rate_settle(a, key, now, 100, 40, now + 10);
    T_EQ_INT(pr_rate_take_n(a, key, now, 60, &retry), GX_OK);
    T_EQ_INT(pr_rate_take_n(a, key, now, 1, &retry), GX_EAGAIN);
    /* the other instance gets nothing of this minute */
    T_EQ_INT(pr_rate_sync(b, now, err, sizeof(err)), GX_OK);
    T_EQ_INT(pr_rate_take_n(b, key, now, 1, &retry), GX_EAGAIN);
    /* the request count of the same key is its own row */
    int reqs = 0;
    for (int round = 0; round < 8; round++) {
        T_EQ_INT(pr_rate_sync(c, now, err, sizeof(err)), GX_OK);
        while (pr_rate_take(c, key, now, &retry) == GX_OK)
            reqs++;
    }
    T_EQ_INT(reqs, 5);
    /* 300 used of an estimate of 100, settled in the next minute: the 200
     * over is paid from that minute's lease, so 800 are left in it */
    now += 60000;
    pr_rate_settle(a, key, now - 60000, 100, 300, now);
    taken = 0;
    for (int round = 0; round < 12; round++) {
        T_EQ_INT(pr_rate_sync(a, now, err, sizeof(err)), GX_OK);
        while (pr_rate_take_n(a, key, now, 100, &retry) == GX_OK)
            taken += 100;
    }
    T_EQ_INT(taken, 800);
    /* an unused estimate of the past minute does not come back now */
    pr_rate_settle(a, key, now - 60000, 100, 0, now);
    T_EQ_INT(pr_rate_take_n(a, key, now, 1, &retry), GX_EAGAIN);
    /* and the database never counted more than the limit */
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SELECT max(used) FROM rate_windows WHERE key_id = %lld",
             (long long)-key);
    T_EQ_INT(pg_count(sql), 1000);
out:
    pr_rate_free(a);
    pr_rate_free(b);
    pr_rate_free(c);
}

int
main(void)
{
    char *tmp = e2e_temp_dir();
    snprintf(sq_db, sizeof(sq_db), "%s/store.db", tmp);
    have_pg = pgt_start() == 0 &&
              pgt_createdb("llmux_t", pg_uri, sizeof(pg_uri)) == 0;
    if (!have_pg) {
        /* CI installs postgresql (.ci/run); elsewhere say so loudly. */
        fprintf(stderr, "test_store: PostgreSQL not available: SQLite only"
                        "%s\n",
                getenv("LLMUX_REQUIRE_PG") ? " (required: failing)" : "");
        T_CHECK(!getenv("LLMUX_REQUIRE_PG"));
    }
    T_RUN(test_both_backends);
    if (have_pg) {
        T_RUN(test_pg_once_and_schema);
        T_RUN(test_pg_fail_closed);
        T_RUN(test_pg_spool);
        T_RUN(test_pg_spool_budget);
        T_RUN(test_pg_restart_mid_load);
        T_RUN(test_pg_rate_alone);
        T_RUN(test_pg_tokens);
        T_RUN(test_pg_bad_row);
    }
    pgt_stop();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmp);
    free(tmp);
    return T_END();
}
