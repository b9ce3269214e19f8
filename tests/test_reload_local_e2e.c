/*
 * SIGHUP reload of local providers end to end (issue 10: a local model is
 * a provider instance made from the config, not a process global).  The
 * real llmux binary serves three local providers from real GGUF files: a
 * random-weight model written here (tests/lib/gguf_writer, slow enough
 * that a long stream takes seconds) as "loc" and "rref", and stories260K
 * from LLMUX_TEST_DATA as "ref".  Then:
 *
 *  - a long greedy stream on loc runs while a reload changes loc to
 *    stories260K with another context and parallel: new requests to loc
 *    answer as stories260K does (= ref), the stream completes intact with
 *    the random model's text (= rref's answer to the same request), and
 *    the old instance is stopped and freed only after the stream ended
 *    (its log line comes after), while ref and rref, unchanged, are never
 *    loaded again (shared across every reload);
 *  - a reload dropping loc: its model is unknown (404 model_not_found),
 *    /v1/models no longer lists it, its instance is freed; adding it back
 *    serves it again and /v1/models lists it;
 *  - reloads whose loc model file does not exist or is not a GGUF file
 *    are refused with the reason in the log and the running config keeps
 *    serving;
 *  - /metrics labels every local family by model@provider across the
 *    reloads; the server exits 0 and (under make check) sanitizer-clean.
 *
 * The stream is known to be in flight at the reload, not assumed: the
 * test waits for its sequence to show in llmux_local_active_sequences
 * before reloading, and checks that the old instance was not yet freed
 * when the new one already answered; should the stream have ended first
 * (a very fast machine), it goes again with a longer one.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/gguf_writer.h"

static struct e2e_proc gw;
static char base[128], root[96]; /* .../v1 and the server's root */
static char *cfg_path, *dir;
static char stories[1024], rand_model[1024], junk_model[1024];

/* loc's settings in the config being written ("" drops loc). */
static void
write_cfg(const char *loc)
{
    char text[8192];
    snprintf(text, sizeof(text),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s/ledger.db\", \"require_keys\": false,\n"
             " \"providers\": {\n"
             "  %s%s"
             "  \"ref\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 256, \"parallel\": 1,\n"
             "   \"models\": {\"s\": {}}},\n"
             "  \"rref\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 4096, \"parallel\": 1,\n"
             "   \"models\": {\"r\": {}}}}}\n",
             dir, loc, loc[0] ? ",\n" : "", stories, rand_model);
    e2e_replace_file(cfg_path, text);
}

/* loc as the random model (the first config) or as stories260K. */
static void
loc_rand(char *buf, size_t len)
{
    snprintf(buf, len,
             "\"loc\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": 4096, \"parallel\": 1,\n"
             "   \"models\": {\"m\": {}}}",
             rand_model);
}

static void
loc_path(char *buf, size_t len, const char *path, int context, int parallel)
{
    snprintf(buf, len,
             "\"loc\": {\"kind\": \"local\", \"model_path\": \"%s\",\n"
             "   \"threads\": 1, \"context\": %d, \"parallel\": %d,\n"
             "   \"models\": {\"m\": {}}}",
             path, context, parallel);
}

static int
log_count(const char *needle)
{
    return e2e_log_count(&gw, needle);
}

/* Waits (bounded) until needle has been logged more than `before` times. */
static int
log_wait(const char *needle, int before)
{
    for (int i = 0; i < 300; i++) {
        if (log_count(needle) > before)
            return 1;
        usleep(50 * 1000);
    }
    return 0;
}

/* SIGHUP, then waits for its verdict: 1 reloaded, 0 rejected, -1 none. */
static int
reload(void)
{
    int ok = log_count("config reloaded"), bad = log_count("config rejected");
    kill(gw.pid, SIGHUP);
    for (int i = 0; i < 600; i++) {
        if (log_count("config reloaded") > ok)
            return 1;
        if (log_count("config rejected") > bad)
            return 0;
        usleep(50 * 1000);
    }
    return -1;
}

/* A greedy chat; returns the status, the answer's content in *text
 * (malloc'd, NULL when none). */
