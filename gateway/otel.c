/*
 * otel.c: OpenTelemetry traces, OTLP/HTTP with the JSON encoding, off
 * unless the config has an "otel" block.
 *
 *   a chat request   one SERVER span "POST /v1/chat/completions" from
 *                    arrival to its ledger row (route, provider, model,
 *                    status, attempts, tokens, exact cost);
 *   each attempt     one CLIENT child span "upstream MODEL@PROVIDER"
 *                    (target, status, outcome, and for a retry the
 *                    outcome of the attempt before it: the retry reason);
 *   a refusal        a request refused before routing (401, 400, 403,
 *                    404, 413, 429, 503: no ledger row) gets one SERVER
 *                    span "METHOD PATH" of its own, with its status and
 *                    the refusal's error code (llmux.refusal), sampled and
 *                    joined to a client's trace like any other.
 *
 * Trace and span ids are random (a per-thread xorshift128+ seeded from
 * getrandom).  A client's W3C `traceparent` (version 00: 00-TRACE-SPAN-
 * FLAGS, lower-case hex, ids not all zero) is honoured: the request span
 * joins its trace as a child of its span and follows its sampled flag
 * (parent-based sampling); without one, otel.sample_ratio decides.  An
 * invalid header is ignored (a new trace), as the W3C spec asks.
 *
 * Threads: workers fill a span on their own stack and copy it into a
 * bounded ring under a mutex held for the copy only; a full ring drops
 * the span and counts it (queue_full), so a worker never waits for the
 * collector.  One exporter thread owns the curl easy handle: it takes up
 * to OTEL_BATCH spans at a time (after lingering OTEL_LINGER_MS for more
 * once one is there), encodes them with jansson and POSTs them, bounded
 * by otel.timeout_ms; a batch the collector does not take (transport
 * error or non-2xx) is dropped and counted (export_failed), never
 * retried, so a dead collector costs one timeout per batch and nothing
 * else.  gw_otel_free stops the thread after one last bounded export.
 *
 * SIGHUP (gw_otel_apply, main thread): the otel block of the new config
 * applies at once, in place (workers keep the same object): an endpoint
 * added turns tracing on (the ring and the thread are made then), removed
 * turns it off (spans already queued still leave), and endpoint,
 * service_name, sample_ratio, queue and timeout_ms changes apply to the
 * next span and the next export.
 *
 * Secrets: the endpoint may carry credentials; it is never logged.  Span
 * attributes are the same facts as the access log line: key ids, never a
 * key, no prompt text.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <curl/curl.h>

#include "gw_int.h"

#define OTEL_BATCH 512
#define OTEL_LINGER_MS 200
#define OTEL_MAX_ATTRS 14
#define OTEL_STR 96

enum { OTEL_KIND_SERVER = 2, OTEL_KIND_CLIENT = 3 };
enum { OTEL_STATUS_UNSET = 0, OTEL_STATUS_OK = 1, OTEL_STATUS_ERROR = 2 };

struct otel_attr {
    const char *key; /* static */
    int is_int;
    int64_t i;
    char s[OTEL_STR];
};

struct otel_span {
    uint8_t trace[16], span[8], parent[8];
    int has_parent;
    int kind, status;
    int64_t start_ns, end_ns; /* unix time */
    char name[OTEL_STR + 16];
    int n_attr;
    struct otel_attr attr[OTEL_MAX_ATTRS];
};

struct gw_otel {
    atomic_int on;          /* an endpoint is configured: spans are made */
    _Atomic uint64_t sample_q; /* sample_ratio * 2^53 */
    pthread_t thread;
    int started;            /* main thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *endpoint;         /* mu; kept when turned off (the queue drains) */
    char *service;          /* mu */
    long timeout_ms;        /* mu */
    struct otel_span *ring; /* cap slots; mu; made when first on */
    size_t cap, head, n;    /* mu */
    int stop;               /* mu */
    _Atomic int64_t exported, dropped_full, dropped_failed;
};

/* ---- ids ------------------------------------------------------------- */

static _Thread_local uint64_t rng[2];

static uint64_t
rng_next(void)
{
    if (!rng[0] && !rng[1]) {
        if (getrandom(rng, sizeof(rng), 0) != (ssize_t)sizeof(rng)) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            rng[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^
                     (uint64_t)(uintptr_t)&ts;
        }
        rng[1] |= 1; /* never both zero */
    }
    uint64_t s1 = rng[0];
    const uint64_t s0 = rng[1];
    rng[0] = s0;
    s1 ^= s1 << 23;
    rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return rng[1] + s0;
}

