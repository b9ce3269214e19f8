/* test_otel_e2e: the real llmux binary, tests/fake_provider and an OTLP
 * receiver in this process (a small HTTP/1.1 server on a kernel-chosen
 * 127.0.0.1 port, on its own thread, that keeps every POSTed body).
 *
 * Checks: a request that fails over (503 from one target, then 200) is
 * one SERVER span with two CLIENT children in its trace, parent links
 * right, the targets, statuses, outcomes and the retry reason as
 * attributes, ids random hex of the right length; a client traceparent
 * puts the request in the client's trace under its span, and one with
 * the sampled flag off is not exported; sample_ratio 0 exports nothing;
 * with a stalled collector and a one-span queue, requests still answer
 * and the drops are counted in llmux_otel_dropped_spans_total, drops +
 * exports adding up to the spans made; requests refused before routing
 * (401, 400, 403, 404, 413 from the headers, 429) each get a SERVER span
 * with their status and refusal code, joining a client's trace and
 * following its sampled flag; a span starts when the request arrived
 * (its head, answered with 100 Continue before the body is sent), not
 * when it was refused or routed; a SIGHUP applies a new otel block at
 * once (on, changed, off).  Bounded: every wait has a limit.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"
#include "lib/raw_http.h"

#define SECRET "sk-upstream-SECRET-otel-0123456789"
#define CLIENT_TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define CLIENT_SPAN "00f067aa0ba902b7"

/* ---- the receiver ---------------------------------------------------- */

struct receiver {
    int fd, port;
    pthread_t thread;
    atomic_int stop;
    atomic_int stall_ms; /* wait this long before answering each POST */
    pthread_mutex_t mu;
    json_t *spans;  /* every span received, with "_service" added */
    int posts;
};

static long long
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads one request from c (bounded: 5 s); the body as malloc'd text. */
static char *
read_request(int c, char *path, size_t pathlen)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    long long deadline = mono_ms() + 5000;
    long clen = -1;
    char *body = NULL;
    while (buf && mono_ms() < deadline) {
        struct pollfd pf = {.fd = c, .events = POLLIN};
        if (poll(&pf, 1, 200) <= 0)
            continue;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t k = read(c, buf + n, cap - n);
        if (k <= 0)
            break;
        n += (size_t)k;
        buf[n] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (!end)
            continue;
        if (clen < 0) {
            const char *cl = strcasestr(buf, "\r\ncontent-length:");
            clen = cl ? atol(cl + 17) : 0;
            sscanf(buf, "%*s %255s", path);
            (void)pathlen;
        }
        size_t head = (size_t)(end + 4 - buf);
        if (n >= head + (size_t)clen) {
            body = strndup(end + 4, (size_t)clen);
            break;
        }
    }
    free(buf);
    return body;
}

static void
keep(struct receiver *rv, const char *body)
{
    json_t *o = json_loads(body, 0, NULL);
    pthread_mutex_lock(&rv->mu);
    rv->posts++;
    size_t i, j, k;
    json_t *rs, *ss, *sp;
    json_array_foreach(json_object_get(o, "resourceSpans"), i, rs) {
        const char *svc = NULL;
        json_t *a;
        json_array_foreach(json_object_get(json_object_get(rs, "resource"),
                                           "attributes"),
                           j, a) {
            if (!strcmp(json_string_value(json_object_get(a, "key")) ?: "",
                        "service.name"))
                svc = json_string_value(json_object_get(
                    json_object_get(a, "value"), "stringValue"));
        }
        json_array_foreach(json_object_get(rs, "scopeSpans"), j, ss) {
            json_array_foreach(json_object_get(ss, "spans"), k, sp) {
                json_t *c = json_deep_copy(sp);
                json_object_set_new(c, "_service", json_string(svc ?: ""));
                json_array_append_new(rv->spans, c);
            }
        }
    }
    pthread_mutex_unlock(&rv->mu);
    json_decref(o);
}

