/*
 * End to end: the local kind serving the legacy POST /v1/completions with
 * the real stories260K model through the real binary: a non-stream
 * text_completion with exact usage (and greedy determinism), a stream of
 * text_completion chunks ending data: [DONE] whose text equals the
 * non-stream answer, the ledger row (api 'completions', the same token
 * counts), and the refusals of what the engine does not implement.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"

static struct e2e_proc gw;
static char base[128], db[1024];

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
             "   \"threads\": 1, \"context\": 512, \"parallel\": 2}}}\n",
             dir, model);
    snprintf(db, sizeof(db), "%s/ledger.db", dir);
    free(dir);
    char *path = e2e_write_temp("local.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 30000);
    free(path);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", gw.port);
    return rc;
}

static json_t *
post(const char *path, const char *body, long *status)
{
    char url[256];
    snprintf(url, sizeof(url), "%s%s", base, path);
    struct e2e_resp r;
    json_t *o = NULL;
    *status = -1;
    if (e2e_http("POST", url, body, NULL, 60000, &r) == 0) {
        *status = r.status;
        o = json_loads(r.body, 0, NULL);
    }
    e2e_resp_free(&r);
    return o;
}

static char *nonstream_text;

static void
test_completion(void)
{
    long st;
    const char *body = "{\"model\":\"local\",\"temperature\":0,"
                       "\"max_tokens\":16,\"prompt\":\"Once upon a time\"}";
    json_t *a = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(json_string_value(json_object_get(a, "object")),
             "text_completion");
    const json_t *ch = json_array_get(json_object_get(a, "choices"), 0);
    const char *text = json_string_value(json_object_get(ch, "text"));
    T_CHECK(text && strlen(text) > 0);
    T_CHECK(json_is_null(json_object_get(ch, "logprobs")));
    T_CHECK(json_is_string(json_object_get(ch, "finish_reason")));
    const json_t *u = json_object_get(a, "usage");
    /* "Once upon a time": BOS + 4 pieces or more, raw (no template) */
    long long pt = json_integer_value(json_object_get(u, "prompt_tokens"));
    long long ct = json_integer_value(json_object_get(u, "completion_tokens"));
    T_CHECK(pt >= 4 && pt < 16);
    T_CHECK(ct >= 1 && ct <= 16);
    json_t *b = post("/completions", body, &st);
    T_EQ_INT(st, 200);
    T_EQ_STR(text, json_string_value(json_object_get(
                       json_array_get(json_object_get(b, "choices"), 0),
                       "text")));
    free(nonstream_text);
    nonstream_text = text ? strdup(text) : NULL;
    /* the ledger: two rows of api 'completions' with these counts */
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM usage WHERE api='completions' AND "
             "prompt_tokens=%lld AND completion_tokens=%lld AND "
             "cost_pusd=0",
             pt, ct);
    T_EQ_INT(e2e_db_int(db, sql), 2);
    json_decref(a);
    json_decref(b);
}

static void
test_completion_stream(void)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/completions", base);
    struct e2e_resp r;
    const char *body = "{\"model\":\"local\",\"temperature\":0,"
                       "\"max_tokens\":16,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},"
                       "\"prompt\":\"Once upon a time\"}";
    T_EQ_INT(e2e_http("POST", url, body, NULL, 60000, &r), 0);
    T_EQ_INT(r.status, 200);
    char text[4096] = "";
    int chunks = 0, done = 0, finish = 0, usage = 0, bad = 0;
    const char *p = r.body;
    while (p && (p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        if (!strncmp(p, "[DONE]", 6)) {
            done = 1;
            T_CHECK(e[2] == '\0'); /* the last event */
            break;
        }
        json_t *o = json_loadb(p, (size_t)(e - p), 0, NULL);
        if (!o || strcmp(json_string_value(json_object_get(o, "object"))
                             ? json_string_value(json_object_get(o, "object"))
                             : "",
                         "text_completion"))
            bad++;
        const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        const char *t = json_string_value(json_object_get(ch, "text"));
        if (ch && !t)
            bad++;
        if (t)
            strncat(text, t, sizeof(text) - strlen(text) - 1);
        if (json_is_string(json_object_get(ch, "finish_reason")))
            finish++;
        if (json_is_object(json_object_get(o, "usage")))
            usage++;
        chunks++;
        json_decref(o);
        p = e + 2;
    }
    T_EQ_INT(bad, 0);
    T_CHECK(chunks >= 3);
    T_EQ_INT(done, 1);
    T_EQ_INT(finish, 1);
    T_EQ_INT(usage, 1);
    if (nonstream_text)
        T_EQ_STR(text, nonstream_text);
    e2e_resp_free(&r);
}

static void
refused(const char *path, const char *body, const char *param)
{
    long st;
    json_t *o = post(path, body, &st);
    T_EQ_INT(st, 400);
    const char *got =
        json_string_value(json_object_get(json_object_get(o, "error"),
                                          "param"));
    T_EQ_STR(got ? got : "(none)", param);
    json_decref(o);
}

static void
test_completion_refusals(void)
{
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"echo\":true}", "echo");
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"suffix\":\"b\"}",
            "suffix");
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"best_of\":2}",
            "best_of");
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"logprobs\":2}",
            "logprobs");
    refused("/completions",
            "{\"model\":\"local\",\"prompt\":\"a\",\"logit_bias\":{}}",
            "logit_bias");
    refused("/completions", "{\"model\":\"local\",\"prompt\":[1,2,3]}",
            "prompt");
    refused("/completions", "{\"model\":\"local\",\"prompt\":[\"a\",\"b\"]}",
            "prompt");
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (start() != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_completion);
    T_RUN(test_completion_stream);
    T_RUN(test_completion_refusals);
    free(nonstream_text);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 20000), 0);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
