/*
 * conn: llmux's inbound HTTP/1.1, on libevent bufferevents (plain sockets,
 * or OpenSSL bufferevents from tls.c) with the nodejs http-parser.
 *
 * Why our own layer: libevent 2.1's evhttp has no connection cap, no hook
 * between the headers and the body (bodies were read whole before the key
 * was checked), no header deadline, lenient framing (two Content-Lengths,
 * "Transfer-Encoding: gzip, chunked", "Content-Length: +36") and its own
 * HTML error pages.  Why http-parser: it is an established, fuzzed parser
 * packaged in Debian (libhttp-parser-dev 2.9.4); llhttp, its successor,
 * is not packaged in Debian 12 and nothing may be vendored here.
 * http-parser does the tokenising; the framing rules are ours (gw_hparse).
 *
 * A connection goes through these states:
 *
 *   IDLE --first byte--> HEAD --headers--> [on_head: key, 404, limits]
 *     ^                   |                  | refused: reply, CLOSING
 *     |                   | deadline:        v
 *     |                   | 408, CLOSING    BODY --whole--> ACTIVE
 *     |                                                       |
 *     +---- reply ended, keep-alive (next pipelined request) -+
 *                               not keep-alive: CLOSING -> (LINGER) -> freed
 *
 * IDLE waits limits.idle_timeout_ms; HEAD ends at limits.header_timeout_ms
 * after its first byte whatever trickles in (slow loris); BODY allows
 * header_timeout_ms between reads.  ACTIVE has no read deadline (the
 * handler's upstream timeouts rule) but writes must progress within
 * GW_WRITE_TIMEOUT_S.  CLOSING flushes the reply; LINGER (plain sockets
 * whose client may still be sending, e.g. a body we refused to read)
 * half-closes and discards input for GW_LINGER_MS so the client reads our
 * answer instead of a reset.
 *
 * Memory: each connection owns one gw_hparse (headers <= 64 KiB, body <=
 * limits.max_body_bytes) and one gw_hreq, reused request after request.
 * While a request is handled, at most GW_IN_HIGH_WATER bytes of what
 * follows are read (in_bound; plus the one read that crossed it, up to
 * 16 KiB); the next pipelined request is parsed only once the reply
 * queued is under GW_OUT_HIGH_WATER.
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "gw_int.h"

/* A Content-Length of more digits than any limit (a number still). */
#define GW_CL_HUGE_MSG                                                       \
    "The request body is over the limit: its Content-Length has more "    \
    "than 18 digits."
#define GW_IN_HIGH_WATER (256 * 1024)
#define GW_OUT_HIGH_WATER (256 * 1024)
#define GW_WRITE_TIMEOUT_S 120
#define GW_LINGER_MS 2000
#define GW_LINGER_MAX_BYTES (16 * 1024 * 1024)
#define GW_ACCEPT_BATCH 64        /* accepts per wake-up */
#define GW_ACCEPT_PAUSE_MS 150    /* EMFILE/ENFILE or at the cap */
#define GW_ACCEPT_LOG_MS 10000    /* one warning per kind per 10 s */
#define GW_SMALL_WRITE 16384      /* linearised into one buffer below */
#define GW_MAX_OUT_HEADERS 48

/* ------------------------------------------------------------------ */
/* gw_hparse: framing without sockets.                                  */

static struct gw_hparse *
hp_of(http_parser *hp)
{
    return hp->data;
}

static int
hp_fail(struct gw_hparse *p, int status, const char *msg)
{
    if (!p->err_status) {
        p->err_status = status;
        snprintf(p->err_msg, sizeof(p->err_msg), "%s", msg);
    }
    return -1;
}

static int
hp_append(struct gw_hparse *p, const char *at, size_t len)
{
    if (gx_buf_append(&p->arena, at, len) != GX_OK)
        return hp_fail(p, 431, "The request headers are too large (limit "
                               "64 KiB).");
    return 0;
}

static int
on_msg_begin(http_parser *hp)
{
    (void)hp;
    return 0;
}

static int
on_url(http_parser *hp, const char *at, size_t len)
{
    struct gw_hparse *p = hp_of(hp);
    p->last_cb = 1;
    return hp_append(p, at, len);
}

/* RFC 9110 tchar.  http-parser's lenient build lets a space into a name
 * ("Content-Length : 5"), which a proxy in front may read otherwise. */
static int
is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

static int
on_hfield(http_parser *hp, const char *at, size_t len)
{
    struct gw_hparse *p = hp_of(hp);
    if (p->head_done)
        return 0; /* a trailer of a chunked body: ignored */
    for (size_t i = 0; i < len; i++)
        if (!is_tchar((unsigned char)at[i]))
            return hp_fail(p, 400, "A request header name holds a "
                                   "character other than a token's.");
    if (p->last_cb != 2) {
        /* A new header: end the url or the previous value. */
        if (hp_append(p, "", 1) != 0)
            return -1;
        if (p->n_hdr >= GW_MAX_HEADERS)
            return hp_fail(p, 431, "Too many request headers (limit 100).");
        p->hdr[p->n_hdr][0] = (uint32_t)p->arena.len;
        p->hdr[p->n_hdr][1] = 0;
        p->n_hdr++;
    }
    p->last_cb = 2;
    return hp_append(p, at, len);
}

static int
on_hvalue(http_parser *hp, const char *at, size_t len)
{
    struct gw_hparse *p = hp_of(hp);
    if (p->head_done)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)at[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return hp_fail(p, 400, "A request header value holds a "
                                   "control character.");
    }
    if (p->last_cb != 3) {
        if (hp_append(p, "", 1) != 0)
            return -1;
        p->hdr[p->n_hdr - 1][1] = (uint32_t)p->arena.len;
    }
    p->last_cb = 3;
    return hp_append(p, at, len);
}

const char *
gw_hparse_url(const struct gw_hparse *p)
{
    return p->arena.data ? p->arena.data : "";
}

const char *
gw_hparse_header(const struct gw_hparse *p, const char *name)
{
    for (size_t i = 0; i < p->n_hdr; i++)
        if (p->hdr[i][1] && !strcasecmp(p->arena.data + p->hdr[i][0], name))
            return p->arena.data + p->hdr[i][1];
    return NULL;
}

/* v without surrounding blanks equals word (case-insensitive). */
static int
trimmed_equal(const char *v, const char *word)
{
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v), w = strlen(word);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    return n == w && !strncasecmp(v, word, w);
}

