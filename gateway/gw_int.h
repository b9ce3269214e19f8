/*
 * gw_int.h: structs shared inside gateway/ only.
 */
#ifndef LLMUX_GW_INT_H
#define LLMUX_GW_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <http_parser.h>
#include <jansson.h>

#include "../common/common.h"
#include "../config/config.h"
#include "../pricing/pricing.h"
#include "../providers/providers.h"
#include "../router/router.h"
#include "gateway.h"

struct gw_server;
struct gw_req;
struct gw_hreq;
struct gw_conn;

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
    struct pv_registry *pv; /* cfg's provider instances (always owned) */
    int owns; /* 1: free cfg and router with the generation */
    atomic_long refs;
};
void gw_gen_ref(struct gw_gen *g);
void gw_gen_unref(struct gw_gen *g); /* NULL ok; any thread */

/* One HTTP worker: its own event_base, listening socket (conn.c) on the
 * shared port and curl multi.  Everything in here is touched only by its
 * thread, except done_* (filled by the ledger thread) and the atomics. */
struct gw_worker {
    struct gw_server *srv;
    int index;
    pthread_t thread;
    struct event_base *base;
    /* conn.c: the listener and the connections of this worker. */
    int listen_fd;              /* -1 once closed */
    struct event *ev_accept;    /* EV_READ on listen_fd */
    struct event *ev_accept_resume; /* accept paused: re-enable timer */
    int accept_paused;
    struct gw_conn *conns;      /* open connections (list) */
    void *tls_ctx;              /* tls.c: SSL_CTX or NULL (plain HTTP) */
    int64_t log_next_ms[2];     /* rate limit of accept warnings */
    long log_suppressed[2];
    int64_t date_s;             /* Date header cache */
    char date[40];
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
    atomic_llong conns_open;    /* inbound connections now (all workers) */
    atomic_llong conns_refused; /* accept paused: cap or EMFILE (events) */
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
    struct gw_obs *obs;   /* metrics.c: labelled metrics, access log */
    struct gw_otel *otel; /* otel.c: traces, or NULL (off) */
};

/* server.c */
void gw_worker_wake(struct gw_worker *w);
/* The config and router of the calling worker's current generation (the
 * startup ones outside worker threads).  Valid until the caller returns to
 * the event loop; a request that outlives that holds a gw_gen reference. */
const struct cfg *gw_cfg(const struct gw_server *srv);
struct rt_router *gw_router(const struct gw_server *srv);
const struct pv_registry *gw_registry(const struct gw_server *srv);

/* chat.c: POST /v1/chat/completions */
void gw_chat_handle(struct gw_worker *w, struct gw_hreq *req);
/* Finishes requests whose ledger row committed (worker thread). */
void gw_chat_run_done(struct gw_worker *w);
/* Shutdown, on the worker thread while its loop still runs: answers every
 * chat request still alive with an error (503, or an error event that
 * ends a stream), logs its row, and waits for the ledger so that nothing
 * refers to the worker once its loop exits.  Blocks (ledger flush). */
void gw_chat_abort_all(struct gw_worker *w);

/* dryrun.c: `x-llmux-dry-run: 1` (see its header).  gw_cost_worst: the
 * budget's worst-case cost of chat on target tg (what admission reserves,
 * the max over the plan's targets), pUSD.  gw_dry_run_reply answers req
 * (200 with the plan's targets and costs, or 401/403/404) without sending,
 * reserving or logging anything. */
int64_t gw_cost_worst(const struct cfg *c, struct cfg_target tg,
                      const struct pv_chat *chat);
int gw_dry_run_wanted(const struct gw_hreq *req);
void gw_dry_run_reply(struct gw_worker *w, struct gw_hreq *req,
                      const struct cfg *c, const struct pv_chat *chat,
                      const struct rt_plan *plan);

/* otel.c: OpenTelemetry traces (see its header).  gw_otel_new: off (and
 * no thread) while c has no otel block; the server owns it and frees it after
 * the workers stopped (one last bounded export).  Per request (worker
 * thread): gw_otel_begin once the request is read (its span starts at
 * gw_hreq_arrival_ns; req's traceparent honoured), gw_otel_attempt when an upstream attempt ends (start_ns from
 * gw_otel_now_ns when it began; http_status 0 if none), gw_otel_request
 * with its ledger row.  All take o NULL (off) and do nothing then; none
 * blocks on the collector. */