static void *
receiver_main(void *arg)
{
    struct receiver *rv = arg;
    while (!atomic_load(&rv->stop)) {
        struct pollfd pf = {.fd = rv->fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        int c = accept(rv->fd, NULL, NULL);
        if (c < 0)
            continue;
        char path[256] = "";
        char *body = read_request(c, path, sizeof(path));
        int stall = atomic_load(&rv->stall_ms);
        if (stall > 0)
            usleep((useconds_t)stall * 1000);
        const char *ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json"
                         "\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
                         "{}";
        const char *bad = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                          "Connection: close\r\n\r\n";
        int good = body && !strcmp(path, "/v1/traces");
        if (good)
            keep(rv, body);
        const char *reply = good ? ok : bad;
        ssize_t w = write(c, reply, strlen(reply));
        (void)w;
        free(body);
        close(c);
    }
    return NULL;
}

static int
receiver_start(struct receiver *rv)
{
    memset(rv, 0, sizeof(*rv));
    pthread_mutex_init(&rv->mu, NULL);
    rv->spans = json_array();
    rv->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (rv->fd < 0 || bind(rv->fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(rv->fd, 64) != 0 ||
        getsockname(rv->fd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    rv->port = ntohs(a.sin_port);
    return pthread_create(&rv->thread, NULL, receiver_main, rv);
}

static void
receiver_stop(struct receiver *rv)
{
    atomic_store(&rv->stop, 1);
    pthread_join(rv->thread, NULL);
    close(rv->fd);
    json_decref(rv->spans);
    pthread_mutex_destroy(&rv->mu);
}

static size_t
n_spans(struct receiver *rv)
{
    pthread_mutex_lock(&rv->mu);
    size_t n = json_array_size(rv->spans);
    pthread_mutex_unlock(&rv->mu);
    return n;
}

/* Waits (bounded) until at least n spans arrived. */
static int
wait_spans(struct receiver *rv, size_t n, int timeout_ms)
{
    long long deadline = mono_ms() + timeout_ms;
    while (mono_ms() < deadline) {
        if (n_spans(rv) >= n)
            return 1;
        usleep(50 * 1000);
    }
    return n_spans(rv) >= n;
}

/* ---- helpers ----------------------------------------------------------- */

static struct e2e_proc fake;
static struct receiver rv;

static char cfg_file[512]; /* the last gateway's config file */

/* The gateway's config with keys (JSON members) and otel (a block, or
 * NULL for none) into cfg. */
static void
gw_config(char *cfg, size_t cap, const char *dir, const char *otel,
          const char *keys)
{
    char ob[600] = "";
    if (otel)
        snprintf(ob, sizeof(ob), " \"otel\": %s,\n", otel);
    snprintf(
        cfg, cap,
        "{\"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
        " \"database\": \"%s/otel.db\", %s,\n"
        "%s"
        " \"providers\": {\n"
        "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"api_key\": \"" SECRET "\",\n"
        "   \"models\": {\"m\": {\"input_per_mtok\": 1, "
        "\"output_per_mtok\": 2}}},\n"
        "  \"bad\": {\"kind\": \"openai\", \"base_url\": "
        "\"http://127.0.0.1:%d/v1\", \"api_key\": \"" SECRET "\",\n"
        "   \"headers\": {\"X-Fake\": \"status=503\"},\n"
        "   \"models\": {\"m\": {\"input_per_mtok\": 1, "
        "\"output_per_mtok\": 2}}}},\n"
        " \"routes\": {\"over\": {\"policy\": \"priority\", \"targets\": "
        "[\"m@bad\", \"m@fake\"]}},\n"
        " \"failover\": {\"max_attempts\": 2, \"backoff_ms\": 0,\n"
        "  \"circuit_failures\": 1000}}\n",
        dir, keys, ob, fake.port, fake.port);
}

static int
start_gw_keys(struct e2e_proc *gw, const char *otel, const char *keys,
              char *base, size_t baselen)
{
    char cfg[4096];
    char *dir = e2e_temp_dir();
    gw_config(cfg, sizeof(cfg), dir, otel, keys);
    free(dir);
    char *path = e2e_write_temp("otel.json", cfg);
    if (path)
        snprintf(cfg_file, sizeof(cfg_file), "%s", path);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = path ? e2e_start(gw, argv, "listening on http://127.0.0.1:",
                              20000)
                  : -1;
    free(path);
    if (rc == 0)
        snprintf(base, baselen, "http://127.0.0.1:%d", gw->port);
    return rc;
}

static int
start_gw(struct e2e_proc *gw, const char *otel, char *base, size_t baselen)
{
    return start_gw_keys(gw, otel, "\"require_keys\": false", base,
                         baselen);
}

/* POST body to /v1/chat/completions with key, x-request-id rid and
 * traceparent (each NULL: none); the status. */
static long
post(const char *base, const char *key, const char *rid,
     const char *traceparent, const char *body)
{
    char url[256], ah[200], rh[100], tp[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", base);
    snprintf(ah, sizeof(ah), "Authorization: Bearer %s", key ?: "");
    snprintf(rh, sizeof(rh), "X-Request-Id: %s", rid ?: "");
    snprintf(tp, sizeof(tp), "traceparent: %s", traceparent ?: "");
    const char *h[4] = {NULL, NULL, NULL, NULL};
    int n = 0;
    if (rid)
        h[n++] = rh;
    if (key)
        h[n++] = ah;
    if (traceparent)
        h[n++] = tp;
    struct e2e_resp r;
    long st = e2e_http("POST", url, body, h, 20000, &r) == 0 ? r.status : -1;
    e2e_resp_free(&r);
    return st;
}

static long
chat(const char *base, const char *model, const char *traceparent)
{
    char body[256];
    snprintf(body, sizeof(body),
             "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"trace me\"}]}",
             model);
    return post(base, NULL, NULL, traceparent, body);
}

static const char *
sstr(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* The attribute key of span s: its string value, or its intValue as a
 * number (-1 if absent). */
static const char *
attr_str(const json_t *s, const char *key)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(s, "attributes"), i, a) {
        if (!strcmp(sstr(a, "key") ?: "", key))
            return sstr(json_object_get(a, "value"), "stringValue");
    }
    return NULL;
}

static long long
attr_int(const json_t *s, const char *key)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(s, "attributes"), i, a) {
        if (!strcmp(sstr(a, "key") ?: "", key)) {
            const char *v = sstr(json_object_get(a, "value"), "intValue");
            return v ? atoll(v) : -1;
        }
    }
    return -1;
}

static int
is_hex(const char *s, size_t n)
{
    if (!s || strlen(s) != n)
        return 0;
    int nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
        nonzero |= s[i] != '0';
    }
    return nonzero;
}

/* The first SERVER span (with request_id, when given); rv.mu held. */
static json_t *
find_root(const char *request_id)
{
    size_t i;
    json_t *s;
    json_array_foreach(rv.spans, i, s) {
        const char *id = attr_str(s, "llmux.request_id");
        if (json_integer_value(json_object_get(s, "kind")) == 2 && id &&
            (!request_id || !strcmp(id, request_id)))
            return s;
    }
    return NULL;
}

static long long
metric(const char *base, const char *line_prefix)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/metrics", base);
    struct e2e_resp r;
    long long v = -1;
    if (e2e_http("GET", url, NULL, NULL, 10000, &r) == 0 && r.body) {
        char want[256];
        snprintf(want, sizeof(want), "\n%s", line_prefix);
        const char *p = strstr(r.body, want);
        if (p)
            v = atoll(p + strlen(want));
    }
    e2e_resp_free(&r);
    return v;
}