static void
random_id(uint8_t *out, size_t n)
{
    int nonzero = 0;
    while (!nonzero) {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t r = rng_next();
            for (size_t k = 0; k < 8 && i + k < n; k++)
                out[i + k] = (uint8_t)(r >> (8 * k));
        }
        for (size_t i = 0; i < n; i++)
            nonzero |= out[i];
    }
}

static int
hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* upper case is invalid in traceparent */
}

/* n bytes from 2n lower-case hex digits; 0 ok, -1 bad or all zero. */
static int
unhex(const char *s, uint8_t *out, size_t n)
{
    int nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        int a = hexval(s[2 * i]), b = hexval(s[2 * i + 1]);
        if (a < 0 || b < 0)
            return -1;
        out[i] = (uint8_t)(a << 4 | b);
        nonzero |= out[i];
    }
    return nonzero ? 0 : -1;
}

static void
tohex(const uint8_t *in, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[in[i] >> 4];
        out[2 * i + 1] = d[in[i] & 15];
    }
    out[2 * n] = '\0';
}

int
gw_otel_parse_traceparent(const char *h, uint8_t trace[16], uint8_t span[8],
                          int *sampled)
{
    /* version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2 */
    size_t len = h ? strlen(h) : 0;
    if (len < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-')
        return -1;
    int v0 = hexval(h[0]), v1 = hexval(h[1]);
    if (v0 < 0 || v1 < 0 || (v0 == 15 && v1 == 15)) /* ff is invalid */
        return -1;
    /* Version 00 is exactly 55 characters; a later version may append
     * "-..." fields, which are not read. */
    if (v0 == 0 && v1 == 0 ? len != 55 : len > 55 && h[55] != '-')
        return -1;
    if (unhex(h + 3, trace, 16) != 0 || unhex(h + 36, span, 8) != 0)
        return -1;
    int f0 = hexval(h[53]), f1 = hexval(h[54]);
    if (f0 < 0 || f1 < 0)
        return -1;
    *sampled = f1 & 1;
    return 0;
}

int64_t
gw_otel_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- spans from workers -------------------------------------------------- */

void
gw_otel_begin(struct gw_otel *o, const struct gw_hreq *req,
              struct gw_trace *t)
{
    memset(t, 0, sizeof(*t));
    if (!o || !atomic_load_explicit(&o->on, memory_order_relaxed))
        return;
    const char *traceparent = gw_hreq_header(req, "traceparent");
    t->start_ns = gw_hreq_arrival_ns(req);
    if (t->start_ns <= 0)
        t->start_ns = gw_otel_now_ns();
    int sampled = 0;
    if (gw_otel_parse_traceparent(traceparent, t->trace_id, t->parent_id,
                                  &sampled) == 0) {
        t->has_parent = 1;
        t->sampled = sampled;
    } else {
        random_id(t->trace_id, 16);
        t->sampled = (rng_next() >> 11) <
                     atomic_load_explicit(&o->sample_q, memory_order_relaxed);
    }
    random_id(t->span_id, 8);
}

static void
attr_s(struct otel_span *s, const char *key, const char *v)
{
    if (!v || s->n_attr >= OTEL_MAX_ATTRS)
        return;
    struct otel_attr *a = &s->attr[s->n_attr++];
    a->key = key;
    a->is_int = 0;
    snprintf(a->s, sizeof(a->s), "%s", v);
}

static void
attr_i(struct otel_span *s, const char *key, int64_t v)
{
    if (s->n_attr >= OTEL_MAX_ATTRS)
        return;
    struct otel_attr *a = &s->attr[s->n_attr++];
    a->key = key;
    a->is_int = 1;
    a->i = v;
}

/* Copies s into the ring, or counts it dropped; never waits for the
 * exporter (the mutex guards a copy). */
static void
push(struct gw_otel *o, const struct otel_span *s)
{
    pthread_mutex_lock(&o->mu);
    if (o->n >= o->cap || o->stop || !o->ring) {
        pthread_mutex_unlock(&o->mu);
        atomic_fetch_add(&o->dropped_full, 1);
        return;
    }
    o->ring[(o->head + o->n) % o->cap] = *s;
    o->n++;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

void
gw_otel_attempt(struct gw_otel *o, struct gw_trace *t, const char *target,
                const char *provider, int64_t start_ns, int http_status,
                const char *outcome)
{
    if (!o || !t->sampled)
        return;
    struct otel_span s;
    memset(&s, 0, sizeof(s));
    memcpy(s.trace, t->trace_id, 16);
    memcpy(s.parent, t->span_id, 8);
    s.has_parent = 1;
    random_id(s.span, 8);
    s.kind = OTEL_KIND_CLIENT;
    s.start_ns = start_ns;
    s.end_ns = gw_otel_now_ns();
    snprintf(s.name, sizeof(s.name), "upstream %s", target);
    t->n_attempts++;
    int ok = outcome && !strcmp(outcome, "ok");
    s.status = ok ? OTEL_STATUS_OK : OTEL_STATUS_ERROR;
    attr_s(&s, "llmux.target", target);
    attr_s(&s, "llmux.provider", provider);
    attr_i(&s, "llmux.attempt", t->n_attempts);
    if (http_status > 0)
        attr_i(&s, "http.response.status_code", http_status);
    attr_s(&s, "llmux.outcome", outcome);
    if (t->last_outcome)
        attr_s(&s, "llmux.retry_reason", t->last_outcome);
    t->last_outcome = ok ? NULL : outcome;
    push(o, &s);
}

void
gw_otel_request(struct gw_otel *o, const struct gw_trace *t,
                const struct pr_usage_row *row)
{
    if (!o || !t->sampled)
        return;
    struct otel_span s;
    memset(&s, 0, sizeof(s));
    memcpy(s.trace, t->trace_id, 16);
    memcpy(s.span, t->span_id, 8);
    memcpy(s.parent, t->parent_id, 8);
    s.has_parent = t->has_parent;
    s.kind = OTEL_KIND_SERVER;
    s.start_ns = t->start_ns;
    s.end_ns = gw_otel_now_ns();
    snprintf(s.name, sizeof(s.name), "POST /v1/chat/completions");
    /* HTTP server spans: 5xx is an error, 4xx the caller's (unset). */
    s.status = row->status >= 500   ? OTEL_STATUS_ERROR
               : row->status < 400 ? OTEL_STATUS_OK
                                   : OTEL_STATUS_UNSET;
    char cost[48];
    pr_pusd_format(row->cost_pusd, cost, sizeof(cost));
    attr_s(&s, "llmux.request_id", row->request_id);
    if (row->key_id >= 0)
        attr_i(&s, "llmux.key_id", row->key_id);
    attr_s(&s, "llmux.route", row->route);
    attr_s(&s, "llmux.provider", row->provider);
    attr_s(&s, "llmux.model", row->model);
    attr_i(&s, "http.response.status_code", row->status);
    attr_i(&s, "llmux.attempts", row->attempts);
    attr_i(&s, "llmux.stream", row->stream);
    attr_i(&s, "gen_ai.usage.input_tokens", row->prompt_tokens);
    attr_i(&s, "gen_ai.usage.output_tokens", row->completion_tokens);
    attr_i(&s, "llmux.cached_tokens", row->cached_tokens);
    attr_s(&s, "llmux.cost_usd", cost);
    attr_s(&s, "llmux.error", row->error);
    push(o, &s);
}

void
gw_otel_refused(struct gw_otel *o, const struct gw_hreq *req, int status,
                const char *model, const char *reason)
{
    if (!o)
        return;
    struct gw_trace t;
    gw_otel_begin(o, req, &t);
    if (!t.sampled)
        return;
    struct otel_span s;
    memset(&s, 0, sizeof(s));
    memcpy(s.trace, t.trace_id, 16);
    memcpy(s.span, t.span_id, 8);
    memcpy(s.parent, t.parent_id, 8);
    s.has_parent = t.has_parent;
    s.kind = OTEL_KIND_SERVER;
    s.start_ns = t.start_ns; /* its arrival */
    s.end_ns = gw_otel_now_ns();
    snprintf(s.name, sizeof(s.name), "%s %.*s", gw_hreq_method_str(req),
             OTEL_STR, gw_hreq_path(req));
    s.status = status >= 500 ? OTEL_STATUS_ERROR : OTEL_STATUS_UNSET;
    attr_s(&s, "llmux.request_id", gw_hreq_id(req));
    attr_s(&s, "llmux.model", model);
    attr_i(&s, "http.response.status_code", status);
    attr_s(&s, "llmux.refusal", reason);
    attr_s(&s, "llmux.error", "refused before routing");
    push(o, &s);
}

/* ---- the exporter thread ------------------------------------------------- */

static json_t *
span_json(const struct otel_span *s)
{
    char tr[33], sp[17], pa[17], st[24], en[24];
    tohex(s->trace, 16, tr);
    tohex(s->span, 8, sp);
    tohex(s->parent, 8, pa);
    /* OTLP/JSON: 64-bit integers as decimal strings. */
    snprintf(st, sizeof(st), "%lld", (long long)s->start_ns);
    snprintf(en, sizeof(en), "%lld", (long long)s->end_ns);
    json_t *attrs = json_array();
    for (int i = 0; i < s->n_attr; i++) {
        const struct otel_attr *a = &s->attr[i];
        json_t *v;
        if (a->is_int) {
            char n[24];
            snprintf(n, sizeof(n), "%lld", (long long)a->i);
            v = json_pack("{s:s}", "intValue", n);
        } else {
            v = json_pack("{s:s}", "stringValue", a->s);
        }
        json_array_append_new(attrs, json_pack("{s:s,s:o}", "key", a->key,
                                               "value", v));
    }
    json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:s,s:s,s:o,s:{s:i}}", "traceId",
                          tr, "spanId", sp, "name", s->name, "kind", s->kind,
                          "startTimeUnixNano", st, "endTimeUnixNano", en,
                          "attributes", attrs, "status", "code", s->status);
    if (o && s->has_parent)
        json_object_set_new(o, "parentSpanId", json_string(pa));
    return o;
}

