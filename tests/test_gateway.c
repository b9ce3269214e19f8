/*
 * End to end: the real llmux binary in front of the real fake provider,
 * over real sockets, driven with libcurl.  Covers issue 2's paths: non-stream
 * and streamed answers, every bad-input error, upstream failures, failover
 * on a retryable status, no retry on 4xx, graceful shutdown, the ledger row.
 */
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"

#define SECRET "sk-upstream-SECRET-0123456789abcdef"

static struct e2e_proc fake, gw;
static char base[128];
static char *dbpath;

static char *
chat_body(const char *model, const char *content, int stream,
          int include_usage)
{
    json_t *o = json_pack("{s:s,s:[{s:s,s:s}]}", "model", model, "messages",
                          "role", "user", "content", content);
    if (stream)
        json_object_set_new(o, "stream", json_true());
    if (include_usage)
        json_object_set_new(o, "stream_options",
                            json_pack("{s:b}", "include_usage", 1));
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return t;
}

static int
post_chat(const char *model, const char *content, int stream,
          int include_usage, struct e2e_resp *r)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    char *b = chat_body(model, content, stream, include_usage);
    int rc = e2e_http("POST", url, b, NULL, 20000, r);
    free(b);
    return rc;
}

/* The error object of an OpenAI-shaped error body, or NULL. */
static int
is_openai_error(const char *body, const char *type, const char *code)
{
    json_t *o = json_loads(body, 0, NULL);
    json_t *e = json_object_get(o, "error");
    int ok = json_is_object(e) &&
             json_is_string(json_object_get(e, "message")) &&
             json_is_string(json_object_get(e, "type")) &&
             json_object_get(e, "param") && json_object_get(e, "code");
    if (ok && type)
        ok = !strcmp(json_string_value(json_object_get(e, "type")), type);
    if (ok && code)
        ok = json_is_string(json_object_get(e, "code")) &&
             !strcmp(json_string_value(json_object_get(e, "code")), code);
    if (!ok)
        fprintf(stderr, "  not the expected OpenAI error (%s/%s): %s\n",
                type ? type : "*", code ? code : "*", body);
    json_decref(o);
    return ok;
}

static int
start_gateway(void)
{
    char cfg[4096];
    char *dir = e2e_temp_dir();
    size_t n = strlen(dir) + 16;
    dbpath = malloc(n);
    snprintf(dbpath, n, "%s/ledger.db", dir);
    snprintf(
        cfg, sizeof(cfg),
        "{\n"
        " \"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
        " \"database\": \"%s\", \"require_keys\": false,\n"
        " \"admin_key\": \"adm-0123456789abcdef\",\n"
        " \"limits\": {\"max_body_bytes\": 65536},\n"
        " \"providers\": {\n"
        "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\",\n"
        "   \"api_key\": \"%s\", \"timeout_ms\": 4000,\n"
        "   \"connect_timeout_ms\": 1000, \"first_byte_timeout_ms\": 1500,\n"
        "   \"models\": {\"gpt-4.1\": {}, \"cheap\": {\"input_per_mtok\": "
        "0.5, \"output_per_mtok\": 1.0}}},\n"
        "  \"bad\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\",\n"
        "   \"api_key\": \"%s\", \"headers\": {\"X-Fake\": \"status=503\"},\n"
        "   \"models\": {\"gpt-4.1\": {}}},\n"
        "  \"dead\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:1/v1\",\n"
        "   \"api_key\": \"%s\", \"models\": {\"gpt-4.1\": {}}}\n"
        " },\n"
        " \"routes\": {\n"
        "  \"main\": {\"policy\": \"priority\", \"targets\": "
        "[\"gpt-4.1@fake\"]},\n"
        "  \"failover\": {\"policy\": \"priority\", \"targets\": "
        "[\"gpt-4.1@bad\", \"gpt-4.1@dead\", \"gpt-4.1@fake\"]},\n"
        "  \"allbad\": {\"policy\": \"priority\", \"targets\": "
        "[\"gpt-4.1@bad\", \"gpt-4.1@dead\"]}\n"
        " },\n"
        " \"failover\": {\"max_attempts\": 3, \"backoff_ms\": 10,\n"
        "  \"circuit_failures\": 1000}\n"
        "}\n",
        dbpath, fake.port, SECRET, fake.port, SECRET, SECRET);
    char *path = e2e_write_temp("gateway.json", cfg);
    free(dir);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 15000);
    free(path);
    if (rc == 0)
        snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    return rc;
}