/* ---- tests ------------------------------------------------------------- */

static void
test_spans_and_links(void)
{
    char otel[256], base[128];
    snprintf(otel, sizeof(otel),
             "{\"endpoint\": \"http://127.0.0.1:%d/v1/traces\", "
             "\"sample_ratio\": 1.0, \"queue\": 64, \"service_name\": "
             "\"llmux-test\"}",
             rv.port);
    struct e2e_proc gw;
    T_EQ_INT(start_gw(&gw, otel, base, sizeof(base)), 0);
    /* Fails over: bad (503) then fake. */
    T_EQ_INT(chat(base, "over", NULL), 200);
    T_CHECK(wait_spans(&rv, 3, 10000));
    T_EQ_INT(n_spans(&rv), 3);
    pthread_mutex_lock(&rv.mu);
    json_t *root = find_root(NULL);
    T_CHECK(root != NULL);
    const char *trace = sstr(root, "traceId"), *rid = sstr(root, "spanId");
    T_CHECK(is_hex(trace, 32) && is_hex(rid, 16));
    T_CHECK(json_object_get(root, "parentSpanId") == NULL);
    T_EQ_STR(sstr(root, "_service"), "llmux-test");
    T_EQ_STR(sstr(root, "name"), "POST /v1/chat/completions");
    T_EQ_INT(attr_int(root, "http.response.status_code"), 200);
    T_EQ_INT(attr_int(root, "llmux.attempts"), 2);
    T_EQ_STR(attr_str(root, "llmux.route"), "over");
    T_EQ_STR(attr_str(root, "llmux.provider"), "fake");
    T_CHECK(attr_int(root, "gen_ai.usage.input_tokens") > 0);
    T_CHECK(attr_str(root, "llmux.cost_usd") != NULL);
    T_CHECK(atoll(sstr(root, "endTimeUnixNano") ?: "0") >=
            atoll(sstr(root, "startTimeUnixNano") ?: "1"));
    /* Two children of the root, in its trace: bad first, then fake. */
    size_t i;
    json_t *s;
    int kids = 0, saw_bad = 0, saw_fake = 0;
    json_array_foreach(rv.spans, i, s) {
        if (s == root)
            continue;
        kids++;
        T_EQ_INT(json_integer_value(json_object_get(s, "kind")), 3);
        T_EQ_STR(sstr(s, "traceId"), trace);
        T_EQ_STR(sstr(s, "parentSpanId"), rid);
        T_CHECK(is_hex(sstr(s, "spanId"), 16) &&
                strcmp(sstr(s, "spanId"), rid));
        const char *tg = attr_str(s, "llmux.target");
        if (tg && !strcmp(tg, "m@bad")) {
            saw_bad++;
            T_EQ_INT(attr_int(s, "http.response.status_code"), 503);
            T_EQ_INT(attr_int(s, "llmux.attempt"), 1);
            T_CHECK(attr_str(s, "llmux.retry_reason") == NULL);
            T_EQ_INT(json_integer_value(json_object_get(
                         json_object_get(s, "status"), "code")),
                     2);
        } else if (tg && !strcmp(tg, "m@fake")) {
            saw_fake++;
            T_EQ_INT(attr_int(s, "http.response.status_code"), 200);
            T_EQ_INT(attr_int(s, "llmux.attempt"), 2);
            T_EQ_STR(attr_str(s, "llmux.outcome"), "ok");
            /* Retried because the one before failed with its status. */
            T_EQ_STR(attr_str(s, "llmux.retry_reason"),
                     "upstream error status");
        }
    }
    T_EQ_INT(kids, 2);
    T_EQ_INT(saw_bad, 1);
    T_EQ_INT(saw_fake, 1);
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);

    /* The client's trace: joined under its span. */
    T_EQ_INT(chat(base, "m@fake",
                  "00-" CLIENT_TRACE "-" CLIENT_SPAN "-01"),
             200);
    T_CHECK(wait_spans(&rv, 2, 10000));
    pthread_mutex_lock(&rv.mu);
    root = find_root(NULL);
    T_CHECK(root != NULL);
    T_EQ_STR(sstr(root, "traceId"), CLIENT_TRACE);
    T_EQ_STR(sstr(root, "parentSpanId"), CLIENT_SPAN);
    T_CHECK(strcmp(sstr(root, "spanId") ?: "", CLIENT_SPAN) != 0);
    json_array_foreach(rv.spans, i, s) {
        T_EQ_STR(sstr(s, "traceId"), CLIENT_TRACE);
    }
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);

    /* Sampled flag off: not exported.  A malformed header: a new trace
     * (sampled by the ratio, 1 here). */
    T_EQ_INT(chat(base, "m@fake", "00-" CLIENT_TRACE "-" CLIENT_SPAN "-00"),
             200);
    T_EQ_INT(chat(base, "m@fake", "00-" CLIENT_TRACE "-0000000000000000-01"),
             200);
    T_CHECK(wait_spans(&rv, 2, 10000));
    usleep(600 * 1000); /* past the exporter's linger: nothing more */
    pthread_mutex_lock(&rv.mu);
    T_EQ_INT(json_array_size(rv.spans), 2);
    json_array_foreach(rv.spans, i, s) {
        T_CHECK(strcmp(sstr(s, "traceId") ?: "", CLIENT_TRACE) != 0);
    }
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
    T_EQ_INT(metric(base, "llmux_otel_exported_spans_total "), 3 + 2 + 2);
    T_EQ_INT(metric(base, "llmux_otel_dropped_spans_total{reason=\"queue_"
                          "full\"} "),
             0);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
}

