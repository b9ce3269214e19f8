/*
 * The native provider kinds end to end: the real llmux binary in front of
 * tests/fake_provider speaking Anthropic Messages (/v1/messages) and
 * Gemini generateContent / streamGenerateContent, an OpenAI client on the
 * other side (libcurl here, the OpenAI chat shapes checked exactly).
 *
 *   anthropic  non-stream (usage with cache writes and reads, the exact
 *              cost in the header and the ledger row; what reached the
 *              upstream: x-api-key, anthropic-version, translated body,
 *              the max_tokens default); stream with text (include_usage)
 *              and with a tool call; a tool round trip the fake validates
 *              as the API does; errors 429 (passed on, OpenAI shape), 400
 *              (passed on, scrubbed of the key), 401 (provider fault),
 *              529 (retried on the next target); an error event before
 *              any content (no partial stream) and after some (llmux's
 *              error event ends the stream); an unsupported parameter
 *              (400 naming it, nothing sent upstream)
 *   gemini     non-stream with cached and thinking tokens (cost exact),
 *              stream with text and with a tool call, a stream cut before
 *              its finishReason, 429, 403, a refused parameter
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/fake_stats.h"

#define SECRET_A "sk-ant-SECRET-native-0123456789abcdef"
#define SECRET_G "AIza-SECRET-native-0123456789abcdef"
#define ADMIN "adm-native-0123456789abcdef"

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
        " \"admin_key\": \"" ADMIN "\",\n"
        " \"providers\": {\n"
        "  \"anth\": {\"kind\": \"anthropic\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"" SECRET_A "\",\n"
        "   \"timeout_ms\": 20000, \"connect_timeout_ms\": 2000,\n"
        "   \"models\": {\"claude-sonnet-4.5\": {\"upstream\": "
        "\"claude-sonnet-4-5\"}}},\n"
        "  \"anth529\": {\"kind\": \"anthropic\", \"base_url\": "
        "\"http://127.0.0.1:%d/f/status=529/v1\", \"api_key\": \"" SECRET_A
        "\",\n"
        "   \"models\": {\"claude-sonnet-4.5\": {\"upstream\": "
        "\"claude-sonnet-4-5\"}}},\n"
        "  \"anth401\": {\"kind\": \"anthropic\", \"base_url\": "
        "\"http://127.0.0.1:%d/f/status=401\", \"api_key\": \"" SECRET_A
        "\",\n"
        "   \"models\": [\"claude-sonnet-4.5\"]},\n"
        "  \"gem\": {\"kind\": \"gemini\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"" SECRET_G "\",\n"
        "   \"models\": [\"gemini-2.5-flash\"]}\n"
        " },\n"
        " \"routes\": {\n"
        "  \"claude\": {\"policy\": \"priority\", \"targets\": "
        "[\"claude-sonnet-4.5@anth\"]},\n"
        "  \"overloaded\": {\"policy\": \"priority\", \"targets\": "
        "[\"claude-sonnet-4.5@anth529\", \"claude-sonnet-4.5@anth\"]},\n"
        "  \"badkey\": {\"policy\": \"priority\", \"targets\": "
        "[\"claude-sonnet-4.5@anth401\"]},\n"
        "  \"flash\": {\"policy\": \"priority\", \"targets\": "
        "[\"gemini-2.5-flash@gem\"]}\n"
        " },\n"
        " \"failover\": {\"max_attempts\": 3, \"backoff_ms\": 1,\n"
        "  \"circuit_failures\": 100000}\n"
        "}\n",
        db, fake.port, fake.port, fake.port, fake.port);
    return e2e_write_temp("native.json", cfg);
}

/* POSTs body to path with request id rid and, when given, a bearer. */
static int
post(const char *path, const char *rid, const char *bearer, const char *body,
     struct e2e_resp *r)
{
    char url[256], hid[128], az[256];
    snprintf(url, sizeof(url), "%s%s", base, path);
    snprintf(hid, sizeof(hid), "X-Request-Id: %s", rid);
    snprintf(az, sizeof(az), "Authorization: Bearer %s", bearer ? bearer : "");
    const char *hdrs[] = {hid, bearer ? az : NULL, NULL};
    memset(r, 0, sizeof(*r));
    return e2e_http("POST", url, body, hdrs, 30000, r);
}

