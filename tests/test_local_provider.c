/*
 * End to end: llmux serving the local engine (provider kind local) with the
 * real stories260K model: non-stream and streamed chats with exact usage,
 * greedy determinism, the context limit as 400 context_length_exceeded,
 * and a client that disconnects mid-stream does not hurt the server.
 * The scheduler: a second request sharing the first one's system prompt
 * reports the reused tokens as prompt_tokens_details.cached_tokens (and
 * in the ledger) with the same greedy answer; a full engine (parallel 1,
 * queue 0) answers 503 server_busy with Retry-After at once; /metrics
 * shows the local counters.
 */
#include <pthread.h>
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

static struct e2e_proc gw;
static char url[256], db[1024];

static int
start(void)
{
    char model[1024], cfg[4096];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
             " \"providers\": {\"local\": {\"kind\": \"local\", "
             "\"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 256, \"parallel\": 2},\n"
             "  \"slow\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"timeout_ms\": 60},\n"
             "  \"tiny\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 2048, \"parallel\": 1,\n"
             "   \"queue\": 0}}}\n",
             dir, model, model, model);
    snprintf(db, sizeof(db), "%s/ledger.db", dir);
    free(dir);
    char *path = e2e_write_temp("local.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/chat/completions",
             gw.port);
    return rc;
}

static json_t *
post(const char *body, long *status, char **raw)
{
    struct e2e_resp r;
    json_t *o = NULL;
    *status = -1;
    if (e2e_http("POST", url, body, NULL, 60000, &r) == 0) {
        *status = r.status;
        o = json_loads(r.body, 0, NULL);
        if (raw)
            *raw = strdup(r.body);
    }
    e2e_resp_free(&r);
    return o;
}

static void
test_nonstream(void)
{
    long st;
    const char *body = "{\"model\":\"local\",\"temperature\":0,"
                       "\"max_tokens\":20,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"Once upon a time\"}]}";
    json_t *a = post(body, &st, NULL);
    T_EQ_INT(st, 200);
    const json_t *ch = json_array_get(json_object_get(a, "choices"), 0);
    const char *text = json_string_value(
        json_object_get(json_object_get(ch, "message"), "content"));
    T_CHECK(text && strlen(text) > 0);
    const json_t *u = json_object_get(a, "usage");
    T_CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) > 4);
    T_CHECK(json_integer_value(json_object_get(u, "completion_tokens")) >= 1);
    T_CHECK(json_integer_value(json_object_get(u, "completion_tokens")) <= 20);
    /* Greedy is deterministic. */
    json_t *b = post(body, &st, NULL);
    const json_t *ch2 = json_array_get(json_object_get(b, "choices"), 0);
    const char *text2 = json_string_value(
        json_object_get(json_object_get(ch2, "message"), "content"));
    T_EQ_STR(text, text2);
    json_decref(a);
    json_decref(b);
}

static void
test_stream(void)
{
    struct e2e_resp r;
    const char *body =
        "{\"model\":\"local\",\"stream\":true,\"temperature\":0,"
        "\"max_tokens\":12,\"stream_options\":{\"include_usage\":true},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}";
    T_EQ_INT(e2e_http("POST", url, body, NULL, 60000, &r), 0);
    T_EQ_INT(r.status, 200);
    int events = 0, usage = 0, done = 0, finish = 0;
    struct e2e_resp *rp = &r;
    const char *p = rp->body;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        if (!strncmp(p, "[DONE]", 6)) {
            done = 1;
        } else {
            json_t *o = json_loadb(p, (size_t)(e - p), JSON_ALLOW_NUL, NULL);
            T_CHECK(o != NULL);
            const json_t *u = json_object_get(o, "usage");
            if (json_is_object(u)) {
                usage++;
                T_EQ_INT(json_integer_value(
                             json_object_get(u, "completion_tokens")),
                         12);
            }
            const json_t *fr = json_object_get(
                json_array_get(json_object_get(o, "choices"), 0),
                "finish_reason");
            if (json_is_string(fr))
                finish++;
            json_decref(o);
            events++;
        }
        p = e;
    }
    T_CHECK(events >= 3);
    T_EQ_INT(usage, 1);
    T_EQ_INT(finish, 1);
    T_CHECK(done);
    e2e_resp_free(&r);
}

