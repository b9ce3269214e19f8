/*
 * End to end, on raw sockets: `n` > 1 streamed by the local engine
 * through the real llmux binary (stories260K).  A chat stream with n = 3
 * must show every choice index 0..2 and no other, each choice's role delta
 * and finish_reason exactly once (finish after its last delta), data:
 * [DONE] last, and the include_usage chunk summing the choices' completion
 * tokens; the ledger row of the request holds that same sum.  Greedy
 * (temperature 0) choices equal each other and the n = 1 answer, streamed
 * and not; seeded sampling gives three different choices; with
 * ignore_eos every choice runs to max_tokens, so the sum is exactly
 * n x max_tokens.  Tools with n = 2, streamed (tool_call deltas per
 * choice, each its own call id, arguments that parse, finish_reason
 * tool_calls) and not; response_format json_schema with n = 2 streamed
 * (each choice a valid object); /v1/completions streamed with n = 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/raw_http.h"

#define N_MAX 8

static struct e2e_proc gw;
static char db[1024];

static int
start(void)
{
    char model[1024], cfg[4096];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    char *dir = e2e_temp_dir();
    if (!dir)
        return -1;
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
             " \"providers\": {\"local\": {\"kind\": \"local\", "
             "\"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 512, \"parallel\": 4}}}\n",
             dir, model);
    snprintf(db, sizeof(db), "%s/ledger.db", dir);
    free(dir);
    char *path = e2e_write_temp("local_n.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    return rc;
}

/* One streamed answer, cut into choices. */
struct choice {
    char text[8192];     /* content (chat) or text (completions) */
    size_t len;
    int roles;           /* role deltas */
    int finishes;        /* chunks with a finish_reason */
    char finish[32];
    int after_finish;    /* deltas after its finish_reason */
    char tool_name[64];  /* from the tool_call deltas */
    char tool_id[96];
    char args[4096];
    size_t args_len;
};

struct stream {
    int status;
    int chunked_end;
    int done_last;       /* [DONE] arrived, and last */
    int bad;             /* unparsable events, unknown indexes */
    int n_seen;          /* highest index + 1 */
    struct choice ch[N_MAX];
    long long usage_completion; /* -1: no usage chunk */
    long long usage_prompt;
    int usage_chunks;
    char request_id[96];
};

static void
append(char *dst, size_t *len, size_t cap, const char *s, size_t n)
{
    if (*len + n + 1 > cap)
        n = *len + 1 < cap ? cap - *len - 1 : 0;
    memcpy(dst + *len, s, n);
    *len += n;
    dst[*len] = '\0';
}

static void
take_chunk(struct stream *s, const json_t *o)
{
    const json_t *u = json_object_get(o, "usage");
    if (json_is_object(u)) {
        s->usage_chunks++;
        s->usage_completion =
            json_integer_value(json_object_get(u, "completion_tokens"));
        s->usage_prompt =
            json_integer_value(json_object_get(u, "prompt_tokens"));
    }
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(o, "choices"), i, c) {
        json_int_t k = json_integer_value(json_object_get(c, "index"));
        if (!json_is_integer(json_object_get(c, "index")) || k < 0 ||
            k >= N_MAX) {
            s->bad++;
            continue;
        }
        struct choice *ch = &s->ch[k];
        if (k + 1 > s->n_seen)
            s->n_seen = (int)k + 1;
        const json_t *d = json_object_get(c, "delta");
        const json_t *t = d ? json_object_get(d, "content")
                            : json_object_get(c, "text");
        int has = 0;
        if (json_is_string(t) && json_string_length(t)) {
            append(ch->text, &ch->len, sizeof(ch->text), json_string_value(t),
                   json_string_length(t));
            has = 1;
        }
        if (json_is_string(json_object_get(d, "role")))
            ch->roles++;
        size_t m;
        const json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), m, tc) {
            const json_t *fn = json_object_get(tc, "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            const char *id = json_string_value(json_object_get(tc, "id"));
            const json_t *a = json_object_get(fn, "arguments");
            if (name)
                snprintf(ch->tool_name, sizeof(ch->tool_name), "%s", name);
            if (id)
                snprintf(ch->tool_id, sizeof(ch->tool_id), "%s", id);
            if (json_is_string(a))
                append(ch->args, &ch->args_len, sizeof(ch->args),
                       json_string_value(a), json_string_length(a));
            has = 1;
        }
        if (has && ch->finishes)
            ch->after_finish++;
        const char *f =
            json_string_value(json_object_get(c, "finish_reason"));
        if (f) {
            ch->finishes++;
            snprintf(ch->finish, sizeof(ch->finish), "%s", f);
        }
    }
}