struct gw_otel;
struct gw_trace {
    int sampled;
    int has_parent; /* joined the client's trace */
    uint8_t trace_id[16], span_id[8], parent_id[8];
    int64_t start_ns;         /* unix time */
    int n_attempts;
    const char *last_outcome; /* failed attempt before the next: static */
};
enum gx_status gw_otel_new(const struct cfg *c, struct gw_otel **out,
                           char *err, size_t errlen);
/* SIGHUP (main thread): c's otel block applies to o in place (on, off,
 * endpoint, service_name, sample_ratio, queue, timeout_ms); GX_OK, or an
 * error in err with the old settings kept where it failed. */
enum gx_status gw_otel_apply(struct gw_otel *o, const struct cfg *c,
                             char *err, size_t errlen);
void gw_otel_free(struct gw_otel *o);
int64_t gw_otel_now_ns(void);
void gw_otel_begin(struct gw_otel *o, const struct gw_hreq *req,
                   struct gw_trace *t);
void gw_otel_attempt(struct gw_otel *o, struct gw_trace *t,
                     const char *target, const char *provider,
                     int64_t start_ns, int http_status, const char *outcome);
void gw_otel_request(struct gw_otel *o, const struct gw_trace *t,
                     const struct pr_usage_row *row);
/* A request refused before routing: its own SERVER span (req's
 * traceparent honoured, sampled like others) with status, model (NULL if
 * none) and reason (the error code, such as "invalid_json"). */
void gw_otel_refused(struct gw_otel *o, const struct gw_hreq *req,
                     int status, const char *model, const char *reason);
/* The otel families (zeros when o is NULL), for /metrics. */
void gw_otel_write_metrics(const struct gw_otel *o, struct evbuffer *b);
/* A W3C traceparent header: 0 and the ids and sampled flag if valid. */
int gw_otel_parse_traceparent(const char *h, uint8_t trace[16],
                              uint8_t span[8], int *sampled);

/* metrics.c: labelled metrics and the access log (see its header).
 * gw_obs_new opens c's log.file (NULL + err if it cannot); the server owns
 * the result.  Hooks (worker threads): gw_obs_request once per ledger row,
 * gw_obs_attempt once per finished upstream attempt (outcome: the
 * pv_outcome_str word).  gw_obs_write appends the families to b (worker
 * thread: reads gw_cfg/gw_router).  gw_obs_reopen: SIGHUP, main thread. */
struct gw_obs;
struct gw_obs *gw_obs_new(const struct cfg *c, char *err, size_t errlen);
void gw_obs_free(struct gw_obs *o);
void gw_obs_reopen(struct gw_obs *o);
/* SIGHUP with a new config (main thread): its log.format, log.level and
 * log.file apply now (a file that cannot be opened is logged and the old
 * destination kept). */
void gw_obs_apply(struct gw_obs *o, const struct cfg *c);
void gw_obs_request(struct gw_worker *w, const struct pr_usage_row *row);
void gw_obs_attempt(struct gw_worker *w, const char *provider,
                    const char *outcome);
void gw_obs_write(struct gw_server *srv, struct evbuffer *b);
/* A chat request refused before routing (no ledger row): counted in
 * llmux_requests_total with route and provider "" and model the asked
 * name if the config knows it ("other" if not, "" if none), an access
 * line (usage_source "none") and, with otel on, a trace span carrying
 * reason (the reply's error code).  Worker thread. */
void gw_obs_refused(struct gw_server *srv, struct gw_hreq *req, int status,
                    const char *model, const char *reason);
/* A usage row committed us microseconds after it was submitted (ledger
 * thread; lock-free). */
void gw_obs_commit(struct gw_obs *o, int64_t us);