static int
on_head_complete(http_parser *hp)
{
    struct gw_hparse *p = hp_of(hp);
    if (hp_append(p, "", 1) != 0) /* ends the url or the last value */
        return -1;
    /* A header line without a value (http-parser allows "Name:"); the
     * trailing blanks of values (http-parser keeps them) cut off. */
    for (size_t i = 0; i < p->n_hdr; i++) {
        if (!p->hdr[i][1]) {
            p->hdr[i][1] = (uint32_t)(p->arena.len - 1);
            continue;
        }
        char *v = p->arena.data + p->hdr[i][1];
        size_t n = strlen(v);
        while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
            v[--n] = '\0';
    }
    if (hp->http_major != 1)
        return hp_fail(p, 505, "Only HTTP/1.0 and HTTP/1.1 are served.");
    int n_cl = 0, n_te = 0;
    const char *cl = NULL, *te = NULL;
    for (size_t i = 0; i < p->n_hdr; i++) {
        const char *name = p->arena.data + p->hdr[i][0];
        if (!strcasecmp(name, "Content-Length")) {
            n_cl++;
            cl = p->arena.data + p->hdr[i][1];
        } else if (!strcasecmp(name, "Transfer-Encoding")) {
            n_te++;
            te = p->arena.data + p->hdr[i][1];
        }
    }
    if (n_cl > 1)
        return hp_fail(p, 400, "The request has more than one "
                               "Content-Length header.");
    if (n_te > 1 || (te && !trimmed_equal(te, "chunked")))
        return hp_fail(p, 400, "Transfer-Encoding must be exactly "
                               "'chunked' (given once).");
    if (te && cl)
        return hp_fail(p, 400, "Transfer-Encoding and Content-Length "
                               "together are ambiguous.");
    p->content_length = -1;
    if (cl) {
        const char *s = cl;
        while (*s == ' ' || *s == '\t')
            s++;
        int64_t v = 0;
        int digits = 0, sig = 0; /* sig: digits after the leading zeros */
        for (; *s >= '0' && *s <= '9'; s++) {
            digits++;
            if (sig || *s != '0')
                sig++;
            if (sig <= 18)
                v = v * 10 + (*s - '0');
        }
        while (*s == ' ' || *s == '\t')
            s++;
        if (!digits || *s)
            return hp_fail(p, 400, "Content-Length must be a plain "
                                   "decimal number.");
        if (sig > 18) /* a number, larger than any body limit */
            return hp_fail(p, 413, GW_CL_HUGE_MSG);
        p->content_length = v;
    }
    p->chunked = te != NULL;
    p->keep_alive = http_should_keep_alive(hp) && !hp->upgrade;
    p->head_done = 1;
    p->event = GW_HP_HEAD;
    http_parser_pause(hp, 1);
    return 0;
}

static int
on_body(http_parser *hp, const char *at, size_t len)
{
    struct gw_hparse *p = hp_of(hp);
    if (p->body_max >= 0 && (int64_t)len > p->body_max - p->body_len) {
        char m[200];
        snprintf(m, sizeof(m),
                 "The request body is over the limit of %lld bytes.",
                 (long long)p->body_max);
        return hp_fail(p, 413, m);
    }
    p->body_len += (int64_t)len;
    if (evbuffer_add(p->body, at, len) != 0)
        return hp_fail(p, 500, "Out of memory reading the request body.");
    return 0;
}

static int
on_msg_complete(http_parser *hp)
{
    struct gw_hparse *p = hp_of(hp);
    p->msg_done = 1;
    p->event = GW_HP_DONE;
    http_parser_pause(hp, 1);
    return 0;
}

static const http_parser_settings hp_settings = {
    .on_message_begin = on_msg_begin,
    .on_url = on_url,
    .on_header_field = on_hfield,
    .on_header_value = on_hvalue,
    .on_headers_complete = on_head_complete,
    .on_body = on_body,
    .on_message_complete = on_msg_complete,
};

enum gx_status
gw_hparse_init(struct gw_hparse *p)
{
    memset(p, 0, sizeof(*p));
    /* The url, names and values with their NULs; the byte cap on the
     * whole head is counted in gw_hparse_feed. */
    gx_buf_init(&p->arena, GW_MAX_HEADER_BYTES + 2 * GW_MAX_HEADERS + 2);
    p->body = evbuffer_new();
    if (!p->body)
        return GX_ENOMEM;
    gw_hparse_next(p);
    return GX_OK;
}

void
gw_hparse_cleanup(struct gw_hparse *p)
{
    gx_buf_cleanup(&p->arena);
    if (p->body)
        evbuffer_free(p->body);
    p->body = NULL;
}

void
gw_hparse_next(struct gw_hparse *p)
{
    http_parser_init(&p->hp, HTTP_REQUEST);
    p->hp.data = p;
    gx_buf_reset(&p->arena);
    p->n_hdr = 0;
    p->last_cb = 0;
    p->head_bytes = 0;
    p->head_done = p->msg_done = 0;
    p->content_length = -1;
    p->chunked = 0;
    p->keep_alive = 0;
    p->body_max = -1;
    p->body_len = 0;
    evbuffer_drain(p->body, evbuffer_get_length(p->body));
    p->err_status = 0;
    p->err_msg[0] = '\0';
    p->event = GW_HP_MORE;
}

static void
hp_map_error(struct gw_hparse *p)
{
    enum http_errno e = HTTP_PARSER_ERRNO(&p->hp);
    char m[200];
    switch (e) {
    case HPE_INVALID_METHOD:
        hp_fail(p, 405, "This method is not supported.");
        break;
    case HPE_HEADER_OVERFLOW:
        hp_fail(p, 431, "The request headers are too large (limit 64 KiB).");
        break;
    case HPE_INVALID_CONTENT_LENGTH:
        /* http-parser stops a number at 20 digits (its overflow guard):
         * digits still, just too many: a too-large body. */
        if (p->hp.content_length > (ULLONG_MAX - 10) / 10 &&
            p->hp.content_length != ULLONG_MAX) { /* ULLONG_MAX: none */
            hp_fail(p, 413, GW_CL_HUGE_MSG);
            break;
        }
        /* fall through */
    case HPE_UNEXPECTED_CONTENT_LENGTH:
        hp_fail(p, 400, "Content-Length is malformed, repeated or combined "
                        "with Transfer-Encoding.");
        break;
    case HPE_INVALID_TRANSFER_ENCODING:
        hp_fail(p, 400, "Transfer-Encoding must be exactly 'chunked'.");
        break;
    default:
        snprintf(m, sizeof(m), "Malformed HTTP request: %s.",
                 http_errno_description(e));
        hp_fail(p, 400, m);
        break;
    }
}

enum gw_hp_event
gw_hparse_feed(struct gw_hparse *p, const char *data, size_t len,
               size_t *used)
{
    *used = 0;
    if (p->err_status)
        return GW_HP_ERROR;
    if (p->msg_done)
        return GW_HP_DONE; /* gw_hparse_next first */
    if (HTTP_PARSER_ERRNO(&p->hp) == HPE_PAUSED)
        http_parser_pause(&p->hp, 0);
    p->event = GW_HP_MORE;
    int was_head = p->head_done;
    size_t n = http_parser_execute(&p->hp, &hp_settings, data, len);
    *used = n;
    if (!was_head) {
        p->head_bytes += n;
        if (p->head_bytes > GW_MAX_HEADER_BYTES)
            hp_fail(p, 431, "The request headers are too large (limit "
                            "64 KiB).");
    }
    if (p->err_status)
        return GW_HP_ERROR;
    enum http_errno e = HTTP_PARSER_ERRNO(&p->hp);
    if (e != HPE_OK && e != HPE_PAUSED) {
        hp_map_error(p);
        return GW_HP_ERROR;
    }
    if (p->event != GW_HP_MORE)
        return p->event;
    if (n < len) {
        /* Cannot happen without a pause or an error; be safe. */
        hp_fail(p, 400, "Malformed HTTP request.");
        return GW_HP_ERROR;
    }
    return GW_HP_MORE;
}

