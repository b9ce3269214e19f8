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

/*
 * A config generation: what a SIGHUP reload replaces (providers, routes,
 * failover, limits) with the router health that goes with it.  Each worker
 * holds one reference to its current generation and each chat request one
 * to the generation it started with, so a reload never frees a config a
 * request still points into.  The startup generation does not own its
 * cfg/router (srv->cfg, srv->router live until exit).
 */
struct gw_gen {
    struct cfg *cfg;
    struct rt_router *router;
    int owns; /* 1: free cfg and router with the generation */
    atomic_long refs;
};
void gw_gen_ref(struct gw_gen *g);
void gw_gen_unref(struct gw_gen *g); /* NULL ok; any thread */

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
    struct gw_gen *gen;      /* current config generation (own ref) */
    struct gw_gen *pending_gen; /* a reload waiting for this worker
                                   (done_mu); the ref is the worker's */
    uint64_t rng;            /* xorshift state for request ids */
    uint64_t seq;
    size_t inflight;         /* chat requests not yet finished */
    struct gw_req *live;     /* chat requests alive on this worker */
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
    struct rt_router *router; /* route policies and provider health */
    const char *config_path;  /* NULL: built-in defaults (no reload) */
    struct gw_gen *gen;       /* the current generation (main thread) */
    struct gw_auth *auth; /* auth.c: keys, limits, budgets, aux thread */
    void *tls_ctx;        /* tls.c: SSL_CTX shared by workers, or NULL */
};

/* server.c */
void gw_worker_wake(struct gw_worker *w);
/* The config and router of the calling worker's current generation (the
 * startup ones outside worker threads).  Valid until the caller returns to
 * the event loop; a request that outlives that holds a gw_gen reference. */
const struct cfg *gw_cfg(const struct gw_server *srv);
struct rt_router *gw_router(const struct gw_server *srv);

/* chat.c: POST /v1/chat/completions */
void gw_chat_handle(struct gw_worker *w, struct evhttp_request *req);
/* Finishes requests whose ledger row committed (worker thread). */
void gw_chat_run_done(struct gw_worker *w);
/* Shutdown, on the worker thread while its loop still runs: answers every
 * chat request still alive with an error (503, or an error event that
 * ends a stream), logs its row, and waits for the ledger so that nothing
 * refers to the worker once its loop exits.  Blocks (ledger flush). */
void gw_chat_abort_all(struct gw_worker *w);

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

/* ==== auth.c, admin.c, usage_api.c, keys_cli.c, tls.c (issue 5) =======
 *
 * Bearer keys are "sk-llmux-" + GW_KEY_RANDOM_LEN base62 characters from
 * RAND_bytes; only their SHA-256 (hex in the keys table, raw in memory) is
 * kept.  The in-memory table is shared by all workers (rwlock); entries
 * are never freed before gw_auth_free, so a ticket may point at one for
 * the whole request even if the key is revoked meanwhile.
 */
#define GW_KEY_PREFIX "sk-llmux-"
#define GW_KEY_RANDOM_LEN 43 /* base62 chars: 43 x 5.95 bits > 256 bits */
#define GW_KEY_LEN (sizeof(GW_KEY_PREFIX) - 1 + GW_KEY_RANDOM_LEN)
#define GW_KEY_MIN_RANDOM 32 /* shorter tails are refused as malformed */
#define GW_KEY_MAX_RANDOM 128

struct gw_auth;
struct gw_key;

/* A token bucket refilled continuously at per_min units a minute, holding
 * at most per_min.  Integer arithmetic, exact: one unit is 60e6 "ticks"
 * and each microsecond adds per_min ticks.  Not locked: the caller holds
 * the key's mutex.  level may go negative (TPM debits after the fact). */
struct gw_bucket {
    int64_t per_min; /* 0 = unlimited */
    int64_t level;   /* ticks */
    int64_t last_us; /* monotonic */
};
void gw_bucket_init(struct gw_bucket *b, int64_t per_min, int64_t now_us);
/* Takes n units if the bucket holds them: returns 1; else 0 and sets
 * *retry_after_s (>= 1) to when n units will be there (n is capped at
 * per_min so a big request can still pass on a full bucket). */