static long
chat(const char *model, const char *prompt, int max_tokens, char **text)
{
    char url[400], body[512];
    snprintf(url, sizeof(url), "%s/chat/completions", base);
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"temperature\":0,\"max_tokens\":%d,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
             model, max_tokens, prompt);
    struct e2e_resp r;
    long st = -1;
    if (text)
        *text = NULL;
    if (e2e_http("POST", url, body, NULL, 120000, &r) == 0) {
        st = r.status;
        json_t *o = json_loads(r.body, 0, NULL);
        const json_t *m = json_object_get(
            json_array_get(json_object_get(o, "choices"), 0), "message");
        const char *c = json_string_value(json_object_get(m, "content"));
        if (text && c)
            *text = strdup(c);
        json_decref(o);
    }
    e2e_resp_free(&r);
    return st;
}

/* Polls (bounded) until model's greedy answer to prompt is want. */
static int
answers_as(const char *model, const char *prompt, const char *want)
{
    for (int i = 0; i < 100; i++) {
        char *t = NULL;
        long st = chat(model, prompt, 16, &t);
        int same = st == 200 && t && want && !strcmp(t, want);
        free(t);
        if (same)
            return 1;
        usleep(50 * 1000);
    }
    return 0;
}

static long
status_of(const char *model)
{
    return chat(model, "hi", 4, NULL);
}

static int
status_becomes(const char *model, long want)
{
    for (int i = 0; i < 100; i++) {
        if (status_of(model) == want)
            return 1;
        usleep(50 * 1000);
    }
    return 0;
}

/* GET root + path; the body (malloc'd) or NULL. */
static char *
get(const char *path)
{
    char url[400];
    snprintf(url, sizeof(url), "%s%s", root, path);
    struct e2e_resp r;
    char *out = NULL;
    if (e2e_http("GET", url, NULL, NULL, 10000, &r) == 0 && r.status == 200)
        out = strdup(r.body);
    e2e_resp_free(&r);
    return out;
}

/* 1 if /v1/models lists id. */
static int
models_has(const char *id)
{
    char *b = get("/v1/models");
    json_t *o = b ? json_loads(b, 0, NULL) : NULL;
    free(b);
    int found = 0;
    const json_t *data = json_object_get(o, "data");
    for (size_t i = 0; i < json_array_size(data); i++)
        if (!strcmp(json_string_value(json_object_get(
                        json_array_get(data, i), "id"))
                        ? json_string_value(json_object_get(
                              json_array_get(data, i), "id"))
                        : "",
                    id))
            found = 1;
    json_decref(o);
    return found;
}

/* The value of the metrics line that starts with series, -1 if none. */
static long long
metric(const char *series)
{
    char *b = get("/metrics");
    long long v = -1;
    size_t n = strlen(series);
    for (const char *p = b; p && *p;) {
        if (!strncmp(p, series, n) && p[n] == ' ') {
            v = atoll(p + n + 1);
            break;
        }
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
    }
    free(b);
    return v;
}

/* ---- the long stream (its own thread) ---------------------------------- */

#define STREAM_PROMPT "Tell me a long story"

struct stream {
    int max_tokens;
    pthread_t t;
    atomic_int done;
    long status;
    char *text;    /* the content deltas joined */
    int events, bad, finish, usage_tokens, done_last;
};

static void *
stream_main(void *arg)
{
    struct stream *s = arg;
    char url[400], body[512];
    snprintf(url, sizeof(url), "%s/chat/completions", base);
    snprintf(body, sizeof(body),
             "{\"model\":\"m\",\"temperature\":0,\"max_tokens\":%d,"
             "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
             s->max_tokens, STREAM_PROMPT);
    struct e2e_resp r;
    s->status = -1;
    if (e2e_http("POST", url, body, NULL, 600000, &r) == 0) {
        s->status = r.status;
        size_t cap = r.body_len + 1, len = 0;
        s->text = calloc(1, cap);
        const char *p = r.body;
        while (s->text && p && (p = strstr(p, "data: ")) != NULL) {
            p += 6;
            const char *e = strstr(p, "\n\n");
            if (!e) {
                s->bad++;
                break;
            }
            if (!strncmp(p, "[DONE]", 6)) {
                s->done_last = e[2] == '\0';
                break;
            }
            s->events++;
            json_t *o = json_loadb(p, (size_t)(e - p), JSON_ALLOW_NUL, NULL);
            if (!o)
                s->bad++;
            const json_t *ch =
                json_array_get(json_object_get(o, "choices"), 0);
            const char *c = json_string_value(json_object_get(
                json_object_get(ch, "delta"), "content"));
            if (c && len + strlen(c) < cap) {
                memcpy(s->text + len, c, strlen(c));
                len += strlen(c);
            }
            if (json_is_string(json_object_get(ch, "finish_reason")))
                s->finish++;
            const json_t *u = json_object_get(o, "usage");
            if (u)
                s->usage_tokens = (int)json_integer_value(
                    json_object_get(u, "completion_tokens"));
            json_decref(o);
            p = e + 2;
        }
    }
    e2e_resp_free(&r);
    atomic_store(&s->done, 1);
    return NULL;
}

