/*
 * chat: the life of POST /v1/chat/completions.
 *
 *   parse + validate body -> rt_plan -> attempt (pv_call_start)
 *     -> stream: forward each SSE event as it arrives (headers go out with
 *        the first event, so a failure before it can still fail over)
 *     -> on failure: retryable and attempts left? backoff, next target
 *   -> finish: cost, one ledger row; the response completes (non-stream
 *      body, or the stream's final "data: [DONE]") only after the row is
 *      committed, so a client that saw a complete response has its row.
 *
 * Client disconnects: conn.c calls the request's close callback; the
 * upstream call is cancelled and the row is still logged (status 499).
 * Memory: a gw_req owns its parsed body, attempt log and response copy;
 * it is freed in req_free once the reply is done or the client is gone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "gw_int.h"

/* Past this many bytes waiting for a slow client, stop reading upstream. */
#define GW_STREAM_HIGH_WATER (256 * 1024)

struct gw_req;

/* Whether every attempt of a request was rate limited upstream, and what
 * the client should then hear (the upstream's own words, scrubbed by the
 * provider, and the soonest Retry-After). */
struct gw_ratelimited {
    int all;             /* 1 until an attempt ends otherwise */
    int64_t retry_after_s; /* smallest Retry-After seen, 0 = none */
    char message[256];   /* the first 429's error.message */
};

/* One upstream attempt of a request. */
struct gw_try {
    struct gw_req *r;
    struct pv_call *call; /* NULL when not running */
    struct rt_attempt att;
    const struct cfg_provider *prov;
    const struct cfg_model *model;
};

struct gw_req {
    struct gw_worker *w;
    struct gw_gen *gen; /* config + router this request runs on (a ref) */
    struct gw_hreq *req; /* NULL once the client left (conn.c frees it) */
    char id[GW_REQUEST_ID_MAX + 1];
    json_t *body;
    const char *model_arg; /* borrowed from body */
    struct gw_ticket ticket; /* auth.c: key, limits, reservation */
    int stream;
    int client_include_usage;
    int64_t max_tokens;
    struct rt_plan plan;
    size_t next; /* next index into plan.targets */
    int attempts;
    /* At most two attempts run at once (a hedge); the first to answer
     * wins and the other is cancelled. */
    struct gw_try tries[2];
    int winner; /* index into tries once bytes reached the client, or -1 */
    struct event *ev_hedge;
    const struct cfg_provider *prov; /* of the winning / last attempt */
    const struct cfg_model *model;
    struct gx_buf attempt_log; /* "gpt-4.1@relay: status 503; ..." */
    int all_timeouts;
    struct gw_ratelimited rl; /* every attempt so far ended in 429? */
    struct event *ev_backoff;
    int64_t start_us;
    int64_t upstream_us;  /* the winning attempt's start-to-done time */
    int64_t finish_us;    /* row handed to the ledger */
    int64_t ttft_us; /* -1 until the first byte reached the client */
    int sent_head;   /* stream: 200 + headers sent */
    int paused;
    int64_t n_events;
    int upstream_done_marker; /* upstream sent [DONE] */
    int client_gone;
    int finishing; /* row handed to the ledger */
    /* The outcome. */
    int status;
    char *resp_body; /* non-stream: what the client gets */
    size_t resp_len;
    struct pv_usage usage;
    const char *usage_source;
    int64_t cost_pusd;
    char error[512];
    int64_t retry_after_s; /* > 0: a Retry-After header on the reply */
    char up_headers[PV_FWD_HEADERS_MAX]; /* the last attempt's, to pass on */
    struct gw_req *done_next;
    struct gw_req *live_prev, *live_next; /* w->live */
};

static void start_attempt(struct gw_req *r);
static void cancel_try(struct gw_req *r, struct gw_try *t);
static void finish(struct gw_req *r);
static void finish_error(struct gw_req *r, int status, const char *type,
                         const char *code, const char *msg);

/* ------------------------------------------------------------------ */

static void
req_free(struct gw_req *r)
{
    for (int i = 0; i < 2; i++)
        cancel_try(r, &r->tries[i]);
    if (r->ev_backoff)
        event_free(r->ev_backoff);
    if (r->ev_hedge)
        event_free(r->ev_hedge);
    gw_ticket_settle(r->w->srv->auth, &r->ticket, 0, 0); /* if unsettled */
    json_decref(r->body);
    gx_buf_cleanup(&r->attempt_log);
    free(r->resp_body);
    gw_gen_unref(r->gen);
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else if (r->w->live == r)
        r->w->live = r->live_next;
    if (r->live_next)
        r->live_next->live_prev = r->live_prev;
    r->w->inflight--;
    atomic_fetch_sub(&r->w->srv->stats.inflight, 1);
    free(r);
}

