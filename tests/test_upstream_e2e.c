/*
 * End to end tests of issue 9's upstream items: the real llmux binary in
 * front of the real fake provider (and the local engine on the tiny
 * stories model), over real sockets.
 *
 *   429       every attempt rate limited -> 429 + the smallest Retry-After
 *             and the upstream's message; targets out on a 429's
 *             Retry-After -> 429, not 503
 *   401/403   the provider refused llmux's key: failover, circuit, 502
 *   timeouts  the documented defaults (llmux check), a 25 s answer and a
 *             stream whose first byte takes 45 s, which the old 20 s
 *             default cut (run in the background while the others run)
 *   SSE       multi-line data, "data:" without space, CR / CRLF line
 *             ends, comments, event and id fields, re-emitted per the spec
 *   validate  max_tokens / max_completion_tokens / n / stream_options
 *             -> 400 for the openai and the local kind alike
 *   headers   x-ratelimit-* and the upstream request id forwarded
 *   budget    both caps and n reserved: concurrent requests stay within
 *             the budget
 *   resend    one copy per attempt to an upstream that reads and resets,
 *             however many pooled connections there are
 *   allowlist an empty one is refused (admin API and CLI)
 *   secrets   api_key, header values and URL userinfo scrubbed in raw,
 *             JSON-escaped, \u-escaped, base64 and truncated form from
 *             bodies, headers, stream chunks, the log and the ledger
 *
 * One gateway with one worker (so the resend test knows which connection
 * pool it fills).  Nothing asserts on elapsed time.
 */
#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"

#define ADMIN "adm-upstream-0123456789abcdef"
/* Provider secrets (each >= 12 characters: the prefix rule applies). */
#define K1 "sk-test-KEY1-0123456789abcdefXYZ"
#define H1 "hdr-secret-H1-9876543210fedcba"
#define ORG "acme-org-name-x"
#define PW "pw-ALICE-secret-77"
#define T3 "tok-SEC3-abcdefgh12345678"
#define K4 "sk-ant-SEC4-0123456789abcdefQRS"

static struct e2e_proc fake, gw;
static char base[128], fbase[128], dbpath[512], cfgpath[512];
static const char *bin;

static int
start_gateway(void)
{
    char model[1024];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    snprintf(dbpath, sizeof(dbpath), "%s/upstream.db", dir);
    free(dir);
    int p = fake.port;
    static char cfg[16384];
#define PROV(name, xfake, extra)                                             \
    "  \"" name "\": {\"kind\": \"openai\", \"base_url\": "                  \
    "\"http://127.0.0.1:%d/v1\", \"headers\": {\"X-Fake\": \"" xfake         \
    "\"}, " extra "\"models\": {\"m\": {\"upstream\": \"m-" name "\", "      \
    "\"input_per_mtok\": 1, \"output_per_mtok\": 1}}},\n"
    snprintf(
        cfg, sizeof(cfg),
        "{\n"
        " \"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
        " \"database\": \"%s\", \"require_keys\": false,\n"
        " \"admin_key\": \"" ADMIN "\",\n"
        " \"providers\": {\n" PROV("ok", "", "") PROV(
            "r429a", "status=429;retry_after=7;message=Slow down (a)", "")
            PROV("r429b", "status=429;retry_after=3;message=Slow down (b)",
                 "") PROV("r429c", "status=429;retry_after=5", "")
                PROV("a401", "status=401;message=Incorrect API key provided",
                     "") PROV("a403", "status=403", "")
                    PROV("slow", "delay_ms=25000", "") PROV("rr", "", "")
        "  \"bud\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"models\": {\"m\": {\"upstream\": "
        "\"m-bud\", \"input_per_mtok\": 0, \"output_per_mtok\": 10}}},\n"
        "  \"sec1\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"api_key\": \"" K1 "\", "
        "\"headers\": {\"api-key\": \"" H1 "\", \"X-Org\": \"" ORG "\"}, "
        "\"models\": {\"m\": {\"upstream\": \"m-sec1\", \"input_per_mtok\": 1, "
        "\"output_per_mtok\": 1}}},\n"
        "  \"sec2\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://alice:" PW "@127.0.0.1:%d/v1\", "
        "\"models\": {\"m\": {\"upstream\": \"m-sec2\", \"input_per_mtok\": 1, "
        "\"output_per_mtok\": 1}}},\n"
        "  \"sec3\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"headers\": {\"Authorization\": "
        "\"Bearer " T3 "\"}, "
        "\"models\": {\"m\": {\"upstream\": \"m-sec3\", \"input_per_mtok\": 1, "
        "\"output_per_mtok\": 1}}},\n"
        "  \"sec4\": {\"kind\": \"anthropic\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"" K4 "\", "
        "\"models\": {\"m\": {\"upstream\": \"m-sec4\", \"input_per_mtok\": 1, "
        "\"output_per_mtok\": 1}}},\n"
        "  \"local\": {\"kind\": \"local\", \"model_path\": \"%s\", "
        "\"threads\": 1, \"context\": 256, \"parallel\": 1}\n"
        " },\n"
        " \"routes\": {\n"
        "  \"rl2\": {\"targets\": [\"m@r429a\", \"m@r429b\"]},\n"
        "  \"rl1\": {\"targets\": [\"m@r429c\"]},\n"
        "  \"auth\": {\"targets\": [\"m@a401\", \"m@ok\"]},\n"
        "  \"authonly\": {\"targets\": [\"m@a401\", \"m@a403\"]},\n"
        "  \"rr2\": {\"targets\": [\"m@rr\", \"m@ok\"]}\n"
        " },\n"
        " \"failover\": {\"max_attempts\": 3, \"backoff_ms\": 10, "
        "\"circuit_failures\": 5, \"circuit_cooldown_ms\": 30000}\n"
        "}\n",
        dbpath, p, p, p, p, p, p, p, p, p, p, p, p, p, model);
#undef PROV
    char *path = e2e_write_temp("upstream.json", cfg);
    if (!path)
        return -1;
    snprintf(cfgpath, sizeof(cfgpath), "%s", path);
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    if (rc == 0)
        snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    snprintf(fbase, sizeof(fbase), "http://127.0.0.1:%d", fake.port);
    return rc;
}

