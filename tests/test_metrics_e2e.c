/* test_metrics_e2e: the real llmux binary and tests/fake_provider.
 * After requests of different statuses and a stream, GET /metrics counts
 * match exactly what was sent, the cost total equals the sum of the
 * x-llmux-cost-usd headers and the ledger's sum, histograms are
 * consistent, a failing target's circuit shows open, `promtool check
 * metrics` accepts the text (when promtool is installed), the JSON access
 * log has one matching line per request and no secret, and a rename +
 * SIGHUP makes llmux write to a new file. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"

#define SECRET "sk-upstream-SECRET-metrics-0123456789"

static struct e2e_proc fake, gw;
static char base[128];
static char dbpath[512], logpath[512];
static long long header_cost_sum; /* pUSD, from x-llmux-cost-usd */
static char ids[32][32];
static int n_ids;

static int
post(const char *id, const char *model, const char *content, int stream,
     struct e2e_resp *r)
{
    char url[256], hid[64];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    snprintf(hid, sizeof(hid), "X-Request-Id: %s", id);
    const char *hdrs[] = {hid, NULL};
    json_t *o = json_pack("{s:s,s:[{s:s,s:s}]}", "model", model, "messages",
                          "role", "user", "content", content);
    if (stream) {
        json_object_set_new(o, "stream", json_true());
        json_object_set_new(o, "stream_options",
                            json_pack("{s:b}", "include_usage", 1));
    }
    char *b = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    int rc = e2e_http("POST", url, b, hdrs, 30000, r);
    free(b);
    if (n_ids < 32)
        snprintf(ids[n_ids++], sizeof(ids[0]), "%s", id);
    char h[64];
    if (rc == 0 && e2e_header(r, "x-llmux-cost-usd", h, sizeof(h)))
        header_cost_sum += e2e_usd_to_pusd(h);
    return rc;
}

static long
send_one(const char *id, const char *model, const char *content, int stream)
{
    struct e2e_resp r;
    long st = post(id, model, content, stream, &r) == 0 ? r.status : -1;
    e2e_resp_free(&r);
    return st;
}

/* ---- a small exposition parser -------------------------------------- */

struct sample {
    char name[128];
    char labels[512]; /* raw text between the braces */
    char value[64];
};
static struct sample samples[4096];
static int n_samples, n_help, n_type;

static int
parse_metrics(const char *text)
{
    n_samples = n_help = n_type = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        if (!e)
            return -1; /* every line ends with \n */
        size_t len = (size_t)(e - p);
        char line[1024];
        if (len >= sizeof(line))
            return -1;
        memcpy(line, p, len);
        line[len] = '\0';
        p = e + 1;
        if (!strncmp(line, "# HELP ", 7)) {
            n_help++;
            continue;
        }
        if (!strncmp(line, "# TYPE ", 7)) {
            n_type++;
            continue;
        }
        if (line[0] == '#' || n_samples >= 4096)
            return -1;
        struct sample *s = &samples[n_samples++];
        char *br = strchr(line, '{');
        char *sp = strrchr(line, ' ');
        if (!sp)
            return -1;
        *sp = '\0';
        snprintf(s->value, sizeof(s->value), "%.63s", sp + 1);
        if (br) {
            char *cl = strrchr(line, '}');
            if (!cl || cl < br)
                return -1;
            *cl = '\0';
            *br = '\0';
            snprintf(s->labels, sizeof(s->labels), "%.511s", br + 1);
        } else {
            s->labels[0] = '\0';
        }
        snprintf(s->name, sizeof(s->name), "%.127s", line);
        char *end;
        strtod(s->value, &end);
        if (*end)
            return -1;
    }
    return 0;
}

/* Sum of the samples named name whose labels contain every
 * comma-separated pair of want ("" = all). */
static double
sum_of(const char *name, const char *want)
{
    double t = 0;
    for (int i = 0; i < n_samples; i++) {
        if (strcmp(samples[i].name, name))
            continue;
        char w[256];
        snprintf(w, sizeof(w), "%s", want);
        int ok = 1;
        for (char *tok = strtok(w, ","); tok; tok = strtok(NULL, ","))
            if (!strstr(samples[i].labels, tok))
                ok = 0;
        if (ok)
            t += strtod(samples[i].value, NULL);
    }
    return t;
}