/* Stops a running attempt and tells the router it was ours, not the
 * target's, doing. */
static void
cancel_try(struct gw_req *r, struct gw_try *t)
{
    if (!t->call)
        return;
    pv_call_cancel(t->call);
    t->call = NULL;
    rt_report(r->gen->router, &t->att, RT_CANCELLED, -1, -1, -1);
}

static int
tries_running(const struct gw_req *r)
{
    return (r->tries[0].call != NULL) + (r->tries[1].call != NULL);
}

static void settle_usage(struct gw_req *r, const struct pv_result *res);

/* The client is gone: stop the upstream work and log the row (status 499)
 * unless the row is already on its way. */
static void
client_gone(struct gw_req *r)
{
    r->client_gone = 1;
    for (int i = 0; i < 2; i++)
        cancel_try(r, &r->tries[i]);
    if (r->ev_backoff)
        event_del(r->ev_backoff);
    if (r->ev_hedge)
        event_del(r->ev_hedge);
    if (!r->finishing) {
        r->status = 499;
        snprintf(r->error, sizeof(r->error),
                 "client disconnected before the response completed");
        /* Tokens already streamed are billed upstream: estimate them. */
        settle_usage(r, NULL);
        finish(r); /* logs the row; nothing is sent to a gone client */
    }
}

/* conn.c: the client went away (EOF, a failed write, a timeout, the
 * server freeing it) before the reply ended.  It frees req after this;
 * a peer that only closes its side while we work is seen too, since the
 * connection keeps reading. */
static void
on_client_close(struct gw_hreq *req, void *arg)
{
    (void)req;
    struct gw_req *r = arg;
    GX_LOG(GX_LOG_INFO, r->id, "client closed the connection; cancelling");
    r->req = NULL;
    client_gone(r); /* may free r (via finish -> reply) */
}

/* The upstream's rate-limit headers and request id (pv_result.headers:
 * "name: value\n" lines, already checked and scrubbed by the provider). */
static void
add_upstream_headers(struct gw_hreq *h, const char *lines)
{
    while (*lines) {
        const char *nl = strchr(lines, '\n');
        const char *colon = strchr(lines, ':');
        if (!nl || !colon || colon > nl)
            return;
        char name[80], value[300];
        snprintf(name, sizeof(name), "%.*s", (int)(colon - lines), lines);
        snprintf(value, sizeof(value), "%.*s", (int)(nl - colon - 2),
                 colon + 2);
        gw_hreq_add_header(h, name, value);
        lines = nl + 1;
    }
}

static void
add_llmux_headers(struct gw_req *r, struct gw_hreq *h)
{
    char n[32];
    gw_hreq_add_header(h, "X-Request-Id", r->id);
    gw_hreq_add_header(h, "X-Llmux-Route",
                       r->plan.route ? r->plan.route->name : r->model_arg);
    if (r->prov)
        gw_hreq_add_header(h, "X-Llmux-Provider", r->prov->name);
    if (r->model)
        gw_hreq_add_header(h, "X-Llmux-Model", r->model->name);
    snprintf(n, sizeof(n), "%d", r->attempts);
    gw_hreq_add_header(h, "X-Llmux-Attempts", n);
}

/* ------------------------------------------------------------------ */
/* Usage and cost.                                                      */

static int64_t
estimate_prompt_tokens(const json_t *body)
{
    /* About 4 bytes per token for English text, plus per-message framing;
     * only used when the upstream reports no usage. */
    const json_t *msgs = json_object_get(body, "messages");
    int64_t bytes = 0, n = 0;
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const json_t *c = json_object_get(m, "content");
        if (json_is_string(c))
            bytes += (int64_t)json_string_length(c);
        n++;
    }
    return (bytes + 3) / 4 + 3 * n + 3;
}