/* POST a chat body (raw JSON text) to llmux. */
static int
post(const char *body, struct e2e_resp *r)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    return e2e_http("POST", url, body, NULL, 60000, r);
}

static int
chat(const char *model, const char *content, int stream, struct e2e_resp *r)
{
    json_t *o = json_pack("{s:s,s:[{s:s,s:s}]}", "model", model, "messages",
                          "role", "user", "content", content);
    if (stream)
        json_object_set_new(o, "stream", json_true());
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    int rc = post(t, r);
    free(t);
    return rc;
}

/* error.FIELD of a JSON error body, copied. */
static const char *
err_field(const struct e2e_resp *r, const char *field, char *buf, size_t len)
{
    json_t *o = json_loads(r->body ? r->body : "", 0, NULL);
    const char *c = json_string_value(
        json_object_get(json_object_get(o, "error"), field));
    snprintf(buf, len, "%s", c ? c : "(none)");
    json_decref(o);
    return buf;
}

/* Copies the fake's by_model[m-NAME] (or by_tag[NAME] when tag). */
static long
fake_count(const char *name, int tag)
{
    char url[256], key[64];
    snprintf(url, sizeof(url), "%s/fake/stats", fbase);
    snprintf(key, sizeof(key), tag ? "%s" : "m-%s", name);
    struct e2e_resp r;
    long n = -1;
    if (e2e_http("GET", url, NULL, NULL, 5000, &r) == 0 && r.status == 200) {
        json_t *o = json_loads(r.body, 0, NULL);
        json_t *v = json_object_get(
            json_object_get(o, tag ? "by_tag" : "by_model"), key);
        n = v ? (long)json_integer_value(v) : 0;
        json_decref(o);
    }
    e2e_resp_free(&r);
    return n;
}

/* ------------------------------------------------------------------ */
/* 429                                                                  */

static void
test_rate_limited(void)
{
    struct e2e_resp r;
    char buf[512], ra[32];
    /* Both targets answer 429 (Retry-After 7 and 3). */
    T_EQ_INT(chat("rl2", "hi", 0, &r), 0);
    T_EQ_INT(r.status, 429);
    T_EQ_STR(err_field(&r, "code", buf, sizeof(buf)), "rate_limit_exceeded");
    T_CHECK(strstr(err_field(&r, "message", buf, sizeof(buf)),
                   "Slow down (a)") != NULL);
    T_CHECK(e2e_header(&r, "retry-after", ra, sizeof(ra)) != NULL);
    T_EQ_INT(atoi(ra), 3);
    e2e_resp_free(&r);
    /* Now both are out of rotation on a 429's Retry-After: still 429 (the
     * SDK's RateLimitError path), not 503, with a Retry-After. */
    T_EQ_INT(chat("rl2", "hi", 0, &r), 0);
    T_EQ_INT(r.status, 429);
    T_EQ_STR(err_field(&r, "code", buf, sizeof(buf)), "rate_limit_exceeded");
    T_CHECK(e2e_header(&r, "retry-after", ra, sizeof(ra)) != NULL &&
            atoi(ra) >= 1 && atoi(ra) <= 7);
    e2e_resp_free(&r);
    /* A single-target route: 429 too, with its Retry-After. */
    T_EQ_INT(chat("rl1", "hi", 1, &r), 0);
    T_EQ_INT(r.status, 429);
    T_CHECK(e2e_header(&r, "retry-after", ra, sizeof(ra)) != NULL);
    T_EQ_INT(atoi(ra), 5);
    e2e_resp_free(&r);
}

/* ------------------------------------------------------------------ */
/* 401/403 from the provider                                            */

static long
provider_failures(const char *target)
{
    char url[256], auth[128];
    snprintf(url, sizeof(url), "%s/admin/providers", base);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", ADMIN);
    const char *h[] = {auth, NULL};
    struct e2e_resp r;
    long n = -1;
    if (e2e_http("GET", url, NULL, h, 5000, &r) == 0 && r.status == 200) {
        json_t *o = json_loads(r.body, 0, NULL);
        json_t *arr = json_is_array(o) ? o : json_object_get(o, "data");
        size_t i;
        json_t *t;
        json_array_foreach(arr, i, t) {
            const char *name =
                json_string_value(json_object_get(t, "target"));
            if (name && !strcmp(name, target))
                n = (long)json_integer_value(json_object_get(t, "failures"));
        }
        json_decref(o);
    }
    e2e_resp_free(&r);
    return n;
}

