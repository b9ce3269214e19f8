/*
 * End-to-end tests of providers/: the curl-multi-on-libevent client and
 * the openai kind, against the real fake_provider binary over 127.0.0.1.
 * Every event loop run is bounded by a timer; nothing asserts on timing.
 */
#include "../providers/providers.h"
#include "harness.h"
#include "lib/e2e.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_EV 64

static struct e2e_proc fake;
static struct event_base *base;
static struct pv_loop *loop;
static char fake_url[128];

/* ---- a provider built by hand ------------------------------------------ */

static struct cfg_header hdrs[] = {{(char *)"X-Org", (char *)"acme"}};
static struct cfg_model model = {(char *)"client-model",
                                 (char *)"upstream-model", 1, 0, 0, 0, 0};
static struct cfg_provider prov;
static char base_url[256];

static void
prov_set(const char *directives, int timeout_ms, int fb_ms)
{
    if (directives)
        snprintf(base_url, sizeof(base_url), "%s/f/%s/v1", fake_url,
                 directives);
    else
        snprintf(base_url, sizeof(base_url), "%s/v1", fake_url);
    memset(&prov, 0, sizeof(prov));
    prov.name = (char *)"fake";
    prov.kind = CFG_KIND_OPENAI;
    prov.base_url = base_url;
    prov.api_key = (char *)"sk-test-123456";
    prov.timeout_ms = timeout_ms;
    prov.connect_timeout_ms = 3000;
    prov.first_byte_timeout_ms = fb_ms;
    prov.headers = hdrs;
    prov.n_headers = 1;
    prov.models = &model;
    prov.n_models = 1;
}

/* ---- a call recorder ----------------------------------------------------- */

struct rec {
    struct pv_call *call;
    int heads, head_status;
    int n_ev;
    char *ev[MAX_EV];
    int events_after_done;
    int done;
    struct pv_result res;
    char *body;
    int cancel_at;  /* cancel from on_event when n_ev reaches it */
    int cancel_in_head;
    int pause_at;   /* pause from on_event when n_ev reaches it */
    int paused;
    struct rec *spawn; /* start this call from on_event #1 */
    json_t *spawn_body;
    int resume_ms;     /* with pause_at: resume after this many ms */
    int cancelled;     /* we cancelled it */
    int after_cancel;  /* callbacks seen after our cancel */
};

static void start_rec(struct rec *r, json_t *body, int stream, int ciu);

static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rec *r = arg;
    r->paused = 0;
    if (!r->done && !r->cancelled)
        pv_call_resume(r->call);
}

static void
r_head(void *ud, int status)
{
    struct rec *r = ud;
    if (r->cancelled)
        r->after_cancel++;
    r->heads++;
    r->head_status = status;
    if (r->cancel_in_head) {
        pv_call_cancel(r->call);
        r->cancelled = 1;
    }
}

static void
r_event(void *ud, const char *data, size_t len)
{
    struct rec *r = ud;
    if (r->done)
        r->events_after_done++;
    if (r->cancelled)
        r->after_cancel++;
    if (r->n_ev < MAX_EV)
        r->ev[r->n_ev] = strndup(data, len);
    r->n_ev++;
    if (r->pause_at && r->n_ev == r->pause_at && !r->cancelled) {
        pv_call_pause(r->call);
        r->paused = 1;
        if (r->resume_ms) {
            struct timeval tv = {0, r->resume_ms * 1000};
            event_base_once(base, -1, EV_TIMEOUT, resume_cb, r, &tv);
        }
    }
    if (r->cancel_at && r->n_ev == r->cancel_at && !r->cancelled) {
        pv_call_cancel(r->call);
        r->cancelled = 1;
    }
    if (r->spawn && r->n_ev == 1)
        start_rec(r->spawn, r->spawn_body, 0, 0);
}

static void
r_done(void *ud, const struct pv_result *res)
{
    struct rec *r = ud;
    if (r->cancelled)
        r->after_cancel++;
    r->done++;
    r->res = *res;
    r->res.body = NULL;
    if (res->body)
        r->body = strndup(res->body, res->body_len);
}

static void
rec_free(struct rec *r)
{
    for (int i = 0; i < r->n_ev && i < MAX_EV; i++)
        free(r->ev[i]);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

static json_t *
chat_body(const char *user_text, int stream, int ciu)
{
    json_t *b = json_pack("{s:s,s:[{s:s,s:s}]}", "model", "client-model",
                          "messages", "role", "user", "content", user_text);
    if (stream)
        json_object_set_new(b, "stream", json_true());
    if (ciu)
        json_object_set_new(b, "stream_options",
                            json_pack("{s:b}", "include_usage", 1));
    return b;
}

static int64_t max_body = 1 << 20;

static void
start_rec(struct rec *r, json_t *body, int stream, int ciu)
{
    struct pv_request req = {
        .provider = &prov,
        .model = &model,
        .body = body,
        .stream = stream,
        .client_include_usage = ciu,
        .request_id = "req-42",
        .max_body_bytes = max_body,
    };
    struct pv_callbacks cb = {r, r_head, r_event, r_done};
    char err[256] = "";
    enum gx_status st = pv_call_start(loop, &req, &cb, &r->call, err,
                                      sizeof(err));
    T_EQ_INT(st, GX_OK);
}

/* ---- bounded loop runs --------------------------------------------------- */

static int expired;

static void
expire_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    expired = 1;
}

/* Runs the loop until every rec in rs is done (or, with stop_paused, one
 * is paused), or ms pass.  Returns 1 if the condition was met. */
static int
run_until(struct rec **rs, int n, int ms, int stop_paused)
{
    struct event *t = evtimer_new(base, expire_cb, NULL);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    expired = 0;
    evtimer_add(t, &tv);
    int met = 0;
    while (!expired) {
        met = 1;
        for (int i = 0; i < n; i++) {
            if (stop_paused && rs[i]->paused)
                goto out;
            if (!rs[i]->done)
                met = 0;
        }
        if (met && n > 0)
            break;
        met = 0;
        event_base_loop(base, EVLOOP_ONCE);
    }
out:
    event_free(t);
    return met || (stop_paused && !expired);
}

static int
run1(struct rec *r, int ms)
{
    return run_until(&r, 1, ms, 0);
}

/* Runs the loop for ms whatever happens. */
static void
run_for(int ms)
{
    run_until(NULL, 0, ms, 0);
}

/* ---- fake provider stats ------------------------------------------------ */

static json_t *
fake_stats(void)
{
    char url[200];
    snprintf(url, sizeof(url), "%s/fake/stats", fake_url);
    struct e2e_resp r;
    memset(&r, 0, sizeof(r));
    json_t *j = NULL;
    if (e2e_http("GET", url, NULL, NULL, 5000, &r) == 0 && r.status == 200)
        j = json_loads(r.body, 0, NULL);
    e2e_resp_free(&r);
    return j;
}

static void
fake_reset(void)
{
    char url[200];
    snprintf(url, sizeof(url), "%s/fake/reset", fake_url);
    struct e2e_resp r;
    memset(&r, 0, sizeof(r));
    e2e_http("POST", url, "", NULL, 5000, &r);
    e2e_resp_free(&r);
}

static long
stat_int(json_t *s, const char *k)
{
    return (long)json_integer_value(json_object_get(s, k));
}

/* ---- tests -------------------------------------------------------------- */

static void
test_nonstream_ok(void)
{
    prov_set(NULL, 10000, 5000);
    struct rec r = {0};
    json_t *b = chat_body("hi", 0, 0);
    start_rec(&r, b, 0, 0);
    T_EQ_INT(pv_loop_active(loop), 1);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.done, 1);
    T_EQ_INT(r.heads, 1);
    T_EQ_INT(r.head_status, 200);
    T_EQ_INT(r.res.outcome, PV_OK);
    T_EQ_INT(r.res.http_status, 200);
    T_EQ_INT(r.n_ev, 0);
    T_CHECK(r.body && strstr(r.body, "Hello from fake provider"));
    T_EQ_INT(r.res.usage.have, 1);
    T_EQ_INT(r.res.usage.prompt_tokens, 9);
    T_EQ_INT(r.res.usage.completion_tokens, 4);
    T_EQ_INT(r.res.retry_after_s, -1);
    T_CHECK(r.res.ttfb_us >= 0 && r.res.total_us >= r.res.ttfb_us);
    T_EQ_INT(pv_loop_active(loop), 0);
    /* What the upstream saw. */
    json_t *s = fake_stats();
    json_t *last = json_object_get(s, "last");
    json_t *h = json_object_get(last, "headers");
    T_EQ_STR(json_string_value(json_object_get(last, "model")),
             "upstream-model");
    T_EQ_STR(json_string_value(json_object_get(last, "path")),
             "/v1/chat/completions");
    T_EQ_STR(json_string_value(json_object_get(h, "authorization")),
             "Bearer sk-test-123456");
    T_EQ_STR(json_string_value(json_object_get(h, "x-request-id")), "req-42");
    T_EQ_STR(json_string_value(json_object_get(h, "x-org")), "acme");
    T_EQ_STR(json_string_value(json_object_get(h, "content-type")),
             "application/json");
    T_CHECK(json_object_get(json_object_get(last, "body"),
                            "stream_options") == NULL);
    /* The client's object is untouched. */
    T_EQ_STR(json_string_value(json_object_get(b, "model")), "client-model");
    json_decref(s);
    json_decref(b);
    rec_free(&r);
}

