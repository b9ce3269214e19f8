/*
 * server: `llmux serve`.  N worker threads, each with its own event_base,
 * connection layer (conn.c) and curl multi, all accepting on one port
 * through SO_REUSEPORT so
 * the kernel spreads connections without a shared accept lock.  The main
 * thread only waits for signals: SIGTERM/SIGINT start a graceful shutdown
 * (stop accepting, let in-flight chat requests finish, bounded by
 * GW_DRAIN_MS), then the ledger is flushed and the process exits 0.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <event2/buffer.h>
#include <event2/thread.h>
#include <openssl/rand.h>

#include "gw_int.h"

#define GW_DRAIN_MS 15000

void
gw_worker_wake(struct gw_worker *w)
{
    event_active(w->ev_wake, EV_READ, 0);
}

/* The worker running on this thread, so handlers that only get srv can
 * find the worker's current config generation. */
static _Thread_local struct gw_worker *tl_worker;

const struct cfg *
gw_cfg(const struct gw_server *srv)
{
    return tl_worker && tl_worker->gen ? tl_worker->gen->cfg : srv->cfg;
}

struct rt_router *
gw_router(const struct gw_server *srv)
{
    return tl_worker && tl_worker->gen ? tl_worker->gen->router
                                       : srv->router;
}

const struct pv_registry *
gw_registry(const struct gw_server *srv)
{
    return tl_worker && tl_worker->gen ? tl_worker->gen->pv : srv->gen->pv;
}

void
gw_gen_ref(struct gw_gen *g)
{
    atomic_fetch_add(&g->refs, 1);
}

void
gw_gen_unref(struct gw_gen *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    pv_registry_free(g->pv); /* before the config it points into */
    if (g->owns) {
        rt_router_free(g->router);
        cfg_free(g->cfg);
    }
    free(g);
}

static void
send_simple_json(struct gw_hreq *req, const char *text)
{
    gw_hreq_add_header(req, "Content-Type", "application/json");
    gw_hreq_send_body(req, 200, text, strlen(text));
}

/* GET /admin/providers: the router's health of every target (admin key
 * only; with no admin_key configured the route is closed). */
static void
refuse_admin_providers(struct gw_hreq *req)
{
    gw_reply_error(req, 401, "invalid_request_error", "invalid_api_key", NULL,
                   "This route needs the admin key as a Bearer token.");
}

static void
handle_admin_providers(struct gw_server *srv, struct gw_hreq *req,
                       enum gw_method m)
{
    const char *authz = gw_hreq_credentials(req);
    const char *admin = srv->cfg->admin_key; /* restart to change */
    if (!admin || !admin[0] || !authz || strncmp(authz, "Bearer ", 7) != 0 ||
        !gw_admin_equal(admin, authz + 7, strlen(authz + 7))) {
        refuse_admin_providers(req);
        return;
    }
    if (m != GW_METHOD_GET) {
        gw_hreq_add_header(req, "Allow", "GET, HEAD");
        gw_reply_error(req, 405, "invalid_request_error",
                       "method_not_allowed", NULL,
                       "Use GET for /admin/providers.");
        return;
    }
    json_t *a = rt_health_json(gw_router(srv));
    json_t *o = a ? json_pack("{s:s,s:o}", "object", "list", "data", a) : NULL;
    if (!o) {
        gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                       "Out of memory.");
        return;
    }
    gw_reply_json(req, 200, o);
    json_decref(o);
}

/* What a path is, decided once per request (on_head and on_request). */
enum gw_route {
    R_NONE,
    R_CHAT,
    R_MESSAGES,
    R_COUNT_TOKENS,
    R_HEALTH,
    R_MODELS,
    R_ADMIN_KEYS,
    R_USAGE,
    R_ADMIN_PROVIDERS,
    R_METRICS,
    R_DASHBOARD,
    R_RESPONSES,   /* responses.c */
    R_EMBEDDINGS,  /* embeddings.c */
    R_COMPLETIONS, /* embeddings.c */
    R_MODEL_ONE    /* GET /v1/models/{id} */
};