static int
chat(const char *rid, const char *body, struct e2e_resp *r)
{
    return post("/v1/chat/completions", rid, NULL, body, r);
}

static json_t *
fake_last(void)
{
    return fake_stats(fake_url);
}

static long long
fake_requests(void)
{
    return fake_stats_requests(fake_url);
}

static long long
row_int(const char *rid, const char *col)
{
    return e2e_row_int(dbpath, rid, col);
}

/* The stream's events: every "data: " payload in order. */
struct events {
    json_t *chunks; /* parsed JSON chunks (not [DONE]) */
    int done;       /* saw [DONE] last */
    int after_done; /* anything after [DONE] */
};

static void
events_parse(const char *body, struct events *e)
{
    e->chunks = json_array();
    e->done = e->after_done = 0;
    const char *p = body;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        if (l > 6 && !strncmp(p, "data: ", 6)) {
            if (e->done)
                e->after_done = 1;
            if (l - 6 == 6 && !strncmp(p + 6, "[DONE]", 6))
                e->done = 1;
            else
                json_array_append_new(e->chunks, json_loadb(p + 6, l - 6, 0,
                                                            NULL));
        }
        p = nl ? nl + 1 : NULL;
    }
}

/* The content, tool call arguments and finish reason a client assembles
 * from chunks. */
struct assembled {
    char content[1024];
    char tool_id[128], tool_name[128], tool_args[512];
    char finish[32];
    int n_tool_calls;
    const json_t *usage;
    int all_chunks;   /* every chunk has object chat.completion.chunk */
    int stream_error; /* llmux's error event (code stream_interrupted) */
};

static void
assemble(const struct events *e, struct assembled *a)
{
    memset(a, 0, sizeof(*a));
    a->all_chunks = 1;
    size_t i;
    const json_t *c;
    json_array_foreach(e->chunks, i, c) {
        const char *obj = json_string_value(json_object_get(c, "object"));
        const char *code = json_string_value(
            json_object_get(json_object_get(c, "error"), "code"));
        if (code && !strcmp(code, "stream_interrupted"))
            a->stream_error = 1;
        if (!obj || strcmp(obj, "chat.completion.chunk"))
            a->all_chunks = 0;
        if (json_object_get(c, "usage"))
            a->usage = json_object_get(c, "usage");
        const json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
        const json_t *d = json_object_get(ch, "delta");
        const char *t = json_string_value(json_object_get(d, "content"));
        if (t)
            strncat(a->content, t, sizeof(a->content) - strlen(a->content) - 1);
        const json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        if (tc) {
            const json_t *fn = json_object_get(tc, "function");
            const char *id = json_string_value(json_object_get(tc, "id"));
            const char *nm = json_string_value(json_object_get(fn, "name"));
            const char *ar = json_string_value(json_object_get(fn,
                                                               "arguments"));
            if (id) {
                a->n_tool_calls++;
                snprintf(a->tool_id, sizeof(a->tool_id), "%s", id);
            }
            if (nm)
                snprintf(a->tool_name, sizeof(a->tool_name), "%s", nm);
            if (ar)
                strncat(a->tool_args, ar,
                        sizeof(a->tool_args) - strlen(a->tool_args) - 1);
        }
        const char *f = json_string_value(json_object_get(ch,
                                                          "finish_reason"));
        if (f)
            snprintf(a->finish, sizeof(a->finish), "%s", f);
    }
}

static long long
ji(const json_t *o, const char *a, const char *b)
{
    const json_t *x = json_object_get(o, a);
    if (b)
        x = json_object_get(x, b);
    return json_is_integer(x) ? (long long)json_integer_value(x) : -1;
}

static const char *
err_message(const struct e2e_resp *r)
{
    static char buf[512];
    json_t *j = json_loads(r->body ? r->body : "", 0, NULL);
    const char *m = json_string_value(
        json_object_get(json_object_get(j, "error"), "message"));
    snprintf(buf, sizeof(buf), "%s", m ? m : "");
    json_decref(j);
    return buf;
}