static void
settle_usage(struct gw_req *r, const struct pv_result *res)
{
    if (res && res->usage.have) {
        r->usage = res->usage;
        r->usage_source =
            r->prov && r->prov->kind == CFG_KIND_LOCAL ? "local" : "upstream";
    } else {
        memset(&r->usage, 0, sizeof(r->usage));
        r->usage.prompt_tokens = estimate_prompt_tokens(r->body);
        if (r->stream) {
            r->usage.completion_tokens = r->n_events;
        } else if (res && res->body) {
            json_t *o = json_loadb(res->body, res->body_len, 0, NULL);
            const json_t *c = json_object_get(
                json_object_get(json_array_get(json_object_get(o, "choices"),
                                               0),
                                "message"),
                "content");
            r->usage.completion_tokens =
                json_is_string(c) ? ((int64_t)json_string_length(c) + 3) / 4
                                  : 0;
            json_decref(o);
        }
        r->usage_source = "estimated";
    }
    r->cost_pusd = 0;
    if (r->model && r->model->has_price) {
        struct pr_price p = {r->model->input_pusd,
                             r->model->cached_input_pusd,
                             r->model->output_pusd};
        int64_t cached = r->usage.cached_tokens;
        if (cached > r->usage.prompt_tokens)
            cached = r->usage.prompt_tokens;
        if (pr_cost(&p, r->usage.prompt_tokens, cached,
                    r->usage.completion_tokens, &r->cost_pusd) != GX_OK) {
            GX_LOG(GX_LOG_WARN, r->id, "cost could not be computed; logged 0");
            r->cost_pusd = 0;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Completion: ledger first, reply after the commit.                    */

static void
on_committed(void *ud, int ok)
{
    /* Ledger thread: hand the request back to its worker. */
    struct gw_req *r = ud;
    struct gw_worker *w = r->w;
    if (!ok)
        GX_LOG(GX_LOG_ERROR, r->id, "usage row could not be committed");
    pthread_mutex_lock(&w->done_mu);
    r->done_next = w->done_head;
    w->done_head = r;
    pthread_mutex_unlock(&w->done_mu);
    gw_worker_wake(w);
}

static void
complete_reply(struct gw_req *r)
{
    GX_LOG(GX_LOG_DEBUG, r->id,
           "done status %d attempts %d total %lldus upstream %lldus "
           "ledger %lldus",
           r->status, r->attempts, (long long)(gx_mono_us() - r->start_us),
           (long long)r->upstream_us,
           (long long)(r->finish_us ? gx_mono_us() - r->finish_us : 0));
    if (r->client_gone || !r->req) {
        req_free(r);
        return;
    }
    struct gw_hreq *req = r->req;
    if (r->stream && r->sent_head) {
        struct evbuffer *b = evbuffer_new();
        if (b) {
            if (r->status >= 400) {
                json_t *e = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error",
                                      "message", r->error, "type",
                                      "upstream_error", "param", "code",
                                      "stream_interrupted");
                char *t = e ? json_dumps(e, JSON_COMPACT) : NULL;
                if (t)
                    evbuffer_add_printf(b, "data: %s\n\n", t);
                free(t);
                json_decref(e);
            }
            evbuffer_add(b, "data: [DONE]\n\n", 14);
        }
        /* The last events and the terminating chunk in one write. */
        gw_hreq_reply_end(req, b);
        if (b)
            evbuffer_free(b);
    } else {
        struct gw_hreq *h = req;
        add_llmux_headers(r, h);
        add_upstream_headers(h, r->up_headers);
        if (r->retry_after_s > 0) {
            char ra[32];
            snprintf(ra, sizeof(ra), "%lld", (long long)r->retry_after_s);
            gw_hreq_add_header(h, "Retry-After", ra);
        }
        if (r->status < 400) {
            char cost[48];
            pr_pusd_format(r->cost_pusd, cost, sizeof(cost));
            gw_hreq_add_header(h, "X-Llmux-Cost-Usd", cost);
        }
        gw_hreq_add_header(h, "Content-Type", "application/json");
        struct evbuffer *b = evbuffer_new();
        if (b && r->resp_body)
            evbuffer_add(b, r->resp_body, r->resp_len);
        gw_hreq_send_reply(req, r->status, b);
        if (b)
            evbuffer_free(b);
    }
    r->req = NULL; /* ended: conn.c has it back */
    if (r->status >= 400)
        atomic_fetch_add(&r->w->srv->stats.errors, 1);
    req_free(r);
}

void
gw_chat_abort_all(struct gw_worker *w)
{
    /* Rows already with the ledger: let them commit and answer them. */
    if (w->srv->ledger)
        pr_ledger_flush(w->srv->ledger);
    gw_chat_run_done(w);
    int n = 0;
    for (struct gw_req *r = w->live; r; r = r->live_next) {
        if (r->finishing)
            continue;
        for (int i = 0; i < 2; i++)
            cancel_try(r, &r->tries[i]);
        if (r->ev_backoff)
            event_del(r->ev_backoff);
        if (r->ev_hedge)
            event_del(r->ev_hedge);
        n++;
    }
    if (n)
        GX_LOG(GX_LOG_WARN, NULL,
               "worker %d: answering %d requests still in flight at the "
               "shutdown deadline with an error",
               w->index, n);
    /* finish() may free r (ledger refused it): walk with care. */
    struct gw_req *r = w->live;
    while (r) {
        struct gw_req *next = r->live_next;
        if (!r->finishing) {
            settle_usage(r, NULL);
            if (r->stream && r->sent_head) {
                r->status = 503;
                snprintf(r->error, sizeof(r->error),
                         "llmux shut down before the answer completed");
                finish(r);
            } else {
                finish_error(r, 503, "server_error", "shutting_down",
                             "llmux shut down before the answer completed; "
                             "retry on another instance");
            }
        }
        r = next;
    }
    if (w->srv->ledger)
        pr_ledger_flush(w->srv->ledger);
    gw_chat_run_done(w);
}

void
gw_chat_run_done(struct gw_worker *w)
{
    pthread_mutex_lock(&w->done_mu);
    struct gw_req *r = w->done_head;
    w->done_head = NULL;
    pthread_mutex_unlock(&w->done_mu);
    while (r) {
        struct gw_req *next = r->done_next;
        complete_reply(r);
        r = next;
    }
}

static void
finish(struct gw_req *r)
{
    r->finishing = 1;
    /* auth.c: charge the key what it cost, release the reservation. */
    gw_ticket_settle(r->w->srv->auth, &r->ticket,
                     r->usage.prompt_tokens + r->usage.completion_tokens,
                     r->cost_pusd);
    r->finish_us = gx_mono_us();
    struct pr_usage_row row = {
        .ts_ms = gx_now_ms(),
        .request_id = r->id,
        .key_id = r->ticket.key_id,
        .route = r->plan.route ? r->plan.route->name : NULL,
        .provider = r->prov ? r->prov->name : NULL,
        .model = r->model ? r->model->name : r->model_arg,
        .status = r->status,
        .attempts = r->attempts,
        .stream = r->stream,
        .prompt_tokens = r->usage.prompt_tokens,
        .completion_tokens = r->usage.completion_tokens,
        .cached_tokens = r->usage.cached_tokens,
        .cost_pusd = r->cost_pusd,
        .latency_ms = (gx_mono_us() - r->start_us) / 1000,
        .ttft_ms = r->ttft_us >= 0 ? r->ttft_us / 1000 : -1,
        .usage_source = r->usage_source ? r->usage_source : "estimated",
        .error = r->error[0] ? r->error : NULL,
    };
    gw_obs_request(r->w, &row);
    struct pr_ledger *l = r->w->srv->ledger;
    if (!l || pr_ledger_submit(l, &row, on_committed, r) != GX_OK) {
        if (l)
            GX_LOG(GX_LOG_ERROR, r->id,
                   "usage ledger refused the row; answering anyway");
        complete_reply(r);
    }
}

/* Sets a non-stream error body in OpenAI's shape and finishes. */
static void
finish_error(struct gw_req *r, int status, const char *type, const char *code,
             const char *msg)
{
    r->status = status;
    snprintf(r->error, sizeof(r->error), "%s", msg);
    json_t *o = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg,
                          "type", type, "param", "code", code);
    free(r->resp_body);
    r->resp_body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    r->resp_len = r->resp_body ? strlen(r->resp_body) : 0;
    json_decref(o);
    if (r->usage_source == NULL)
        r->usage_source = "estimated";
    finish(r);
}

/* ------------------------------------------------------------------ */
/* Upstream callbacks.                                                  */

static void
on_drained(struct gw_hreq *req, void *arg)
{
    (void)req;
    struct gw_req *r = arg;
    if (r->paused && r->winner >= 0 && r->tries[r->winner].call) {
        r->paused = 0;
        pv_call_resume(r->tries[r->winner].call);
    }
}
static void
on_head(void *ud, int http_status)
{
    (void)ud;
    (void)http_status;
}

/* One event with data as its data field, per the SSE format: a "data: "
 * line for every line of it (an upstream may spread one JSON chunk over
 * several data lines; written after a single "data: " its later lines
 * would be unknown fields to the client's parser), then a blank line. */
static void
sse_add_data(struct evbuffer *b, const char *data, size_t len)
{
    for (;;) {
        const char *nl = memchr(data, '\n', len);
        size_t l = nl ? (size_t)(nl - data) : len;
        evbuffer_add(b, "data: ", 6);
        evbuffer_add(b, data, l);
        evbuffer_add(b, "\n", 1);
        if (!nl)
            break;
        data += l + 1;
        len -= l + 1;
    }
    evbuffer_add(b, "\n", 1);
}

static void
on_event(void *ud, const char *data, size_t len)
{
    struct gw_try *t = ud;
    struct gw_req *r = t->r;
    if (r->client_gone || !r->req)
        return;
    int me = (int)(t - r->tries);
    if (r->winner < 0) {
        /* First bytes: this attempt wins; a hedged rival is cancelled
         * before anything of it reached the client. */
        r->winner = me;
        cancel_try(r, &r->tries[1 - me]);
        if (r->ev_hedge)
            event_del(r->ev_hedge);
        r->prov = t->prov;
        r->model = t->model;
    } else if (r->winner != me) {
        return;
    }
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        r->upstream_done_marker = 1; /* held until the row commits */
        return;
    }
    struct gw_hreq *req = r->req;
    if (!r->sent_head) {
        struct gw_hreq *h = req;
        add_llmux_headers(r, h);
        add_upstream_headers(h, pv_call_headers(t->call));
        gw_hreq_add_header(h, "Content-Type", "text/event-stream");
        gw_hreq_add_header(h, "Cache-Control", "no-cache");
        gw_hreq_reply_start(req, 200);
        gw_hreq_set_drain_cb(req, on_drained, r);
        r->sent_head = 1;
        r->ttft_us = gx_mono_us() - r->start_us;
    }
    r->n_events++;
    struct evbuffer *b = evbuffer_new();
    if (!b)
        return;
    sse_add_data(b, data, len);
    gw_hreq_reply_chunk(req, b);
    evbuffer_free(b);
    if (t->call && !r->paused) {
        if (gw_hreq_pending(req) > GW_STREAM_HIGH_WATER) {
            r->paused = 1;
            pv_call_pause(t->call);
        }
    }
}
static int
outcome_retryable(const struct gw_req *r, const struct pv_result *res)
{
    switch (res->outcome) {
    case PV_ERR_STATUS:
        return rt_status_retryable(r->gen->cfg, res->http_status);
    case PV_ERR_INTERNAL:
    case PV_OK:
        return 0;
    default:
        return 1;
    }
}

