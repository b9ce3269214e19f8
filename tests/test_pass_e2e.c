/*
 * Same API in and out, byte for byte: the real llmux binary in front of
 * tests/fake_provider, every comparison on the exact bytes (the fake
 * records the request's bytes as "raw" and the answer's as "answer" in
 * /fake/stats).
 *
 *   /v1/messages -> anthropic kind
 *     request   the upstream receives the client's bytes (odd spacing,
 *               key order, escapes, 1.0, a thinking block's signature,
 *               redacted_thinking) with only the model's value replaced
 *     answer    the client receives the upstream's bytes (the fake's
 *               "odd" answer: escapes, 1e2, -0.0, unknown block and event
 *               types, thinking with signature, pings) with only the
 *               model's value replaced by the client's name, non-stream
 *               and stream; the ledger row has the usage with cache reads
 *               and writes, priced exactly
 *     failover  a 500 from the first anthropic target, the second serves
 *               the same bytes
 *     error     an error event after content reaches the client as the
 *               upstream wrote it, with no second error of llmux's own
 *     secrets   the provider's key echoed by the upstream is masked in
 *               the passed-through body and stream
 *   /v1/chat/completions, /v1/embeddings, /v1/completions -> openai kind:
 *               the request bytes spliced (only the model changes), the
 *               answer as the upstream sent it
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/fake_stats.h"

#define SECRET_A "sk-ant-SECRET-pass-0123456789abcdef"
#define SECRET_R "relay-SECRET-pass-0123456789abcdef"

static struct e2e_proc fake, gw;
static char base[128], fake_url[128];
static char *dbpath;

static char *
write_config(const char *db)
{
    char cfg[4096];
    snprintf(
        cfg, sizeof(cfg),
        "{\n"
        " \"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
        " \"database\": \"%s\", \"require_keys\": false,\n"
        " \"providers\": {\n"
        "  \"claude\": {\"kind\": \"anthropic\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"" SECRET_A "\",\n"
        "   \"models\": {\"claude-x\": {\"upstream\": \"claude-up-1\", "
        "\"input_per_mtok\": 3.00, \"cached_input_per_mtok\": 0.30, "
        "\"cache_write_per_mtok\": 3.75, \"output_per_mtok\": 15.00}}},\n"
        "  \"broken\": {\"kind\": \"anthropic\", \"base_url\": "
        "\"http://127.0.0.1:%d/f/status=500\", \"api_key\": \"" SECRET_A
        "\",\n"
        "   \"models\": {\"claude-x\": {\"upstream\": \"claude-up-1\", "
        "\"input_per_mtok\": 3.00, \"output_per_mtok\": 15.00}}},\n"
        "  \"relay\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"api_key\": \"" SECRET_R "\",\n"
        "   \"models\": {\"gpt\": {\"upstream\": \"gpt-up-1\", "
        "\"input_per_mtok\": 2, \"output_per_mtok\": 8},\n"
        "    \"emb\": {\"upstream\": \"emb-up-1\", \"input_per_mtok\": 0.02, "
        "\"output_per_mtok\": 0},\n"
        "    \"instruct\": {\"upstream\": \"instruct-up-1\", "
        "\"input_per_mtok\": 1.5, \"output_per_mtok\": 2}}}\n"
        " },\n"
        " \"routes\": {\n"
        "  \"pass\": {\"policy\": \"priority\", \"targets\": "
        "[\"claude-x@claude\"]},\n"
        "  \"fo\": {\"policy\": \"priority\", \"targets\": "
        "[\"claude-x@broken\", \"claude-x@claude\"]}\n"
        " },\n"
        " \"failover\": {\"max_attempts\": 3, \"backoff_ms\": 1,\n"
        "  \"circuit_failures\": 100000}\n"
        "}\n",
        db, fake.port, fake.port, fake.port);
    return e2e_write_temp("pass.json", cfg);
}

static int
post(const char *path, const char *rid, const char *body, struct e2e_resp *r)
{
    char url[256], hid[128];
    snprintf(url, sizeof(url), "%s%s", base, path);
    snprintf(hid, sizeof(hid), "X-Request-Id: %s", rid);
    const char *hdrs[] = {hid, "anthropic-version: 2023-06-01", NULL};
    memset(r, 0, sizeof(*r));
    return e2e_http("POST", url, body, hdrs, 60000, r);
}

/* s with every "from" replaced by "to" (malloc'd). */
static char *
replace_all(const char *s, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), n = 0;
    for (const char *p = s; (p = strstr(p, from)); p += fl)
        n++;
    char *out = malloc(strlen(s) + n * tl + 1);
    if (!out)
        return NULL;
    char *o = out;
    for (const char *p = s;;) {
        const char *q = strstr(p, from);
        if (!q) {
            strcpy(o, p);
            break;
        }
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, tl);
        o += tl;
        p = q + fl;
    }
    return out;
}

