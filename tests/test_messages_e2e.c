/*
 * POST /v1/messages end to end: the real llmux binary with keys required
 * (an llmux key sent as x-api-key, Anthropic's way), in front of
 * tests/fake_provider and the local engine (stories260K), an Anthropic
 * client's shapes checked here with libcurl.
 *
 *   openai kind   non-stream (Messages JSON, the x-llmux-* headers, exact
 *                 cost in the header and the ledger row with api
 *                 'messages'), stream (the event sequence a client
 *                 assembles, usage in message_delta), a tool use round trip
 *                 (tool_use, then tool_result -> an OpenAI tool message
 *                 upstream), failover to the next target, an upstream 429
 *                 (Anthropic shape), a stream broken after its first byte
 *                 (an error event, no message_stop), Anthropic-only
 *                 features refused with a 400 and nothing sent
 *   anthropic     passthrough: the client's body reaches the upstream
 *                 unchanged apart from the model (a thinking block's
 *                 signature included); the answer and the stream come back
 *                 untranslated apart from the model; cache writes and
 *                 reads priced exactly; an upstream error in its own shape
 *   gemini        non-stream and stream, thought parts as thinking blocks,
 *                 reasoning_tokens in the row
 *   local         non-stream and stream from stories260K (usage 'local');
 *                 count_tokens exact (the model's template and tokenizer)
 *   errors        401 (bad x-api-key), 400 (no max_tokens), 404, 405 in
 *                 Anthropic's shape; count_tokens; x-api-key on /v1/models
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/fake_stats.h"

#define ADMIN "adm-msgs-0123456789abcdef"
#define SECRET_R "relay-SECRET-msgs-0123456789abcdef"
#define SECRET_A "sk-ant-SECRET-msgs-0123456789abcdef"

static struct e2e_proc fake, gw;
static char base[128], fake_url[128], key[128];
static char *dbpath;

static char *
write_config(const char *db, const char *model)
{
    char cfg[4096];
    snprintf(
        cfg, sizeof(cfg),
        "{\n"
        " \"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
        " \"database\": \"%s\", \"require_keys\": true,\n"
        " \"admin_key\": \"" ADMIN "\",\n"
        " \"providers\": {\n"
        "  \"relay\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"api_key\": \"" SECRET_R "\",\n"
        "   \"models\": {\"gpt-4.1\": {}}},\n"
        "  \"broken\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/f/status=500/v1\", \"api_key\": \"" SECRET_R
        "\",\n"
        "   \"models\": {\"gpt-4.1\": {}}},\n"
        "  \"limited\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/f/status=429;retry_after=1/v1\", "
        "\"api_key\": \"" SECRET_R "\",\n"
        "   \"models\": {\"gpt-4.1-mini\": {}}},\n"
        "  \"claude\": {\"kind\": \"anthropic\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"" SECRET_A "\",\n"
        "   \"models\": {\"claude-sonnet-4.5\": {\"upstream\": "
        "\"claude-sonnet-4-5\"}}},\n"
        "  \"gem\": {\"kind\": \"gemini\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"AIza-SECRET-msgs-0123456789\",\n"
        "   \"models\": [\"gemini-2.5-flash\"]},\n"
        "  \"local\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
        "   \"threads\": 1, \"context\": 512, \"parallel\": 2,\n"
        "   \"models\": {\"local\": {\"input_per_mtok\": 0, "
        "\"output_per_mtok\": 0}}}\n"
        " },\n"
        " \"routes\": {\n"
        "  \"fo\": {\"policy\": \"priority\", \"targets\": "
        "[\"gpt-4.1@broken\", \"gpt-4.1@relay\"]}\n"
        " },\n"
        " \"failover\": {\"max_attempts\": 3, \"backoff_ms\": 1,\n"
        "  \"circuit_failures\": 100000}\n"
        "}\n",
        db, fake.port, fake.port, fake.port, fake.port, fake.port, model);
    return e2e_write_temp("msgs.json", cfg);
}

/* POSTs an Anthropic request: x-api-key (NULL: none), request id rid. */
static int
post(const char *path, const char *rid, const char *xkey, const char *body,
     struct e2e_resp *r)
{
    char url[256], hid[128], kh[256];
    snprintf(url, sizeof(url), "%s%s", base, path);
    snprintf(hid, sizeof(hid), "X-Request-Id: %s", rid);
    snprintf(kh, sizeof(kh), "x-api-key: %s", xkey ? xkey : "");
    const char *hdrs[] = {hid, "anthropic-version: 2023-06-01",
                          xkey ? kh : NULL, NULL};
    memset(r, 0, sizeof(*r));
    return e2e_http("POST", url, body, hdrs, 60000, r);
}

static int
msgs(const char *rid, const char *body, struct e2e_resp *r)
{
    return post("/v1/messages", rid, key, body, r);
}


