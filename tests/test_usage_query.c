/*
 * test_usage_query: grouped usage queries over a real ledger file.  The
 * expected answer is computed in C from the very rows the test submitted,
 * and checked against direct SQL sums; the rollup path, the raw path and
 * the expectation must agree exactly on every total, for every group_by,
 * for aligned and unaligned ranges and for key filters (group api: raw
 * rows whatever the path asked, NULL stored as chat).  Also: the JSON
 * body, time parsing, and `llmux usage` output.
 */
#include "../pricing/pricing.h"
#include "harness.h"

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NROWS 20000
#define T0 1764374400000LL /* 2025-11-29T00:00:00Z */

static char dir[256], path[512];

static const char *const models[] = {"gpt-4.1", "deepseek-v3.2", "local", NULL,
                                     "claude-sonnet-4.5"};
static const char *const provs[] = {"relay", NULL, "local"};
static const char *const routes[] = {"auto", "fast", NULL, "gpt"};
static const char *const apis[] = {"chat", NULL, "messages", "responses",
                                   "embeddings", "completions"};

struct row {
    int64_t ts, key, prompt, completion, cached, cost, lat;
    int status;
    const char *model, *provider, *route, *api;
};
static struct row rows[NROWS];

static void
gen_rows(void)
{
    unsigned s = 4242;
    for (int i = 0; i < NROWS; i++) {
        struct row *r = &rows[i];
        s = s * 1103515245u + 12345u;
        /* ~3.5 days, deliberately not on hour boundaries */
        r->ts = T0 + (int64_t)(s >> 3) % (84LL * 3600000) + 1234;
        s = s * 1103515245u + 12345u;
        r->key = (s >> 8) % 6 == 0 ? -1 : (int64_t)((s >> 8) % 4 + 1);
        r->model = models[(s >> 12) % 5];
        r->provider = provs[(s >> 15) % 3];
        r->route = routes[(s >> 18) % 4];
        r->api = apis[(s >> 21) % 6];
        s = s * 1103515245u + 12345u;
        r->status = (s >> 9) % 11 == 0 ? 503 : (s >> 9) % 13 == 0 ? 0 : 200;
        r->prompt = (s >> 4) % 50000;
        r->cached = r->prompt ? (s >> 6) % (r->prompt + 1) : 0;
        s = s * 1103515245u + 12345u;
        r->completion = (s >> 5) % 4000;
        r->lat = (s >> 7) % 25000;
        struct pr_price p = {420000, 28000, 2500000};
        pr_cost(&p, r->prompt, r->cached, r->completion, &r->cost);
    }
}

static void
fill_db(void)
{
    char err[256];
    struct pr_ledger *l = NULL;
    T_EQ_INT(pr_ledger_open(path, &l, err, sizeof(err)), GX_OK);
    if (!l) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    for (int i = 0; i < NROWS; i++) {
        struct row *r = &rows[i];
        char id[32];
        snprintf(id, sizeof(id), "r%d", i);
        struct pr_usage_row u = {.ts_ms = r->ts,
                                 .request_id = id,
                                 .key_id = r->key,
                                 .route = r->route,
                                 .provider = r->provider,
                                 .model = r->model,
                                 .status = r->status,
                                 .attempts = 1,
                                 .stream = i & 1,
                                 .prompt_tokens = r->prompt,
                                 .completion_tokens = r->completion,
                                 .cached_tokens = r->cached,
                                 .cost_pusd = r->cost,
                                 .latency_ms = r->lat,
                                 .ttft_ms = -1,
                                 .usage_source = "upstream",
                                 .api = r->api};
        while (pr_ledger_submit(l, &u, NULL, NULL) == GX_EAGAIN)
            usleep(1000);
    }
    pr_ledger_close(l);
}