/* The fake's record of the last request: field ("raw" or "answer"),
 * malloc'd, or NULL. */
static char *
fake_last(const char *field)
{
    json_t *s = fake_stats(fake_url);
    const char *v =
        json_string_value(json_object_get(json_object_get(s, "last"), field));
    char *r = v ? strdup(v) : NULL;
    json_decref(s);
    return r;
}

/* Checks got == want byte for byte, printing where they part. */
static int
same_bytes(const char *what, const char *got, size_t got_len,
           const char *want)
{
    size_t wl = want ? strlen(want) : 0;
    if (got && want && got_len == wl && memcmp(got, want, wl) == 0)
        return 1;
    size_t i = 0;
    while (got && want && i < got_len && i < wl && got[i] == want[i])
        i++;
    fprintf(stderr,
            "%s: bytes differ at %zu (lengths %zu and %zu)\n  got:  %.80s\n"
            "  want: %.80s\n",
            what, i, got_len, wl, got ? got + i : "(none)",
            want ? want + i : "(none)");
    return 0;
}

/* A client body with the model value "pass" (or route) between prefix and
 * suffix: what re-serialising would change is all around it. */
static const char *pre =
    "{ \"max_tokens\" : 1000,\n\t\"model\":";
static const char *post_ =
    " ,\"temperature\":1.0,\"metadata\":{\"user_id\":\"caf\\u00e9 \\/ x\"},"
    "\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\","
    "\"cache_control\":{\"type\":\"ephemeral\"}}],\n"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi \\/ caf\\u00e9\"},"
    "{\"content\":[{\"type\":\"thinking\",\"thinking\":\"Let me\\u0020think."
    "\",\"signature\":\"EqQBCkYIARgCKkD+/0a1b2c3d4e5f==\"},{\"type\":"
    "\"redacted_thinking\",\"data\":\"RWFybHkgYmlyZA==\"},{\"type\":\"text\","
    "\"text\":\"ok\"}],\"role\":\"assistant\"},"
    "{\"role\":\"user\",\"content\":\"fake:odd;%s\"}]%s }\n";

static char *
client_body(const char *model_json, const char *directives, int stream)
{
    char tail[2048], *b;
    snprintf(tail, sizeof(tail), post_, directives,
             stream ? ",\"stream\":true" : "");
    size_t n = strlen(pre) + strlen(model_json) + strlen(tail) + 1;
    b = malloc(n);
    if (b)
        snprintf(b, n, "%s%s%s", pre, model_json, tail);
    return b;
}

#define USAGE_D                                                              \
    "cached=5000;cache_write=2000;prompt_tokens=7100;completion_tokens=300"

/* One /v1/messages request through route (its name is what the client
 * sees as "model"): both directions byte for byte; 1 when all held. */