static void
test_health_and_models(void)
{
    struct e2e_resp r;
    char url[256];
    snprintf(url, sizeof(url), "%s/health", base);
    T_EQ_INT(e2e_http("GET", url, NULL, NULL, 5000, &r), 0);
    T_EQ_INT(r.status, 200);
    T_CHECK(strstr(r.body, "\"ok\"") != NULL);
    e2e_resp_free(&r);
    snprintf(url, sizeof(url), "%s/v1/models", base);
    T_EQ_INT(e2e_http("GET", url, NULL, NULL, 5000, &r), 0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body, 0, NULL);
    T_EQ_STR(json_string_value(json_object_get(o, "object")), "list");
    int has_main = 0, has_gpt = 0;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(o, "data"), i, m) {
        const char *id = json_string_value(json_object_get(m, "id"));
        has_main |= id && !strcmp(id, "main");
        has_gpt |= id && !strcmp(id, "gpt-4.1");
    }
    T_CHECK(has_main && has_gpt);
    json_decref(o);
    e2e_resp_free(&r);
    snprintf(url, sizeof(url), "%s/nope", base);
    T_EQ_INT(e2e_http("GET", url, NULL, NULL, 5000, &r), 0);
    T_EQ_INT(r.status, 404);
    T_CHECK(is_openai_error(r.body, "invalid_request_error", NULL));
    e2e_resp_free(&r);
}