static void
group_of(const struct row *r, enum pr_group g, char *out, size_t n)
{
    const char *s = NULL;
    time_t t;
    struct tm tm;
    switch (g) {
    case PR_GROUP_NONE:
        s = "";
        break;
    case PR_GROUP_MODEL:
        s = r->model ? r->model : "";
        break;
    case PR_GROUP_PROVIDER:
        s = r->provider ? r->provider : "";
        break;
    case PR_GROUP_ROUTE:
        s = r->route ? r->route : "";
        break;
    case PR_GROUP_API:
        s = r->api ? r->api : "chat";
        break;
    case PR_GROUP_KEY:
        if (r->key < 0)
            s = "";
        else {
            snprintf(out, n, "%lld", (long long)r->key);
            return;
        }
        break;
    case PR_GROUP_DAY:
    case PR_GROUP_HOUR:
        t = (time_t)(r->ts / 1000);
        gmtime_r(&t, &tm);
        strftime(out, n, g == PR_GROUP_DAY ? "%Y-%m-%d" : "%Y-%m-%dT%H:00Z",
                 &tm);
        return;
    }
    snprintf(out, n, "%s", s);
}

struct agg {
    char group[64];
    int64_t requests, errors, prompt, completion, cached, cost;
};

static int
expected(const struct pr_usage_query *q, struct agg *a, int max)
{
    int n = 0;
    for (int i = 0; i < NROWS; i++) {
        const struct row *r = &rows[i];
        if (r->ts < q->since_ms || r->ts >= q->until_ms)
            continue;
        if (q->key_filter != PR_KEY_ALL && r->key != q->key_filter)
            continue;
        char g[64];
        group_of(r, q->group_by, g, sizeof(g));
        int j;
        for (j = 0; j < n; j++)
            if (!strcmp(a[j].group, g))
                break;
        if (j == n) {
            if (n == max)
                return -1;
            memset(&a[n], 0, sizeof(a[n]));
            snprintf(a[n].group, sizeof(a[n].group), "%s", g);
            n++;
        }
        a[j].requests++;
        a[j].errors += r->status < 200 || r->status >= 300;
        a[j].prompt += r->prompt;
        a[j].completion += r->completion;
        a[j].cached += r->cached;
        a[j].cost += r->cost;
    }
    return n;
}

/* Compares a result with the expectation; returns the number of
 * mismatches (0 = equal). */
static int
compare(const struct pr_usage_result *res, const struct agg *a, int n,
        enum pr_group g)
{
    int bad = 0;
    size_t nonempty = 0;
    for (size_t i = 0; i < res->n; i++)
        if (res->rows[i].requests > 0)
            nonempty++;
    if ((int)nonempty != n && !(g == PR_GROUP_NONE && n == 0)) {
        fprintf(stderr, "  groups: got %zu want %d\n", nonempty, n);
        bad++;
    }
    for (int j = 0; j < n; j++) {
        const struct pr_usage_group *x = NULL;
        for (size_t i = 0; i < res->n; i++)
            if (!strcmp(res->rows[i].group, a[j].group))
                x = &res->rows[i];
        if (!x || x->requests != a[j].requests || x->errors != a[j].errors ||
            x->prompt_tokens != a[j].prompt ||
            x->completion_tokens != a[j].completion ||
            x->cached_tokens != a[j].cached || x->cost_pusd != a[j].cost) {
            if (bad < 3)
                fprintf(stderr, "  group '%s' differs (%s)\n", a[j].group,
                        x ? "values" : "missing");
            bad++;
            continue;
        }
        char c[32];
        pr_pusd_format(a[j].cost, c, sizeof(c));
        if (strcmp(c, x->cost_usd))
            bad++;
    }
    return bad;
}

static struct agg exp_buf[4096];