/* The upstream body the old way (a modified shallow copy), to compare. */
static char *
expected_upstream(json_t *b, int stream, int ciu)
{
    json_t *c = json_copy(b);
    json_object_set_new(c, "model", json_string("upstream-model"));
    if (stream && !ciu) {
        json_t *so = json_object_get(c, "stream_options");
        json_t *nso = json_is_object(so) ? json_copy(so) : json_object();
        json_object_set_new(nso, "include_usage", json_true());
        json_object_set_new(c, "stream_options", nso);
    }
    char *s = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    return s;
}

/* oa_start sets "model" (and stream_options) on the client's own object,
 * dumps it and puts everything back: the object must come out equal, in
 * the same key order, with absent keys absent again, and the upstream
 * must get the same bytes as a dump of a modified copy. */
static void
test_body_restored(void)
{
    prov_set(NULL, 10000, 5000);
    static const struct {
        const char *json;
        int stream, ciu;
    } cases[] = {
        {"{\"model\":\"client-model\",\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}],\"temperature\":0.5}", 0, 0},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 0, 0},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
         "\"stream\":true}", 1, 0},
        {"{\"stream_options\":{\"x\":1},\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}],\"model\":\"m\",\"stream\":true}", 1, 0},
        {"{\"model\":7,\"stream_options\":\"odd\",\"messages\":[{\"role\":"
         "\"user\",\"content\":\"hi\"}],\"stream\":true,\"n\":1}", 1, 0},
        {"{\"model\":\"m\",\"stream_options\":{\"include_usage\":true},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
         "\"stream\":true}", 1, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *b = json_loads(cases[i].json, 0, NULL);
        T_CHECK(b != NULL);
        if (!b)
            continue;
        json_t *before = json_deep_copy(b);
        char *dump_before = json_dumps(b, JSON_COMPACT);
        char *want = expected_upstream(b, cases[i].stream, cases[i].ciu);
        struct rec r = {0};
        start_rec(&r, b, cases[i].stream, cases[i].ciu);
        /* Unchanged right after the start, and after the call. */
        T_CHECK(json_equal(b, before));
        char *dump_after = json_dumps(b, JSON_COMPACT);
        T_EQ_STR(dump_after, dump_before);
        free(dump_after);
        T_CHECK(run1(&r, 10000));
        T_EQ_INT(r.res.outcome, PV_OK);
        T_CHECK(json_equal(b, before));
        json_t *s = fake_stats();
        json_t *last = json_object_get(s, "last");
        T_EQ_STR(json_string_value(json_object_get(last, "model")),
                 "upstream-model");
        json_t *lb = json_object_get(last, "body");
        if (cases[i].stream)
            T_CHECK(json_is_true(json_object_get(
                json_object_get(lb, "stream_options"), "include_usage")));
        else
            T_CHECK(json_object_get(lb, "stream_options") == NULL);
        char *got = lb ? json_dumps(lb, JSON_COMPACT) : NULL;
        T_EQ_STR(got, want);
        free(got);
        free(want);
        free(dump_before);
        json_decref(s);
        json_decref(before);
        json_decref(b);
        rec_free(&r);
    }
}

/* pv_chat_parse's fast path: no tree, openai.c splices the upstream name
 * into the client's bytes (and appends stream_options for a stream that
 * sent none).  The upstream must get a body equal to the modified copy,
 * the client's other bytes (spacing, escapes) as sent, and no tree is
 * built on the way unless stream_options has to be edited. */
static void
test_body_spliced(void)
{
    prov_set(NULL, 10000, 5000);
    model.upstream = (char *)"up\"model\\\n"; /* needs escaping in JSON */
    static const struct {
        const char *json;
        int tree; /* the tree is built (a stream_options to edit) */
    } cases[] = {
        {"{ \"model\" : \"client-model\" , \"messages\":[{\"role\":\"user\","
         "\"content\":\"h\\u00e9\"}],\"temperature\":0.5}\n", 0},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
         "\"stream\":true,\"model\":\"m\"} ", 0},
        {"{\"model\":\"m\",\"stream_options\":{\"x\":1},\"messages\":"
         "[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}", 1},
        {"{\"model\":\"m\",\"stream_options\":{\"include_usage\":true},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
         "\"stream\":true}", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char msg[256];
        const char *param;
        struct pv_chat chat;
        T_EQ_INT(pv_chat_parse(&chat, PV_API_CHAT, cases[i].json,
                               strlen(cases[i].json), msg, sizeof(msg),
                               &param),
                 PV_CHAT_OK);
        T_CHECK(chat.body == NULL && chat.text != NULL);
        struct pv_request req = {
            .chat = &chat,
            .provider = &prov,
            .model = &model,
            .stream = chat.stream,
            .client_include_usage = chat.include_usage,
            .request_id = "req-42",
            .max_body_bytes = max_body,
        };
        struct rec r = {0};
        struct pv_callbacks cb = {&r, r_head, r_event, r_done};
        char err[256] = "";
        T_EQ_INT(pv_call_start(loop, &req, &cb, &r.call, err, sizeof(err)),
                 GX_OK);
        T_EQ_INT(chat.body != NULL, cases[i].tree);
        T_CHECK(run1(&r, 10000));
        T_EQ_INT(r.res.outcome, PV_OK);
        json_t *want = json_loads(cases[i].json, 0, NULL);
        json_object_set_new(want, "model", json_string(model.upstream));
        if (chat.stream && !chat.include_usage) {
            json_t *so = json_object_get(want, "stream_options");
            json_t *nso = json_is_object(so) ? json_copy(so) : json_object();
            json_object_set_new(nso, "include_usage", json_true());
            json_object_set_new(want, "stream_options", nso);
        }
        json_t *st = fake_stats();
        json_t *lb = json_object_get(json_object_get(st, "last"), "body");
        T_CHECK(json_equal(lb, want));
        json_decref(st);
        json_decref(want);
        rec_free(&r);
        pv_chat_cleanup(&chat);
    }
    model.upstream = (char *)"upstream-model";
}

static void
test_no_api_key(void)
{
    prov_set(NULL, 10000, 5000);
    prov.api_key = NULL;
    struct rec r = {0};
    json_t *b = chat_body("hi", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_OK);
    json_t *s = fake_stats();
    json_t *h = json_object_get(json_object_get(s, "last"), "headers");
    T_CHECK(h && json_object_get(h, "authorization") == NULL);
    json_decref(s);
    json_decref(b);
    rec_free(&r);
}