#define ADMIN "adm-otel-0123456789abcdef0123456789ab"

/* A key made through the admin API with spec (JSON fields), into out. */
static int
make_key(const char *base, const char *spec, char *out, size_t outlen)
{
    char url[256];
    snprintf(url, sizeof(url), "%s/admin/keys", base);
    const char *h[] = {"Authorization: Bearer " ADMIN, NULL};
    struct e2e_resp r;
    int rc = -1;
    if (e2e_http("POST", url, spec, h, 10000, &r) == 0 && r.status == 200) {
        json_t *o = json_loads(r.body ? r.body : "", 0, NULL);
        const char *k = sstr(o, "key");
        if (k && strlen(k) < outlen) {
            snprintf(out, outlen, "%s", k);
            rc = 0;
        }
        json_decref(o);
    }
    e2e_resp_free(&r);
    return rc;
}

/* Refused before routing: each its own SERVER span, no children. */
static void
test_refusals(void)
{
    char otel[256], base[128];
    snprintf(otel, sizeof(otel),
             "{\"endpoint\": \"http://127.0.0.1:%d/v1/traces\", "
             "\"sample_ratio\": 1.0, \"queue\": 64}",
             rv.port);
    struct e2e_proc gw;
    T_EQ_INT(start_gw_keys(&gw, otel,
                           "\"require_keys\": true, \"admin_key\": \"" ADMIN
                           "\", \"limits\": {\"max_body_bytes\": 4096}",
                           base, sizeof(base)),
             0);
    char plain[128], only[128], slow[128];
    T_EQ_INT(make_key(base, "{\"name\":\"plain\"}", plain, sizeof(plain)),
             0);
    T_EQ_INT(make_key(base, "{\"name\":\"only\",\"models\":[\"m@fake\"]}",
                      only, sizeof(only)),
             0);
    T_EQ_INT(make_key(base, "{\"name\":\"slow\",\"rpm\":1}", slow,
                      sizeof(slow)),
             0);
    const char *ok = "{\"model\":\"m@fake\",\"messages\":[{\"role\":"
                     "\"user\",\"content\":\"hi\"}]}";
    const char *bad = "{\"model\":\"m@bad\",\"messages\":[{\"role\":"
                      "\"user\",\"content\":\"hi\"}]}";
    const char *none = "{\"model\":\"no-such\",\"messages\":[{\"role\":"
                       "\"user\",\"content\":\"hi\"}]}";
    static char big[6000];
    snprintf(big, sizeof(big),
             "{\"model\":\"m@fake\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"%05000d\"}]}",
             0);
    pthread_mutex_lock(&rv.mu);
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
    struct {
        const char *rid, *key, *body, *code;
        long status;
    } cases[] = {
        {"ref-401", NULL, ok, "invalid_api_key", 401},
        {"ref-400", plain, "{not json", "invalid_json", 400},
        {"ref-403", only, bad, "model_not_allowed", 403},
        {"ref-404", plain, none, "model_not_found", 404},
        {"ref-413", plain, big, "request_too_large", 413},
        {"ref-200", slow, ok, NULL, 200},
        {"ref-429", slow, ok, "rate_limit_exceeded", 429},
    };
    size_t nc = sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < nc; i++)
        T_EQ_INT(post(base, cases[i].key, cases[i].rid,
                      i == 0 ? "00-" CLIENT_TRACE "-" CLIENT_SPAN "-01" : NULL,
                      cases[i].body),
                 cases[i].status);
    /* The client's sampled flag off: a refusal is not exported either. */
    T_EQ_INT(post(base, NULL, "ref-unsampled",
                  "00-" CLIENT_TRACE "-" CLIENT_SPAN "-00", ok),
             401);
    /* 6 refusals, and the 200's SERVER span and CLIENT child. */
    T_CHECK(wait_spans(&rv, nc + 1, 10000));
    usleep(600 * 1000); /* past the exporter's linger: nothing more */
    pthread_mutex_lock(&rv.mu);
    T_EQ_INT(json_array_size(rv.spans), nc + 1);
    for (size_t i = 0; i < nc; i++) {
        json_t *s = find_root(cases[i].rid);
        T_CHECK(s != NULL);
        if (!s)
            continue;
        T_EQ_INT(attr_int(s, "http.response.status_code"), cases[i].status);
        T_EQ_STR(sstr(s, "name"), "POST /v1/chat/completions");
        T_CHECK(is_hex(sstr(s, "traceId"), 32) &&
                is_hex(sstr(s, "spanId"), 16));
        if (!cases[i].code) /* the routed one */
            continue;
        T_EQ_STR(attr_str(s, "llmux.refusal"), cases[i].code);
        T_EQ_STR(attr_str(s, "llmux.error"), "refused before routing");
        if (i == 0) {
            T_EQ_STR(sstr(s, "traceId"), CLIENT_TRACE);
            T_EQ_STR(sstr(s, "parentSpanId"), CLIENT_SPAN);
        } else {
            T_CHECK(json_object_get(s, "parentSpanId") == NULL);
        }
        /* no upstream attempt under a refusal */
        size_t j;
        json_t *c;
        json_array_foreach(rv.spans, j, c) {
            T_CHECK(strcmp(sstr(c, "parentSpanId") ?: "",
                           sstr(s, "spanId") ?: "-") != 0);
        }
    }
    T_CHECK(find_root("ref-unsampled") == NULL);
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
}

