/*
 * The usage ledger end to end (issue 4): the real llmux binary in front of
 * the real fake provider, every check read back from the SQLite file
 * (read-only sqlite3 connections) after the requests.
 *
 *   exact cost        prices 0.42 / 0.10 cached / 2.50 USD per Mtok, usage
 *                     1234 prompt (200 cached) + 567 completion: the row's
 *                     cost_pusd and the x-llmux-cost-usd header are exact
 *   usage             non-stream; stream with and without the client's
 *                     include_usage; no usage upstream -> 'estimated'
 *   failures          502 after every target failed, a passed-through 400,
 *                     a client that hangs up mid-stream (499)
 *   totals            SUM(cost_pusd) over the ledger equals the sum of the
 *                     costs computed here; `llmux usage --format json` and
 *                     GET /v1/usage agree with SQL sums
 *   crash safety      kill -9 during a bounded concurrent load (three
 *                     rounds on one file, killed at 0.4, 0.7, 1.0 s): every
 *                     response the client saw complete has its row; the
 *                     database reopens (read-only here, then llmux again)
 *
 * All of it twice: on SQLite files, then on databases of a private
 * PostgreSQL server (tests/lib/pgtest; read back with psql), when the
 * server binaries are installed (CI: required, LLMUX_REQUIRE_PG).
 *
 * A reply is sent only after its row committed, so rows are read right
 * after the response, without waiting (except the 499, which has no reply).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/pgtest.h"

#define SECRET "sk-upstream-SECRET-ledger-0123456789"
#define ADMIN "adm-ledger-0123456789abcdef"

/* Prices of model "priced" in pUSD per token (USD/Mtok x 1e6). */
#define P_IN 420000LL
#define P_CACHED 100000LL
#define P_OUT 2500000LL

static struct e2e_proc fake, gw;
static char base[128];
static char *dbpath;

/* Every request sent to the main gateway and the cost expected for it
 * (-1: an estimate, computed from the row's own token counts). */
struct sent {
    char id[64];
    long long cost;
};
static struct sent sent[64];
static int n_sent;

static long long
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long
cost_of(long long prompt, long long cached, long long completion)
{
    return (prompt - cached) * P_IN + cached * P_CACHED + completion * P_OUT;
}

/* Exact decimal USD of a pUSD amount, written here independently of
 * pricing/: "0.00187178", at least one decimal. */
static void
usd_text(long long pusd, char *buf, size_t len)
{
    char frac[24];
    snprintf(frac, sizeof(frac), "%012lld", pusd % 1000000000000LL);
    int n = 12;
    while (n > 1 && frac[n - 1] == '0')
        n--;
    frac[n] = '\0';
    snprintf(buf, len, "%lld.%s", pusd / 1000000000000LL, frac);
}

static void
note_sent(const char *id, long long cost)
{
    if (n_sent < (int)(sizeof(sent) / sizeof(sent[0]))) {
        snprintf(sent[n_sent].id, sizeof(sent[n_sent].id), "%s", id);
        sent[n_sent].cost = cost;
        n_sent++;
    }
}

/* ---- the gateway ---------------------------------------------------- */

static char *
write_config(const char *db)
{
    char cfg[4096];
    snprintf(
        cfg, sizeof(cfg),
        "{\n"
        " \"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
        " \"database\": \"%s\", \"require_keys\": false,\n"
        " \"admin_key\": \"" ADMIN "\",\n"
        " \"providers\": {\n"
        "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\",\n"
        "   \"api_key\": \"" SECRET "\", \"timeout_ms\": 20000,\n"
        "   \"connect_timeout_ms\": 2000, \"first_byte_timeout_ms\": 10000,\n"
        "   \"models\": {\"priced\": {\"input_per_mtok\": 0.42,\n"
        "     \"cached_input_per_mtok\": 0.1, \"output_per_mtok\": 2.5}}},\n"
        "  \"bad\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\",\n"
        "   \"api_key\": \"" SECRET "\", \"headers\": {\"X-Fake\": "
        "\"status=503\"},\n"
        "   \"models\": {\"priced\": {\"input_per_mtok\": 0.42, "
        "\"output_per_mtok\": 2.5}}},\n"
        "  \"dead\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:1/v1\",\n"
        "   \"api_key\": \"" SECRET "\", \"connect_timeout_ms\": 1000,\n"
        "   \"models\": {\"priced\": {\"input_per_mtok\": 0.42, "
        "\"output_per_mtok\": 2.5}}}\n"
        " },\n"
        " \"routes\": {\n"
        "  \"main\": {\"policy\": \"priority\", \"targets\": "
        "[\"priced@fake\"]},\n"
        "  \"allbad\": {\"policy\": \"priority\", \"targets\": "
        "[\"priced@bad\", \"priced@dead\"]}\n"
        " },\n"
        " \"failover\": {\"max_attempts\": 3, \"backoff_ms\": 10,\n"
        "  \"circuit_failures\": 100000}\n"
        "}\n",
        db, fake.port, fake.port);
    return e2e_write_temp("ledger.json", cfg);
}

static int
start_llmux(struct e2e_proc *p, const char *cfgpath, char *url, size_t len)
{
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", (char *)cfgpath, NULL};
    int rc = e2e_start(p, argv, "listening on http://127.0.0.1:", 20000);
    if (rc == 0)
        snprintf(url, len, "http://127.0.0.1:%d", p->port);
    return rc;
}

