/*
 * test_local_stress: the local provider under concurrent streams and client
 * disconnects, end to end on the real binary with stories260K.gguf and
 * parallel 2 (two engine sessions for twenty requests, so most wait in the
 * queue) and threads 2 (the two sessions share one compute pool).
 *
 *   - a lone greedy streamed request gives the reference text T;
 *   - then 20 streamed requests at once over one curl multi handle: the
 *     even ones read to the end, the odd ones hang up after their first
 *     bytes (some mid-generation, some still queued);
 *   - every request that ran to the end got 200, exactly one usage chunk
 *     (completion_tokens = the number of content tokens the usage reports,
 *     prompt_tokens the same for all), one finish_reason and a final
 *     [DONE], and its text is T (greedy output does not depend on which
 *     session ran it or on what a cancelled job left in its KV cache);
 *   - the server stays healthy: /health, a non-stream chat with usage, and
 *     the same greedy stream again still gives T;
 *   - a streamed request whose prompt cannot fit the context gets 400
 *     context_length_exceeded, not a 200 stream that breaks;
 *   - invalid UTF-8 from sampled byte tokens (llama-2-tiny-random at
 *     temperature 5) comes out as U+FFFD in valid JSON, streamed or not;
 *   - SIGTERM with generations running and queued: the server exits 0 by
 *     itself and no client transfer hangs;
 *   - after a clean SIGTERM stop the ledger (the config's database file)
 *     holds one row per chat request: the 10 finished streams as 200 with
 *     usage_source 'local' and the usage the client saw, the 10 hung-up
 *     ones as a row each (status 499 or, when generation had already
 *     finished, 200), and the health-check requests.
 * Bounded: every transfer has a timeout, the multi loop a deadline.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>
#include <sqlite3.h>

#include "harness.h"
#include "lib/e2e.h"

#define N_REQ 20
#define MAX_TOKENS 48

static struct e2e_proc gw;
static char url[256];
static char base[128];
static char db_path[512];

static int
start(void)
{
    char model[1024], cfg[4096];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    snprintf(db_path, sizeof(db_path), "%s/ledger.db", dir);
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s\", \"require_keys\": false,\n"
             " \"providers\": {\"local\": {\"kind\": \"local\", "
             "\"model_path\": \"%s\",\n"
             "   \"threads\": 2, \"context\": 512, \"parallel\": 2}}}\n",
             db_path, model);
    free(dir);
    char *path = e2e_write_temp("stress.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    return rc;
}

/* What one streamed response held. */
struct sse_sum {
    int parsed_ok;  /* every data line was JSON or [DONE] */
    int events;     /* JSON chunks */
    int usage;      /* chunks with a usage object */
    int finish;     /* chunks with a finish_reason */
    int done;       /* [DONE] seen */
    int done_last;  /* [DONE] was the last event */
    long prompt_tokens, completion_tokens;
    char text[8192];
    size_t len;
};