static size_t
discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

/* Where a batch goes: the settings when it was taken (gw_otel_apply may
 * change them while it is out). */
struct otel_dest {
    char *endpoint, *service;
    long timeout_ms;
};

/* POSTs spans[0..n) to d; 0 when the collector took them (2xx). */
static int
export_batch(const struct otel_dest *d, CURL *h,
             const struct otel_span *spans, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++)
        json_array_append_new(arr, span_json(&spans[i]));
    json_t *doc = json_pack(
        "{s:[{s:{s:[{s:s,s:{s:s}}]},s:[{s:{s:s},s:o}]}]}", "resourceSpans",
        "resource", "attributes", "key", "service.name", "value",
        "stringValue", d->service, "scopeSpans", "scope", "name", "llmux",
        "spans", arr);
    char *body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!body)
        return -1;
    struct curl_slist *hdr =
        curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, d->endpoint);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, d->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, d->timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    CURLcode cc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hdr);
    free(body);
    if (cc != CURLE_OK || code < 200 || code > 299) {
        /* The endpoint may hold credentials: not in the message. */
        GX_LOG(GX_LOG_WARN, NULL,
               "otel: the collector did not take %zu spans (%s); dropped", n,
               cc != CURLE_OK ? curl_easy_strerror(cc) : "non-2xx status");
        return -1;
    }
    return 0;
}

