/*
 * loop.c: the per-worker HTTP client, a libcurl multi handle driven by the
 * worker's libevent event_base, and the generic call life shared by every
 * kind (pv_call_start/cancel/pause/resume dispatch through pv_ops).
 *
 * How it is driven: libcurl tells us which sockets to watch
 * (CURLMOPT_SOCKETFUNCTION -> one persistent event per socket) and when to
 * wake it (CURLMOPT_TIMERFUNCTION -> one timer event); each event calls
 * curl_multi_socket_action and then reads finished transfers with
 * curl_multi_info_read.  Nothing here blocks: DNS goes through libcurl's
 * threaded resolver (AsynchDNS), and there is no curl_multi_perform loop.
 *
 * The multi handle lives as long as the loop, so its connection cache
 * keeps upstream connections open between calls (HTTP/1.1 keep-alive, or
 * one HTTP/2 connection multiplexing many calls when TLS offers h2).
 *
 * Re-entrancy (see providers_int.h): every user callback runs with
 * loop->depth raised; cancel, start, resume made meanwhile are queued and
 * done by pv_loop_settle once libcurl has returned (right after
 * curl_multi_socket_action, or from the loop's kick event when the work
 * was queued elsewhere).  A cancelled call's write callback returns 0 so
 * libcurl stops feeding it; its memory stays valid until settle removes
 * the easy handle.
 *
 * Backpressure: pv_call_pause sets a flag; the next write callback returns
 * CURL_WRITEFUNC_PAUSE, so libcurl keeps those bytes and stops reading the
 * socket (TCP flow control then slows the upstream).  Resume unpauses from
 * the kick event and libcurl hands the held bytes over first.
 *
 * Easy handles are kept (up to PV_EASY_POOL per loop) instead of being
 * created and destroyed per call, with the options they carry: a call to
 * the same URL with the same provider settings takes a handle as the last
 * call left it and sets only what is its own (the body, the headers, the
 * callbacks' data); any other handle is reset and set up in full.  Besides
 * the reset and the setopts, that saves libcurl re-deriving the URL string
 * from the parsed URL at each transfer's start (~7.5k instructions).
 *
 * One copy per attempt: libcurl re-sends a request by itself when a reused
 * connection turns out dead before any response byte (up to 5 times, one
 * per dead pooled connection).  Each copy may reach an upstream that reads
 * it and bills it, so the prerequest callback refuses every send after a
 * transfer's first, and the attempt fails as a transport error instead.
 *
 * Timeouts: connect -> CURLOPT_CONNECTTIMEOUT_MS; total ->
 * CURLOPT_TIMEOUT_MS; first byte -> our own timer from start until the
 * first body byte (headers alone do not count: a server that sends 200 and
 * then nothing has not answered).
 */
#include "providers.h"
#include "providers_int.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

/* A socket libcurl asked us to watch.  A connection socket libcurl opened
 * through opensock_cb ("ours") lives until closesock_cb, across the
 * CURL_POLL_REMOVE libcurl sends each time the connection goes back to its
 * cache between transfers: its event stays registered as it was, so a
 * kept-alive connection costs no epoll_ctl per request (it cost about
 * three: an add, a modify and a delete).  An event on an idle socket
 * (the upstream closed it, or sent junk) only takes the registration
 * away; libcurl finds the connection dead when it next picks it. */
struct pv_sock {
    struct pv_loop *loop;
    struct event *ev;
    curl_socket_t fd;
    short ev_flags; /* what ev is added with; 0 = not added */
    int ours;       /* opened by opensock_cb: freed by closesock_cb */
    int idle;       /* libcurl said REMOVE: no transfer uses it */
    struct pv_sock *prev, *next;
};

/* A pooled easy handle and what its options were set for.  Every option
 * pv_http_start sets is either the call's own (set each time) or follows
 * from these fields (set when they change, after a reset): a handle whose
 * fields match a new call needs only the call's own. */
struct pv_easy {
    CURL *easy;
    CURLU *url;         /* loop->urls[] handle; NULL: reset before use */
    long connect_timeout_ms, timeout_ms;
    char *ca_file;      /* copy, NULL for the system store */
    int used;           /* options set before: reset before a full setup */
    struct event *fb;   /* the first-byte timer, kept with the handle */
    struct pv_call *call; /* the call fb is armed for, or NULL */
};

/* Idle upstream connections kept per worker: enough for a few hundred
 * concurrent HTTP/1.1 streams to one relay, bounded so a burst does not
 * leave thousands of sockets behind. */
#define PV_MAXCONNECTS 256L
#define PV_EXPECT_FROM 1024 /* body bytes above which "Expect:" is sent */

static void loop_destroy_call(struct pv_loop *loop, struct pv_call *c);
static void easy_free(struct pv_easy *ez);

const char *
pv_outcome_str(enum pv_outcome o)
{
    switch (o) {
    case PV_OK: return "ok";
    case PV_ERR_CONNECT: return "connect failed";
    case PV_ERR_CONNECT_TIMEOUT: return "connect timeout";
    case PV_ERR_FIRST_BYTE_TIMEOUT: return "first byte timeout";
    case PV_ERR_TIMEOUT: return "timeout";
    case PV_ERR_TRANSPORT: return "transport error";
    case PV_ERR_STATUS: return "upstream error status";
    case PV_ERR_MALFORMED: return "malformed upstream response";
    case PV_ERR_TOO_BIG: return "upstream response too large";
    case PV_ERR_INTERNAL: return "internal error";
    }
    return "unknown outcome";
}

/* ---- deferred work ------------------------------------------------------ */

static void
pend(struct pv_call *c)
{
    struct pv_loop *loop = c->loop;
    if (c->pending)
        return;
    c->pending = 1;
    c->pend_next = loop->pending;
    loop->pending = c;
    /* Whoever raised depth may not settle afterwards (a kind's own event,
     * e.g. local.c's token events): make sure the loop comes back. */
    if (!loop->settling && loop->kick)
        event_active(loop->kick, 0, 0);
}