static enum gw_route
route_of(const char *path)
{
    if (!strcmp(path, "/v1/chat/completions") ||
        !strcmp(path, "/chat/completions"))
        return R_CHAT;
    if (!strcmp(path, "/v1/messages"))
        return R_MESSAGES;
    if (!strcmp(path, "/v1/messages/count_tokens"))
        return R_COUNT_TOKENS;
    if (!strcmp(path, "/health"))
        return R_HEALTH;
    if (!strcmp(path, "/v1/models") || !strcmp(path, "/models"))
        return R_MODELS;
    if (!strcmp(path, "/v1/responses") || !strcmp(path, "/responses"))
        return R_RESPONSES;
    if (!strcmp(path, "/v1/embeddings") || !strcmp(path, "/embeddings"))
        return R_EMBEDDINGS;
    if (!strcmp(path, "/v1/completions") || !strcmp(path, "/completions"))
        return R_COMPLETIONS;
    if (!strncmp(path, "/v1/models/", 11) && path[11])
        return R_MODEL_ONE;
    if (!strcmp(path, "/admin/keys") || !strncmp(path, "/admin/keys/", 12))
        return R_ADMIN_KEYS;
    if (!strcmp(path, "/v1/usage") || !strcmp(path, "/usage"))
        return R_USAGE;
    if (!strcmp(path, "/admin/providers"))
        return R_ADMIN_PROVIDERS;
    if (!strcmp(path, "/metrics"))
        return R_METRICS;
    if (!strcmp(path, "/dashboard") || !strcmp(path, "/favicon.ico"))
        return R_DASHBOARD; /* dashboard.c: the page, and no icon */
    return R_NONE;
}

/* The inbound API a route serves (count_tokens is the Messages API's:
 * its errors take that shape), or NULL. */
static const struct gw_api *
api_of(enum gw_route rt)
{
    switch (rt) {
    case R_CHAT: return &gw_api_chat;
    case R_MESSAGES:
    case R_COUNT_TOKENS: return &gw_api_messages;
    case R_RESPONSES: return &gw_api_responses;
    case R_EMBEDDINGS: return &gw_api_embeddings;
    case R_COMPLETIONS: return &gw_api_completions;
    default: return NULL;
    }
}

const struct gw_api *
gw_api_of_path(const char *path)
{
    return path ? api_of(route_of(path)) : NULL;
}

static void
reply_not_found(struct gw_hreq *req)
{
    const char *path = gw_hreq_path(req);
    gw_reply_error(req, 404, "invalid_request_error", "not_found", NULL,
                   "No route for %s %s.", gw_hreq_method_str(req),
                   path[0] ? path : "/");
}

/*
 * Headers complete, no body byte read yet (DESIGN.md section 2): unknown
 * paths and unknown callers are answered now, so an unauthenticated body
 * is never buffered.  Which caller may do what is still decided by each
 * handler; this only refuses keys that identify nobody.
 */