/* tests/fuzz/fuzz_conn.c builds only the framing above, without the
 * server it would otherwise pull in. */
#ifndef GW_HPARSE_ONLY

/* ------------------------------------------------------------------ */
/* Connections and requests.                                            */

enum conn_state { C_IDLE, C_HEAD, C_BODY, C_ACTIVE, C_CLOSING, C_LINGER };

struct param {
    struct param *next;
    char *name;  /* as asked */
    char *value; /* decoded, or NULL */
};

struct gw_hreq {
    struct gw_conn *conn;
    enum gw_method method;
    int head;       /* a HEAD request */
    const char *path;
    const char *query;
    char id[GW_REQUEST_ID_MAX + 1];
    /* Output headers: "name\0value\0" pairs. */
    struct gx_buf out;
    size_t n_out;
    int has_id, has_allow;
    int started;    /* reply_start sent */
    int chunked;    /* chunks framed (HTTP/1.1) */
    gw_hreq_cb close_cb, drain_cb;
    void *close_arg, *drain_arg;
    struct param *params;
    char authz[GW_AUTHZ_MAX]; /* gw_hreq_credentials from x-api-key */
    int64_t arrival_ns; /* unix time of its first byte (gw_otel_now_ns) */
};

struct gw_conn {
    struct gw_worker *w;
    struct gw_conn *prev, *next;
    struct bufferevent *bev;
    int fd;
    int tls;
    enum conn_state state;
    struct event *ev_timer;
    int64_t timer_ms; /* timer_want's deadline, set by timer_flush */
    int timer_set;
    int in_held; /* reading stopped: GW_IN_HIGH_WATER bytes wait unparsed */
    struct gw_hparse hp;
    struct gw_hreq req;
    int close_after;  /* close once the current reply is out */
    int unread_input; /* the client may still be sending (linger) */
    int in_process;
    int zombie;       /* connection gone, a handler still holds req */
    int64_t linger_bytes;
    struct gx_buf wbuf; /* one reply head (+ small body) at a time */
    /* Plain sockets write without write interest: what a callback queues
     * is written by ev_flush once that callback returns (all of it in
     * one writev, e.g. every SSE chunk of one upstream read); only when
     * the socket refuses some is EV_WRITE enabled (write_on), until the
     * output is empty again.  TLS bufferevents keep EV_WRITE on. */
    struct event *ev_flush;
    int flush_pending;
    int write_on;
    /* Chunks of a streamed reply queued since the last flush (plain
     * sockets, !write_on): framed as one HTTP chunk by on_flush, so the
     * SSE events of one upstream read cost one frame and no copy. */
    struct evbuffer *chunk;
};

static void conn_process(struct gw_conn *c);
static void conn_free(struct gw_conn *c);
static void arm_timer(struct gw_conn *c, int64_t ms);
static void conn_queued(struct gw_conn *c);
static void chunk_frame(struct gw_conn *c);

static const struct cfg *
conn_cfg(const struct gw_conn *c)
{
    return c->w->gen ? c->w->gen->cfg : c->w->srv->cfg;
}

enum gw_method
gw_hreq_method(const struct gw_hreq *req)
{
    return req->method;
}

int
gw_hreq_is_head(const struct gw_hreq *req)
{
    return req->head;
}

const char *
gw_hreq_method_str(const struct gw_hreq *req)
{
    return http_method_str((enum http_method)req->conn->hp.hp.method);
}

const char *
gw_hreq_path(const struct gw_hreq *req)
{
    return req->path ? req->path : "/";
}

const char *
gw_hreq_query(const struct gw_hreq *req)
{
    return req->query;
}

const char *
gw_hreq_header(const struct gw_hreq *req, const char *name)
{
    return gw_hparse_header(&req->conn->hp, name);
}

const char *
gw_hreq_credentials(struct gw_hreq *req)
{
    const char *a = gw_hreq_header(req, "Authorization");
    if (a && *a)
        return a;
    const char *k = gw_hreq_header(req, "x-api-key");
    if (!k || !*k)
        return a;
    /* Too long to be a key: a value that is refused as malformed (never
     * cut into something that might match). */
    if (strlen(k) + 8 > sizeof(req->authz))
        k = "!";
    snprintf(req->authz, sizeof(req->authz), "Bearer %s", k);
    return req->authz;
}

struct evbuffer *
gw_hreq_body(struct gw_hreq *req)
{
    return req->conn->hp.body;
}

const char *
gw_hreq_id(const struct gw_hreq *req)
{
    return req->id;
}

struct gw_worker *
gw_hreq_worker(const struct gw_hreq *req)
{
    return req->conn->w;
}

int64_t
gw_hreq_arrival_ns(const struct gw_hreq *req)
{
    return req->arrival_ns;
}

static int
hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* %-decodes s[0..n) ('+' = space) into a new string; NULL if malformed or
 * it decodes to a NUL. */
static char *
url_decode(const char *s, size_t n)
{
    char *o = malloc(n + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            o[k++] = ' ';
        } else if (s[i] == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                free(o);
                return NULL;
            }
            o[k++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            o[k++] = s[i];
        }
    }
    o[k] = '\0';
    return o;
}

const char *
gw_hreq_param(struct gw_hreq *req, const char *name)
{
    for (struct param *q = req->params; q; q = q->next)
        if (!strcmp(q->name, name))
            return q->value;
    const char *qs = req->query;
    char *value = NULL;
    size_t nl = strlen(name);
    while (qs && *qs) {
        const char *amp = strchr(qs, '&');
        size_t seg = amp ? (size_t)(amp - qs) : strlen(qs);
        const char *eq = memchr(qs, '=', seg);
        size_t klen = eq ? (size_t)(eq - qs) : seg;
        char *k = url_decode(qs, klen);
        int match = k && strlen(k) == nl && !memcmp(k, name, nl);
        free(k);
        if (match) {
            /* Undecodable: the raw text, which the handler's own check
             * then refuses with a clear error (never silently absent). */
            value = eq ? url_decode(eq + 1, seg - klen - 1) : strdup("");
            if (!value && eq)
                value = strndup(eq + 1, seg - klen - 1);
            break;
        }
        qs = amp ? amp + 1 : NULL;
    }
    struct param *q = calloc(1, sizeof(*q));
    if (!q || !(q->name = strdup(name))) {
        free(q);
        free(value);
        return NULL;
    }
    q->value = value;
    q->next = req->params;
    req->params = q;
    return value;
}