/* The first-byte timer off for good (the body began, or the call ended):
 * the event stays with the easy handle for its next call. */
static void
fb_stop(struct pv_call *c)
{
    if (!c->fb_timer)
        return;
    evtimer_del(c->fb_timer);
    if (c->ez && c->ez->call == c)
        c->ez->call = NULL;
    c->fb_timer = NULL;
}

static void
deliver_done(struct pv_call *c)
{
    struct pv_loop *loop = c->loop;
    if (c->finished || c->cancelled)
        return;
    c->finished = 1;
    fb_stop(c);
    c->res.total_us = gx_mono_us() - c->t_start_us;
    /* The detail reaches logs, the ledger and client messages. */
    pv_scrub(c->scrub, c->res.detail, strlen(c->res.detail));
    if (loop->n_active > 0)
        loop->n_active--;
    loop->depth++;
    if (c->cb.on_done)
        c->cb.on_done(c->cb.ud, &c->res);
    loop->depth--;
    c->dead = 1;
    pend(c);
}

static enum pv_outcome
outcome_from_curl(struct pv_call *c, CURLcode code)
{
    switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
        return PV_ERR_CONNECT;
    case CURLE_OPERATION_TIMEDOUT:
        return c->connected ? PV_ERR_TIMEOUT : PV_ERR_CONNECT_TIMEOUT;
    case CURLE_FILESIZE_EXCEEDED:
        return PV_ERR_TOO_BIG;
    case CURLE_OUT_OF_MEMORY:
        return PV_ERR_INTERNAL;
    default:
        /* RECV_ERROR, SEND_ERROR, PARTIAL_FILE, GOT_NOTHING, HTTP2 ... */
        return PV_ERR_TRANSPORT;
    }
}

static void
finish_transfer(struct pv_call *c, CURLcode code)
{
    if (c->finished || c->cancelled)
        return;
    if (c->failed) {
        c->res.outcome = c->fail;
    } else if (code == CURLE_OK) {
        c->hooks->on_finish(c);
    } else if (c->resend_refused) {
        c->res.outcome = PV_ERR_TRANSPORT;
        snprintf(c->res.detail, sizeof(c->res.detail),
                 "transport error: the connection closed after the request "
                 "was sent and before any answer (not re-sent)");
    } else {
        c->res.outcome = outcome_from_curl(c, code);
        /* errbuf names host and port, never headers or the key. */
        snprintf(c->res.detail, sizeof(c->res.detail), "%s: %.200s",
                 pv_outcome_str(c->res.outcome),
                 c->errbuf[0] ? c->errbuf : curl_easy_strerror(code));
        size_t dl = strlen(c->res.detail);
        if (dl > 0 && c->res.detail[dl - 1] == '\n')
            c->res.detail[dl - 1] = '\0';
    }
    pv_scrub(c->scrub, c->res.detail, strlen(c->res.detail));
    GX_LOG(GX_LOG_DEBUG, c->request_id, "upstream %s: status %d, %s%s%s",
           pv_outcome_str(c->res.outcome), c->res.http_status,
           c->res.detail[0] ? c->res.detail : "",
           c->res.detail[0] ? ", " : "",
           c->connected ? "connected" : "not connected");
    deliver_done(c);
}

void
pv_loop_settle(struct pv_loop *loop)
{
    if (loop->depth > 0 || loop->settling)
        return;
    loop->settling = 1;
    for (;;) {
        int progress = 0;
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(loop->multi, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct pv_call *c = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            CURLcode code = msg->data.result;
            if (c)
                finish_transfer(c, code);
            progress = 1;
        }
        while (loop->pending) {
            struct pv_call *c = loop->pending;
            loop->pending = c->pend_next;
            c->pending = 0;
            c->pend_next = NULL;
            progress = 1;
            if (c->dead) {
                loop_destroy_call(loop, c);
                continue;
            }
            if (c->need_add) {
                c->need_add = 0;
                if (curl_multi_add_handle(loop->multi, c->easy) == CURLM_OK) {
                    c->added = 1;
                } else {
                    pv_call_failf(c, PV_ERR_INTERNAL,
                                  "could not add the transfer");
                    deliver_done(c);
                    continue;
                }
            }
            if (c->need_resume) {
                c->need_resume = 0;
                if (c->added && !c->finished && !c->cancelled) {
                    /* Unpausing may deliver held data at once, i.e. run
                     * our write callback and the caller's on_event. */
                    loop->depth++;
                    curl_easy_pause(c->easy, CURLPAUSE_CONT);
                    loop->depth--;
                }
            }
        }
        if (!progress)
            break;
    }
    loop->settling = 0;
}

/* ---- libevent <-> libcurl ---------------------------------------------- */

static void
sock_event_cb(evutil_socket_t fd, short what, void *arg)
{
    struct pv_sock *s = arg;
    struct pv_loop *loop = s->loop;
    if (s->idle) {
        event_del(s->ev);
        s->ev_flags = 0;
        return;
    }
    int flags = 0, running = 0;
    if (what & EV_READ)
        flags |= CURL_CSELECT_IN;
    if (what & EV_WRITE)
        flags |= CURL_CSELECT_OUT;
    loop->depth++;
    curl_multi_socket_action(loop->multi, fd, flags, &running);
    loop->depth--;
    pv_loop_settle(loop);
}

static void
timer_event_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pv_loop *loop = arg;
    int running = 0;
    loop->depth++;
    curl_multi_socket_action(loop->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    loop->depth--;
    pv_loop_settle(loop);
}

static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pv_loop_settle(arg);
}