int gw_bucket_take(struct gw_bucket *b, int64_t n, int64_t now_us,
                   int64_t *retry_after_s);
/* Adds (n < 0) or removes (n > 0) units unconditionally, capped at full. */
void gw_bucket_adjust(struct gw_bucket *b, int64_t n, int64_t now_us);

/* One key as stored (the keys table row, minus the secret). */
/* A key row is pricing's struct pr_key (pricing/pricing.h). */

/* Fills out (GW_KEY_LEN + 1 bytes) with a new secret; GX_EIO if RAND_bytes
 * fails. */
enum gx_status gw_key_generate(char *out, size_t outlen);
/* SHA-256 of s[0..n) into out[32]; hex (65 bytes) into hex if not NULL. */
void gw_key_hash(const char *s, size_t n, unsigned char out[32], char *hex);
/* 1 if s has the key syntax (prefix + 32..128 base62 chars). */
int gw_key_well_formed(const char *s, size_t n);
/* Constant-time equality of the admin key and a presented secret
 * (CRYPTO_memcmp over equal-length SHA-256 digests, so neither the
 * content nor the length of the admin key leaks through timing). */
int gw_admin_equal(const char *admin, const char *presented, size_t n);

/* auth: admin_key NULL = no admin API.  db_path NULL: no database (unit
 * tests); else keys and budgets are loaded from it and the aux thread
 * (admin writes, usage queries, a periodic key reload) is started. */
struct gw_auth *gw_auth_new(const char *admin_key, int require_keys,
                            const char *db_path, char *err, size_t errlen);
/* Stops the aux thread (jobs queued are finished first).  Call after the
 * workers stopped and before their event bases are freed. */
void gw_auth_stop(struct gw_auth *a);
void gw_auth_free(struct gw_auth *a); /* NULL ok; stops first */
/* Adds or replaces (same id) a key in memory and its budget; any thread. */
enum gx_status gw_auth_put(struct gw_auth *a, const struct pr_key *k);
/* Marks a key revoked in memory (the database is the caller's job). */
void gw_auth_revoke(struct gw_auth *a, int64_t id, int64_t revoked_ms);
struct pr_budget *gw_auth_budget(struct gw_auth *a);

/* Who is calling. */
enum gw_caller {
    GW_CALLER_NONE = 0, /* refused: reply with status/code/message */
    GW_CALLER_ANON,     /* no key, require_keys false */
    GW_CALLER_KEY,
    GW_CALLER_ADMIN
};
struct gw_authn {
    enum gw_caller who;
    struct gw_key *key; /* GW_CALLER_KEY */
    int64_t key_id;     /* -1 unless GW_CALLER_KEY */
    int status;         /* refusals: 401, ... */
    const char *code;   /* "invalid_api_key", ... */
    char message[160];
};
/* Authenticates an Authorization header value (NULL = absent) at wall
 * time now_ms; no disk access. */
void gw_auth_identify(struct gw_auth *a, const char *authorization,
                      int64_t now_ms, struct gw_authn *out);
/* 1 if the key may use model (a route, MODEL@PROVIDER or bare model name);
 * NULL key (anonymous/admin) may use everything. */
int gw_key_allows(const struct gw_key *k, const char *model);
/* 1 if the key has an allowlist (not every model). */
int gw_key_restricted(const struct gw_key *k);

/* A chat request's admission: what to settle when it ends. */
struct gw_ticket {
    struct gw_key *key;    /* NULL: anonymous */
    int64_t key_id;        /* -1 = anonymous (ledger NULL) */
    int64_t reserved_pusd; /* budget reservation */
    int64_t tpm_reserved;  /* tokens taken from the TPM bucket */
    int active;            /* 1 until gw_ticket_settle */
};
/* The refusal of an admission: status 0 = admitted. */
struct gw_refusal {
    int status;
    const char *type, *code;
    int64_t retry_after_s; /* 429 rate_limit_exceeded: > 0 */
    char message[200];
};
/* Checks and charges one chat request: key, allowlist, RPM, TPM (takes
 * est_tokens), budget (reserves max_cost_pusd).  All or nothing: a
 * refusal takes nothing.  Any thread; no disk access. */