static char *
get_metrics(void)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/metrics", base);
    struct e2e_resp r;
    if (e2e_http("GET", url, NULL, NULL, 10000, &r) != 0 || r.status != 200) {
        e2e_resp_free(&r);
        return NULL;
    }
    char *t = strdup(r.body);
    e2e_resp_free(&r);
    return t;
}

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = calloc(1, 1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    (void)n;
    fclose(f);
    return buf;
}

/* `promtool check metrics` on the text, when promtool is installed. */
static void
promtool_check(const char *m)
{
    if (access("/usr/bin/promtool", X_OK) != 0) {
        fprintf(stderr, "note: promtool not installed; C parser only%s\n",
                getenv("LLMUX_REQUIRE_PROMTOOL") ? " (required: failing)"
                                                 : "");
        T_CHECK(!getenv("LLMUX_REQUIRE_PROMTOOL"));
        return;
    }
    char mp[600], cmd[1400];
    snprintf(mp, sizeof(mp), "%s.metrics.txt", logpath);
    FILE *f = fopen(mp, "w");
    T_CHECK(f != NULL);
    if (!f)
        return;
    fputs(m, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "/usr/bin/promtool check metrics < '%s' >&2",
             mp);
    T_EQ_INT(system(cmd), 0);
}

/* ---- tests ----------------------------------------------------------- */

static void
test_traffic_and_metrics(void)
{
    /* 3 answered, 1 stream, 1 upstream 400, 2 failures that open the
     * circuit of priced@bad, 1 answered at once with 503 (circuit open). */
    T_EQ_INT(send_one("m-ok-1", "main", "hello there", 0), 200);
    T_EQ_INT(send_one("m-ok-2", "main", "hello again", 0), 200);
    T_EQ_INT(send_one("m-ok-3", "main", "a third one", 0), 200);
    T_EQ_INT(send_one("m-stream", "main", "stream me", 1), 200);
    T_EQ_INT(send_one("m-400", "main", "fake:status=400", 0), 400);
    T_EQ_INT(send_one("m-bad-1", "allbad", "x", 0), 502);
    T_EQ_INT(send_one("m-bad-2", "allbad", "x", 0), 502);
    T_EQ_INT(send_one("m-open", "allbad", "x", 0), 503);

    char *m = get_metrics();
    T_CHECK(m != NULL);
    if (!m)
        return;
    T_EQ_INT(parse_metrics(m), 0);
    T_CHECK(n_help == n_type && n_help >= 14);
    T_EQ_INT((long long)sum_of("llmux_requests_total", ""), 8);
    T_EQ_INT((long long)sum_of("llmux_requests_total",
                               "route=\"main\",provider=\"fake\","
                               "model=\"priced\",status=\"200\""),
             4);
    T_EQ_INT((long long)sum_of("llmux_requests_total", "status=\"400\""), 1);
    T_EQ_INT((long long)sum_of("llmux_requests_total",
                               "route=\"allbad\",status=\"502\""),
             2);
    T_EQ_INT((long long)sum_of("llmux_requests_total", "status=\"503\""), 1);
    /* Attempts: 5 to fake (4 ok + the 400), 2 to bad (503s). */
    T_EQ_INT((long long)sum_of("llmux_upstream_attempts_total",
                               "provider=\"fake\",outcome=\"ok\""),
             4);
    T_EQ_INT((long long)sum_of("llmux_upstream_attempts_total",
                               "provider=\"bad\","
                               "outcome=\"upstream_error_status\""),
             2);
    T_EQ_INT((long long)sum_of("llmux_circuit_state",
                               "target=\"priced@bad\""),
             1);
    T_EQ_INT((long long)sum_of("llmux_circuit_state",
                               "target=\"priced@fake\""),
             0);
    T_CHECK(sum_of("llmux_tokens_total",
                   "provider=\"fake\",type=\"completion\"") > 0);
    T_CHECK(sum_of("llmux_tokens_total",
                   "provider=\"fake\",type=\"prompt\"") > 0);
    T_EQ_INT((long long)sum_of("llmux_inflight_requests", ""), 0);

    /* Cost: exact, against the headers and the ledger. */
    long long metric_cost = 0;
    for (int i = 0; i < n_samples; i++)
        if (!strcmp(samples[i].name, "llmux_cost_usd_total"))
            metric_cost += e2e_usd_to_pusd(samples[i].value);
    T_CHECK(header_cost_sum > 0);
    /* A stream's headers go out before its cost is known: its cost is
     * the ledger row's. */
    long long stream_cost = e2e_db_int(
        dbpath, "SELECT cost_pusd FROM usage WHERE request_id='m-stream'");
    T_CHECK(stream_cost > 0);
    T_EQ_INT(metric_cost, header_cost_sum + stream_cost);
    T_EQ_INT(metric_cost,
             e2e_db_int(dbpath, "SELECT COALESCE(SUM(cost_pusd),0) FROM usage"));
    T_EQ_INT(e2e_db_int(dbpath, "SELECT COUNT(*) FROM usage"), 8);

    /* Histograms: buckets cumulative, +Inf = count. */
    const char *hs[] = {"llmux_request_duration_seconds",
                        "llmux_time_to_first_token_seconds"};
    for (int h = 0; h < 2; h++) {
        char bn[160], cn[160];
        snprintf(bn, sizeof(bn), "%s_bucket", hs[h]);
        snprintf(cn, sizeof(cn), "%s_count", hs[h]);
        double prev = -1;
        int buckets = 0;
        for (int i = 0; i < n_samples; i++) {
            if (strcmp(samples[i].name, bn) ||
                !strstr(samples[i].labels, "provider=\"fake\""))
                continue;
            double v = strtod(samples[i].value, NULL);
            T_CHECK(v >= prev);
            prev = v;
            buckets++;
            if (strstr(samples[i].labels, "le=\"+Inf\""))
                T_EQ_INT((long long)v,
                         (long long)sum_of(cn, "provider=\"fake\""));
        }
        T_CHECK(buckets > 2);
    }
    T_EQ_INT((long long)sum_of("llmux_request_duration_seconds_count",
                               "provider=\"fake\""),
             5);
    /* No request id or secret as a label value. */
    T_CHECK(!strstr(m, "m-ok-1") && !strstr(m, SECRET));

    promtool_check(m);
    free(m);
}