static void
sock_free(struct pv_sock *s)
{
    struct pv_loop *loop = s->loop;
    if (s->prev)
        s->prev->next = s->next;
    else
        loop->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (s->ev)
        event_free(s->ev);
    free(s);
}

static struct pv_sock *
sock_new(struct pv_loop *loop, curl_socket_t fd)
{
    struct pv_sock *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->loop = loop;
    s->fd = fd;
    s->next = loop->socks;
    if (loop->socks)
        loop->socks->prev = s;
    loop->socks = s;
    return s;
}

static struct pv_sock *
sock_find(struct pv_loop *loop, curl_socket_t fd)
{
    for (struct pv_sock *s = loop->socks; s; s = s->next)
        if (s->fd == fd)
            return s;
    return NULL;
}

/* CURLOPT_OPENSOCKETFUNCTION: the connection sockets libcurl opens. */
static curl_socket_t
opensock_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
    struct pv_loop *loop = clientp;
    (void)purpose;
    curl_socket_t fd = socket(addr->family, addr->socktype, addr->protocol);
    if (fd == CURL_SOCKET_BAD)
        return fd;
    struct pv_sock *s = sock_new(loop, fd);
    if (!s) {
        close(fd);
        return CURL_SOCKET_BAD;
    }
    s->ours = 1;
    s->idle = 1;
    return fd;
}

/* CURLOPT_CLOSESOCKETFUNCTION: the event goes before the descriptor, so
 * libevent never watches a number the kernel may hand out again. */
static int
closesock_cb(void *clientp, curl_socket_t fd)
{
    struct pv_loop *loop = clientp;
    struct pv_sock *s = sock_find(loop, fd);
    if (s)
        sock_free(s);
    return close(fd);
}

static int
curl_sock_cb(CURL *easy, curl_socket_t fd, int what, void *userp,
             void *socketp)
{
    (void)easy;
    struct pv_loop *loop = userp;
    struct pv_sock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            curl_multi_assign(loop->multi, fd, NULL);
            if (s->ours)
                s->idle = 1; /* kept, registration and all */
            else
                sock_free(s);
        }
        return 0;
    }
    if (!s) {
        s = sock_find(loop, fd);
        if (!s)
            s = sock_new(loop, fd); /* not ours (a resolver's pipe) */
        if (!s)
            return -1;
        s->idle = 0;
        curl_multi_assign(loop->multi, fd, s);
    }
    short ev = EV_PERSIST;
    if (what & CURL_POLL_IN)
        ev |= EV_READ;
    if (what & CURL_POLL_OUT)
        ev |= EV_WRITE;
    if (ev == s->ev_flags)
        return 0; /* watched as asked already: no system call */
    if (s->ev) {
        event_del(s->ev);
        s->ev_flags = 0;
        if (event_assign(s->ev, loop->base, fd, ev, sock_event_cb, s) < 0)
            return -1;
    } else {
        s->ev = event_new(loop->base, fd, ev, sock_event_cb, s);
        if (!s->ev)
            return -1;
    }
    if (event_add(s->ev, NULL) < 0)
        return -1;
    s->ev_flags = ev;
    return 0;
}

static int
curl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct pv_loop *loop = userp;
    if (timeout_ms < 0) {
        evtimer_del(loop->timer);
        return 0;
    }
    if (timeout_ms == 0 && loop->depth == 0) {
        /* "Now" from outside libcurl: a transfer was just added.  The
         * timer runs once the caller's callback returns, in this pass of
         * the event loop, rather than after one more epoll_wait (an
         * expired timer costs a loop iteration and a system call; the
         * request then reaches the upstream later).  From inside libcurl
         * (depth > 0) a 0 ms timer still goes through the loop, so
         * libcurl asking for "now" again cannot starve the sockets. */
        evtimer_del(loop->timer);
        event_active(loop->timer, EV_TIMEOUT, 0);
        return 0;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    return evtimer_add(loop->timer, &tv) < 0 ? -1 : 0;
}