static void
test_provider_auth(void)
{
    struct e2e_resp r;
    char buf[1024], prov[64];
    /* 401 from the first target: fail over to the second. */
    T_EQ_INT(chat("auth", "hi", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    T_CHECK(e2e_header(&r, "x-llmux-provider", prov, sizeof(prov)) &&
            !strcmp(prov, "ok"));
    e2e_resp_free(&r);
    /* Nothing else serves: 502 naming both attempts, never a 401/403
     * that would tell the client its own key is wrong. */
    T_EQ_INT(chat("authonly", "hi", 0, &r), 0);
    T_EQ_INT(r.status, 502);
    err_field(&r, "message", buf, sizeof(buf));
    T_CHECK(strstr(buf, "m@a401: status 401") != NULL);
    T_CHECK(strstr(buf, "m@a403: status 403") != NULL);
    T_CHECK(strcmp(err_field(&r, "code", prov, sizeof(prov)),
                   "invalid_api_key") != 0);
    e2e_resp_free(&r);
    T_EQ_INT(chat("authonly", "hi", 1, &r), 0);
    T_EQ_INT(r.status, 502);
    e2e_resp_free(&r);
    /* Each counted toward the target's circuit. */
    T_EQ_INT(provider_failures("m@a401"), 3);
    T_EQ_INT(provider_failures("m@a403"), 2);
}

/* ------------------------------------------------------------------ */
/* Default timeouts                                                     */

struct slow_job {
    int stream;
    long status;
    int done_marker; /* stream: ended with [DONE] */
};

static void *
slow_main(void *arg)
{
    struct slow_job *j = arg;
    struct e2e_resp r;
    j->status = -1;
    /* Non-stream: the whole answer after 25 s (the case); stream:
     * the first byte after 45 s (DESIGN.md section 5). */
    if (chat("m@slow", j->stream ? "fake:delay_ms=45000" : "hi", j->stream,
             &r) == 0) {
        j->status = r.status;
        j->done_marker = r.body && strstr(r.body, "data: [DONE]") != NULL;
    }
    e2e_resp_free(&r);
    return NULL;
}

static pthread_t slow_th[2];
static struct slow_job slow_jobs[2] = {{0, 0, 0}, {1, 0, 0}};

static void
slow_start(void)
{
    for (int i = 0; i < 2; i++)
        pthread_create(&slow_th[i], NULL, slow_main, &slow_jobs[i]);
}

static void
test_default_timeouts(void)
{
    /* The effective defaults are the documented ones. */
    char dir_cfg[2048];
    snprintf(dir_cfg, sizeof(dir_cfg),
             "{\"listen\": \"127.0.0.1:0\", \"database\": \":memory:\", "
             "\"providers\": {\"p\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:9/v1\", \"models\": {\"gpt-4.1\": {}}}}}\n");
    char *path = e2e_write_temp("defaults.json", dir_cfg);
    char cmd[1024], line[1024];
    snprintf(cmd, sizeof(cmd), "%s check --config %s 2>&1", bin, path);
    free(path);
    FILE *f = popen(cmd, "r");
    int found = 0;
    while (f && fgets(line, sizeof(line), f))
        if (strstr(line, "timeout_ms 600000, connect_timeout_ms 10000, "
                         "first_byte_timeout_ms 300000"))
            found = 1;
    T_CHECK(f && pclose(f) == 0);
    T_CHECK(found);
    /* And a 25 s answer and a stream whose first byte comes after 45 s
     * (the old first-byte default was 20 s) succeed. */
    for (int i = 0; i < 2; i++) {
        pthread_join(slow_th[i], NULL);
        T_EQ_INT(slow_jobs[i].status, 200);
    }
    T_CHECK(slow_jobs[1].done_marker);
}

/* ------------------------------------------------------------------ */
/* SSE                                                                  */

/* Parses an event stream per the spec (any line end, comments, fields,
 * "data:" with or without one space, several data lines joined with LF)
 * and checks every event's data is [DONE] or a JSON chunk; appends the
 * chunks' delta content to text.  Returns the number of events, or -1. */
static int
sse_parse(const char *s, char *text, size_t tlen, int *done)
{
    char data[65536];
    size_t dl = 0;
    int have = 0, n = 0;
    text[0] = '\0';
    *done = 0;
    while (*s) {
        size_t l = strcspn(s, "\r\n");
        const char *line = s;
        s += l;
        if (*s == '\r' && s[1] == '\n')
            s += 2;
        else if (*s)
            s++;
        if (l == 0) {
            if (!have)
                continue;
            data[dl] = '\0';
            n++;
            have = 0;
            dl = 0;
            if (!strcmp(data, "[DONE]")) {
                *done = 1;
                continue;
            }
            json_t *o = json_loads(data, 0, NULL);
            if (!json_is_object(o)) {
                fprintf(stderr, "  event is not JSON: %.200s\n", data);
                json_decref(o);
                return -1;
            }
            const char *c = json_string_value(json_object_get(
                json_object_get(json_array_get(json_object_get(o, "choices"),
                                               0),
                                "delta"),
                "content"));
            if (c)
                snprintf(text + strlen(text), tlen - strlen(text), "%s", c);
            json_decref(o);
            continue;
        }
        if (line[0] == ':')
            continue;
        if (l >= 5 && !memcmp(line, "data:", 5)) {
            const char *v = line + 5;
            size_t vl = l - 5;
            if (vl && *v == ' ') {
                v++;
                vl--;
            }
            if (have && dl < sizeof(data) - 1)
                data[dl++] = '\n';
            if (dl + vl >= sizeof(data))
                return -1;
            memcpy(data + dl, v, vl);
            dl += vl;
            have = 1;
        }
    }
    return n;
}

static void
test_sse(void)
{
    static const char *const modes[] = {"multiline", "multiline;crlf",
                                        "multiline;cr", "cr;comments",
                                        "crlf;comments"};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        char content[256], text[1024];
        snprintf(content, sizeof(content),
                 "fake:%s;content=alpha beta gamma/delta", modes[i]);
        struct e2e_resp r;
        T_EQ_INT(chat("m@ok", content, 1, &r), 0);
        T_EQ_INT(r.status, 200);
        int done = 0;
        int n = sse_parse(r.body ? r.body : "", text, sizeof(text), &done);
        T_CHECK(n >= 4);
        T_CHECK(done);
        T_EQ_STR(text, "alpha beta gamma/delta");
        if (n < 4 || strcmp(text, "alpha beta gamma/delta"))
            fprintf(stderr, "  mode %s: %.400s\n", modes[i], r.body);
        e2e_resp_free(&r);
    }
}

/* ------------------------------------------------------------------ */
/* Validation                                                           */

static void
test_validation(void)
{
    static const char *const bad[] = {
        "\"max_tokens\": 0",
        "\"max_tokens\": -1",
        "\"max_tokens\": 1000001",
        "\"max_tokens\": 99999999999999",
        "\"max_tokens\": 1.5",
        "\"max_tokens\": \"10\"",
        "\"max_completion_tokens\": 0",
        "\"max_completion_tokens\": 5000000",
        "\"max_completion_tokens\": true",
        "\"n\": 0",
        "\"n\": 129",
        "\"n\": \"2\"",
        "\"stream\": true, \"stream_options\": {\"include_usage\": \"yes\"}",
        "\"stream_options\": {\"include_usage\": 1}",
        "\"stream_options\": \"include_usage\"",
        "\"stream_options\": [true]",
    };
    static const char *const models[] = {"m@ok", "local"};
    long before = fake_count("ok", 0);
    for (size_t mi = 0; mi < 2; mi++) {
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            char body[512], type[64];
            snprintf(body, sizeof(body),
                     "{\"model\": \"%s\", \"messages\": [{\"role\": "
                     "\"user\", \"content\": \"hi\"}], %s}",
                     models[mi], bad[i]);
            struct e2e_resp r;
            T_EQ_INT(post(body, &r), 0);
            T_EQ_INT(r.status, 400);
            T_EQ_STR(err_field(&r, "type", type, sizeof(type)),
                     "invalid_request_error");
            if (r.status != 400)
                fprintf(stderr, "  %s %s -> %ld %s\n", models[mi], bad[i],
                        r.status, r.body);
            e2e_resp_free(&r);
        }
    }
    T_EQ_INT(fake_count("ok", 0), before); /* none went upstream */
    /* The edges that are fine. */
    static const char *const good[] = {
        "\"max_tokens\": 1", "\"max_completion_tokens\": 1000000",
        "\"n\": 1", "\"stream_options\": null",
        "\"max_tokens\": null, \"stream_options\": {\"include_usage\": false}",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"model\": \"m@ok\", \"messages\": [{\"role\": \"user\", "
                 "\"content\": \"hi\"}], %s}",
                 good[i]);
        struct e2e_resp r;
        T_EQ_INT(post(body, &r), 0);
        T_EQ_INT(r.status, 200);
        e2e_resp_free(&r);
    }
    struct e2e_resp r;
    T_EQ_INT(post("{\"model\": \"local\", \"max_tokens\": 3, \"messages\": "
                  "[{\"role\": \"user\", \"content\": \"Once\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

/* ------------------------------------------------------------------ */
/* Budget                                                               */

static long long
admin_create(const char *body, char *key, size_t keylen, long *status)
{
    char url[256], auth[128];
    snprintf(url, sizeof(url), "%s/admin/keys", base);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", ADMIN);
    const char *h[] = {auth, NULL};
    struct e2e_resp r;
    long long id = -1;
    *status = -1;
    if (e2e_http("POST", url, body, h, 10000, &r) == 0) {
        *status = r.status;
        json_t *o = json_loads(r.body, 0, NULL);
        if (r.status == 200) {
            id = json_integer_value(json_object_get(o, "id"));
            snprintf(key, keylen, "%s",
                     json_string_value(json_object_get(o, "key")) ?: "");
        }
        json_decref(o);
    }
    e2e_resp_free(&r);
    return id;
}

static long long
db_int(const char *sql)
{
    return e2e_db_int(dbpath, sql);
}

struct bud_job {
    const char *key, *body;
    int ok, quota, other;
};

static void *
bud_main(void *arg)
{
    struct bud_job *j = arg;
    char url[256], auth[256];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", j->key);
    const char *h[] = {auth, NULL};
    for (int i = 0; i < 2; i++) {
        struct e2e_resp r;
        char code[64];
        if (e2e_http("POST", url, j->body, h, 30000, &r) != 0)
            j->other++;
        else if (r.status == 200)
            j->ok++;
        else if (r.status == 429 &&
                 !strcmp(err_field(&r, "code", code, sizeof(code)),
                         "insufficient_quota"))
            j->quota++;
        else
            j->other++;
        e2e_resp_free(&r);
    }
    return NULL;
}

/* 20 requests on 10 connections at once against key's budget. */
static void
run_budget(const char *key, const char *body, int *ok, int *quota)
{
    struct bud_job j[10];
    pthread_t th[10];
    for (int i = 0; i < 10; i++) {
        j[i] = (struct bud_job){key, body, 0, 0, 0};
        pthread_create(&th[i], NULL, bud_main, &j[i]);
    }
    *ok = *quota = 0;
    int other = 0;
    for (int i = 0; i < 10; i++) {
        pthread_join(th[i], NULL);
        *ok += j[i].ok;
        *quota += j[i].quota;
        other += j[i].other;
    }
    T_EQ_INT(other, 0);
}

static void
test_budget(void)
{
    /* m@bud: output 10 USD per Mtok, input free.  The fake bills what the
     * larger cap allows (completion_tokens=1000: 0.01 USD a request).
     * Budget 0.05 USD: at most 5 such requests may be admitted. */
    char key[128], sql[256];
    long st;
    long long id = admin_create("{\"name\":\"bud1\",\"budget_usd\":0.05}",
                                key, sizeof(key), &st);
    T_CHECK(id > 0);
    int ok, quota;
    run_budget(key,
               "{\"model\": \"m@bud\", \"max_completion_tokens\": 1, "
               "\"max_tokens\": 1000, \"messages\": [{\"role\": \"user\", "
               "\"content\": \"fake:completion_tokens=1000\"}]}",
               &ok, &quota);
    T_EQ_INT(ok + quota, 20);
    T_CHECK(ok >= 1 && ok <= 5);
    snprintf(sql, sizeof(sql), "SELECT spent_pusd FROM keys WHERE id = %lld",
             id);
    long long spent = db_int(sql);
    T_CHECK(spent > 0 && spent <= 50000000000LL);
    T_EQ_INT(spent, ok * 10000000000LL);
    /* n = 3 choices of up to 1000 tokens: 0.03 USD each, one fits. */
    id = admin_create("{\"name\":\"bud2\",\"budget_usd\":0.05}", key,
                      sizeof(key), &st);
    run_budget(key,
               "{\"model\": \"m@bud\", \"n\": 3, \"max_tokens\": 1000, "
               "\"messages\": [{\"role\": \"user\", "
               "\"content\": \"fake:completion_tokens=3000\"}]}",
               &ok, &quota);
    T_EQ_INT(ok, 1);
    T_EQ_INT(ok + quota, 20);
    snprintf(sql, sizeof(sql), "SELECT spent_pusd FROM keys WHERE id = %lld",
             id);
    T_EQ_INT(db_int(sql), 30000000000LL);
}

/* ------------------------------------------------------------------ */
/* One copy per attempt                                                 */

static void *
warm_main(void *arg)
{
    (void)arg;
    struct e2e_resp r;
    chat("m@rr", "fake:delay_ms=300;tag=warm", 0, &r);
    e2e_resp_free(&r);
    return NULL;
}

static void
test_resend(void)
{
    /* Six requests at once leave six idle keep-alive connections in the
     * worker's pool; then an upstream that reads each copy and resets.
     * libcurl used to re-send the request once per dead pooled
     * connection: each copy may be billed. */
    pthread_t th[6];
    for (int i = 0; i < 6; i++)
        pthread_create(&th[i], NULL, warm_main, NULL);
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    T_EQ_INT(fake_count("warm", 1), 6);
    struct e2e_resp r;
    T_EQ_INT(chat("m@rr", "fake:reset;tag=rrcopy", 0, &r), 0);
    T_EQ_INT(r.status, 502);
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("rrcopy", 1), 1);
    /* Streams too, and the pool still serves afterwards. */
    T_EQ_INT(chat("m@rr", "fake:reset;tag=rrcopy2", 1, &r), 0);
    T_EQ_INT(r.status, 502);
    e2e_resp_free(&r);
    T_EQ_INT(fake_count("rrcopy2", 1), 1);
    T_EQ_INT(chat("m@rr", "hi", 0, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

/* ------------------------------------------------------------------ */
/* Upstream headers                                                     */

static void
test_forwarded_headers(void)
{
    for (int stream = 0; stream < 2; stream++) {
        struct e2e_resp r;
        char v[128];
        T_EQ_INT(chat("m@ok", "fake:rl_headers", stream, &r), 0);
        T_EQ_INT(r.status, 200);
        T_CHECK(e2e_header(&r, "x-ratelimit-limit-requests", v, sizeof(v)) &&
                !strcmp(v, "500"));
        T_CHECK(e2e_header(&r, "x-ratelimit-remaining-requests", v,
                           sizeof(v)) &&
                !strcmp(v, "499"));
        T_CHECK(e2e_header(&r, "x-ratelimit-reset-requests", v, sizeof(v)) &&
                !strcmp(v, "120ms"));
        T_CHECK(e2e_header(&r, "x-ratelimit-remaining-tokens", v,
                           sizeof(v)) &&
                !strcmp(v, "29000"));
        T_CHECK(e2e_header(&r, "x-llmux-upstream-request-id", v, sizeof(v)) &&
                !strncmp(v, "req_fake_", 9));
        /* llmux's own id stays llmux's. */
        T_CHECK(e2e_header(&r, "x-request-id", v, sizeof(v)) &&
                strncmp(v, "req_fake_", 9) != 0);
        e2e_resp_free(&r);
    }
    /* On an upstream 429 too (what the client backs off on). */
    struct e2e_resp r;
    char v[128];
    T_EQ_INT(chat("m@rr", "fake:rl_headers;status=429", 0, &r), 0);
    T_EQ_INT(r.status, 429);
    T_CHECK(e2e_header(&r, "x-ratelimit-remaining-tokens", v, sizeof(v)) &&
            !strcmp(v, "29000"));
    T_CHECK(e2e_header(&r, "x-llmux-upstream-request-id", v, sizeof(v)) !=
            NULL);
    e2e_resp_free(&r);
    /* An upstream 4xx passed on as is keeps its Retry-After. */
    T_EQ_INT(chat("m@ok", "fake:rl_headers;status=422;retry_after=9", 0, &r),
             0);
    T_EQ_INT(r.status, 422);
    T_CHECK(e2e_header(&r, "retry-after", v, sizeof(v)) && !strcmp(v, "9"));
    T_CHECK(e2e_header(&r, "x-ratelimit-limit-tokens", v, sizeof(v)) &&
            !strcmp(v, "30000"));
    e2e_resp_free(&r);
}

/* ------------------------------------------------------------------ */
/* Secrets                                                              */

static const char *const secrets[] = {K1, H1, PW, T3, "alice:" PW, K4};
#define N_SECRETS (sizeof(secrets) / sizeof(secrets[0]))

static char *
b64(const char *in, size_t skip)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)in + skip;
    size_t n = strlen(in) - skip, o = 0;
    char *out = malloc(n / 3 * 4 + 5);
    for (size_t i = 0; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
        out[o++] = tab[v & 63];
    }
    out[o] = '\0';
    return out;
}

/* Does text hold a form of a secret: its first 8 characters, or 8
 * characters of its base64 at any alignment?  (A full or cut echo, raw
 * or base64, holds one of these.) */
static int
holds_secret(const char *text, const char *where)
{
    if (!text)
        return 0;
    for (size_t i = 0; i < N_SECRETS; i++) {
        char pre[16];
        snprintf(pre, sizeof(pre), "%.8s", secrets[i]);
        int hit = strstr(text, pre) != NULL;
        for (size_t j = 0; j < 3 && !hit; j++) {
            char *b = b64(secrets[i], j);
            if (strlen(b) >= 12) {
                b[12] = '\0';
                hit = strstr(text, b) != NULL;
            }
            free(b);
        }
        if (hit) {
            fprintf(stderr, "  secret %zu leaked in %s: %.300s\n", i, where,
                    text);
            return 1;
        }
    }
    return 0;
}

/* A body and its JSON decoding (so \u and \/ escapes count too). */
static int
body_leaks(const struct e2e_resp *r)
{
    int bad = holds_secret(r->body, "body") ||
              holds_secret(r->headers, "headers");
    json_t *o = json_loads(r->body ? r->body : "", 0, NULL);
    char *plain = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    /* JSON_ENSURE_ASCII keeps ASCII as is: the decoded text, re-encoded
     * without any escape an ASCII secret could hide behind. */
    if (plain && holds_secret(plain, "decoded body"))
        bad = 1;
    free(plain);
    json_decref(o);
    return bad;
}

static void
test_secrets(void)
{
    static const char *const forms[] = {"json", "slash", "u", "b64", "trunc",
                                        "text"};
    static const char *const provs[] = {"m@sec1", "m@sec2", "m@sec3"};
    for (size_t pi = 0; pi < 3; pi++) {
        for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
            char content[128];
            /* An error body that echoes every request header (a 400: passed
             * to the client as the upstream's own answer). */
            snprintf(content, sizeof(content),
                     "fake:status=400;echo_headers=%s", forms[f]);
            struct e2e_resp r;
            T_EQ_INT(chat(provs[pi], content, 0, &r), 0);
            T_EQ_INT(r.status, 400);
            T_CHECK(!body_leaks(&r));
            /* The echo happened: the harmless headers are still there. */
            if (strcmp(forms[f], "text") && strcmp(forms[f], "u"))
                T_CHECK(r.body && strstr(r.body, "Content-Type") != NULL);
            e2e_resp_free(&r);
            /* The same headers as the answer's text, non-stream and
             * streamed (one chunk), and the Authorization value in a
             * forwarded x-ratelimit-echo header. */
            snprintf(content, sizeof(content),
                     "fake:echo_headers=%s;chunks=1", forms[f]);
            for (int stream = 0; stream < 2; stream++) {
                T_EQ_INT(chat(provs[pi], content, stream, &r), 0);
                T_EQ_INT(r.status, 200);
                T_CHECK(!body_leaks(&r));
                if (stream) {
                    char text[4096];
                    int done;
                    T_CHECK(sse_parse(r.body ? r.body : "", text,
                                      sizeof(text), &done) >= 3);
                    T_CHECK(done && !holds_secret(text, "stream text"));
                }
                e2e_resp_free(&r);
            }
        }
    }
    /* A retryable echo (503) fails over; the 502's message, the log and
     * the ledger never hold a secret either. */
    struct e2e_resp r;
    T_EQ_INT(chat("m@sec1", "fake:status=503;echo_headers=u", 0, &r), 0);
    T_EQ_INT(r.status, 502);
    T_CHECK(!body_leaks(&r));
    e2e_resp_free(&r);
    T_EQ_INT(chat("m@sec3", "fake:status=500;echo_headers=trunc", 1, &r), 0);
    T_CHECK(!body_leaks(&r));
    e2e_resp_free(&r);
}

/* The byte a hex escape at t stands for (%XX; \x73, \X6B or \u0073
 * behind any number of backslashes; 0x73), its length in *len; -1 for
 * none. */
static int
hex_escape(const char *t, size_t *len)
{
    size_t b = 0;
    while (t[b] == '\\')
        b++;
    unsigned v;
    if (t[0] == '%' && isxdigit((unsigned char)t[1]) &&
        isxdigit((unsigned char)t[2]) && sscanf(t + 1, "%2x", &v) == 1) {
        *len = 3;
        return (int)v;
    }
    if (b && (t[b] == 'x' || t[b] == 'X') && isxdigit((unsigned char)t[b + 1]) &&
        isxdigit((unsigned char)t[b + 2]) && sscanf(t + b + 1, "%2x", &v) == 1) {
        *len = b + 3;
        return (int)v;
    }
    if (b && t[b] == 'u' && t[b + 1] == '0' && t[b + 2] == '0' &&
        isxdigit((unsigned char)t[b + 3]) && isxdigit((unsigned char)t[b + 4]) &&
        sscanf(t + b + 3, "%2x", &v) == 1) {
        *len = b + 5;
        return (int)v;
    }
    if (t[0] == '0' && (t[1] == 'x' || t[1] == 'X') &&
        isxdigit((unsigned char)t[2]) && isxdigit((unsigned char)t[3]) &&
        sscanf(t + 2, "%2x", &v) == 1) {
        *len = 4;
        return (int)v;
    }
    return -1;
}

/* Does text hold 8 characters of a secret anywhere (not just its start),
 * or 16 digits of its hex, in the text as is or with its hex escapes
 * decoded (a C byte list's ", " between them dropped)?  What a secret
 * split across events may show is its first 7 characters. */
static int
holds_secret_part(const char *text, const char *where)
{
    if (!text)
        return 0;
    size_t n = strlen(text);
    char *dec = malloc(n + 1);
    if (!dec)
        return 1;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t el;
        int v = hex_escape(text + i, &el);
        if (v >= 0) {
            dec[o++] = (char)v;
            i += el - 1;
            size_t sep = text[i + 1] == ',' ? (text[i + 2] == ' ' ? 2 : 1) : 0;
            if (sep && text[i + 1 + sep] == '0' &&
                (text[i + 2 + sep] == 'x' || text[i + 2 + sep] == 'X'))
                i += sep;
        } else {
            dec[o++] = text[i];
        }
    }
    dec[o] = '\0';
    int hit = holds_secret(text, where) || holds_secret(dec, where);
    for (size_t i = 0; i < N_SECRETS && !hit; i++) {
        const char *sc = secrets[i];
        size_t sl = strlen(sc);
        for (size_t k = 0; k + 8 <= sl && !hit; k++) {
            char w[9], hl[17], hu[17];
            memcpy(w, sc + k, 8);
            w[8] = '\0';
            for (int b = 0; b < 8; b++) {
                snprintf(hl + 2 * b, 3, "%02x", (unsigned char)w[b]);
                snprintf(hu + 2 * b, 3, "%02X", (unsigned char)w[b]);
            }
            hit = strstr(text, w) || strstr(dec, w) || strstr(text, hl) ||
                  strstr(text, hu);
            if (hit)
                fprintf(stderr, "  secret %zu (at %zu) leaked in %s: %.300s\n",
                        i, k, where, text);
        }
    }
    free(dec);
    return hit;
}