/* 1 if the row of rid has api = 'messages'. */
static int
row_is_messages(const char *rid)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM usage WHERE request_id = '%s' AND api = "
             "'messages'",
             rid);
    return e2e_db_int(dbpath, sql) == 1;
}

/* What an Anthropic client assembles from a stream. */
struct msg_stream {
    char types[4096]; /* event types in order, space separated */
    int bad;          /* an event whose data is not JSON, or whose type is
                         not its data's "type" */
    char text[2048], thinking[512], tool_name[64], tool_id[96],
        tool_json[512];
    char stop_reason[32];
    char model[128];
    long long in, out, cache_read, cache_write;
};

static void
stream_parse(const char *body, struct msg_stream *m)
{
    memset(m, 0, sizeof(*m));
    m->in = m->out = -1;
    char ev[64] = "";
    for (const char *p = body; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        if (l > 7 && !strncmp(p, "event: ", 7)) {
            snprintf(ev, sizeof(ev), "%.*s", (int)(l - 7), p + 7);
            size_t n = strlen(m->types);
            snprintf(m->types + n, sizeof(m->types) - n, "%s%s", n ? " " : "",
                     ev);
        } else if (l > 6 && !strncmp(p, "data: ", 6)) {
            json_t *d = json_loadb(p + 6, l - 6, 0, NULL);
            const char *t = json_string_value(json_object_get(d, "type"));
            if (!t || strcmp(t, ev))
                m->bad = 1;
            const json_t *dl = json_object_get(d, "delta");
            const char *dt = json_string_value(json_object_get(dl, "type"));
            const json_t *cb = json_object_get(d, "content_block");
            const char *s;
            if (t && !strcmp(t, "message_start"))
                snprintf(m->model, sizeof(m->model), "%s",
                         json_string_value(json_object_get(
                             json_object_get(d, "message"), "model")));
            if (dt && !strcmp(dt, "text_delta") &&
                (s = json_string_value(json_object_get(dl, "text"))))
                strncat(m->text, s, sizeof(m->text) - strlen(m->text) - 1);
            if (dt && !strcmp(dt, "thinking_delta") &&
                (s = json_string_value(json_object_get(dl, "thinking"))))
                strncat(m->thinking, s,
                        sizeof(m->thinking) - strlen(m->thinking) - 1);
            if (dt && !strcmp(dt, "input_json_delta") &&
                (s = json_string_value(json_object_get(dl, "partial_json"))))
                strncat(m->tool_json, s,
                        sizeof(m->tool_json) - strlen(m->tool_json) - 1);
            if (cb && (s = json_string_value(json_object_get(cb, "name"))))
                snprintf(m->tool_name, sizeof(m->tool_name), "%s", s);
            if (cb && (s = json_string_value(json_object_get(cb, "id"))))
                snprintf(m->tool_id, sizeof(m->tool_id), "%s", s);
            if (t && !strcmp(t, "message_delta")) {
                s = json_string_value(json_object_get(dl, "stop_reason"));
                snprintf(m->stop_reason, sizeof(m->stop_reason), "%s",
                         s ? s : "");
                const json_t *u = json_object_get(d, "usage");
                m->out = json_integer_value(json_object_get(u,
                                                            "output_tokens"));
                if (json_object_get(u, "input_tokens"))
                    m->in = json_integer_value(
                        json_object_get(u, "input_tokens"));
                m->cache_read = json_integer_value(
                    json_object_get(u, "cache_read_input_tokens"));
                m->cache_write = json_integer_value(
                    json_object_get(u, "cache_creation_input_tokens"));
            }
            json_decref(d);
        }
        p = nl ? nl + 1 : NULL;
    }
}

/* The error of an Anthropic error body: type (or "") into t. */
static void
anth_error(const struct e2e_resp *r, char *t, size_t tl, char *m, size_t ml)
{
    json_t *j = json_loads(r->body ? r->body : "", 0, NULL);
    const json_t *e = json_object_get(j, "error");
    const char *ty = json_string_value(json_object_get(j, "type"));
    snprintf(t, tl, "%s",
             ty && !strcmp(ty, "error")
                 ? (json_string_value(json_object_get(e, "type"))
                        ? json_string_value(json_object_get(e, "type"))
                        : "")
                 : "");
    const char *msg = json_string_value(json_object_get(e, "message"));
    snprintf(m, ml, "%s", msg ? msg : "");
    json_decref(j);
}

/* ---- openai kind ---------------------------------------------------- */