struct pv_loop *
pv_loop_new(struct event_base *base, char *err, size_t errlen)
{
    struct pv_loop *loop = NULL;
    if (!base) {
        gx_errf(err, errlen, "pv_loop_new: no event base");
        return NULL;
    }
    /* libcurl here is built thread-safe (curl-config --features lists
     * "threadsafe"), so a reference-counted global init per loop is
     * safe even when workers start in parallel. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        gx_errf(err, errlen, "curl_global_init failed");
        return NULL;
    }
    const curl_version_info_data *vi = curl_version_info(CURLVERSION_NOW);
    if (vi && !(vi->features & CURL_VERSION_ASYNCHDNS))
        GX_LOG(GX_LOG_WARN, NULL,
               "libcurl %s resolves names synchronously: DNS lookups will "
               "block the worker's event loop",
               vi->version);
    loop = calloc(1, sizeof(*loop));
    if (!loop)
        goto nomem;
    loop->base = base;
    /* The variables libcurl reads for a proxy to an http or https URL. */
    loop->no_proxy_env = !getenv("http_proxy") && !getenv("https_proxy") &&
                         !getenv("HTTPS_PROXY") && !getenv("all_proxy") &&
                         !getenv("ALL_PROXY");
    loop->multi = curl_multi_init();
    loop->timer = evtimer_new(base, timer_event_cb, loop);
    loop->kick = event_new(base, -1, 0, kick_cb, loop);
    if (!loop->multi || !loop->timer || !loop->kick)
        goto nomem;
    curl_multi_setopt(loop->multi, CURLMOPT_SOCKETFUNCTION, curl_sock_cb);
    curl_multi_setopt(loop->multi, CURLMOPT_SOCKETDATA, loop);
    curl_multi_setopt(loop->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
    curl_multi_setopt(loop->multi, CURLMOPT_TIMERDATA, loop);
    curl_multi_setopt(loop->multi, CURLMOPT_MAXCONNECTS, PV_MAXCONNECTS);
    curl_multi_setopt(loop->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
    return loop;
nomem:
    gx_errf(err, errlen, "pv_loop_new: out of memory");
    if (loop) {
        if (loop->multi)
            curl_multi_cleanup(loop->multi);
        if (loop->timer)
            event_free(loop->timer);
        if (loop->kick)
            event_free(loop->kick);
        free(loop);
    }
    curl_global_cleanup();
    return NULL;
}

void
pv_loop_free(struct pv_loop *loop)
{
    if (!loop)
        return;
    loop->closing = 1;
    while (loop->calls) {
        struct pv_call *c = loop->calls;
        c->cancelled = 1;
        loop_destroy_call(loop, c);
    }
    while (loop->n_easy_pool > 0)
        easy_free(loop->easy_pool[--loop->n_easy_pool]);
    while (loop->spare_calls) {
        struct pv_call *c = loop->spare_calls;
        loop->spare_calls = c->next;
        free(c);
    }
    for (int i = 0; i < PV_SCRUB_CACHE; i++)
        pv_scrub_free(loop->scrubs[i]);
    loop->pending = NULL;
    curl_multi_cleanup(loop->multi);
    while (loop->n_urls > 0) {
        struct pv_url *pu = &loop->urls[--loop->n_urls];
        curl_url_cleanup(pu->u);
        free(pu->url);
    }
    /* Sockets libcurl did not report as removed during cleanup. */
    while (loop->socks)
        sock_free(loop->socks);
    event_free(loop->timer);
    event_free(loop->kick);
    free(loop);
    curl_global_cleanup();
}

size_t
pv_loop_active(const struct pv_loop *loop)
{
    return loop ? loop->n_active : 0;
}

/* ---- the call head ------------------------------------------------------- */

/* The provider's scrubber, shared with recent calls when one still
 * matches its secrets (a reload may bring a new key at the same address:
 * pv_scrub_share compares the bytes); NULL when it has none. */
static struct pv_scrub *
loop_scrub(struct pv_loop *loop, const struct cfg_provider *p)
{
    if (!p)
        return NULL;
    for (int i = 0; i < PV_SCRUB_CACHE; i++) {
        struct pv_scrub *s = pv_scrub_share(loop->scrubs[i], p);
        if (s)
            return s;
    }
    struct pv_scrub *s = pv_scrub_new(p);
    struct pv_scrub *keep = pv_scrub_share(s, p);
    if (keep) {
        int i = loop->next_scrub;
        pv_scrub_free(loop->scrubs[i]);
        loop->scrubs[i] = keep;
        loop->next_scrub = (i + 1) % PV_SCRUB_CACHE;
    }
    return s;
}

struct pv_call *
pv_call_alloc(struct pv_loop *loop, const struct pv_ops *ops,
              const struct pv_request *req, const struct pv_callbacks *cb,
              size_t impl_size)
{
    struct pv_call *c = loop->spare_calls;
    if (c) {
        /* A call head of this loop's (2 KiB): malloc's slow path for
         * blocks this size showed in profiles, a clear does not. */
        loop->spare_calls = c->next;
        loop->n_spare_calls--;
        memset(c, 0, sizeof(*c));
    } else if (!(c = calloc(1, sizeof(*c)))) {
        return NULL;
    }
    if (impl_size) {
        c->impl = calloc(1, impl_size);
        if (!c->impl) {
            free(c);
            return NULL;
        }
    }
    c->ops = ops;
    c->loop = loop;
    if (cb)
        c->cb = *cb;
    const char *id = req && req->request_id ? req->request_id : "-";
    size_t idl = strnlen(id, sizeof(c->request_id) - 1);
    memcpy(c->request_id, id, idl);
    c->request_id[idl] = '\0';
    c->t_start_us = gx_mono_us();
    c->scrub = req ? loop_scrub(loop, req->provider) : NULL;
    c->res.outcome = PV_OK;
    c->res.retry_after_s = -1;
    c->res.ttfb_us = -1;
    c->next = loop->calls;
    if (loop->calls)
        loop->calls->prev = c;
    loop->calls = c;
    loop->n_active++;
    return c;
}

static void
loop_destroy_call(struct pv_loop *loop, struct pv_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (loop->calls == c)
        loop->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    if (!c->finished && !c->cancelled && loop->n_active > 0)
        loop->n_active--;
    if (c->pending) {
        /* Unlink from the pending list (only pv_loop_free gets here with a
         * call still pending). */
        struct pv_call **pp = &loop->pending;
        while (*pp && *pp != c)
            pp = &(*pp)->pend_next;
        if (*pp)
            *pp = c->pend_next;
        c->pending = 0;
    }
    fb_stop(c);
    if (c->ez) {
        if (c->added)
            curl_multi_remove_handle(loop->multi, c->easy);
        if (loop->n_easy_pool < PV_EASY_POOL && !loop->closing) {
            /* Kept with its options (pv_http_start decides whether the
             * next call can use them); the connections live in the
             * multi's cache either way. */
            loop->easy_pool[loop->n_easy_pool++] = c->ez;
        } else {
            easy_free(c->ez);
        }
        c->ez = NULL;
        c->easy = NULL;
    }
    pv_http_headers_free(c->headers);
    pv_scrub_free(c->scrub);
    free(c->req_body);
    if (c->hooks && c->hooks->free_impl)
        c->hooks->free_impl(c);
    free(c->impl);
    if (!loop->closing && loop->n_spare_calls < PV_SPARE_CALLS) {
        c->next = loop->spare_calls;
        loop->spare_calls = c;
        loop->n_spare_calls++;
    } else {
        free(c);
    }
}

void
pv_call_failf(struct pv_call *c, enum pv_outcome o, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = 1;
    c->fail = o;
    c->res.outcome = o;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->res.detail, sizeof(c->res.detail), fmt, ap);
    va_end(ap);
}

int
pv_stream_ct_check(struct pv_call *c, int *checked)
{
    if (*checked)
        return 0;
    *checked = 1;
    if (strncasecmp(c->content_type, "text/event-stream", 17) == 0)
        return 0;
    pv_call_failf(c, PV_ERR_MALFORMED,
                  "malformed stream: content-type \"%.60s\", "
                  "expected text/event-stream",
                  c->content_type);
    return -1;
}

void
pv_call_emit_event(struct pv_call *c, const char *data, size_t len)
{
    if (c->cancelled || c->finished || !c->cb.on_event)
        return;
    /* Every event a kind hands on is masked here, with what the stream's
     * earlier events left unfinished (scrub.c). */
    char *masked = NULL;
    if (c->scrub &&
        pv_scrub_event(c->scrub, &c->carry, data, len, &masked) < 0) {
        pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
        return;
    }
    c->loop->depth++;
    c->cb.on_event(c->cb.ud, masked ? masked : data, len);
    c->loop->depth--;
    free(masked);
}

void
pv_call_complete(struct pv_call *c)
{
    deliver_done(c);
    pv_loop_settle(c->loop);
}

/* ---- public dispatch ------------------------------------------------------ */

enum gx_status
pv_call_start(struct pv_loop *loop, const struct pv_request *req,
              const struct pv_callbacks *cb, struct pv_call **out, char *err,
              size_t errlen)
{
    if (!loop || !req || !req->provider || !req->model ||
        (!req->body && !(req->chat && req->chat->text)) || !cb || !out) {
        gx_errf(err, errlen, "pv_call_start: missing argument");
        return GX_EINVAL;
    }
    const struct pv_ops *ops = pv_ops_for(req->provider->kind);
    if (!ops || !ops->start) {
        gx_errf(err, errlen, "provider %s: kind not supported in this build",
                req->provider->name ? req->provider->name : "?");
        return GX_EINVAL;
    }
    const struct pv_chat *c = req->chat;
    if (c && c->api != PV_API_CHAT && c->native_only[0] &&
        !pv_passthrough(c, req->provider->kind)) {
        /* The client used features only its own API's upstreams have:
         * refused here rather than dropped on the way. */
        char msg[512];
        snprintf(msg, sizeof(msg),
                 "Provider %s (kind %s) cannot take these Anthropic-only "
                 "features: %s. Route the request to an anthropic provider "
                 "or leave them out.",
                 req->provider->name ? req->provider->name : "?",
                 ops->kind, c->native_only);
        return pv_x_refuse(loop, req, cb, msg, out, err, errlen);
    }
    struct pv_request with_tree;
    /* The openai kind splices the client's bytes when it can (req->body
     * NULL after pv_chat_parse's fast path) and asks pv_chat_body itself
     * otherwise; every other kind reads the tree, built here once and
     * kept in the chat for the next attempt. */
    if (!req->body && ops != &pv_openai_ops) {
        with_tree = *req;
        with_tree.body = pv_chat_body(req->chat);
        if (!with_tree.body) {
            gx_errf(err, errlen, "out of memory");
            return GX_ENOMEM;
        }
        req = &with_tree;
    }
    return ops->start(loop, req, cb, out, err, errlen);
}

void
pv_call_cancel(struct pv_call *call)
{
    if (call && call->ops && call->ops->cancel)
        call->ops->cancel(call);
}

void
pv_call_pause(struct pv_call *call)
{
    if (call && call->ops && call->ops->pause)
        call->ops->pause(call);
}

void
pv_call_resume(struct pv_call *call)
{
    if (call && call->ops && call->ops->resume)
        call->ops->resume(call);
}

/* ---- the HTTP transfer ---------------------------------------------------- */

static int
parse_retry_after(const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    if (*v >= '0' && *v <= '9') {
        long s = 0;
        while (*v >= '0' && *v <= '9' && s < 1000000)
            s = s * 10 + (*v++ - '0');
        return (int)s;
    }
    /* HTTP-date form. */
    time_t t = curl_getdate(v, NULL);
    if (t < 0)
        return -1;
    time_t now = time(NULL);
    return t > now ? (int)(t - now) : 0;
}

/* Keeps a header the client should see (rate limits, the upstream's
 * request id) in res.headers, value scrubbed. */
static void
keep_header(struct pv_call *c, const char *name, size_t nl, const char *v,
            size_t vl)
{
    static const char rl[] = "x-ratelimit-";
    int is_rl = nl > sizeof(rl) - 1 && strncasecmp(name, rl, sizeof(rl) - 1) == 0;
    int is_id = (nl == 12 && strncasecmp(name, "x-request-id", 12) == 0) ||
                (nl == 10 && strncasecmp(name, "request-id", 10) == 0);
    if ((!is_rl && !is_id) || nl > 64 || vl > 256)
        return;
    for (size_t i = 0; i < nl; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '-' &&
            name[i] != '_')
            return; /* a name we would pass on must be a plain token */
    for (size_t i = 0; i < vl; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
            return; /* nothing that could split a header line */
    char line[340];
    int n = is_id ? snprintf(line, sizeof(line),
                             "x-llmux-upstream-request-id: %.*s\n", (int)vl,
                             v)
                  : snprintf(line, sizeof(line), "%.*s: %.*s\n", (int)nl,
                             name, (int)vl, v);
    if (n <= 0 || (size_t)n >= sizeof(line))
        return;
    for (size_t i = 0; i < (is_id ? 0 : nl); i++)
        if (line[i] >= 'A' && line[i] <= 'Z')
            line[i] = (char)(line[i] + 32);
    pv_scrub(c->scrub, line, (size_t)n);
    size_t used = strlen(c->res.headers);
    if (used + (size_t)n < sizeof(c->res.headers))
        memcpy(c->res.headers + used, line, (size_t)n + 1);
}

const char *
pv_call_headers(const struct pv_call *c)
{
    return c && c->head_done ? c->res.headers : "";
}

static size_t
http_header_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    struct pv_call *c = ud;
    size_t n = size * nmemb;
    if (c->cancelled)
        return 0;
    if (c->head_done)
        return n; /* trailers */
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        /* A new header block (after a 1xx): forget the previous one. */
        c->content_type[0] = '\0';
        c->res.retry_after_s = -1;
        c->res.headers[0] = '\0';
        return n;
    }
    if (n <= 2 && (n == 0 || p[0] == '\r' || p[0] == '\n')) {
        long code = 0;
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 200) {
            c->head_done = 1;
            c->res.http_status = (int)code;
            if (c->cb.on_head) {
                c->loop->depth++;
                c->cb.on_head(c->cb.ud, (int)code);
                c->loop->depth--;
            }
            if (c->cancelled)
                return 0;
        }
        return n;
    }
    const char *colon = memchr(p, ':', n);
    if (!colon)
        return n;
    size_t name_len = (size_t)(colon - p);
    const char *v = colon + 1;
    size_t vl = n - name_len - 1;
    while (vl > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        vl--;
    }
    while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n' ||
                      v[vl - 1] == ' '))
        vl--;
    if (name_len == 12 && strncasecmp(p, "content-type", 12) == 0) {
        if (vl >= sizeof(c->content_type))
            vl = sizeof(c->content_type) - 1;
        memcpy(c->content_type, v, vl);
        c->content_type[vl] = '\0';
    } else if (name_len == 11 && strncasecmp(p, "retry-after", 11) == 0) {
        char tmp[64];
        if (vl >= sizeof(tmp))
            vl = sizeof(tmp) - 1;
        memcpy(tmp, v, vl);
        tmp[vl] = '\0';
        c->res.retry_after_s = parse_retry_after(tmp);
    } else {
        keep_header(c, p, name_len, v, vl);
    }
    return n;
}

