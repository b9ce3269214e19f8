/*
 * gw_int.h: structs shared inside gateway/ only.
 */
#ifndef LLMUX_GW_INT_H
#define LLMUX_GW_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "../common/common.h"
#include "../config/config.h"
#include "../pricing/pricing.h"
#include "../providers/providers.h"
#include "../router/router.h"
#include "gateway.h"

struct gw_server;
struct gw_req;

/* One HTTP worker: its own event_base, evhttp on the shared port and curl
 * multi.  Everything in here is touched only by its thread, except done_*
 * (filled by the ledger thread) and the atomics. */
struct gw_worker {
    struct gw_server *srv;
    int index;
    pthread_t thread;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct pv_loop *pv;
    struct event *ev_wake;   /* event_active'd by other threads */
    struct event *ev_drain;  /* shutdown: polls in-flight, bounded */
    uint64_t rng;            /* xorshift state for request ids */
    uint64_t seq;
    size_t inflight;         /* chat requests not yet finished */
    int64_t drain_deadline_us;
    /* Ledger commits come back here (ledger thread -> this worker). */
    pthread_mutex_t done_mu;
    struct gw_req *done_head;
    atomic_int stop;         /* 1 = begin graceful shutdown */
};

struct gw_stats {
    atomic_llong requests;      /* chat requests accepted */
    atomic_llong errors;        /* chat requests answered with >= 400 */
    atomic_llong upstream_attempts;
    atomic_llong inflight;
    atomic_llong http_requests; /* every HTTP request */
};

struct gw_server {
    struct cfg *cfg;
    struct pr_ledger *ledger;
    int fd; /* first listening socket, to learn the port */
    int port;
    int n_workers;
    struct gw_worker *workers;
    struct gw_stats stats;
    int64_t started_ms;
};

/* server.c */
void gw_worker_wake(struct gw_worker *w);

/* chat.c: POST /v1/chat/completions */
void gw_chat_handle(struct gw_worker *w, struct evhttp_request *req);
/* Finishes requests whose ledger row committed (worker thread). */
void gw_chat_run_done(struct gw_worker *w);

/* http.c: replies and small helpers. */
/* Sends {"error":{message,type,param,code}} with status. */
void gw_reply_error(struct evhttp_request *req, int status, const char *type,
                    const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void gw_reply_json(struct evhttp_request *req, int status, json_t *obj);
/* Makes a request id: the client's x-request-id if sane, else a new one. */
void gw_request_id(struct gw_worker *w, struct evhttp_request *req,
                   char *out, size_t outlen);
const char *gw_status_reason(int status);
void gw_handle_models(struct gw_server *srv, struct evhttp_request *req);
void gw_handle_metrics(struct gw_server *srv, struct evhttp_request *req);

#endif