static void *
exporter(void *arg)
{
    struct gw_otel *o = arg;
    CURL *h = curl_easy_init();
    struct otel_span *batch = malloc(sizeof(*batch) * OTEL_BATCH);
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (o->n == 0 && !o->stop)
            pthread_cond_wait(&o->cv, &o->mu);
        if (o->n == 0 && o->stop)
            break;
        if (!o->stop && o->n < OTEL_BATCH) {
            /* Linger so a burst leaves in one POST. */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += OTEL_LINGER_MS * 1000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            while (!o->stop && o->n < OTEL_BATCH &&
                   pthread_cond_timedwait(&o->cv, &o->mu, &until) !=
                       ETIMEDOUT)
                ;
        }
        size_t k = 0;
        while (batch && o->n > 0 && k < OTEL_BATCH) {
            batch[k++] = o->ring[o->head];
            o->head = (o->head + 1) % o->cap;
            o->n--;
        }
        int stopping = o->stop;
        struct otel_dest d = {o->endpoint ? strdup(o->endpoint) : NULL,
                              strdup(o->service ? o->service : "llmux"),
                              o->timeout_ms};
        pthread_mutex_unlock(&o->mu);
        int ok = h && batch && d.endpoint && d.service &&
                 export_batch(&d, h, batch, k) == 0;
        if (d.endpoint)
            memset(d.endpoint, 0, strlen(d.endpoint)); /* may hold a key */
        free(d.endpoint);
        free(d.service);
        atomic_fetch_add(ok ? &o->exported : &o->dropped_failed,
                         (int64_t)k);
        pthread_mutex_lock(&o->mu);
        if (!batch) { /* out of memory: what is queued cannot leave */
            atomic_fetch_add(&o->dropped_failed, (int64_t)o->n);
            o->n = 0;
        }
        if (stopping && !ok) { /* shutting down: one failure is enough */
            atomic_fetch_add(&o->dropped_failed, (int64_t)o->n);
            o->n = 0;
        }
    }
    pthread_mutex_unlock(&o->mu);
    free(batch);
    if (h)
        curl_easy_cleanup(h);
    return NULL;
}