static size_t
http_write_cb(char *p, size_t size, size_t nmemb, void *ud)
{
    struct pv_call *c = ud;
    size_t n = size * nmemb;
    if (c->cancelled || c->finished || c->failed)
        return 0;
    if (c->paused) {
        /* libcurl keeps these bytes and hands them back after
         * curl_easy_pause(CURLPAUSE_CONT). */
        c->recv_paused = 1;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (!c->got_body) {
        c->got_body = 1;
        c->res.ttfb_us = gx_mono_us() - c->t_start_us;
        fb_stop(c);
    }
    if (c->hooks->on_body(c, p, n) != 0)
        return 0;
    if (c->cancelled)
        return 0;
    return n;
}

static int
http_prereq_cb(void *ud, char *primary_ip, char *local_ip, int primary_port,
               int local_port)
{
    (void)primary_ip;
    (void)local_ip;
    (void)primary_port;
    (void)local_port;
    struct pv_call *c = ud;
    c->connected = 1;
    /* libcurl calls this before each send of the request.  A second call
     * for the same transfer is libcurl about to re-send on its own (a
     * reused connection died before any response byte; it does so up to
     * five times, once per dead pooled connection).  The upstream may
     * have read, and billed, the copy already sent: refuse, so the
     * transfer ends as a transport error and llmux's own failover, which
     * counts attempts, decides what happens next. */
    if (c->sends++ > 0) {
        c->resend_refused = 1;
        return CURL_PREREQFUNC_ABORT;
    }
    return CURL_PREREQFUNC_OK;
}

static void
fb_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pv_easy *ez = arg;
    struct pv_call *c = ez->call;
    if (!c || c->got_body || c->finished || c->cancelled)
        return;
    if (c->connected)
        pv_call_failf(c, PV_ERR_FIRST_BYTE_TIMEOUT,
                      "first byte timeout: no response body after %d ms",
                      c->fb_timeout_ms);
    else
        pv_call_failf(c, PV_ERR_CONNECT_TIMEOUT,
                      "connect timeout: not connected after %d ms",
                      c->fb_timeout_ms);
    c->res.outcome = c->fail;
    deliver_done(c);
    pv_loop_settle(c->loop);
}