static void
sse_parse(const char *body, struct sse_sum *s)
{
    memset(s, 0, sizeof(*s));
    s->parsed_ok = 1;
    const char *p = body;
    while (p && (p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        if (!strncmp(p, "[DONE]", 6)) {
            s->done++;
            s->done_last = strstr(e, "data: ") == NULL;
            p = e;
            continue;
        }
        json_t *o = json_loadb(p, (size_t)(e - p), JSON_ALLOW_NUL, NULL);
        if (!o) {
            s->parsed_ok = 0;
            p = e;
            continue;
        }
        s->events++;
        const json_t *u = json_object_get(o, "usage");
        if (json_is_object(u)) {
            s->usage++;
            s->prompt_tokens =
                (long)json_integer_value(json_object_get(u, "prompt_tokens"));
            s->completion_tokens = (long)json_integer_value(
                json_object_get(u, "completion_tokens"));
        }
        const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        if (json_is_string(json_object_get(ch, "finish_reason")))
            s->finish++;
        const json_t *c =
            json_object_get(json_object_get(ch, "delta"), "content");
        if (json_is_string(c)) {
            size_t n = json_string_length(c);
            if (s->len + n < sizeof(s->text)) {
                memcpy(s->text + s->len, json_string_value(c), n);
                s->len += n;
                s->text[s->len] = '\0';
            }
        }
        json_decref(o);
        p = e;
    }
}

static const char *stream_body =
    "{\"model\":\"local\",\"stream\":true,\"temperature\":0,"
    "\"max_tokens\":48,\"stream_options\":{\"include_usage\":true},"
    "\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}]}";

/* The hung-up requests ask for more tokens so they are still generating
 * when the client goes. */
static const char *long_body =
    "{\"model\":\"local\",\"stream\":true,\"temperature\":0.8,\"seed\":3,"
    "\"max_tokens\":400,\"stream_options\":{\"include_usage\":true},"
    "\"messages\":[{\"role\":\"user\",\"content\":\"Tell a long story\"}]}";

static char ref_text[8192];
static long ref_prompt_tokens;

static int
lone_stream(struct sse_sum *s)
{
    struct e2e_resp r;
    if (e2e_http("POST", url, stream_body, NULL, 60000, &r) != 0)
        return -1;
    int ok = r.status == 200;
    sse_parse(r.body, s);
    e2e_resp_free(&r);
    return ok ? 0 : -1;
}

static void
test_reference_stream(void)
{
    struct sse_sum *s = malloc(sizeof(*s));
    T_EQ_INT(lone_stream(s), 0);
    T_CHECK(s->parsed_ok);
    T_EQ_INT(s->usage, 1);
    T_EQ_INT(s->done, 1);
    T_CHECK(s->len > 0);
    T_CHECK(s->completion_tokens >= 1 && s->completion_tokens <= MAX_TOKENS);
    snprintf(ref_text, sizeof(ref_text), "%s", s->text);
    ref_prompt_tokens = s->prompt_tokens;
    T_CHECK(ref_prompt_tokens > 4);
    free(s);
}

struct xfer {
    CURL *h;
    int hang_up;      /* 1: abort after the first bytes */
    size_t got;       /* bytes received */
    char *buf;
    size_t cap;
    long status;
    CURLcode rc;
    int finished;
};

static size_t
on_data(char *d, size_t sz, size_t n, void *ud)
{
    struct xfer *x = ud;
    size_t len = sz * n;
    if (x->hang_up && x->got > 0)
        return 0; /* second piece of data: hang up */
    if (x->got + len + 1 > x->cap) {
        size_t nc = (x->got + len + 1) * 2;
        char *nb = realloc(x->buf, nc);
        if (!nb)
            return 0;
        x->buf = nb;
        x->cap = nc;
    }
    memcpy(x->buf + x->got, d, len);
    x->got += len;
    x->buf[x->got] = '\0';
    return len;
}

static long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int n_completed, n_hung_up;
static long completed_usage_sum;

static void
test_burst(void)
{
    CURLM *m = curl_multi_init();
    struct xfer x[N_REQ];
    struct curl_slist *hdr =
        curl_slist_append(NULL, "Content-Type: application/json");
    memset(x, 0, sizeof(x));
    for (int i = 0; i < N_REQ; i++) {
        x[i].hang_up = i % 2;
        x[i].h = curl_easy_init();
        curl_easy_setopt(x[i].h, CURLOPT_URL, url);
        curl_easy_setopt(x[i].h, CURLOPT_POSTFIELDS,
                         x[i].hang_up ? long_body : stream_body);
        curl_easy_setopt(x[i].h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(x[i].h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(x[i].h, CURLOPT_WRITEDATA, &x[i]);
        curl_easy_setopt(x[i].h, CURLOPT_TIMEOUT_MS, 60000L);
        curl_easy_setopt(x[i].h, CURLOPT_PRIVATE, &x[i]);
        /* one connection each: twenty concurrent requests */
        curl_easy_setopt(x[i].h, CURLOPT_FORBID_REUSE, 1L);
        curl_multi_add_handle(m, x[i].h);
    }
    int running = 1;
    long deadline = now_ms() + 90000;
    while (running && now_ms() < deadline) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct xfer *xp = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &xp);
            xp->rc = msg->data.result;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE,
                              &xp->status);
            xp->finished = 1;
        }
        if (running)
            curl_multi_poll(m, NULL, 0, 200, NULL);
    }
    T_EQ_INT(running, 0);
    struct sse_sum *s = malloc(sizeof(*s));
    for (int i = 0; i < N_REQ; i++) {
        T_CHECK(x[i].finished);
        if (x[i].hang_up) {
            /* it hung up on its second piece of data (or, if everything
             * came in one piece, it simply finished) */
            T_CHECK(x[i].rc == CURLE_WRITE_ERROR || x[i].rc == CURLE_OK);
            n_hung_up++;
        } else {
            T_EQ_INT(x[i].rc, CURLE_OK);
            T_EQ_INT(x[i].status, 200);
            sse_parse(x[i].buf ? x[i].buf : "", s);
            T_CHECK(s->parsed_ok);
            T_EQ_INT(s->usage, 1);
            T_EQ_INT(s->finish, 1);
            T_EQ_INT(s->done, 1);
            T_CHECK(s->done_last);
            T_EQ_INT(s->prompt_tokens, ref_prompt_tokens);
            T_CHECK(s->completion_tokens >= 1 &&
                    s->completion_tokens <= MAX_TOKENS);
            if (strcmp(s->text, ref_text) != 0)
                fprintf(stderr, "request %d: text differs from the lone "
                                "run:\n  [%s]\n  [%s]\n",
                        i, s->text, ref_text);
            T_EQ_STR(s->text, ref_text);
            completed_usage_sum += s->prompt_tokens + s->completion_tokens;
            n_completed++;
        }
        curl_multi_remove_handle(m, x[i].h);
        curl_easy_cleanup(x[i].h);
        free(x[i].buf);
    }
    free(s);
    curl_slist_free_all(hdr);
    curl_multi_cleanup(m);
    T_EQ_INT(n_completed, N_REQ / 2);
    T_EQ_INT(n_hung_up, N_REQ / 2);
}