/* POSTs body to path on a raw socket and reads the whole stream. */
static int
run_stream(const char *path, const char *body, struct stream *s)
{
    memset(s, 0, sizeof(*s));
    s->usage_completion = -1;
    struct raw_conn c;
    if (raw_open(&c, gw.port, 0) != 0 || raw_post(&c, path, body) != 0 ||
        raw_read_all(&c, 16 << 20, 120000) != 0) {
        raw_close(&c);
        return -1;
    }
    const char *rid = strcasestr(c.in, "\r\nx-request-id: ");
    if (rid)
        sscanf(rid + 16, "%95[^\r]", s->request_id);
    char *b;
    size_t bl;
    s->chunked_end = raw_response(c.in, c.len, &s->status, &b, &bl) == 1;
    raw_close(&c);
    size_t n;
    char **ev = raw_sse_events(b, bl, &n);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(ev[i], "[DONE]")) {
            s->done_last = i + 1 == n;
            continue;
        }
        json_t *o = json_loads(ev[i], 0, NULL);
        if (!o || json_object_get(o, "error"))
            s->bad++;
        else
            take_chunk(s, o);
        json_decref(o);
    }
    raw_sse_free(ev, n);
    free(b);
    return 0;
}

/* The stream's shape: n choices, each with one finish (and, for chats,
 * one role delta), nothing after a finish, [DONE] last. */
static void
check_shape(const struct stream *s, int n, int chat)
{
    T_EQ_INT(s->status, 200);
    T_CHECK(s->chunked_end);
    T_CHECK(s->done_last);
    T_EQ_INT(s->bad, 0);
    T_EQ_INT(s->n_seen, n);
    for (int k = 0; k < n; k++) {
        T_EQ_INT(s->ch[k].finishes, 1);
        T_EQ_INT(s->ch[k].after_finish, 0);
        if (chat)
            T_EQ_INT(s->ch[k].roles, 1);
    }
}

static long long
ledger_completion(const char *request_id)
{
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT completion_tokens FROM usage WHERE request_id = '%s'",
             request_id);
    return e2e_db_int(db, sql);
}

static json_t *
post_json(const char *path, const char *body, long *status)
{
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1%s", gw.port, path);
    struct e2e_resp r;
    json_t *o = NULL;
    *status = -1;
    if (e2e_http("POST", url, body, NULL, 120000, &r) == 0) {
        *status = r.status;
        o = json_loads(r.body, 0, NULL);
    }
    e2e_resp_free(&r);
    return o;
}

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}]"