/* ---- anthropic ------------------------------------------------------ */

static const char *tools_json =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"description\":\"Weather of a city\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";

static void
test_anth_plain(void)
{
    struct e2e_resp r;
    T_EQ_INT(chat("an-1",
                  "{\"model\":\"claude\",\"messages\":["
                  "{\"role\":\"system\",\"content\":\"Be brief.\"},"
                  "{\"role\":\"user\",\"content\":\"fake:cache_write=2000;"
                  "cached=5000;prompt_tokens=7100;completion_tokens=300\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    const json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    T_EQ_STR(json_string_value(json_object_get(j, "object")),
             "chat.completion");
    T_EQ_STR(json_string_value(json_object_get(json_object_get(ch, "message"),
                                               "content")),
             "Hello from fake provider");
    T_EQ_STR(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    const json_t *u = json_object_get(j, "usage");
    T_EQ_INT(ji(u, "prompt_tokens", NULL), 7100);
    T_EQ_INT(ji(u, "completion_tokens", NULL), 300);
    T_EQ_INT(ji(u, "prompt_tokens_details", "cached_tokens"), 5000);
    T_EQ_INT(ji(u, "prompt_tokens_details", "cache_write_tokens"), 2000);
    /* 100 x 3.00 + 5000 x 0.30 + 2000 x 3.75 + 300 x 15.00 per Mtok. */
    char h[64];
    T_EQ_STR(e2e_header(&r, "x-llmux-cost-usd", h, sizeof(h)), "0.0138");
    json_decref(j);
    e2e_resp_free(&r);
    T_EQ_INT(row_int("an-1", "cost_pusd"), 13800000000LL);
    T_EQ_INT(row_int("an-1", "prompt_tokens"), 7100);
    T_EQ_INT(row_int("an-1", "cached_tokens"), 5000);
    T_EQ_INT(row_int("an-1", "completion_tokens"), 300);

    /* What reached the upstream. */
    json_t *s = fake_last();
    const json_t *last = json_object_get(s, "last");
    const json_t *hd = json_object_get(last, "headers");
    T_EQ_STR(json_string_value(json_object_get(last, "path")), "/v1/messages");
    T_EQ_STR(json_string_value(json_object_get(hd, "x-api-key")), SECRET_A);
    T_EQ_STR(json_string_value(json_object_get(hd, "anthropic-version")),
             "2023-06-01");
    T_CHECK(json_object_get(hd, "authorization") == NULL);
    const json_t *b = json_object_get(last, "body");
    T_EQ_STR(json_string_value(json_object_get(b, "model")),
             "claude-sonnet-4-5");
    T_EQ_INT(ji(b, "max_tokens", NULL), 4096);
    T_EQ_STR(json_string_value(json_object_get(
                 json_array_get(json_object_get(b, "system"), 0), "text")),
             "Be brief.");
    T_EQ_INT(json_array_size(json_object_get(b, "messages")), 1);
    json_decref(s);
}

static void
test_anth_stream(void)
{
    struct e2e_resp r;
    T_EQ_INT(chat("an-2",
                  "{\"model\":\"claude\",\"stream\":true,\"stream_options\":"
                  "{\"include_usage\":true},\"max_tokens\":50,\"messages\":"
                  "[{\"role\":\"user\",\"content\":\"fake:cached=3;"
                  "cache_write=4;prompt_tokens=20\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    struct events e;
    events_parse(r.body ? r.body : "", &e);
    struct assembled a;
    assemble(&e, &a);
    T_EQ_STR(a.content, "Hello from fake provider");
    T_EQ_STR(a.finish, "stop");
    T_CHECK(a.all_chunks);
    T_CHECK(e.done && !e.after_done && !a.stream_error);
    T_EQ_INT(a.n_tool_calls, 0);
    T_EQ_INT(ji(a.usage, "prompt_tokens", NULL), 20);
    T_EQ_INT(ji(a.usage, "completion_tokens", NULL), 4);
    T_EQ_INT(ji(a.usage, "prompt_tokens_details", "cached_tokens"), 3);
    T_EQ_INT(ji(a.usage, "prompt_tokens_details", "cache_write_tokens"), 4);
    json_decref(e.chunks);
    e2e_resp_free(&r);
    /* 13 x 3.00 + 3 x 0.30 + 4 x 3.75 + 4 x 15.00 per Mtok (pUSD). */
    T_EQ_INT(row_int("an-2", "cost_pusd"),
             13LL * 3000000 + 3LL * 300000 + 4LL * 3750000 + 4LL * 15000000);
    T_EQ_INT(row_int("an-2", "stream"), 1);

    /* Without include_usage the client gets no usage chunk, but the row
     * still has the upstream's counts. */
    T_EQ_INT(chat("an-3",
                  "{\"model\":\"claude\",\"stream\":true,\"messages\":"
                  "[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  &r),
             0);
    events_parse(r.body ? r.body : "", &e);
    assemble(&e, &a);
    T_CHECK(a.usage == NULL);
    T_CHECK(e.done);
    T_EQ_INT(row_int("an-3", "prompt_tokens"), 9);
    T_EQ_INT(row_int("an-3", "completion_tokens"), 4);
    json_decref(e.chunks);
    e2e_resp_free(&r);
}

static void
test_anth_tools(void)
{
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"model\":\"claude\",\"stream\":true,\"tools\":%s,"
             "\"tool_choice\":\"auto\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"fake:tool=get_weather;tool_args={\\\"city\\\":"
             "\\\"Oslo\\\"}\"}]}",
             tools_json);
    struct e2e_resp r;
    T_EQ_INT(chat("an-4", body, &r), 0);
    T_EQ_INT(r.status, 200);
    struct events e;
    events_parse(r.body ? r.body : "", &e);
    struct assembled a;
    assemble(&e, &a);
    T_EQ_INT(a.n_tool_calls, 1);
    T_EQ_STR(a.tool_name, "get_weather");
    T_EQ_STR(a.tool_args, "{\"city\":\"Oslo\"}");
    T_CHECK(!strncmp(a.tool_id, "toolu_fake_", 11));
    T_EQ_STR(a.finish, "tool_calls");
    T_CHECK(e.done);
    json_decref(e.chunks);
    e2e_resp_free(&r);
    json_t *s = fake_last();
    const json_t *b = json_object_get(json_object_get(s, "last"), "body");
    const json_t *t0 = json_array_get(json_object_get(b, "tools"), 0);
    T_EQ_STR(json_string_value(json_object_get(t0, "name")), "get_weather");
    T_CHECK(json_is_object(json_object_get(t0, "input_schema")));
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(b, "tool_choice"), "type")),
             "auto");
    json_decref(s);

    /* Non-stream tool call. */
    snprintf(body, sizeof(body),
             "{\"model\":\"claude\",\"tools\":%s,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"fake:tool=get_weather\"}]}",
             tools_json);
    T_EQ_INT(chat("an-5", body, &r), 0);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    const json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    const json_t *tc = json_array_get(
        json_object_get(json_object_get(ch, "message"), "tool_calls"), 0);
    T_EQ_STR(json_string_value(json_object_get(ch, "finish_reason")),
             "tool_calls");
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(tc, "function"), "arguments")),
             "{\"city\":\"Paris\"}");
    char tid[128];
    snprintf(tid, sizeof(tid), "%s",
             json_string_value(json_object_get(tc, "id"))
                 ? json_string_value(json_object_get(tc, "id"))
                 : "");
    json_decref(j);
    e2e_resp_free(&r);

    /* The round trip: the tool result goes back; the fake refuses a
     * tool_result whose tool_use is not in the turn before, and turns
     * that do not alternate. */
    snprintf(body, sizeof(body),
             "{\"model\":\"claude\",\"tools\":%s,\"messages\":["
             "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{"
             "\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":"
             "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}"
             "]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"%s\",\"content\":\"18C\"},"
             "{\"role\":\"user\",\"content\":\"fake:content=It is 18C.\"}]}",
             tools_json, tid, tid);
    T_EQ_INT(chat("an-6", body, &r), 0);
    T_EQ_INT(r.status, 200);
    if (r.status != 200)
        fprintf(stderr, "  round trip: %s\n", r.body ? r.body : "");
    j = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(json_array_get(json_object_get(j, "choices"),
                                                0),
                                 "message"),
                 "content")),
             "It is 18C.");
    json_decref(j);
    e2e_resp_free(&r);
    s = fake_last();
    b = json_object_get(json_object_get(s, "last"), "body");
    const json_t *m2 = json_array_get(json_object_get(b, "messages"), 2);
    T_EQ_STR(json_string_value(json_object_get(m2, "role")), "user");
    T_EQ_STR(json_string_value(json_object_get(
                 json_array_get(json_object_get(m2, "content"), 0), "type")),
             "tool_result");
    json_decref(s);
}