static long long
wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* One POST whose head is sent first (Expect: 100-continue) and whose body
 * only after llmux answered 100: *head_ns is a time after llmux read the
 * head and before it could read the body.  The final status, or -1. */
static int
post_in_two(int port, const char *rid, const char *body, long long *head_ns)
{
    struct raw_conn c;
    if (raw_open(&c, port, 0) != 0)
        return -1;
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     "X-Request-Id: %s\r\nContent-Type: application/json"
                     "\r\nExpect: 100-continue\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     rid, strlen(body));
    int st = -1;
    if (send(c.fd, head, (size_t)n, MSG_NOSIGNAL) == n &&
        raw_read_until(&c, "100 Continue\r\n\r\n", 4096, 4096, 10000) == 0) {
        *head_ns = wall_ns();
        usleep(50 * 1000);
        size_t used = c.len;
        if (send(c.fd, body, strlen(body), MSG_NOSIGNAL) ==
                (ssize_t)strlen(body) &&
            raw_read_all(&c, 1 << 20, 20000) == 0) {
            char *b = NULL;
            size_t bl = 0;
            if (raw_response(c.in + used, c.len - used, &st, &b, &bl) < 0)
                st = -1;
            free(b);
        }
    }
    raw_close(&c);
    return st;
}

/* Every span starts at the request's arrival: a refused one (400 after
 * the body) and a routed one alike. */