static void
test_openai_plain(void)
{
    struct e2e_resp r;
    T_EQ_INT(msgs("m-1",
                  "{\"model\":\"gpt-4.1\",\"max_tokens\":64,\"system\":"
                  "\"Be brief.\",\"messages\":[{\"role\":\"user\",\"content\":"
                  "\"fake:prompt_tokens=1000;completion_tokens=20\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_STR(json_string_value(json_object_get(j, "type")), "message");
    T_EQ_STR(json_string_value(json_object_get(j, "role")), "assistant");
    T_EQ_STR(json_string_value(json_object_get(j, "model")), "gpt-4.1");
    T_EQ_STR(json_string_value(json_object_get(j, "id")), "msg_m-1");
    const json_t *c0 = json_array_get(json_object_get(j, "content"), 0);
    T_EQ_STR(json_string_value(json_object_get(c0, "type")), "text");
    T_EQ_STR(json_string_value(json_object_get(c0, "text")),
             "Hello from fake provider");
    T_EQ_STR(json_string_value(json_object_get(j, "stop_reason")), "end_turn");
    const json_t *u = json_object_get(j, "usage");
    T_EQ_INT(json_integer_value(json_object_get(u, "input_tokens")), 1000);
    T_EQ_INT(json_integer_value(json_object_get(u, "output_tokens")), 20);
    char h[128];
    /* 1000 x 2.00 + 20 x 8.00 per Mtok */
    T_EQ_STR(e2e_header(&r, "x-llmux-cost-usd", h, sizeof(h)), "0.00216");
    T_EQ_STR(e2e_header(&r, "x-llmux-provider", h, sizeof(h)), "relay");
    T_EQ_STR(e2e_header(&r, "x-llmux-model", h, sizeof(h)), "gpt-4.1");
    T_EQ_STR(e2e_header(&r, "x-llmux-route", h, sizeof(h)), "gpt-4.1");
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", h, sizeof(h)), "1");
    T_EQ_STR(e2e_header(&r, "x-request-id", h, sizeof(h)), "m-1");
    json_decref(j);
    e2e_resp_free(&r);
    T_CHECK(row_is_messages("m-1"));
    T_EQ_INT(e2e_row_int(dbpath, "m-1", "cost_pusd"), 2160000000LL);
    T_EQ_INT(e2e_row_int(dbpath, "m-1", "unpriced"), 0);
    T_EQ_INT(e2e_row_int(dbpath, "m-1", "key_id IS NOT NULL"), 1);
    /* What went upstream: OpenAI chat, the relay's key, not the client's. */
    json_t *s = fake_stats(fake_url);
    const json_t *last = json_object_get(s, "last");
    const json_t *b = json_object_get(last, "body");
    T_EQ_STR(json_string_value(json_object_get(last, "path")),
             "/v1/chat/completions");
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(last, "headers"), "authorization")),
             "Bearer " SECRET_R);
    T_CHECK(json_object_get(json_object_get(last, "headers"), "x-api-key") ==
            NULL);
    T_EQ_INT(json_integer_value(json_object_get(b, "max_tokens")), 64);
    const json_t *m0 = json_array_get(json_object_get(b, "messages"), 0);
    T_EQ_STR(json_string_value(json_object_get(m0, "role")), "system");
    T_EQ_STR(json_string_value(json_object_get(m0, "content")), "Be brief.");
    json_decref(s);
}