static void
on_backoff(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    start_attempt(arg);
}

/* Records how a failed attempt bears on "every attempt was a 429". */
static void
ratelimit_note(struct gw_ratelimited *rl, const struct pv_result *res)
{
    if (!(res && res->outcome == PV_ERR_STATUS && res->http_status == 429)) {
        rl->all = 0;
        return;
    }
    if (res->retry_after_s > 0 &&
        (rl->retry_after_s == 0 || res->retry_after_s < rl->retry_after_s))
        rl->retry_after_s = res->retry_after_s;
    if (rl->message[0])
        return;
    json_t *o = res->body ? json_loadb(res->body, res->body_len, 0, NULL)
                          : NULL;
    const json_t *e = json_object_get(o, "error");
    const json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
    snprintf(rl->message, sizeof(rl->message), "%s",
             json_is_string(m) ? json_string_value(m) : "Rate limited.");
    json_decref(o);
}

static void
fail_all(struct gw_req *r)
{
    char msg[1024];
    if (r->rl.all && r->attempts > 0) {
        /* Every attempt was rate limited: the client's rate-limit handling
         * (the SDKs' RateLimitError, backoff on Retry-After) must run. */
        snprintf(msg, sizeof(msg), "%s (llmux: all %d upstream attempt%s "
                                   "rate limited: %s)",
                 r->rl.message, r->attempts, r->attempts == 1 ? "" : "s",
                 r->attempt_log.data ? r->attempt_log.data : "");
        r->retry_after_s = r->rl.retry_after_s;
        finish_error(r, 429, "requests", "rate_limit_exceeded", msg);
        return;
    }
    int status = r->all_timeouts && r->attempts ? 504 : 502;
    snprintf(msg, sizeof(msg), "All %d upstream attempt%s failed: %s",
             r->attempts, r->attempts == 1 ? "" : "s",
             r->attempt_log.data ? r->attempt_log.data : "no target");
    finish_error(r, status, "upstream_error",
                 status == 504 ? "upstream_timeout" : "upstream_failed", msg);
}