static void
test_access_log(void)
{
    char *t = slurp(logpath);
    T_CHECK(t != NULL);
    if (!t)
        return;
    T_CHECK(!strstr(t, SECRET));
    int lines = 0, matched = 0;
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        T_CHECK(json_is_object(o));
        if (!o)
            continue;
        lines++;
        const char *id = json_string_value(json_object_get(o, "request_id"));
        T_EQ_STR(json_string_value(json_object_get(o, "api")), "chat");
        T_CHECK(json_is_integer(json_object_get(o, "status")));
        T_CHECK(json_is_integer(json_object_get(o, "latency_ms")));
        T_CHECK(json_object_get(o, "ttft_ms") != NULL);
        T_CHECK(json_object_get(o, "key_id") != NULL);
        if (id && !strcmp(id, "m-400")) {
            T_EQ_INT(json_integer_value(json_object_get(o, "status")), 400);
            T_EQ_STR(json_string_value(json_object_get(o, "provider")),
                     "fake");
        }
        if (id && !strcmp(id, "m-bad-2"))
            T_EQ_INT(json_integer_value(json_object_get(o, "status")), 502);
        for (int i = 0; id && i < n_ids; i++)
            if (!strcmp(ids[i], id))
                matched++;
        json_decref(o);
    }
    T_EQ_INT(lines, 8);
    T_EQ_INT(matched, 8);
    free(t);
}