/* The request headers echoed as a stream's text, in each form, cut into
 * pieces of a few characters, so every secret is split across several
 * events (openai kind: passthrough; anthropic kind: translated; and the
 * /v1/messages API over an openai kind: translated by the gateway).  No
 * part of a secret longer than its first 7 characters reaches the
 * client, in any form. */
static void
test_secrets_split(void)
{
    static const char *const forms[] = {"json", "slash", "u",    "hex",
                                        "HEX",  "url",   "b64",  "xesc",
                                        "clist", "utext"};
    static const char *const provs[] = {"m@sec1", "m@sec2", "m@sec3",
                                        "m@sec4"};
    static const int chunks[] = {37, 97};
    for (size_t pi = 0; pi < 4; pi++)
        for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++)
            for (size_t c = 0; c < 2; c++) {
                char content[128], where[96];
                snprintf(content, sizeof(content),
                         "fake:echo_headers=%s;chunks=%d", forms[f],
                         chunks[c]);
                snprintf(where, sizeof(where), "%s %s chunks=%d",
                         provs[pi], forms[f], chunks[c]);
                struct e2e_resp r;
                T_EQ_INT(chat(provs[pi], content, 1, &r), 0);
                T_EQ_INT(r.status, 200);
                char text[8192];
                int done = 0;
                T_CHECK(sse_parse(r.body ? r.body : "", text, sizeof(text),
                                  &done) > chunks[c] / 2);
                T_CHECK(done);
                /* the echo came, split (the names are never encoded) */
                T_CHECK(strstr(text, "Content-Type") != NULL);
                T_CHECK(!holds_secret_part(text, where));
                T_CHECK(!holds_secret_part(r.body, where));
                e2e_resp_free(&r);
            }
    /* /v1/messages over the openai kind: the gateway's translation of
     * chunks already masked. */
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
        char body[512], url[256];
        snprintf(body, sizeof(body),
                 "{\"model\":\"m@sec1\",\"max_tokens\":100,\"stream\":true,"
                 "\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"fake:echo_headers=%s;chunks=61\"}]}",
                 forms[f]);
        snprintf(url, sizeof(url), "%s/v1/messages", base);
        struct e2e_resp r;
        T_EQ_INT(e2e_http("POST", url, body, NULL, 60000, &r), 0);
        T_EQ_INT(r.status, 200);
        T_CHECK(r.body && strstr(r.body, "text_delta") != NULL);
        /* the deltas' text joined, decoded from their JSON */
        char text[8192] = "";
        for (const char *q = r.body ? r.body : ""; (q = strstr(q, "data: "));
             q++) {
            size_t l = strcspn(q + 6, "\r\n");
            json_t *o = json_loadb(q + 6, l, 0, NULL);
            const char *t = json_string_value(
                json_object_get(json_object_get(o, "delta"), "text"));
            if (t)
                snprintf(text + strlen(text), sizeof(text) - strlen(text),
                         "%s", t);
            json_decref(o);
        }
        T_CHECK(strstr(text, "Content-Type") != NULL);
        T_CHECK(!holds_secret_part(text, "messages text"));
        T_CHECK(!holds_secret_part(r.body, "messages body"));
        e2e_resp_free(&r);
    }
}