static char *
chat_body(const char *model, const char *content, int stream,
          int include_usage)
{
    json_t *o = json_pack("{s:s,s:[{s:s,s:s}]}", "model", model, "messages",
                          "role", "user", "content", content);
    if (stream)
        json_object_set_new(o, "stream", json_true());
    if (include_usage)
        json_object_set_new(o, "stream_options",
                            json_pack("{s:b}", "include_usage", 1));
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return t;
}

/* POSTs a chat request with X-Request-Id: id to the gateway at url. */
static int
post_chat_to(const char *url0, const char *id, const char *model,
             const char *content, int stream, int include_usage,
             int timeout_ms, struct e2e_resp *r)
{
    char url[256], hid[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", url0);
    snprintf(hid, sizeof(hid), "X-Request-Id: %s", id);
    const char *hdrs[] = {hid, NULL};
    char *b = chat_body(model, content, stream, include_usage);
    int rc = e2e_http("POST", url, b, hdrs, timeout_ms, r);
    free(b);
    return rc;
}

static int
post_chat(const char *id, const char *model, const char *content, int stream,
          int include_usage, struct e2e_resp *r)
{
    return post_chat_to(base, id, model, content, stream, include_usage,
                        30000, r);
}

/* ---- the ledger, read-only ------------------------------------------ */

struct row {
    int found;
    long long status, attempts, stream, prompt, completion, cached, cost,
        latency_ms;
    char provider[64], model[64], route[64], usage_source[32];
    char error[1024];
    int error_null;
};

static sqlite3 *
db_open_ro(const char *path)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "  open %s: %s\n", path,
                db ? sqlite3_errmsg(db) : "?");
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 5000);
    return db;
}

/* The database name of a PostgreSQL URI, else NULL (a SQLite file). */
static const char *
pg_db_name(const char *db)
{
    return strncmp(db, "postgres://", 11) == 0 ? strrchr(db, '/') + 1 : NULL;
}

/* Runs sql on either backend (read-only for SQLite) and hands each row's
 * values as text (NULL for SQL NULL) to cb; the number of rows, or -1. */
typedef void (*row_cb)(void *ud, int ncols, char **vals);

static int
db_rows(const char *db, const char *sql, row_cb cb, void *ud)
{
    if (pg_db_name(db))
        return pgt_query(pg_db_name(db), sql, cb, ud);
    sqlite3 *h = db_open_ro(db);
    if (!h)
        return -1;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "  sql failed (%s): %s\n", sql, sqlite3_errmsg(h));
        sqlite3_close(h);
        return -1;
    }
    int n = 0, rc;
    char *vals[32];
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int nc = sqlite3_column_count(st);
        if (nc > 32)
            nc = 32;
        for (int i = 0; i < nc; i++)
            vals[i] = (char *)sqlite3_column_text(st, i);
        cb(ud, nc, vals);
        n++;
    }
    if (rc != SQLITE_DONE) {
        fprintf(stderr, "  sql failed (%s): %s\n", sql, sqlite3_errmsg(h));
        n = -1;
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

static long long
val_ll(char **vals, int i)
{
    return vals[i] ? atoll(vals[i]) : 0;
}

static void
val_text(char **vals, int i, char *buf, size_t len)
{
    snprintf(buf, len, "%s", vals[i] ? vals[i] : "");
}

static void
row_one(void *ud, int ncols, char **v)
{
    struct row *out = ud;
    if (ncols < 13)
        return;
    out->found++;
    out->status = val_ll(v, 0);
    out->attempts = val_ll(v, 1);
    out->stream = val_ll(v, 2);
    out->prompt = val_ll(v, 3);
    out->completion = val_ll(v, 4);
    out->cached = val_ll(v, 5);
    out->cost = val_ll(v, 6);
    val_text(v, 7, out->provider, sizeof(out->provider));
    val_text(v, 8, out->model, sizeof(out->model));
    val_text(v, 9, out->route, sizeof(out->route));
    val_text(v, 10, out->usage_source, sizeof(out->usage_source));
    out->error_null = v[11] == NULL;
    val_text(v, 11, out->error, sizeof(out->error));
    out->latency_ms = val_ll(v, 12);
}

/* The row of request id rid (our own ids: no quotes) in the database;
 * found = number of rows with that id. */
static void
row_get(const char *db, const char *rid, struct row *out)
{
    memset(out, 0, sizeof(*out));
    char sql[5120];
    snprintf(sql, sizeof(sql),
             "SELECT status, attempts, stream, prompt_tokens,"
             " completion_tokens, cached_tokens, cost_pusd, provider, model,"
             " route, usage_source, error, latency_ms FROM usage WHERE"
             " request_id = '%s'",
             rid);
    db_rows(db, sql, row_one, out);
}

static void
scalar_one(void *ud, int ncols, char **v)
{
    if (ncols > 0)
        *(long long *)ud = v[0] ? atoll(v[0]) : 0;
}

static long long
db_scalar(const char *db, const char *sql)
{
    long long n = -1;
    if (db_rows(db, sql, scalar_one, &n) != 1)
        return -1;
    return n;
}

/* ---- SSE bodies ------------------------------------------------------- */

struct sse {
    int events;     /* data lines, [DONE] included */
    int done_last;  /* the last one was [DONE] */
    int usage_chunks;
    int usage_last; /* the last JSON event carried the usage */
    long long u_prompt, u_completion, u_cached;
    int errors;
    int bad_json;
    char content[4096];
};

static void
sse_parse(const char *body, struct sse *s)
{
    memset(s, 0, sizeof(*s));
    const char *p = body;
    size_t cl = 0;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        s->events++;
        s->done_last = (size_t)(e - p) == 6 && !strncmp(p, "[DONE]", 6);
        if (!s->done_last) {
            json_t *o = json_loadb(p, (size_t)(e - p), 0, NULL);
            if (!o) {
                s->bad_json++;
            } else {
                json_t *u = json_object_get(o, "usage");
                s->usage_last = json_is_object(u);
                if (json_is_object(u)) {
                    s->usage_chunks++;
                    s->u_prompt = json_integer_value(
                        json_object_get(u, "prompt_tokens"));
                    s->u_completion = json_integer_value(
                        json_object_get(u, "completion_tokens"));
                    s->u_cached = json_integer_value(json_object_get(
                        json_object_get(u, "prompt_tokens_details"),
                        "cached_tokens"));
                }
                if (json_object_get(o, "error"))
                    s->errors++;
                const char *c = json_string_value(json_object_get(
                    json_object_get(
                        json_array_get(json_object_get(o, "choices"), 0),
                        "delta"),
                    "content"));
                if (c) {
                    size_t n = strlen(c);
                    if (cl + n < sizeof(s->content)) {
                        memcpy(s->content + cl, c, n + 1);
                        cl += n;
                    }
                }
                json_decref(o);
            }
        }
        p = e;
    }
}