static void
test_stream_ok(void)
{
    prov_set(NULL, 10000, 5000);
    /* Without the client asking for usage: we ask, and hide the chunk. */
    struct rec r = {0};
    json_t *b = chat_body("fake:cached=3;prompt_tokens=11;completion_tokens=7",
                          1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_OK);
    T_EQ_INT(r.head_status, 200);
    /* role, 4 words, finish, [DONE] */
    T_EQ_INT(r.n_ev, 7);
    T_EQ_INT(r.events_after_done, 0);
    if (r.n_ev == 7) {
        T_CHECK(strstr(r.ev[0], "\"role\":\"assistant\"") != NULL);
        T_CHECK(strstr(r.ev[1], "\"Hello\"") != NULL);
        T_CHECK(strstr(r.ev[4], "\" provider\"") != NULL);
        T_CHECK(strstr(r.ev[5], "\"finish_reason\":\"stop\"") != NULL);
        T_EQ_STR(r.ev[6], "[DONE]");
    }
    int saw_usage = 0;
    for (int i = 0; i < r.n_ev && i < MAX_EV; i++)
        if (strstr(r.ev[i], "\"usage\""))
            saw_usage = 1;
    T_EQ_INT(saw_usage, 0);
    T_EQ_INT(r.res.usage.have, 1);
    T_EQ_INT(r.res.usage.prompt_tokens, 11);
    T_EQ_INT(r.res.usage.completion_tokens, 7);
    T_EQ_INT(r.res.usage.cached_tokens, 3);
    T_CHECK(r.body == NULL);
    json_t *s = fake_stats();
    json_t *lb = json_object_get(json_object_get(s, "last"), "body");
    T_CHECK(json_is_true(json_object_get(
        json_object_get(lb, "stream_options"), "include_usage")));
    T_CHECK(json_object_get(b, "stream_options") == NULL);
    json_decref(s);
    json_decref(b);
    rec_free(&r);

    /* The client asked for usage: it gets the usage chunk. */
    b = chat_body("fake:chunks=3", 1, 1);
    start_rec(&r, b, 1, 1);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_OK);
    T_EQ_INT(r.n_ev, 1 + 3 + 1 + 1 + 1);
    if (r.n_ev == 7) {
        T_CHECK(strstr(r.ev[5], "\"usage\"") != NULL);
        T_EQ_STR(r.ev[6], "[DONE]");
    }
    T_EQ_INT(r.res.usage.completion_tokens, 3);
    json_decref(b);
    rec_free(&r);

    /* CRLF line ends and comments between events: same events. */
    b = chat_body("fake:crlf;comments;chunks=2", 1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_OK);
    T_EQ_INT(r.n_ev, 1 + 2 + 1 + 1);
    T_EQ_INT(r.res.usage.have, 1);
    json_decref(b);
    rec_free(&r);

    /* Upstream without usage at all. */
    b = chat_body("fake:no_usage", 1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_OK);
    T_EQ_INT(r.res.usage.have, 0);
    json_decref(b);
    rec_free(&r);
}

static void
test_status(void)
{
    /* 500, non-stream. */
    prov_set("status=500", 10000, 5000);
    struct rec r = {0};
    json_t *b = chat_body("hi", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_STATUS);
    T_EQ_INT(r.res.http_status, 500);
    T_EQ_INT(r.head_status, 500);
    T_EQ_INT(r.res.retry_after_s, -1);
    T_CHECK(r.body && strstr(r.body, "fake error: status 500"));
    T_CHECK(strstr(r.res.detail, "500") != NULL);
    rec_free(&r);
    json_decref(b);

    /* 429 with Retry-After, on a stream request. */
    prov_set("status=429;retry_after=2", 10000, 5000);
    b = chat_body("hi", 1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_STATUS);
    T_EQ_INT(r.res.http_status, 429);
    T_EQ_INT(r.res.retry_after_s, 2);
    T_EQ_INT(r.n_ev, 0);
    T_CHECK(r.body && strstr(r.body, "rate_limit_exceeded"));
    rec_free(&r);
    json_decref(b);

    /* Retry-After as an HTTP-date. */
    prov_set("status=503;retry_after_http=120", 10000, 5000);
    b = chat_body("hi", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.http_status, 503);
    T_CHECK(r.res.retry_after_s > 60 && r.res.retry_after_s <= 121);
    rec_free(&r);
    json_decref(b);

    /* An upstream that echoes our key in its error: scrubbed. */
    prov_set(NULL, 10000, 5000);
    b = chat_body("fake:status=401;message=bad key sk-test-123456 given", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_STATUS);
    T_EQ_INT(r.res.http_status, 401);
    T_CHECK(strstr(r.res.detail, "bad key") != NULL);
    T_CHECK(strstr(r.res.detail, "sk-test-123456") == NULL);
    T_CHECK(r.body && !strstr(r.body, "sk-test-123456"));
    rec_free(&r);
    json_decref(b);
}

static void
test_reset_and_malformed(void)
{
    prov_set(NULL, 10000, 5000);
    struct rec r = {0};
    json_t *b = chat_body("fake:reset", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_TRANSPORT);
    T_EQ_INT(r.res.http_status, 0);
    T_EQ_INT(r.heads, 0);
    T_CHECK(r.res.detail[0] != '\0');
    rec_free(&r);
    json_decref(b);

    b = chat_body("fake:malformed", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_MALFORMED);
    T_EQ_INT(r.res.http_status, 200);
    T_CHECK(r.body != NULL);
    rec_free(&r);
    json_decref(b);

    /* Stream: the role chunk arrives, then a broken data line. */
    b = chat_body("fake:malformed", 1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_MALFORMED);
    T_EQ_INT(r.n_ev, 1);
    T_EQ_INT(r.events_after_done, 0);
    rec_free(&r);
    json_decref(b);

    /* A stream dropped after 3 events: transport error, 3 delivered. */
    b = chat_body("fake:drop_after=3", 1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_TRANSPORT);
    T_EQ_INT(r.n_ev, 3);
    rec_free(&r);
    json_decref(b);

    /* An in-band error object after 2 events: not delivered, and the
     * call fails with its message. */
    b = chat_body("fake:error_after=2", 1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_TRANSPORT);
    T_EQ_INT(r.n_ev, 2);
    T_CHECK(strstr(r.res.detail, "fake mid-stream error") != NULL);
    rec_free(&r);
    json_decref(b);

    /* Headers, then the connection closes before any event. */
    b = chat_body("fake:drop_after=0", 1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_TRANSPORT);
    T_EQ_INT(r.n_ev, 0);
    rec_free(&r);
    json_decref(b);
}

static void
test_too_big(void)
{
    prov_set(NULL, 10000, 5000);
    max_body = 100; /* the normal answer is ~300 bytes */
    struct rec r = {0};
    json_t *b = chat_body("hi", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_TOO_BIG);
    rec_free(&r);
    json_decref(b);
    /* An error body over the cap: still the status, body cut at the cap. */
    b = chat_body("fake:status=503;message=0123456789012345678901234567890"
                  "123456789012345678901234567890123456789",
                  0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_STATUS);
    T_EQ_INT(r.res.http_status, 503);
    T_EQ_INT(r.res.body_len, 100);
    rec_free(&r);
    json_decref(b);
    /* Stream: one event larger than the cap. */
    max_body = 2000;
    b = chat_body("fake:big=5000;chunks=1", 1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_TOO_BIG);
    T_EQ_INT(r.n_ev, 1); /* the role chunk fitted */
    rec_free(&r);
    json_decref(b);
    max_body = 1 << 20;
}

static void
test_timeouts(void)
{
    /* No byte for longer than the first-byte timeout. */
    prov_set("delay_ms=5000", 20000, 300);
    struct rec r = {0};
    json_t *b = chat_body("hi", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_FIRST_BYTE_TIMEOUT);
    T_EQ_INT(r.heads, 0);
    T_EQ_INT(pv_loop_active(loop), 0);
    rec_free(&r);
    json_decref(b);
    b = chat_body("hi", 1, 0);
    /* Headers at once, but the body late: still a first-byte timeout. */
    prov_set("slow_first_byte_ms=5000", 20000, 300);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_FIRST_BYTE_TIMEOUT);
    T_EQ_INT(r.head_status, 200);
    T_EQ_INT(r.n_ev, 0);
    rec_free(&r);
    /* headers_then_hang on a stream. */
    prov_set("headers_then_hang;hang_ms=5000", 20000, 300);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_FIRST_BYTE_TIMEOUT);
    rec_free(&r);
    /* Total timeout in the middle of a slow stream. */
    prov_set("chunks=40;chunk_delay_ms=100", 600, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_TIMEOUT);
    T_CHECK(r.n_ev < 43);
    T_CHECK(strstr(r.res.detail, "timeout") != NULL);
    rec_free(&r);
    json_decref(b);
    /* A stream request answered with plain JSON: not an event stream. */
    prov_set(NULL, 10000, 5000);
    b = chat_body("hi", 0, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_MALFORMED);
    T_CHECK(strstr(r.res.detail, "text/event-stream") != NULL);
    rec_free(&r);
    json_decref(b);
}

static int
closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd); /* bound, never listened: connecting is refused */
    return ntohs(sa.sin_port);
}