static char *ans_rand, *ans_stories; /* 16 greedy tokens of each model */

static void
test_change_while_streaming(void)
{
    char loc[2048];
    char *a = NULL, *b = NULL, *c = NULL;
    T_EQ_INT(chat("m", "Once upon a time", 16, &a), 200);
    T_EQ_INT(chat("s", "Once upon a time", 16, &b), 200);
    T_EQ_INT(chat("r", "Once upon a time", 16, &c), 200);
    T_CHECK(a && b && c);
    if (!a || !b || !c)
        return;
    T_EQ_STR(a, c);           /* loc is the random model, as rref */
    T_CHECK(strcmp(a, b));    /* which answers unlike stories260K */
    ans_rand = a;
    ans_stories = b;
    free(c);
    T_CHECK(models_has("m") && models_has("s") && models_has("r"));

    static const int lengths[] = {600, 1500, 3500};
    struct stream s;
    int in_flight = 0;
    for (int k = 0; k < 3 && !in_flight; k++) {
        memset(&s, 0, sizeof(s));
        s.max_tokens = lengths[k];
        int stopped = log_count("provider loc: local engine stopped");
        pthread_create(&s.t, NULL, stream_main, &s);
        /* its sequence runs on loc's (old) instance */
        int running = 0;
        for (int i = 0; i < 400 && !running && !atomic_load(&s.done); i++) {
            running = metric("llmux_local_active_sequences{model=\"m@loc\"}")
                      == 1;
            if (!running)
                usleep(10 * 1000);
        }
        /* loc becomes stories260K, with another context and parallel */
        loc_path(loc, sizeof(loc), stories, 128, 2);
        write_cfg(loc);
        T_EQ_INT(reload(), 1);
        T_CHECK(answers_as("m", "Once upon a time", ans_stories));
        in_flight = running && !atomic_load(&s.done) &&
                    log_count("provider loc: local engine stopped") == stopped;
        pthread_join(s.t, NULL);
        if (in_flight) {
            /* the old instance goes once its last call (the stream) did */
            T_CHECK(log_wait("provider loc: local engine stopped", stopped));
            break;
        }
        printf("note: the %d-token stream ended before the reload took "
               "effect; again with a longer one\n",
               s.max_tokens);
        free(s.text);
        s.text = NULL;
        loc_rand(loc, sizeof(loc));
        write_cfg(loc);
        T_EQ_INT(reload(), 1);
        T_CHECK(answers_as("m", "Once upon a time", ans_rand));
    }
    T_CHECK(in_flight);
    /* The stream, intact: every event JSON, one finish_reason, the usage
     * chunk, [DONE] last, and the random model's text. */
    T_EQ_INT(s.status, 200);
    T_EQ_INT(s.bad, 0);
    T_EQ_INT(s.finish, 1);
    T_CHECK(s.done_last);
    T_CHECK(s.usage_tokens > 128); /* more than the new loc's context */
    char *want = NULL;
    T_EQ_INT(chat("r", STREAM_PROMPT, s.max_tokens, &want), 200);
    T_CHECK(want && s.text && !strcmp(want, s.text));
    free(want);
    free(s.text);
    /* new requests: stories260K (as ref), parallel 2 */
    T_CHECK(answers_as("m", "Once upon a time", ans_stories));
    /* ref and rref were never loaded again */
    T_EQ_INT(log_count("provider ref: llama"), 1);
    T_EQ_INT(log_count("provider rref: llama"), 1);
    /* metrics, labelled by provider */
    T_CHECK(metric("llmux_local_active_sequences{model=\"m@loc\"}") >= 0);
    T_CHECK(metric("llmux_local_tokens_total{model=\"s@ref\"}") > 0);
    T_CHECK(metric("llmux_local_tokens_total{model=\"r@rref\"}") > 0);
}

