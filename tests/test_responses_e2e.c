/*
 * POST /v1/responses, /v1/embeddings, /v1/completions and GET
 * /v1/models/{id} end to end: the real llmux binary in front of
 * tests/fake_provider (OpenAI format, and its Anthropic and Gemini native
 * modes) and the local engine (stories260K), libcurl as the client.
 *
 *   responses    non-stream and stream from every provider kind (items,
 *                events in order with consecutive sequence numbers, the
 *                text a client assembles, usage = the ledger row, the
 *                exact cost for a priced model, x-llmux-* headers); a
 *                function tool (function_call item, streamed arguments)
 *                on each remote kind and a round trip with
 *                function_call_output; the anthropic kind's thinking as a
 *                reasoning item; failover before the first byte; a
 *                stream broken after it (error + response.failed, the row
 *                logged as failed); stateless refusals (400 naming the
 *                parameter, nothing sent upstream); 426 for a WebSocket
 *                upgrade
 *   embeddings   the body passed on with the upstream model name, exact
 *                cost by input tokens; a route whose first target is an
 *                anthropic one skips it; a model only non-openai kinds
 *                serve is a 400 saying why; an unknown one a 404
 *   completions  non-stream and stream, exact cost
 *   models/{id}  a route, a model, MODEL@PROVIDER encoded as the SDKs do,
 *                an unknown id (404 in OpenAI's shape)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/resp_events.h"

static struct e2e_proc fake, gw;
static char base[128], fake_url[128];
static char dbpath[512];

static char *
write_config(void)
{
    char model[1024], cfg[6000];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    int p = fake.port;
    snprintf(
        cfg, sizeof(cfg),
        "{\"listen\": \"127.0.0.1:0\", \"workers\": 1,\n"
        " \"database\": \"%s\", \"require_keys\": false,\n"
        " \"limits\": {\"max_body_bytes\": 65536},\n"
        " \"providers\": {\n"
        "  \"oa\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"api_key\": \"sk-resp-e2e\",\n"
        "   \"models\": {\"gpt-4.1\": {},\n"
        "    \"text-embedding-3-small\": {\"upstream\": \"emb-up\", "
        "\"input_per_mtok\": 0.02, \"output_per_mtok\": 0},\n"
        "    \"instruct\": {\"upstream\": \"gpt-3.5-turbo-instruct\", "
        "\"input_per_mtok\": 1.5, \"output_per_mtok\": 2.0}}},\n"
        "  \"down\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/f/status=503/v1\",\n"
        "   \"models\": [\"gpt-4.1\"]},\n"
        "  \"anth\": {\"kind\": \"anthropic\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"sk-ant-resp\",\n"
        "   \"models\": {\"claude-sonnet-4.5\": {\"upstream\": "
        "\"claude-sonnet-4-5\"}}},\n"
        "  \"gem\": {\"kind\": \"gemini\", \"base_url\": "
        "\"http://127.0.0.1:%d\", \"api_key\": \"AIza-resp\",\n"
        "   \"models\": [\"gemini-2.5-flash\"]},\n"
        "  \"local\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
        "   \"threads\": 1, \"context\": 512, \"parallel\": 1}\n"
        " },\n"
        " \"routes\": {\n"
        "  \"fo\": {\"policy\": \"priority\", \"targets\": [\"gpt-4.1@down\", "
        "\"gpt-4.1@oa\"]},\n"
        "  \"emb\": {\"policy\": \"priority\", \"targets\": "
        "[\"claude-sonnet-4.5@anth\", \"text-embedding-3-small@oa\"]}\n"
        " },\n"
        " \"failover\": {\"max_attempts\": 3, \"backoff_ms\": 1, "
        "\"circuit_failures\": 100000}\n"
        "}\n",
        dbpath, p, p, p, p, model);
    return e2e_write_temp("responses.json", cfg);
}

static int
req(const char *method, const char *path, const char *rid, const char *body,
    const char *extra, struct e2e_resp *r)
{
    char url[512], hid[128];
    snprintf(url, sizeof(url), "%s%s", base, path);
    snprintf(hid, sizeof(hid), "X-Request-Id: %s", rid);
    const char *hdrs[] = {hid, extra, NULL};
    memset(r, 0, sizeof(*r));
    return e2e_http(method, url, body, hdrs, 60000, r);
}

static long long
row_int(const char *rid, const char *col)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT %s FROM usage WHERE request_id = '%s'",
             col, rid);
    return e2e_db_int(dbpath, sql);
}

static long long
fake_requests(void)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/fake/stats", fake_url);
    struct e2e_resp r;
    long long n = -1;
    if (e2e_http("GET", url, NULL, NULL, 5000, &r) == 0) {
        json_t *j = json_loads(r.body, 0, NULL);
        n = json_integer_value(json_object_get(j, "requests"));
        json_decref(j);
    }
    e2e_resp_free(&r);
    return n;
}

static json_t *
fake_last(void)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/fake/stats", fake_url);
    struct e2e_resp r;
    json_t *last = NULL;
    if (e2e_http("GET", url, NULL, NULL, 5000, &r) == 0) {
        json_t *j = json_loads(r.body, 0, NULL);
        last = json_incref(json_object_get(j, "last"));
        json_decref(j);
    }
    e2e_resp_free(&r);
    return last;
}

static const char *
str_at(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static long long
int_at(const json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

struct kind {
    const char *model, *provider;
    long long cost_pusd; /* -1: not checked (estimated or unpriced) */
};