static void
test_connect_refused(void)
{
    prov_set(NULL, 10000, 5000);
    snprintf(base_url, sizeof(base_url), "http://127.0.0.1:%d/v1",
             closed_port());
    struct rec r = {0};
    json_t *b = chat_body("hi", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_CONNECT);
    T_EQ_INT(r.heads, 0);
    T_CHECK(strstr(r.res.detail, "sk-test") == NULL);
    rec_free(&r);
    json_decref(b);
}

static void
test_connect_timeout(void)
{
    /* A listener whose accept queue is full and never drained: the
     * kernel drops further SYNs, so our connect hangs. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    T_CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    T_CHECK(listen(lfd, 0) == 0);
    getsockname(lfd, (struct sockaddr *)&sa, &sl);
    int fillers[4];
    for (int i = 0; i < 4; i++) {
        fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fillers[i], (struct sockaddr *)&sa, sizeof(sa));
    }
    usleep(100000); /* let the handshakes land in the queue */
    prov_set(NULL, 20000, 0);
    prov.connect_timeout_ms = 300;
    snprintf(base_url, sizeof(base_url), "http://127.0.0.1:%d/v1",
             ntohs(sa.sin_port));
    struct rec r = {0};
    json_t *b = chat_body("hi", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_CONNECT_TIMEOUT);
    T_EQ_INT(r.heads, 0);
    rec_free(&r);
    json_decref(b);
    for (int i = 0; i < 4; i++)
        close(fillers[i]);
    close(lfd);
}

static void
test_bad_start(void)
{
    prov_set(NULL, 10000, 5000);
    struct rec r = {0};
    struct pv_callbacks cb = {&r, r_head, r_event, r_done};
    char err[256] = "";
    struct pv_call *c = NULL;
    json_t *arr = json_array();
    struct pv_request req = {.provider = &prov, .model = &model, .body = arr};
    T_EQ_INT(pv_call_start(loop, &req, &cb, &c, err, sizeof(err)), GX_EINVAL);
    T_CHECK(err[0] != '\0');
    json_decref(arr);
    json_t *b = chat_body("hi", 0, 0);
    req.body = b;
    prov.base_url = NULL;
    T_EQ_INT(pv_call_start(loop, &req, &cb, &c, err, sizeof(err)), GX_EINVAL);
    prov.base_url = base_url;
    struct cfg_header bad = {(char *)"X-Evil", (char *)"a\r\nInjected: 1"};
    prov.headers = &bad;
    T_EQ_INT(pv_call_start(loop, &req, &cb, &c, err, sizeof(err)), GX_EINVAL);
    prov.headers = hdrs;
    T_EQ_INT(pv_loop_active(loop), 0);
    run_for(50);
    T_EQ_INT(r.done + r.heads + r.n_ev, 0);
    json_decref(b);
}

static void
test_reuse(void)
{
    /* A fresh loop: its first call opens one connection, and 20 calls
     * one after another all ride on it. */
    pv_loop_free(loop);
    loop = pv_loop_new(base, NULL, 0);
    fake_reset();
    prov_set(NULL, 10000, 5000);
    int ok = 0;
    for (int i = 0; i < 20; i++) {
        struct rec r = {0};
        json_t *b = chat_body("hi", i % 2, 0);
        start_rec(&r, b, i % 2, 0);
        if (run1(&r, 10000) && r.res.outcome == PV_OK)
            ok++;
        rec_free(&r);
        json_decref(b);
    }
    T_EQ_INT(ok, 20);
    json_t *s = fake_stats();
    T_EQ_INT(stat_int(s, "requests"), 20);
    /* 1 for our calls (the stats request itself uses its own). */
    T_CHECK(stat_int(s, "connections") <= 3);
    long conns_before = stat_int(s, "connections");
    json_decref(s);
    for (int i = 0; i < 10; i++) {
        struct rec r = {0};
        json_t *b = chat_body("hi", 0, 0);
        start_rec(&r, b, 0, 0);
        run1(&r, 10000);
        rec_free(&r);
        json_decref(b);
    }
    s = fake_stats();
    /* +1 for the second stats request; none for our 10 calls. */
    T_EQ_INT(stat_int(s, "connections"), conns_before + 1);
    json_decref(s);
}

/* Easy handles are pooled with their options (loop.c struct pv_easy): a
 * handle set up for one provider must not carry its settings to the next
 * call on the same URL whose provider differs.  A 600 ms total timeout
 * ends a 2.4 s stream; the same URL without a total timeout, on what is
 * most likely the very handle, must then run to the end, and a call with
 * the first settings again must time out again. */
static void
test_pooled_handle_settings(void)
{
    pv_loop_free(loop);
    loop = pv_loop_new(base, NULL, 0);
    json_t *b = chat_body("hi", 1, 0);
    struct rec r = {0};
    prov_set("chunks=24;chunk_delay_ms=100", 600, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_TIMEOUT);
    rec_free(&r);
    memset(&r, 0, sizeof(r));
    prov_set("chunks=24;chunk_delay_ms=100", 0, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 20000));
    T_EQ_INT(r.res.outcome, PV_OK);
    T_CHECK(r.n_ev >= 24);
    rec_free(&r);
    memset(&r, 0, sizeof(r));
    prov_set("chunks=24;chunk_delay_ms=100", 600, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_ERR_TIMEOUT);
    rec_free(&r);
    json_decref(b);
}

static void
test_fake_tags(void)
{
    /* Two providers on one fake told apart: by path prefix and by a
     * configured X-Fake header. */
    fake_reset();
    struct rec r = {0};
    json_t *b = chat_body("hi", 0, 0);
    prov_set("tag=p1", 10000, 5000);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    rec_free(&r);
    struct cfg_header xh[] = {{(char *)"X-Fake", (char *)"tag=h1"}};
    prov_set(NULL, 10000, 5000);
    prov.headers = xh;
    for (int i = 0; i < 2; i++) {
        start_rec(&r, b, 0, 0);
        T_CHECK(run1(&r, 10000));
        rec_free(&r);
    }
    prov.headers = hdrs;
    json_t *s = fake_stats();
    json_t *tags = json_object_get(s, "by_tag");
    json_t *paths = json_object_get(s, "by_path");
    T_EQ_INT(json_integer_value(json_object_get(tags, "p1")), 1);
    T_EQ_INT(json_integer_value(json_object_get(tags, "h1")), 2);
    T_EQ_INT(json_integer_value(
                 json_object_get(paths, "/f/tag=p1/v1/chat/completions")),
             1);
    T_EQ_INT(json_integer_value(json_object_get(paths, "/v1/chat/completions")),
             2);
    T_EQ_INT(json_integer_value(json_object_get(
                 json_object_get(s, "by_model"), "upstream-model")),
             3);
    json_decref(s);
    json_decref(b);
}

static void
test_cancel(void)
{
    prov_set(NULL, 10000, 5000);
    /* From on_event, in the middle of a stream. */
    struct rec r = {0};
    r.cancel_at = 3;
    json_t *b = chat_body("fake:chunks=20;chunk_delay_ms=20", 1, 0);
    start_rec(&r, b, 1, 0);
    run_for(1500);
    T_EQ_INT(r.n_ev, 3);
    T_EQ_INT(r.done, 0);
    T_EQ_INT(pv_loop_active(loop), 0);
    rec_free(&r);
    /* From on_event when the whole stream is in one read. */
    r.cancel_at = 2;
    json_decref(b);
    b = chat_body("fake:chunks=5", 1, 0);
    start_rec(&r, b, 1, 0);
    run_for(500);
    T_EQ_INT(r.n_ev, 2);
    T_EQ_INT(r.done, 0);
    rec_free(&r);
    /* From on_head. */
    r.cancel_in_head = 1;
    start_rec(&r, b, 1, 0);
    run_for(500);
    T_EQ_INT(r.heads, 1);
    T_EQ_INT(r.n_ev, 0);
    T_EQ_INT(r.done, 0);
    rec_free(&r);
    /* Right after start, before any byte. */
    start_rec(&r, b, 1, 0);
    pv_call_cancel(r.call);
    T_EQ_INT(pv_loop_active(loop), 0);
    run_for(300);
    T_EQ_INT(r.heads + r.n_ev + r.done, 0);
    rec_free(&r);
    json_decref(b);
    /* The loop still works afterwards. */
    b = chat_body("hi", 0, 0);
    start_rec(&r, b, 0, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_OK);
    rec_free(&r);
    json_decref(b);
}