int
gw_server_on_head(struct gw_worker *w, struct gw_hreq *req)
{
    if (gw_hreq_method(req) == GW_METHOD_OPTIONS)
        return 0; /* preflights carry no key */
    enum gw_route rt = route_of(gw_hreq_path(req));
    if (rt == R_NONE) {
        reply_not_found(req);
        return -1;
    }
    const char *up = gw_hreq_header(req, "Upgrade");
    if (rt == R_RESPONSES && up && strcasestr(up, "websocket")) {
        /* The Responses WebSocket mode needs stored state: a client that
         * tries it learns at once to use HTTP instead. */
        gw_hreq_add_header(req, "Upgrade", "HTTP/1.1");
        gw_reply_error(req, 426, "invalid_request_error",
                       "websocket_not_supported", NULL,
                       "llmux serves the Responses API over HTTP only (POST "
                       "/v1/responses, with stream: true for events); "
                       "WebSocket mode is not supported.");
        return -1;
    }
    if (rt == R_HEALTH || rt == R_METRICS || rt == R_DASHBOARD ||
        !w->srv->auth)
        return 0;
    struct gw_authn an;
    gw_auth_identify(w->srv->auth, gw_hreq_credentials(req),
                     gx_now_ms(), &an);
    /* Which caller may do what, where the headers decide it: the admin
     * routes refuse anyone but the admin before the body is read, as
     * their handlers would after it (same status, same error). */
    if (an.who != GW_CALLER_ADMIN && an.who != GW_CALLER_NONE &&
        (rt == R_ADMIN_KEYS || rt == R_ADMIN_PROVIDERS)) {
        if (rt == R_ADMIN_KEYS)
            gw_admin_refuse(req, &an);
        else
            refuse_admin_providers(req);
        return -1;
    }
    if (an.who != GW_CALLER_NONE)
        return 0;
    if (api_of(rt) && rt != R_COUNT_TOKENS) { /* a model request refused */
        atomic_fetch_add(&w->srv->stats.errors, 1);
        gw_obs_refused(w->srv, req, an.status, NULL,
                       an.code); /* before the reply */
    }
    gw_reply_unauthorized(req, &an);
    return -1;
}

/* Access-Control-Request-Headers echoed if it is a plain list of header
 * names (the openai SDK sends a dozen x-stainless-* ones); else ours. */
static const char *
preflight_headers(const char *asked)
{
    size_t n = asked ? strlen(asked) : 0;
    if (n == 0 || n > 1024)
        return "authorization, content-type, x-request-id, x-api-key, "
               "x-llmux-dry-run";
    for (size_t i = 0; i < n; i++) {
        char c = asked[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == ',' ||
              c == ' '))
            return "authorization, content-type, x-request-id, x-api-key, "
                   "x-llmux-dry-run";
    }
    return asked;
}

/* OPTIONS: a CORS preflight (Origin + Access-Control-Request-Method), or
 * a plain question about the allowed methods. */
static void
handle_options(struct gw_worker *w, struct gw_hreq *req)
{
    const char *origin = gw_hreq_header(req, "Origin");
    const char *acrm = gw_hreq_header(req, "Access-Control-Request-Method");
    if (origin && acrm) {
        if (!gw_cors_allowed(gw_cfg(w->srv), origin)) {
            gw_reply_error(req, 403, "invalid_request_error",
                           "cors_origin_not_allowed", NULL,
                           "The origin %s is not in cors.origins.",
                           origin);
            return;
        }
        gw_hreq_add_header(req, "Access-Control-Allow-Methods",
                           "GET, HEAD, POST, DELETE, OPTIONS");
        gw_hreq_add_header(
            req, "Access-Control-Allow-Headers",
            preflight_headers(
                gw_hreq_header(req, "Access-Control-Request-Headers")));
        gw_hreq_add_header(req, "Access-Control-Max-Age", "600");
    }
    gw_hreq_add_header(req, "Allow", "GET, HEAD, POST, DELETE, OPTIONS");
    gw_hreq_send_body(req, 204, NULL, 0);
}

void
gw_server_on_refused(struct gw_worker *w, struct gw_hreq *req, int status,
                     const char *code)
{
    enum gw_route rt = route_of(gw_hreq_path(req));
    if (gw_hreq_method(req) != GW_METHOD_POST || !api_of(rt) ||
        rt == R_COUNT_TOKENS)
        return;
    atomic_fetch_add(&w->srv->stats.errors, 1);
    gw_obs_refused(w->srv, req, status, NULL, code);
}