static void
test_greedy_stream(void)
{
    struct stream one, three;
    T_EQ_INT(run_stream("/v1/chat/completions",
                        "{\"model\":\"local\",\"stream\":true,"
                        "\"temperature\":0,\"max_tokens\":24," MSGS "}",
                        &one),
             0);
    check_shape(&one, 1, 1);
    T_CHECK(one.ch[0].len > 0);
    T_EQ_INT(run_stream("/v1/chat/completions",
                        "{\"model\":\"local\",\"stream\":true,\"n\":3,"
                        "\"temperature\":0,\"max_tokens\":24,"
                        "\"stream_options\":{\"include_usage\":true}," MSGS
                        "}",
                        &three),
             0);
    check_shape(&three, 3, 1);
    for (int k = 0; k < 3; k++) {
        T_EQ_STR(three.ch[k].text, one.ch[0].text);
        T_EQ_STR(three.ch[k].finish, one.ch[0].finish);
    }
    /* the non-stream n = 1 answer is the same text */
    long st;
    json_t *o = post_json("/chat/completions",
                          "{\"model\":\"local\",\"temperature\":0,"
                          "\"max_tokens\":24," MSGS "}",
                          &st);
    T_EQ_INT(st, 200);
    const json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
    T_EQ_STR(json_string_value(json_object_get(
                 json_object_get(c0, "message"), "content")),
             one.ch[0].text);
    long long each =
        json_integer_value(json_object_get(json_object_get(o, "usage"),
                                           "completion_tokens"));
    json_decref(o);
    T_EQ_INT(three.usage_chunks, 1);
    T_EQ_INT(three.usage_completion, 3 * each);
    T_CHECK(three.usage_prompt > 0);
    T_CHECK(three.request_id[0]);
    T_EQ_INT(ledger_completion(three.request_id), three.usage_completion);
}

static void
test_seeded_stream(void)
{
    /* ignore_eos: each choice runs to max_tokens, so the sum is exact */
    struct stream s;
    T_EQ_INT(run_stream("/v1/chat/completions",
                        "{\"model\":\"local\",\"stream\":true,\"n\":3,"
                        "\"seed\":11,\"temperature\":1,\"max_tokens\":20,"
                        "\"ignore_eos\":true,"
                        "\"stream_options\":{\"include_usage\":true}," MSGS
                        "}",
                        &s),
             0);
    check_shape(&s, 3, 1);
    for (int k = 0; k < 3; k++)
        T_EQ_STR(s.ch[k].finish, "length");
    T_CHECK(strcmp(s.ch[0].text, s.ch[1].text) != 0);
    T_CHECK(strcmp(s.ch[0].text, s.ch[2].text) != 0);
    T_CHECK(strcmp(s.ch[1].text, s.ch[2].text) != 0);
    T_EQ_INT(s.usage_completion, 3 * 20);
    T_EQ_INT(ledger_completion(s.request_id), 3 * 20);
}

#define TOOLS                                                                \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"              \
    "\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"   \
    "\"city\":{\"type\":\"string\",\"enum\":[\"Paris\",\"Oslo\"]},"          \
    "\"days\":{\"type\":\"integer\",\"enum\":[1,2,3]}},\"required\":["       \
    "\"city\",\"days\"],\"additionalProperties\":false}}}],"                 \
    "\"tool_choice\":\"required\","

/* a call's arguments as the schema allows them */
static int
args_ok(const char *args)
{
    json_t *a = json_loads(args, 0, NULL);
    const char *city = json_string_value(json_object_get(a, "city"));
    json_int_t d = json_integer_value(json_object_get(a, "days"));
    int ok = a && json_object_size(a) == 2 && city &&
             (!strcmp(city, "Paris") || !strcmp(city, "Oslo")) && d >= 1 &&
             d <= 3;
    json_decref(a);
    return ok;
}