static void
test_totals_every_group(void)
{
    int64_t H = 3600000;
    struct {
        int64_t since, until;
    } ranges[] = {
        {0, INT64_MAX / 2},                     /* everything */
        {T0, T0 + 84 * H},                      /* aligned */
        {T0 + 1234567, T0 + 50 * H + 77},       /* unaligned both ends */
        {T0 + 5 * H + 10, T0 + 5 * H + 900000}, /* inside one hour */
        {T0 + 7 * H, T0 + 8 * H},               /* exactly one hour */
        {T0 + 30 * H + 1, T0 + 31 * H + 1},     /* one hour, unaligned */
        {T0 - 10 * H, T0},                      /* empty */
    };
    int64_t keys[] = {PR_KEY_ALL, 2, -1};
    int mism = 0, runs = 0;
    for (int g = PR_GROUP_NONE; g <= PR_GROUP_API; g++) {
        for (size_t ri = 0; ri < sizeof(ranges) / sizeof(ranges[0]); ri++) {
            for (size_t ki = 0; ki < sizeof(keys) / sizeof(keys[0]); ki++) {
                struct pr_usage_query q = {ranges[ri].since, ranges[ri].until,
                                           (enum pr_group)g, keys[ki], 0};
                int n = expected(&q, exp_buf, 4096);
                T_CHECK(n >= 0);
                for (int raw = 0; raw < 2; raw++) {
                    q.raw_only = raw;
                    struct pr_usage_result *res = NULL;
                    char err[256] = "";
                    enum gx_status st =
                        pr_usage_query(path, &q, &res, err, sizeof(err));
                    if (st != GX_OK) {
                        fprintf(stderr, "  query: %s\n", err);
                        mism++;
                        continue;
                    }
                    int b = compare(res, exp_buf, n, q.group_by);
                    if (b)
                        fprintf(stderr,
                                "  mismatch: group %s range %zu key %lld "
                                "raw %d\n",
                                pr_group_name(q.group_by), ri,
                                (long long)keys[ki], raw);
                    mism += b;
                    runs++;
                    pr_usage_result_free(res);
                }
            }
        }
    }
    T_EQ_INT(mism, 0);
    T_EQ_INT(runs, 8 * 7 * 3 * 2);
}

/* The rollup path and the raw path build the same histogram, so even the
 * (approximate) percentiles agree exactly; and they bracket the exact
 * percentile within its bucket. */
static void
test_percentiles(void)
{
    int64_t H = 3600000;
    struct pr_usage_query q = {T0 + 3 * H, T0 + 40 * H, PR_GROUP_MODEL,
                               PR_KEY_ALL, 0};
    struct pr_usage_result *a = NULL, *b = NULL;
    char err[256];
    T_EQ_INT(pr_usage_query(path, &q, &a, err, sizeof(err)), GX_OK);
    q.raw_only = 1;
    T_EQ_INT(pr_usage_query(path, &q, &b, err, sizeof(err)), GX_OK);
    if (!a || !b)
        return;
    T_EQ_INT(a->n, b->n);
    int same = a->n == b->n;
    for (size_t i = 0; same && i < a->n; i++)
        if (a->rows[i].p50_ms != b->rows[i].p50_ms ||
            a->rows[i].p95_ms != b->rows[i].p95_ms)
            same = 0;
    T_CHECK(same);
    /* Latencies are uniform on [0, 25000): p50 ~ 12500, p95 ~ 23750.  The
     * estimate lies within the bucket: 10000..15000 and 20000..30000. */
    for (size_t i = 0; i < a->n; i++) {
        T_CHECK(a->rows[i].p50_ms >= 10000 && a->rows[i].p50_ms <= 15000);
        T_CHECK(a->rows[i].p95_ms >= 20000 && a->rows[i].p95_ms <= 30000);
    }
    pr_usage_result_free(a);
    pr_usage_result_free(b);
}