void
gw_server_on_request(struct gw_worker *w, struct gw_hreq *req)
{
    struct gw_server *srv = w->srv;
    enum gw_method m = gw_hreq_method(req);
    const char *path = gw_hreq_path(req);
    if (m == GW_METHOD_OPTIONS) {
        handle_options(w, req);
        return;
    }
    enum gw_route rt = route_of(path);
    switch (rt) {
    case R_CHAT:
    case R_MESSAGES:
    case R_COUNT_TOKENS:
    case R_RESPONSES:
    case R_EMBEDDINGS:
    case R_COMPLETIONS:
        if (m != GW_METHOD_POST) {
            gw_hreq_add_header(req, "Allow", "POST, OPTIONS");
            gw_reply_error(req, 405, "invalid_request_error",
                           "method_not_allowed", NULL,
                           "Use POST for %s.", path);
            return;
        }
        if (atomic_load(&w->stop)) {
            gw_reply_error(req, 503, "server_error", "shutting_down", NULL,
                           "llmux is shutting down; retry on another "
                           "instance.");
            return;
        }
        if (rt == R_COUNT_TOKENS)
            gw_msgs_count_tokens(w, req); /* messages.c */
        else
            gw_api_handle(w, req, api_of(rt));
        return;
    case R_MODEL_ONE:
        if (m != GW_METHOD_GET) {
            gw_hreq_add_header(req, "Allow", "GET, HEAD, OPTIONS");
            gw_reply_error(req, 405, "invalid_request_error",
                           "method_not_allowed", NULL, "Use GET for %s.",
                           path);
            return;
        }
        gw_model_one_handle(w, req, path + 11); /* admin.c */
        return;
    case R_HEALTH:
        send_simple_json(req, "{\"status\":\"ok\"}");
        return;
    case R_MODELS:
        gw_models_handle(w, req); /* admin.c: the key's allowlist */
        return;
    case R_ADMIN_KEYS:
        gw_admin_handle(w, req, path); /* admin.c */
        return;
    case R_USAGE:
        gw_usage_handle(w, req); /* usage_api.c */
        return;
    case R_ADMIN_PROVIDERS:
        handle_admin_providers(srv, req, m);
        return;
    case R_METRICS:
        gw_handle_metrics(srv, req);
        return;
    case R_DASHBOARD:
        gw_dashboard_handle(w, req); /* dashboard.c */
        return;
    case R_NONE:
        break;
    }
    reply_not_found(req);
}

static void
drain_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_worker *w = arg;
    if (w->inflight == 0 || gx_mono_us() >= w->drain_deadline_us) {
        if (w->inflight) {
            GX_LOG(GX_LOG_WARN, NULL,
                   "worker %d: %zu requests still in flight at the drain "
                   "deadline; closing them",
                   w->index, w->inflight);
            gw_chat_abort_all(w);
            /* Give the error replies just queued a moment to be written
             * before the connections are closed. */
            struct timeval flush = {0, 300000};
            event_base_loopexit(w->base, &flush);
            return;
        }
        event_base_loopexit(w->base, NULL);
        return;
    }
    struct timeval tv = {0, 20000};
    evtimer_add(w->ev_drain, &tv);
}

static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_worker *w = arg;
    pthread_mutex_lock(&w->done_mu);
    struct gw_gen *g = w->pending_gen;
    w->pending_gen = NULL;
    pthread_mutex_unlock(&w->done_mu);
    if (g) {
        /* A reload: new requests use g; running ones keep their own. */
        struct gw_gen *old = w->gen;
        w->gen = g;
        gw_gen_unref(old);
    }
    gw_chat_run_done(w);
    if (atomic_load(&w->stop) && w->listen_fd >= 0) {
        /* Stop accepting; connections already open finish their work. */
        gw_listen_stop(w);
        /* LLMUX_DRAIN_MS overrides the bound (tests, fast restarts). */
        const char *dm = getenv("LLMUX_DRAIN_MS");
        long ms = dm ? strtol(dm, NULL, 10) : GW_DRAIN_MS;
        if (ms < 0 || ms > 3600000)
            ms = GW_DRAIN_MS;
        w->drain_deadline_us = gx_mono_us() + (int64_t)ms * 1000;
        drain_cb(-1, 0, w);
    }
}