/* ---- tests ------------------------------------------------------------ */

#define EXACT_DIRECTIVES "fake:prompt_tokens=1234;cached=200;completion_tokens=567"
/* (1234-200)*420000 + 200*100000 + 567*2500000 */
#define EXACT_COST 1871780000LL

static void
test_exact_cost(void)
{
    T_EQ_INT(cost_of(1234, 200, 567), EXACT_COST);
    char want[64];
    usd_text(EXACT_COST, want, sizeof(want));
    T_EQ_STR(want, "0.00187178");

    struct e2e_resp r;
    T_EQ_INT(post_chat("exact-1", "main", EXACT_DIRECTIVES, 0, 0, &r), 0);
    T_EQ_INT(r.status, 200);
    char h[128];
    T_EQ_STR(e2e_header(&r, "x-request-id", h, sizeof(h)), "exact-1");
    T_EQ_STR(e2e_header(&r, "x-llmux-cost-usd", h, sizeof(h)), want);
    /* The client's body carries the upstream's usage untouched. */
    json_t *o = json_loads(r.body, 0, NULL);
    json_t *u = json_object_get(o, "usage");
    T_EQ_INT(json_integer_value(json_object_get(u, "prompt_tokens")), 1234);
    T_EQ_INT(json_integer_value(json_object_get(u, "completion_tokens")),
             567);
    json_decref(o);
    e2e_resp_free(&r);
    note_sent("exact-1", EXACT_COST);

    /* The row is there as soon as the client has the reply. */
    struct row w;
    row_get(dbpath, "exact-1", &w);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.cost, EXACT_COST);
    T_EQ_INT(w.prompt, 1234);
    T_EQ_INT(w.cached, 200);
    T_EQ_INT(w.completion, 567);
    T_EQ_INT(w.status, 200);
    T_EQ_INT(w.attempts, 1);
    T_EQ_INT(w.stream, 0);
    T_EQ_STR(w.usage_source, "upstream");
    T_EQ_STR(w.provider, "fake");
    T_EQ_STR(w.model, "priced");
    T_EQ_STR(w.route, "main");
    T_CHECK(w.error_null);

    /* Large counts stay exact: 3e9 tokens is past 32 bits. */
    T_EQ_INT(post_chat("exact-2", "main",
                       "fake:prompt_tokens=999999999;cached=123456789;"
                       "completion_tokens=1000000000",
                       0, 0, &r),
             0);
    T_EQ_INT(r.status, 200);
    long long big = cost_of(999999999, 123456789, 1000000000);
    usd_text(big, want, sizeof(want));
    T_EQ_STR(e2e_header(&r, "x-llmux-cost-usd", h, sizeof(h)), want);
    e2e_resp_free(&r);
    note_sent("exact-2", big);
    row_get(dbpath, "exact-2", &w);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.cost, big);
    T_EQ_INT(w.cached, 123456789);
}