void
gw_hreq_add_header(struct gw_hreq *req, const char *name, const char *value)
{
    if (!name || !value || strpbrk(name, "\r\n:") || strpbrk(value, "\r\n"))
        return; /* no header injection */
    if (req->n_out >= GW_MAX_OUT_HEADERS)
        return;
    if (gx_buf_append(&req->out, name, strlen(name) + 1) != GX_OK ||
        gx_buf_append(&req->out, value, strlen(value) + 1) != GX_OK)
        return;
    req->n_out++;
    if (!strcasecmp(name, "X-Request-Id"))
        req->has_id = 1;
    else if (!strcasecmp(name, "Allow"))
        req->has_allow = 1;
}

size_t
gw_hreq_pending(const struct gw_hreq *req)
{
    const struct gw_conn *c = req->conn;
    if (c->zombie || !c->bev)
        return 0;
    return evbuffer_get_length(bufferevent_get_output(c->bev)) +
           (c->chunk ? evbuffer_get_length(c->chunk) : 0);
}

void
gw_hreq_set_drain_cb(struct gw_hreq *req, gw_hreq_cb cb, void *arg)
{
    req->drain_cb = cb;
    req->drain_arg = arg;
}

void
gw_hreq_set_close_cb(struct gw_hreq *req, gw_hreq_cb cb, void *arg)
{
    req->close_cb = cb;
    req->close_arg = arg;
}

/* ------------------------------------------------------------------ */
/* CORS (DESIGN.md section 5: cors.origins).                            */