static void
test_pause_resume(void)
{
    prov_set(NULL, 20000, 5000);
    fake_reset();
    struct rec r = {0};
    r.pause_at = 1;
    json_t *b = chat_body("fake:chunks=8;chunk_delay_ms=30", 1, 0);
    start_rec(&r, b, 1, 0);
    struct rec *rp = &r;
    T_CHECK(run_until(&rp, 1, 10000, 1));
    T_EQ_INT(r.paused, 1);
    int n1 = r.n_ev;
    /* Wait until the fake has written the whole stream: all bytes are
     * then ours to read, and only the pause holds them back. */
    for (int i = 0; i < 100; i++) {
        json_t *s = fake_stats();
        long done = stat_int(s, "completed");
        json_decref(s);
        if (done >= 1)
            break;
        usleep(50000);
    }
    run_for(300);
    T_EQ_INT(r.n_ev, n1);
    T_EQ_INT(r.done, 0);
    T_EQ_INT(pv_loop_active(loop), 1);
    pv_call_resume(r.call);
    pv_call_resume(r.call); /* idempotent */
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_OK);
    T_EQ_INT(r.n_ev, 1 + 8 + 1 + 1);
    if (r.n_ev == 11)
        T_EQ_STR(r.ev[10], "[DONE]");
    /* Events in order: tok1 .. tok8. */
    int in_order = r.n_ev == 11;
    for (int i = 1; in_order && i <= 8; i++) {
        char want[16];
        snprintf(want, sizeof(want), "tok%d\"", i);
        if (!strstr(r.ev[i], want))
            in_order = 0;
    }
    T_CHECK(in_order);
    rec_free(&r);
    json_decref(b);
}

static void
test_concurrent(void)
{
    prov_set(NULL, 20000, 5000);
    fake_reset();
    enum { N = 20 };
    struct rec rs[N];
    struct rec *ptr[N];
    json_t *bodies[N];
    memset(rs, 0, sizeof(rs));
    for (int i = 0; i < N; i++) {
        bodies[i] = chat_body("fake:chunks=5;chunk_delay_ms=10", i % 2, 0);
        ptr[i] = &rs[i];
        start_rec(&rs[i], bodies[i], i % 2, 0);
    }
    T_EQ_INT(pv_loop_active(loop), N);
    T_CHECK(run_until(ptr, N, 20000, 0));
    int ok = 0, events_ok = 0;
    for (int i = 0; i < N; i++) {
        if (rs[i].done == 1 && rs[i].res.outcome == PV_OK)
            ok++;
        if (rs[i].n_ev == (i % 2 ? 1 + 5 + 1 + 1 : 0))
            events_ok++;
        rec_free(&rs[i]);
        json_decref(bodies[i]);
    }
    T_EQ_INT(ok, N);
    T_EQ_INT(events_ok, N);
    T_EQ_INT(pv_loop_active(loop), 0);
    json_t *s = fake_stats();
    T_EQ_INT(stat_int(s, "requests"), N);
    json_decref(s);
}

static void
test_start_from_callback(void)
{
    /* on_event of one call starts another (the start is deferred until
     * libcurl returns); both finish. */
    prov_set(NULL, 10000, 5000);
    struct rec a = {0}, c = {0};
    json_t *ba = chat_body("fake:chunks=2", 1, 0);
    json_t *bc = chat_body("hi", 0, 0);
    a.spawn = &c;
    a.spawn_body = bc;
    start_rec(&a, ba, 1, 0);
    struct rec *both[2] = {&a, &c};
    T_CHECK(run1(&a, 10000));
    T_CHECK(run_until(both, 2, 10000, 0));
    T_EQ_INT(a.res.outcome, PV_OK);
    T_EQ_INT(c.res.outcome, PV_OK);
    T_CHECK(c.body && strstr(c.body, "Hello from fake provider"));
    rec_free(&a);
    rec_free(&c);
    json_decref(ba);
    json_decref(bc);
}

static void
test_loop_free_in_flight(void)
{
    /* Freeing a loop with calls in flight: no callback, nothing leaks
     * (the asan build checks the latter). */
    struct pv_loop *l2 = pv_loop_new(base, NULL, 0);
    struct pv_loop *saved = loop;
    loop = l2;
    prov_set("delay_ms=2000", 10000, 5000);
    struct rec r[3];
    memset(r, 0, sizeof(r));
    json_t *b = chat_body("hi", 1, 0);
    for (int i = 0; i < 3; i++)
        start_rec(&r[i], b, 1, 0);
    run_for(200);
    T_EQ_INT(pv_loop_active(l2), 3);
    pv_loop_free(l2);
    loop = saved;
    run_for(100);
    for (int i = 0; i < 3; i++) {
        T_EQ_INT(r[i].done + r[i].heads + r[i].n_ev, 0);
        rec_free(&r[i]);
    }
    json_decref(b);
    pv_loop_free(NULL);
}

static void
test_no_secret_in_logs(void)
{
    /* Debug logging on, stderr into a file: calls that succeed, fail and
     * get the key echoed back log lines, none with the key. */
    char path[] = "/tmp/llmux-pvlog-XXXXXX";
    int fd = mkstemp(path);
    T_CHECK(fd >= 0);
    if (fd < 0)
        return;
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    int old_level = gx_log_level;
    gx_log_level = GX_LOG_DEBUG;
    prov_set(NULL, 10000, 5000);
    const char *msgs[] = {"hi", "fake:status=401;message=key sk-test-123456",
                          "fake:reset"};
    for (int i = 0; i < 3; i++) {
        struct rec r = {0};
        json_t *b = chat_body(msgs[i], 0, 0);
        start_rec(&r, b, 0, 0);
        run1(&r, 10000);
        rec_free(&r);
        json_decref(b);
    }
    gx_log_level = old_level;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[8192];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    unlink(path);
    buf[n > 0 ? n : 0] = '\0';
    T_CHECK(strstr(buf, "upstream ok") != NULL);
    T_CHECK(strstr(buf, "req-42") != NULL);
    T_CHECK(strstr(buf, "sk-test-123456") == NULL);
}

/* Many calls with random misbehaviour, cancels, pauses and resumes on one
 * loop (fixed seed): every call ends exactly once or stays silent after
 * its cancel; nothing leaks or is used after free (asan build). */
static struct rec chaos[40];

static void
test_chaos(void)
{
    static const char *const dirs[] = {
        "fake:chunks=6;chunk_delay_ms=5", "fake:drop_after=2",
        "fake:reset", "fake:malformed", "fake:status=503",
        "fake:delay_ms=30;chunks=2", "fake:chunks=3", "fake:crlf;comments",
        "fake:slow_first_byte_ms=20;chunks=4"};
    enum { N = sizeof(chaos) / sizeof(chaos[0]) };
    json_t *bodies[N];
    unsigned seed = 777;
    prov_set(NULL, 10000, 5000);
    memset(chaos, 0, sizeof(chaos));
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned x = seed >> 8;
        int stream = (x & 1) != 0;
        bodies[i] = chat_body(dirs[(x >> 1) % 9], stream, (x >> 5) & 1);
        chaos[i].cancel_at = (x >> 6) % 4 == 0 ? 1 + (int)((x >> 8) % 4) : 0;
        chaos[i].pause_at = (x >> 10) % 3 == 0 ? 1 + (int)((x >> 12) % 3) : 0;
        chaos[i].resume_ms = 5 + (int)((x >> 14) % 20);
        chaos[i].cancel_in_head = (x >> 16) % 10 == 0;
        start_rec(&chaos[i], bodies[i], stream, (x >> 5) & 1);
        if ((x >> 18) % 15 == 0) {
            pv_call_cancel(chaos[i].call);
            chaos[i].cancelled = 1;
        }
    }
    /* Done when every call either finished or was cancelled. */
    for (int round = 0; round < 200; round++) {
        int open = 0;
        for (int i = 0; i < N; i++)
            if (!chaos[i].done && !chaos[i].cancelled)
                open++;
        if (!open)
            break;
        run_for(50);
    }
    run_for(100); /* pending resume timers */
    int once = 0, silent = 0, no_after_done = 0, n_cancel = 0, n_pause = 0,
        n_ok = 0;
    for (int i = 0; i < N; i++) {
        n_cancel += chaos[i].cancelled;
        n_pause += chaos[i].pause_at && chaos[i].n_ev >= chaos[i].pause_at;
        n_ok += chaos[i].done && chaos[i].res.outcome == PV_OK;
        if (chaos[i].cancelled ? chaos[i].done == 0 : chaos[i].done == 1)
            once++;
        if (chaos[i].after_cancel == 0)
            silent++;
        if (chaos[i].events_after_done == 0)
            no_after_done++;
        rec_free(&chaos[i]);
        json_decref(bodies[i]);
    }
    fprintf(stderr, "chaos: %d calls, %d cancelled, %d paused, %d ok\n", N,
            n_cancel, n_pause, n_ok);
    T_EQ_INT(once, N);
    T_EQ_INT(silent, N);
    T_EQ_INT(no_after_done, N);
    T_EQ_INT(pv_loop_active(loop), 0);
    /* The loop still serves. */
    struct rec r = {0};
    json_t *b = chat_body("hi", 1, 0);
    start_rec(&r, b, 1, 0);
    T_CHECK(run1(&r, 10000));
    T_EQ_INT(r.res.outcome, PV_OK);
    rec_free(&r);
    json_decref(b);
}