static void
test_stream_usage(void)
{
    struct e2e_resp r;
    struct sse s;
    struct row w;
    char h[128];

    /* The client asks for usage: exactly one usage chunk, the upstream's
     * numbers, and the same numbers in the row. */
    T_EQ_INT(post_chat("stream-iu", "main", EXACT_DIRECTIVES, 1, 1, &r), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(e2e_header(&r, "x-request-id", h, sizeof(h)), "stream-iu");
    sse_parse(r.body, &s);
    T_CHECK(s.done_last);
    T_EQ_INT(s.bad_json, 0);
    T_EQ_INT(s.errors, 0);
    T_EQ_INT(s.usage_chunks, 1);
    T_CHECK(s.usage_last); /* as OpenAI: the last chunk before [DONE] */
    T_EQ_INT(s.u_prompt, 1234);
    T_EQ_INT(s.u_completion, 567);
    T_EQ_INT(s.u_cached, 200);
    T_EQ_STR(s.content, "Hello from fake provider");
    e2e_resp_free(&r);
    note_sent("stream-iu", EXACT_COST);
    row_get(dbpath, "stream-iu", &w);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.stream, 1);
    T_EQ_INT(w.status, 200);
    T_EQ_INT(w.prompt, 1234);
    T_EQ_INT(w.cached, 200);
    T_EQ_INT(w.completion, 567);
    T_EQ_INT(w.cost, EXACT_COST);
    T_EQ_STR(w.usage_source, "upstream");

    /* The client does not ask: llmux asks the upstream anyway, strips the
     * usage chunk, and the row still has the upstream's numbers. */
    T_EQ_INT(post_chat("stream-nu", "main", EXACT_DIRECTIVES, 1, 0, &r), 0);
    T_EQ_INT(r.status, 200);
    sse_parse(r.body, &s);
    T_CHECK(s.done_last);
    T_EQ_INT(s.bad_json, 0);
    T_EQ_INT(s.usage_chunks, 0);
    T_EQ_STR(s.content, "Hello from fake provider");
    T_CHECK(strstr(r.body, "\"usage\"") == NULL);
    e2e_resp_free(&r);
    note_sent("stream-nu", EXACT_COST);
    row_get(dbpath, "stream-nu", &w);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.stream, 1);
    T_EQ_INT(w.prompt, 1234);
    T_EQ_INT(w.cached, 200);
    T_EQ_INT(w.completion, 567);
    T_EQ_INT(w.cost, EXACT_COST);
    T_EQ_STR(w.usage_source, "upstream");
}

static void
test_estimated_usage(void)
{
    struct e2e_resp r;
    struct row w;
    struct sse s;
    /* Non-stream without usage: estimated from the text. */
    T_EQ_INT(post_chat("est-ns", "main",
                       "fake:no_usage;content=twelve words of answer text "
                       "to be estimated from here on",
                       0, 0, &r),
             0);
    T_EQ_INT(r.status, 200);
    T_CHECK(strstr(r.body, "\"usage\"") == NULL);
    char h[128];
    const char *hdr = e2e_header(&r, "x-llmux-cost-usd", h, sizeof(h));
    e2e_resp_free(&r);
    row_get(dbpath, "est-ns", &w);
    T_EQ_INT(w.found, 1);
    T_EQ_STR(w.usage_source, "estimated");
    T_CHECK(w.prompt > 0);
    T_CHECK(w.completion > 0);
    T_EQ_INT(w.cached, 0);
    T_EQ_INT(w.cost, cost_of(w.prompt, 0, w.completion));
    char want[64];
    usd_text(w.cost, want, sizeof(want));
    T_CHECK(hdr && !strcmp(hdr, want));
    note_sent("est-ns", -1);

    /* Stream without usage, even though the client asked for it. */
    T_EQ_INT(post_chat("est-s", "main", "fake:no_usage;chunks=7", 1, 1, &r),
             0);
    T_EQ_INT(r.status, 200);
    sse_parse(r.body, &s);
    T_CHECK(s.done_last);
    T_EQ_INT(s.usage_chunks, 0);
    e2e_resp_free(&r);
    row_get(dbpath, "est-s", &w);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.stream, 1);
    T_EQ_STR(w.usage_source, "estimated");
    T_CHECK(w.prompt > 0);
    T_CHECK(w.completion > 0);
    T_EQ_INT(w.cost, cost_of(w.prompt, 0, w.completion));
    note_sent("est-s", -1);
}

/* Connects a raw socket to the gateway, sends a chat request, reads
 * until `events` SSE events arrived (events 0: waits wait_ms without
 * reading), then closes.  Returns the number of events seen. */
static int
hang_up(const char *id, const char *content, int stream, int events,
        int wait_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)gw.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    char *b = chat_body("main", content, stream, 0);
    char head[512];
    int hl = snprintf(head, sizeof(head),
                      "POST /v1/chat/completions HTTP/1.1\r\n"
                      "Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "X-Request-Id: %s\r\nContent-Length: %zu\r\n\r\n",
                      id, strlen(b));
    int ok = write(fd, head, (size_t)hl) == hl &&
             write(fd, b, strlen(b)) == (ssize_t)strlen(b);
    free(b);
    if (events == 0)
        usleep((useconds_t)wait_ms * 1000);
    int seen = 0;
    char buf[8192];
    long long deadline = mono_ms() + 15000;
    /* Count "data: " across reads (keeping a few bytes of overlap). */
    char carry[8] = "";
    while (ok && seen < events && mono_ms() < deadline) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 200) <= 0)
            continue;
        size_t cl = strlen(carry);
        memcpy(buf, carry, cl);
        ssize_t n = read(fd, buf + cl, sizeof(buf) - 1 - cl);
        if (n <= 0)
            break;
        buf[cl + (size_t)n] = '\0';
        for (char *p = buf; (p = strstr(p, "data: ")) != NULL; p += 6)
            if (p + 6 > buf + cl) /* not already counted in the carry */
                seen++;
        size_t tot = cl + (size_t)n;
        size_t keep = tot < 5 ? tot : 5;
        memcpy(carry, buf + tot - keep, keep);
        carry[keep] = '\0';
    }
    close(fd);
    return seen;
}