static void
test_openai_stream(void)
{
    struct e2e_resp r;
    T_EQ_INT(msgs("m-2",
                  "{\"model\":\"gpt-4.1\",\"max_tokens\":64,\"stream\":true,"
                  "\"messages\":[{\"role\":\"user\",\"content\":"
                  "\"fake:prompt_tokens=11\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    char h[128];
    T_CHECK(e2e_header(&r, "content-type", h, sizeof(h)) &&
            !strncmp(h, "text/event-stream", 17));
    struct msg_stream m;
    stream_parse(r.body ? r.body : "", &m);
    T_EQ_STR(m.types, "message_start ping content_block_start "
                      "content_block_delta content_block_delta "
                      "content_block_delta content_block_delta "
                      "content_block_stop message_delta message_stop");
    T_EQ_INT(m.bad, 0);
    T_EQ_STR(m.text, "Hello from fake provider");
    T_EQ_STR(m.stop_reason, "end_turn");
    T_EQ_INT(m.in, 11);
    T_EQ_INT(m.out, 4);
    T_EQ_STR(m.model, "gpt-4.1");
    e2e_resp_free(&r);
    T_CHECK(row_is_messages("m-2"));
    T_EQ_INT(e2e_row_int(dbpath, "m-2", "stream"), 1);
    T_EQ_INT(e2e_row_int(dbpath, "m-2", "prompt_tokens"), 11);
    T_EQ_INT(e2e_row_int(dbpath, "m-2", "cost_pusd"), 11 * 2000000LL + 4 * 8000000LL);
}

static void
test_openai_tools(void)
{
    const char *tools = "\"tools\":[{\"name\":\"get_weather\",\"description\":"
                        "\"Weather\",\"input_schema\":{\"type\":\"object\","
                        "\"properties\":{\"city\":{\"type\":\"string\"}}}}]";
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"model\":\"gpt-4.1\",\"max_tokens\":64,%s,\"messages\":["
             "{\"role\":\"user\",\"content\":\"fake:tool=get_weather\"}]}",
             tools);
    struct e2e_resp r;
    T_EQ_INT(msgs("m-3", body, &r), 0);
    T_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    const json_t *c0 = json_array_get(json_object_get(j, "content"), 0);
    T_EQ_STR(json_string_value(json_object_get(c0, "type")), "tool_use");
    T_EQ_STR(json_string_value(json_object_get(c0, "name")), "get_weather");
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(c0, "input"), "city")),
             "Paris");
    T_EQ_STR(json_string_value(json_object_get(j, "stop_reason")), "tool_use");
    char id[96];
    snprintf(id, sizeof(id), "%s",
             json_string_value(json_object_get(c0, "id"))
                 ? json_string_value(json_object_get(c0, "id"))
                 : "");
    json_decref(j);
    e2e_resp_free(&r);
    /* The same call streamed. */
    snprintf(body, sizeof(body),
             "{\"model\":\"gpt-4.1\",\"max_tokens\":64,\"stream\":true,%s,"
             "\"messages\":[{\"role\":\"user\",\"content\":"
             "\"fake:tool=get_weather\"}]}",
             tools);
    T_EQ_INT(msgs("m-4", body, &r), 0);
    struct msg_stream m;
    stream_parse(r.body ? r.body : "", &m);
    T_EQ_STR(m.types, "message_start ping content_block_start "
                      "content_block_delta content_block_delta "
                      "content_block_stop message_delta message_stop");
    T_EQ_STR(m.tool_name, "get_weather");
    T_EQ_STR(m.tool_json, "{\"city\":\"Paris\"}");
    T_EQ_STR(m.stop_reason, "tool_use");
    T_EQ_INT(m.bad, 0);
    e2e_resp_free(&r);
    /* The round trip: the call and its result go back. */
    snprintf(body, sizeof(body),
             "{\"model\":\"gpt-4.1\",\"max_tokens\":64,%s,\"messages\":["
             "{\"role\":\"user\",\"content\":\"fake:tool=get_weather\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
             "\"id\":\"%s\",\"name\":\"get_weather\",\"input\":{\"city\":"
             "\"Paris\"}}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
             "\"tool_use_id\":\"%s\",\"content\":\"sunny, 21 C\"}]}]}",
             tools, id, id);
    T_EQ_INT(msgs("m-5", body, &r), 0);
    T_EQ_INT(r.status, 200);
    j = json_loads(r.body ? r.body : "", 0, NULL);
    c0 = json_array_get(json_object_get(j, "content"), 0);
    T_EQ_STR(json_string_value(json_object_get(c0, "type")), "text");
    T_EQ_STR(json_string_value(json_object_get(j, "stop_reason")), "end_turn");
    json_decref(j);
    e2e_resp_free(&r);
    json_t *s = fake_stats(fake_url);
    const json_t *ms = json_object_get(json_object_get(json_object_get(s,
                                                                       "last"),
                                                       "body"),
                                       "messages");
    const json_t *a = json_array_get(ms, 1), *t = json_array_get(ms, 2);
    T_EQ_STR(json_string_value(json_object_get(
                 json_array_get(json_object_get(a, "tool_calls"), 0), "id")),
             id);
    T_EQ_STR(json_string_value(json_object_get(t, "role")), "tool");
    T_EQ_STR(json_string_value(json_object_get(t, "tool_call_id")), id);
    T_EQ_STR(json_string_value(json_object_get(t, "content")), "sunny, 21 C");
    json_decref(s);
}