static void
on_done(void *ud, const struct pv_result *res)
{
    struct gw_try *t = ud;
    struct gw_req *r = t->r;
    int me = (int)(t - r->tries);
    t->call = NULL; /* the loop frees it after we return */
    rt_report_pv(r->gen->router, &t->att, r->gen->cfg, res);
    gw_obs_attempt(r->w, t->prov->name, pv_outcome_str(res->outcome));
    if (r->client_gone)
        return; /* the row was logged when the client left */
    if (r->winner >= 0 && r->winner != me)
        return; /* a rival already answered (cannot happen: it was
                   cancelled), be safe */
    r->upstream_us = res->total_us;
    snprintf(r->up_headers, sizeof(r->up_headers), "%s", res->headers);
    if (res->outcome == PV_OK) {
        r->winner = me;
        cancel_try(r, &r->tries[1 - me]);
        if (r->ev_hedge)
            event_del(r->ev_hedge);
        r->prov = t->prov;
        r->model = t->model;
        settle_usage(r, res);
        r->status = 200;
        if (!r->stream) {
            r->resp_body = malloc(res->body_len + 1);
            if (!r->resp_body) {
                finish_error(r, 500, "server_error", "internal_error",
                             "out of memory copying the response");
                return;
            }
            memcpy(r->resp_body, res->body, res->body_len);
            r->resp_body[res->body_len] = '\0';
            r->resp_len = res->body_len;
        }
        finish(r);
        return;
    }

    char tname[256];
    snprintf(tname, sizeof(tname), "%s@%s", t->model->name, t->prov->name);
    const char *reason = pv_outcome_str(res->outcome);
    if (res->outcome == PV_ERR_STATUS)
        gx_buf_printf(&r->attempt_log, "%s%s: status %d",
                      r->attempt_log.len ? "; " : "", tname,
                      res->http_status);
    else
        gx_buf_printf(&r->attempt_log, "%s%s: %s",
                      r->attempt_log.len ? "; " : "", tname, reason);
    int timeout = res->outcome == PV_ERR_CONNECT_TIMEOUT ||
                  res->outcome == PV_ERR_FIRST_BYTE_TIMEOUT ||
                  res->outcome == PV_ERR_TIMEOUT;
    if (!timeout)
        r->all_timeouts = 0;
    ratelimit_note(&r->rl, res);
    GX_LOG(GX_LOG_INFO, r->id, "attempt on %s failed: %s", tname,
           res->detail[0] ? res->detail : reason);

    if (r->stream && r->sent_head) {
        /* Bytes reached the client: no failover; close the stream with an
         * error event. */
        settle_usage(r, NULL);
        r->status = 502;
        snprintf(r->error, sizeof(r->error),
                 "upstream stream from %s failed after the first byte: %s",
                 tname, reason);
        finish(r);
        return;
    }
    if (!outcome_retryable(r, res)) {
        /* The upstream's own 4xx: pass it on (its secret scrubbed). */
        cancel_try(r, &r->tries[1 - me]);
        r->prov = t->prov;
        r->model = t->model;
        r->status = res->http_status ? res->http_status : 502;
        if (res->retry_after_s > 0) /* the upstream's, passed on too */
            r->retry_after_s = res->retry_after_s;
        json_t *o = res->body ? json_loadb(res->body, res->body_len, 0, NULL)
                              : NULL;
        if (json_is_object(json_object_get(o, "error"))) {
            r->resp_body = malloc(res->body_len + 1);
            if (r->resp_body) {
                memcpy(r->resp_body, res->body, res->body_len);
                r->resp_body[res->body_len] = '\0';
                r->resp_len = res->body_len; /* scrubbed by the provider */
            }
            snprintf(r->error, sizeof(r->error), "%s: status %d", tname,
                     res->http_status);
            json_decref(o);
            settle_usage(r, NULL);
            r->usage.completion_tokens = 0;
            r->cost_pusd = 0;
            finish(r);
            return;
        }
        json_decref(o);
        char msg[600];
        snprintf(msg, sizeof(msg), "Upstream %s refused the request: %s",
                 tname, res->outcome == PV_ERR_STATUS ? "non-retryable status"
                                                      : reason);
        finish_error(r, r->status >= 400 ? r->status : 502, "upstream_error",
                     "upstream_rejected", msg);
        return;
    }
    r->prov = t->prov;
    r->model = t->model;
    if (tries_running(r))
        return; /* a hedged rival is still running: it may yet answer */
    if (r->next < r->plan.n && r->attempts < r->plan.max_attempts) {
        int backoff = r->gen->cfg->failover.backoff_ms;
        for (int i = 1; i < r->attempts && backoff < 1000; i++)
            backoff *= 2;
        if (backoff > 1000)
            backoff = 1000;
        if (backoff > 0) {
            /* Jitter in [backoff/2, backoff]. */
            r->w->rng ^= r->w->rng << 13;
            r->w->rng ^= r->w->rng >> 7;
            r->w->rng ^= r->w->rng << 17;
            backoff = backoff / 2 +
                      (int)(r->w->rng % (uint64_t)(backoff / 2 + 1));
            if (!r->ev_backoff)
                r->ev_backoff = evtimer_new(r->w->base, on_backoff, r);
            if (r->ev_backoff) {
                struct timeval tv = {backoff / 1000, (backoff % 1000) * 1000};
                evtimer_add(r->ev_backoff, &tv);
                return;
            }
        }
        start_attempt(r);
        return;
    }
    fail_all(r);
}