int
gw_cors_allowed(const struct cfg *c, const char *origin)
{
    if (!origin || !*origin)
        return 0;
    for (size_t i = 0; i < c->n_cors_origins; i++)
        if (!strcmp(c->cors_origins[i], "*") ||
            !strcasecmp(c->cors_origins[i], origin))
            return 1;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Writing replies.                                                     */

static const char *
http_date(struct gw_worker *w)
{
    time_t now = time(NULL);
    if ((int64_t)now != w->date_s) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(w->date, sizeof(w->date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        w->date_s = (int64_t)now;
    }
    return w->date;
}

static void
wb_str(struct gx_buf *b, const char *s)
{
    (void)gx_buf_append(b, s, strlen(s));
}

/* "name: value\r\n" without printf (a reply's head is built on every
 * request: vsnprintf per line cost ~10k instructions a reply), in one
 * append when it is short (four were ~2k instructions a reply). */
static void
wb_header_n(struct gx_buf *b, const char *name, size_t nl, const char *value,
            size_t vl)
{
    char line[256];
    if (nl + vl + 4 > sizeof(line)) {
        (void)gx_buf_append(b, name, nl);
        (void)gx_buf_append(b, ": ", 2);
        (void)gx_buf_append(b, value, vl);
        (void)gx_buf_append(b, "\r\n", 2);
        return;
    }
    memcpy(line, name, nl);
    line[nl] = ':';
    line[nl + 1] = ' ';
    memcpy(line + nl + 2, value, vl);
    line[nl + 2 + vl] = '\r';
    line[nl + 3 + vl] = '\n';
    (void)gx_buf_append(b, line, nl + vl + 4);
}

static void
wb_header(struct gx_buf *b, const char *name, const char *value)
{
    wb_header_n(b, name, strlen(name), value, strlen(value));
}

static void
wb_int(struct gx_buf *b, unsigned long long v)
{
    char d[24];
    size_t i = sizeof(d);
    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    (void)gx_buf_append(b, d + i, sizeof(d) - i);
}

/* The status line and headers into c->wbuf.  content_length: -1 for a
 * streamed reply. */
static void
build_head(struct gw_conn *c, struct gw_hreq *r, int status,
           int64_t content_length)
{
    struct gx_buf *b = &c->wbuf;
    const struct cfg *cfg = conn_cfg(c);
    int http10 = c->hp.hp.http_minor == 0;
    if (atomic_load(&c->w->stop))
        c->close_after = 1; /* draining: clients reconnect elsewhere */
    if (!c->hp.msg_done)
        c->close_after = 1; /* answered before (all) the body was read */
    if (!c->hp.keep_alive)
        c->close_after = 1; /* HTTP/1.0, or "Connection: close" */
    if (content_length < 0 && http10)
        c->close_after = 1; /* the end of the body is the close */
    gx_buf_reset(b);
    if (status == 200) {
        wb_str(b, "HTTP/1.1 200 OK\r\n");
    } else {
        wb_str(b, "HTTP/1.1 ");
        wb_int(b, (unsigned)status);
        (void)gx_buf_append(b, " ", 1);
        wb_str(b, gw_status_reason(status));
        (void)gx_buf_append(b, "\r\n", 2);
    }
    const char *p = r->out.data;
    for (size_t i = 0; i < r->n_out; i++) {
        size_t nl = strlen(p);
        const char *v = p + nl + 1;
        size_t vl = strlen(v);
        wb_header_n(b, p, nl, v, vl);
        p = v + vl + 1;
    }
    if (!r->has_id && r->id[0])
        wb_header(b, "X-Request-Id", r->id);
    if (status == 405 && !r->has_allow)
        wb_str(b, "Allow: GET, HEAD, POST, DELETE, OPTIONS\r\n");
    if (cfg->n_cors_origins) {
        const char *origin = gw_hparse_header(&c->hp, "Origin");
        if (gw_cors_allowed(cfg, origin)) {
            wb_header(b, "Access-Control-Allow-Origin", origin);
            wb_str(b, "Access-Control-Expose-Headers: X-Request-Id, "
                      "X-Llmux-Route, X-Llmux-Provider, X-Llmux-Model, "
                      "X-Llmux-Attempts, X-Llmux-Cost-Usd, Retry-After\r\n");
        }
        wb_str(b, "Vary: Origin\r\n");
    }
    wb_header(b, "Date", http_date(c->w));
    if (content_length >= 0) {
        if (status != 204 && status != 304 && status >= 200) {
            wb_str(b, "Content-Length: ");
            wb_int(b, (unsigned long long)content_length);
            (void)gx_buf_append(b, "\r\n", 2);
        }
    } else if (!http10) {
        wb_str(b, "Transfer-Encoding: chunked\r\n");
    }
    if (c->close_after)
        wb_str(b, "Connection: close\r\n");
    else if (http10)
        wb_str(b, "Connection: keep-alive\r\n");
    wb_str(b, "\r\n");
}

static void
request_reset(struct gw_hreq *r)
{
    while (r->params) {
        struct param *q = r->params;
        r->params = q->next;
        free(q->name);
        free(q->value);
        free(q);
    }
    gx_buf_reset(&r->out);
    r->n_out = 0;
    r->has_id = r->has_allow = 0;
    r->started = r->chunked = 0;
    r->close_cb = r->drain_cb = NULL;
    r->close_arg = r->drain_arg = NULL;
    r->path = r->query = NULL;
    r->id[0] = '\0';
    r->head = 0;
}

/* The reply is queued: on to the next request or to the close. */
static void
request_done(struct gw_conn *c)
{
    request_reset(&c->req);
    if (c->zombie) {
        conn_free(c);
        return;
    }
    if (c->close_after || !c->hp.keep_alive || !c->hp.msg_done) {
        /* The body was not (wholly) read when the reply was decided, or
         * the client or we asked to close. */
        if (!c->hp.msg_done)
            c->unread_input = 1;
        c->state = C_CLOSING;
        bufferevent_disable(c->bev, EV_READ);
        arm_timer(c, 0);
        return; /* the write callback closes once the reply is out */
    }
    gw_hparse_next(&c->hp);
    c->state = C_IDLE;
    arm_timer(c, conn_cfg(c)->idle_timeout_ms);
    if (!c->in_process)
        conn_process(c);
}

static void
conn_write(struct gw_conn *c, const void *data, size_t len)
{
    if (len) {
        bufferevent_write(c->bev, data, len);
        conn_queued(c);
    }
}

/* Moves b's chains to the output (no copy). */
static void
conn_write_buffer(struct gw_conn *c, struct evbuffer *b)
{
    bufferevent_write_buffer(c->bev, b);
    conn_queued(c);
}

void
gw_hreq_send_body(struct gw_hreq *r, int status, const void *data,
                  size_t len)
{
    struct gw_conn *c = r->conn;
    if (c->zombie || r->started) {
        if (c->zombie)
            request_done(c);
        return;
    }
    build_head(c, r, status, (int64_t)len);
    if (r->head || status == 204 || status == 304)
        len = 0;
    if (len <= GW_SMALL_WRITE &&
        gx_buf_append(&c->wbuf, data, len) == GX_OK) {
        conn_write(c, c->wbuf.data, c->wbuf.len);
    } else {
        conn_write(c, c->wbuf.data, c->wbuf.len);
        conn_write(c, data, len);
    }
    request_done(c);
}

void
gw_hreq_send_reply(struct gw_hreq *r, int status, struct evbuffer *b)
{
    struct gw_conn *c = r->conn;
    size_t len = b ? evbuffer_get_length(b) : 0;
    if (c->zombie || r->started || len > GW_SMALL_WRITE ||
        (len && evbuffer_get_contiguous_space(b) < len)) {
        if (c->zombie || r->started) {
            if (c->zombie)
                request_done(c);
            return;
        }
        build_head(c, r, status, (int64_t)len);
        conn_write(c, c->wbuf.data, c->wbuf.len);
        if (len && !r->head && status != 204 && status != 304)
            conn_write_buffer(c, b); /* moves the chains */
        else if (b)
            evbuffer_drain(b, len);
        request_done(c);
        return;
    }
    gw_hreq_send_body(r, status, len ? evbuffer_pullup(b, -1) : NULL, len);
    if (b)
        evbuffer_drain(b, len);
}

void
gw_hreq_reply_start(struct gw_hreq *r, int status)
{
    struct gw_conn *c = r->conn;
    if (c->zombie || r->started)
        return;
    build_head(c, r, status, -1);
    r->started = 1;
    r->chunked = c->hp.hp.http_minor != 0;
    conn_write(c, c->wbuf.data, c->wbuf.len);
}

/* A chunk's size line ("1a2b\r\n") written at the end of buf without
 * printf (once per flushed chunk); *start is where it begins. */
#define SIZE_LINE_MAX (2 * sizeof(size_t) + 2)
static size_t
size_line(char *buf, size_t len, const char **start)
{
    size_t k = SIZE_LINE_MAX;
    buf[--k] = '\n';
    buf[--k] = '\r';
    do {
        buf[--k] = "0123456789abcdef"[len & 15];
        len >>= 4;
    } while (len);
    *start = buf + k;
    return SIZE_LINE_MAX - k;
}

/* One chunk's frame and data into c->wbuf (small) or the output. */
static void
write_chunk(struct gw_conn *c, struct gw_hreq *r, struct evbuffer *b,
            int last)
{
    size_t len = b ? evbuffer_get_length(b) : 0;
    gx_buf_reset(&c->wbuf);
    if (r->head) {
        if (b)
            evbuffer_drain(b, len);
        len = 0;
    }
    if (len && r->chunked) {
        char hx[SIZE_LINE_MAX];
        const char *h;
        size_t hl = size_line(hx, len, &h);
        (void)gx_buf_append(&c->wbuf, h, hl);
    }
    if (len <= GW_SMALL_WRITE) {
        if (len) {
            size_t at = c->wbuf.len;
            if (gx_buf_append(&c->wbuf, evbuffer_pullup(b, -1), len) !=
                GX_OK)
                c->wbuf.len = at;
            evbuffer_drain(b, len);
        }
    } else {
        conn_write(c, c->wbuf.data, c->wbuf.len);
        gx_buf_reset(&c->wbuf);
        conn_write_buffer(c, b);
    }
    if (len && r->chunked)
        wb_str(&c->wbuf, "\r\n");
    if (last && r->chunked && !r->head)
        wb_str(&c->wbuf, "0\r\n\r\n");
    conn_write(c, c->wbuf.data, c->wbuf.len);
}

void
gw_hreq_reply_chunk(struct gw_hreq *r, struct evbuffer *b)
{
    struct gw_conn *c = r->conn;
    if (c->zombie || !r->started || !b || !evbuffer_get_length(b)) {
        if (b)
            evbuffer_drain(b, evbuffer_get_length(b));
        return;
    }
    if (r->chunked && !r->head && !c->tls && !c->write_on && c->ev_flush) {
        /* Held for on_flush, which frames all of it as one chunk. */
        if (!c->chunk)
            c->chunk = evbuffer_new();
        if (c->chunk && evbuffer_add_buffer(c->chunk, b) == 0) {
            conn_queued(c);
            return;
        }
    }
    write_chunk(c, r, b, 0);
}

void
gw_hreq_reply_chunk_mem(struct gw_hreq *r, const void *p, size_t n)
{
    struct gw_conn *c = r->conn;
    if (c->zombie || !r->started || !n)
        return;
    if (r->chunked && !r->head && !c->tls && !c->write_on && c->ev_flush) {
        /* As gw_hreq_reply_chunk: held for on_flush, one append. */
        if (!c->chunk)
            c->chunk = evbuffer_new();
        if (c->chunk && evbuffer_add(c->chunk, p, n) == 0) {
            conn_queued(c);
            return;
        }
    }
    struct evbuffer *b = evbuffer_new();
    if (b && evbuffer_add(b, p, n) == 0)
        write_chunk(c, r, b, 0);
    if (b)
        evbuffer_free(b);
}

void
gw_hreq_reply_end(struct gw_hreq *r, struct evbuffer *last)
{
    struct gw_conn *c = r->conn;
    if (c->zombie || !r->started) {
        if (last)
            evbuffer_drain(last, evbuffer_get_length(last));
        if (c->zombie)
            request_done(c);
        return;
    }
    chunk_frame(c); /* what reply_chunk held goes first */
    write_chunk(c, r, last, 1);
    request_done(c);
}

/* ------------------------------------------------------------------ */
/* Reading.                                                             */

static void
arm_timer(struct gw_conn *c, int64_t ms)
{
    c->timer_set = 0; /* a deadline set now replaces a deferred one */
    if (!c->ev_timer)
        return;
    if (ms <= 0) {
        event_del(c->ev_timer);
        return;
    }
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(c->ev_timer, &tv);
}

/* conn_process's deadlines: a state change asks for one (timer_want) and
 * the pass sets the last one asked for once (timer_flush), so a request
 * read whole in one pass costs one timer change (off, for the handler)
 * instead of three (the header deadline at the first byte, again at the
 * end of the head, then off). */
static void
timer_want(struct gw_conn *c, int64_t ms)
{
    c->timer_ms = ms;
    c->timer_set = 1;
}

static void
timer_flush(struct gw_conn *c)
{
    if (c->timer_set)
        arm_timer(c, c->timer_ms);
}

/* Our own error before (or instead of) the handler: OpenAI's shape. */
static void
conn_error(struct gw_conn *c, int status, const char *code,
           const char *msg)
{
    struct gw_hreq *r = &c->req;
    if (!r->id[0])
        gw_request_id_make(c->w, NULL, r->id, sizeof(r->id));
    c->close_after = 1;
    r->started = 0;
    gw_reply_error(r, status, "invalid_request_error", code, NULL, "%s",
                   msg);
}

static int
method_of(struct gw_hreq *r, unsigned m)
{
    switch (m) {
    case HTTP_GET:
        return GW_METHOD_GET;
    case HTTP_HEAD:
        r->head = 1;
        return GW_METHOD_GET;
    case HTTP_POST:
        return GW_METHOD_POST;
    case HTTP_DELETE:
        return GW_METHOD_DELETE;
    case HTTP_OPTIONS:
        return GW_METHOD_OPTIONS;
    default:
        return GW_METHOD_OTHER;
    }
}

/* Headers complete: set up the request, ask the server, check limits.
 * Returns 0 to read the body. */
static int
conn_on_head(struct gw_conn *c)
{
    struct gw_hreq *r = &c->req;
    struct gw_hparse *p = &c->hp;
    atomic_fetch_add(&c->w->srv->stats.http_requests, 1);
    r->method = method_of(r, p->hp.method);
    gw_request_id_make(c->w, gw_hparse_header(p, "X-Request-Id"), r->id,
                       sizeof(r->id));
    /* The url: origin-form, or absolute-form (a proxy's) cut to its
     * path; the query split off in place. */
    char *u = p->arena.data;
    if (!strncasecmp(u, "http://", 7) || !strncasecmp(u, "https://", 8)) {
        char *s = strchr(strstr(u, "//") + 2, '/');
        u = s ? s : (char *)"/";
    }
    char *frag = strchr(u, '#');
    if (frag)
        *frag = '\0';
    char *q = strchr(u, '?');
    if (q)
        *q++ = '\0';
    r->path = u;
    r->query = q;
    if (r->method == GW_METHOD_OTHER) {
        conn_error(c, 405, "method_not_allowed",
                   "This method is not supported; use GET, HEAD, POST, "
                   "DELETE or OPTIONS.");
        return -1;
    }
    if (gw_server_on_head(c->w, r) != 0) {
        c->close_after = 1; /* the body, if any, stays unread */
        return -1;
    }
    int64_t max = conn_cfg(c)->max_body_bytes;
    if (p->content_length > max) {
        char m[200];
        snprintf(m, sizeof(m),
                 "The request body is %lld bytes; the limit is %lld.",
                 (long long)p->content_length, (long long)max);
        gw_server_on_refused(c->w, r, 413, "request_too_large");
        conn_error(c, 413, "request_too_large", m);
        return -1;
    }
    p->body_max = max;
    const char *expect = gw_hparse_header(p, "Expect");
    if (expect && (p->content_length > 0 || p->chunked)) {
        if (!trimmed_equal(expect, "100-continue")) {
            conn_error(c, 417, "expectation_failed",
                       "Only 'Expect: 100-continue' is supported.");
            return -1;
        }
        if (p->hp.http_minor >= 1) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            conn_write(c, cont, sizeof(cont) - 1);
        }
    }
    return 0;
}

/* At most GW_IN_HIGH_WATER bytes wait unparsed (plus what the read that
 * crossed it brought, up to libevent's single read of 16 KiB): reading
 * stops there and resumes once parsing took them below.  (libevent's read
 * watermark did this at the price of re-adding the read event at every
 * read and every drain.) */
static void
in_bound(struct gw_conn *c)
{
    if (c->zombie || !c->bev || c->state == C_CLOSING ||
        c->state == C_LINGER)
        return;
    size_t len = evbuffer_get_length(bufferevent_get_input(c->bev));
    if (!c->in_held && len >= GW_IN_HIGH_WATER) {
        c->in_held = 1;
        bufferevent_disable(c->bev, EV_READ);
    } else if (c->in_held && len < GW_IN_HIGH_WATER) {
        c->in_held = 0;
        bufferevent_enable(c->bev, EV_READ);
    }
}

static void
conn_process(struct gw_conn *c)
{
    if (c->in_process || c->zombie)
        return;
    c->in_process = 1;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    while (c->state == C_IDLE || c->state == C_HEAD || c->state == C_BODY) {
        if (c->state == C_IDLE &&
            evbuffer_get_length(out) > GW_OUT_HIGH_WATER)
            break; /* the write callback comes back */
        size_t avail = evbuffer_get_length(in);
        if (avail == 0)
            break;
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        size_t used = 0;
        enum gw_hp_event ev =
            gw_hparse_feed(&c->hp, v.iov_base, v.iov_len, &used);
        evbuffer_drain(in, used);
        if (c->state == C_IDLE && (used || ev != GW_HP_MORE)) {
            /* The header deadline runs from the first byte, whatever
             * trickles in after it. */
            c->state = C_HEAD;
            c->req.arrival_ns = gw_otel_now_ns();
            timer_want(c, conn_cfg(c)->header_timeout_ms);
        }
        if (ev == GW_HP_MORE)
            continue;
        if (ev == GW_HP_ERROR) {
            timer_flush(c);
            int st = c->hp.err_status;
            if (st == 413 && c->state == C_BODY) /* a chunked body */
                gw_server_on_refused(c->w, &c->req, st, "request_too_large");
            conn_error(c, st,
                       st == 413   ? "request_too_large"
                       : st == 431 ? "headers_too_large"
                       : st == 405 ? "method_not_allowed"
                       : st == 500 ? "internal_error"
                                   : "invalid_request",
                       c->hp.err_msg);
            break;
        }
        if (ev == GW_HP_HEAD) {
            if (conn_on_head(c) != 0)
                break; /* replied */
            c->state = C_BODY;
            timer_want(c, conn_cfg(c)->header_timeout_ms);
            continue;
        }
        /* GW_HP_DONE: the whole request; no read deadline while it is
         * handled. */
        c->state = C_ACTIVE;
        timer_want(c, 0);
        timer_flush(c);
        gw_server_on_request(c->w, &c->req);
        /* A synchronous reply has set the state already. */
    }
    if (c->state == C_BODY)
        timer_want(c, conn_cfg(c)->header_timeout_ms); /* between reads */
    timer_flush(c);
    in_bound(c);
    c->in_process = 0;
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct gw_conn *c = arg;
    if (c->state == C_LINGER) {
        struct evbuffer *in = bufferevent_get_input(bev);
        c->linger_bytes += (int64_t)evbuffer_get_length(in);
        evbuffer_drain(in, evbuffer_get_length(in));
        if (c->linger_bytes > GW_LINGER_MAX_BYTES)
            conn_free(c);
        return;
    }
    conn_process(c);
}

static void
on_write(struct bufferevent *bev, void *arg)
{
    struct gw_conn *c = arg;
    if (evbuffer_get_length(bufferevent_get_output(bev)) != 0)
        return;
    if (c->write_on) {
        /* Drained: back to writing from ev_flush (libevent deletes the
         * write event itself when the output empties; this keeps it
         * from being added again with the next reply). */
        c->write_on = 0;
        bufferevent_disable(bev, EV_WRITE);
    }
    switch (c->state) {
    case C_CLOSING:
        if (!c->tls && c->unread_input) {
            /* Half-close, then discard what the client still sends for
             * a moment, so our reply is read, not lost to a reset. */
            shutdown(c->fd, SHUT_WR);
            c->state = C_LINGER;
            c->in_held = 0;
            bufferevent_enable(bev, EV_READ);
            arm_timer(c, GW_LINGER_MS);
            return;
        }
        conn_free(c);
        return;
    case C_ACTIVE:
        if (c->req.drain_cb)
            c->req.drain_cb(&c->req, c->req.drain_arg);
        return;
    case C_IDLE:
        conn_process(c); /* pipelined requests waited for the output */
        return;
    default:
        return;
    }
}

/* Moves the held chunk data to the output as one HTTP chunk (size line,
 * the data's chains without a copy, CRLF). */
static void
chunk_frame(struct gw_conn *c)
{
    size_t len = c->chunk ? evbuffer_get_length(c->chunk) : 0;
    if (!len || !c->bev)
        return;
    char hx[SIZE_LINE_MAX];
    const char *h;
    size_t hl = size_line(hx, len, &h);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add(out, h, hl);
    evbuffer_add_buffer(out, c->chunk);
    evbuffer_add(out, "\r\n", 2);
}

/* Something was queued on c's output: make sure it is written. */
static void
conn_queued(struct gw_conn *c)
{
    if (c->tls || c->write_on || c->flush_pending || !c->ev_flush)
        return;
    c->flush_pending = 1;
    event_active(c->ev_flush, EV_TIMEOUT, 1);
}

static void on_event(struct bufferevent *bev, short what, void *arg);

/* ev_flush: the callback that queued output has returned; write what it
 * queued straight to the socket.  What the socket does not take waits
 * for EV_WRITE (and the bufferevent's write timeout). */
static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_conn *c = arg;
    c->flush_pending = 0;
    if (c->write_on || !c->bev)
        return;
    chunk_frame(c);
    struct evbuffer *out = bufferevent_get_output(c->bev);
    while (evbuffer_get_length(out) > 0) {
        /* A socket bufferevent keeps its output's start frozen so only
         * it drains it; here we are the writer. */
        evbuffer_unfreeze(out, 1);
        int n = evbuffer_write(out, c->fd);
        int e = EVUTIL_SOCKET_ERROR();
        evbuffer_freeze(out, 1);
        if (n > 0)
            continue;
        if (n < 0 && (e == EAGAIN || e == EWOULDBLOCK || e == EINTR)) {
            c->write_on = 1;
            bufferevent_enable(c->bev, EV_WRITE);
            return;
        }
        /* The client is gone (EPIPE, ECONNRESET): as libevent says it. */
        on_event(c->bev, BEV_EVENT_WRITING | BEV_EVENT_ERROR, c);
        return;
    }
    on_write(c->bev, c); /* all out: what a drained output does next */
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    struct gw_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED)
        return; /* the TLS handshake is done */
    if ((what & BEV_EVENT_EOF) && c->state != C_ACTIVE &&
        evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
        /* The client half-closed: what we queued still goes out. */
        c->state = C_CLOSING;
        c->unread_input = 0;
        bufferevent_disable(bev, EV_READ);
        return;
    }
    if (what & BEV_EVENT_ERROR)
        GX_LOG(GX_LOG_DEBUG, c->req.id[0] ? c->req.id : NULL,
               "client connection error: %s",
               evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    conn_free(c);
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_conn *c = arg;
    switch (c->state) {
    case C_HEAD:
    case C_BODY: {
        int head = c->state == C_HEAD;
        GX_LOG(GX_LOG_INFO, NULL,
               "client too slow sending its request (%s); closing",
               head ? "headers past the deadline" : "body stalled");
        bufferevent_disable(c->bev, EV_READ);
        c->state = C_ACTIVE; /* answered as a request, then closed */
        conn_error(c, 408, "request_timeout",
                   head ? "The request headers did not arrive in time."
                        : "The request body stalled.");
        c->unread_input = 0; /* a slow client gets no linger */
        return;
    }
    case C_IDLE:
    case C_LINGER:
    case C_CLOSING:
        conn_free(c);
        return;
    case C_ACTIVE:
        return;
    }
}