static int
header_ok(const char *s)
{
    return s && !strpbrk(s, "\r\n");
}

/* A call's request headers are built in one allocation: the nodes (struct
 * curl_slist, libcurl's public list type, which it only reads during the
 * transfer) and their "name: prefix value" lines together, so a call
 * costs one malloc and one free for its headers rather than two of each
 * per header (curl_slist_append copies every line), and no printf.
 * "name:" alone, when prefix and value are empty, tells libcurl to send
 * no such header. */
#define HDR_SMALL 16
struct hdr_line {
    const char *name, *prefix, *value;
};

static int
hdr_add(struct hdr_line *l, size_t *n, size_t cap, const char *name,
        const char *prefix, const char *value)
{
    if (*n >= cap)
        return -1;
    l[*n].name = name;
    l[*n].prefix = prefix;
    l[*n].value = value;
    (*n)++;
    return 0;
}

static struct curl_slist *
hdr_block(const struct hdr_line *l, size_t n)
{
    size_t bytes = n * sizeof(struct curl_slist);
    for (size_t i = 0; i < n; i++)
        bytes += strlen(l[i].name) + 2 + strlen(l[i].prefix) +
                 strlen(l[i].value) + 1;
    struct curl_slist *nodes = malloc(bytes ? bytes : 1);
    if (!nodes)
        return NULL;
    char *p = (char *)(nodes + n);
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(l[i].name), pl = strlen(l[i].prefix),
               vl = strlen(l[i].value);
        nodes[i].data = p;
        nodes[i].next = i + 1 < n ? &nodes[i + 1] : NULL;
        memcpy(p, l[i].name, nl);
        p += nl;
        *p++ = ':';
        if (pl || vl)
            *p++ = ' ';
        memcpy(p, l[i].prefix, pl);
        memcpy(p + pl, l[i].value, vl);
        p += pl + vl;
        *p++ = '\0';
    }
    return nodes;
}