static void
on_hedge(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_req *r = arg;
    /* Nothing from the current attempt yet: start the next target too. */
    if (r->winner < 0 && !r->client_gone && !r->finishing &&
        tries_running(r) == 1 && r->next < r->plan.n &&
        r->attempts < r->plan.max_attempts)
        start_attempt(r);
}
static void
start_attempt(struct gw_req *r)
{
    const struct cfg *c = r->gen->cfg;
    struct rt_router *rt = r->gen->router;
    struct gw_try *t = !r->tries[0].call ? &r->tries[0] : &r->tries[1];
    while (r->next < r->plan.n && r->attempts < r->plan.max_attempts) {
        size_t i = r->next++;
        if (!rt_attempt_begin(rt, &r->plan, i, &t->att))
            continue; /* went out of rotation since the plan was made */
        struct cfg_target tg = r->plan.targets[i];
        t->r = r;
        t->prov = &c->providers[tg.provider];
        t->model = &t->prov->models[tg.model];
        if (!r->prov) {
            r->prov = t->prov;
            r->model = t->model;
        }
        r->attempts++;
        atomic_fetch_add(&r->w->srv->stats.upstream_attempts, 1);
        struct pv_request pr = {
            .provider = t->prov,
            .model = t->model,
            .body = r->body,
            .stream = r->stream,
            .client_include_usage = r->client_include_usage,
            .request_id = r->id,
            .max_body_bytes = c->max_body_bytes * 4,
        };
        struct pv_callbacks cb = {t, on_head, on_event, on_done};
        char err[256] = "";
        if (pv_call_start(r->w->pv, &pr, &cb, &t->call, err, sizeof(err)) ==
            GX_OK) {
            int hedge = c->failover.hedge_after_ms;
            if (hedge > 0 && r->next < r->plan.n && tries_running(r) == 1) {
                if (!r->ev_hedge)
                    r->ev_hedge = evtimer_new(r->w->base, on_hedge, r);
                if (r->ev_hedge) {
                    struct timeval tv = {hedge / 1000, (hedge % 1000) * 1000};
                    evtimer_add(r->ev_hedge, &tv);
                }
            }
            return;
        }
        t->call = NULL;
        rt_report(rt, &t->att, RT_CANCELLED, -1, -1, -1);
        gx_buf_printf(&r->attempt_log, "%s%s@%s: %s",
                      r->attempt_log.len ? "; " : "", t->model->name,
                      t->prov->name, err);
        r->all_timeouts = 0;
        ratelimit_note(&r->rl, NULL);
    }
    if (tries_running(r))
        return; /* the running attempt decides */
    fail_all(r);
}
/* ------------------------------------------------------------------ */
/* Entry.                                                               */

