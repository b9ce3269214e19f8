/*
 * SIGHUP reload end to end: a valid new config takes effect without a
 * restart (a new route answers, a changed route goes to its new target), a
 * request in flight across the reload completes, a bad config is rejected
 * with a log line and the old one keeps serving, and so is a local
 * provider whose model file does not exist.  The "log" block applies on
 * SIGHUP too: access lines move to a new log.file, change format, go back
 * to stderr, and a log.file that cannot be opened is reported while lines
 * keep going where they went.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "harness.h"
#include "lib/e2e.h"

static struct e2e_proc fake, gw;
static char url[256];
static char *cfg_path;

/* The config with routes and, when log is not "", a "log" block. */
static void
write_cfg_log(const char *routes, const char *log)
{
    char text[4096];
    snprintf(text, sizeof(text),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \":memory:\", \"require_keys\": false,\n"
             " %s%s\n", log, log[0] ? "," : "");
    size_t used = strlen(text);
    snprintf(text + used, sizeof(text) - used,
             " \"providers\": {\n"
             "  \"a\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\", \"api_key\": \"sk-a\",\n"
             "        \"models\": {\"gpt-4.1\": {}}},\n"
             "  \"b\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\", \"api_key\": \"sk-b\",\n"
             "        \"models\": {\"gpt-4.1\": {}}}},\n"
             " \"routes\": {%s}}\n",
             fake.port, fake.port, routes);
    e2e_replace_file(cfg_path, text);
}

static void
write_cfg(const char *routes)
{
    write_cfg_log(routes, "");
}

/* POSTs to model; returns the status and the x-llmux-provider in prov. */
static long
chat(const char *model, const char *content, char *prov, size_t plen)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"%s\"}]}",
             model, content);
    struct e2e_resp r;
    long st = -1;
    if (e2e_http("POST", url, body, NULL, 15000, &r) == 0)
        st = r.status;
    if (prov && !e2e_header(&r, "x-llmux-provider", prov, plen))
        prov[0] = '\0';
    e2e_resp_free(&r);
    return st;
}

/* Polls (bounded) until model answers with want_status from provider. */
static int
wait_for(const char *model, long want_status, const char *want_prov)
{
    for (int i = 0; i < 100; i++) {
        char prov[64] = "";
        long st = chat(model, "hi", prov, sizeof(prov));
        if (st == want_status && (!want_prov || !strcmp(prov, want_prov)))
            return 1;
        usleep(50 * 1000);
    }
    return 0;
}

static int
log_has(const char *needle)
{
    return e2e_log_count(&gw, needle) > 0;
}

/* Lines of file path holding needle (0 when it cannot be read). */
static int
file_count(const char *path, const char *needle)
{
    struct e2e_proc p;
    memset(&p, 0, sizeof(p));
    snprintf(p.log_path, sizeof(p.log_path), "%s", path);
    return e2e_log_count(&p, needle);
}

/* Waits (bounded: the line follows the reply) until file path holds
 * needle n times; then the count. */
static int
wait_file(const char *path, const char *needle, int n)
{
    for (int i = 0; i < 200 && file_count(path, needle) < n; i++)
        usleep(20 * 1000);
    return file_count(path, needle);
}

/* Waits (bounded) until the gateway's log holds needle n times. */
static int
wait_log(const char *needle, int n)
{
    for (int i = 0; i < 200; i++) {
        if (e2e_log_count(&gw, needle) >= n)
            return 1;
        usleep(20 * 1000);
    }
    return 0;
}

static void *
slow_main(void *arg)
{
    long *st = arg;
    *st = chat("r1", "fake:delay_ms=800", NULL, 0);
    return NULL;
}