/* ------------------------------------------------------------------ */
/* Connection lifetime.                                                 */

static void accept_resume(struct gw_worker *w);

static void
conn_free(struct gw_conn *c)
{
    struct gw_worker *w = c->w;
    if (!c->zombie) {
        if (c->state == C_ACTIVE) {
            /* The client left while a handler holds the request. */
            c->zombie = 1;
            if (c->req.close_cb) {
                gw_hreq_cb cb = c->req.close_cb;
                c->req.close_cb = NULL;
                cb(&c->req, c->req.close_arg);
                c->zombie = 2; /* the handler dropped it */
            }
        }
        if (c->prev)
            c->prev->next = c->next;
        else
            w->conns = c->next;
        if (c->next)
            c->next->prev = c->prev;
        c->prev = c->next = NULL;
        if (c->ev_timer)
            event_free(c->ev_timer);
        c->ev_timer = NULL;
        if (c->ev_flush)
            event_free(c->ev_flush);
        c->ev_flush = NULL;
        if (c->bev)
            bufferevent_free(c->bev); /* closes the socket (and the SSL) */
        c->bev = NULL;
        atomic_fetch_sub(&w->srv->stats.conns_open, 1);
        if (w->accept_paused == 1)
            accept_resume(w); /* paused at the cap: a slot is free */
        if (c->zombie == 1)
            return; /* freed when the handler replies (request_done) */
    }
    request_reset(&c->req);
    if (c->chunk)
        evbuffer_free(c->chunk);
    gx_buf_cleanup(&c->req.out);
    gx_buf_cleanup(&c->wbuf);
    gw_hparse_cleanup(&c->hp);
    free(c);
}