void
pv_http_headers_free(struct curl_slist *h)
{
    free(h);
}

enum gx_status
pv_http_headers(const struct pv_request *req, const char *key_name,
                const char *key_prefix, const char *extra_name,
                const char *extra_value, struct curl_slist **out, char *err,
                size_t errlen)
{
    const struct cfg_provider *prov = req->provider;
    const char *pname = prov->name ? prov->name : "?";
    struct hdr_line small[HDR_SMALL];
    size_t cap = prov->n_headers + 6, n = 0;
    struct hdr_line *l = cap <= HDR_SMALL ? small
                                          : malloc(cap * sizeof(*l));
    *out = NULL;
    if (!l)
        goto nomem;
    if (cap <= HDR_SMALL)
        cap = HDR_SMALL;
    hdr_add(l, &n, cap, "Content-Type", "", "application/json");
    /* A stream asks for SSE; a non-stream call sends no Accept at all
     * ("Accept:" also keeps libcurl's default one out): none means any
     * type, the answer is JSON either way, and libcurl 7.88 prints each
     * header byte through its own printf (~100 instructions a byte, 2.4k
     * a call). */
    hdr_add(l, &n, cap, "Accept", "", req->stream ? "text/event-stream" : "");
    if (prov->api_key && *prov->api_key) {
        if (!header_ok(prov->api_key)) {
            gx_errf(err, errlen, "provider %s: api_key has a line break",
                    pname);
            goto bad;
        }
        hdr_add(l, &n, cap, key_name, key_prefix, prov->api_key);
    }
    int extra_set = 0;
    for (size_t i = 0; i < prov->n_headers; i++) {
        const struct cfg_header *h = &prov->headers[i];
        if (!header_ok(h->name) || !header_ok(h->value) || !*h->name) {
            gx_errf(err, errlen, "provider %s: bad header %zu", pname, i);
            goto bad;
        }
        if (extra_name && !strcasecmp(h->name, extra_name))
            extra_set = 1;
        hdr_add(l, &n, cap, h->name, "", h->value);
    }
    if (extra_name && !extra_set)
        hdr_add(l, &n, cap, extra_name, "", extra_value);
    int beta_set = 0;
    for (size_t i = 0; i < prov->n_headers; i++)
        beta_set |= !strcasecmp(prov->headers[i].name, "anthropic-beta");
    if (req->chat && pv_passthrough(req->chat, prov->kind) &&
        req->chat->anthropic_beta[0] && !beta_set &&
        header_ok(req->chat->anthropic_beta))
        /* The client's betas go with its own body (unless the provider's
         * headers set them). */
        hdr_add(l, &n, cap, "anthropic-beta", "", req->chat->anthropic_beta);
    if (req->request_id && *req->request_id) {
        if (!header_ok(req->request_id)) {
            gx_errf(err, errlen, "request id has a line break");
            goto bad;
        }
        hdr_add(l, &n, cap, "X-Request-Id", "", req->request_id);
    }
    *out = hdr_block(l, n);
    if (l != small)
        free(l);
    if (!*out)
        goto nomem;
    return GX_OK;
nomem:
    gx_errf(err, errlen, "out of memory");
    return GX_ENOMEM;
bad:
    if (l != small)
        free(l);
    return GX_EINVAL;
}

/* url parsed once per loop: libcurl parses CURLOPT_URL again for every
 * transfer (~28k instructions a call, the largest single part of a
 * transfer's setup); given CURLOPT_CURLU it copies a parsed handle
 * instead.  libcurl copies the handle when the transfer starts and never
 * changes it, so one handle serves every call to that URL; the handles
 * live until pv_loop_free (the cache never evicts: URLs come from the
 * configuration, and past PV_URL_CACHE of them NULL sends the caller to
 * CURLOPT_URL).  NULL also when libcurl cannot parse url: CURLOPT_URL
 * then gives the transfer libcurl's own error. */
static CURLU *
url_parsed(struct pv_loop *loop, const char *url)
{
    for (int i = 0; i < loop->n_urls; i++)
        if (!strcmp(loop->urls[i].url, url))
            return loop->urls[i].u;
    if (loop->n_urls >= PV_URL_CACHE)
        return NULL;
    CURLU *u = curl_url();
    char *copy = strdup(url);
    if (!u || !copy || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
        curl_url_cleanup(u);
        free(copy);
        return NULL;
    }
    loop->urls[loop->n_urls].url = copy;
    loop->urls[loop->n_urls].u = u;
    loop->n_urls++;
    return u;
}