static void
test_failed_requests(void)
{
    struct e2e_resp r;
    struct row w;
    char h[128];
    /* Every target fails: 503 from one, connection refused on the other. */
    T_EQ_INT(post_chat("fail-502", "allbad", "hello", 0, 0, &r), 0);
    T_EQ_INT(r.status, 502);
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", h, sizeof(h)), "2");
    T_CHECK(strstr(r.body, SECRET) == NULL);
    e2e_resp_free(&r);
    note_sent("fail-502", 0);
    row_get(dbpath, "fail-502", &w);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.status, 502);
    T_EQ_INT(w.attempts, 2);
    T_EQ_STR(w.route, "allbad");
    T_EQ_INT(w.cost, 0);
    T_CHECK(!w.error_null);
    T_CHECK(strstr(w.error, "priced@bad") != NULL);
    T_CHECK(strstr(w.error, "503") != NULL);
    T_CHECK(strstr(w.error, "priced@dead") != NULL);
    T_CHECK(strstr(w.error, SECRET) == NULL);

    /* A non-retryable 400 from the upstream is passed on and logged. */
    T_EQ_INT(post_chat("fail-400", "main", "fake:status=400", 0, 0, &r), 0);
    T_EQ_INT(r.status, 400);
    T_EQ_STR(e2e_header(&r, "x-llmux-attempts", h, sizeof(h)), "1");
    e2e_resp_free(&r);
    note_sent("fail-400", 0);
    row_get(dbpath, "fail-400", &w);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.status, 400);
    T_EQ_INT(w.attempts, 1);
    T_EQ_STR(w.provider, "fake");
    T_EQ_INT(w.cost, 0);
    T_CHECK(!w.error_null && strstr(w.error, "400") != NULL);

    /* The client hangs up after two events of a long stream: 499.  There
     * is no reply to wait for, so poll the file (bounded). */
    int seen = hang_up("fail-499", "fake:chunks=200;chunk_delay_ms=50", 1,
                       2, 0);
    T_CHECK(seen >= 2);
    long long deadline = mono_ms() + 10000;
    do {
        row_get(dbpath, "fail-499", &w);
        if (w.found)
            break;
        usleep(50 * 1000);
    } while (mono_ms() < deadline);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.status, 499);
    T_EQ_INT(w.stream, 1);
    T_EQ_STR(w.provider, "fake");
    T_CHECK(!w.error_null && strstr(w.error, "disconnect") != NULL);
    /* Well before the 10 s the upstream would have taken. */
    T_CHECK(w.latency_ms < 9000);
    /* The tokens streamed before the hang-up are estimated, not lost. */
    T_CHECK(w.prompt > 0 && w.completion >= 2);
    T_EQ_STR(w.usage_source, "estimated");
    note_sent("fail-499", -1);

    /* A non-stream client that gives up while the upstream thinks: llmux
     * sees the FIN (EV_CLOSED), cancels the upstream and logs a 499 at
     * once, long before the upstream's 2 s. */
    hang_up("fail-499-ns", "fake:delay_ms=2000", 0, 0, 300);
    deadline = mono_ms() + 10000;
    do {
        row_get(dbpath, "fail-499-ns", &w);
        if (w.found)
            break;
        usleep(50 * 1000);
    } while (mono_ms() < deadline);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.status, 499);
    T_EQ_INT(w.stream, 0);
    T_CHECK(w.latency_ms < 1500);
    note_sent("fail-499-ns", -1);

    /* The upstream drops a stream after the first bytes reached the
     * client: an error event and [DONE] to the client, a 502 row with
     * usage estimated from what was streamed. */
    struct sse s;
    T_EQ_INT(post_chat("fail-drop", "main", "fake:drop_after=4;chunks=10", 1,
                       1, &r),
             0);
    T_EQ_INT(r.status, 200);
    sse_parse(r.body, &s);
    T_EQ_INT(s.errors, 1);
    T_CHECK(s.done_last);
    T_EQ_INT(s.usage_chunks, 0);
    e2e_resp_free(&r);
    row_get(dbpath, "fail-drop", &w);
    T_EQ_INT(w.found, 1);
    T_EQ_INT(w.status, 502);
    T_EQ_INT(w.stream, 1);
    T_EQ_STR(w.usage_source, "estimated");
    T_CHECK(w.prompt > 0);
    T_CHECK(w.completion > 0);
    T_CHECK(!w.error_null && strstr(w.error, "priced@fake") != NULL);
    fprintf(stderr, "  dropped stream row: prompt %lld completion %lld "
            "cost %lld\n", w.prompt, w.completion, w.cost);
    note_sent("fail-drop", -1);
}

/* SUM(cost_pusd) equals the sum of the per-request costs computed here,
 * and the ledger holds exactly the requests sent. */