static void
test_drop_and_add(void)
{
    char loc[2048];
    int stopped = log_count("provider loc: local engine stopped");
    write_cfg("");
    T_EQ_INT(reload(), 1);
    T_CHECK(status_becomes("m", 404));
    T_CHECK(!models_has("m"));
    T_CHECK(models_has("s"));
    T_EQ_INT(metric("llmux_local_queue_length{model=\"m@loc\"}"), -1);
    /* nothing held it: the instance is freed at once */
    T_CHECK(log_wait("provider loc: local engine stopped", stopped));
    T_CHECK(answers_as("s", "Once upon a time", ans_stories));

    loc_path(loc, sizeof(loc), stories, 256, 1);
    write_cfg(loc);
    T_EQ_INT(reload(), 1);
    T_CHECK(answers_as("m", "Once upon a time", ans_stories));
    T_CHECK(models_has("m"));
    T_CHECK(metric("llmux_local_queue_length{model=\"m@loc\"}") >= 0);
}

static void
test_broken_model_refused(void)
{
    char loc[2048];
    int loaded = log_count("provider loc: llama");
    loc_path(loc, sizeof(loc), "/nonexistent/llmux-missing.gguf", 256, 1);
    write_cfg(loc);
    T_EQ_INT(reload(), 0);
    T_EQ_INT(log_count("config rejected, keeping the current one: provider "
                       "loc: model_path /nonexistent/llmux-missing.gguf: "
                       "No such file or directory"),
             1);
    T_CHECK(answers_as("m", "Once upon a time", ans_stories));

    /* a file that is there but is no model */
    loc_path(loc, sizeof(loc), junk_model, 256, 1);
    write_cfg(loc);
    T_EQ_INT(reload(), 0);
    char needle[1200];
    snprintf(needle, sizeof(needle),
             "config rejected, keeping the current one: provider loc: %s",
             junk_model);
    T_EQ_INT(log_count(needle), 1);
    T_CHECK(answers_as("m", "Once upon a time", ans_stories));
    T_CHECK(models_has("m"));
    T_EQ_INT(log_count("provider loc: llama"), loaded); /* nothing loaded */
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    setenv("LLMUX_LOG", "info", 1); /* the instances' load and stop lines */
    dir = e2e_temp_dir();
    snprintf(stories, sizeof(stories), "%s/models/stories260K.gguf",
             e2e_env("LLMUX_TEST_DATA", "../shared/data"));
    snprintf(rand_model, sizeof(rand_model), "%s/rand.gguf", dir);
    snprintf(junk_model, sizeof(junk_model), "%s/junk.gguf", dir);
    /* ~15 M parameters: some hundreds of tokens a second on one thread */
    struct gguf_w_llama lp = {.n_vocab = 1000, .n_embd = 512, .n_layer = 4,
                              .n_head = 8, .n_head_kv = 8, .n_ff = 1536,
                              .n_ctx = 4096, .type = LE_TYPE_Q8_0,
                              .seed = 7};
    FILE *jf = fopen(junk_model, "w");
    if (jf) {
        fputs("this is not a GGUF file\n", jf);
        fclose(jf);
    }
    cfg_path = e2e_write_temp("reload_local.json", "");
    char loc[2048];
    loc_rand(loc, sizeof(loc));
    if (access(stories, R_OK) != 0 || gguf_w_llama_write(&lp, rand_model) ||
        !jf || !cfg_path) {
        printf("missing %s or could not write the test models\n", stories);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    write_cfg(loc);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", cfg_path, NULL};
    if (e2e_start(&gw, argv, "listening on http://127.0.0.1:", 60000) != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(root, sizeof(root), "http://127.0.0.1:%d", gw.port);
    snprintf(base, sizeof(base), "%s/v1", root);
    T_RUN(test_change_while_streaming);
    T_RUN(test_drop_and_add);
    T_RUN(test_broken_model_refused);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 60000), 0);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(ans_rand);
    free(ans_stories);
    free(cfg_path);
    free(dir);
    curl_global_cleanup();
    return T_END();
}