/* http.c: replies and small helpers. */
/* Sends {"error":{message,type,param,code}} with status. */
void gw_reply_error(struct gw_hreq *req, int status, const char *type,
                    const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void gw_reply_json(struct gw_hreq *req, int status, json_t *obj);
/* The request's id (gw_hreq_id) into out. */
void gw_request_id(struct gw_worker *w, struct gw_hreq *req, char *out,
                   size_t outlen);
/* A request id for a request: client (its x-request-id header, may be
 * NULL) if it is 1..GW_REQUEST_ID_MAX characters of [A-Za-z0-9._-], kept
 * exactly; else a new one from w's generator.  out holds at least
 * GW_REQUEST_ID_MAX + 1 bytes. */
#define GW_REQUEST_ID_MAX 64
void gw_request_id_make(struct gw_worker *w, const char *client, char *out,
                        size_t outlen);
const char *gw_status_reason(int status);
void gw_handle_models(struct gw_server *srv, struct gw_hreq *req);
void gw_handle_metrics(struct gw_server *srv, struct gw_hreq *req);

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
    int64_t admit_ms;      /* wall clock at admission (TPM lease window) */
    int active;            /* 1 until gw_ticket_settle */
};
/* The refusal of an admission: status 0 = admitted. */
struct gw_refusal {
    int status;
    const char *type, *code;
    int64_t retry_after_s; /* 429 rate_limit_exceeded: > 0 */
    char message[200];
};
/* Who calls and whether it may use model, without charging anything: the
 * first checks of gw_auth_admit (401 unknown key or the admin key, 403
 * model outside the allowlist).  ref->status 0 = may go on; an filled. */