void gw_auth_admit(struct gw_auth *a, const char *authorization,
                   const char *model, int64_t est_tokens,
                   int64_t max_cost_pusd, int64_t now_ms,
                   struct gw_ticket *t, struct gw_refusal *ref);
/* Ends a ticket: releases the reservation, charges cost_pusd to the
 * in-memory budget and tokens (prompt + completion; 0 = release) to the
 * TPM bucket.  Idempotent; a ticket never admitted is ignored. */
void gw_ticket_settle(struct gw_auth *a, struct gw_ticket *t, int64_t tokens,
                      int64_t cost_pusd);

/* The chat hook (worker thread): admits the request or replies with the
 * OpenAI error (401/403/429 + Retry-After) and returns -1.  Computes the
 * token estimate and the worst-case cost from body and the config. */
int gw_chat_admit(struct gw_server *srv, struct evhttp_request *req,
                  const json_t *body, struct gw_ticket *t);

/* Deferred work (auth.c): run() on the aux thread (may block on disk),
 * then reply() back on w's thread with the request, or with req NULL when
 * the client went away (then only free arg).  Counts in w->inflight so a
 * graceful shutdown waits for it.  Returns 0, or -1 (no aux thread, or
 * 256 jobs already waiting): nothing queued, the caller still owns arg
 * and must reply (503). */
typedef void (*gw_aux_run_fn)(struct gw_server *srv, void *arg);
typedef void (*gw_aux_reply_fn)(struct gw_server *srv,
                                struct evhttp_request *req, void *arg);
int gw_aux_submit(struct gw_worker *w, struct evhttp_request *req,
                  gw_aux_run_fn run, gw_aux_reply_fn reply, void *arg);
/* The database readers/writers open (a file or the ledger's URI). */
const char *gw_auth_db_path(const struct gw_auth *a);

/* admin.c: /admin/keys[/{id}] (admin key only) and GET /v1/models
 * filtered by the caller's allowlist. */
void gw_admin_handle(struct gw_worker *w, struct evhttp_request *req,
                     const char *path);
void gw_models_handle(struct gw_worker *w, struct evhttp_request *req);
/* The keys table (admin.c; blocking: aux thread or CLI only).  create
 * inserts k (hash, limits; id and created_ms ignored) and writes the new
 * id to *id_out; revoke sets revoked_ms (GX_ENOTFOUND: no such id; an
 * already revoked key stays as it was, GX_OK); list returns a JSON array
 * of key objects without any secret or hash. */
enum gx_status gw_keys_db_create(const char *db_path,
                                 const struct pr_key *k,
                                 int64_t *id_out, char *err, size_t errlen);
enum gx_status gw_keys_db_revoke(const char *db_path, int64_t id,
                                 int64_t now_ms, char *err, size_t errlen);
enum gx_status gw_keys_db_list(const char *db_path, json_t **out, char *err,
                               size_t errlen);
/* Validates a POST /admin/keys object (or the CLI's equivalent) into
 * spec; strings point into obj / models_buf (models_len bytes).  On error
 * returns GX_EINVAL with a message naming the field. */
enum gx_status gw_key_spec_from_json(const json_t *obj,
                                     struct pr_key *spec,
                                     char *models_buf, size_t models_len,
                                     char *err, size_t errlen);
/* Replies to a refused identification (401 + OpenAI error). */
void gw_reply_unauthorized(struct evhttp_request *req,
                           const struct gw_authn *an);

/* usage_api.c: GET /v1/usage. */
void gw_usage_handle(struct gw_worker *w, struct evhttp_request *req);

/* keys_cli.c: gw_cli_keys is declared in gateway.h (main.c calls it). */

/* dashboard.c: GET /dashboard, the self-contained HTML page (no key). */
void gw_dashboard_handle(struct gw_worker *w, struct evhttp_request *req);

/* tls.c: SSL_CTX from cfg->tls_cert/tls_key (NULL when not configured;
 * *out NULL too).  gw_tls_attach makes w's evhttp speak HTTPS. */
enum gx_status gw_tls_new(const struct cfg *c, void **out, char *err,
                          size_t errlen);
void gw_tls_attach(struct gw_worker *w, void *ctx);
void gw_tls_free(void *ctx);

#endif