static int
str_eq(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

/* A handle for a call: from the pool when one is there (the most recently
 * used first), else a new one.  NULL when out of memory. */
static struct pv_easy *
easy_take(struct pv_loop *loop)
{
    if (loop->n_easy_pool > 0)
        return loop->easy_pool[--loop->n_easy_pool];
    struct pv_easy *ez = calloc(1, sizeof(*ez));
    if (ez && !(ez->easy = curl_easy_init())) {
        free(ez);
        ez = NULL;
    }
    return ez;
}

static void
easy_free(struct pv_easy *ez)
{
    if (!ez)
        return;
    curl_easy_cleanup(ez->easy);
    if (ez->fb)
        event_free(ez->fb);
    free(ez->ca_file);
    free(ez);
}

/* Sets every option that does not change from call to call to the same
 * upstream: after a reset, or on a new handle.  Returns 0, or -1 when out
 * of memory (the handle is then left for a full setup next time). */
static int
easy_setup(struct pv_loop *loop, struct pv_easy *ez, CURLU *pu,
           const char *url, const struct cfg_provider *prov)
{
    CURL *e = ez->easy;
    if (ez->used)
        curl_easy_reset(e); /* set up for another upstream: start over */
    ez->used = 1;
    free(ez->ca_file);
    ez->ca_file = NULL;
    ez->url = NULL;
    if (pu)
        curl_easy_setopt(e, CURLOPT_CURLU, pu);
    else
        curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    if (strncasecmp(url, "https://", 8) == 0) {
        /* A burst of calls to an h2 upstream should share the first
         * connection once ALPN says h2, not open one connection each. */
        curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    }
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, http_header_cb);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, http_write_cb);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, http_prereq_cb);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, opensock_cb);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, loop);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, closesock_cb);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, loop);
    if (loop->no_proxy_env) {
        /* No proxy variable in the environment: say so, and libcurl does
         * not look them up again at each transfer (five getenv calls). */
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_NOPROXY, "");
    }
    if (prov->connect_timeout_ms > 0)
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                         (long)prov->connect_timeout_ms);
    if (prov->timeout_ms > 0)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)prov->timeout_ms);
    if (prov->ca_file) {
        /* The provider's own CA bundle is the whole trust: no CA directory
         * beside it, so a private relay CA cannot be widened by the system
         * store.  Peer and host name checks stay on (libcurl's default);
         * the reset above puts the defaults back for the next upstream. */
        ez->ca_file = strdup(prov->ca_file);
        if (!ez->ca_file)
            return -1;
        curl_easy_setopt(e, CURLOPT_CAINFO, prov->ca_file);
        curl_easy_setopt(e, CURLOPT_CAPATH, (char *)NULL);
    }
    ez->connect_timeout_ms = prov->connect_timeout_ms > 0
                                 ? (long)prov->connect_timeout_ms : 0;
    ez->timeout_ms = prov->timeout_ms > 0 ? (long)prov->timeout_ms : 0;
    ez->url = pu; /* NULL (URL not cached): full setup every time */
    return 0;
}

enum gx_status
pv_http_start(struct pv_call *c, const struct pv_http_hooks *hooks,
              const struct cfg_provider *prov, const char *url,
              struct curl_slist *headers, char *body, size_t body_len,
              char *err, size_t errlen)
{
    struct pv_loop *loop = c->loop;
    c->hooks = hooks;
    c->headers = headers;
    c->req_body = body;
    c->ez = easy_take(loop);
    if (!c->ez)
        goto nomem;
    c->easy = c->ez->easy;
    CURL *e = c->easy;
    struct pv_easy *ez = c->ez;
    CURLU *pu = url_parsed(loop, url);
    long cto = prov->connect_timeout_ms > 0 ? (long)prov->connect_timeout_ms
                                            : 0;
    long to = prov->timeout_ms > 0 ? (long)prov->timeout_ms : 0;
    if (!pu || ez->url != pu || ez->connect_timeout_ms != cto ||
        ez->timeout_ms != to || !str_eq(ez->ca_file, prov->ca_file)) {
        if (easy_setup(loop, ez, pu, url, prov) != 0)
            goto nomem;
    }
    if (body_len > PV_EXPECT_FROM) {
        /* "Expect:": no 100-continue round trip before a large body
         * (libcurl 7.88 asks from 1 MiB, older ones from 1 KiB); a
         * smaller one goes without the header, which libcurl would
         * otherwise compare at every header look-up of the transfer. */
        c->expect.data = (char *)"Expect:"; /* libcurl only reads it */
        c->expect.next = headers;
        headers = &c->expect;
    }
    /* The call's own options. */
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)c);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, c);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    if (prov->first_byte_timeout_ms > 0) {
        c->fb_timeout_ms = prov->first_byte_timeout_ms;
        if (!ez->fb && !(ez->fb = evtimer_new(loop->base, fb_timer_cb, ez)))
            goto nomem;
        ez->call = c;
        c->fb_timer = ez->fb;
        struct timeval tv = {c->fb_timeout_ms / 1000,
                             (c->fb_timeout_ms % 1000) * 1000};
        evtimer_add(c->fb_timer, &tv);
    }
    if (loop->depth > 0 || loop->settling) {
        /* Inside libcurl or a callback: add once the stack unwinds. */
        c->need_add = 1;
        pend(c);
        return GX_OK;
    }
    if (curl_multi_add_handle(loop->multi, e) != CURLM_OK) {
        gx_errf(err, errlen, "could not add the transfer");
        loop_destroy_call(loop, c);
        return GX_EINVAL;
    }
    c->added = 1;
    return GX_OK;
nomem:
    gx_errf(err, errlen, "out of memory");
    loop_destroy_call(loop, c);
    return GX_ENOMEM;
}

void
pv_http_cancel(struct pv_call *c)
{
    if (!c || c->cancelled || c->finished)
        return;
    struct pv_loop *loop = c->loop;
    c->cancelled = 1;
    if (loop->n_active > 0)
        loop->n_active--;
    fb_stop(c);
    if (loop->depth > 0 || loop->settling) {
        c->dead = 1;
        pend(c);
        return;
    }
    loop_destroy_call(loop, c);
}

void
pv_http_pause(struct pv_call *c)
{
    if (!c || c->cancelled || c->finished)
        return;
    c->paused = 1;
}

void
pv_http_resume(struct pv_call *c)
{
    if (!c || c->cancelled || c->finished || !c->paused)
        return;
    c->paused = 0;
    if (!c->recv_paused)
        return; /* libcurl never saw the pause */
    c->recv_paused = 0;
    c->need_resume = 1;
    /* Unpausing makes libcurl hand over held data at once; doing it from
     * the kick event (not here) means no callback of this call runs
     * inside pv_call_resume, so callers need not expect re-entry. */
    pend(c);
}