static void
test_span_starts_at_arrival(void)
{
    char otel[256], base[128];
    snprintf(otel, sizeof(otel),
             "{\"endpoint\": \"http://127.0.0.1:%d/v1/traces\", "
             "\"sample_ratio\": 1.0}",
             rv.port);
    struct e2e_proc gw;
    T_EQ_INT(start_gw(&gw, otel, base, sizeof(base)), 0);
    pthread_mutex_lock(&rv.mu);
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
    const char *rid[] = {"arrive-400", "arrive-200"};
    const char *body[] = {"{not json",
                          "{\"model\":\"m@fake\",\"messages\":[{\"role\":"
                          "\"user\",\"content\":\"hi\"}]}"};
    const int want[] = {400, 200};
    long long t0[2], mid[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        t0[i] = wall_ns();
        T_EQ_INT(post_in_two(gw.port, rid[i], body[i], &mid[i]), want[i]);
    }
    T_CHECK(wait_spans(&rv, 3, 10000)); /* the 200 has a CLIENT child */
    pthread_mutex_lock(&rv.mu);
    for (int i = 0; i < 2; i++) {
        json_t *s = find_root(rid[i]);
        T_CHECK(s != NULL);
        long long st = atoll(sstr(s, "startTimeUnixNano") ?: "0");
        long long en = atoll(sstr(s, "endTimeUnixNano") ?: "0");
        T_CHECK(st >= t0[i]);
        T_CHECK(st <= mid[i]); /* before the body was even sent */
        T_CHECK(en > mid[i]);
    }
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
}

