/*
 * Graceful shutdown past its deadline: requests still running when the
 * drain bound (LLMUX_DRAIN_MS) ends get a clean error (503 shutting_down,
 * or an error event and [DONE] on a started stream), their rows are
 * logged, and llmux exits 0 promptly with no sanitizer report.
 */
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "harness.h"
#include "lib/e2e.h"

static struct e2e_proc fake, gw;
static char url[256];
static char dbpath[512];

struct call {
    const char *body;
    struct e2e_resp r;
    int rc;
};

static void *
call_main(void *arg)
{
    struct call *c = arg;
    c->rc = e2e_http("POST", url, c->body, NULL, 20000, &c->r);
    return NULL;
}

static long long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
test_deadline(void)
{
    struct call ns = {.body = "{\"model\":\"gpt-4.1\",\"messages\":[{\"role\":"
                              "\"user\",\"content\":\"fake:delay_ms=8000\"}]}"};
    struct call st = {.body = "{\"model\":\"gpt-4.1\",\"stream\":true,"
                              "\"messages\":[{\"role\":\"user\",\"content\":"
                              "\"fake:chunks=200;chunk_delay_ms=100\"}]}"};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, call_main, &ns);
    pthread_create(&t2, NULL, call_main, &st);
    usleep(600 * 1000);
    long long t0 = now_ms();
    int rc = e2e_stop(&gw, SIGTERM, 10000);
    long long took = now_ms() - t0;
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    T_EQ_INT(rc, 0);
    T_CHECK(took < 5000); /* the 300 ms bound, not the upstream's 8 s */
    T_EQ_INT(ns.rc, 0);
    T_EQ_INT(ns.r.status, 503);
    T_CHECK(strstr(ns.r.body, "shutting_down") != NULL);
    T_EQ_INT(st.r.status, 200);
    T_CHECK(strstr(st.r.body, "\"error\"") != NULL);
    T_CHECK(strstr(st.r.body, "data: [DONE]") != NULL);
    e2e_resp_free(&ns.r);
    e2e_resp_free(&st.r);
    sqlite3 *db = NULL;
    long long n = -1;
    if (sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READONLY, NULL) ==
        SQLITE_OK) {
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(db,
                               "SELECT count(*) FROM usage WHERE status = "
                               "503 AND error LIKE '%shut down%'",
                               -1, &q, NULL) == SQLITE_OK &&
            sqlite3_step(q) == SQLITE_ROW)
            n = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
    sqlite3_close(db);
    T_EQ_INT(n, 2);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (e2e_start_fake(&fake) != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    char *dir = e2e_temp_dir();
    snprintf(dbpath, sizeof(dbpath), "%s/ledger.db", dir);
    free(dir);
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2, \"database\": "
             "\"%s\", \"require_keys\": false, \"providers\": {\"fake\": "
             "{\"kind\": \"openai\", \"base_url\": \"http://127.0.0.1:%d/v1\","
             " \"api_key\": \"sk-x\", \"timeout_ms\": 60000, "
             "\"first_byte_timeout_ms\": 60000, \"models\": {\"gpt-4.1\": "
             "{}}}}}\n",
             dbpath, fake.port);
    char *path = e2e_write_temp("shutdown.json", cfg);
    setenv("LLMUX_DRAIN_MS", "300", 1);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    if (e2e_start(&gw, argv, "listening on http://127.0.0.1:", 15000) != 0) {
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/chat/completions",
             gw.port);
    T_RUN(test_deadline);
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    free(path);
    curl_global_cleanup();
    return T_END();
}