static void
test_anth_errors(void)
{
    struct e2e_resp r;
    /* 400: passed on as the upstream said it, the key masked. */
    T_EQ_INT(chat("an-e2",
                  "{\"model\":\"claude\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"fake:status=400;echo_headers\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 400);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_STR(json_string_value(json_object_get(json_object_get(j, "error"),
                                               "type")),
             "invalid_request_error");
    T_CHECK(strstr(err_message(&r), "x-api-key") != NULL);
    T_CHECK(r.body && !strstr(r.body, SECRET_A) &&
            !strstr(r.body, "sk-ant-SECRET"));
    json_decref(j);
    e2e_resp_free(&r);

    char h[64];
    /* 401: the provider's fault, never the client's: 502. */
    T_EQ_INT(chat("an-e3",
                  "{\"model\":\"badkey\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 502);
    T_CHECK(strstr(err_message(&r), "401") != NULL);
    e2e_resp_free(&r);

    /* 529 overloaded: retried on the next target. */
    T_EQ_INT(chat("an-e4",
                  "{\"model\":\"overloaded\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", h, sizeof(h)), "2");
    T_EQ_STR(e2e_header(&r, "x-llmux-provider", h, sizeof(h)), "anth");
    e2e_resp_free(&r);
    T_EQ_INT(row_int("an-e4", "attempts"), 2);

    /* An error event right after message_start: nothing reached the
     * client, so it gets a clean error, not a torn stream. */
    T_EQ_INT(chat("an-e5",
                  "{\"model\":\"claude\",\"stream\":true,\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"fake:error_after=1\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 502);
    T_CHECK(strstr(err_message(&r), "claude-sonnet-4.5@anth") != NULL);
    e2e_resp_free(&r);

    /* An error event after content reached the client: no failover once
     * bytes went out; the client's stream ends with llmux's error event,
     * and the row says 502. */
    T_EQ_INT(chat("an-e7",
                  "{\"model\":\"claude\",\"stream\":true,\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"fake:error_after=5\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    struct events e;
    events_parse(r.body ? r.body : "", &e);
    struct assembled a;
    assemble(&e, &a);
    T_CHECK(a.stream_error);
    T_CHECK(a.content[0] != '\0');
    T_CHECK(strcmp(a.content, "Hello from fake provider") != 0);
    json_decref(e.chunks);
    e2e_resp_free(&r);
    T_EQ_INT(row_int("an-e7", "status"), 502);

    /* An unsupported parameter: 400 naming it, nothing sent upstream. */
    long long before = fake_requests();
    T_EQ_INT(chat("an-e6",
                  "{\"model\":\"claude\",\"logprobs\":true,\"seed\":3,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 400);
    T_CHECK(strstr(err_message(&r), "logprobs") &&
            strstr(err_message(&r), "seed") &&
            strstr(err_message(&r), "anthropic"));
    e2e_resp_free(&r);
    T_EQ_INT(fake_requests(), before);
    T_EQ_INT(row_int("an-e6", "status"), 400);

    /* 429 (last: it puts the provider in its cooldown): retryable, but
     * with one target the client gets the 429 in OpenAI shape with the
     * upstream's message and Retry-After. */
    T_EQ_INT(chat("an-e1",
                  "{\"model\":\"claude\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"fake:status=429;retry_after=7;message=slow "
                  "down\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 429);
    T_CHECK(strstr(err_message(&r), "slow down") != NULL);
    T_EQ_STR(e2e_header(&r, "retry-after", h, sizeof(h)), "7");
    e2e_resp_free(&r);

}

static void
test_anth_budget(void)
{
    /* A key with 0.05 USD left.  Without a cap the anthropic kind sends
     * max_tokens 4096: the reservation (4096 x 15.00 per Mtok = 0.061 USD
     * and the prompt at the cache write price) does not fit and the
     * request is refused before anything goes upstream; with max_tokens
     * 100 it fits. */
    struct e2e_resp r;
    T_EQ_INT(post("/admin/keys", "bk-0", ADMIN,
                  "{\"name\":\"native-budget\",\"budget_usd\":0.05}", &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    char key[256];
    snprintf(key, sizeof(key), "%s",
             json_string_value(json_object_get(o, "key"))
                 ? json_string_value(json_object_get(o, "key"))
                 : "");
    json_decref(o);
    e2e_resp_free(&r);
    long long before = fake_requests();
    T_EQ_INT(post("/v1/chat/completions", "bk-1", key,
                  "{\"model\":\"claude\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 429);
    T_CHECK(r.body && strstr(r.body, "insufficient_quota"));
    e2e_resp_free(&r);
    T_EQ_INT(fake_requests(), before);
    T_EQ_INT(post("/v1/chat/completions", "bk-2", key,
                  "{\"model\":\"claude\",\"max_tokens\":100,\"messages\":"
                  "[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

/* ---- gemini --------------------------------------------------------- */

static void
test_gem(void)
{
    struct e2e_resp r;
    T_EQ_INT(chat("ge-1",
                  "{\"model\":\"flash\",\"max_tokens\":64,\"temperature\":"
                  "0.2,\"messages\":[{\"role\":\"system\",\"content\":\"Be "
                  "brief.\"},{\"role\":\"user\",\"content\":\"fake:cached=600;"
                  "prompt_tokens=1000;completion_tokens=50;thoughts=200\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    const json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    const json_t *msg = json_object_get(ch, "message");
    T_EQ_STR(json_string_value(json_object_get(msg, "content")),
             "Hello from fake provider");
    T_EQ_STR(json_string_value(json_object_get(msg, "reasoning_content")),
             "Thinking it over.");
    T_EQ_STR(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    const json_t *u = json_object_get(j, "usage");
    T_EQ_INT(ji(u, "prompt_tokens", NULL), 1000);
    T_EQ_INT(ji(u, "completion_tokens", NULL), 250);
    T_EQ_INT(ji(u, "prompt_tokens_details", "cached_tokens"), 600);
    T_EQ_INT(ji(u, "completion_tokens_details", "reasoning_tokens"), 200);
    char h[64];
    /* 400 x 0.30 + 600 x 0.03 + 250 x 2.50 per Mtok. */
    T_EQ_STR(e2e_header(&r, "x-llmux-cost-usd", h, sizeof(h)), "0.000763");
    json_decref(j);
    e2e_resp_free(&r);
    T_EQ_INT(row_int("ge-1", "cost_pusd"), 763000000LL);
    T_EQ_INT(row_int("ge-1", "completion_tokens"), 250);
    json_t *s = fake_last();
    const json_t *last = json_object_get(s, "last");
    T_EQ_STR(json_string_value(json_object_get(last, "path")),
             "/v1beta/models/gemini-2.5-flash:generateContent");
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(last, "headers"), "x-goog-api-key")),
             SECRET_G);
    const json_t *b = json_object_get(last, "body");
    T_EQ_INT(ji(b, "generationConfig", "maxOutputTokens"), 64);
    T_EQ_STR(json_string_value(json_object_get(
                 json_array_get(json_object_get(json_object_get(
                                                    b, "systemInstruction"),
                                                "parts"),
                                0),
                 "text")),
             "Be brief.");
    json_decref(s);

    /* Stream with text, then with a tool call. */
    T_EQ_INT(chat("ge-2",
                  "{\"model\":\"flash\",\"stream\":true,\"stream_options\":"
                  "{\"include_usage\":true},\"messages\":[{\"role\":\"user\","
                  "\"content\":\"fake:cached=2\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    struct events e;
    events_parse(r.body ? r.body : "", &e);
    struct assembled a;
    assemble(&e, &a);
    T_EQ_STR(a.content, "Hello from fake provider");
    T_EQ_STR(a.finish, "stop");
    T_CHECK(e.done && !e.after_done && a.all_chunks && !a.stream_error);
    T_EQ_INT(ji(a.usage, "prompt_tokens", NULL), 9);
    T_EQ_INT(ji(a.usage, "completion_tokens", NULL), 4);
    T_EQ_INT(ji(a.usage, "prompt_tokens_details", "cached_tokens"), 2);
    json_decref(e.chunks);
    e2e_resp_free(&r);
    s = fake_last();
    T_EQ_STR(json_string_value(json_object_get(json_object_get(s, "last"),
                                               "path")),
             "/v1beta/models/gemini-2.5-flash:streamGenerateContent");
    json_decref(s);
    T_EQ_INT(row_int("ge-2", "cost_pusd"),
             7LL * 300000 + 2LL * 30000 + 4LL * 2500000);

    char body[2048];
    snprintf(body, sizeof(body),
             "{\"model\":\"flash\",\"stream\":true,\"tools\":%s,"
             "\"messages\":[{\"role\":\"user\",\"content\":"
             "\"fake:tool=get_weather\"}]}",
             tools_json);
    T_EQ_INT(chat("ge-3", body, &r), 0);
    events_parse(r.body ? r.body : "", &e);
    assemble(&e, &a);
    T_EQ_INT(a.n_tool_calls, 1);
    T_EQ_STR(a.tool_name, "get_weather");
    T_EQ_STR(a.tool_args, "{\"city\":\"Paris\"}");
    T_EQ_STR(a.finish, "tool_calls");
    T_CHECK(e.done);
    json_decref(e.chunks);
    e2e_resp_free(&r);
    s = fake_last();
    const json_t *fd = json_array_get(
        json_object_get(json_array_get(json_object_get(json_object_get(
                                                           json_object_get(
                                                               s, "last"),
                                                           "body"),
                                                       "tools"),
                                       0),
                        "functionDeclarations"),
        0);
    T_EQ_STR(json_string_value(json_object_get(fd, "name")), "get_weather");
    T_CHECK(json_is_object(json_object_get(fd, "parametersJsonSchema")));
    json_decref(s);

    /* A stream that stops before any finishReason is cut, not complete:
     * the client gets the error event after the text so far. */
    T_EQ_INT(chat("ge-4",
                  "{\"model\":\"flash\",\"stream\":true,\"messages\":[{"
                  "\"role\":\"user\",\"content\":\"fake:drop_after=2\"}]}",
                  &r),
             0);
    events_parse(r.body ? r.body : "", &e);
    assemble(&e, &a);
    T_CHECK(a.stream_error);
    T_EQ_STR(a.content, "Hello from");
    json_decref(e.chunks);
    e2e_resp_free(&r);
    T_EQ_INT(row_int("ge-4", "status"), 502);

    /* 429 and 403 in Google's shape come out in OpenAI's. */
    T_EQ_INT(chat("ge-e1",
                  "{\"model\":\"flash\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"fake:status=429;message=Quota exceeded\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 429);
    T_CHECK(strstr(err_message(&r), "Quota exceeded") != NULL);
    e2e_resp_free(&r);
    T_EQ_INT(chat("ge-e2",
                  "{\"model\":\"flash\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"fake:status=403\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 502);
    e2e_resp_free(&r);
    /* Gemini cannot switch parallel tool calls off: refused, named. */
    T_EQ_INT(chat("ge-e3",
                  "{\"model\":\"flash\",\"parallel_tool_calls\":false,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 400);
    T_CHECK(strstr(err_message(&r), "parallel_tool_calls") != NULL);
    e2e_resp_free(&r);
}

/* logprobs through gemini: the fake answers logprobsResult only when
 * asked by generationConfig.responseLogprobs (its top candidates by
 * .logprobs), a chosen candidate a word; they reach the client as
 * choices[0].logprobs.content, streamed too. */
static void
test_gem_logprobs(void)
{
    struct e2e_resp r;
    T_EQ_INT(chat("gl-1",
                  "{\"model\":\"flash\",\"logprobs\":true,\"top_logprobs\":2,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"fake:tag=lp\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    const json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    const json_t *lp = json_object_get(json_object_get(ch, "logprobs"),
                                       "content");
    char joined[256] = "";
    size_t i;
    const json_t *e;
    json_array_foreach(lp, i, e) {
        strncat(joined, json_string_value(json_object_get(e, "token")),
                sizeof(joined) - strlen(joined) - 1);
        T_EQ_INT(json_array_size(json_object_get(e, "top_logprobs")), 2);
        T_CHECK(json_number_value(json_object_get(e, "logprob")) < 0);
    }
    T_EQ_INT(json_array_size(lp), 4); /* "Hello from fake provider" */
    T_EQ_STR(joined, json_string_value(json_object_get(
                         json_object_get(ch, "message"), "content")));
    json_decref(j);
    e2e_resp_free(&r);
    json_t *s = fake_last();
    const json_t *gc = json_object_get(
        json_object_get(json_object_get(s, "last"), "body"),
        "generationConfig");
    T_CHECK(json_is_true(json_object_get(gc, "responseLogprobs")));
    T_EQ_INT(ji(gc, "logprobs", NULL), 2);
    json_decref(s);
    /* streamed: each chunk's tokens with its text */
    T_EQ_INT(chat("gl-2",
                  "{\"model\":\"flash\",\"stream\":true,\"logprobs\":true,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"fake:tag=lp\"}]}",
                  &r),
             0);
    T_EQ_INT(r.status, 200);
    struct events ev;
    events_parse(r.body ? r.body : "", &ev);
    char sj[256] = "";
    size_t k;
    const json_t *c;
    json_array_foreach(ev.chunks, k, c) {
        const json_t *l = json_object_get(
            json_array_get(json_object_get(c, "choices"), 0), "logprobs");
        json_array_foreach(json_object_get(l, "content"), i, e)
            strncat(sj, json_string_value(json_object_get(e, "token")),
                    sizeof(sj) - strlen(sj) - 1);
    }
    struct assembled a;
    assemble(&ev, &a);
    T_CHECK(strlen(sj) > 0);
    T_EQ_STR(sj, a.content);
    json_decref(ev.chunks);
    e2e_resp_free(&r);
    /* not asked: none, and the request does not ask gemini either */
    T_EQ_INT(chat("gl-3",
                  "{\"model\":\"flash\",\"messages\":[{\"role\":\"user\","
                  "\"content\":\"fake:tag=lp\"}]}",
                  &r),
             0);
    j = json_loads(r.body ? r.body : "", 0, NULL);
    T_CHECK(json_is_null(json_object_get(
        json_array_get(json_object_get(j, "choices"), 0), "logprobs")));
    json_decref(j);
    e2e_resp_free(&r);
    s = fake_last();
    T_CHECK(json_object_get(json_object_get(json_object_get(
                                                json_object_get(s, "last"),
                                                "body"),
                                            "generationConfig"),
                            "responseLogprobs") == NULL);
    json_decref(s);
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
    snprintf(db, sizeof(db), "%s/native.db", dir ? dir : "/tmp");
    dbpath = db;
    char *cfg = write_config(db);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", cfg, NULL};
    if (!cfg || e2e_start(&gw, argv, "listening on http://127.0.0.1:", 20000)) {
        fprintf(stderr, "llmux did not start\n");
        e2e_stop(&fake, 15, 5000);
        return 1;
    }
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    T_RUN(test_anth_plain);
    T_RUN(test_anth_stream);
    T_RUN(test_anth_tools);
    T_RUN(test_anth_budget);
    T_RUN(test_anth_errors);
    T_RUN(test_gem_logprobs); /* before test_gem's errors trip the breaker */
    T_RUN(test_gem);
    T_EQ_INT(e2e_stop(&gw, 15, 10000), 0);
    e2e_stop(&fake, 15, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(cfg);
    free(dir);
    return T_END();
}