static void
test_ledger_sums(void)
{
    long long want = 0;
    int rows_ok = 1;
    for (int i = 0; i < n_sent; i++) {
        struct row w;
        row_get(dbpath, sent[i].id, &w);
        if (w.found != 1) {
            fprintf(stderr, "  %s: %d rows\n", sent[i].id, w.found);
            rows_ok = 0;
            continue;
        }
        long long c = sent[i].cost;
        if (c < 0) /* estimated usage: priced from the row's own tokens */
            c = cost_of(w.prompt, w.cached, w.completion);
        if (c != w.cost) {
            fprintf(stderr, "  %s: cost %lld, want %lld\n", sent[i].id,
                    w.cost, c);
            rows_ok = 0;
        }
        want += c;
    }
    T_CHECK(rows_ok);
    T_EQ_INT(db_scalar(dbpath, "SELECT count(*) FROM usage"), n_sent);
    T_EQ_INT(db_scalar(dbpath, "SELECT sum(cost_pusd) FROM usage"), want);
    fprintf(stderr, "  %d requests, ledger total %lld pUSD\n", n_sent, want);
}

/* One group of a usage report as SQL computes it. */
struct grp {
    char name[64];
    long long requests, errors, prompt, completion, cached, cost;
};

struct grps {
    struct grp *g;
    int n, max;
};

static void
grp_one(void *ud, int ncols, char **v)
{
    struct grps *x = ud;
    if (ncols < 7 || x->n >= x->max)
        return;
    struct grp *g = &x->g[x->n++];
    val_text(v, 0, g->name, sizeof(g->name));
    g->requests = val_ll(v, 1);
    g->errors = val_ll(v, 2);
    g->prompt = val_ll(v, 3);
    g->completion = val_ll(v, 4);
    g->cached = val_ll(v, 5);
    g->cost = val_ll(v, 6);
}

static int
sql_groups(const char *db, struct grp *g, int max)
{
    struct grps x = {g, 0, max};
    if (db_rows(db,
                "SELECT coalesce(model, ''), count(*), sum(CASE WHEN"
                " status < 200 OR status > 299 THEN 1 ELSE 0 END),"
                " sum(prompt_tokens), sum(completion_tokens),"
                " sum(cached_tokens), sum(cost_pusd) FROM usage GROUP BY 1"
                " ORDER BY 1",
                grp_one, &x) < 0)
        return -1;
    return x.n;
}

/* Compares a {"data":[...]} usage report with the SQL groups. */
static void
check_report(const char *what, const char *text, const struct grp *g, int n)
{
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    T_CHECK(o != NULL);
    if (!o) {
        fprintf(stderr, "  %s: not JSON (%s): %.300s\n", what, je.text, text);
        return;
    }
    json_t *data = json_object_get(o, "data");
    T_EQ_INT(json_array_size(data), n);
    for (int i = 0; i < n; i++) {
        json_t *e = NULL, *x;
        size_t k;
        json_array_foreach(data, k, x) {
            const char *name = json_string_value(json_object_get(x, "group"));
            if (name && !strcmp(name, g[i].name))
                e = x;
        }
        T_CHECK(e != NULL);
        if (!e) {
            fprintf(stderr, "  %s: no group '%s'\n", what, g[i].name);
            continue;
        }
#define GI(k) json_integer_value(json_object_get(e, k))
        T_EQ_INT(GI("requests"), g[i].requests);
        T_EQ_INT(GI("errors"), g[i].errors);
        T_EQ_INT(GI("prompt_tokens"), g[i].prompt);
        T_EQ_INT(GI("completion_tokens"), g[i].completion);
        T_EQ_INT(GI("cached_tokens"), g[i].cached);
        T_EQ_INT(GI("cost_pusd"), g[i].cost);
#undef GI
        /* cost_usd is printed as the exact decimal. */
        char usd[64];
        usd_text(g[i].cost, usd, sizeof(usd));
        T_CHECK(strstr(text, usd) != NULL);
    }
    json_decref(o);
}

static void
test_usage_reports(void)
{
    struct grp g[8];
    int n = sql_groups(dbpath, g, 8);
    T_CHECK(n >= 1);
    if (n < 1)
        return;
    /* `llmux usage` on the live file (WAL: the reader does not block). */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "%s usage --db '%s' --since 1h --group-by model --format json",
             e2e_env("LLMUX_BIN", "build/release/llmux"), dbpath);
    FILE *p = popen(cmd, "r");
    T_CHECK(p != NULL);
    if (!p)
        return;
    char *out = calloc(1, 1 << 16);
    size_t len = fread(out, 1, (1 << 16) - 1, p);
    out[len] = '\0';
    int st = pclose(p);
    T_EQ_INT(st, 0);
    check_report("llmux usage", out, g, n);
    free(out);

    /* GET /v1/usage with the admin key says the same. */
    char url[256];
    snprintf(url, sizeof(url), "%s/v1/usage?since=1h&group_by=model", base);
    const char *hdrs[] = {"Authorization: Bearer " ADMIN, NULL};
    struct e2e_resp r;
    T_EQ_INT(e2e_http("GET", url, NULL, hdrs, 10000, &r), 0);
    T_EQ_INT(r.status, 200);
    check_report("GET /v1/usage", r.body, g, n);
    e2e_resp_free(&r);
}

/* ---- kill -9 under load --------------------------------------------- */

/* Several rounds on one database file: start llmux, load it from
 * CRASH_THREADS threads, kill -9 it mid-load (a different moment each
 * round), check the file. */
#define CRASH_ROUNDS 3
#define CRASH_THREADS 4
#define CRASH_PER_THREAD 200

enum { ST_NONE, ST_STARTED, ST_COMPLETE };

static char crash_base[128];
static atomic_int crash_stop;
static int crash_round;
static atomic_int crash_state[CRASH_ROUNDS][CRASH_THREADS][CRASH_PER_THREAD];