/* The gateway's log (its stderr, debug level) and the ledger. */
static void
check_logs_and_ledger(void)
{
    FILE *f = fopen(gw.log_path, "rb");
    T_CHECK(f != NULL);
    if (f) {
        static char log[8 << 20];
        size_t n = fread(log, 1, sizeof(log) - 1, f);
        log[n] = '\0';
        fclose(f);
        T_CHECK(n > 0);
        T_CHECK(!holds_secret(log, "log"));
        T_CHECK(!holds_secret_part(log, "log"));
        T_CHECK(strstr(log, "sec1") != NULL); /* it did log those requests */
    }
    sqlite3 *db = NULL;
    T_EQ_INT(sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READONLY, NULL),
             SQLITE_OK);
    sqlite3_stmt *st = NULL;
    int rows = 0;
    if (sqlite3_prepare_v2(db, "SELECT coalesce(error, '') FROM usage", -1,
                           &st, NULL) == SQLITE_OK)
        while (sqlite3_step(st) == SQLITE_ROW) {
            rows++;
            T_CHECK(!holds_secret((const char *)sqlite3_column_text(st, 0),
                                  "ledger"));
            T_CHECK(!holds_secret_part(
                (const char *)sqlite3_column_text(st, 0), "ledger"));
        }
    sqlite3_finalize(st);
    sqlite3_close(db);
    T_CHECK(rows > 50);
}