static void
test_outcome_str(void)
{
    T_EQ_STR(pv_outcome_str(PV_OK), "ok");
    T_EQ_STR(pv_outcome_str(PV_ERR_FIRST_BYTE_TIMEOUT), "first byte timeout");
    T_CHECK(pv_outcome_str((enum pv_outcome)99) != NULL);
    struct pv_usage u;
    json_t *j = json_loads("{\"usage\":{\"prompt_tokens\":5,"
                           "\"completion_tokens\":2,\"prompt_tokens_details\":"
                           "{\"cached_tokens\":9}}}",
                           0, NULL);
    T_EQ_INT(pv_usage_parse(j, &u), 1);
    T_EQ_INT(u.prompt_tokens, 5);
    T_EQ_INT(u.cached_tokens, 5); /* never more than the prompt */
    json_decref(j);
    j = json_loads("{\"usage\":null}", 0, NULL);
    T_EQ_INT(pv_usage_parse(j, &u), 0);
    json_decref(j);
}

/* ---- HTTPS upstream ------------------------------------------------------
 * A CA and a server certificate made here (OpenSSL API, EC P-256), the fake
 * provider serving TLS with them, and a provider loaded from JSON with
 * "ca_file": the openai kind over https, non-stream and streamed, and the
 * same calls refused when the CA does not match (verification is on).
 * evhttp speaks HTTP/1.1 only; HTTP/2 is tested through nginx below. */

static EVP_PKEY *
tls_key_new(void)
{
    return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
}

static int
tls_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    int ok = e && X509_add_ext(x, e, -1) == 1;
    X509_EXTENSION_free(e);
    return ok;
}

/* A certificate for key named cn, signed by issuer_key (issuer NULL: self-
 * signed).  is_ca: a CA; else a server certificate for 127.0.0.1 and
 * localhost.  NULL on failure. */
static X509 *
tls_cert_new(EVP_PKEY *key, const char *cn, int is_ca, X509 *issuer,
             EVP_PKEY *issuer_key, long serial)
{
    X509 *x = X509_new();
    if (!x)
        return NULL;
    X509_NAME *name = X509_get_subject_name(x);
    int ok = X509_set_version(x, 2) == 1 &&
             ASN1_INTEGER_set(X509_get_serialNumber(x), serial) == 1 &&
             X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
             X509_gmtime_adj(X509_getm_notAfter(x), 86400) &&
             X509_set_pubkey(x, key) == 1 &&
             X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                        (const unsigned char *)cn, -1, -1,
                                        0) == 1 &&
             X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer)
                                            : name) == 1;
    X509 *iss = issuer ? issuer : x;
    if (ok && is_ca)
        ok = tls_ext(x, iss, NID_basic_constraints, "critical,CA:TRUE") &&
             tls_ext(x, iss, NID_key_usage, "critical,keyCertSign,cRLSign") &&
             tls_ext(x, iss, NID_subject_key_identifier, "hash");
    else if (ok)
        ok = tls_ext(x, iss, NID_basic_constraints, "critical,CA:FALSE") &&
             tls_ext(x, iss, NID_key_usage, "critical,digitalSignature") &&
             tls_ext(x, iss, NID_ext_key_usage, "serverAuth") &&
             tls_ext(x, iss, NID_subject_alt_name,
                     "IP:127.0.0.1,DNS:localhost") &&
             tls_ext(x, iss, NID_authority_key_identifier, "keyid:always");
    if (ok)
        ok = X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256()) > 0;
    if (!ok) {
        X509_free(x);
        return NULL;
    }
    return x;
}

static int
tls_write_pem(const char *dir, const char *file, X509 *x, EVP_PKEY *k,
              char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    int ok = x ? PEM_write_X509(f, x) == 1
               : PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) == 1;
    return fclose(f) == 0 && ok;
}

/* Starts a call on prov/model (not the hand-built globals). */
static void
tls_start(struct rec *r, const struct cfg_provider *p, json_t *body,
          int stream)
{
    struct pv_request req = {
        .provider = p,
        .model = &p->models[0],
        .body = body,
        .stream = stream,
        .request_id = "req-tls",
        .max_body_bytes = max_body,
    };
    struct pv_callbacks cb = {r, r_head, r_event, r_done};
    char err[256] = "";
    T_EQ_INT(pv_call_start(loop, &req, &cb, &r->call, err, sizeof(err)),
             GX_OK);
}

/* A provider from JSON: base_url over https to port, ca_file ca (may be
 * NULL: none). */
static struct cfg *
tls_cfg(int port, const char *ca)
{
    char text[2048], cafield[600] = "";
    if (ca)
        snprintf(cafield, sizeof(cafield), "\"ca_file\": \"%s\",", ca);
    snprintf(text, sizeof(text),
             "{\"providers\": {\"tls\": {\"kind\": \"openai\","
             " \"base_url\": \"https://127.0.0.1:%d/v1\", %s"
             " \"api_key\": \"sk-tls\", \"timeout_ms\": 20000,"
             " \"first_byte_timeout_ms\": 15000,"
             " \"models\": {\"client-model\": {\"upstream\": \"up-tls\","
             " \"input_per_mtok\": 1, \"output_per_mtok\": 2}}}}}",
             port, cafield);
    struct cfg *c = NULL;
    char err[512] = "";
    if (cfg_load_string(text, "tls.json", &c, err, sizeof(err)) != GX_OK)
        fprintf(stderr, "  tls config: %s\n", err);
    return c;
}

struct tls_buf {
    char b[65536];
    size_t n;
};

static size_t
tls_buf_cb(char *data, size_t size, size_t nmemb, void *ud)
{
    struct tls_buf *t = ud;
    size_t n = size * nmemb;
    if (n > sizeof(t->b) - 1 - t->n)
        return 0; /* too big: fail the transfer */
    memcpy(t->b + t->n, data, n);
    t->n += n;
    return n;
}

/* GET /fake/stats over https verified with ca; "requests", or -1. */
static long
tls_fake_requests(int port, const char *ca)
{
    char url[128];
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/fake/stats", port);
    struct tls_buf *t = calloc(1, sizeof(*t));
    CURL *e = curl_easy_init();
    long n = -1;
    if (e && t) {
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_CAINFO, ca);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, tls_buf_cb);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
        if (curl_easy_perform(e) == CURLE_OK) {
            json_t *j = json_loadb(t->b, t->n, 0, NULL);
            if (j)
                n = stat_int(j, "requests");
            json_decref(j);
        }
    }
    curl_easy_cleanup(e);
    free(t);
    return n;
}

/* ---- HTTP/2 over TLS -------------------------------------------------------
 * evhttp has no h2, so nginx (when installed: nginx-light, the benchmark's
 * proxy) stands in as the TLS + h2 front of the plain fake provider: the
 * openai kind must negotiate h2 by ALPN (CURL_HTTP_VERSION_2TLS) for plain
 * and streamed calls, which nginx's access log shows as HTTP/2.0.  Skipped
 * (no checks) when there is no nginx binary. */

static const char *
nginx_bin(void)
{
    static const char *const cands[] = {"/usr/sbin/nginx", "/usr/bin/nginx",
                                        "/usr/local/sbin/nginx", NULL};
    const char *env = getenv("NGINX");
    if (env && *env)
        return access(env, X_OK) == 0 ? env : NULL;
    for (int i = 0; cands[i]; i++)
        if (access(cands[i], X_OK) == 0)
            return cands[i];
    return NULL;
}