static void
crash_usage(int k, int t, int i, long long *prompt, long long *cached,
            long long *completion)
{
    *prompt = 100 + k * 100000 + t * 1000 + i;
    *cached = i % 50;
    *completion = 10 + 3 * i + k;
}

static void *
crash_main(void *arg)
{
    int t = (int)(intptr_t)arg, k = crash_round;
    for (int i = 0; i < CRASH_PER_THREAD && !atomic_load(&crash_stop); i++) {
        char id[64], content[256];
        long long pr, ca, co;
        crash_usage(k, t, i, &pr, &ca, &co);
        snprintf(id, sizeof(id), "crash-%d-%d-%d", k, t, i);
        int kind = (i + t) % 3; /* 0 non-stream, 1 stream, 2 stream+usage */
        snprintf(content, sizeof(content),
                 "fake:prompt_tokens=%lld;cached=%lld;completion_tokens=%lld;"
                 "%s",
                 pr, ca, co,
                 kind == 0 ? "delay_ms=15" : "chunks=5;chunk_delay_ms=4");
        atomic_store(&crash_state[k][t][i], ST_STARTED);
        struct e2e_resp r;
        int rc = post_chat_to(crash_base, id, "main", content, kind != 0,
                              kind == 2, 20000, &r);
        int complete = 0;
        if (rc == 0 && r.status == 200) {
            if (kind == 0) {
                json_t *o = json_loads(r.body, 0, NULL);
                complete = json_is_array(json_object_get(o, "choices"));
                json_decref(o);
            } else {
                complete = r.body_len >= 14 &&
                           !strcmp(r.body + r.body_len - 14,
                                   "data: [DONE]\n\n");
            }
        }
        e2e_resp_free(&r);
        if (complete)
            atomic_store(&crash_state[k][t][i], ST_COMPLETE);
        else if (rc != 0)
            break; /* llmux is gone */
    }
    return NULL;
}

/* The rows found by crash_check, per request id. */
static int seen_rows[CRASH_ROUNDS][CRASH_THREADS][CRASH_PER_THREAD];

struct crash_rows {
    int k, rows, rows_k, bad_cost, unknown;
    long long sum_rows, sum_want;
};

/* Every row is a request that was sent, with its exact cost. */
static void
crash_row(void *ud, int ncols, char **v)
{
    struct crash_rows *x = ud;
    if (ncols < 3)
        return;
    const char *id = v[0];
    int kk, t, i;
    x->rows++;
    if (!id || sscanf(id, "crash-%d-%d-%d", &kk, &t, &i) != 3 || kk < 0 ||
        kk > x->k || t < 0 || t >= CRASH_THREADS || i < 0 ||
        i >= CRASH_PER_THREAD ||
        atomic_load(&crash_state[kk][t][i]) == ST_NONE) {
        if (x->unknown++ < 5)
            fprintf(stderr, "  unexpected row '%s'\n", id ? id : "");
        return;
    }
    seen_rows[kk][t][i]++;
    x->rows_k += kk == x->k;
    long long pr, ca, co;
    crash_usage(kk, t, i, &pr, &ca, &co);
    long long want = val_ll(v, 1) == 200 ? cost_of(pr, ca, co) : 0;
    long long got = val_ll(v, 2);
    if (got != want && x->bad_cost++ < 5)
        fprintf(stderr, "  %s: cost %lld want %lld\n", id, got, want);
    x->sum_rows += got;
    x->sum_want += want;
}

/* Checks the file after round k's kill; returns the number of crash rows
 * (-1 if the file could not be read). */
static int
crash_check(const char *db, int k)
{
    int started = 0, completed = 0;
    for (int t = 0; t < CRASH_THREADS; t++)
        for (int i = 0; i < CRASH_PER_THREAD; i++) {
            int s = atomic_load(&crash_state[k][t][i]);
            started += s != ST_NONE;
            completed += s == ST_COMPLETE;
        }
    /* The kill came mid-load: something done, not everything. */
    T_CHECK(completed > 0);
    T_CHECK(started < CRASH_THREADS * CRASH_PER_THREAD);

    /* Every complete response of every round so far has its row (ids
     * and counts of every row, matched here). */
    struct crash_rows x = {k, 0, 0, 0, 0, 0, 0};
    memset(seen_rows, 0, sizeof(seen_rows));
    T_CHECK(db_rows(db,
                    "SELECT request_id, status, cost_pusd FROM usage",
                    crash_row, &x) >= 0);
    int missing = 0;
    for (int kk = 0; kk <= k; kk++)
        for (int t = 0; t < CRASH_THREADS; t++)
            for (int i = 0; i < CRASH_PER_THREAD; i++) {
                if (atomic_load(&crash_state[kk][t][i]) != ST_COMPLETE)
                    continue;
                if (seen_rows[kk][t][i] != 1 && missing++ < 5)
                    fprintf(stderr, "  %d rows for complete crash-%d-%d-%d\n",
                            seen_rows[kk][t][i], kk, t, i);
            }
    int rows = x.rows, rows_k = x.rows_k, bad_cost = x.bad_cost,
        unknown = x.unknown;
    long long sum_rows = x.sum_rows, sum_want = x.sum_want;
    if (!pg_db_name(db)) { /* the file itself (PostgreSQL checks its own) */
        sqlite3 *h = db_open_ro(db);
        sqlite3_stmt *ic = NULL;
        if (h &&
            sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &ic, NULL) ==
                SQLITE_OK &&
            sqlite3_step(ic) == SQLITE_ROW)
            T_EQ_STR((const char *)sqlite3_column_text(ic, 0), "ok");
        else
            T_CHECK(!"integrity_check ran");
        sqlite3_finalize(ic);
        sqlite3_close(h);
    }
    fprintf(stderr,
            "  round %d, kill -9 after %d ms: %d sent, %d complete, %d rows, "
            "%d in flight at the kill, %d complete without a row\n",
            k, 400 + 300 * k, started, completed, rows_k, started - completed,
            missing);
    T_EQ_INT(missing, 0);
    T_EQ_INT(unknown, 0);
    T_EQ_INT(bad_cost, 0);
    T_CHECK(rows_k >= completed && rows_k <= started);
    T_EQ_INT(sum_rows, sum_want);
    return rows;
}