static void
check_messages(const char *rid, const char *route, const char *directives,
               int stream, int attempts)
{
    char mj[64], upj[64] = "\"claude-up-1\"", cj[64];
    snprintf(mj, sizeof(mj), "\"%s\"", route);
    snprintf(cj, sizeof(cj), "\"%s\"", route);
    char *body = client_body(mj, directives, stream);
    char *want_up = client_body(upj, directives, stream);
    struct e2e_resp r;
    T_EQ_INT(post("/v1/messages", rid, body, &r), 0);
    T_EQ_INT(r.status, 200);
    char h[64];
    T_EQ_INT(atoi(e2e_header(&r, "x-llmux-attempts", h, sizeof(h))
                      ? h
                      : "0"),
             attempts);
    T_EQ_STR(e2e_header(&r, "x-llmux-model", h, sizeof(h)), "claude-x");
    char *raw = fake_last("raw");
    char *answer = fake_last("answer");
    /* request: the client's bytes, the model's value replaced */
    T_CHECK(same_bytes("request", raw, raw ? strlen(raw) : 0, want_up));
    /* answer: the upstream's bytes, its model value the client's name */
    T_CHECK(answer && strstr(answer, upj) != NULL);
    char *want_down = answer ? replace_all(answer, upj, cj) : NULL;
    T_CHECK(same_bytes("answer", r.body, r.body_len, want_down));
    /* It really is odd: a parse and dump would have changed it. */
    json_t *j = stream ? NULL : json_loadb(r.body, r.body_len, 0, NULL);
    char *dumped = j ? json_dumps(j, JSON_COMPACT) : NULL;
    T_CHECK(stream || (dumped && strcmp(dumped, r.body) != 0));
    T_CHECK(strstr(r.body ? r.body : "", "\"signature\":"
                                         "\"EqQBCkYIARgCKkD+/0a1b2c3d4e5f==\""));
    T_CHECK(strstr(r.body ? r.body : "", "future_block_v9") != NULL);
    free(dumped);
    json_decref(j);
    e2e_resp_free(&r);
    free(raw);
    free(answer);
    free(want_down);
    free(body);
    free(want_up);
    /* The ledger: the upstream's usage, cache classes included. */
    T_EQ_INT(e2e_row_int(dbpath, rid, "prompt_tokens"), 7100);
    T_EQ_INT(e2e_row_int(dbpath, rid, "cached_tokens"), 5000);
    T_EQ_INT(e2e_row_int(dbpath, rid, "cache_write_tokens"), 2000);
    T_EQ_INT(e2e_row_int(dbpath, rid, "completion_tokens"), 300);
    /* 100 x 3.00 + 5000 x 0.30 + 2000 x 3.75 + 300 x 15.00 per Mtok */
    T_EQ_INT(e2e_row_int(dbpath, rid, "cost_pusd"), 13800000000LL);
}

static void
test_messages_plain(void)
{
    check_messages("p-1", "pass", USAGE_D, 0, 1);
}

static void
test_messages_stream(void)
{
    check_messages("p-2", "pass", USAGE_D, 1, 1);
}

static void
test_messages_failover(void)
{
    check_messages("p-3", "fo", USAGE_D, 0, 2);
    check_messages("p-4", "fo", USAGE_D, 1, 2);
}

/* An error event after content: the upstream's own, once. */
static void
test_messages_error_event(void)
{
    char *body = client_body("\"pass\"", "error_after=5", 1);
    struct e2e_resp r;
    T_EQ_INT(post("/v1/messages", "p-5", body, &r), 0);
    T_EQ_INT(r.status, 200);
    char *answer = fake_last("answer");
    T_CHECK(answer && strstr(answer, "overloaded_error") != NULL);
    char *want = answer ? replace_all(answer, "\"claude-up-1\"", "\"pass\"")
                        : NULL;
    T_CHECK(same_bytes("error stream", r.body, r.body_len, want));
    const char *first = r.body ? strstr(r.body, "event: error") : NULL;
    T_CHECK(first && !strstr(first + 1, "event: error"));
    T_CHECK(r.body && !strstr(r.body, "message_stop"));
    e2e_resp_free(&r);
    free(answer);
    free(want);
    free(body);
    T_CHECK(e2e_row_int(dbpath, "p-5", "status") >= 500);
}

/* The upstream echoes the request headers (x-api-key among them) in its
 * text: masked in the bytes passed on, stream or not. */