/* ------------------------------------------------------------------ */
/* Allowlists                                                           */

static int
cli_create(const char *models)
{
    char cmd[1024], dir_db[600];
    snprintf(dir_db, sizeof(dir_db), "%s.cli", dbpath);
    snprintf(cmd, sizeof(cmd), "%s keys create --name x --models '%s' --db %s"
                               " >/dev/null 2>&1",
             bin, models, dir_db);
    int s = system(cmd);
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

static void
test_empty_allowlist(void)
{
    char key[128];
    long st;
    T_EQ_INT(admin_create("{\"name\":\"e\",\"models\":[]}", key, sizeof(key),
                          &st),
             -1);
    T_EQ_INT(st, 400);
    T_CHECK(admin_create("{\"name\":\"f\",\"models\":[\"m@ok\"]}", key,
                         sizeof(key), &st) > 0);
    T_EQ_INT(cli_create(""), 2);
    T_EQ_INT(cli_create(","), 2);
    T_EQ_INT(cli_create("m@ok"), 0);
}

/* ------------------------------------------------------------------ */

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    setenv("LLMUX_LOG", "debug", 1);
    bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    if (e2e_start_fake(&fake) != 0 || start_gateway() != 0) {
        fprintf(stderr, "could not start the fake provider or llmux\n");
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    slow_start(); /* 25 s and 45 s in the background */
    T_RUN(test_rate_limited);
    T_RUN(test_provider_auth);
    T_RUN(test_sse);
    T_RUN(test_validation);
    T_RUN(test_budget);
    T_RUN(test_resend);
    T_RUN(test_forwarded_headers);
    T_RUN(test_secrets);
    T_RUN(test_secrets_split);
    T_RUN(test_empty_allowlist);
    T_RUN(test_default_timeouts);
    T_RUN(check_logs_and_ledger);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 20000), 0);
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