static int64_t
sql_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = INT64_MIN;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Totals against direct SQL sums on the file, and the JSON body. */
static void
test_sql_sums_and_json(void)
{
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    struct pr_usage_query q = {T0 + 1000, T0 + 70 * 3600000LL + 5,
                               PR_GROUP_PROVIDER, PR_KEY_ALL, 0};
    struct pr_usage_result *r = NULL;
    char err[256];
    T_EQ_INT(pr_usage_query(path, &q, &r, err, sizeof(err)), GX_OK);
    if (!r)
        return;
    char sql[512];
    const char *where = "ts_ms >= 1764374401000 AND ts_ms < 1764626400005";
    for (size_t i = 0; i < r->n; i++) {
        const struct pr_usage_group *x = &r->rows[i];
        char cond[128];
        if (x->group[0])
            snprintf(cond, sizeof(cond), "provider = '%s'", x->group);
        else
            snprintf(cond, sizeof(cond), "provider IS NULL");
        snprintf(sql, sizeof(sql),
                 "SELECT SUM(cost_pusd) FROM usage WHERE %s AND %s", where,
                 cond);
        T_EQ_INT(x->cost_pusd, sql_int(db, sql));
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM usage WHERE %s AND %s AND"
                 " (status < 200 OR status >= 300)",
                 where, cond);
        T_EQ_INT(x->errors, sql_int(db, sql));
        snprintf(sql, sizeof(sql),
                 "SELECT SUM(completion_tokens) FROM usage WHERE %s AND %s",
                 where, cond);
        T_EQ_INT(x->completion_tokens, sql_int(db, sql));
    }

    struct gx_buf b;
    gx_buf_init(&b, 0);
    T_EQ_INT(pr_usage_result_json(r, &b), GX_OK);
    json_error_t je;
    json_t *j = json_loads(b.data, 0, &je);
    T_CHECK(j != NULL);
    json_t *data = json_object_get(j, "data");
    T_CHECK(json_is_array(data));
    T_EQ_INT(json_array_size(data), r->n);
    for (size_t i = 0; i < json_array_size(data) && i < r->n; i++) {
        json_t *o = json_array_get(data, i);
        T_EQ_STR(json_string_value(json_object_get(o, "group")),
                 r->rows[i].group);
        T_EQ_INT(json_integer_value(json_object_get(o, "requests")),
                 r->rows[i].requests);
        T_EQ_INT(json_integer_value(json_object_get(o, "cost_pusd")),
                 r->rows[i].cost_pusd);
        T_CHECK(json_is_number(json_object_get(o, "cost_usd")));
        T_CHECK(json_is_integer(json_object_get(o, "p95_ms")));
    }
    json_decref(j);
    gx_buf_cleanup(&b);
    pr_usage_result_free(r);

    /* An empty range: group none still answers one zero row. */
    q = (struct pr_usage_query){0, 1000, PR_GROUP_NONE, PR_KEY_ALL, 0};
    T_EQ_INT(pr_usage_query(path, &q, &r, err, sizeof(err)), GX_OK);
    if (r) {
        T_EQ_INT(r->n, 1);
        T_EQ_INT(r->rows[0].requests, 0);
        T_EQ_STR(r->rows[0].cost_usd, "0.0");
        gx_buf_init(&b, 0);
        pr_usage_result_json(r, &b);
        T_EQ_STR(b.data, "{\"data\":[{\"group\":\"\",\"requests\":0,"
                         "\"errors\":0,\"prompt_tokens\":0,"
                         "\"completion_tokens\":0,\"cached_tokens\":0,"
                         "\"cache_write_tokens\":0,\"reasoning_tokens\":0,"
                         "\"cost_usd\":0.0,\"cost_pusd\":0,\"unpriced\":0,\"p50_ms\":null,"
                         "\"p95_ms\":null}]}");
        gx_buf_cleanup(&b);
        pr_usage_result_free(r);
    }
    /* A file that is not a ledger is an error, not an empty answer. */
    char other[600];
    snprintf(other, sizeof(other), "%s/other.db", dir);
    sqlite3 *odb = NULL;
    sqlite3_open(other, &odb);
    sqlite3_exec(odb, "CREATE TABLE t(x)", NULL, NULL, NULL);
    sqlite3_close(odb);
    r = NULL;
    T_EQ_INT(pr_usage_query(other, &q, &r, err, sizeof(err)), GX_ENOTFOUND);
    T_CHECK(strstr(err, "not an llmux usage database") != NULL);
    T_CHECK(r == NULL);
    unlink(other);
    /* A version-1 ledger (no daily cells yet) answers the same from its
     * hourly cells, without being migrated by a read. */
    char v1[600], sqlv[700];
    snprintf(v1, sizeof(v1), "%s/v1.db", dir);
    snprintf(sqlv, sizeof(sqlv), "VACUUM INTO '%s'", v1);
    T_EQ_INT(sqlite3_exec(db, sqlv, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_open(v1, &odb);
    T_EQ_INT(sqlite3_exec(odb,
                          "DROP TABLE usage_daily;"
                          " PRAGMA user_version = 1",
                          NULL, NULL, NULL),
             SQLITE_OK);
    sqlite3_close(odb);
    struct pr_usage_query mq = {T0 + 1000, T0 + 80 * 3600000LL, PR_GROUP_MODEL,
                                PR_KEY_ALL, 0};
    struct pr_usage_result *ra = NULL, *rb = NULL;
    T_EQ_INT(pr_usage_query(path, &mq, &ra, err, sizeof(err)), GX_OK);
    T_EQ_INT(pr_usage_query(v1, &mq, &rb, err, sizeof(err)), GX_OK);
    T_CHECK(ra && rb && ra->n == rb->n && ra->n > 0);
    for (size_t i = 0; ra && rb && i < ra->n && i < rb->n; i++) {
        T_EQ_STR(ra->rows[i].group, rb->rows[i].group);
        T_EQ_INT(ra->rows[i].cost_pusd, rb->rows[i].cost_pusd);
        T_EQ_INT(ra->rows[i].requests, rb->rows[i].requests);
    }
    pr_usage_result_free(ra);
    pr_usage_result_free(rb);
    /* Before version 4 every row was a chat request: one api group. */
    mq.group_by = PR_GROUP_NONE;
    T_EQ_INT(pr_usage_query(v1, &mq, &ra, err, sizeof(err)), GX_OK);
    mq.group_by = PR_GROUP_API;
    T_EQ_INT(pr_usage_query(v1, &mq, &rb, err, sizeof(err)), GX_OK);
    T_CHECK(ra && rb && rb->n == 1);
    if (ra && rb && rb->n == 1) {
        T_EQ_STR(rb->rows[0].group, "chat");
        T_EQ_INT(rb->rows[0].requests, ra->rows[0].requests);
        T_EQ_INT(rb->rows[0].cost_pusd, ra->rows[0].cost_pusd);
    }
    pr_usage_result_free(ra);
    pr_usage_result_free(rb);
    sqlite3_open(v1, &odb);
    T_EQ_INT(sql_int(odb, "PRAGMA user_version"), 1);
    sqlite3_close(odb);
    unlink(v1);
    /* A missing file is an error, not an empty answer. */
    r = NULL;
    T_CHECK(pr_usage_query("/nonexistent/x.db", &q, &r, err, sizeof(err)) !=
            GX_OK);
    T_CHECK(r == NULL);
    sqlite3_close(db);
}

static void
test_time_parse(void)
{
    int64_t now = 1764400000000LL, v = 0;
    T_EQ_INT(pr_time_parse("24h", now, &v), GX_OK);
    T_EQ_INT(v, now - 86400000LL);
    T_EQ_INT(pr_time_parse("7d", now, &v), GX_OK);
    T_EQ_INT(v, now - 7 * 86400000LL);
    T_EQ_INT(pr_time_parse("30m", now, &v), GX_OK);
    T_EQ_INT(v, now - 1800000LL);
    T_EQ_INT(pr_time_parse("2025-11-29", now, &v), GX_OK);
    T_EQ_INT(v, T0);
    T_EQ_INT(pr_time_parse("2025-11-29T01:02:03Z", now, &v), GX_OK);
    T_EQ_INT(v, T0 + 3723000);
    T_EQ_INT(pr_time_parse("2025-11-29T01:02", now, &v), GX_OK);
    T_EQ_INT(v, T0 + 3720000);
    T_EQ_INT(pr_time_parse("1764374400000", now, &v), GX_OK);
    T_EQ_INT(v, T0);
    T_EQ_INT(pr_time_parse("", now, &v), GX_EINVAL);
    T_EQ_INT(pr_time_parse("h", now, &v), GX_EINVAL);
    T_EQ_INT(pr_time_parse("yesterday", now, &v), GX_EINVAL);
    T_EQ_INT(pr_time_parse("2025-13-01", now, &v), GX_EINVAL);
    T_EQ_INT(pr_time_parse("2025-11-29T25:00", now, &v), GX_EINVAL);
    enum pr_group g;
    T_EQ_INT(pr_group_parse("day", &g), GX_OK);
    T_EQ_INT(g, PR_GROUP_DAY);
    T_EQ_INT(pr_group_parse("", &g), GX_OK);
    T_EQ_INT(g, PR_GROUP_NONE);
    T_EQ_INT(pr_group_parse("api", &g), GX_OK);
    T_EQ_INT(g, PR_GROUP_API);
    T_EQ_INT(pr_group_parse("week", &g), GX_EINVAL);
}

/* Runs pr_cli_usage with stdout redirected to a file; returns the exit
 * code and the output (malloc'd). */
static int
run_cli(char **argv, int argc, char **out)
{
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s/cli.out", dir);
    fflush(stdout);
    int saved = dup(1);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    close(fd);
    int rc = pr_cli_usage(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *f = fopen(tmp, "rb");
    char *buf = calloc(1, 1 << 20);
    size_t n = f ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    unlink(tmp);
    *out = buf;
    return rc;
}

static void
test_cli(void)
{
    char *out = NULL;
    char *a1[] = {"usage",      "--db",     path,         "--since",
                  "2025-11-29", "--until",  "2025-12-03", "--group-by",
                  "day",        "--format", "csv"};
    T_EQ_INT(run_cli(a1, 11, &out), 0);
    T_CHECK(strncmp(out, "day,requests,errors,", 20) == 0);
    /* 84 h from 2025-11-29T00:00 covers 4 days */
    int lines = 0;
    for (char *p = out; *p; p++)
        lines += *p == '\n';
    T_EQ_INT(lines, 5);
    T_CHECK(strstr(out, "\n2025-11-30,") != NULL);
    free(out);

    /* The table's total row has the sum of everything. */
    char *a2[] = {"usage", "--db", path, "--since", "0", "--group-by", "model"};
    T_EQ_INT(run_cli(a2, 7, &out), 0);
    int64_t total = 0;
    for (int i = 0; i < NROWS; i++)
        total += rows[i].cost;
    char c[32];
    pr_pusd_format(total, c, sizeof(c));
    T_CHECK(strstr(out, c) != NULL);
    T_CHECK(strstr(out, "(none)") != NULL);
    T_CHECK(strstr(out, "deepseek-v3.2") != NULL);
    free(out);

    char *a3[] = {"usage", "--db",       path,  "--since", "0", "--format",
                  "json",  "--group-by", "key", "--key",   "3"};
    T_EQ_INT(run_cli(a3, 11, &out), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    T_CHECK(j && json_array_size(json_object_get(j, "data")) == 1);
    T_EQ_STR(json_string_value(json_object_get(
                 json_array_get(json_object_get(j, "data"), 0), "group")),
             "3");
    json_decref(j);
    free(out);

    char *a4[] = {"usage", "--help"};
    T_EQ_INT(run_cli(a4, 2, &out), 0);
    T_CHECK(strstr(out, "--group-by") != NULL);
    free(out);
    char *a5[] = {"usage", "--group-by", "week", "--db", path};
    T_EQ_INT(run_cli(a5, 5, &out), 2);
    free(out);
    char *a6[] = {"usage", "--bogus"};
    T_EQ_INT(run_cli(a6, 2, &out), 2);
    free(out);
    char *a7[] = {"usage", "--db", "/nonexistent/llmux.db"};
    T_EQ_INT(run_cli(a7, 3, &out), 1);
    free(out);
    char *a8[] = {"usage", "--since"};
    T_EQ_INT(run_cli(a8, 2, &out), 2);
    free(out);

    /* --by api: one line per inbound API (rows without one are chat). */
    char *a9[] = {"usage", "--db", path, "--since", "0", "--by", "api",
                  "--format", "csv"};
    T_EQ_INT(run_cli(a9, 9, &out), 0);
    T_CHECK(strncmp(out, "api,requests,errors,", 20) == 0);
    lines = 0;
    for (char *p = out; *p; p++)
        lines += *p == '\n';
    T_EQ_INT(lines, 1 + 5);
    static const char *const want[] = {"\nchat,", "\nmessages,",
                                       "\nresponses,", "\nembeddings,",
                                       "\ncompletions,"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        T_CHECK(strstr(out, want[i]) != NULL);
    free(out);
}

/* Queries on their own connection while the writer commits: WAL readers
 * never wait for the writer (file), and the shared-cache memory database
 * answers too (":memory:").  Each answer is a consistent snapshot: the
 * total only grows. */
struct live {
    struct pr_ledger *l;
    _Atomic int stop;
    long submitted;
};

static void *
live_writer(void *arg)
{
    struct live *lv = arg;
    for (long i = 0; i < 20000 && !atomic_load(&lv->stop); i++) {
        struct pr_usage_row u = {.ts_ms = T0 + i * 1000,
                                 .request_id = "live",
                                 .key_id = i % 3,
                                 .model = "gpt-4.1",
                                 .status = 200,
                                 .prompt_tokens = 1,
                                 .completion_tokens = 1,
                                 .cost_pusd = 5,
                                 .latency_ms = 100,
                                 .ttft_ms = -1,
                                 .usage_source = "upstream"};
        if (pr_ledger_submit(lv->l, &u, NULL, NULL) == GX_OK)
            lv->submitted++;
        else
            usleep(1000);
        if (i % 500 == 0)
            usleep(2000);
    }
    return NULL;
}

static void
test_concurrent_reads(void)
{
    char lpath[600];
    snprintf(lpath, sizeof(lpath), "%s/live.db", dir);
    const char *paths[2] = {lpath, ":memory:"};
    for (int k = 0; k < 2; k++) {
        char err[256] = "";
        struct live lv = {.l = NULL, .stop = 0, .submitted = 0};
        T_EQ_INT(pr_ledger_open(paths[k], &lv.l, err, sizeof(err)), GX_OK);
        if (!lv.l)
            continue;
        pthread_t th;
        pthread_create(&th, NULL, live_writer, &lv);
        int64_t last = 0;
        int errors = 0, shrinks = 0;
        for (int q = 0; q < 40; q++) {
            struct pr_usage_query uq = {T0 - 3600000, T0 + 86400000,
                                        q % 2 ? PR_GROUP_HOUR : PR_GROUP_NONE,
                                        PR_KEY_ALL, 0};
            struct pr_usage_result *r = NULL;
            if (pr_usage_query(pr_ledger_path(lv.l), &uq, &r, err,
                               sizeof(err)) != GX_OK) {
                if (errors++ < 3)
                    fprintf(stderr, "  live query: %s\n", err);
                continue;
            }
            int64_t tot = 0, cost = 0;
            for (size_t i = 0; i < r->n; i++) {
                tot += r->rows[i].requests;
                cost += r->rows[i].cost_pusd;
            }
            if (tot < last)
                shrinks++;
            if (cost != tot * 5)
                errors++;
            last = tot;
            pr_usage_result_free(r);
            usleep(2000);
        }
        atomic_store(&lv.stop, 1);
        pthread_join(th, NULL);
        pr_ledger_flush(lv.l);
        struct pr_usage_query uq = {T0 - 3600000, T0 + 86400000, PR_GROUP_KEY,
                                    PR_KEY_ALL, 0};
        struct pr_usage_result *r = NULL;
        T_EQ_INT(
            pr_usage_query(pr_ledger_path(lv.l), &uq, &r, err, sizeof(err)),
            GX_OK);
        int64_t tot = 0;
        for (size_t i = 0; r && i < r->n; i++)
            tot += r->rows[i].requests;
        T_EQ_INT(tot, lv.submitted);
        T_EQ_INT(r ? r->n : 0, 3);
        pr_usage_result_free(r);
        T_EQ_INT(errors, 0);
        T_EQ_INT(shrinks, 0);
        pr_ledger_close(lv.l);
    }
    char b[700];
    snprintf(b, sizeof(b), "%s-wal", lpath);
    unlink(b);
    snprintf(b, sizeof(b), "%s-shm", lpath);
    unlink(b);
    unlink(lpath);
}

int
main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/llmux-uq-XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/usage.db", dir);
    gen_rows();
    fill_db();
    T_RUN(test_totals_every_group);
    T_RUN(test_percentiles);
    T_RUN(test_sql_sums_and_json);
    T_RUN(test_time_parse);
    T_RUN(test_cli);
    T_RUN(test_concurrent_reads);
    char b[600];
    snprintf(b, sizeof(b), "%s-wal", path);
    unlink(b);
    snprintf(b, sizeof(b), "%s-shm", path);
    unlink(b);
    unlink(path);
    rmdir(dir);
    return T_END();
}