/* Rewrites the gateway's config with otel (NULL: none), SIGHUPs it and
 * waits (bounded) for its n-th reload line. */
static int
reload_otel(struct e2e_proc *gw, const char *otel, int n)
{
    char cfg[4096];
    char *dir = e2e_temp_dir();
    gw_config(cfg, sizeof(cfg), dir, otel, "\"require_keys\": false");
    free(dir);
    if (e2e_replace_file(cfg_file, cfg) != 0)
        return -1;
    kill(gw->pid, SIGHUP);
    for (int i = 0; i < 250; i++) {
        if (e2e_log_count(gw, "config reloaded") >= n)
            return 0;
        usleep(20 * 1000);
    }
    return -1;
}

/* The otel block on SIGHUP: turned on, its settings changed, turned off,
 * each for the next request, with no restart. */
static void
test_reload(void)
{
    char otel[256], base[128];
    struct e2e_proc gw;
    T_EQ_INT(start_gw(&gw, NULL, base, sizeof(base)), 0);
    pthread_mutex_lock(&rv.mu);
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
    T_EQ_INT(chat(base, "m@fake", NULL), 200);
    usleep(600 * 1000); /* past any linger: nothing is sent */
    T_EQ_INT(n_spans(&rv), 0);
    /* on */
    snprintf(otel, sizeof(otel),
             "{\"endpoint\": \"http://127.0.0.1:%d/v1/traces\", "
             "\"service_name\": \"after-hup\", \"queue\": 8}",
             rv.port);
    T_EQ_INT(reload_otel(&gw, otel, 1), 0);
    T_EQ_INT(chat(base, "m@fake", NULL), 200);
    T_CHECK(wait_spans(&rv, 2, 10000)); /* SERVER and CLIENT */
    pthread_mutex_lock(&rv.mu);
    json_t *root = find_root(NULL);
    T_CHECK(root && !strcmp(sstr(root, "_service") ?: "", "after-hup"));
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
    /* sample_ratio 0 and a new service name: no span of its own */
    snprintf(otel, sizeof(otel),
             "{\"endpoint\": \"http://127.0.0.1:%d/v1/traces\", "
             "\"service_name\": \"second\", \"sample_ratio\": 0}",
             rv.port);
    T_EQ_INT(reload_otel(&gw, otel, 2), 0);
    T_EQ_INT(chat(base, "m@fake", NULL), 200);
    /* a sampled client parent still is (parent-based), as "second" */
    T_EQ_INT(chat(base, "m@fake", "00-" CLIENT_TRACE "-" CLIENT_SPAN "-01"),
             200);
    T_CHECK(wait_spans(&rv, 2, 10000));
    usleep(600 * 1000);
    pthread_mutex_lock(&rv.mu);
    T_EQ_INT(json_array_size(rv.spans), 2);
    root = find_root(NULL);
    T_CHECK(root && !strcmp(sstr(root, "traceId") ?: "", CLIENT_TRACE) &&
            !strcmp(sstr(root, "_service") ?: "", "second"));
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
    /* off: not even a sampled client parent is traced */
    T_EQ_INT(reload_otel(&gw, NULL, 3), 0);
    T_EQ_INT(chat(base, "m@fake", "00-" CLIENT_TRACE "-" CLIENT_SPAN "-01"),
             200);
    usleep(600 * 1000);
    T_EQ_INT(n_spans(&rv), 0);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
}

static void
test_ratio_zero(void)
{
    char otel[256], base[128];
    snprintf(otel, sizeof(otel),
             "{\"endpoint\": \"http://127.0.0.1:%d/v1/traces\", "
             "\"sample_ratio\": 0}",
             rv.port);
    struct e2e_proc gw;
    T_EQ_INT(start_gw(&gw, otel, base, sizeof(base)), 0);
    for (int i = 0; i < 5; i++)
        T_EQ_INT(chat(base, "m@fake", NULL), 200);
    /* A sampled client parent still wins (parent-based sampling). */
    T_EQ_INT(chat(base, "m@fake", "00-" CLIENT_TRACE "-" CLIENT_SPAN "-01"),
             200);
    T_CHECK(wait_spans(&rv, 2, 10000));
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0); /* flushes */
    pthread_mutex_lock(&rv.mu);
    T_EQ_INT(json_array_size(rv.spans), 2);
    size_t i;
    json_t *s;
    json_array_foreach(rv.spans, i, s) {
        T_EQ_STR(sstr(s, "traceId"), CLIENT_TRACE);
        T_EQ_STR(sstr(s, "_service"), "llmux");
    }
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
}