void
gw_chat_handle(struct gw_worker *w, struct gw_hreq *req)
{
    /* Who is calling comes first (DESIGN.md section 2): an unknown caller
     * gets 401 before we spend anything on its body.  Limits and budget
     * need the parsed body and are checked after it (gw_chat_admit). */
    if (w->srv->auth) {
        struct gw_authn an;
        gw_auth_identify(w->srv->auth,
                         gw_hreq_header(req, "Authorization"),
                         gx_now_ms(), &an);
        if (an.who == GW_CALLER_NONE) {
            gw_reply_unauthorized(req, &an);
            atomic_fetch_add(&w->srv->stats.errors, 1);
            return;
        }
    }
    struct evbuffer *in = gw_hreq_body(req);
    size_t n = evbuffer_get_length(in);
    if (n == 0) {
        gw_reply_error(req, 400, "invalid_request_error", "invalid_json",
                       NULL, "The request body is empty; send a JSON object "
                             "with 'model' and 'messages'.");
        return;
    }
    if ((int64_t)n > w->gen->cfg->max_body_bytes) {
        gw_reply_error(req, 413, "invalid_request_error",
                       "request_too_large", NULL,
                       "The request body is %zu bytes; the limit is %lld.", n,
                       (long long)w->gen->cfg->max_body_bytes);
        return;
    }
    const char *text = (const char *)evbuffer_pullup(in, -1);
    json_error_t jerr;
    json_t *body = json_loadb(text, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!body) {
        gw_reply_error(req, 400, "invalid_request_error", "invalid_json",
                       NULL,
                       "We could not parse the JSON body of your request "
                       "(line %d, column %d): %s.",
                       jerr.line, jerr.column, jerr.text);
        return;
    }
    char msg[512];
    const char *param = NULL;
    if (pv_request_validate(body, msg, sizeof(msg), &param) != 0) {
        gw_reply_error(req, 400, "invalid_request_error", "invalid_value",
                       param, "%s", msg);
        json_decref(body);
        return;
    }
    struct gw_ticket ticket; /* auth.c: key, allowlist, RPM/TPM, budget */
    if (gw_chat_admit(w->srv, req, body, &ticket) != 0) {
        json_decref(body); /* it replied 401/403/429 */
        return;
    }
    struct gw_req *r = calloc(1, sizeof(*r));
    if (!r) {
        gw_ticket_settle(w->srv->auth, &ticket, 0, 0);
        json_decref(body);
        gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                       "Out of memory.");
        return;
    }
    r->w = w;
    r->live_next = w->live;
    if (w->live)
        w->live->live_prev = r;
    w->live = r;
    r->gen = w->gen;
    gw_gen_ref(r->gen);
    r->req = req;
    r->body = body;
    r->ticket = ticket;
    r->start_us = gx_mono_us();
    r->ttft_us = -1;
    r->all_timeouts = 1;
    r->rl.all = 1;
    gx_buf_init(&r->attempt_log, 4096);
    gw_request_id(w, req, r->id, sizeof(r->id));
    r->model_arg = json_string_value(json_object_get(body, "model"));
    r->stream = json_is_true(json_object_get(body, "stream"));
    r->client_include_usage = json_is_true(json_object_get(
        json_object_get(body, "stream_options"), "include_usage"));
    w->inflight++;
    atomic_fetch_add(&w->srv->stats.inflight, 1);
    atomic_fetch_add(&w->srv->stats.requests, 1);

    r->winner = -1;
    rt_plan_route(r->gen->router, r->model_arg,
                  rt_estimate_prompt_tokens(body),
                  pv_request_completion_cap(body, 0), &r->plan);
    if (r->plan.resolved == 0) {
        gw_hreq_add_header(req, "X-Request-Id", r->id);
        gw_reply_error(req, 404, "invalid_request_error", "model_not_found",
                       "model",
                       "The model '%s' does not exist: it is not a route, "
                       "a MODEL@PROVIDER target or a model any provider "
                       "serves (GET /v1/models lists them).",
                       r->model_arg);
        atomic_fetch_add(&w->srv->stats.errors, 1);
        r->req = NULL; /* answered */
        req_free(r);
        return;
    }
    gw_hreq_set_close_cb(req, on_client_close, r);
    if (r->plan.n == 0) {
        /* Every target is out of rotation (open circuits, Retry-After):
         * answer at once rather than queue behind a dead provider. */
        char why[512], note[700];
        rt_plan_explain(&r->plan, r->gen->cfg, why, sizeof(why));
        snprintf(note, sizeof(note),
                 "No target of '%s' is in rotation right now: %s.",
                 r->model_arg, why);
        r->retry_after_s = (r->plan.retry_after_ms + 999) / 1000;
        if (rt_plan_rate_limited(&r->plan))
            finish_error(r, 429, "requests", "rate_limit_exceeded", note);
        else
            finish_error(r, 503, "upstream_error", "no_target_available",
                         note);
        return;
    }
    start_attempt(r);
}