/* ---- life ---------------------------------------------------------------- */

enum gx_status
gw_otel_new(const struct cfg *c, struct gw_otel **out, char *err,
            size_t errlen)
{
    *out = NULL;
    struct gw_otel *o = calloc(1, sizeof(*o));
    if (!o) {
        gx_errf(err, errlen, "otel: out of memory");
        return GX_ENOMEM;
    }
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    enum gx_status st = gw_otel_apply(o, c, err, errlen);
    if (st != GX_OK) {
        gw_otel_free(o);
        return st;
    }
    *out = o;
    return GX_OK;
}

/* Replaces *slot with a copy of v (v NULL: kept). */
static int
set_str(char **slot, const char *v)
{
    if (!v)
        return 0;
    char *c = strdup(v);
    if (!c)
        return -1;
    if (*slot)
        memset(*slot, 0, strlen(*slot)); /* an endpoint may hold a key */
    free(*slot);
    *slot = c;
    return 0;
}

enum gx_status
gw_otel_apply(struct gw_otel *o, const struct cfg *c, char *err,
              size_t errlen)
{
    int on = c->otel_endpoint != NULL;
    size_t cap = c->otel_queue > 0 ? (size_t)c->otel_queue : 2048;
    pthread_mutex_lock(&o->mu);
    int bad = set_str(&o->endpoint, c->otel_endpoint) != 0 ||
              set_str(&o->service, on ? (c->otel_service ? c->otel_service
                                                         : "llmux")
                                      : NULL) != 0;
    if (on)
        o->timeout_ms = c->otel_timeout_ms > 0 ? c->otel_timeout_ms : 5000;
    if (!bad && on && (!o->ring || cap != o->cap)) {
        /* A new ring: the queued spans move over, the oldest first; what
         * does not fit is dropped and counted. */
        struct otel_span *r = calloc(cap, sizeof(*r));
        if (!r) {
            bad = 1;
        } else {
            size_t keep = o->n < cap ? o->n : cap;
            for (size_t i = 0; i < keep; i++)
                r[i] = o->ring[(o->head + i) % o->cap];
            atomic_fetch_add(&o->dropped_full, (int64_t)(o->n - keep));
            free(o->ring);
            o->ring = r;
            o->cap = cap;
            o->head = 0;
            o->n = keep;
        }
    }
    pthread_mutex_unlock(&o->mu);
    if (bad) {
        gx_errf(err, errlen, "otel: out of memory");
        return GX_ENOMEM;
    }
    double q = c->otel_sample * 0x1.0p53;
    atomic_store(&o->sample_q, q <= 0 ? 0 : q >= 0x1.0p53 ? (1ULL << 53)
                                                          : (uint64_t)q);
    if (on && !o->started) {
        if (pthread_create(&o->thread, NULL, exporter, o) != 0) {
            gx_errf(err, errlen, "otel: cannot start the exporter thread");
            return GX_EIO;
        }
        o->started = 1;
    }
    atomic_store(&o->on, on);
    return GX_OK;
}

void
gw_otel_free(struct gw_otel *o)
{
    if (!o)
        return;
    if (o->started) {
        pthread_mutex_lock(&o->mu);
        o->stop = 1;
        pthread_cond_signal(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
    }
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o->ring);
    if (o->endpoint)
        memset(o->endpoint, 0, strlen(o->endpoint));
    free(o->endpoint);
    free(o->service);
    free(o);
}

void
gw_otel_write_metrics(const struct gw_otel *o, struct evbuffer *b)
{
    long long ex = o ? (long long)atomic_load(&o->exported) : 0;
    long long df = o ? (long long)atomic_load(&o->dropped_full) : 0;
    long long de = o ? (long long)atomic_load(&o->dropped_failed) : 0;
    evbuffer_add_printf(
        b,
        "# HELP llmux_otel_exported_spans_total Trace spans the collector "
        "accepted.\n"
        "# TYPE llmux_otel_exported_spans_total counter\n"
        "llmux_otel_exported_spans_total %lld\n"
        "# HELP llmux_otel_dropped_spans_total Trace spans dropped: the "
        "export queue was full, or the collector did not take their "
        "batch.\n"
        "# TYPE llmux_otel_dropped_spans_total counter\n"
        "llmux_otel_dropped_spans_total{reason=\"queue_full\"} %lld\n"
        "llmux_otel_dropped_spans_total{reason=\"export_failed\"} %lld\n",
        ex, df, de);
}