static void
test_tools_stream(void)
{
    struct stream s;
    T_EQ_INT(run_stream("/v1/chat/completions",
                        "{\"model\":\"local\",\"stream\":true,\"n\":2,"
                        "\"seed\":4,\"max_tokens\":120," TOOLS
                        "\"stream_options\":{\"include_usage\":true}," MSGS
                        "}",
                        &s),
             0);
    check_shape(&s, 2, 1);
    for (int k = 0; k < 2; k++) {
        T_EQ_STR(s.ch[k].finish, "tool_calls");
        T_EQ_STR(s.ch[k].tool_name, "get_weather");
        T_EQ_INT(s.ch[k].len, 0); /* a call, no content */
        T_CHECK(args_ok(s.ch[k].args));
    }
    T_CHECK(s.ch[0].tool_id[0] && strcmp(s.ch[0].tool_id, s.ch[1].tool_id));
    T_CHECK(s.usage_completion > 0);
    T_EQ_INT(ledger_completion(s.request_id), s.usage_completion);
    /* not streamed: two choices, each a call */
    long st;
    json_t *o = post_json("/chat/completions",
                          "{\"model\":\"local\",\"n\":2,\"seed\":4,"
                          "\"max_tokens\":120," TOOLS MSGS "}",
                          &st);
    T_EQ_INT(st, 200);
    const json_t *chs = json_object_get(o, "choices");
    T_EQ_INT(json_array_size(chs), 2);
    for (size_t k = 0; k < json_array_size(chs); k++) {
        const json_t *c = json_array_get(chs, k);
        T_EQ_INT(json_integer_value(json_object_get(c, "index")), k);
        T_EQ_STR(json_string_value(json_object_get(c, "finish_reason")),
                 "tool_calls");
        const json_t *fn = json_object_get(
            json_array_get(json_object_get(json_object_get(c, "message"),
                                           "tool_calls"),
                           0),
            "function");
        T_EQ_STR(json_string_value(json_object_get(fn, "name")),
                 "get_weather");
        const char *a = json_string_value(json_object_get(fn, "arguments"));
        T_CHECK(a && args_ok(a));
    }
    json_decref(o);
}

/* response_format with n = 2, streamed: each choice's own grammar state,
 * each content a valid object when the grammar ended it */
static void
test_json_stream(void)
{
    struct stream s;
    T_EQ_INT(run_stream("/v1/chat/completions",
                        "{\"model\":\"local\",\"stream\":true,\"n\":2,"
                        "\"seed\":9,\"max_tokens\":60,\"response_format\":{"
                        "\"type\":\"json_schema\",\"json_schema\":{\"name\":"
                        "\"pet\",\"schema\":{\"type\":\"object\",\"properties\":"
                        "{\"kind\":{\"enum\":[\"cat\",\"dog\"]}},\"required\":"
                        "[\"kind\"],\"additionalProperties\":false}}}," MSGS "}",
                        &s),
             0);
    check_shape(&s, 2, 1);
    for (int k = 0; k < 2; k++) {
        T_EQ_STR(s.ch[k].finish, "stop");
        json_t *o = json_loads(s.ch[k].text, 0, NULL);
        const char *kind = json_string_value(json_object_get(o, "kind"));
        T_CHECK(o && json_object_size(o) == 1 && kind &&
                (!strcmp(kind, "cat") || !strcmp(kind, "dog")));
        json_decref(o);
    }
}

static void
test_completions_stream(void)
{
    struct stream one, two;
    T_EQ_INT(run_stream("/v1/completions",
                        "{\"model\":\"local\",\"stream\":true,"
                        "\"temperature\":0,\"max_tokens\":16,"
                        "\"prompt\":\"Once upon a time\"}",
                        &one),
             0);
    check_shape(&one, 1, 0);
    T_EQ_INT(run_stream("/v1/completions",
                        "{\"model\":\"local\",\"stream\":true,\"n\":2,"
                        "\"temperature\":0,\"max_tokens\":16,"
                        "\"stream_options\":{\"include_usage\":true},"
                        "\"prompt\":\"Once upon a time\"}",
                        &two),
             0);
    check_shape(&two, 2, 0);
    T_CHECK(one.ch[0].len > 0);
    for (int k = 0; k < 2; k++)
        T_EQ_STR(two.ch[k].text, one.ch[0].text);
    T_CHECK(two.usage_completion > 0 && two.usage_completion % 2 == 0);
    T_EQ_INT(ledger_completion(two.request_id), two.usage_completion);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (start() != 0) {
        fprintf(stderr, "llmux did not start\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_greedy_stream);
    T_RUN(test_seeded_stream);
    T_RUN(test_tools_stream);
    T_RUN(test_json_stream);
    T_RUN(test_completions_stream);
    T_EQ_INT(e2e_stop(&gw, 15, 20000), 0);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