static void
test_stalled_collector(void)
{
    char otel[256], base[128];
    snprintf(otel, sizeof(otel),
             "{\"endpoint\": \"http://127.0.0.1:%d/v1/traces\", "
             "\"queue\": 1, \"timeout_ms\": 8000}",
             rv.port);
    struct e2e_proc gw;
    T_EQ_INT(start_gw(&gw, otel, base, sizeof(base)), 0);
    atomic_store(&rv.stall_ms, 1500);
    /* The first span leaves; the exporter then waits on the stalled
     * collector while 19 more are made into a one-span queue. */
    T_EQ_INT(chat(base, "m@fake", NULL), 200);
    usleep(400 * 1000);
    int ok = 0;
    for (int i = 0; i < 9; i++)
        ok += chat(base, "m@fake", NULL) == 200;
    T_EQ_INT(ok, 9); /* answered while the collector hangs */
    long long full = metric(base, "llmux_otel_dropped_spans_total{reason="
                                  "\"queue_full\"} ");
    T_CHECK(full > 0);
    atomic_store(&rv.stall_ms, 0);
    /* 10 requests, 2 spans each: exported + dropped = 20 once the
     * exporter is done (bounded wait). */
    long long ex = 0, df = 0, de = 0;
    for (int i = 0; i < 100; i++) {
        ex = metric(base, "llmux_otel_exported_spans_total ");
        df = metric(base, "llmux_otel_dropped_spans_total{reason="
                          "\"queue_full\"} ");
        de = metric(base, "llmux_otel_dropped_spans_total{reason="
                          "\"export_failed\"} ");
        if (ex + df + de == 20)
            break;
        usleep(100 * 1000);
    }
    fprintf(stderr, "  stalled: exported %lld, queue full %lld, failed %lld\n",
            ex, df, de);
    T_EQ_INT(ex + df + de, 20);
    T_CHECK(df > 0 && ex > 0);
    T_EQ_INT((long long)n_spans(&rv), ex);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 15000), 0);
    pthread_mutex_lock(&rv.mu);
    json_array_clear(rv.spans);
    pthread_mutex_unlock(&rv.mu);
}

/* Bad otel blocks: `llmux check` says so (exit 1). */
static void
test_config_errors(void)
{
    const char *bad[] = {
        "{\"sample_ratio\": 1}",                           /* no endpoint */
        "{\"endpoint\": \"ftp://x/v1/traces\"}",           /* scheme */
        "{\"endpoint\": \"http://x/\", \"sample_ratio\": 2}", /* range */
        "{\"endpoint\": \"http://x/\", \"queue\": 0}",     /* queue */
        "{\"endpoint\": \"http://x/\", \"sampel\": 1}",    /* unknown key */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char cfg[512];
        snprintf(cfg, sizeof(cfg),
                 "{\"listen\": \"127.0.0.1:0\", \"database\": \":memory:\","
                 " \"otel\": %s}",
                 bad[i]);
        char *path = e2e_write_temp("otel-bad.json", cfg);
        char cmd[1024];
        snprintf(cmd, sizeof(cmd), "%s check --config '%s' >/dev/null 2>&1",
                 e2e_env("LLMUX_BIN", "build/release/llmux"), path);
        int rc = system(cmd);
        T_CHECK(rc != -1 && WEXITSTATUS(rc) == 1);
        free(path);
    }
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    signal(SIGPIPE, SIG_IGN);
    if (e2e_start_fake(&fake) != 0 || receiver_start(&rv) != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_spans_and_links);
    T_RUN(test_refusals);
    T_RUN(test_span_starts_at_arrival);
    T_RUN(test_reload);
    T_RUN(test_ratio_zero);
    T_RUN(test_stalled_collector);
    T_RUN(test_config_errors);
    receiver_stop(&rv);
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
