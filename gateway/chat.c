/*
 * chat: the OpenAI Chat Completions inbound adapter and the HTTP side of a
 * request's life.
 *
 *   body -> pv_chat_parse (once: the format-neutral request every layer
 *   reads) -> rt_plan_route -> admission (key, limits, reservation) ->
 *   the router's run (router/run.c) says what to do; this file does it:
 *   starts calls (pv_call_start), arms backoff and hedge timers, cancels
 *   the rival of a winner, and writes the client's answer (non-stream
 *   body, or SSE events as they arrive: headers go out with the first
 *   event, so a failure before it can still fail over)
 *   -> finish: cost, one ledger row; the response completes (non-stream
 *      body, or the stream's final "data: [DONE]") only after the row is
 *      committed, so a client that saw a complete response has its row.
 *
 * No failover decision is made here: each one is the run's (rt_run_*).
 * Client disconnects: conn.c calls the request's close callback; the
 * upstream call is cancelled and the row is still logged (status 499).
 * Memory: a gw_req owns its parsed request, plan, run and response copy;
 * it is freed in req_free once the reply is done or the client is gone.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "gw_int.h"


struct gw_req;

/* One upstream attempt of a request (a slot of the run). */
struct gw_try {
    struct gw_req *r;
    struct pv_call *call; /* NULL when not running */
    struct rt_attempt att;
    const struct cfg_provider *prov;
    const struct cfg_model *model;
    int64_t start_ns; /* traced: when it began (unix ns) */
};

struct gw_req {
    struct gw_worker *w;
    struct gw_gen *gen; /* config + router this request runs on (a ref) */
    struct gw_hreq *req; /* NULL once the client left (conn.c frees it) */
    const struct gw_api *api; /* its inbound API: parser and writers */
    json_t *api_echo;        /* what api->parse kept for its writer */
    void *api_stream;        /* api->stream_new's state (stream only) */
    struct gx_buf api_out;   /* a stream event's bytes for the client, reused */
    struct gw_ticket ticket; /* auth.c: key, limits, reservation */
    struct rt_run run;       /* the router's run over the plan */
    /* At most two attempts run at once (a hedge); the run says which wins
     * and which is cancelled. */
    struct gw_try tries[2];
    struct gw_trace trace; /* otel.c */
    struct event *ev_hedge;
    struct event *ev_backoff;
    const struct cfg_provider *prov; /* of the winning / last attempt */
    const struct cfg_model *model;
    int64_t start_us;
    int64_t upstream_us;  /* the winning attempt's start-to-done time */
    int64_t finish_us;    /* row handed to the ledger */
    int64_t ttft_us; /* -1 until the first byte reached the client */
    int sent_head;   /* stream: 200 + headers sent */
    int paused;
    int64_t n_events;
    int client_gone;
    int finishing; /* row handed to the ledger */
    int ledger_failed; /* its row could not be committed (ledger thread
                          writes it before handing r back) */
    /* The outcome. */
    int status;
    char *resp_body; /* non-stream: what the client gets (owned) */
    size_t resp_len;
    struct pv_usage usage;
    const char *usage_source;
    int64_t cost_pusd;
    int64_t retry_after_s; /* > 0: a Retry-After header on the reply */
    struct gw_req *done_next;
    struct gw_req *live_prev, *live_next; /* w->live */
    /* Not zeroed at allocation (gw_api_handle zeroes the struct up to
     * chat only: memset of the whole 4.8 KiB was 5.6k instructions a
     * request under callgrind): the parser and rt_plan_route fill chat and
     * plan, the strings start empty. */
    struct pv_chat chat;     /* the request, parsed once */
    struct rt_plan plan;     /* the targets, in order */
    char id[GW_REQUEST_ID_MAX + 1];
    char rl_message[256]; /* the first upstream 429's error.message */
    char error[512];
    char up_headers[PV_FWD_HEADERS_MAX]; /* the last attempt's, to pass on */
};

static void drive(struct gw_req *r, struct rt_step *st);
static void on_done(void *ud, const struct pv_result *res);
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
    pv_chat_cleanup(&r->chat);
    if (r->api_stream)
        r->api->stream_free(r->api_stream);
    json_decref(r->api_echo);
    gx_buf_cleanup(&r->api_out);
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

static void settle_usage(struct gw_req *r, const struct pv_result *res);

/* The client is gone: stop the upstream work and log the row (status 499)
 * unless the row is already on its way. */