/* A port the kernel picks, released for nginx to bind (nginx cannot report
 * a port of its own choosing); 0 on failure. */
static int
free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    int port = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static int
port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* Starts nginx in the foreground (no master) from dir/nginx.conf, TLS + h2
 * on a free port, proxying to the plain fake.  Returns its pid (and port)
 * or -1. */
static pid_t
nginx_start(const char *bin, const char *dir, const char *cert,
            const char *key, int *port_out)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        int port = free_port();
        if (!port)
            return -1;
        char conf[512];
        snprintf(conf, sizeof(conf), "%s/nginx.conf", dir);
        FILE *f = fopen(conf, "w");
        if (!f)
            return -1;
        fprintf(f,
                "daemon off; master_process off; worker_processes 1;\n"
                "pid %s/nginx.pid; error_log %s/error.log warn;\n"
                "events { worker_connections 64; }\n"
                "http {\n"
                " log_format p '$server_protocol $status $connection "
                "$request_uri';\n"
                " access_log %s/access.log p;\n"
                " client_body_temp_path %s/t1; proxy_temp_path %s/t2;\n"
                " fastcgi_temp_path %s/t3; uwsgi_temp_path %s/t4;\n"
                " scgi_temp_path %s/t5;\n"
                " server {\n"
                "  listen 127.0.0.1:%d ssl http2;\n"
                "  ssl_certificate %s; ssl_certificate_key %s;\n"
                "  location / {\n"
                "   proxy_pass http://127.0.0.1:%d;\n"
                "   proxy_http_version 1.1; proxy_set_header Connection \"\";\n"
                "   proxy_buffering off;\n"
                "  }\n"
                " }\n"
                "}\n",
                dir, dir, dir, dir, dir, dir, dir, dir, port, cert, key,
                fake.port);
        fclose(f);
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            if (devnull >= 0) {
                dup2(devnull, 1);
                dup2(devnull, 2);
            }
            char errlog[512];
            snprintf(errlog, sizeof(errlog), "%s/error.log", dir);
            execl(bin, bin, "-p", dir, "-c", conf, "-e", errlog, (char *)NULL);
            _exit(127);
        }
        for (int i = 0; i < 100; i++) { /* up to 10 s */
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) {
                pid = -1; /* exited: the port was taken meanwhile? retry */
                break;
            }
            if (port_open(port)) {
                *port_out = port;
                return pid;
            }
            usleep(100 * 1000);
        }
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return -1;
        }
    }
    return -1;
}