static void
test_still_healthy(void)
{
    struct e2e_resp r;
    char h[256];
    snprintf(h, sizeof(h), "%s/health", base);
    T_EQ_INT(e2e_http("GET", h, NULL, NULL, 10000, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    T_EQ_INT(e2e_http("POST", url,
                      "{\"model\":\"local\",\"max_tokens\":5,\"messages\":"
                      "[{\"role\":\"user\",\"content\":\"Hi\"}]}",
                      NULL, 30000, &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    const json_t *u = json_object_get(o, "usage");
    T_CHECK(json_integer_value(json_object_get(u, "completion_tokens")) >= 1);
    json_decref(o);
    e2e_resp_free(&r);
    /* the sessions the cancelled jobs used still give the greedy text */
    struct sse_sum *s = malloc(sizeof(*s));
    for (int i = 0; i < 2; i++) {
        T_EQ_INT(lone_stream(s), 0);
        T_EQ_STR(s->text, ref_text);
        T_EQ_INT(s->done, 1);
    }
    free(s);
}

static void
test_stream_context_limit(void)
{
    /* A streamed request whose prompt cannot fit gets the 400
     * context_length_exceeded itself, not a 200 stream that breaks. */
    size_t cap = 8192;
    char *big = malloc(cap);
    strcpy(big, "{\"model\":\"local\",\"stream\":true,\"messages\":"
                "[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < 700; i++)
        strcat(big, "once ");
    strcat(big, "\"}]}");
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", url, big, NULL, 30000, &r), 0);
    T_EQ_INT(r.status, 400);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_STR(json_string_value(
                 json_object_get(json_object_get(o, "error"), "code")),
             "context_length_exceeded");
    json_decref(o);
    e2e_resp_free(&r);
    free(big);
}

/*
 * Byte tokens sampled at a high temperature make invalid UTF-8; the answer
 * must still be JSON (U+FFFD in place of the bad bytes), never a lost
 * chunk or a failed request.  llama-2-tiny-random has the 256 byte tokens
 * and random weights; its own server.
 */
static void
test_invalid_utf8(void)
{
    char model[1024], cfg[4096];
    snprintf(model, sizeof(model), "%s/models/llama-2-tiny-random.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
             " \"database\": \"%s/l2.db\", \"require_keys\": false,\n"
             " \"providers\": {\"local\": {\"kind\": \"local\", "
             "\"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 512, \"parallel\": 1}}}\n",
             dir, model);
    free(dir);
    char *path = e2e_write_temp("utf8.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    struct e2e_proc g2;
    int rc = e2e_start(&g2, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    T_EQ_INT(rc, 0);
    if (rc != 0)
        return;
    char u2[256], body[512];
    snprintf(u2, sizeof(u2), "http://127.0.0.1:%d/v1/chat/completions",
             g2.port);
    int repl = 0;
    for (int seed = 1; seed <= 6; seed++) {
        snprintf(body, sizeof(body),
                 "{\"model\":\"local\",\"temperature\":5,\"seed\":%d,"
                 "\"max_tokens\":200,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"hi\"}]}",
                 seed);
        struct e2e_resp r;
        T_EQ_INT(e2e_http("POST", u2, body, NULL, 30000, &r), 0);
        T_EQ_INT(r.status, 200);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        const char *t = json_string_value(
            json_object_get(json_object_get(ch, "message"), "content"));
        T_CHECK(t != NULL);
        if (t && strstr(t, "\xEF\xBF\xBD"))
            repl++;
        T_EQ_INT(json_integer_value(json_object_get(
                     json_object_get(o, "usage"), "completion_tokens")),
                 200);
        json_decref(o);
        e2e_resp_free(&r);
    }
    T_CHECK(repl > 0); /* the case really happened */
    /* streamed: every chunk JSON, the text has the replacements, usage */
    snprintf(body, sizeof(body),
             "{\"model\":\"local\",\"stream\":true,\"temperature\":5,"
             "\"seed\":1,\"max_tokens\":200,\"stream_options\":"
             "{\"include_usage\":true},\"messages\":[{\"role\":\"user\","
             "\"content\":\"hi\"}]}");
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", u2, body, NULL, 30000, &r), 0);
    T_EQ_INT(r.status, 200);
    struct sse_sum *s = malloc(sizeof(*s));
    sse_parse(r.body ? r.body : "", s);
    T_CHECK(s->parsed_ok);
    T_EQ_INT(s->usage, 1);
    T_EQ_INT(s->completion_tokens, 200);
    T_EQ_INT(s->done, 1);
    T_CHECK(s->len > 0);
    /* no chunk without content between the role chunk and the finish */
    int empty = 0;
    const char *p = r.body ? r.body : "";
    while ((p = strstr(p, "\"choices\":[]")) != NULL) {
        empty++;
        p++;
    }
    T_EQ_INT(empty, 1); /* only the usage chunk has no choice */
    free(s);
    e2e_resp_free(&r);
    T_EQ_INT(e2e_stop(&g2, SIGTERM, 20000), 0);
}

/*
 * SIGTERM while generations are running and more are queued: the server
 * exits by itself with status 0 (engine threads stopped and joined, no
 * sanitizer report), and every client transfer ends (complete or cut),
 * none hangs.  (Under ASan this found a use-after-free at shutdown:
 * worker_cleanup frees the pv_loop and its calls before evhttp_free, whose
 * close callbacks then cancel those freed calls; see the report.)
 */
static void
test_shutdown_in_flight(void)
{
    char model[1024], cfg[4096];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s/l3.db\", \"require_keys\": false,\n"
             " \"providers\": {\"local\": {\"kind\": \"local\", "
             "\"model_path\": \"%s\",\n"
             "   \"threads\": 2, \"context\": 512, \"parallel\": 2}}}\n",
             dir, model);
    free(dir);
    char *path = e2e_write_temp("shutdown.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    struct e2e_proc g3;
    int rc = e2e_start(&g3, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    T_EQ_INT(rc, 0);
    if (rc != 0)
        return;
    char u3[256];
    snprintf(u3, sizeof(u3), "http://127.0.0.1:%d/v1/chat/completions",
             g3.port);
    enum { N = 12 };
    CURLM *m = curl_multi_init();
    struct xfer x[N];
    struct curl_slist *hdr =
        curl_slist_append(NULL, "Content-Type: application/json");
    memset(x, 0, sizeof(x));
    for (int i = 0; i < N; i++) {
        x[i].h = curl_easy_init();
        curl_easy_setopt(x[i].h, CURLOPT_URL, u3);
        curl_easy_setopt(x[i].h, CURLOPT_POSTFIELDS, long_body);
        curl_easy_setopt(x[i].h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(x[i].h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(x[i].h, CURLOPT_WRITEDATA, &x[i]);
        curl_easy_setopt(x[i].h, CURLOPT_TIMEOUT_MS, 60000L);
        curl_easy_setopt(x[i].h, CURLOPT_PRIVATE, &x[i]);
        curl_easy_setopt(x[i].h, CURLOPT_FORBID_REUSE, 1L);
        curl_multi_add_handle(m, x[i].h);
    }
    int running = 1, signalled = 0;
    long deadline = now_ms() + 90000;
    while (running && now_ms() < deadline) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct xfer *xp = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &xp);
            xp->rc = msg->data.result;
            xp->finished = 1;
        }
        if (!signalled) {
            /* as soon as some text has arrived: generations are running */
            for (int i = 0; i < N && !signalled; i++)
                if (x[i].got > 0) {
                    kill(g3.pid, SIGTERM);
                    signalled = 1;
                }
        }
        if (running)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    T_CHECK(signalled);
    T_EQ_INT(running, 0);
    int ended = 0;
    for (int i = 0; i < N; i++) {
        ended += x[i].finished;
        curl_multi_remove_handle(m, x[i].h);
        curl_easy_cleanup(x[i].h);
        free(x[i].buf);
    }
    T_EQ_INT(ended, N);
    curl_slist_free_all(hdr);
    curl_multi_cleanup(m);
    /* the first SIGTERM already stops it; this one only waits (bounded) */
    T_EQ_INT(e2e_stop(&g3, SIGTERM, 30000), 0);
}

static long
q_long(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void
test_ledger_rows(void)
{
    /* a clean stop flushes the writer */
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 30000), 0);
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL),
             SQLITE_OK);
    /* 1 lone stream before, 20 in the burst, 2 after (streams); 1
     * non-stream after; 1 stream refused for its length */
    long total = q_long(db, "SELECT COUNT(*) FROM usage");
    long streams = q_long(db, "SELECT COUNT(*) FROM usage WHERE stream = 1");
    T_EQ_INT(total, 1 + N_REQ + 1 + 2 + 1);
    T_EQ_INT(streams, 1 + N_REQ + 2 + 1);
    T_EQ_INT(q_long(db, "SELECT COUNT(*) FROM usage WHERE status = 400"), 1);
    /* the greedy streams that finished: 1 + 10 + 2, all 200, local usage */
    long greedy_ok = q_long(
        db, "SELECT COUNT(*) FROM usage WHERE stream = 1 AND status = 200 "
            "AND usage_source = 'local' AND completion_tokens BETWEEN 1 AND "
            "48 AND prompt_tokens > 4");
    T_CHECK(greedy_ok >= 1 + N_REQ / 2 + 2);
    /* the hung-up ones: a row each, 499 unless they had finished */
    long odd = q_long(db, "SELECT COUNT(*) FROM usage WHERE stream = 1 AND "
                          "(status = 499 OR (status = 200 AND "
                          "completion_tokens > 48))");
    long n499 = q_long(db, "SELECT COUNT(*) FROM usage WHERE status = 499");
    fprintf(stderr, "ledger: %ld rows, %ld streams, %ld hang-ups as 499\n",
            total, streams, n499);
    T_EQ_INT(odd + greedy_ok + 1, streams);
    T_CHECK(n499 >= 1); /* at least one really went mid-stream */
    long bad = q_long(db, "SELECT COUNT(*) FROM usage WHERE status NOT IN "
                          "(200, 400, 499)");
    T_EQ_INT(bad, 0);
    sqlite3_close(db);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (start() != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_reference_stream);
    T_RUN(test_burst);
    T_RUN(test_still_healthy);
    T_RUN(test_stream_context_limit);
    T_RUN(test_invalid_utf8);
    T_RUN(test_shutdown_in_flight);
    T_RUN(test_ledger_rows);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