/* gpt-4.1 at 2.00/8.00, the fake's default usage 9 prompt + 4 words. */
static const struct kind KINDS[] = {
    {"gpt-4.1@oa", "oa", 9 * 2000000LL + 4 * 8000000LL},
    {"claude-sonnet-4.5", "anth", -1},
    {"gemini-2.5-flash", "gem", -1},
    {"local", "local", 0},
};

static void
test_plain(void)
{
    for (size_t k = 0; k < sizeof(KINDS) / sizeof(KINDS[0]); k++) {
        char rid[64], body[512], hb[128];
        snprintf(rid, sizeof(rid), "resp-plain-%zu", k);
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"instructions\":\"Tell a story.\","
                 "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
                 "\"input_text\",\"text\":\"Once upon a time\"}]}],"
                 "\"max_output_tokens\":12,\"metadata\":{\"t\":\"%zu\"}}",
                 KINDS[k].model, k);
        struct e2e_resp r;
        T_EQ_INT(req("POST", "/v1/responses", rid, body, NULL, &r), 0);
        T_EQ_INT(r.status, 200);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        T_EQ_STR(str_at(o, "object"), "response");
        char want_id[80];
        snprintf(want_id, sizeof(want_id), "resp_%s", rid);
        T_EQ_STR(str_at(o, "id"), want_id);
        T_CHECK(!strcmp(str_at(o, "status"), "completed") ||
                !strcmp(str_at(o, "status"), "incomplete"));
        T_EQ_STR(str_at(o, "instructions"), "Tell a story.");
        json_t *m = json_array_get(json_object_get(o, "output"), 0);
        T_EQ_STR(str_at(m, "type"), "message");
        json_t *part = json_array_get(json_object_get(m, "content"), 0);
        T_EQ_STR(str_at(part, "type"), "output_text");
        T_CHECK(strlen(str_at(part, "text")) > 0);
        json_t *u = json_object_get(o, "usage");
        T_CHECK(int_at(u, "input_tokens") > 0);
        T_EQ_INT(int_at(u, "input_tokens"), row_int(rid, "prompt_tokens"));
        T_EQ_INT(int_at(u, "output_tokens"),
                 row_int(rid, "completion_tokens"));
        T_EQ_INT(row_int(rid, "status"), 200);
        T_EQ_STR(e2e_header(&r, "x-llmux-provider", hb, sizeof(hb))
                     ? hb : "",
                 KINDS[k].provider);
        T_CHECK(e2e_header(&r, "x-llmux-cost-usd", hb, sizeof(hb)) != NULL);
        T_CHECK(e2e_header(&r, "x-llmux-route", hb, sizeof(hb)) != NULL);
        T_EQ_STR(e2e_header(&r, "x-request-id", hb, sizeof(hb)) ? hb : "",
                 rid);
        if (KINDS[k].cost_pusd >= 0)
            T_EQ_INT(row_int(rid, "cost_pusd"), KINDS[k].cost_pusd);
        json_decref(o);
        e2e_resp_free(&r);
    }
}