static void
test_openai_failures(void)
{
    struct e2e_resp r;
    char t[64], m[512], h[64];
    /* Failover: the first target answers 500, the second serves. */
    T_EQ_INT(msgs("m-6",
                  "{\"model\":\"fo\",\"max_tokens\":8,\"messages\":[{\"role\":"
                  "\"user\",\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", h, sizeof(h)), "2");
    T_EQ_STR(e2e_header(&r, "x-llmux-provider", h, sizeof(h)), "relay");
    T_EQ_STR(e2e_header(&r, "x-llmux-route", h, sizeof(h)), "fo");
    e2e_resp_free(&r);
    T_EQ_INT(e2e_row_int(dbpath, "m-6", "attempts"), 2);
    /* Rate limited upstream on every attempt: 429, Anthropic's shape. */
    T_EQ_INT(msgs("m-7",
                  "{\"model\":\"gpt-4.1-mini\",\"max_tokens\":8,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 429);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "rate_limit_error");
    T_CHECK(e2e_header(&r, "retry-after", h, sizeof(h)) != NULL);
    T_CHECK(r.body && !strstr(r.body, SECRET_R));
    e2e_resp_free(&r);
    T_CHECK(row_is_messages("m-7"));
    T_EQ_INT(e2e_row_int(dbpath, "m-7", "status"), 429);
    /* A stream broken after its first events: an error event ends it. */
    T_EQ_INT(msgs("m-8",
                  "{\"model\":\"gpt-4.1\",\"max_tokens\":8,\"stream\":true,"
                  "\"messages\":[{\"role\":\"user\",\"content\":"
                  "\"fake:error_after=3\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    struct msg_stream s;
    stream_parse(r.body ? r.body : "", &s);
    size_t tl = strlen(s.types);
    T_CHECK(tl > 6 && !strcmp(s.types + tl - 6, " error"));
    T_CHECK(strstr(s.types, "message_stop") == NULL);
    T_CHECK(!strncmp(s.types, "message_start ping content_block_start", 38));
    e2e_resp_free(&r);
    /* Anthropic-only features on an OpenAI target: 400, nothing sent. */
    long long before = fake_stats_requests(fake_url);
    T_EQ_INT(msgs("m-9",
                  "{\"model\":\"gpt-4.1\",\"max_tokens\":4000,\"thinking\":{"
                  "\"type\":\"enabled\",\"budget_tokens\":2048},\"messages\":"
                  "[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 400);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "invalid_request_error");
    T_CHECK(strstr(m, "Anthropic-only features: thinking") != NULL);
    T_EQ_INT(fake_stats_requests(fake_url), before);
    e2e_resp_free(&r);
}

/* ---- anthropic kind: passthrough ---------------------------------------- */

static void
test_anthropic_passthrough(void)
{
    /* History with a thinking block and its signature, a temperature that
     * is not a round binary number, cache_control: all must arrive. */
    const char *body =
        "{\"model\":\"claude-sonnet-4.5\",\"max_tokens\":2000,"
        "\"temperature\":0.7,\"thinking\":{\"type\":\"enabled\","
        "\"budget_tokens\":1024},\"system\":[{\"type\":\"text\",\"text\":"
        "\"Be brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"first\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\","
        "\"thinking\":\"Let me think.\",\"signature\":"
        "\"EqQBCkYIARgCKkD+/0a1b2c3d4e5f==\"},{\"type\":\"text\",\"text\":"
        "\"ok\"}]},{\"role\":\"user\",\"content\":\"fake:cache_write=2000;"
        "cached=5000;prompt_tokens=7100;completion_tokens=300\"}]}";
    struct e2e_resp r;
    T_EQ_INT(msgs("a-1", body, &r), 0);
    T_EQ_INT(r.status, 200);
    char h[64];
    /* 100 x 3.00 + 5000 x 0.30 + 2000 x 3.75 + 300 x 15.00 per Mtok */
    T_EQ_STR(e2e_header(&r, "x-llmux-cost-usd", h, sizeof(h)), "0.0138");
    T_EQ_STR(e2e_header(&r, "x-llmux-provider", h, sizeof(h)), "claude");
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_STR(json_string_value(json_object_get(j, "model")),
             "claude-sonnet-4.5");
    T_CHECK(!strncmp(json_string_value(json_object_get(j, "id"))
                         ? json_string_value(json_object_get(j, "id"))
                         : "",
                     "msg_fake_", 9)); /* the upstream's own id */
    const json_t *u = json_object_get(j, "usage");
    T_EQ_INT(json_integer_value(json_object_get(u, "input_tokens")), 100);
    T_EQ_INT(json_integer_value(json_object_get(
                 u, "cache_creation_input_tokens")),
             2000);
    json_decref(j);
    e2e_resp_free(&r);
    T_CHECK(row_is_messages("a-1"));
    T_EQ_INT(e2e_row_int(dbpath, "a-1", "cost_pusd"), 13800000000LL);
    T_EQ_INT(e2e_row_int(dbpath, "a-1", "cache_write_tokens"), 2000);
    T_EQ_INT(e2e_row_int(dbpath, "a-1", "cached_tokens"), 5000);
    T_EQ_INT(e2e_row_int(dbpath, "a-1", "prompt_tokens"), 7100);
    /* Upstream got the client's body, only the model changed. */
    json_t *s = fake_stats(fake_url);
    const json_t *last = json_object_get(s, "last");
    json_t *want = json_loads(body, 0, NULL);
    json_object_set_new(want, "model", json_string("claude-sonnet-4-5"));
    T_CHECK(json_equal(json_object_get(last, "body"), want));
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(last, "headers"), "x-api-key")),
             SECRET_A);
    json_decref(want);
    json_decref(s);

    /* Streamed: the upstream's events, model replaced, message_stop last. */
    T_EQ_INT(msgs("a-2",
                  "{\"model\":\"claude-sonnet-4.5\",\"max_tokens\":100,"
                  "\"stream\":true,\"messages\":[{\"role\":\"user\","
                  "\"content\":\"fake:thoughts=3;cached=2\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    struct msg_stream m;
    stream_parse(r.body ? r.body : "", &m);
    T_EQ_INT(m.bad, 0);
    T_EQ_STR(m.model, "claude-sonnet-4.5");
    T_EQ_STR(m.text, "Hello from fake provider");
    T_CHECK(m.thinking[0] != '\0');
    T_CHECK(strstr(m.types, "content_block_delta") != NULL);
    size_t tl = strlen(m.types);
    T_CHECK(tl > 13 && !strcmp(m.types + tl - 13, " message_stop"));
    T_CHECK(!strncmp(m.types, "message_start", 13));
    /* signature_delta passed through as the upstream sent it */
    T_CHECK(r.body && strstr(r.body, "\"signature_delta\"") != NULL);
    e2e_resp_free(&r);
    T_CHECK(row_is_messages("a-2"));
    T_EQ_INT(e2e_row_int(dbpath, "a-2", "cached_tokens"), 2);

    /* The client's anthropic-beta goes with its body. */
    char url[256], kh[200];
    snprintf(url, sizeof(url), "%s/v1/messages", base);
    snprintf(kh, sizeof(kh), "x-api-key: %s", key);
    const char *bh[] = {kh, "anthropic-beta: interleaved-thinking-2025-05-14",
                        NULL};
    T_EQ_INT(e2e_http("POST", url,
                      "{\"model\":\"claude-sonnet-4.5\",\"max_tokens\":10,"
                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                      bh, 30000, &r),
             0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    s = fake_stats(fake_url);
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(json_object_get(s, "last"), "headers"),
                 "anthropic-beta")),
             "interleaved-thinking-2025-05-14");
    json_decref(s);

    /* An upstream 4xx in Anthropic's own shape reaches the client as is. */
    T_EQ_INT(msgs("a-3",
                  "{\"model\":\"claude-sonnet-4.5\",\"max_tokens\":10,"
                  "\"messages\":[{\"role\":\"user\",\"content\":"
                  "\"fake:status=400;message=bad thing\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 400);
    char t[64], mm[512];
    anth_error(&r, t, sizeof(t), mm, sizeof(mm));
    T_EQ_STR(t, "invalid_request_error");
    T_CHECK(strstr(mm, "bad thing") != NULL);
    T_CHECK(r.body && !strstr(r.body, SECRET_A));
    e2e_resp_free(&r);
}

/* ---- the local engine --------------------------------------------------- */

static void
test_local(void)
{
    struct e2e_resp r;
    T_EQ_INT(msgs("l-1",
                  "{\"model\":\"local\",\"max_tokens\":8,\"temperature\":0,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"Once upon "
                  "a time\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    const json_t *c0 = json_array_get(json_object_get(j, "content"), 0);
    T_EQ_STR(json_string_value(json_object_get(c0, "type")), "text");
    T_CHECK(json_string_length(json_object_get(c0, "text")) > 0);
    T_EQ_STR(json_string_value(json_object_get(j, "stop_reason")),
             "max_tokens");
    T_EQ_INT(json_integer_value(
                 json_object_get(json_object_get(j, "usage"), "output_tokens")),
             8);
    char text[1024];
    snprintf(text, sizeof(text), "%s",
             json_string_value(json_object_get(c0, "text"))
                 ? json_string_value(json_object_get(c0, "text"))
                 : "");
    json_decref(j);
    e2e_resp_free(&r);
    T_CHECK(row_is_messages("l-1"));
    T_EQ_INT(e2e_row_int(dbpath, "l-1", "completion_tokens"), 8);
    T_EQ_INT(e2e_db_int(dbpath, "SELECT COUNT(*) FROM usage WHERE request_id"
                                " = 'l-1' AND usage_source = 'local'"),
             1);
    /* Streamed, greedy: the same text in text_delta events. */
    T_EQ_INT(msgs("l-2",
                  "{\"model\":\"local\",\"max_tokens\":8,\"temperature\":0,"
                  "\"stream\":true,\"messages\":[{\"role\":\"user\","
                  "\"content\":\"Once upon a time\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    struct msg_stream m;
    stream_parse(r.body ? r.body : "", &m);
    T_EQ_INT(m.bad, 0);
    T_EQ_STR(m.text, text);
    T_EQ_STR(m.stop_reason, "max_tokens");
    T_EQ_INT(m.out, 8);
    T_CHECK(m.in > 0);
    e2e_resp_free(&r);
    T_CHECK(row_is_messages("l-2"));
    /* count_tokens on the local engine: exact, what the row counted. */
    T_EQ_INT(post("/v1/messages/count_tokens", "l-3", key,
                  "{\"model\":\"local\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"Once upon a time\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    char h[64];
    T_EQ_STR(e2e_header(&r, "x-llmux-token-count", h, sizeof(h)), "exact");
    json_t *cj = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_INT(json_integer_value(json_object_get(cj, "input_tokens")),
             e2e_row_int(dbpath, "l-1", "prompt_tokens"));
    json_decref(cj);
    e2e_resp_free(&r);
}

/* ---- gemini kind: translated like any other ---------------------------- */

static void
test_gemini(void)
{
    struct e2e_resp r;
    T_EQ_INT(msgs("g-1",
                  "{\"model\":\"gemini-2.5-flash\",\"max_tokens\":50,"
                  "\"messages\":[{\"role\":\"user\",\"content\":"
                  "\"fake:thoughts=3;prompt_tokens=10\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    const json_t *c = json_object_get(j, "content");
    T_EQ_STR(json_string_value(json_object_get(json_array_get(c, 0), "type")),
             "thinking");
    T_EQ_STR(json_string_value(json_object_get(json_array_get(c, 1), "type")),
             "text");
    T_EQ_STR(json_string_value(json_object_get(json_array_get(c, 1), "text")),
             "Hello from fake provider");
    json_decref(j);
    e2e_resp_free(&r);
    T_CHECK(row_is_messages("g-1"));
    T_EQ_INT(e2e_row_int(dbpath, "g-1", "reasoning_tokens"), 3);
    T_EQ_INT(msgs("g-2",
                  "{\"model\":\"gemini-2.5-flash\",\"max_tokens\":50,"
                  "\"stream\":true,\"messages\":[{\"role\":\"user\","
                  "\"content\":\"fake:thoughts=2\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    struct msg_stream m;
    stream_parse(r.body ? r.body : "", &m);
    T_EQ_INT(m.bad, 0);
    T_EQ_STR(m.text, "Hello from fake provider");
    T_CHECK(m.thinking[0] != '\0');
    T_EQ_STR(m.stop_reason, "end_turn");
    size_t tl = strlen(m.types);
    T_CHECK(tl > 13 && !strcmp(m.types + tl - 13, " message_stop"));
    e2e_resp_free(&r);
}

/* ---- llmux's own errors, count_tokens, keys ----------------------------- */

static void
test_errors_and_counting(void)
{
    struct e2e_resp r;
    char t[64], m[512], h[64];
    const char *ok = "{\"model\":\"gpt-4.1\",\"max_tokens\":8,\"messages\":[{"
                     "\"role\":\"user\",\"content\":\"hi\"}]}";
    T_EQ_INT(post("/v1/messages", "e-1",
                  "sk-llmux-wrongwrongwrongwrongwrongwrongwrongwrong", ok, &r),
             0);
    T_EQ_INT(r.status, 401);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "authentication_error");
    e2e_resp_free(&r);
    T_EQ_INT(post("/v1/messages", "e-2", NULL, ok, &r), 0);
    T_EQ_INT(r.status, 401);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "authentication_error");
    e2e_resp_free(&r);
    T_EQ_INT(msgs("e-3",
                  "{\"model\":\"gpt-4.1\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 400);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "invalid_request_error");
    T_CHECK(strstr(m, "max_tokens") != NULL);
    e2e_resp_free(&r);
    T_EQ_INT(msgs("e-4",
                  "{\"model\":\"no-such\",\"max_tokens\":8,\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 404);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "not_found_error");
    e2e_resp_free(&r);
    T_EQ_INT(msgs("e-5", "{not json", &r), 0);
    T_EQ_INT(r.status, 400);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "invalid_request_error");
    e2e_resp_free(&r);
    char url[256], kh[200];
    snprintf(url, sizeof(url), "%s/v1/messages", base);
    snprintf(kh, sizeof(kh), "x-api-key: %s", key);
    const char *hd[] = {kh, NULL};
    T_EQ_INT(e2e_http("GET", url, NULL, hd, 5000, &r), 0);
    T_EQ_INT(r.status, 405);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "invalid_request_error");
    e2e_resp_free(&r);

    /* count_tokens: the one estimate (12 bytes / 4 + 4 per message). */
    T_EQ_INT(post("/v1/messages/count_tokens", "c-1", key,
                  "{\"model\":\"gpt-4.1\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"Hello, world\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_INT(json_integer_value(json_object_get(j, "input_tokens")),
             12 / 4 + 4);
    T_EQ_STR(e2e_header(&r, "x-llmux-token-count", h, sizeof(h)), "estimate");
    json_decref(j);
    e2e_resp_free(&r);
    T_EQ_INT(post("/v1/messages/count_tokens", "c-2", key,
                  "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"x\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 404);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "not_found_error");
    e2e_resp_free(&r);
    T_EQ_INT(post("/v1/messages/count_tokens", "c-3", NULL,
                  "{\"model\":\"gpt-4.1\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"x\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 401);
    e2e_resp_free(&r);

    /* x-api-key is a key on every path that takes one. */
    snprintf(url, sizeof(url), "%s/v1/models", base);
    T_EQ_INT(e2e_http("GET", url, NULL, hd, 5000, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    snprintf(url, sizeof(url), "%s/v1/usage?since=1h", base);
    T_EQ_INT(e2e_http("GET", url, NULL, hd, 5000, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    /* and the chat path too */
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    T_EQ_INT(e2e_http("POST", url,
                      "{\"model\":\"gpt-4.1\",\"messages\":[{\"role\":"
                      "\"user\",\"content\":\"hi\"}]}",
                      hd, 10000, &r),
             0);
    T_EQ_INT(r.status, 200);
    T_EQ_INT(e2e_db_int(dbpath, "SELECT COUNT(*) FROM usage WHERE api ="
                                " 'chat'"),
             1);
    e2e_resp_free(&r);
}

/* An admin-made key (spec: the POST /admin/keys body) into out. */
static int
make_key_spec(const char *spec, char *out, size_t len)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/admin/keys", base);
    const char *hd[] = {"Authorization: Bearer " ADMIN, NULL};
    struct e2e_resp r;
    if (e2e_http("POST", url, spec, hd, 10000, &r) != 0)
        return -1;
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    const char *k = json_string_value(json_object_get(j, "key"));
    snprintf(out, len, "%s", k ? k : "");
    json_decref(j);
    e2e_resp_free(&r);
    return out[0] ? 0 : -1;
}

/* The key every test sends as x-api-key. */
static int
make_key(void)
{
    return make_key_spec("{\"name\":\"msgs\"}", key, sizeof(key));
}

/* Budgets and rate limits apply as for chat, in Anthropic's words. */
static void
test_limits(void)
{
    char k1[128], k2[128], t[64], m[512], h[64];
    T_EQ_INT(make_key_spec("{\"name\":\"rpm\",\"rpm\":1}", k1, sizeof(k1)),
             0);
    T_EQ_INT(make_key_spec("{\"name\":\"poor\",\"budget_usd\":0.000001}", k2,
                           sizeof(k2)),
             0);
    const char *ok = "{\"model\":\"gpt-4.1\",\"max_tokens\":8,\"messages\":[{"
                     "\"role\":\"user\",\"content\":\"hi\"}]}";
    struct e2e_resp r;
    T_EQ_INT(post("/v1/messages", "k-1", k1, ok, &r), 0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    T_EQ_INT(post("/v1/messages", "k-2", k1, ok, &r), 0);
    T_EQ_INT(r.status, 429);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "rate_limit_error");
    T_CHECK(e2e_header(&r, "retry-after", h, sizeof(h)) != NULL);
    e2e_resp_free(&r);
    /* The reservation (prompt bound + 8 output tokens) passes the budget. */
    T_EQ_INT(post("/v1/messages", "k-3", k2, ok, &r), 0);
    T_EQ_INT(r.status, 429);
    anth_error(&r, t, sizeof(t), m, sizeof(m));
    T_EQ_STR(t, "billing_error");
    e2e_resp_free(&r);
}

int
main(void)
{
    char model[512];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    FILE *mf = fopen(model, "rb");
    if (!mf) {
        fprintf(stderr, "test data missing: %s\n", model);
        return 1; /* missing test data fails, never skips */
    }
    fclose(mf);
    if (e2e_start_fake(&fake) != 0) {
        fprintf(stderr, "fake provider did not start\n");
        return 1;
    }
    snprintf(fake_url, sizeof(fake_url), "http://127.0.0.1:%d", fake.port);
    char *dir = e2e_temp_dir();
    char db[512];
    snprintf(db, sizeof(db), "%s/msgs.db", dir ? dir : "/tmp");
    dbpath = db;
    char *cfg = write_config(db, model);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", cfg, NULL};
    if (!cfg || e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000)) {
        fprintf(stderr, "llmux did not start\n");
        e2e_stop(&fake, 15, 5000);
        return 1;
    }
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    T_EQ_INT(make_key(), 0);
    T_RUN(test_openai_plain);
    T_RUN(test_openai_stream);
    T_RUN(test_openai_tools);
    T_RUN(test_openai_failures);
    T_RUN(test_anthropic_passthrough);
    T_RUN(test_local);
    T_RUN(test_gemini);
    T_RUN(test_errors_and_counting);
    T_RUN(test_limits);
    T_EQ_INT(e2e_stop(&gw, 15, 10000), 0);
    e2e_stop(&fake, 15, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(cfg);
    free(dir);
    return T_END();
}