void gw_auth_precheck(struct gw_auth *a, const char *authorization,
                      const char *model, int64_t now_ms, struct gw_authn *an,
                      struct gw_refusal *ref);
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
 * OpenAI error (401/403/429 + Retry-After) and returns -1.  est_tokens
 * (TPM) and max_cost_pusd (the budget's reservation) come from the parsed
 * request (struct pv_chat) and its plan, computed once in chat.c. */
int gw_chat_admit(struct gw_server *srv, struct gw_hreq *req,
                  const char *model, int64_t est_tokens,
                  int64_t max_cost_pusd, struct gw_ticket *t);

/* Deferred work (auth.c): run() on the aux thread (may block on disk),
 * then reply() back on w's thread with the request, or with req NULL when
 * the client went away (then only free arg).  Counts in w->inflight so a
 * graceful shutdown waits for it.  Returns 0, or -1 (no aux thread, or
 * 256 jobs already waiting): nothing queued, the caller still owns arg
 * and must reply (503). */
typedef void (*gw_aux_run_fn)(struct gw_server *srv, void *arg);
typedef void (*gw_aux_reply_fn)(struct gw_server *srv,
                                struct gw_hreq *req, void *arg);
int gw_aux_submit(struct gw_worker *w, struct gw_hreq *req,
                  gw_aux_run_fn run, gw_aux_reply_fn reply, void *arg);
/* The database readers/writers open (a file or the ledger's URI). */
const char *gw_auth_db_path(const struct gw_auth *a);

/* admin.c: /admin/keys[/{id}] (admin key only) and GET /v1/models
 * filtered by the caller's allowlist. */
void gw_admin_handle(struct gw_worker *w, struct gw_hreq *req,
                     const char *path);
/* Replies to a caller of /admin/keys that is not the admin (an from
 * gw_auth_identify): 401 for none or anonymous, 403 admin_key_required for
 * a key.  Also at header time (server.c), so the body is never read. */
struct gw_authn;
void gw_admin_refuse(struct gw_hreq *req, struct gw_authn *an);
void gw_models_handle(struct gw_worker *w, struct gw_hreq *req);
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
void gw_reply_unauthorized(struct gw_hreq *req,
                           const struct gw_authn *an);

/* usage_api.c: GET /v1/usage. */
void gw_usage_handle(struct gw_worker *w, struct gw_hreq *req);
/* The what-if models: c's priced targets ("model@provider", source
 * "config"), then (with_builtin) the built-in table; names malloc'd (the
 * result owns them: gw_whatif_models_free).  NULL when out of memory. */
struct pr_whatif_model *gw_whatif_models(const struct cfg *c,
                                         int with_builtin, size_t *n);
void gw_whatif_models_free(struct pr_whatif_model *m, size_t n);

/* keys_cli.c: gw_cli_keys is declared in gateway.h (main.c calls it). */

/* dashboard.c: GET /dashboard, the self-contained HTML page (no key). */
void gw_dashboard_handle(struct gw_worker *w, struct gw_hreq *req);

/* tls.c: SSL_CTX from cfg->tls_cert/tls_key (NULL when not configured;
 * *out NULL too).  gw_tls_attach makes w's connections speak HTTPS;
 * gw_tls_bev wraps an accepted socket in an OpenSSL bufferevent (server
 * side, the SSL freed and fd closed with it), NULL on failure (fd then
 * still the caller's). */
enum gx_status gw_tls_new(const struct cfg *c, void **out, char *err,
                          size_t errlen);
void gw_tls_attach(struct gw_worker *w, void *ctx);
struct bufferevent *gw_tls_bev(struct event_base *base, int fd, void *ctx);
void gw_tls_free(void *ctx);

/* ==== conn.c: the inbound HTTP/1.1 connection layer ===================
 *
 * llmux owns its listener and its HTTP/1.1 connections (libevent 2.1's
 * evhttp has no connection cap, no hook between the headers and the body,
 * no header deadline, and its own framing and HTML error pages).  Bytes
 * are parsed by the nodejs http-parser (libhttp-parser-dev; llhttp, its
 * successor, is not packaged in Debian 12), framing is decided here
 * (gw_hparse), and every reply goes out with x-request-id and CORS
 * headers.  One request per connection is handled at a time; pipelined
 * requests wait in the input buffer and are answered in order.
 *
 * Threads: a connection and its requests belong to one worker thread.
 *
 * Request lifetime: the connection layer owns every gw_hreq.  The server
 * gets it in gw_server_on_head (headers complete, no body byte read) and
 * gw_server_on_request (whole request); from then on the handler owns the
 * answer and must end it with exactly one of gw_hreq_send_reply /
 * gw_hreq_send_body / gw_hreq_reply_end, after which the pointer is
 * invalid, unless the close callback fired first (the client left; the
 * pointer is invalid once that callback returns).
 */
enum gw_method {
    GW_METHOD_GET = 1, /* HEAD too: see gw_hreq_is_head */
    GW_METHOD_POST,
    GW_METHOD_DELETE,
    GW_METHOD_OPTIONS,
    GW_METHOD_OTHER /* refused by conn.c with 405 before the server */
};
typedef void (*gw_hreq_cb)(struct gw_hreq *req, void *arg);

/* Input: valid while the request is alive.  Strings are NUL-terminated
 * and owned by the request. */
enum gw_method gw_hreq_method(const struct gw_hreq *req);
int gw_hreq_is_head(const struct gw_hreq *req); /* 1: HEAD (no body out) */
const char *gw_hreq_method_str(const struct gw_hreq *req);
const char *gw_hreq_path(const struct gw_hreq *req); /* raw, no query */
const char *gw_hreq_query(const struct gw_hreq *req); /* raw, or NULL */
/* The first query parameter called name, %-decoded ('+' = space; left
 * raw if it cannot be decoded), or NULL when absent. */
const char *gw_hreq_param(struct gw_hreq *req, const char *name);
/* The first input header called name (case-insensitive), or NULL. */
const char *gw_hreq_header(const struct gw_hreq *req, const char *name);
/* The caller's credentials as an Authorization value: the Authorization
 * header, else "Bearer " + the x-api-key header (Anthropic's way of
 * sending a key), else NULL.  Every path that takes a key reads this.
 * Valid until the next call on req. */
#define GW_AUTHZ_MAX 512
const char *gw_hreq_credentials(struct gw_hreq *req);
struct evbuffer *gw_hreq_body(struct gw_hreq *req); /* whole, in on_request */
const char *gw_hreq_id(const struct gw_hreq *req);  /* its x-request-id */
struct gw_worker *gw_hreq_worker(const struct gw_hreq *req);
/* Unix time (ns) the request's first byte was read: its trace spans start
 * there. */
int64_t gw_hreq_arrival_ns(const struct gw_hreq *req);

/* Output.  Header names and values are copied; a value holding CR or LF
 * is dropped (header injection).  conn.c adds X-Request-Id (unless set),
 * Date, Content-Length or Transfer-Encoding, Connection, the CORS headers
 * for an allowed Origin and Allow on a 405. */
void gw_hreq_add_header(struct gw_hreq *req, const char *name,
                        const char *value);
/* Whole reply; body's bytes are moved out (NULL: empty). */
void gw_hreq_send_reply(struct gw_hreq *req, int status, struct evbuffer *b);
void gw_hreq_send_body(struct gw_hreq *req, int status, const void *data,
                       size_t len);
/* Streamed reply: chunked transfer coding (close-delimited to HTTP/1.0
 * clients).  Each chunk leaves in one write; the end writes the last data
 * and the terminating chunk together (no small trailing segment for Nagle
 * and delayed ACK to hold back). */
void gw_hreq_reply_start(struct gw_hreq *req, int status);
void gw_hreq_reply_chunk(struct gw_hreq *req, struct evbuffer *b);
/* The same from memory: p[0..n) is copied (into the bytes held for the
 * next write when the connection can hold them, else written now). */
void gw_hreq_reply_chunk_mem(struct gw_hreq *req, const void *p, size_t n);
void gw_hreq_reply_end(struct gw_hreq *req, struct evbuffer *last);
/* Bytes queued for the client and not yet written (backpressure). */
size_t gw_hreq_pending(const struct gw_hreq *req);
/* cb(req, arg) whenever the queued output has been written out (after a
 * chunk); NULL clears.  Cleared when the reply ends. */
void gw_hreq_set_drain_cb(struct gw_hreq *req, gw_hreq_cb cb, void *arg);
/* cb(req, arg) once if the connection goes away (EOF, error, timeout,
 * shutdown) before the reply ended; NULL clears. */
void gw_hreq_set_close_cb(struct gw_hreq *req, gw_hreq_cb cb, void *arg);

/* server.c, called by conn.c.  on_head: the headers are complete and no
 * body byte has been read; returns 0 to read the body, or replies (401,
 * 404, ...) and returns -1: the connection then closes after the reply
 * without reading the body.  on_request: the whole request. */
int gw_server_on_head(struct gw_worker *w, struct gw_hreq *req);
void gw_server_on_request(struct gw_worker *w, struct gw_hreq *req);
/* conn.c refuses req itself after on_head said yes (413: a Content-Length
 * or chunked body over limits.max_body_bytes), before replying: a model
 * request is counted and logged like the handlers' refusals (code: the
 * reply's error code). */
void gw_server_on_refused(struct gw_worker *w, struct gw_hreq *req,
                          int status, const char *code);

/* Listener of worker w on the bound, listening, non-blocking socket fd
 * (owned from here on).  Accepts up to limits.max_connections across all
 * workers (beyond, accept pauses until connections close), pauses accept
 * on EMFILE/ENFILE (a warning line every 10 s at most, with the count). */
enum gx_status gw_listen_start(struct gw_worker *w, int fd, char *err,
                               size_t errlen);
void gw_listen_stop(struct gw_worker *w); /* closes the socket; idempotent */
/* Closes every connection of w (close callbacks of live requests run). */
void gw_conns_free_all(struct gw_worker *w);
/* 1 if origin (an Origin header value) may read responses under c's
 * cors.origins. */
int gw_cors_allowed(const struct cfg *c, const char *origin);

/*
 * gw_hparse: the framing of one HTTP/1.1 request stream, without sockets
 * (conn.c drives it from the input buffer; tests/fuzz/fuzz_conn.c from
 * bytes).  gw_hparse_feed consumes bytes up to the next event:
 *   GW_HP_MORE   everything consumed, need more
 *   GW_HP_HEAD   request line and headers complete and valid (framing
 *                below); nothing of the body consumed.  Set body_max, then
 *                feed again for the body.
 *   GW_HP_DONE   the whole request is in (body in p->body); feed nothing
 *                more until gw_hparse_next.
 *   GW_HP_ERROR  err_status (400, 405, 413, 431, 505) and err_msg; the
 *                stream cannot be trusted past this point: close.
 * Framing (RFC 9112 section 6, strictly): at most one Content-Length, of
 * 1..18 digits only; Transfer-Encoding only as exactly "chunked", once,
 * and never with Content-Length; no control characters in header values.
 * Chunked bodies are counted against body_max as they arrive.
 */
#define GW_MAX_HEADER_BYTES (64 * 1024)
#define GW_MAX_HEADERS 100
enum gw_hp_event { GW_HP_MORE, GW_HP_HEAD, GW_HP_DONE, GW_HP_ERROR };
struct gw_hparse {
    http_parser hp;
    struct gx_buf arena; /* url, then "name\0value\0" per header */
    uint32_t hdr[GW_MAX_HEADERS][2]; /* name, value offsets into arena */
    size_t n_hdr;
    int last_cb;       /* 0 none, 1 url, 2 field, 3 value */
    size_t head_bytes; /* consumed before the headers completed */
    int head_done, msg_done;
    int64_t content_length; /* -1: no Content-Length header */
    int chunked;
    int keep_alive;     /* http_should_keep_alive at the head */
    int64_t body_max;   /* cap on body bytes (set after GW_HP_HEAD) */
    int64_t body_len;
    struct evbuffer *body;
    int err_status;
    char err_msg[200];
    enum gw_hp_event event;
};
enum gx_status gw_hparse_init(struct gw_hparse *p);
void gw_hparse_cleanup(struct gw_hparse *p);
/* Ready for the next request of the stream (keeps memory). */
void gw_hparse_next(struct gw_hparse *p);
enum gw_hp_event gw_hparse_feed(struct gw_hparse *p, const char *data,
                                size_t len, size_t *used);
/* After GW_HP_HEAD: the header called name, or NULL; the url. */
const char *gw_hparse_header(const struct gw_hparse *p, const char *name);
const char *gw_hparse_url(const struct gw_hparse *p);

/* ==== inbound APIs beyond chat (issue 13: responses.c, embeddings.c) ===
 *
 * An inbound API is a table read by chat.c's request life (gw_api_handle):
 * how its body is parsed into the format-neutral request, which provider
 * kinds can serve it (the router's plan keeps only those), and how the
 * upstream's OpenAI-chat-shaped answer is written in the API's own shape.
 * NULL writers mean "as the upstream sent it" (OpenAI chat, embeddings,
 * completions); errors are in OpenAI's shape unless the API has its own
 * error writer (Messages: Anthropic's), which then serves every error on
 * its paths (gw_reply_error, chat.c's failures, an upstream 4xx passed on).
 */
struct gw_api_ctx {
    const char *id;             /* the request id */
    const struct pv_chat *chat; /* the parsed request */
    const json_t *echo;         /* what parse kept for the writer, or NULL */
    const struct pv_usage *usage; /* the settled usage (non-stream) */
    int64_t created_s;          /* unix seconds */
    size_t max_bytes;           /* cap on what a stream writer keeps */
    int pass; /* body: the serving kind got the client's own body (api->pass) */
};
struct gw_api {
    enum pv_api api;
    const char *what; /* "chat completions", ... for messages */
    /* As pv_chat_parse; *echo (may stay NULL) is owned by the caller. */
    enum pv_chat_err (*parse)(struct pv_chat *c, const char *text,
                              size_t len, json_t **echo, char *msg,
                              size_t msglen, const char **param);
    unsigned kinds; /* bit (1u << CFG_KIND_x) per kind that can serve it */
    /* Non-stream 2xx: a malloc'd body for the client from the upstream's,
     * or NULL + msg when that body cannot be translated. */
    char *(*body)(const struct gw_api_ctx *x, const char *up, size_t len,
                  size_t *out_len, char *msg, size_t msglen);
    /* Stream: state per request; each upstream event's data appended to
     * out as the client's SSE; the end (after the ledger commit) with the
     * settled usage, error NULL or the sentence of a broken stream.
     * pass: the attempt's kind got the client's own body (api->pass), so
     * its events are already in the API's shape.  status >= 400 at the
     * end: the stream broke after its first byte. */
    void *(*stream_new)(const struct gw_api_ctx *x);
    void (*stream_free)(void *s);
    enum gx_status (*stream_event)(void *s, int pass, const char *data,
                                   size_t len, struct gx_buf *out);
    enum gx_status (*stream_end)(void *s, int pass, const struct pv_usage *u,
                                 int status, const char *error,
                                 struct gx_buf *out);
    /* 1 if a provider of kind is sent the client's own body as it is
     * (pv_passthrough: Messages to the anthropic kind); NULL: never. */
    int (*pass)(const struct pv_chat *c, enum cfg_kind kind);
    /* Request headers the API carries upstream, copied into c after the
     * parse (Messages: anthropic-beta); NULL: none. */
    void (*headers)(struct pv_chat *c, struct gw_hreq *req);
    /* An error body in the API's shape from an OpenAI-shaped one (or the
     * upstream's own): malloc'd, NULL on out of memory; NULL: OpenAI's. */
    char *(*error)(int status, const char *body, size_t len,
                   size_t *out_len);
};
#define GW_KINDS_ALL                                                         \
    ((1u << CFG_KIND_OPENAI) | (1u << CFG_KIND_LOCAL) |                      \
     (1u << CFG_KIND_ANTHROPIC) | (1u << CFG_KIND_GEMINI))
extern const struct gw_api gw_api_chat, gw_api_responses, gw_api_embeddings,
    gw_api_completions, gw_api_messages;
/* server.c: the inbound API a path belongs to (its error shape), or NULL
 * for llmux's own paths (/health, /admin/...). */
const struct gw_api *gw_api_of_path(const char *path);
/* chat.c: the request life of any inbound API (gw_chat_handle is it with
 * gw_api_chat). */
void gw_api_handle(struct gw_worker *w, struct gw_hreq *req,
                   const struct gw_api *api);

/* responses.c (pure: jansson and gx_buf only).  gw_resp_parse: the
 * Responses body into c (api PV_API_RESPONSES, c->body an owned chat
 * body) and *echo (what the Response object repeats); see the file's top
 * for every field.  gw_resp_body: the Response object for an upstream
 * chat completion.  The stream: new / one chat chunk's events / the end
 * (response.completed, or error + response.failed) / free (NULL ok). */
enum pv_chat_err gw_resp_parse(struct pv_chat *c, const char *text,
                               size_t len, json_t **echo, char *msg,
                               size_t msglen, const char **param);
char *gw_resp_body(const struct gw_api_ctx *x, const char *up, size_t len,
                   size_t *out_len, char *msg, size_t msglen);
struct gw_resp_stream;
struct gw_resp_stream *gw_resp_stream_new(const struct gw_api_ctx *x);
void gw_resp_stream_free(struct gw_resp_stream *s);
enum gx_status gw_resp_stream_chunk(struct gw_resp_stream *s,
                                    const char *data, size_t len,
                                    struct gx_buf *out);
enum gx_status gw_resp_stream_end(struct gw_resp_stream *s,
                                  const struct pv_usage *u,
                                  const char *error, struct gx_buf *out);

/* embeddings.c: POST /v1/embeddings and /v1/completions parsed into the
 * neutral request (the body passes on as it is, apart from the model);
 * pure like responses.c. */
enum pv_chat_err gw_embeddings_parse(struct pv_chat *c, const char *text,
                                     size_t len, json_t **echo, char *msg,
                                     size_t msglen, const char **param);
enum pv_chat_err gw_completions_parse(struct pv_chat *c, const char *text,
                                      size_t len, json_t **echo, char *msg,
                                      size_t msglen, const char **param);
/* messages.c: gw_api_messages (POST /v1/messages over the pure
 * translations of providers/messages.c) and POST
 * /v1/messages/count_tokens. */
void gw_msgs_count_tokens(struct gw_worker *w, struct gw_hreq *req);
/* GET /v1/models/{id} (admin.c): one model object or a 404. */
void gw_model_one_handle(struct gw_worker *w, struct gw_hreq *req,
                         const char *id);

#endif