static void
test_rotation(void)
{
    char old[600];
    snprintf(old, sizeof(old), "%s.1", logpath);
    T_EQ_INT(rename(logpath, old), 0);
    T_EQ_INT(kill(gw.pid, SIGHUP), 0);
    /* The reopen happens on llmux's main thread: poll, bounded. */
    int seen = 0;
    for (int i = 0; i < 100 && !seen; i++) {
        if (access(logpath, F_OK) == 0) {
            seen = 1;
            break;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    T_CHECK(seen);
    T_EQ_INT(send_one("m-after", "main", "after rotation", 0), 200);
    char *t = slurp(logpath);
    T_CHECK(t && strstr(t, "\"m-after\""));
    free(t);
    t = slurp(old);
    T_CHECK(t && !strstr(t, "\"m-after\"") && strstr(t, "\"m-ok-1\""));
    free(t);
}

/* A second gateway: logfmt to stderr (no log.file). */
static void
test_logfmt_stderr(void)
{
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
             " \"database\": \"%s.lf\", \"require_keys\": false,\n"
             " \"log\": {\"format\": \"logfmt\"},\n"
             " \"providers\": {\"fake\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\", \"api_key\": \"" SECRET "\",\n"
             "   \"models\": {\"priced\": {\"input_per_mtok\": 0.42, "
             "\"output_per_mtok\": 2.5}}}}}\n",
             dbpath, fake.port);
    char *path = e2e_write_temp("logfmt.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    struct e2e_proc p2;
    T_CHECK(path != NULL);
    if (!path ||
        e2e_start(&p2, argv, "listening on http://127.0.0.1:", 20000) != 0) {
        T_CHECK(0);
        free(path);
        return;
    }
    char saved[128];
    snprintf(saved, sizeof(saved), "%s", base);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", p2.port);
    T_EQ_INT(send_one("m-lf", "priced@fake", "logfmt please", 0), 200);
    snprintf(base, sizeof(base), "%s", saved);
    /* The line is written before the reply (e2e_stop removes the log). */
    char *t = slurp(p2.log_path);
    if (t && !strstr(t, "request_id=\"m-lf\""))
        fprintf(stderr, "  stderr: %s\n", t);
    T_EQ_INT(e2e_stop(&p2, SIGTERM, 10000), 0);
    T_CHECK(t && strstr(t, "request_id=\"m-lf\"") &&
            strstr(t, " api=\"chat\"") && strstr(t, " status=200 ") &&
            strstr(t, " provider=\"fake\""));
    T_CHECK(t && !strstr(t, SECRET));
    free(t);
    free(path);
}

/* Requests refused before routing count with route and provider "";
 * every committed row is in the commit-latency histogram; then promtool
 * on the text with every family exercised. */
static void
test_refused_and_commit(void)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", url, "{not json", NULL, 10000, &r), 0);
    T_EQ_INT(r.status, 400);
    e2e_resp_free(&r);
    T_EQ_INT(send_one("m-404", "no-such-model", "x", 0), 404);
    const char *bad[] = {"Authorization: Bearer sk-llmux-"
                         "0000000000000000000000000000000000000000000",
                         NULL};
    T_EQ_INT(e2e_http("POST", url, "{}", bad, 10000, &r), 0);
    long st401 = r.status;
    e2e_resp_free(&r);
    char *m = get_metrics();
    T_CHECK(m != NULL);
    if (!m)
        return;
    T_EQ_INT(parse_metrics(m), 0);
    T_EQ_INT((long long)sum_of("llmux_requests_total",
                               "route=\"\",provider=\"\",model=\"\","
                               "status=\"400\""),
             1);
    T_EQ_INT((long long)sum_of("llmux_requests_total",
                               "route=\"\",provider=\"\",model=\"other\","
                               "status=\"404\""),
             1);
    if (st401 == 401)
        T_EQ_INT((long long)sum_of("llmux_requests_total",
                                   "route=\"\",provider=\"\","
                                   "status=\"401\""),
                 1);
    T_CHECK(!strstr(m, "no-such-model"));
    /* Each has its access line, without tokens or cost. */
    char *t = slurp(logpath);
    int refused = 0;
    for (char *line = t ? strtok(t, "\n") : NULL; line;
         line = strtok(NULL, "\n")) {
        json_t *o = json_loads(line, 0, NULL);
        const char *src =
            json_string_value(json_object_get(o, "usage_source"));
        if (src && !strcmp(src, "none")) {
            refused++;
            T_CHECK(json_integer_value(json_object_get(o, "status")) >= 400);
            T_EQ_INT(json_integer_value(json_object_get(o, "attempts")), 0);
            T_EQ_STR(json_string_value(json_object_get(o, "cost_usd")),
                     "0.0");
            T_CHECK(json_is_string(json_object_get(o, "request_id")));
        }
        const char *id = json_string_value(json_object_get(o, "request_id"));
        if (id && !strcmp(id, "m-404")) {
            T_EQ_INT(json_integer_value(json_object_get(o, "status")), 404);
            T_EQ_STR(json_string_value(json_object_get(o, "model")),
                     "no-such-model");
        }
        json_decref(o);
    }
    T_EQ_INT(refused, st401 == 401 ? 3 : 2);
    free(t);
    /* Rows so far: 8 + m-after; each committed row timed once. */
    long long rows = e2e_db_int(dbpath, "SELECT COUNT(*) FROM usage");
    T_EQ_INT(rows, 9);
    T_EQ_INT((long long)sum_of("llmux_ledger_commit_seconds_count", ""),
             rows);
    T_EQ_INT((long long)sum_of("llmux_ledger_commit_seconds_bucket",
                               "le=\"+Inf\""),
             rows);
    T_CHECK(sum_of("llmux_ledger_commit_seconds_sum", "") > 0);
    static const char *const families[] = {
        "llmux_requests_total", "llmux_tokens_total", "llmux_cost_usd_total",
        "llmux_request_duration_seconds_bucket",
        "llmux_time_to_first_token_seconds_bucket",
        "llmux_upstream_attempts_total", "llmux_circuit_state",
        "llmux_inflight_requests", "llmux_ledger_queue_depth",
        "llmux_ledger_commit_seconds_bucket",
        "llmux_metrics_series_dropped_total", "llmux_otel_dropped_spans_total",
        "llmux_otel_exported_spans_total",
        NULL};
    for (int i = 0; families[i]; i++) {
        int n = 0;
        for (int k = 0; k < n_samples; k++)
            n += !strcmp(samples[k].name, families[i]);
        if (!n)
            fprintf(stderr, "  no samples of %s\n", families[i]);
        T_CHECK(n > 0);
    }
    promtool_check(m);
    free(m);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    signal(SIGPIPE, SIG_IGN);
    char *dir = e2e_temp_dir();
    snprintf(dbpath, sizeof(dbpath), "%s/metrics.db", dir);
    snprintf(logpath, sizeof(logpath), "%s/access.log", dir);
    free(dir);
    if (e2e_start_fake(&fake) != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    char cfg[4096];
    snprintf(
        cfg, sizeof(cfg),
        "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
        " \"database\": \"%s\", \"require_keys\": false,\n"
        " \"log\": {\"format\": \"json\", \"file\": \"%s\", \"level\": "
        "\"info\"},\n"
        " \"providers\": {\n"
        "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"api_key\": \"" SECRET "\",\n"
        "   \"models\": {\"priced\": {\"input_per_mtok\": 0.42,\n"
        "     \"cached_input_per_mtok\": 0.1, \"output_per_mtok\": 2.5}}},\n"
        "  \"bad\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"api_key\": \"" SECRET "\",\n"
        "   \"headers\": {\"X-Fake\": \"status=503\"},\n"
        "   \"models\": {\"priced\": {\"input_per_mtok\": 0.42, "
        "\"output_per_mtok\": 2.5}}}},\n"
        " \"routes\": {\n"
        "  \"main\": {\"policy\": \"priority\", \"targets\": "
        "[\"priced@fake\"]},\n"
        "  \"allbad\": {\"policy\": \"priority\", \"targets\": "
        "[\"priced@bad\"]}},\n"
        " \"failover\": {\"max_attempts\": 1, \"backoff_ms\": 0,\n"
        "  \"circuit_failures\": 2, \"circuit_cooldown_ms\": 600000}}\n",
        dbpath, logpath, fake.port, fake.port);
    char *cfgpath = e2e_write_temp("metrics.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", cfgpath, NULL};
    if (!cfgpath ||
        e2e_start(&gw, argv, "listening on http://127.0.0.1:", 20000) != 0) {
        fprintf(stderr, "could not start llmux\n");
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    T_RUN(test_traffic_and_metrics);
    T_RUN(test_access_log);
    T_RUN(test_rotation);
    T_RUN(test_logfmt_stderr);
    T_RUN(test_refused_and_commit);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(cfgpath);
    curl_global_cleanup();
    return T_END();
}