static void
test_stream(void)
{
    for (size_t k = 0; k < sizeof(KINDS) / sizeof(KINDS[0]); k++) {
        char rid[64], body[512], hb[128];
        snprintf(rid, sizeof(rid), "resp-stream-%zu", k);
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"input\":\"Once upon a time\","
                 "\"stream\":true,\"max_output_tokens\":12}",
                 KINDS[k].model);
        struct e2e_resp r;
        T_EQ_INT(req("POST", "/v1/responses", rid, body, NULL, &r), 0);
        T_EQ_INT(r.status, 200);
        T_CHECK(e2e_header(&r, "content-type", hb, sizeof(hb)) &&
                strstr(hb, "text/event-stream"));
        json_t *ev = resp_events_parse(r.body ? r.body : "");
        size_t n = json_array_size(ev);
        T_CHECK(n >= 8);
        T_EQ_INT(resp_events_bad(ev), -1);
        T_EQ_STR(str_at(json_array_get(ev, 0), "event"), "response.created");
        T_EQ_STR(str_at(json_array_get(ev, 1), "event"),
                 "response.in_progress");
        const char *lastev = str_at(json_array_get(ev, n - 1), "event");
        T_CHECK(!strcmp(lastev, "response.completed") ||
                !strcmp(lastev, "response.incomplete"));
        char text[2048], args[16];
        resp_events_text(ev, text, sizeof(text), args, sizeof(args));
        T_CHECK(strlen(text) > 0);
        /* the .done event and the final object hold what the deltas made */
        const char *done_text = NULL;
        size_t i;
        json_t *e;
        json_array_foreach(ev, i, e) {
            if (!strcmp(str_at(e, "event"), "response.output_text.done"))
                done_text = str_at(json_object_get(e, "data"), "text");
        }
        T_EQ_STR(done_text ? done_text : "(none)", text);
        json_t *fin = json_object_get(
            json_object_get(json_array_get(ev, n - 1), "data"), "response");
        json_t *m = json_array_get(json_object_get(fin, "output"), 0);
        T_EQ_STR(str_at(json_array_get(json_object_get(m, "content"), 0),
                        "text"),
                 text);
        json_t *u = json_object_get(fin, "usage");
        T_EQ_INT(int_at(u, "input_tokens"), row_int(rid, "prompt_tokens"));
        T_EQ_INT(int_at(u, "output_tokens"),
                 row_int(rid, "completion_tokens"));
        T_EQ_INT(row_int(rid, "stream"), 1);
        T_EQ_INT(row_int(rid, "status"), 200);
        json_decref(ev);
        e2e_resp_free(&r);
    }
}

static const char TOOLS[] =
    "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\","
    "\"description\":\"Weather in a city\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
    "\"required\":[\"city\"]}}]";