/* fd holds a slot of srv->stats.conns_open, given back on failure. */
static void
conn_new(struct gw_worker *w, int fd)
{
    struct gw_conn *c = calloc(1, sizeof(*c));
    if (!c || gw_hparse_init(&c->hp) != GX_OK) {
        if (c)
            gw_hparse_cleanup(&c->hp);
        free(c);
        close(fd);
        atomic_fetch_sub(&w->srv->stats.conns_open, 1);
        return;
    }
    c->w = w;
    c->fd = fd;
    c->req.conn = c;
    gx_buf_init(&c->req.out, 64 * 1024);
    gx_buf_init(&c->wbuf, 0);
    if (w->tls_ctx) {
        c->bev = gw_tls_bev(w->base, fd, w->tls_ctx);
        c->tls = 1;
    } else {
        c->bev = bufferevent_socket_new(w->base, fd, BEV_OPT_CLOSE_ON_FREE);
    }
    c->ev_timer = evtimer_new(w->base, on_timer, c);
    if (!c->tls)
        c->ev_flush = event_new(w->base, -1, 0, on_flush, c);
    if (!c->bev || !c->ev_timer || (!c->tls && !c->ev_flush)) {
        if (c->ev_flush)
            event_free(c->ev_flush);
        if (c->ev_timer)
            event_free(c->ev_timer);
        if (c->bev)
            bufferevent_free(c->bev);
        else
            close(fd);
        gx_buf_cleanup(&c->req.out);
        gw_hparse_cleanup(&c->hp);
        free(c);
        atomic_fetch_sub(&w->srv->stats.conns_open, 1);
        return;
    }
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    c->state = C_IDLE;
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    struct timeval wt = {GW_WRITE_TIMEOUT_S, 0};
    bufferevent_set_timeouts(c->bev, NULL, &wt);
    /* Plain sockets: EV_WRITE only while the socket refuses output
     * (on_flush). */
    if (c->tls) {
        bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    } else {
        bufferevent_enable(c->bev, EV_READ);
        bufferevent_disable(c->bev, EV_WRITE); /* on by default */
    }
    /* A fresh connection gets the header deadline from its first byte
     * on; until then the idle timeout applies (no request yet). */
    arm_timer(c, conn_cfg(c)->header_timeout_ms);
}