static void
test_messages_secret(void)
{
    for (int stream = 0; stream < 2; stream++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"model\":\"pass\",\"max_tokens\":50,%s\"messages\":[{"
                 "\"role\":\"user\",\"content\":\"fake:echo_headers\"}]}",
                 stream ? "\"stream\":true," : "");
        struct e2e_resp r;
        T_EQ_INT(post("/v1/messages", stream ? "p-7" : "p-6", body, &r), 0);
        T_EQ_INT(r.status, 200);
        char *answer = fake_last("answer");
        T_CHECK(answer && strstr(answer, SECRET_A) != NULL); /* it was sent */
        T_CHECK(r.body && strstr(r.body, "x-api-key") != NULL);
        T_CHECK(r.body && !strstr(r.body, SECRET_A));
        e2e_resp_free(&r);
        free(answer);
    }
}

/* The openai kind for the same API: request bytes spliced, answer as
 * sent. */
static void
check_openai(const char *path, const char *rid, const char *pre_m,
             const char *model, const char *up, const char *post_m)
{
    char body[2048], want[2048], upj[64];
    snprintf(body, sizeof(body), "%s\"%s\"%s", pre_m, model, post_m);
    snprintf(want, sizeof(want), "%s\"%s\"%s", pre_m, up, post_m);
    snprintf(upj, sizeof(upj), "\"%s\"", up);
    struct e2e_resp r;
    T_EQ_INT(post(path, rid, body, &r), 0);
    T_EQ_INT(r.status, 200);
    char *raw = fake_last("raw");
    char *answer = fake_last("answer");
    T_CHECK(same_bytes(path, raw, raw ? strlen(raw) : 0, want));
    T_CHECK(same_bytes(path, r.body, r.body_len, answer));
    e2e_resp_free(&r);
    free(raw);
    free(answer);
    T_CHECK(e2e_row_int(dbpath, rid, "prompt_tokens") > 0);
}

static void
test_openai_same_api(void)
{
    check_openai("/v1/chat/completions", "o-1",
                 "{ \"messages\" : [{\"role\":\"user\",\"content\":"
                 "\"caf\\u00e9 \\/ 1.0\"}],\n \"temperature\":1.0, "
                 "\"model\":",
                 "gpt", "gpt-up-1", " , \"max_tokens\" : 10 }");
    /* an escaped key: pv_chat_parse's fast path declines, the bytes
     * still pass */
    check_openai("/v1/chat/completions", "o-4",
                 "{ \"m\\u0065ssages\" : [{\"role\":\"user\",\"content\":"
                 "\"caf\\u00e9\"}],\n \"model\":",
                 "gpt", "gpt-up-1", " , \"stream\" : false }");
    check_openai("/v1/embeddings", "o-2",
                 "{ \"input\" : [\"caf\\u00e9\", \"b \\/ c\"],\n\t"
                 "\"model\":",
                 "emb", "emb-up-1",
                 " , \"encoding_format\":\"float\", \"dimensions\": 8 }");
    check_openai("/v1/completions", "o-3",
                 "{ \"prompt\" : \"caf\\u00e9 \\/\",\n \"temperature\":1.0, "
                 "\"model\":",
                 "instruct", "instruct-up-1", " , \"max_tokens\" : 5 }");
}

int
main(void)
{
    if (e2e_start_fake(&fake) != 0) {
        fprintf(stderr, "fake provider did not start\n");
        return 1;
    }
    snprintf(fake_url, sizeof(fake_url), "http://127.0.0.1:%d", fake.port);
    char *dir = e2e_temp_dir();
    char db[512];
    snprintf(db, sizeof(db), "%s/pass.db", dir ? dir : "/tmp");
    dbpath = db;
    char *cfg = write_config(db);
    if (e2e_start_llmux(&gw, cfg, 30000) != 0) {
        fprintf(stderr, "llmux did not start\n");
        e2e_stop(&fake, 15, 5000);
        return 1;
    }
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    T_RUN(test_messages_plain);
    T_RUN(test_messages_stream);
    T_RUN(test_messages_failover);
    T_RUN(test_messages_error_event);
    T_RUN(test_messages_secret);
    T_RUN(test_openai_same_api);
    T_EQ_INT(e2e_stop(&gw, 15, 10000), 0);
    e2e_stop(&fake, 15, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(cfg);
    free(dir);
    return T_END();
}