static char crash_db[512]; /* a file of its own, or a PostgreSQL database */

static void
test_kill9_under_load(void)
{
    const char *db = crash_db;
    memset(crash_state, 0, sizeof(crash_state));
    char *cfg = write_config(db);
    int rows = -1;
    for (int k = 0; k < CRASH_ROUNDS; k++) {
        /* Rounds after the first also show llmux reopens a killed file. */
        struct e2e_proc cg;
        T_EQ_INT(start_llmux(&cg, cfg, crash_base, sizeof(crash_base)), 0);
        if (cg.pid <= 0)
            break;
        crash_round = k;
        atomic_store(&crash_stop, 0);
        pthread_t th[CRASH_THREADS];
        for (int t = 0; t < CRASH_THREADS; t++)
            pthread_create(&th[t], NULL, crash_main, (void *)(intptr_t)t);
        usleep((useconds_t)(400 + 300 * k) * 1000);
        atomic_store(&crash_stop, 1);
        kill(cg.pid, SIGKILL);
        for (int t = 0; t < CRASH_THREADS; t++)
            pthread_join(th[t], NULL);
        T_EQ_INT(e2e_stop(&cg, SIGKILL, 2000), -1); /* died of the signal */
        rows = crash_check(db, k);
    }

    /* llmux opens the file again, keeps the rows and adds new ones, and
     * stops cleanly. */
    struct e2e_proc again;
    char url[128];
    T_EQ_INT(start_llmux(&again, cfg, url, sizeof(url)), 0);
    if (again.pid > 0) {
        struct e2e_resp r;
        T_EQ_INT(post_chat_to(url, "after-restart", "main", EXACT_DIRECTIVES,
                              0, 0, 20000, &r),
                 0);
        T_EQ_INT(r.status, 200);
        e2e_resp_free(&r);
        struct row w;
        row_get(db, "after-restart", &w);
        T_EQ_INT(w.found, 1);
        T_EQ_INT(w.cost, EXACT_COST);
        T_EQ_INT(db_scalar(db, "SELECT count(*) FROM usage WHERE request_id "
                               "LIKE 'crash-%'"),
                 rows);
        T_EQ_INT(e2e_stop(&again, SIGTERM, 10000), 0);
    }
    free(cfg);
}

/* The suite on dbpath (and crash_db for the kill -9 rounds). */
static void
run_suite(void)
{
    n_sent = 0;
    char *cfg = write_config(dbpath);
    if (!cfg || start_llmux(&gw, cfg, base, sizeof(base)) != 0) {
        fprintf(stderr, "could not start llmux on %s\n", dbpath);
        T_CHECK(0);
        free(cfg);
        return;
    }
    T_RUN(test_exact_cost);
    T_RUN(test_stream_usage);
    T_RUN(test_estimated_usage);
    T_RUN(test_failed_requests);
    T_RUN(test_ledger_sums);
    T_RUN(test_usage_reports);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
    T_RUN(test_kill9_under_load);
    free(cfg);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    signal(SIGPIPE, SIG_IGN);
    if (e2e_start_fake(&fake) != 0) {
        fprintf(stderr, "could not start the fake provider\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    /* SQLite files, then (when the server binaries are installed; CI
     * requires it) databases on a private PostgreSQL server: the same
     * checks, read back with SQL from the other store. */
    char *dir = e2e_temp_dir();
    dbpath = malloc(600);
    snprintf(dbpath, 600, "%s/ledger.db", dir);
    snprintf(crash_db, sizeof(crash_db), "%s/crash.db", dir);
    free(dir);
    fprintf(stderr, "-- SQLite\n");
    run_suite();
    if (pgt_start() == 0 && pgt_createdb("llmux_ledger", dbpath, 600) == 0 &&
        pgt_createdb("llmux_crash", crash_db, sizeof(crash_db)) == 0) {
        fprintf(stderr, "-- PostgreSQL\n");
        run_suite();
    } else {
        fprintf(stderr, "test_ledger_e2e: PostgreSQL not available: SQLite"
                        " only%s\n",
                getenv("LLMUX_REQUIRE_PG") ? " (required: failing)" : "");
        T_CHECK(!getenv("LLMUX_REQUIRE_PG"));
    }
    pgt_stop();
    e2e_stop(&fake, SIGTERM, 5000);
    free(dbpath);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