static void
test_context_limit(void)
{
    /* context 256: a prompt of ~400 tokens cannot fit.  Aimed at that
     * provider alone, the refusal reaches the client. */
    char *big = malloc(8192);
    strcpy(big, "{\"model\":\"local@local\",\"messages\":[{\"role\":"
                "\"user\",\"content\":\"");
    for (int i = 0; i < 400; i++)
        strcat(big, "once ");
    strcat(big, "\"}]}");
    long st;
    char *raw = NULL;
    json_t *o = post(big, &st, &raw);
    T_EQ_INT(st, 400);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(o, "error"),
                                               "code")),
             "context_length_exceeded");
    json_decref(o);
    free(raw);
    /* The bare name is every provider's model "local": the next ones,
     * with 2048 positions, serve it (README "Failover": the local
     * engine's own limits move on). */
    memmove(big + 15, big + 21, strlen(big + 21) + 1); /* drop "@local" */
    T_CHECK(strncmp(big, "{\"model\":\"local\",", 17) == 0);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", url, big, NULL, 60000, &r), 0);
    T_EQ_INT(r.status, 200);
    if (r.status != 200)
        fprintf(stderr, "  %s\n", r.body ? r.body : "");
    char pv[64] = "";
    e2e_header(&r, "x-llmux-provider", pv, sizeof(pv));
    T_CHECK(strcmp(pv, "local") != 0 && pv[0]);
    e2e_header(&r, "x-llmux-attempts", pv, sizeof(pv));
    T_CHECK(atoi(pv) >= 2);
    e2e_resp_free(&r);
    free(big);
}

static size_t
abort_after_first(char *d, size_t s, size_t n, void *ud)
{
    (void)d;
    int *seen = ud;
    (*seen)++;
    return *seen > 1 ? 0 : s * n; /* returning 0 aborts the transfer */
}

static void
test_disconnect(void)
{
    CURL *c = curl_easy_init();
    int seen = 0;
    const char *body = "{\"model\":\"local\",\"stream\":true,"
                       "\"max_tokens\":200,\"messages\":[{\"role\":"
                       "\"user\",\"content\":\"Tell a story\"}]}";
    struct curl_slist *h =
        curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, abort_after_first);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &seen);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    CURLcode rc = curl_easy_perform(c);
    T_CHECK(rc == CURLE_WRITE_ERROR);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    /* The server keeps answering. */
    long st;
    json_t *o = post("{\"model\":\"local\",\"max_tokens\":3,\"messages\":"
                     "[{\"role\":\"user\",\"content\":\"Hi\"}]}",
                     &st, NULL);
    T_EQ_INT(st, 200);
    json_decref(o);
}

static void
test_timeout(void)
{
    /* timeout_ms 60 on a 1900-token generation: the engine is stopped and
     * the client gets 504 (every attempt timed out), quickly. */
    long st;
    json_t *o = post("{\"model\":\"local@slow\",\"max_tokens\":1900,"
                     "\"temperature\":0,\"messages\":[{\"role\":\"user\","
                     "\"content\":\"Once upon a time\"}]}",
                     &st, NULL);
    T_EQ_INT(st, 504);
    T_CHECK(strstr(json_string_value(json_object_get(
                       json_object_get(o, "error"), "message")),
                   "timeout") != NULL);
    json_decref(o);
    /* The engine is free again: a short request on it answers.  Its own
     * 60 ms budget can pass on a loaded machine (sanitizer builds), so it
     * gets a few tries: the point is that the engine answers at all. */
    for (int i = 0; i < 8; i++) {
        o = post("{\"model\":\"local@slow\",\"max_tokens\":2,"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
                 &st, NULL);
        json_decref(o);
        if (st == 200)
            break;
    }
    T_EQ_INT(st, 200);
}

static long long
usage_int(const json_t *o, const char *k, const char *k2)
{
    const json_t *u = json_object_get(o, "usage");
    if (k2)
        u = json_object_get(u, k2);
    return json_integer_value(json_object_get(u, k));
}

static const char *
answer(const json_t *o)
{
    const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    return json_string_value(
        json_object_get(json_object_get(ch, "message"), "content"));
}