static void
test_reload(void)
{
    char prov[64];
    T_EQ_INT(chat("r1", "hi", prov, sizeof(prov)), 200);
    T_EQ_STR(prov, "a");
    T_EQ_INT(chat("r2", "hi", NULL, 0), 404);

    /* A request in flight across the reload finishes on its old config. */
    pthread_t t;
    long slow = 0;
    pthread_create(&t, NULL, slow_main, &slow);
    usleep(200 * 1000);
    write_cfg("\"r1\": {\"targets\": [\"gpt-4.1@b\"]}, "
              "\"r2\": {\"targets\": [\"gpt-4.1@a\"]}");
    kill(gw.pid, SIGHUP);
    T_CHECK(wait_for("r2", 200, "a"));
    T_CHECK(wait_for("r1", 200, "b"));
    pthread_join(t, NULL);
    T_EQ_INT(slow, 200);
    T_CHECK(log_has("config reloaded"));

    /* A broken file: rejected, logged with FILE:LINE:COL, old config kept. */
    FILE *f = fopen(cfg_path, "w");
    fputs("{\"listen\": \"127.0.0.1:0\", \"routes\": {\"r1\": ", f);
    fclose(f);
    kill(gw.pid, SIGHUP);
    int seen = 0;
    for (int i = 0; i < 100 && !seen; i++) {
        seen = log_has("config rejected");
        usleep(20 * 1000);
    }
    T_CHECK(seen);
    T_EQ_INT(chat("r2", "hi", prov, sizeof(prov)), 200);
    T_EQ_STR(prov, "a");

    /* A local provider whose model does not load: refused naming the
     * provider and the file, old config kept (test_reload_local_e2e.c
     * reloads local providers that do load). */
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"listen\": \"127.0.0.1:0\", \"database\": \":memory:\", "
             "\"require_keys\": false, \"providers\": {\"l\": {\"kind\": "
             "\"local\", \"model_path\": \"/nonexistent.gguf\"}}}\n");
    f = fopen(cfg_path, "w");
    fputs(text, f);
    fclose(f);
    kill(gw.pid, SIGHUP);
    seen = 0;
    for (int i = 0; i < 100 && !seen; i++) {
        seen = log_has("config rejected, keeping the current one: "
                       "provider l: model_path /nonexistent.gguf: No such "
                       "file");
        usleep(20 * 1000);
    }
    T_CHECK(seen);
    T_EQ_INT(chat("r2", "hi", NULL, 0), 200);

    /* Many reloads while requests run: no crash, every request answers. */
    write_cfg("\"r1\": {\"targets\": [\"gpt-4.1@a\"]}, "
              "\"r2\": {\"targets\": [\"gpt-4.1@b\"]}");
    int ok = 0;
    for (int i = 0; i < 40; i++) {
        if (i % 4 == 0)
            kill(gw.pid, SIGHUP);
        ok += chat(i & 1 ? "r1" : "r2", "hi", NULL, 0) == 200;
    }
    T_EQ_INT(ok, 40);
}

/* log.file, log.format: changed by SIGHUP, applied at once. */
static void
test_reload_logs(void)
{
    const char *routes = "\"r1\": {\"targets\": [\"gpt-4.1@a\"]}";
    char *dir = e2e_temp_dir();
    char a[512], b[512], blk[1200];
    snprintf(a, sizeof(a), "%s/access-a.log", dir);
    snprintf(b, sizeof(b), "%s/access-b.log", dir);
    const char *json_ok = "\"status\":200,";
    /* stderr -> a file (json) */
    snprintf(blk, sizeof(blk), "\"log\": {\"file\": \"%s\"}", a);
    write_cfg_log(routes, blk);
    kill(gw.pid, SIGHUP);
    T_CHECK(wait_log("log.file is now", 1));
    T_EQ_INT(chat("r1", "hi", NULL, 0), 200);
    T_EQ_INT(wait_file(a, json_ok, 1), 1);
    /* -> another file, logfmt: the first gets nothing more */
    snprintf(blk, sizeof(blk),
             "\"log\": {\"file\": \"%s\", \"format\": \"logfmt\"}", b);
    write_cfg_log(routes, blk);
    kill(gw.pid, SIGHUP);
    T_CHECK(wait_log("log.file is now", 2));
    T_CHECK(wait_log("log.format is now logfmt", 1));
    T_EQ_INT(chat("r1", "hi", NULL, 0), 200);
    T_EQ_INT(wait_file(b, " status=200 ", 1), 1);
    T_EQ_INT(file_count(b, json_ok), 0);
    T_EQ_INT(file_count(a, "status"), 1);
    /* a file that cannot be opened: said so, lines stay in b */
    snprintf(blk, sizeof(blk),
             "\"log\": {\"file\": \"%s/no-such-dir/x.log\", "
             "\"format\": \"logfmt\"}",
             dir);
    write_cfg_log(routes, blk);
    kill(gw.pid, SIGHUP);
    T_CHECK(wait_log("no-such-dir/x.log: No such file", 1));
    T_EQ_INT(chat("r1", "hi", NULL, 0), 200);
    T_EQ_INT(wait_file(b, " status=200 ", 2), 2);
    /* no log.file: back to stderr, json */
    int before = e2e_log_count(&gw, json_ok);
    write_cfg_log(routes, "\"log\": {\"format\": \"json\"}");
    kill(gw.pid, SIGHUP);
    T_CHECK(wait_log("log.file is now stderr", 1));
    T_CHECK(wait_log("log.format is now json", 1));
    T_EQ_INT(chat("r1", "hi", NULL, 0), 200);
    T_CHECK(wait_log(json_ok, before + 1));
    T_EQ_INT(file_count(b, "status"), 2);
    free(dir);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (e2e_start_fake(&fake) != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    cfg_path = e2e_write_temp("reload.json", "");
    write_cfg("\"r1\": {\"targets\": [\"gpt-4.1@a\"]}");
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", cfg_path, NULL};
    if (e2e_start(&gw, argv, "listening on http://127.0.0.1:", 15000) != 0) {
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/chat/completions",
             gw.port);
    T_RUN(test_reload);
    T_RUN(test_reload_logs);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 15000), 0);
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(cfg_path);
    curl_global_cleanup();
    return T_END();
}