static int
make_listener(const char *host, int port, int *bound_port, char *err,
              size_t errlen)
{
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &ai);
    if (rc != 0) {
        gx_errf(err, errlen, "cannot resolve listen address '%s': %s", host,
                gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    0);
    if (fd < 0) {
        gx_errf(err, errlen, "socket: %s", strerror(errno));
        freeaddrinfo(ai);
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        gx_errf(err, errlen, "cannot listen on %s:%d: %s", host, port,
                strerror(errno));
        close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            *bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else
            *bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return fd;
}

static void
worker_cleanup(struct gw_worker *w)
{
    pv_loop_free(w->pv);
    w->pv = NULL;
    gw_gen_unref(w->pending_gen);
    gw_gen_unref(w->gen);
    w->pending_gen = w->gen = NULL;
    gw_listen_stop(w);
    gw_conns_free_all(w);
    if (w->ev_wake)
        event_free(w->ev_wake);
    if (w->ev_drain)
        event_free(w->ev_drain);
    w->ev_wake = w->ev_drain = NULL;
    if (w->base)
        event_base_free(w->base);
    w->base = NULL;
    pthread_mutex_destroy(&w->done_mu);
}

static int
worker_init(struct gw_server *srv, struct gw_worker *w, int index, int fd,
            char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    w->srv = srv;
    w->index = index;
    w->listen_fd = -1;
    pthread_mutex_init(&w->done_mu, NULL);
    w->gen = srv->gen;
    gw_gen_ref(w->gen);
    uint64_t seed = 0;
    if (RAND_bytes((unsigned char *)&seed, sizeof(seed)) != 1)
        seed = (uint64_t)gx_mono_us() * 2654435761u + (uint64_t)index;
    w->rng = seed | 1;
    w->base = event_base_new();
    if (!w->base) {
        close(fd);
        goto fail;
    }
    gw_tls_attach(w, srv->tls_ctx); /* tls.c: HTTPS when configured */
    if (gw_listen_start(w, fd, err, errlen) != GX_OK)
        goto fail_quiet;
    w->ev_wake = event_new(w->base, -1, 0, wake_cb, w);
    w->ev_drain = evtimer_new(w->base, drain_cb, w);
    if (!w->ev_wake || !w->ev_drain)
        goto fail;
    w->pv = pv_loop_new(w->base, err, errlen);
    if (!w->pv)
        goto fail_quiet;
    return 0;
fail:
    gx_errf(err, errlen, "out of memory creating worker %d", index);
fail_quiet:
    worker_cleanup(w);
    return -1;
}

static void *
worker_main(void *arg)
{
    struct gw_worker *w = arg;
    tl_worker = w;
    event_base_dispatch(w->base);
    tl_worker = NULL;
    return NULL;
}

static int
same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

/*
 * SIGHUP: load the config file again; if it is valid, hand a new
 * generation (config + router, keeping the health of targets that still
 * exist) and its provider instances (local models loaded here, on the
 * main thread, while the workers serve on) to every worker.  A bad file or
 * a local model that does not load is reported and the old config kept
 * (-1; 0 when the new one is in place).
 * Settings bound at start (listen, workers, database, admin_key,
 * require_keys, tls) need a restart: changes to them are reported and
 * ignored.
 */
static int
reload_config(struct gw_server *srv)
{
    char err[1024] = "";
    struct cfg *c = NULL;
    if (!srv->config_path) {
        GX_LOG(GX_LOG_WARN, NULL,
               "SIGHUP: serving built-in defaults (no --config); nothing to "
               "reload");
        return -1;
    }
    if (cfg_load_file(srv->config_path, &c, err, sizeof(err)) != GX_OK) {
        GX_LOG(GX_LOG_ERROR, NULL,
               "SIGHUP: config rejected, keeping the current one: %s", err);
        return -1;
    }
    const struct cfg *s0 = srv->cfg;
    struct pv_registry *reg = NULL;
    if (pv_registry_new(c, srv->gen->pv, &reg, err, sizeof(err)) != GX_OK) {
        GX_LOG(GX_LOG_ERROR, NULL,
               "SIGHUP: config rejected, keeping the current one: %s", err);
        cfg_free(c);
        return -1;
    }
    if (!same_str(s0->listen_host, c->listen_host) ||
        s0->listen_port != c->listen_port || s0->workers != c->workers ||
        !same_str(s0->database, c->database) ||
        !same_str(s0->admin_key, c->admin_key) ||
        s0->require_keys != c->require_keys ||
        !same_str(s0->tls_cert, c->tls_cert) ||
        !same_str(s0->tls_key, c->tls_key))
        GX_LOG(GX_LOG_WARN, NULL,
               "SIGHUP: listen, workers, database, admin_key, require_keys "
               "and tls take effect only after a restart; the rest of the "
               "new config applies now");
    struct gw_gen *g = calloc(1, sizeof(*g));
    struct rt_router *rt = rt_router_new(c);
    if (!g || !rt) {
        GX_LOG(GX_LOG_ERROR, NULL, "SIGHUP: out of memory; config kept");
        free(g);
        rt_router_free(rt);
        pv_registry_free(reg);
        cfg_free(c);
        return -1;
    }
    rt_router_adopt(rt, srv->gen->router);
    g->cfg = c;
    g->router = rt;
    g->pv = reg;
    g->owns = 1;
    atomic_store(&g->refs, 1 + srv->n_workers); /* main + each worker */
    for (int i = 0; i < srv->n_workers; i++) {
        struct gw_worker *w = &srv->workers[i];
        pthread_mutex_lock(&w->done_mu);
        struct gw_gen *stale = w->pending_gen;
        w->pending_gen = g;
        pthread_mutex_unlock(&w->done_mu);
        gw_gen_unref(stale);
        gw_worker_wake(w);
    }
    struct gw_gen *old = srv->gen;
    srv->gen = g;
    gw_gen_unref(old);
    GX_LOG(GX_LOG_WARN, NULL,
           "SIGHUP: config reloaded from %s (%zu providers, %zu routes)",
           srv->config_path, c->n_providers, c->n_routes);
    return 0;
}

static void
serve_usage(FILE *f)
{
    fputs("usage: llmux serve [--config FILE] [--listen HOST:PORT] "
          "[--workers N]\n"
          "\n"
          "Serves the OpenAI-compatible API.  Without --config, built-in\n"
          "defaults: 127.0.0.1:8080, providers from the API keys in the\n"
          "environment, the local engine when LLMUX_MODEL names a GGUF file.\n"
          "SIGTERM/SIGINT finish in-flight requests, then exit 0.\n",
          f);
}

int
gw_cli_serve(int argc, char **argv)
{
    const char *config_path = NULL, *listen_arg = NULL;
    int workers = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            serve_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "llmux serve: %s needs a value\n", a);
            serve_usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--config")) {
            config_path = argv[++i];
        } else if (!strcmp(a, "--listen")) {
            listen_arg = argv[++i];
        } else if (!strcmp(a, "--workers")) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 256) {
                fprintf(stderr, "llmux serve: --workers must be 1..256\n");
                return 2;
            }
            workers = (int)n;
        } else {
            fprintf(stderr, "llmux serve: unknown option '%s'\n", a);
            serve_usage(stderr);
            return 2;
        }
    }

    char err[1024] = "";
    struct gw_server srv;
    memset(&srv, 0, sizeof(srv));
    srv.started_ms = gx_now_ms();
    enum gx_status st = config_path
                            ? cfg_load_file(config_path, &srv.cfg, err,
                                            sizeof(err))
                            : cfg_defaults(&srv.cfg, err, sizeof(err));
    if (st != GX_OK) {
        fprintf(stderr, "llmux serve: %s\n", err);
        return 1;
    }
    char *lhost = NULL;
    int lport = 0;
    if (listen_arg && cfg_listen_parse(listen_arg, &lhost, &lport) != GX_OK) {
        fprintf(stderr, "llmux serve: --listen wants HOST:PORT, got '%s'\n",
                listen_arg);
        cfg_free(srv.cfg);
        return 2;
    }
    if (lhost) {
        free(srv.cfg->listen_host);
        srv.cfg->listen_host = lhost;
        srv.cfg->listen_port = lport;
    }
    if (workers)
        srv.cfg->workers = workers;
    if (srv.cfg->workers < 1)
        srv.cfg->workers = 1;

    /* Threads and signals: workers never see the signals; main waits. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();
    curl_global_init(CURL_GLOBAL_DEFAULT);

    int rc = 1;
    struct pv_registry *reg = NULL; /* the provider instances */
    st = pv_registry_new(srv.cfg, NULL, &reg, err, sizeof(err));
    if (st != GX_OK) {
        fprintf(stderr, "llmux serve: %s\n", err);
        goto out;
    }
    srv.config_path = config_path;
    srv.router = rt_router_new(srv.cfg);
    srv.gen = calloc(1, sizeof(*srv.gen));
    if (!srv.router || !srv.gen) {
        fprintf(stderr, "llmux serve: out of memory\n");
        pv_registry_free(reg);
        goto out;
    }
    srv.gen->cfg = srv.cfg;
    srv.gen->router = srv.router;
    srv.gen->pv = reg;
    atomic_store(&srv.gen->refs, 1);
    struct pr_ledger_opts lo = {
        .lock_timeout_ms = srv.cfg->storage_timeout_ms,
        .unavailable = srv.cfg->storage_spool ? PR_UNAVAILABLE_SPOOL
                                              : PR_UNAVAILABLE_FAIL,
        .spool_path = srv.cfg->storage_spool_file,
    };
    st = pr_ledger_open_ex(srv.cfg->database, &lo, &srv.ledger, err,
                           sizeof(err));
    if (st != GX_OK) {
        fprintf(stderr, "llmux serve: usage database: %s\n", err);
        goto out;
    }
    /* auth.c: keys from the database, the admin key, the aux thread. */
    srv.auth = gw_auth_new(srv.cfg->admin_key, srv.cfg->require_keys,
                           pr_ledger_path(srv.ledger), err, sizeof(err));
    if (srv.auth) /* committed cost leaves the budget leases */
        pr_ledger_attach_budget(srv.ledger, gw_auth_budget(srv.auth));
    if (!srv.auth ||
        gw_tls_new(srv.cfg, &srv.tls_ctx, err, sizeof(err)) != GX_OK ||
        !(srv.obs = gw_obs_new(srv.cfg, err, sizeof(err))) ||
        gw_otel_new(srv.cfg, &srv.otel, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "llmux serve: %s\n", err);
        goto out;
    }

    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 &&
        nofile.rlim_cur != RLIM_INFINITY &&
        (rlim_t)srv.cfg->max_connections + 64 > nofile.rlim_cur)
        GX_LOG(GX_LOG_WARN, NULL,
               "limits.max_connections is %d but this process may open only "
               "%llu files (ulimit -n); past that, accepting pauses on "
               "EMFILE: raise the limit or lower max_connections",
               srv.cfg->max_connections, (unsigned long long)nofile.rlim_cur);
    srv.n_workers = srv.cfg->workers;
    srv.workers = calloc((size_t)srv.n_workers, sizeof(*srv.workers));
    if (!srv.workers) {
        fprintf(stderr, "llmux serve: out of memory\n");
        goto out;
    }
    int port = srv.cfg->listen_port;
    int inited = 0, running = 0;
    for (int i = 0; i < srv.n_workers; i++) {
        int bound = port;
        int fd = make_listener(srv.cfg->listen_host, port, &bound, err,
                               sizeof(err));
        if (fd < 0 ||
            worker_init(&srv, &srv.workers[i], i, fd, err, sizeof(err)) != 0) {
            fprintf(stderr, "llmux serve: %s\n", err);
            goto stop;
        }
        port = bound; /* port 0: the others join the kernel's choice */
        inited++;
    }
    srv.port = port;
    for (int i = 0; i < srv.n_workers; i++) {
        if (pthread_create(&srv.workers[i].thread, NULL, worker_main,
                           &srv.workers[i]) != 0) {
            fprintf(stderr, "llmux serve: cannot start worker thread\n");
            goto stop_threads;
        }
        running++;
    }
    {
        const char *h = srv.cfg->listen_host;
        int v6 = strchr(h, ':') != NULL;
        printf("llmux: listening on %s://%s%s%s:%d (%d workers, %zu "
               "providers, %zu routes)\n",
               srv.tls_ctx ? "https" : "http", v6 ? "[" : "", h,
               v6 ? "]" : "", port, srv.n_workers,
               srv.cfg->n_providers, srv.cfg->n_routes);
        printf("llmux: try  curl %s://%s%s%s:%d/v1/chat/completions "
               "-H 'Content-Type: application/json' -d "
               "'{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
               "\"content\":\"Hello\"}]}'\n",
               srv.tls_ctx ? "https" : "http", v6 ? "[" : "", h,
               v6 ? "]" : "", port,
               srv.cfg->n_routes ? srv.cfg->routes[0].name
               : srv.cfg->n_providers && srv.cfg->providers[0].n_models
                   ? srv.cfg->providers[0].models[0].name
                   : "MODEL");
        printf("llmux: dashboard %s://%s%s%s:%d/dashboard\n",
               srv.tls_ctx ? "https" : "http", v6 ? "[" : "", h,
               v6 ? "]" : "", port);
        fflush(stdout);
    }
    rc = 0;
    for (;;) {
        int sig = 0;
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            if (reload_config(&srv) == 0) {
                /* Logs and traces: the new config's blocks, in place. */
                const struct cfg *nc = srv.gen->cfg;
                gw_obs_apply(srv.obs, nc);
                if (gw_otel_apply(srv.otel, nc, err, sizeof(err)) != GX_OK)
                    GX_LOG(GX_LOG_ERROR, NULL,
                           "SIGHUP: otel: %s; tracing keeps its old settings",
                           err);
            }
            gw_obs_reopen(srv.obs);
            continue;
        }
        GX_LOG(GX_LOG_INFO, NULL, "signal %d: shutting down gracefully", sig);
        break;
    }
stop_threads:
    for (int i = 0; i < running; i++) {
        atomic_store(&srv.workers[i].stop, 1);
        gw_worker_wake(&srv.workers[i]);
    }
    for (int i = 0; i < running; i++)
        pthread_join(srv.workers[i].thread, NULL);
    gw_auth_stop(srv.auth); /* auth.c: before the bases are freed */
    if (running < srv.n_workers)
        rc = 1;
stop:
    for (int i = 0; i < inited; i++)
        worker_cleanup(&srv.workers[i]);
    if (inited < srv.n_workers)
        rc = 1;
out:
    free(srv.workers);
    gw_auth_free(srv.auth); /* before the ledger: it reads its database */
    gw_tls_free(srv.tls_ctx);
    pr_ledger_close(srv.ledger);
    gw_otel_free(srv.otel); /* the workers' spans: one last export */
    gw_obs_free(srv.obs);
    gw_gen_unref(srv.gen); /* after the workers dropped theirs */
    pv_registry_drain();   /* the local engines it held are stopped */
    rt_router_free(srv.router);
    cfg_free(srv.cfg);
    curl_global_cleanup();
    libevent_global_shutdown();
    return rc;
}