static void
test_prefix_cache(void)
{
    static const char sys[] =
        "You are a storyteller. Tell short stories about a little girl "
        "named Lily and her dog, who live in a small house by the sea and "
        "play in the garden every day.";
    char a[1024], b[1024];
    snprintf(a, sizeof(a),
             "{\"model\":\"local@tiny\",\"temperature\":0,\"max_tokens\":8,"
             "\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},"
             "{\"role\":\"user\",\"content\":\"Once upon a time\"}]}",
             sys);
    snprintf(b, sizeof(b),
             "{\"model\":\"local@tiny\",\"temperature\":0,\"max_tokens\":8,"
             "\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},"
             "{\"role\":\"user\",\"content\":\"The dog ran\"}]}",
             sys);
    long st;
    json_t *b0 = post(b, &st, NULL); /* b on a cache without its prefix */
    T_EQ_INT(st, 200);
    json_t *o = post("{\"model\":\"local@tiny\",\"max_tokens\":2,"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"Zz\"}]}",
                     &st, NULL);
    json_decref(o);
    json_t *a1 = post(a, &st, NULL);
    T_EQ_INT(st, 200);
    json_t *b1 = post(b, &st, NULL);
    T_EQ_INT(st, 200);
    long long pt = usage_int(b1, "prompt_tokens", NULL);
    long long ct = usage_int(b1, "cached_tokens", "prompt_tokens_details");
    /* the system prompt (about 40 tokens) came from a's cells */
    T_CHECK(ct >= 30);
    T_CHECK(ct < pt);
    T_EQ_STR(answer(b1), answer(b0));
    T_EQ_INT(e2e_db_int(db, "SELECT cached_tokens FROM usage ORDER BY rowid "
                            "DESC LIMIT 1"),
             ct);
    json_decref(a1);
    json_decref(b0);
    json_decref(b1);
}

static long long long_completion; /* usage of long_request's answer */

static void *
long_request(void *arg)
{
    long *st = arg;
    struct e2e_resp r;
    *st = -1;
    /* long enough to be seen running, short enough for sanitizer builds */
    if (e2e_http("POST", url,
                 "{\"model\":\"local@tiny\",\"max_tokens\":1500,"
                 "\"temperature\":0,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"Once upon a time\"}]}",
                 NULL, 300000, &r) == 0) {
        *st = r.status;
        json_t *o = json_loads(r.body, 0, NULL);
        long_completion = usage_int(o, "completion_tokens", NULL);
        json_decref(o);
    }
    e2e_resp_free(&r);
    return NULL;
}

static int
metric_value(const char *name, const char *model, double *v)
{
    char murl[256], key[256];
    snprintf(murl, sizeof(murl), "http://127.0.0.1:%d/metrics", gw.port);
    snprintf(key, sizeof(key), "%s{model=\"%s\"} ", name, model);
    struct e2e_resp r;
    int found = 0;
    if (e2e_http("GET", murl, NULL, NULL, 10000, &r) == 0 && r.body) {
        const char *p = strstr(r.body, key);
        if (p) {
            *v = strtod(p + strlen(key), NULL);
            found = 1;
        }
    }
    e2e_resp_free(&r);
    return found;
}

static void
test_busy(void)
{
    long lst = 0;
    pthread_t th;
    T_EQ_INT(pthread_create(&th, NULL, long_request, &lst), 0);
    /* until the long one holds tiny's only sequence (bounded) */
    double active = 0;
    for (int i = 0; i < 1000 && active < 1; i++) {
        if (!metric_value("llmux_local_active_sequences", "local@tiny",
                          &active))
            active = 0;
        if (active < 1) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
    T_CHECK(active >= 1);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", url,
                      "{\"model\":\"local@tiny\",\"max_tokens\":2,"
                      "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
                      NULL, 60000, &r),
             0);
    char ra[32] = "";
    if (active >= 1) {
        T_EQ_INT(r.status, 503);
        T_CHECK(e2e_header(&r, "Retry-After", ra, sizeof(ra)) != NULL);
        T_CHECK(r.body && strstr(r.body, "busy") != NULL);
    }
    e2e_resp_free(&r);
    pthread_join(th, NULL);
    T_EQ_INT(lst, 200);
    double tok = 0, cached = 0, queued = -1;
    T_CHECK(metric_value("llmux_local_tokens_total", "local@tiny", &tok));
    /* every test's tokens on tiny, the long answer's among them */
    T_CHECK(long_completion >= 1 && tok >= (double)long_completion);
    T_CHECK(metric_value("llmux_local_prefix_cache_tokens_total",
                         "local@tiny", &cached));
    T_CHECK(cached >= 30);
    T_CHECK(metric_value("llmux_local_queue_length", "local@tiny", &queued));
    T_EQ_INT((long long)queued, 0);
}