static void
client_gone(struct gw_req *r)
{
    r->client_gone = 1;
    rt_run_abort(&r->run);
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
                       r->plan.route ? r->plan.route->name : r->chat.model);
    if (r->prov)
        gw_hreq_add_header(h, "X-Llmux-Provider", r->prov->name);
    if (r->model)
        gw_hreq_add_header(h, "X-Llmux-Model", r->model->name);
    /* Digits by hand: snprintf was 0.6k instructions a reply. */
    unsigned a = r->run.attempts > 0 ? (unsigned)r->run.attempts : 0;
    char *p = n + sizeof(n) - 1;
    *p = '\0';
    do {
        *--p = (char)('0' + a % 10);
        a /= 10;
    } while (a);
    gw_hreq_add_header(h, "X-Llmux-Attempts", p);
}

/* ------------------------------------------------------------------ */
/* Usage and cost.                                                      */

static void
settle_usage(struct gw_req *r, const struct pv_result *res)
{
    if (res && res->usage.have) {
        r->usage = res->usage;
        r->usage_source =
            r->prov && r->prov->kind == CFG_KIND_LOCAL ? "local" : "upstream";
    } else {
        memset(&r->usage, 0, sizeof(r->usage));
        r->usage.prompt_tokens = r->chat.est_prompt_tokens;
        if (r->chat.stream) {
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
        /* Every token class (DESIGN.md section 7): cache writes from the
         * native anthropic kind, reasoning inside completion. */
        struct pr_rates p = {r->model->input_pusd,
                             r->model->cached_input_pusd,
                             r->model->cache_write_pusd,
                             r->model->output_pusd};
        struct pr_tokens t = {r->usage.prompt_tokens, r->usage.cached_tokens,
                              r->usage.cache_write_tokens,
                              r->usage.completion_tokens,
                              r->usage.reasoning_tokens};
        if (t.cached > t.prompt)
            t.cached = t.prompt;
        if (t.cache_write > t.prompt - t.cached)
            t.cache_write = t.prompt - t.cached;
        if (t.reasoning > t.completion)
            t.reasoning = t.completion;
        if (pr_cost_tokens(&p, &t, &r->cost_pusd) != GX_OK) {
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
    gw_obs_commit(w->srv->obs, gx_mono_us() - r->finish_us);
    if (!ok) {
        GX_LOG(GX_LOG_ERROR, r->id, "usage row could not be committed");
        r->ledger_failed = 1;
    }
    pthread_mutex_lock(&w->done_mu);
    int was_empty = w->done_head == NULL;
    r->done_next = w->done_head;
    w->done_head = r;
    pthread_mutex_unlock(&w->done_mu);
    /* One wake-up per batch: a non-empty list has one pending already
     * (the worker empties the list under the same lock). */
    if (was_empty)
        gw_worker_wake(w);
}

/* 1 if t's provider got the client's own body (its answer and events are
 * then already in the inbound API's shape). */
static int
passed(const struct gw_req *r, const struct cfg_provider *p)
{
    return p && r->api->pass && r->api->pass(&r->chat, p->kind);
}

/* A non-stream error body (OpenAI-shaped, or the upstream's own) in the
 * inbound API's shape, if it has one; kept as it is on out of memory. */
static void
api_error_body(struct gw_req *r)
{
    if (!r->api->error || !r->resp_body)
        return;
    size_t n = 0;
    char *e = r->api->error(r->status, r->resp_body, r->resp_len, &n);
    if (e) {
        free(r->resp_body);
        r->resp_body = e;
        r->resp_len = n;
    }
}

static void
complete_reply(struct gw_req *r)
{
    GX_LOG(GX_LOG_DEBUG, r->id,
           "done status %d attempts %d total %lldus upstream %lldus "
           "ledger %lldus",
           r->status, r->run.attempts,
           (long long)(gx_mono_us() - r->start_us),
           (long long)r->upstream_us,
           (long long)(r->finish_us ? gx_mono_us() - r->finish_us : 0));
    if (r->client_gone || !r->req) {
        req_free(r);
        return;
    }
    struct gw_hreq *req = r->req;
    if (r->chat.stream && r->sent_head) {
        struct evbuffer *b = evbuffer_new();
        if (b && r->api_stream) {
            /* The API's own end (e.g. response.completed), after the
             * commit like [DONE]. */
            gx_buf_reset(&r->api_out);
            if (r->api->stream_end(r->api_stream, passed(r, r->prov),
                                   &r->usage, r->status,
                                   r->status >= 400 ? r->error : NULL,
                                   &r->api_out) == GX_OK)
                evbuffer_add(b, r->api_out.data, r->api_out.len);
        } else if (b) {
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
        if (r->ledger_failed) {
            /* Fail closed: an answer whose usage could not be recorded
             * (the usage database is unreachable) is not served. */
            static const char e503[] =
                "{\"error\":{\"message\":\"The usage database is "
                "unreachable, so llmux could not record this request; retry "
                "shortly.\",\"type\":\"server_error\",\"param\":null,"
                "\"code\":\"storage_unavailable\"}}";
            char *b503 = strdup(e503);
            if (b503) {
                free(r->resp_body);
                r->resp_body = b503;
                r->resp_len = sizeof(e503) - 1;
                r->status = 503;
            }
        }
        if (r->ledger_failed)
            api_error_body(r); /* the 503, in the client's API's shape */
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
        /* Straight from the kept body: no evbuffer built and pulled up. */
        gw_hreq_send_body(req, r->status, r->resp_body,
                          r->resp_body ? r->resp_len : 0);
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
        rt_run_abort(&r->run);
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
            if (r->chat.stream && r->sent_head) {
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
    if (!(r->chat.stream && r->sent_head) && r->status >= 400)
        api_error_body(r); /* before the row: the client's shape */
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
        .model = r->model ? r->model->name : r->chat.model,
        .status = r->status,
        .attempts = r->run.attempts,
        .stream = r->chat.stream,
        .prompt_tokens = r->usage.prompt_tokens,
        .completion_tokens = r->usage.completion_tokens,
        .cached_tokens = r->usage.cached_tokens,
        .cost_pusd = r->cost_pusd,
        .latency_ms = (gx_mono_us() - r->start_us) / 1000,
        .ttft_ms = r->ttft_us >= 0 ? r->ttft_us / 1000 : -1,
        .usage_source = r->usage_source ? r->usage_source : "estimated",
        .error = r->error[0] ? r->error : NULL,
        .api = pv_api_name(r->chat.api),
        .cache_write_tokens = r->usage.cache_write_tokens,
        .reasoning_tokens = r->usage.reasoning_tokens,
        /* A target without any price: its cost is unknown, not 0.  A row
         * that never reached a target (r->model NULL) cost nothing. */
        .unpriced = r->model && !r->model->has_price,
    };
    gw_obs_request(r->w, &row);
    gw_otel_request(r->w->srv->otel, &r->trace, &row);
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
    rt_run_abort(&r->run); /* nothing more is started */
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
    int win = r->run.winner;
    if (r->paused && win >= 0 && r->tries[win].call) {
        r->paused = 0;
        pv_call_resume(r->tries[win].call);
    }
}
static void
on_head(void *ud, int http_status)
{
    struct gw_try *t = ud;
    struct gw_req *r = t->r;
    /* A non-stream answer's row follows its head by the body and our
     * finishing: have the ledger writer wake now, so its wake-up is off
     * the reply's path (pricing.h: pr_ledger_prewake). */
    if (!r->chat.stream && http_status >= 200 && http_status < 300)
        pr_ledger_prewake(r->w->srv->ledger);
}

/* One event with data as its data field, per the SSE format: a "data: "
 * line for every line of it (an upstream may spread one JSON chunk over
 * several data lines; written after a single "data: " its later lines
 * would be unknown fields to the client's parser), then a blank line.
 * Composed in b (reset first), so the event goes out in one append. */
static enum gx_status
sse_add_data(struct gx_buf *b, const char *data, size_t len)
{
    enum gx_status st = GX_OK;
    gx_buf_reset(b);
    for (;;) {
        const char *nl = memchr(data, '\n', len);
        size_t l = nl ? (size_t)(nl - data) : len;
        if (st == GX_OK)
            st = gx_buf_append(b, "data: ", 6);
        if (st == GX_OK)
            st = gx_buf_append(b, data, l);
        if (st == GX_OK)
            st = gx_buf_append(b, "\n", 1);
        if (!nl)
            break;
        data += l + 1;
        len -= l + 1;
    }
    return st == GX_OK ? gx_buf_append(b, "\n", 1) : st;
}

static void
on_event(void *ud, const char *data, size_t len)
{
    struct gw_try *t = ud;
    struct gw_req *r = t->r;
    if (r->client_gone || !r->req)
        return;
    int me = (int)(t - r->tries);
    if (r->run.winner < 0) {
        /* First bytes: this attempt wins; a hedged rival is cancelled
         * before anything of it reached the client. */
        int rival = rt_run_first_byte(&r->run, me);
        if (rival >= 0)
            cancel_try(r, &r->tries[rival]);
        if (r->ev_hedge)
            event_del(r->ev_hedge);
        r->prov = t->prov;
        r->model = t->model;
    } else if (r->run.winner != me) {
        return;
    }
    if (len == 6 && !memcmp(data, "[DONE]", 6))
        return; /* ours is written after the row commits */
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
    if (r->api_stream) {
        gx_buf_reset(&r->api_out);
        enum gx_status ws =
            r->api->stream_event(r->api_stream, passed(r, t->prov), data,
                                 len, &r->api_out);
        if (ws == GX_EPROTO)
            GX_LOG(GX_LOG_WARN, r->id, "stream event not translated: "
                                       "malformed");
        gw_hreq_reply_chunk_mem(req, r->api_out.data, r->api_out.len);
        if (ws == GX_ETOOBIG || ws == GX_ENOMEM) {
            /* The writer can keep no more of the answer: rather than a
             * final object that silently lacks text, the stream ends
             * with an error now. */
            rt_run_abort(&r->run);
            cancel_try(r, t);
            settle_usage(r, NULL);
            r->status = 502;
            snprintf(r->error, sizeof(r->error),
                     "the answer is over what llmux keeps for a %s stream "
                     "(%s)",
                     r->api->what,
                     ws == GX_ETOOBIG ? "size cap" : "out of memory");
            finish(r); /* may free r */
            return;
        }
    } else if (sse_add_data(&r->api_out, data, len) == GX_OK) {
        gw_hreq_reply_chunk_mem(req, r->api_out.data, r->api_out.len);
    }
    if (t->call && !r->paused) {
        /* past limits.stream_buffer_bytes waiting for a slow client, the
         * upstream pauses (on_drained resumes it) */
        if (gw_hreq_pending(req) > (size_t)r->gen->cfg->stream_buffer_bytes) {
            r->paused = 1;
            pv_call_pause(t->call);
        }
    }
}
/* ------------------------------------------------------------------ */
/* Driving the run: the I/O each step asks for.                          */

static void
arm(struct gw_req *r, struct event **ev, event_callback_fn fn, int64_t at_us,
    int64_t now_us)
{
    int64_t d = at_us > now_us ? at_us - now_us : 0;
    if (!*ev)
        *ev = evtimer_new(r->w->base, fn, r);
    if (*ev) {
        struct timeval tv = {(time_t)(d / 1000000), (suseconds_t)(d % 1000000)};
        evtimer_add(*ev, &tv);
    }
}

static void
on_backoff(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_req *r = arg;
    struct rt_step st;
    rt_run_next(&r->run, gx_mono_us(), &st);
    drive(r, &st);
}

static void
on_hedge(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_req *r = arg;
    /* Nothing from the current attempt yet: the run may start the next
     * target beside it. */
    struct rt_step st;
    rt_run_hedge(&r->run, gx_mono_us(), &st);
    drive(r, &st);
}

/* Gives up: the run chose the status; the words are ours. */
static void
fail_all(struct gw_req *r, const struct rt_step *st)
{
    char msg[1400];
    int n = r->run.attempts;
    r->retry_after_s = st->retry_after_s;
    if (n == 0) {
        /* Every target is out of rotation (open circuits, Retry-After):
         * answered at once rather than queued behind a dead provider. */
        char why[512];
        rt_plan_explain(&r->plan, r->gen->cfg, why, sizeof(why));
        snprintf(msg, sizeof(msg),
                 "No target of '%s' is in rotation right now: %s.",
                 r->chat.model, why);
    } else if (st->status == 429) {
        snprintf(msg, sizeof(msg),
                 "%s (llmux: all %d upstream attempt%s rate limited: %s)",
                 r->rl_message[0] ? r->rl_message : "Rate limited.", n,
                 n == 1 ? "" : "s", r->run.log);
    } else {
        snprintf(msg, sizeof(msg), "All %d upstream attempt%s failed: %s", n,
                 n == 1 ? "" : "s", r->run.log[0] ? r->run.log : "no target");
    }
    finish_error(r, st->status, st->type, st->code, msg);
}

/* Starts plan.targets[st->target] in slot st->slot; 0 = started. */
static int
start_call(struct gw_req *r, const struct rt_step *st, char *err,
           size_t errlen)
{
    const struct cfg *c = r->gen->cfg;
    struct gw_try *t = &r->tries[st->slot];
    struct cfg_target tg = r->plan.targets[st->target];
    t->r = r;
    t->prov = &c->providers[tg.provider];
    t->model = &t->prov->models[tg.model];
    if (!r->prov) {
        r->prov = t->prov;
        r->model = t->model;
    }
    atomic_fetch_add(&r->w->srv->stats.upstream_attempts, 1);
    if (r->trace.sampled)
        t->start_ns = gw_otel_now_ns();
    struct pv_request pr = {
        .chat = &r->chat,
        .provider = t->prov,
        .model = t->model,
        .body = r->chat.body,
        .stream = r->chat.stream,
        .client_include_usage = r->chat.include_usage,
        .request_id = r->id,
        .max_body_bytes = c->max_body_bytes * 4,
        .registry = r->gen->pv,
    };
    struct pv_callbacks cb = {t, on_head, on_event, on_done};
    if (pv_call_start(r->w->pv, &pr, &cb, &t->call, err, errlen) == GX_OK)
        return 0;
    t->call = NULL;
    rt_report(r->gen->router, &t->att, RT_CANCELLED, -1, -1, -1);
    return -1;
}

/* Performs the steps the run asks for until it waits on I/O or a timer.
 * May free r (a final step finishes the request). */
static void
drive(struct gw_req *r, struct rt_step *st)
{
    for (;;) {
        int64_t now = gx_mono_us();
        switch (st->what) {
        case RT_DO_START: {
            struct gw_try *t = &r->tries[st->slot];
            if (!rt_attempt_begin(r->gen->router, &r->plan, st->target,
                                  &t->att)) {
                /* Out of rotation since the plan was made: no attempt. */
                rt_run_next(&r->run, now, st);
                continue;
            }
            char err[256] = "";
            int ok = start_call(r, st, err, sizeof(err)) == 0;
            rt_run_begun(&r->run, st->slot, ok, err, now, st);
            if (ok && st->hedge_at_us > 0)
                arm(r, &r->ev_hedge, on_hedge, st->hedge_at_us, now);
            continue;
        }
        case RT_DO_WAIT:
            arm(r, &r->ev_backoff, on_backoff, st->at_us, now);
            return;
        case RT_DO_FAIL:
            fail_all(r, st);
            return;
        default: /* NOTHING; the final steps with a result are on_done's */
            return;
        }
    }
}

/* Keeps the first 429's words for the "all rate limited" answer. */
static void
note_rate_limited(struct gw_req *r, const struct pv_result *res)
{
    if (r->rl_message[0] || res->outcome != PV_ERR_STATUS ||
        res->http_status != 429)
        return;
    json_t *o = res->body ? json_loadb(res->body, res->body_len, 0, NULL)
                          : NULL;
    const json_t *e = json_object_get(o, "error");
    const json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
    snprintf(r->rl_message, sizeof(r->rl_message), "%s",
             json_is_string(m) ? json_string_value(m) : "Rate limited.");
    json_decref(o);
}

static int
copy_body(struct gw_req *r, const struct pv_result *res)
{
    free(r->resp_body);
    r->resp_body = malloc(res->body_len + 1);
    if (!r->resp_body)
        return -1;
    memcpy(r->resp_body, res->body, res->body_len);
    r->resp_body[res->body_len] = '\0';
    r->resp_len = res->body_len; /* scrubbed by the provider */
    return 0;
}

/* The upstream's own answer to this request (a 4xx not in
 * retry_on_status, or our side failed): passed on, never retried. */
static void
pass_on(struct gw_req *r, const struct pv_result *res, int status,
        const char *tname)
{
    r->status = status;
    if (res->retry_after_s > 0) /* the upstream's, passed on too */
        r->retry_after_s = res->retry_after_s;
    json_t *o = res->body ? json_loadb(res->body, res->body_len, 0, NULL)
                          : NULL;
    int has_error = json_is_object(json_object_get(o, "error"));
    json_decref(o);
    if (has_error && copy_body(r, res) == 0) {
        snprintf(r->error, sizeof(r->error), "%s: status %d", tname,
                 res->http_status);
        settle_usage(r, NULL);
        r->usage.completion_tokens = 0;
        r->cost_pusd = 0;
        finish(r);
        return;
    }
    char msg[600];
    snprintf(msg, sizeof(msg), "Upstream %s refused the request: %s", tname,
             res->outcome == PV_ERR_STATUS ? "non-retryable status"
                                           : pv_outcome_str(res->outcome));
    finish_error(r, status, "upstream_error", "upstream_rejected", msg);
}

/* The attempt's outcome word for metrics and traces: "refused" for a
 * target's refusal of what it cannot do (failed over, router.h), else
 * providers.h's. */
static const char *
attempt_outcome(const struct pv_result *res)
{
    if (rt_is_refusal(res))
        return "refused";
    return pv_outcome_str(res->outcome);
}

/* The attempt's child span, when the request is traced. */
static void
trace_attempt(struct gw_req *r, const struct gw_try *t,
              const struct pv_result *res)
{
    if (!r->trace.sampled)
        return;
    char tname[256];
    snprintf(tname, sizeof(tname), "%s@%s", t->model->name, t->prov->name);
    gw_otel_attempt(r->w->srv->otel, &r->trace, tname, t->prov->name,
                    t->start_ns, res->http_status, attempt_outcome(res));
}

/* The winner's upstream headers (res->headers, NUL-terminated), cut to
 * what r keeps, without printf. */
static void
keep_up_headers(struct gw_req *r, const char *h)
{
    size_t l = h ? strlen(h) : 0;
    if (l >= sizeof(r->up_headers))
        l = sizeof(r->up_headers) - 1;
    memcpy(r->up_headers, h ? h : "", l);
    r->up_headers[l] = '\0';
}

static void
on_done(void *ud, const struct pv_result *res)
{
    struct gw_try *t = ud;
    struct gw_req *r = t->r;
    int me = (int)(t - r->tries);
    t->call = NULL; /* the loop frees it after we return */
    rt_report_pv(r->gen->router, &t->att, r->gen->cfg, res);
    gw_obs_attempt(r->w, t->prov->name, attempt_outcome(res));
    trace_attempt(r, t, res);
    if (r->client_gone)
        return; /* the row was logged when the client left */
    struct rt_step st;
    rt_run_result(&r->run, me, res, gx_mono_us(), &st);
    if (st.cancel >= 0)
        cancel_try(r, &r->tries[st.cancel]);
    if (st.what == RT_DO_DELIVER || st.what == RT_DO_PASS ||
        st.what == RT_DO_BROKEN) {
        if (r->ev_hedge)
            event_del(r->ev_hedge);
        r->upstream_us = res->total_us;
        keep_up_headers(r, res->headers);
        r->prov = t->prov;
        r->model = t->model;
    }
    if (st.what == RT_DO_DELIVER) {
        settle_usage(r, res);
        r->status = 200;
        if (!r->chat.stream && copy_body(r, res) != 0) {
            finish_error(r, 500, "server_error", "internal_error",
                         "out of memory copying the response");
            return;
        }
        if (!r->chat.stream && r->api->body) {
            struct gw_api_ctx x = {
                .id = r->id,
                .chat = &r->chat,
                .echo = r->api_echo,
                .usage = &r->usage,
                .created_s = gx_now_ms() / 1000,
                .pass = passed(r, r->prov),
            };
            char why[256] = "";
            size_t n = 0;
            char *tb = r->api->body(&x, r->resp_body, r->resp_len, &n, why,
                                    sizeof(why));
            if (!tb) {
                char m[400];
                snprintf(m, sizeof(m),
                         "The upstream answer could not be written as %s: "
                         "%s",
                         r->api->what, why);
                finish_error(r, 502, "upstream_error", "bad_upstream_body",
                             m);
                return;
            }
            free(r->resp_body);
            r->resp_body = tb;
            r->resp_len = n;
        }
        finish(r);
        return;
    }
    if (res->outcome == PV_OK)
        return; /* a cancelled rival's late answer: nothing to do */

    char tname[256];
    snprintf(tname, sizeof(tname), "%s@%s", t->model->name, t->prov->name);
    GX_LOG(GX_LOG_INFO, r->id, "attempt on %s failed: %s", tname,
           res->detail[0] ? res->detail : pv_outcome_str(res->outcome));
    note_rate_limited(r, res);
    switch (st.what) {
    case RT_DO_BROKEN:
        /* Bytes reached the client: close the stream with an error. */
        settle_usage(r, NULL);
        r->status = st.status;
        snprintf(r->error, sizeof(r->error),
                 "upstream stream from %s failed after the first byte: %s",
                 tname, pv_outcome_str(res->outcome));
        finish(r);
        return;
    case RT_DO_PASS:
        pass_on(r, res, st.status, tname);
        return;
    default:
        r->upstream_us = res->total_us;
        keep_up_headers(r, res->headers);
        r->prov = t->prov;
        r->model = t->model;
        drive(r, &st);
        return;
    }
}

/* ------------------------------------------------------------------ */
/* Entry.                                                               */

/* The budget's worst case over the targets that may run (dryrun.c's
 * gw_cost_worst for each). */
static int64_t
max_cost(const struct gw_req *r)
{
    int64_t worst = 0;
    for (size_t i = 0; i < r->plan.n; i++) {
        int64_t v = gw_cost_worst(r->gen->cfg, r->plan.targets[i], &r->chat);
        if (v > worst)
            worst = v;
    }
    return worst;
}

static enum pv_chat_err
chat_parse(struct pv_chat *c, const char *text, size_t len, json_t **echo,
           char *msg, size_t msglen, const char **param)
{
    *echo = NULL;
    return pv_chat_parse(c, PV_API_CHAT, text, len, msg, msglen, param);
}

const struct gw_api gw_api_chat = {
    .api = PV_API_CHAT,
    .what = "chat completions",
    .parse = chat_parse,
    .kinds = GW_KINDS_ALL,
};

void
gw_chat_handle(struct gw_worker *w, struct gw_hreq *req)
{
    gw_api_handle(w, req, &gw_api_chat);
}

/* The kinds that can serve api, for a message ("openai"). */
static void
kinds_str(unsigned kinds, char *buf, size_t len)
{
    static const char *const names[] = {"openai", "local", "anthropic",
                                        "gemini"};
    size_t off = 0;
    buf[0] = '\0';
    for (unsigned k = 0; k < 4 && off < len; k++)
        if (kinds & (1u << k))
            off += (size_t)snprintf(buf + off, len - off, "%s%s",
                                    off ? ", " : "", names[k]);
}

void
gw_api_handle(struct gw_worker *w, struct gw_hreq *req,
              const struct gw_api *api)
{
    /* Who is calling comes first (DESIGN.md section 2): an unknown caller
     * gets 401 before we spend anything on its body.  Limits and budget
     * need the parsed body and are checked after it (gw_chat_admit). */
    if (w->srv->auth) {
        struct gw_authn an;
        gw_auth_identify(w->srv->auth,
                         gw_hreq_credentials(req),
                         gx_now_ms(), &an);
        if (an.who == GW_CALLER_NONE) {
            gw_obs_refused(w->srv, req, an.status, NULL,
                           an.code); /* before the reply */
            gw_reply_unauthorized(req, &an);
            atomic_fetch_add(&w->srv->stats.errors, 1);
            return;
        }
    }
    struct evbuffer *in = gw_hreq_body(req);
    size_t n = evbuffer_get_length(in);
    if (n == 0) {
        gw_obs_refused(w->srv, req, 400, NULL, "invalid_json");
        gw_reply_error(req, 400, "invalid_request_error", "invalid_json",
                       NULL, "The request body is empty; send a JSON object "
                             "(a %s request).", api->what);
        return;
    }
    if ((int64_t)n > w->gen->cfg->max_body_bytes) {
        gw_obs_refused(w->srv, req, 413, NULL, "request_too_large");
        gw_reply_error(req, 413, "invalid_request_error",
                       "request_too_large", NULL,
                       "The request body is %zu bytes; the limit is %lld.", n,
                       (long long)w->gen->cfg->max_body_bytes);
        return;
    }
    struct gw_req *r = malloc(sizeof(*r));
    if (r) {
        memset(r, 0, offsetof(struct gw_req, chat));
        r->id[0] = r->rl_message[0] = r->error[0] = r->up_headers[0] = '\0';
    }
    if (!r) {
        gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                       "Out of memory.");
        return;
    }
    char msg[512];
    const char *param = NULL;
    const char *text = (const char *)evbuffer_pullup(in, -1);
    enum pv_chat_err pe = api->parse(&r->chat, text, n, &r->api_echo, msg,
                                     sizeof(msg), &param);
    if (pe != PV_CHAT_OK) {
        const char *code =
            pe == PV_CHAT_BAD_JSON ? "invalid_json" : "invalid_value";
        gw_obs_refused(w->srv, req, 400, NULL, code);
        gw_reply_error(req, 400, "invalid_request_error", code,
                       param, "%s", msg);
        free(r);
        return;
    }
    if (api->headers)
        api->headers(&r->chat, req);
    r->w = w;
    r->gen = w->gen;
    r->api = api;
    gx_buf_init(&r->api_out, 0);
    rt_plan_route(r->gen->router, r->chat.model, r->chat.est_prompt_tokens,
                  r->chat.completion_cap, &r->plan);
    /* Only targets whose kind speaks this API stay in the plan (so the
     * reservation below prices only those); a model left with none is
     * refused after the admission, so a key learns nothing of a model
     * its allowlist hides (403 first). */
    int incapable = api->kinds != GW_KINDS_ALL &&
                    rt_plan_keep_kinds(&r->plan, r->gen->cfg, api->kinds) > 0 &&
                    r->plan.n == 0 && r->plan.n_skipped == 0;
    if (gw_dry_run_wanted(req)) { /* dryrun.c: answered, nothing sent */
        gw_dry_run_reply(w, req, r->gen->cfg, &r->chat, &r->plan);
        pv_chat_cleanup(&r->chat);
        free(r);
        return;
    }
    /* auth.c: key, allowlist, RPM/TPM, budget */
    if (gw_chat_admit(w->srv, req, r->chat.model, r->chat.est_prompt_tokens,
                      max_cost(r), &r->ticket) != 0) {
        pv_chat_cleanup(&r->chat); /* it replied 401/403/429 */
        json_decref(r->api_echo);
        free(r);
        return;
    }
    if (incapable) {
        char kinds[64];
        kinds_str(api->kinds, kinds, sizeof(kinds));
        gw_ticket_settle(w->srv->auth, &r->ticket, 0, 0);
        gw_reply_error(req, 400, "invalid_request_error",
                       "model_not_supported", "model",
                       "The model '%s' has no target that serves %s: only "
                       "providers of kind %s do, and none of its targets "
                       "is one.",
                       r->chat.model, api->what, kinds);
        atomic_fetch_add(&w->srv->stats.errors, 1);
        pv_chat_cleanup(&r->chat);
        json_decref(r->api_echo);
        free(r);
        return;
    }
    r->live_next = w->live;
    if (w->live)
        w->live->live_prev = r;
    w->live = r;
    gw_gen_ref(r->gen);
    r->req = req;
    r->start_us = gx_mono_us();
    r->ttft_us = -1;
    gw_request_id(w, req, r->id, sizeof(r->id));
    gw_otel_begin(w->srv->otel, req, &r->trace);
    w->inflight++;
    atomic_fetch_add(&w->srv->stats.inflight, 1);
    atomic_fetch_add(&w->srv->stats.requests, 1);
    if (r->chat.stream && api->stream_new) {
        struct gw_api_ctx x = {
            .id = r->id,
            .chat = &r->chat,
            .echo = r->api_echo,
            .created_s = gx_now_ms() / 1000,
            .max_bytes = (size_t)r->gen->cfg->max_body_bytes * 4,
        };
        r->api_stream = api->stream_new(&x);
        if (!r->api_stream) {
            gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                           "Out of memory.");
            r->req = NULL; /* answered */
            req_free(r);
            return;
        }
    }

    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    rt_run_init(&r->run, r->gen->cfg, &r->plan, w->rng);
    struct rt_step st;
    rt_run_next(&r->run, r->start_us, &st);
    if (st.what == RT_DO_FAIL && st.status == 404) {
        gw_hreq_add_header(req, "X-Request-Id", r->id);
        gw_obs_refused(w->srv, req, 404, r->chat.model,
                       "model_not_found");
        gw_reply_error(req, 404, "invalid_request_error", "model_not_found",
                       "model",
                       "The model '%s' does not exist: it is not a route, "
                       "a MODEL@PROVIDER target or a model any provider "
                       "serves (GET /v1/models lists them).",
                       r->chat.model);
        atomic_fetch_add(&w->srv->stats.errors, 1);
        r->req = NULL; /* answered */
        req_free(r);
        return;
    }
    gw_hreq_set_close_cb(req, on_client_close, r);
    drive(r, &st);
}