static void
test_nonstream(void)
{
    struct e2e_resp r;
    T_EQ_INT(post_chat("main", "hello there", 0, 0, &r), 0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body, 0, NULL);
    T_CHECK(json_is_array(json_object_get(o, "choices")));
    T_CHECK(json_is_string(json_object_get(
        json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                        "message"),
        "content")));
    /* The upstream saw the upstream model name. */
    T_EQ_STR(json_string_value(json_object_get(o, "model")), "gpt-4.1");
    json_decref(o);
    char h[128];
    T_CHECK(e2e_header(&r, "x-request-id", h, sizeof(h)) != NULL);
    T_EQ_STR(e2e_header(&r, "x-llmux-route", h, sizeof(h)), "main");
    T_EQ_STR(e2e_header(&r, "x-llmux-provider", h, sizeof(h)), "fake");
    T_EQ_STR(e2e_header(&r, "x-llmux-model", h, sizeof(h)), "gpt-4.1");
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", h, sizeof(h)), "1");
    T_CHECK(e2e_header(&r, "x-llmux-cost-usd", h, sizeof(h)) != NULL);
    T_CHECK(strstr(r.body, SECRET) == NULL && strstr(r.headers, SECRET) == NULL);
    e2e_resp_free(&r);

    /* A MODEL@PROVIDER target and a bare model name both resolve. */
    T_EQ_INT(post_chat("cheap@fake", "hi", 0, 0, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(e2e_header(&r, "x-llmux-model", h, sizeof(h)), "cheap");
    e2e_resp_free(&r);
    T_EQ_INT(post_chat("cheap", "hi", 0, 0, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);

    /* A client-chosen request id is kept. */
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    const char *hdrs[] = {"X-Request-Id: my-id-42", NULL};
    char *b = chat_body("main", "x", 0, 0);
    T_EQ_INT(e2e_http("POST", url, b, hdrs, 10000, &r), 0);
    free(b);
    T_EQ_STR(e2e_header(&r, "x-request-id", h, sizeof(h)), "my-id-42");
    e2e_resp_free(&r);
}

/* Counts SSE data lines; checks the last is [DONE]. */
static int
count_events(const char *body, int *usage_chunks, int *done_last,
             int *error_events)
{
    int n = 0;
    *usage_chunks = *done_last = *error_events = 0;
    const char *p = body;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        *done_last = (size_t)(e - p) == 6 && !strncmp(p, "[DONE]", 6);
        if (!*done_last) {
            json_error_t je;
            json_t *o = json_loadb(p, (size_t)(e - p), 0, &je);
            if (!o)
                return -1; /* not JSON: broken stream */
            if (json_is_object(json_object_get(o, "usage")))
                (*usage_chunks)++;
            if (json_object_get(o, "error"))
                (*error_events)++;
            json_decref(o);
        }
        n++;
        p = e;
    }
    return n;
}

static void
test_stream(void)
{
    struct e2e_resp r;
    int usage, done, errs;
    T_EQ_INT(post_chat("main", "stream please", 1, 0, &r), 0);
    T_EQ_INT(r.status, 200);
    char h[128];
    T_CHECK(e2e_header(&r, "content-type", h, sizeof(h)) &&
            strstr(h, "text/event-stream"));
    T_EQ_STR(e2e_header(&r, "x-llmux-provider", h, sizeof(h)), "fake");
    int n = count_events(r.body, &usage, &done, &errs);
    T_CHECK(n >= 3);
    T_CHECK(done);
    T_EQ_INT(usage, 0); /* llmux asked for usage; the client did not */
    T_EQ_INT(errs, 0);
    e2e_resp_free(&r);

    T_EQ_INT(post_chat("main", "stream please", 1, 1, &r), 0);
    T_EQ_INT(r.status, 200);
    n = count_events(r.body, &usage, &done, &errs);
    T_CHECK(n >= 3 && done);
    T_EQ_INT(usage, 1); /* the client asked: it gets the usage chunk */
    e2e_resp_free(&r);
}

static void
test_bad_input(void)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    struct {
        const char *body;
        int status;
        const char *code;
    } cases[] = {
        {"{\"model\": \"main\", \"messages\": [", 400, "invalid_json"},
        {"not json at all", 400, "invalid_json"},
        {"[1,2,3]", 400, NULL},
        {"{\"model\": \"main\"}", 400, NULL},
        {"{\"messages\": [{\"role\":\"user\",\"content\":\"x\"}]}", 400,
         NULL},
        {"{\"model\": 42, \"messages\": [{\"role\":\"user\",\"content\":"
         "\"x\"}]}",
         400, NULL},
        {"{\"model\": \"main\", \"messages\": \"hello\"}", 400, NULL},
        {"{\"model\": \"main\", \"messages\": []}", 400, NULL},
        {"{\"model\": \"main\", \"messages\": [{\"content\":\"x\"}]}", 400,
         NULL},
        {"{\"model\": \"main\", \"messages\": [{\"role\":\"user\","
         "\"content\":\"x\"}], \"stream\": \"yes\"}",
         400, NULL},
        {"{\"model\": \"main\", \"messages\": [{\"role\":\"user\","
         "\"content\":\"x\"}], \"max_tokens\": \"ten\"}",
         400, NULL},
        {"{\"model\": \"no-such-model\", \"messages\": [{\"role\":\"user\","
         "\"content\":\"x\"}]}",
         404, "model_not_found"},
        {"{\"model\": \"gpt-4.1@nowhere\", \"messages\": [{\"role\":"
         "\"user\",\"content\":\"x\"}]}",
         404, "model_not_found"},
        /* Invalid UTF-8 inside a string. */
        {"{\"model\": \"main\", \"messages\": [{\"role\":\"user\","
         "\"content\":\"\xff\xfe bad\"}]}",
         400, "invalid_json"},
        {"", 400, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct e2e_resp r;
        T_EQ_INT(e2e_http("POST", url, cases[i].body, NULL, 5000, &r), 0);
        if (r.status != cases[i].status)
            fprintf(stderr, "  case %zu: status %ld\n", i, r.status);
        T_EQ_INT(r.status, cases[i].status);
        T_CHECK(is_openai_error(r.body,
                                cases[i].status == 404 ||
                                        cases[i].status == 400
                                    ? "invalid_request_error"
                                    : NULL,
                                cases[i].code));
        e2e_resp_free(&r);
    }
    /* GET on the chat endpoint. */
    struct e2e_resp r;
    T_EQ_INT(e2e_http("GET", url, NULL, NULL, 5000, &r), 0);
    T_EQ_INT(r.status, 405);
    e2e_resp_free(&r);
    /* A body over limits.max_body_bytes (64 KiB). */
    size_t big = 70 * 1024;
    char *b = malloc(big + 100);
    snprintf(b, 100, "{\"model\":\"main\",\"messages\":[{\"role\":\"user\","
                     "\"content\":\"");
    size_t off = strlen(b);
    memset(b + off, 'a', big);
    strcpy(b + off + big, "\"}]}");
    T_EQ_INT(e2e_http("POST", url, b, NULL, 5000, &r), 0);
    T_EQ_INT(r.status, 413);
    T_CHECK(is_openai_error(r.body, "invalid_request_error",
                            "request_too_large"));
    e2e_resp_free(&r);
    free(b);
    /* Far over the limit (more than twice it): libevent refuses it while
     * reading, still 413, and the worker goes on. */
    big = 300 * 1024;
    b = malloc(big + 100);
    snprintf(b, 100, "{\"model\":\"main\",\"messages\":[{\"role\":\"user\","
                     "\"content\":\"");
    off = strlen(b);
    memset(b + off, 'a', big);
    strcpy(b + off + big, "\"}]}");
    T_EQ_INT(e2e_http("POST", url, b, NULL, 5000, &r), 0);
    T_EQ_INT(r.status, 413);
    e2e_resp_free(&r);
    free(b);
}

static void
test_upstream_failures(void)
{
    struct e2e_resp r;
    char h[128];
    /* Retryable status on the first target, connection refused on the
     * second: the third answers. */
    T_EQ_INT(post_chat("failover", "hello", 0, 0, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", h, sizeof(h)), "3");
    T_EQ_STR(e2e_header(&r, "x-llmux-provider", h, sizeof(h)), "fake");
    e2e_resp_free(&r);

    /* Every target fails: 502, the message lists each attempt. */
    T_EQ_INT(post_chat("allbad", "hello", 0, 0, &r), 0);
    T_EQ_INT(r.status, 502);
    T_CHECK(is_openai_error(r.body, NULL, NULL));
    T_CHECK(strstr(r.body, "gpt-4.1@bad") && strstr(r.body, "gpt-4.1@dead"));
    T_CHECK(strstr(r.body, SECRET) == NULL);
    e2e_resp_free(&r);

    /* A non-retryable 4xx passes through, one attempt only. */
    T_EQ_INT(post_chat("main", "fake:status=400", 0, 0, &r), 0);
    T_EQ_INT(r.status, 400);
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", h, sizeof(h)), "1");
    T_CHECK(is_openai_error(r.body, NULL, NULL));
    e2e_resp_free(&r);

    /* Garbage, resets and timeouts from the only target: 502 / 504. */
    const char *cases[][2] = {
        {"fake:malformed", "502"},
        {"fake:reset", "502"},
        {"fake:delay_ms=3000", "504"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        T_EQ_INT(post_chat("gpt-4.1@fake", cases[i][0], 0, 0, &r), 0);
        T_EQ_INT(r.status, atoi(cases[i][1]));
        T_CHECK(is_openai_error(r.body, NULL, NULL));
        e2e_resp_free(&r);
    }

    /* A stream dropped midway: the client already has bytes, so it gets
     * an error event and a clean end, never a hang. */
    T_EQ_INT(post_chat("gpt-4.1@fake", "fake:drop_after=2;chunks=6", 1, 0,
                       &r),
             0);
    T_EQ_INT(r.status, 200);
    int usage, done, errs;
    int n = count_events(r.body, &usage, &done, &errs);
    T_CHECK(n >= 2);
    T_EQ_INT(errs, 1);
    T_CHECK(done);
    e2e_resp_free(&r);

    /* Malformed stream before any byte reached the client: error reply. */
    T_EQ_INT(post_chat("gpt-4.1@fake", "fake:malformed", 1, 0, &r), 0);
    T_CHECK(r.status == 502 || r.status == 200);
    e2e_resp_free(&r);

    /* The worker still serves. */
    T_EQ_INT(post_chat("main", "still there?", 0, 0, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

static void
test_admin_providers(void)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/admin/providers", base);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("GET", url, NULL, NULL, 5000, &r), 0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);
    const char *wrong[] = {"Authorization: Bearer adm-0123456789abcdeX",
                           NULL};
    T_EQ_INT(e2e_http("GET", url, NULL, wrong, 5000, &r), 0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);
    const char *good[] = {"Authorization: Bearer adm-0123456789abcdef",
                          NULL};
    T_EQ_INT(e2e_http("GET", url, NULL, good, 5000, &r), 0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body, 0, NULL);
    size_t i;
    json_t *t;
    int found = 0;
    json_array_foreach(json_object_get(o, "data"), i, t) {
        const char *name = json_string_value(json_object_get(t, "target"));
        if (name && !strcmp(name, "gpt-4.1@fake")) {
            found = 1;
            T_CHECK(json_integer_value(json_object_get(t, "requests")) > 5);
            T_EQ_STR(json_string_value(json_object_get(t, "state")), "up");
        }
        if (name && !strcmp(name, "gpt-4.1@dead"))
            T_CHECK(json_integer_value(json_object_get(t, "failures")) >= 1);
    }
    T_CHECK(found);
    T_CHECK(strstr(r.body, SECRET) == NULL);
    json_decref(o);
    e2e_resp_free(&r);
}

/* Parallel requests over several connections, bounded. */
struct par {
    int ok;
    int is_stream;
};

static void *
par_main(void *arg)
{
    struct par *p = arg;
    for (int i = 0; i < 10; i++) {
        struct e2e_resp r;
        if (post_chat("main", "parallel", p->is_stream, 0, &r) == 0 &&
            r.status == 200)
            p->ok++;
        e2e_resp_free(&r);
    }
    return NULL;
}

static void
test_parallel(void)
{
    pthread_t t[8];
    struct par p[8];
    for (int i = 0; i < 8; i++) {
        p[i].ok = 0;
        p[i].is_stream = i & 1;
        pthread_create(&t[i], NULL, par_main, &p[i]);
    }
    int ok = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        ok += p[i].ok;
    }
    T_EQ_INT(ok, 80);
}

struct slow {
    long status;
};

static void *
slow_main(void *arg)
{
    struct slow *s = arg;
    struct e2e_resp r;
    s->status = -1;
    if (post_chat("main", "fake:delay_ms=700", 0, 0, &r) == 0)
        s->status = r.status;
    e2e_resp_free(&r);
    return NULL;
}

static long long
db_count(const char *sql)
{
    sqlite3 *db = NULL;
    long long n = -1;
    if (sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        else
            fprintf(stderr, "  sql failed: %s\n", sqlite3_errmsg(db));
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return n;
}

static void
test_graceful_shutdown(void)
{
    /* A request in flight when SIGTERM arrives still completes, then the
     * process exits 0. */
    pthread_t t;
    struct slow s;
    pthread_create(&t, NULL, slow_main, &s);
    usleep(250 * 1000);
    int rc = e2e_stop(&gw, SIGTERM, 10000);
    pthread_join(t, NULL);
    T_EQ_INT(s.status, 200);
    T_EQ_INT(rc, 0);
    /* Every answered chat request has its row; failed ones too. */
    T_CHECK(db_count("SELECT count(*) FROM usage") >= 95);
    T_CHECK(db_count("SELECT count(*) FROM usage WHERE status = 502") >= 2);
    T_CHECK(db_count("SELECT count(*) FROM usage WHERE status = 200 AND "
                     "provider = 'fake' AND prompt_tokens > 0") >= 85);
    T_EQ_INT(db_count("SELECT count(*) FROM usage WHERE error LIKE '%" SECRET
                      "%'"),
             0);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (e2e_start_fake(&fake) != 0 || start_gateway() != 0) {
        fprintf(stderr, "could not start the fake provider or llmux\n");
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_health_and_models);
    T_RUN(test_nonstream);
    T_RUN(test_stream);
    T_RUN(test_bad_input);
    T_RUN(test_upstream_failures);
    T_RUN(test_parallel);
    T_RUN(test_admin_providers);
    T_RUN(test_graceful_shutdown);
    e2e_stop(&gw, SIGKILL, 1000);
    e2e_stop(&fake, SIGTERM, 5000);
    free(dbpath);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