/* The whole /metrics text, with the local families filled by the tests
 * above, passes `promtool check metrics` (Debian's prometheus package;
 * CI requires it with LLMUX_REQUIRE_PROMTOOL). */
static void
test_promtool(void)
{
    if (access("/usr/bin/promtool", X_OK) != 0) {
        fprintf(stderr, "note: promtool not installed: skipped%s\n",
                getenv("LLMUX_REQUIRE_PROMTOOL") ? " (required: failing)"
                                                 : "");
        T_CHECK(!getenv("LLMUX_REQUIRE_PROMTOOL"));
        return;
    }
    char murl[256];
    snprintf(murl, sizeof(murl), "http://127.0.0.1:%d/metrics", gw.port);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("GET", murl, NULL, NULL, 10000, &r), 0);
    T_EQ_INT(r.status, 200);
    T_CHECK(r.body && strstr(r.body, "llmux_local_active_sequences{"));
    char *path = e2e_write_temp("local-metrics.txt", r.body ? r.body : "");
    T_CHECK(path != NULL);
    if (path) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "/usr/bin/promtool check metrics < '%s' >&2", path);
        T_EQ_INT(system(cmd), 0);
        unlink(path);
        free(path);
    }
    e2e_resp_free(&r);
}

/* n > 1: n sequences (the later ones copy the first one's prompt cells),
 * greedy choices equal the n = 1 answer, usage counts every choice. */
static void
test_n_choices(void)
{
    long st;
    json_t *one = post("{\"model\":\"local\",\"temperature\":0,"
                       "\"max_tokens\":10,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"Tell me about the sea\"}]}",
                       &st, NULL);
    T_EQ_INT(st, 200);
    json_t *o = post("{\"model\":\"local\",\"temperature\":0,\"n\":3,"
                     "\"max_tokens\":10,\"messages\":[{\"role\":\"user\","
                     "\"content\":\"Tell me about the sea\"}]}",
                     &st, NULL);
    T_EQ_INT(st, 200);
    const json_t *chs = json_object_get(o, "choices");
    T_EQ_INT(json_array_size(chs), 3);
    for (size_t k = 0; k < json_array_size(chs); k++) {
        const json_t *ch = json_array_get(chs, k);
        T_EQ_INT(json_integer_value(json_object_get(ch, "index")), k);
        T_EQ_STR(json_string_value(json_object_get(
                     json_object_get(ch, "message"), "content")),
                 answer(one));
    }
    T_EQ_INT(usage_int(o, "completion_tokens", NULL),
             3 * usage_int(one, "completion_tokens", NULL));
    T_EQ_INT(usage_int(o, "prompt_tokens", NULL),
             usage_int(one, "prompt_tokens", NULL));
    json_decref(o);
    /* sampled: three choices, each a complete answer */
    o = post("{\"model\":\"local\",\"seed\":5,\"n\":3,"
             "\"max_tokens\":10,\"messages\":[{\"role\":\"user\","
             "\"content\":\"Tell me about the sea\"}]}",
             &st, NULL);
    T_EQ_INT(st, 200);
    T_EQ_INT(json_array_size(json_object_get(o, "choices")), 3);
    json_decref(o);
    /* more choices than the engine can hold at once (parallel 1, queue
     * 0): busy, never a partial answer */
    o = post("{\"model\":\"local@tiny\",\"n\":2,\"max_tokens\":4,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
             &st, NULL);
    T_CHECK(st == 503 || st == 200);
    json_decref(o);
    json_decref(one);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (start() != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_nonstream);
    T_RUN(test_stream);
    T_RUN(test_context_limit);
    T_RUN(test_disconnect);
    T_RUN(test_timeout);
    T_RUN(test_prefix_cache);
    T_RUN(test_busy);
    T_RUN(test_promtool);
    T_RUN(test_n_choices);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 20000), 0);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