static void
test_tools(void)
{
    for (size_t k = 0; k < 3; k++) { /* the remote kinds */
        char rid[64], body[1024];
        snprintf(rid, sizeof(rid), "resp-tool-%zu", k);
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"input\":\"fake:tool=get_weather\",%s,"
                 "\"tool_choice\":\"auto\"}",
                 KINDS[k].model, TOOLS);
        struct e2e_resp r;
        T_EQ_INT(req("POST", "/v1/responses", rid, body, NULL, &r), 0);
        T_EQ_INT(r.status, 200);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        json_t *fc = NULL;
        size_t i;
        json_t *it;
        json_array_foreach(json_object_get(o, "output"), i, it)
            if (!strcmp(str_at(it, "type"), "function_call"))
                fc = it;
        T_CHECK(fc != NULL);
        T_EQ_STR(str_at(fc, "name"), "get_weather");
        T_EQ_STR(str_at(fc, "arguments"), "{\"city\":\"Paris\"}");
        T_CHECK(strlen(str_at(fc, "call_id")) > 0);
        /* the tool's answer goes back as function_call_output */
        char call_id[128];
        snprintf(call_id, sizeof(call_id), "%s", str_at(fc, "call_id"));
        json_decref(o);
        e2e_resp_free(&r);
        snprintf(rid, sizeof(rid), "resp-tool-rt-%zu", k);
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"input\":[{\"role\":\"user\","
                 "\"content\":\"fake:tool=get_weather\"},{\"type\":"
                 "\"function_call\",\"call_id\":\"%s\",\"name\":"
                 "\"get_weather\",\"arguments\":\"{\\\"city\\\":"
                 "\\\"Paris\\\"}\"},{\"type\":\"function_call_output\","
                 "\"call_id\":\"%s\",\"output\":\"sunny, 21 C\"}],%s}",
                 KINDS[k].model, call_id, call_id, TOOLS);
        T_EQ_INT(req("POST", "/v1/responses", rid, body, NULL, &r), 0);
        T_EQ_INT(r.status, 200);
        o = json_loads(r.body ? r.body : "", 0, NULL);
        json_t *m = json_array_get(json_object_get(o, "output"), 0);
        T_EQ_STR(str_at(m, "type"), "message");
        json_decref(o);
        e2e_resp_free(&r);
        /* what the upstream got: the call and its result, translated */
        json_t *last = fake_last();
        char *seen = json_dumps(json_object_get(last, "body"), 0);
        T_CHECK(seen && strstr(seen, "sunny, 21 C"));
        free(seen);
        json_decref(last);

        snprintf(rid, sizeof(rid), "resp-tool-stream-%zu", k);
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",\"input\":\"fake:tool=get_weather\",%s,"
                 "\"stream\":true}",
                 KINDS[k].model, TOOLS);
        T_EQ_INT(req("POST", "/v1/responses", rid, body, NULL, &r), 0);
        T_EQ_INT(r.status, 200);
        json_t *ev = resp_events_parse(r.body ? r.body : "");
        T_EQ_INT(resp_events_bad(ev), -1);
        char text[256], args[256];
        resp_events_text(ev, text, sizeof(text), args, sizeof(args));
        T_EQ_STR(args, "{\"city\":\"Paris\"}");
        int added = 0, done = 0;
        json_array_foreach(ev, i, it) {
            json_t *d = json_object_get(it, "data");
            json_t *item = json_object_get(d, "item");
            if (!strcmp(str_at(it, "event"), "response.output_item.added") &&
                !strcmp(str_at(item, "type"), "function_call"))
                added += !strcmp(str_at(item, "name"), "get_weather");
            if (!strcmp(str_at(it, "event"),
                        "response.function_call_arguments.done"))
                done += !strcmp(str_at(d, "arguments"),
                                "{\"city\":\"Paris\"}");
        }
        T_EQ_INT(added, 1);
        T_EQ_INT(done, 1);
        json_decref(ev);
        e2e_resp_free(&r);
    }
}

/* The anthropic kind's thinking (the fake's thoughts=N) is a reasoning
 * item, non-stream and streamed. */