static void
nginx_stop(pid_t pid)
{
    kill(pid, SIGQUIT); /* graceful: flushes the access log */
    for (int i = 0; i < 100; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return;
        usleep(100 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Calls through nginx: N concurrent (half streamed), then checks that
 * every request nginx logged came over HTTP/2. */
static void
h2_via_nginx(const char *dir, const char *ca, const char *cert,
             const char *key)
{
    const char *bin = nginx_bin();
    if (!bin) {
        fprintf(stderr, "  no nginx: HTTP/2 over TLS not tested\n");
        return;
    }
    int port = 0;
    pid_t pid = nginx_start(bin, dir, cert, key, &port);
    T_CHECK(pid > 0);
    if (pid <= 0) {
        fprintf(stderr, "  nginx did not start; see %s/error.log\n", dir);
        return;
    }
    struct cfg *c = tls_cfg(port, ca);
    T_CHECK(c != NULL);
    if (c) {
        enum { N = 6 };
        struct rec rs[N];
        struct rec *ptr[N];
        json_t *bodies[N];
        memset(rs, 0, sizeof(rs));
        for (int i = 0; i < N; i++) {
            bodies[i] = chat_body("fake:chunks=4;chunk_delay_ms=5", i % 2, 0);
            ptr[i] = &rs[i];
            tls_start(&rs[i], &c->providers[0], bodies[i], i % 2);
        }
        T_CHECK(run_until(ptr, N, 30000, 0));
        int ok = 0, events_ok = 0;
        for (int i = 0; i < N; i++) {
            if (rs[i].done == 1 && rs[i].res.outcome == PV_OK)
                ok++;
            else
                fprintf(stderr, "  h2 call %d: %s\n", i, rs[i].res.detail);
            if (rs[i].n_ev == (i % 2 ? 1 + 4 + 1 + 1 : 0) &&
                (i % 2 || (rs[i].body && strstr(rs[i].body, "choices"))))
                events_ok++;
            rec_free(&rs[i]);
            json_decref(bodies[i]);
        }
        T_EQ_INT(ok, N);
        T_EQ_INT(events_ok, N);
        cfg_free(c);
    }
    nginx_stop(pid);
    /* "HTTP/2.0 200 <connection> /v1/chat/completions", one per call. */
    char path[512], line[512];
    snprintf(path, sizeof(path), "%s/access.log", dir);
    FILE *f = fopen(path, "r");
    int lines = 0, h2 = 0;
    long conns[64];
    int n_conns = 0;
    while (f && fgets(line, sizeof(line), f)) {
        lines++;
        if (strncmp(line, "HTTP/2.0 200 ", 13) == 0)
            h2++;
        else
            fprintf(stderr, "  nginx saw: %s", line);
        long cn = strtol(line + 13, NULL, 10);
        int seen = 0;
        for (int i = 0; i < n_conns; i++)
            seen |= conns[i] == cn;
        if (!seen && n_conns < 64)
            conns[n_conns++] = cn;
    }
    if (f)
        fclose(f);
    T_EQ_INT(lines, 6);
    T_EQ_INT(h2, 6);
    /* PIPEWAIT should put the burst on one connection; reported, not
     * asserted (libcurl may open a second one while ALPN is pending). */
    fprintf(stderr, "  h2 via nginx: %d calls on %d connection(s)\n", lines,
            n_conns);
    static const char *const files[] = {"nginx.conf", "access.log",
                                        "error.log", "nginx.pid", NULL};
    static const char *const dirs[] = {"t1", "t2", "t3", "t4", "t5", NULL};
    for (int i = 0; files[i]; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }
    for (int i = 0; dirs[i]; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, dirs[i]);
        rmdir(path);
    }
}

static void
test_https(void)
{
    char *dir = e2e_temp_dir();
    char ca_path[512], cert_path[512], key_path[512], other_path[512];
    EVP_PKEY *ca_key = tls_key_new(), *srv_key = tls_key_new();
    EVP_PKEY *other_key = tls_key_new();
    X509 *ca = ca_key ? tls_cert_new(ca_key, "llmux test CA", 1, NULL, NULL, 1)
                      : NULL;
    X509 *srv = ca && srv_key ? tls_cert_new(srv_key, "127.0.0.1", 0, ca,
                                             ca_key, 2)
                              : NULL;
    X509 *other = other_key ? tls_cert_new(other_key, "another CA", 1, NULL,
                                           NULL, 3)
                            : NULL;
    int made = dir && srv && other &&
               tls_write_pem(dir, "ca.pem", ca, NULL, ca_path,
                             sizeof(ca_path)) &&
               tls_write_pem(dir, "server.pem", srv, NULL, cert_path,
                             sizeof(cert_path)) &&
               tls_write_pem(dir, "server.key", NULL, srv_key, key_path,
                             sizeof(key_path)) &&
               tls_write_pem(dir, "other.pem", other, NULL, other_path,
                             sizeof(other_path));
    T_CHECK(made);
    X509_free(ca);
    X509_free(srv);
    X509_free(other);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(srv_key);
    EVP_PKEY_free(other_key);
    if (!made) {
        free(dir);
        return;
    }

    struct e2e_proc tf;
    const char *bin =
        e2e_env("FAKE_PROVIDER", "build/release/tests/fake_provider");
    char *argv[] = {(char *)bin,  "--port",     "0",      "--max-seconds",
                    "300",        "--tls-cert", cert_path, "--tls-key",
                    key_path,     NULL};
    if (e2e_start(&tf, argv, "PORT ", 10000) != 0) {
        T_CHECK(0);
        free(dir);
        return;
    }

    /* The config path: "ca_file" reaches the provider. */
    struct cfg *c = tls_cfg(tf.port, ca_path);
    T_CHECK(c != NULL);
    if (c) {
        const struct cfg_provider *p = &c->providers[0];
        T_EQ_STR(p->ca_file, ca_path);

        /* Non-stream over https. */
        struct rec r = {0};
        json_t *b = chat_body("fake:content=over tls", 0, 0);
        tls_start(&r, p, b, 0);
        T_CHECK(run1(&r, 20000));
        T_EQ_INT(r.res.outcome, PV_OK);
        T_EQ_INT(r.head_status, 200);
        T_CHECK(r.body && strstr(r.body, "over tls"));
        T_EQ_INT(r.res.usage.have, 1);
        if (r.res.outcome != PV_OK)
            fprintf(stderr, "  https call: %s\n", r.res.detail);
        json_decref(b);
        rec_free(&r);

        /* Streamed over https: role, 3 chunks, finish, [DONE]. */
        b = chat_body("fake:chunks=3;chunk_delay_ms=5", 1, 0);
        tls_start(&r, p, b, 1);
        T_CHECK(run1(&r, 20000));
        T_EQ_INT(r.res.outcome, PV_OK);
        T_EQ_INT(r.n_ev, 1 + 3 + 1 + 1);
        if (r.n_ev == 6)
            T_EQ_STR(r.ev[5], "[DONE]");
        T_EQ_INT(r.res.usage.have, 1);
        T_EQ_INT(r.res.usage.completion_tokens, 3);
        json_decref(b);
        rec_free(&r);

        /* A reset before any answer over TLS: a transport error. */
        b = chat_body("fake:reset", 0, 0);
        tls_start(&r, p, b, 0);
        T_CHECK(run1(&r, 20000));
        T_EQ_INT(r.res.outcome, PV_ERR_TRANSPORT);
        T_EQ_INT(r.done, 1);
        json_decref(b);
        rec_free(&r);

        /* A mid-stream drop over TLS is a transport error, not a hang. */
        b = chat_body("fake:drop_after=2", 1, 0);
        tls_start(&r, p, b, 1);
        T_CHECK(run1(&r, 20000));
        T_EQ_INT(r.res.outcome, PV_ERR_TRANSPORT);
        T_EQ_INT(r.done, 1);
        json_decref(b);
        rec_free(&r);
        cfg_free(c);
    }

    /* Chat requests the TLS fake has seen so far: the four calls above,
     * plus libcurl's one retry of the reset one when it went out on a
     * kept-alive connection (a connection that dies before any answer is
     * taken for a stale one and the request is sent again, once). */
    long seen = tls_fake_requests(tf.port, ca_path);
    T_CHECK(seen == 4 || seen == 5);

    /* Another CA: the handshake fails and nothing reaches the upstream. */
    c = tls_cfg(tf.port, other_path);
    T_CHECK(c != NULL);
    if (c) {
        struct rec r = {0};
        json_t *b = chat_body("hi", 0, 0);
        tls_start(&r, &c->providers[0], b, 0);
        T_CHECK(run1(&r, 20000));
        T_EQ_INT(r.res.outcome, PV_ERR_CONNECT);
        T_EQ_INT(r.heads, 0);
        T_CHECK(strstr(r.res.detail, "sk-tls") == NULL);
        json_decref(b);
        rec_free(&r);
        cfg_free(c);
    }
    /* A ca_file that cannot be read: the call fails, naming the file. */
    c = tls_cfg(tf.port, "/nonexistent/llmux-ca.pem");
    T_CHECK(c != NULL);
    if (c) {
        struct rec r = {0};
        json_t *b = chat_body("hi", 0, 0);
        tls_start(&r, &c->providers[0], b, 0);
        T_CHECK(run1(&r, 20000));
        T_EQ_INT(r.res.outcome, PV_ERR_CONNECT);
        T_CHECK(strstr(r.res.detail, "llmux-ca.pem") != NULL);
        fprintf(stderr, "  unreadable ca_file: %s\n", r.res.detail);
        json_decref(b);
        rec_free(&r);
        cfg_free(c);
    }
    /* No ca_file: the system store does not know our CA either. */
    c = tls_cfg(tf.port, NULL);
    T_CHECK(c != NULL);
    if (c) {
        T_CHECK(c->providers[0].ca_file == NULL);
        struct rec r = {0};
        json_t *b = chat_body("hi", 1, 0);
        tls_start(&r, &c->providers[0], b, 1);
        T_CHECK(run1(&r, 20000));
        T_EQ_INT(r.res.outcome, PV_ERR_CONNECT);
        T_EQ_INT(r.n_ev, 0);
        json_decref(b);
        rec_free(&r);
        cfg_free(c);
    }

    /* HTTP/2: the same client against a TLS + h2 server. */
    h2_via_nginx(dir, ca_path, cert_path, key_path);

    /* The refused handshakes never became requests. */
    T_EQ_INT(tls_fake_requests(tf.port, ca_path), seen);
    T_EQ_INT(e2e_stop(&tf, 15, 10000), 0);
    unlink(ca_path);
    unlink(cert_path);
    unlink(key_path);
    unlink(other_path);
    T_CHECK(rmdir(dir) == 0); /* nothing left behind */
    free(dir);
}

/* "ca_file": an optional string on openai providers only. */
static void
test_ca_file_config(void)
{
    struct cfg *c = NULL;
    char err[512] = "";
    T_EQ_INT(cfg_load_string(
                 "{\"providers\": {\"p\": {\"kind\": \"openai\", \"base_url\":"
                 " \"https://x.example/v1\", \"ca_file\": 5,"
                 " \"models\": {\"gpt-4.1\": {}}}}}",
                 "t.json", &c, err, sizeof(err)),
             GX_EINVAL);
    T_CHECK(strstr(err, "providers.p.ca_file") != NULL);
    T_CHECK(c == NULL);
    err[0] = '\0';
    T_EQ_INT(cfg_load_string(
                 "{\"providers\": {\"l\": {\"kind\": \"local\", \"model_path\":"
                 " \"/m.gguf\", \"ca_file\": \"/ca.pem\","
                 " \"models\": {\"local\": {}}}}}",
                 "t.json", &c, err, sizeof(err)),
             GX_EINVAL);
    T_CHECK(strstr(err, "ca_file") != NULL);
    /* An unset variable means "none", like other optional strings. */
    unsetenv("LLMUX_TEST_NO_SUCH_CA");
    T_EQ_INT(cfg_load_string(
                 "{\"providers\": {\"p\": {\"kind\": \"openai\", \"base_url\":"
                 " \"https://x.example/v1\","
                 " \"ca_file\": \"${LLMUX_TEST_NO_SUCH_CA}\","
                 " \"models\": {\"gpt-4.1\": {}}}}}",
                 "t.json", &c, err, sizeof(err)),
             GX_OK);
    T_CHECK(c && c->providers[0].ca_file == NULL);
    cfg_free(c);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    gx_log_init_from_env();
    if (e2e_start_fake(&fake) != 0) {
        fprintf(stderr, "cannot start the fake provider\n");
        T_CHECK(0);
        return T_END();
    }
    snprintf(fake_url, sizeof(fake_url), "http://127.0.0.1:%d", fake.port);
    base = event_base_new();
    char err[256] = "";
    loop = pv_loop_new(base, err, sizeof(err));
    T_CHECK(loop != NULL);
    if (loop) {
        T_RUN(test_outcome_str);
        T_RUN(test_nonstream_ok);
        T_RUN(test_no_api_key);
        T_RUN(test_body_restored);
        T_RUN(test_body_spliced);
        T_RUN(test_stream_ok);
        T_RUN(test_status);
        T_RUN(test_reset_and_malformed);
        T_RUN(test_too_big);
        T_RUN(test_timeouts);
        T_RUN(test_connect_refused);
        T_RUN(test_connect_timeout);
        T_RUN(test_bad_start);
        T_RUN(test_reuse);
        T_RUN(test_pooled_handle_settings);
        T_RUN(test_fake_tags);
        T_RUN(test_cancel);
        T_RUN(test_pause_resume);
        T_RUN(test_concurrent);
        T_RUN(test_start_from_callback);
        T_RUN(test_chaos);
        T_RUN(test_loop_free_in_flight);
        T_RUN(test_no_secret_in_logs);
        T_RUN(test_ca_file_config);
        T_RUN(test_https);
    }
    pv_loop_free(loop);
    event_base_free(base);
    /* The fake exits 0 on SIGTERM (and, in the asan build, leak-free). */
    int frc = e2e_stop(&fake, 15, 10000);
    T_EQ_INT(frc, 0);
    if (frc != 0)
        fprintf(stderr, "fake provider log: %s\n", fake.log_path);
    curl_global_cleanup();
    return T_END();
}