void
gw_conns_free_all(struct gw_worker *w)
{
    while (w->conns)
        conn_free(w->conns);
}

/* ------------------------------------------------------------------ */
/* The listener.                                                        */

/* Rate-limited warning: kind 0 = cap, 1 = accept error. */
static void
accept_warn(struct gw_worker *w, int kind, const char *what)
{
    int64_t now = gx_now_ms();
    atomic_fetch_add(&w->srv->stats.conns_refused, 1);
    if (now < w->log_next_ms[kind]) {
        w->log_suppressed[kind]++;
        return;
    }
    GX_LOG(GX_LOG_WARN, NULL,
           "worker %d: %s; accepting paused %d ms at a time (%ld more "
           "such events in the last %d s)",
           w->index, what, GW_ACCEPT_PAUSE_MS, w->log_suppressed[kind],
           GW_ACCEPT_LOG_MS / 1000);
    w->log_suppressed[kind] = 0;
    w->log_next_ms[kind] = now + GW_ACCEPT_LOG_MS;
}

/* kind 1: at the connection cap (resumed early when one closes);
 * kind 2: accept failed (EMFILE, ...). */
static void
accept_pause(struct gw_worker *w, int kind)
{
    if (w->accept_paused || !w->ev_accept)
        return;
    event_del(w->ev_accept);
    w->accept_paused = kind;
    struct timeval tv = {0, GW_ACCEPT_PAUSE_MS * 1000};
    evtimer_add(w->ev_accept_resume, &tv);
}

static void
accept_resume(struct gw_worker *w)
{
    if (!w->accept_paused)
        return;
    w->accept_paused = 0;
    event_del(w->ev_accept_resume);
    if (w->ev_accept && w->listen_fd >= 0)
        event_add(w->ev_accept, NULL);
}

static void
on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    accept_resume(arg);
}

static void
on_accept(evutil_socket_t lfd, short what, void *arg)
{
    (void)what;
    struct gw_worker *w = arg;
    for (int i = 0; i < GW_ACCEPT_BATCH && w->listen_fd >= 0; i++) {
        const struct cfg *cfg = w->gen ? w->gen->cfg : w->srv->cfg;
        long long cap = cfg->max_connections;
        /* Reserve a slot first: the cap holds across workers exactly. */
        if (atomic_fetch_add(&w->srv->stats.conns_open, 1) >= cap) {
            atomic_fetch_sub(&w->srv->stats.conns_open, 1);
            char m[128];
            snprintf(m, sizeof(m),
                     "limits.max_connections (%lld) reached", cap);
            accept_warn(w, 0, m);
            accept_pause(w, 1);
            return;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            atomic_fetch_sub(&w->srv->stats.conns_open, 1);
            if (e == EAGAIN || e == EWOULDBLOCK)
                return;
            if (e == EINTR || e == ECONNABORTED || e == EPROTO)
                continue;
            char m[200];
            snprintf(m, sizeof(m), "accept failed: %s%s", strerror(e),
                     e == EMFILE || e == ENFILE
                         ? " (out of file descriptors: raise ulimit -n or "
                           "lower limits.max_connections)"
                         : "");
            accept_warn(w, 1, m);
            accept_pause(w, 2);
            return;
        }
        int one = 1;
        /* Streamed chunks must leave as they come, not wait for the
         * client's delayed ACK (Nagle). */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conn_new(w, fd);
    }
}

enum gx_status
gw_listen_start(struct gw_worker *w, int fd, char *err, size_t errlen)
{
    w->listen_fd = fd;
    w->ev_accept = event_new(w->base, fd, EV_READ | EV_PERSIST, on_accept, w);
    w->ev_accept_resume = evtimer_new(w->base, on_accept_resume, w);
    if (!w->ev_accept || !w->ev_accept_resume ||
        event_add(w->ev_accept, NULL) != 0) {
        gx_errf(err, errlen, "worker %d cannot accept on the socket",
                w->index);
        return GX_ENOMEM;
    }
    return GX_OK;
}

void
gw_listen_stop(struct gw_worker *w)
{
    if (w->ev_accept)
        event_free(w->ev_accept);
    if (w->ev_accept_resume)
        event_free(w->ev_accept_resume);
    w->ev_accept = w->ev_accept_resume = NULL;
    w->accept_paused = 0;
    if (w->listen_fd >= 0)
        close(w->listen_fd);
    w->listen_fd = -1;
}

#endif /* GW_HPARSE_ONLY */