static void
test_reasoning(void)
{
    struct e2e_resp r;
    T_EQ_INT(req("POST", "/v1/responses", "resp-think",
                 "{\"model\":\"claude-sonnet-4.5\",\"input\":"
                 "\"fake:thoughts=6\"}",
                 NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    json_t *rs = json_array_get(json_object_get(o, "output"), 0);
    T_EQ_STR(str_at(rs, "type"), "reasoning");
    json_t *part = json_array_get(json_object_get(rs, "content"), 0);
    T_EQ_STR(str_at(part, "type"), "reasoning_text");
    char thought[512];
    snprintf(thought, sizeof(thought), "%s", str_at(part, "text"));
    T_CHECK(strlen(thought) > 0);
    T_EQ_STR(str_at(json_array_get(json_object_get(o, "output"), 1), "type"),
             "message");
    json_decref(o);
    e2e_resp_free(&r);

    T_EQ_INT(req("POST", "/v1/responses", "resp-think-s",
                 "{\"model\":\"claude-sonnet-4.5\",\"input\":"
                 "\"fake:thoughts=6\",\"stream\":true}",
                 NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *ev = resp_events_parse(r.body ? r.body : "");
    T_EQ_INT(resp_events_bad(ev), -1);
    char deltas[512] = "";
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        if (!strcmp(str_at(e, "event"), "response.reasoning_text.delta"))
            strncat(deltas, str_at(json_object_get(e, "data"), "delta"),
                    sizeof(deltas) - strlen(deltas) - 1);
    }
    T_EQ_STR(deltas, thought);
    json_decref(ev);
    e2e_resp_free(&r);
}

/* reasoning.effort reaches each kind as it speaks it: the openai kind's
 * upstream gets reasoning_effort, the gemini kind's a thinkingConfig with
 * Google's budget, the anthropic kind refuses it by name before any
 * upstream call (no published budget mapping), and the local engine's
 * stories260K (no reasoning template) refuses it too, naming it. */
static void
test_reasoning_effort(void)
{
    const char *body = "{\"model\":\"%s\",\"input\":\"x\",\"reasoning\":"
                       "{\"effort\":\"high\",\"summary\":\"auto\"}}";
    char b[256];
    struct e2e_resp r;
    for (size_t k = 0; k < 4; k++) {
        snprintf(b, sizeof(b), body, KINDS[k].model);
        long long before = fake_requests();
        T_EQ_INT(req("POST", "/v1/responses", "resp-effort", b, NULL, &r), 0);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        if (k == 1 || k == 3) {
            T_EQ_INT(r.status, 400);
            /* the anthropic kind lists what it refuses in the message
             * (param null), the local engine names it as param */
            const json_t *e = json_object_get(o, "error");
            T_CHECK(!strcmp(str_at(e, "param"), "reasoning_effort") ||
                    strstr(str_at(e, "message"), "reasoning_effort"));
            T_EQ_INT(fake_requests(), before);
        } else {
            T_EQ_INT(r.status, 200);
            T_EQ_STR(str_at(json_object_get(o, "reasoning"), "effort"),
                     "high");
            json_t *last = fake_last();
            const json_t *up = json_object_get(last, "body");
            if (k == 0)
                T_EQ_STR(str_at(up, "reasoning_effort"), "high");
            else
                T_EQ_INT(int_at(json_object_get(json_object_get(
                                                    up, "generationConfig"),
                                                "thinkingConfig"),
                                "thinkingBudget"),
                         24576);
            json_decref(last);
        }
        json_decref(o);
        e2e_resp_free(&r);
    }
}

static void
test_failover_and_broken(void)
{
    struct e2e_resp r;
    char hb[64];
    T_EQ_INT(req("POST", "/v1/responses", "resp-fo",
                 "{\"model\":\"fo\",\"input\":\"hi\"}", NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", hb, sizeof(hb)) ? hb : "",
             "2");
    T_EQ_STR(e2e_header(&r, "x-llmux-provider", hb, sizeof(hb)) ? hb : "",
             "oa");
    T_EQ_INT(row_int("resp-fo", "attempts"), 2);
    e2e_resp_free(&r);

    /* The upstream fails after three events: the client has seen bytes,
     * so the stream ends with error + response.failed. */
    T_EQ_INT(req("POST", "/v1/responses", "resp-broken",
                 "{\"model\":\"gpt-4.1@oa\",\"input\":\"fake:error_after=3\","
                 "\"stream\":true}",
                 NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *ev = resp_events_parse(r.body ? r.body : "");
    size_t n = json_array_size(ev);
    T_EQ_INT(resp_events_bad(ev), -1);
    T_CHECK(n >= 3);
    T_EQ_STR(str_at(json_array_get(ev, n - 2), "event"), "error");
    T_EQ_STR(str_at(json_array_get(ev, n - 1), "event"), "response.failed");
    T_CHECK(row_int("resp-broken", "status") >= 500);
    json_decref(ev);
    e2e_resp_free(&r);

    /* An answer over what the stream writer keeps (4 x max_body_bytes =
     * 256 KiB here) ends with an error, not a final object short of text. */
    T_EQ_INT(req("POST", "/v1/responses", "resp-huge",
                 "{\"model\":\"gpt-4.1@oa\",\"input\":"
                 "\"fake:big=300000;chunks=30\",\"stream\":true}",
                 NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    ev = resp_events_parse(r.body ? r.body : "");
    n = json_array_size(ev);
    T_EQ_INT(resp_events_bad(ev), -1);
    T_CHECK(n >= 2);
    T_EQ_STR(str_at(json_array_get(ev, n - 2), "event"), "error");
    T_EQ_STR(str_at(json_array_get(ev, n - 1), "event"), "response.failed");
    T_EQ_INT(row_int("resp-huge", "status"), 502);
    json_decref(ev);
    e2e_resp_free(&r);
}

static void
test_refusals(void)
{
    long long before = fake_requests();
    static const struct {
        const char *body, *param;
    } cases[] = {
        {"{\"model\":\"gpt-4.1\",\"input\":\"x\",\"previous_response_id\":"
         "\"resp_1\"}",
         "previous_response_id"},
        {"{\"model\":\"gpt-4.1\",\"input\":\"x\",\"store\":true}", "store"},
        {"{\"model\":\"gpt-4.1\",\"input\":[{\"type\":\"item_reference\","
         "\"id\":\"x\"}]}",
         "input"},
        {"{\"model\":\"gpt-4.1\",\"input\":\"x\",\"reasoning\":{"
         "\"summary\":\"concise\"}}",
         "reasoning.summary"},
        {"{\"model\":\"gpt-4.1\",\"input\":\"x\",\"tools\":[{\"type\":"
         "\"web_search\"}]}",
         "tools"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct e2e_resp r;
        T_EQ_INT(req("POST", "/v1/responses", "resp-refused", cases[i].body,
                     NULL, &r),
                 0);
        T_EQ_INT(r.status, 400);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        json_t *e = json_object_get(o, "error");
        T_EQ_STR(str_at(e, "type"), "invalid_request_error");
        T_EQ_STR(str_at(e, "param"), cases[i].param);
        T_CHECK(strlen(str_at(e, "message")) > 10);
        json_decref(o);
        e2e_resp_free(&r);
    }
    T_EQ_INT(fake_requests(), before); /* nothing reached an upstream */

    struct e2e_resp r;
    T_EQ_INT(req("GET", "/v1/responses", "resp-ws", NULL,
                 "Upgrade: websocket", &r),
             0);
    T_EQ_INT(r.status, 426);
    T_CHECK(r.body && strstr(r.body, "websocket_not_supported"));
    e2e_resp_free(&r);
    T_EQ_INT(req("GET", "/v1/responses", "resp-get", NULL, NULL, &r), 0);
    T_EQ_INT(r.status, 405);
    e2e_resp_free(&r);
    T_EQ_INT(req("POST", "/v1/responses", "resp-badjson", "{", NULL, &r), 0);
    T_EQ_INT(r.status, 400);
    T_CHECK(r.body && strstr(r.body, "invalid_json"));
    e2e_resp_free(&r);
}

static void
test_embeddings(void)
{
    struct e2e_resp r;
    char hb[64];
    T_EQ_INT(req("POST", "/v1/embeddings", "emb-1",
                 "{\"model\":\"text-embedding-3-small\",\"input\":[\"one "
                 "two three\",\"four\"],\"user\":\"u\"}",
                 NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_INT(json_array_size(json_object_get(o, "data")), 2);
    json_t *e0 = json_array_get(json_object_get(o, "data"), 0);
    T_EQ_INT(json_array_size(json_object_get(e0, "embedding")), 8);
    /* the fake: bytes / 4 + 1 per input: 14 / 4 + 1 + 4 / 4 + 1 = 6 */
    T_EQ_INT(int_at(json_object_get(o, "usage"), "prompt_tokens"), 6);
    T_EQ_INT(row_int("emb-1", "prompt_tokens"), 6);
    T_EQ_INT(row_int("emb-1", "completion_tokens"), 0);
    T_EQ_INT(row_int("emb-1", "cost_pusd"), 6 * 20000LL); /* $0.02/M */
    T_EQ_STR(e2e_header(&r, "x-llmux-cost-usd", hb, sizeof(hb)) ? hb : "",
             "0.00000012");
    json_decref(o);
    e2e_resp_free(&r);
    json_t *last = fake_last();
    T_EQ_STR(str_at(last, "path"), "/v1/embeddings");
    T_EQ_STR(str_at(json_object_get(last, "body"), "model"), "emb-up");
    T_EQ_STR(str_at(json_object_get(last, "body"), "user"), "u");
    json_decref(last);

    /* The route's anthropic target cannot embed: skipped, not tried. */
    T_EQ_INT(req("POST", "/v1/embeddings", "emb-route",
                 "{\"model\":\"emb\",\"input\":\"x\","
                 "\"encoding_format\":\"base64\"}",
                 NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(e2e_header(&r, "x-llmux-provider", hb, sizeof(hb)) ? hb : "",
             "oa");
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", hb, sizeof(hb)) ? hb : "",
             "1");
    T_CHECK(r.body && strstr(r.body, "\"embedding\":\""));
    e2e_resp_free(&r);

    const char *no[] = {"claude-sonnet-4.5", "gemini-2.5-flash"};
    for (size_t i = 0; i < 2; i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"model\":\"%s\",\"input\":\"x\"}",
                 no[i]);
        T_EQ_INT(req("POST", "/v1/embeddings", "emb-no", body, NULL, &r), 0);
        T_EQ_INT(r.status, 400);
        T_CHECK(r.body && strstr(r.body, "model_not_supported") &&
                strstr(r.body, "openai, local"));
        e2e_resp_free(&r);
    }
    /* the local engine serves them (test_local_apis_e2e.c in depth) */
    T_EQ_INT(req("POST", "/v1/embeddings", "emb-local",
                 "{\"model\":\"local\",\"input\":\"x\"}", NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    T_CHECK(r.body && strstr(r.body, "\"embedding\":["));
    e2e_resp_free(&r);
    T_EQ_INT(req("POST", "/v1/embeddings", "emb-unknown",
                 "{\"model\":\"nope\",\"input\":\"x\"}", NULL, &r),
             0);
    T_EQ_INT(r.status, 404);
    e2e_resp_free(&r);
    T_EQ_INT(req("POST", "/v1/embeddings", "emb-bad",
                 "{\"model\":\"text-embedding-3-small\"}", NULL, &r),
             0);
    T_EQ_INT(r.status, 400);
    T_CHECK(r.body && strstr(r.body, "\"param\":\"input\""));
    e2e_resp_free(&r);
}

static void
test_completions(void)
{
    struct e2e_resp r;
    T_EQ_INT(req("POST", "/v1/completions", "cmpl-1",
                 "{\"model\":\"instruct\",\"prompt\":\"Once upon\","
                 "\"max_tokens\":8}",
                 NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_STR(str_at(o, "object"), "text_completion");
    T_EQ_STR(str_at(json_array_get(json_object_get(o, "choices"), 0),
                    "text"),
             "Once upon a time");
    json_decref(o);
    e2e_resp_free(&r);
    /* 9 / 4 + 1 = 3 prompt, 4 completion at 1.50 / 2.00 */
    T_EQ_INT(row_int("cmpl-1", "prompt_tokens"), 3);
    T_EQ_INT(row_int("cmpl-1", "completion_tokens"), 4);
    T_EQ_INT(row_int("cmpl-1", "cost_pusd"), 3 * 1500000LL + 4 * 2000000LL);
    json_t *last = fake_last();
    T_EQ_STR(str_at(last, "path"), "/v1/completions");
    T_EQ_STR(str_at(json_object_get(last, "body"), "model"),
             "gpt-3.5-turbo-instruct");
    json_decref(last);

    T_EQ_INT(req("POST", "/v1/completions", "cmpl-s",
                 "{\"model\":\"instruct\",\"prompt\":\"Once upon\","
                 "\"stream\":true}",
                 NULL, &r),
             0);
    T_EQ_INT(r.status, 200);
    T_CHECK(r.body && strstr(r.body, "\"text\":\" upon\""));
    T_CHECK(r.body && strstr(r.body, "data: [DONE]"));
    /* the usage chunk llmux asked for is not passed on */
    T_CHECK(r.body && !strstr(r.body, "\"usage\""));
    e2e_resp_free(&r);
    T_EQ_INT(row_int("cmpl-s", "completion_tokens"), 4);
    T_EQ_INT(row_int("cmpl-s", "cost_pusd"), 3 * 1500000LL + 4 * 2000000LL);
    T_EQ_INT(req("POST", "/v1/completions", "cmpl-no",
                 "{\"model\":\"claude-sonnet-4.5\",\"prompt\":\"x\"}", NULL,
                 &r),
             0);
    T_EQ_INT(r.status, 400);
    e2e_resp_free(&r);
}

static void
test_model_one(void)
{
    static const struct {
        const char *path, *owner;
    } ok[] = {{"/v1/models/fo", "llmux"},
              {"/v1/models/gpt-4.1", "oa"},
              {"/v1/models/gpt-4.1%40oa", "oa"},
              {"/v1/models/local", "local"}};
    for (size_t i = 0; i < 4; i++) {
        struct e2e_resp r;
        T_EQ_INT(req("GET", ok[i].path, "model-one", NULL, NULL, &r), 0);
        T_EQ_INT(r.status, 200);
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        T_EQ_STR(str_at(o, "object"), "model");
        T_EQ_STR(str_at(o, "owned_by"), ok[i].owner);
        json_decref(o);
        e2e_resp_free(&r);
    }
    struct e2e_resp r;
    T_EQ_INT(req("GET", "/v1/models/no-such-model", "model-none", NULL, NULL,
                 &r),
             0);
    T_EQ_INT(r.status, 404);
    json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
    T_EQ_STR(str_at(json_object_get(o, "error"), "code"), "model_not_found");
    T_EQ_STR(str_at(json_object_get(o, "error"), "type"),
             "invalid_request_error");
    json_decref(o);
    e2e_resp_free(&r);
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
    snprintf(dbpath, sizeof(dbpath), "%s/responses.db", dir ? dir : "/tmp");
    char *cfg = write_config();
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", cfg, NULL};
    if (!cfg || e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000)) {
        fprintf(stderr, "llmux did not start\n");
        e2e_stop(&fake, 15, 5000);
        return 1;
    }
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", gw.port);
    T_RUN(test_plain);
    T_RUN(test_stream);
    T_RUN(test_tools);
    T_RUN(test_reasoning);
    T_RUN(test_reasoning_effort);
    T_RUN(test_failover_and_broken);
    T_RUN(test_refusals);
    T_RUN(test_embeddings);
    T_RUN(test_completions);
    T_RUN(test_model_one);
    T_EQ_INT(e2e_stop(&gw, 15, 10000), 0);
    e2e_stop(&fake, 15, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(cfg);
    free(dir);
    return T_END();
}
