/*
 * The inbound connection layer end to end (issue 9, "the listener" and
 * the client-facing HTTP items): the real llmux binary and the fake
 * provider, raw sockets on 127.0.0.1, every wait bounded.
 *
 *   request ids on llmux's own errors, 64-character client ids kept
 *   CORS preflight and headers, HEAD, unknown methods
 *   401 and 413 decided from the headers, before any body byte; each
 *   413 (header time or a chunked body) counted in /metrics and given an
 *   access line like the handlers' refusals
 *   strict framing (smuggling shapes) -> 400 and close
 *   chunked bodies, pipelining, header deadline, idle timeout
 *   TCP_NODELAY on accepted sockets (read back from llmux's own socket
 *   with pidfd_getfd) and the stream end in one segment, 20 streams on
 *   one kept-alive connection
 *   unauthenticated bodies do not grow RSS
 *   more connections than limits.max_connections; out of descriptors
 *   (RLIMIT_NOFILE) - both with llmux's CPU time and log size bounded and
 *   /health served once the connections are gone
 *
 * No timing asserts: timings are printed, assertions are about bytes,
 * states and bounded counters.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "harness.h"
#include "lib/e2e.h"

#define ADMIN "adm-0123456789abcdef0123456789abcdef"
#define ORIGIN "https://app.example"

static struct e2e_proc fake, gw;

static long long
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- raw HTTP client ---------------------------------------------------- */

static int
tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int
send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

static char key[128]; /* a key made through the admin API at start */

/* Sends s with every "@KEY@" replaced by the key. */
static int
send_str(int fd, const char *s)
{
    static char out[8192];
    size_t n = 0;
    while (*s && n + sizeof(key) < sizeof(out)) {
        if (!strncmp(s, "@KEY@", 5)) {
            n += (size_t)snprintf(out + n, sizeof(out) - n, "%s", key);
            s += 5;
        } else {
            out[n++] = *s++;
        }
    }
    if (*s)
        return send_all(fd, out, n) || send_all(fd, s, strlen(s));
    return send_all(fd, out, n);
}

struct rbuf {
    char d[1 << 20];
    size_t len;
};

/* Reads more into rb within timeout_ms: bytes read, 0 EOF, -1 error or
 * timeout. */
static ssize_t
rb_fill(int fd, struct rbuf *rb, int timeout_ms)
{
    if (rb->len >= sizeof(rb->d) - 1)
        return -1;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0)
        return -1;
    ssize_t n = recv(fd, rb->d + rb->len, sizeof(rb->d) - 1 - rb->len, 0);
    if (n > 0) {
        rb->len += (size_t)n;
        rb->d[rb->len] = '\0';
    }
    return n;
}

struct hresp {
    int status;
    char head[16384];
    char body[65536];
    size_t body_len;
};

/* Case-insensitive header value from a response head, or NULL. */
static const char *
hdr(const struct hresp *r, const char *name, char *buf, size_t len)
{
    size_t n = strlen(name);
    for (const char *p = strstr(r->head, "\r\n"); p; p = strstr(p, "\r\n")) {
        p += 2;
        if (!strncasecmp(p, name, n) && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            size_t k = strcspn(v, "\r\n");
            if (k >= len)
                k = len - 1;
            memcpy(buf, v, k);
            buf[k] = '\0';
            return buf;
        }
    }
    return NULL;
}

static void
rb_consume(struct rbuf *rb, size_t n)
{
    memmove(rb->d, rb->d + n, rb->len - n);
    rb->len -= n;
    rb->d[rb->len] = '\0';
}

/* One response from fd (bytes already in rb first).  no_body: a reply to
 * HEAD.  Returns 0, or -1 (closed, timeout, malformed). */
static int
read_resp(int fd, struct rbuf *rb, struct hresp *r, int no_body,
          int timeout_ms)
{
    memset(r, 0, sizeof(*r));
    long long end = mono_ms() + timeout_ms;
    char *eoh;
    while (!(eoh = strstr(rb->d, "\r\n\r\n"))) {
        if (mono_ms() >= end || rb_fill(fd, rb, (int)(end - mono_ms())) <= 0)
            return -1;
    }
    size_t hl = (size_t)(eoh - rb->d) + 4;
    if (hl >= sizeof(r->head))
        return -1;
    memcpy(r->head, rb->d, hl);
    r->head[hl] = '\0';
    rb_consume(rb, hl);
    if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1)
        return -1;
    if (r->status == 100)
        return read_resp(fd, rb, r, no_body, timeout_ms);
    char v[64];
    if (no_body || r->status == 204)
        return 0;
    if (hdr(r, "Content-Length", v, sizeof(v))) {
        size_t cl = strtoul(v, NULL, 10);
        if (cl >= sizeof(r->body))
            return -1;
        while (rb->len < cl)
            if (mono_ms() >= end ||
                rb_fill(fd, rb, (int)(end - mono_ms())) <= 0)
                return -1;
        memcpy(r->body, rb->d, cl);
        r->body_len = cl;
        rb_consume(rb, cl);
        return 0;
    }
    if (hdr(r, "Transfer-Encoding", v, sizeof(v))) {
        for (;;) {
            char *le;
            while (!(le = strstr(rb->d, "\r\n")))
                if (mono_ms() >= end ||
                    rb_fill(fd, rb, (int)(end - mono_ms())) <= 0)
                    return -1;
            size_t sz = strtoul(rb->d, NULL, 16);
            size_t need = (size_t)(le - rb->d) + 2 + sz + 2;
            while (rb->len < need)
                if (mono_ms() >= end ||
                    rb_fill(fd, rb, (int)(end - mono_ms())) <= 0)
                    return -1;
            if (r->body_len + sz < sizeof(r->body)) {
                memcpy(r->body + r->body_len, le + 2, sz);
                r->body_len += sz;
            }
            rb_consume(rb, need);
            if (sz == 0)
                return 0;
        }
    }
    return 0;
}

/* 1 if the peer closes (EOF or reset) within timeout_ms; bytes that
 * still arrive are counted in *extra. */
static int
closed_within(int fd, int timeout_ms, size_t *extra)
{
    long long end = mono_ms() + timeout_ms;
    char b[4096];
    while (mono_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(end - mono_ms())) <= 0)
            return 0;
        ssize_t n = recv(fd, b, sizeof(b), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 1;
        if (n < 0)
            return 0;
        if (extra)
            *extra += (size_t)n;
    }
    return 0;
}

/* The read buffer of the connection a test holds (one at a time). */
static struct rbuf rbg;

/* A new connection to llmux (checked), with rbg emptied. */
static int
fresh(void)
{
    int fd = tcp_connect(gw.port);
    T_CHECK(fd >= 0);
    rbg.len = 0;
    rbg.d[0] = '\0';
    return fd;
}

/* One request on a new connection; the response in r. */
static int
exchange(const char *raw, struct hresp *r, int no_body)
{
    int fd = tcp_connect(gw.port);
    if (fd < 0)
        return -1;
    static struct rbuf rb;
    rb.len = 0;
    rb.d[0] = '\0';
    int rc = send_str(fd, raw) == 0 ? read_resp(fd, &rb, r, no_body, 10000)
                                    : -1;
    close(fd);
    return rc;
}

static const char *
chat_body(void)
{
    return "{\"model\":\"gpt-4.1\",\"messages\":[{\"role\":\"user\","
           "\"content\":\"hi\"}]}";
}

/* llmux_requests_total for requests refused with 413 before routing
 * (-1 if /metrics cannot be read). */
static long long
refused_413(void)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", gw.port);
    const char *h[] = {"Authorization: Bearer " ADMIN, NULL};
    struct e2e_resp r;
    long long v = -1;
    if (e2e_http("GET", url, NULL, h, 10000, &r) == 0 && r.status == 200 &&
        r.body) {
        const char *want = "\nllmux_requests_total{route=\"\",provider="
                           "\"\",model=\"\",status=\"413\"} ";
        const char *p = strstr(r.body, want);
        v = p ? atoll(p + strlen(want)) : 0;
    }
    e2e_resp_free(&r);
    return v;
}

/* Access lines of 413 refusals so far. */
static int
refused_413_lines(void)
{
    return e2e_log_count(&gw, "\"status\":413,\"attempts\":0,");
}

/* ---- tests --------------------------------------------------------------- */

static void
test_request_ids(void)
{
    struct hresp r;
    char v[128], raw[2048];
    /* 404, 405, 401, 413 and 400 made by llmux itself. */
    const char *cases[] = {
        "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n",
        "PUT /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        "Content-Length: 2\r\n\r\n{}",
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
        "Bearer @KEY@\r\nContent-Length: 99999999\r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
        "Bearer @KEY@\r\nContent-Length: 3\r\n\r\n{x}",
        "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc",
        /* More digits than any limit: too large, not malformed. */
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
        "Bearer @KEY@\r\nContent-Length: 1000000000000000000\r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
        "Bearer @KEY@\r\nContent-Length: 123456789012345678901234567890"
        "\r\n\r\n",
    };
    const int want[] = {404, 405, 401, 413, 400, 400, 413, 413};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        T_EQ_INT(exchange(cases[i], &r, 0), 0);
        T_EQ_INT(r.status, want[i]);
        T_CHECK(hdr(&r, "X-Request-Id", v, sizeof(v)) && strlen(v) > 4);
        T_CHECK(strstr(r.body, "\"error\"") && strstr(r.body, "\"message\""));
        T_CHECK(!strstr(r.body, "<html") && !strstr(r.body, "<HTML"));
        if (want[i] == 413)
            T_CHECK(strstr(r.body, "\"request_too_large\"") != NULL);
    }
    /* 431 (headers over 64 KiB) and 505 (not HTTP/1.x), same shape. */
    static char big[80 * 1024];
    int k = snprintf(big, sizeof(big), "GET /health HTTP/1.1\r\nX-Big: ");
    memset(big + k, 'b', 70 * 1024);
    snprintf(big + k + 70 * 1024, sizeof(big) - (size_t)k - 70 * 1024,
             "\r\n\r\n");
    T_EQ_INT(exchange(big, &r, 0), 0);
    T_EQ_INT(r.status, 431);
    T_CHECK(hdr(&r, "X-Request-Id", v, sizeof(v)) != NULL);
    T_CHECK(strstr(r.body, "\"error\"") != NULL);
    T_EQ_INT(exchange("GET /health HTTP/2.0\r\nHost: x\r\n\r\n", &r, 0), 0);
    T_EQ_INT(r.status, 505);
    T_CHECK(hdr(&r, "X-Request-Id", v, sizeof(v)) != NULL);
    /* A client id of 64 characters comes back exactly; 65 is replaced. */
    char id64[65], id65[66];
    for (int i = 0; i < 64; i++)
        id64[i] = "abcdefghijklmnopqrstuvwxyz0123456789-_."[i % 39];
    id64[64] = '\0';
    snprintf(id65, sizeof(id65), "%sZ", id64);
    snprintf(raw, sizeof(raw),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
             "Authorization: Bearer @KEY@\r\nX-Request-Id: %s\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             id64, strlen(chat_body()), chat_body());
    T_EQ_INT(exchange(raw, &r, 0), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "X-Request-Id", v, sizeof(v)), id64);
    snprintf(raw, sizeof(raw),
             "GET /nope HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\n\r\n",
             id64);
    T_EQ_INT(exchange(raw, &r, 0), 0);
    T_EQ_STR(hdr(&r, "X-Request-Id", v, sizeof(v)), id64);
    snprintf(raw, sizeof(raw),
             "GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\n\r\n",
             id65);
    T_EQ_INT(exchange(raw, &r, 0), 0);
    T_CHECK(hdr(&r, "X-Request-Id", v, sizeof(v)) && strcmp(v, id65) &&
            !strncmp(v, "req_", 4));
}

static void
test_cors(void)
{
    struct hresp r;
    char v[512];
    T_EQ_INT(exchange("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      "Origin: " ORIGIN "\r\n"
                      "Access-Control-Request-Method: POST\r\n"
                      "Access-Control-Request-Headers: authorization, "
                      "content-type, x-stainless-os\r\n\r\n",
                      &r, 0),
             0);
    T_EQ_INT(r.status, 204);
    T_EQ_STR(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)), ORIGIN);
    T_CHECK(hdr(&r, "Access-Control-Allow-Methods", v, sizeof(v)) &&
            strstr(v, "POST"));
    T_CHECK(hdr(&r, "Access-Control-Allow-Headers", v, sizeof(v)) &&
            strstr(v, "authorization") && strstr(v, "x-stainless-os"));
    T_CHECK(hdr(&r, "Access-Control-Max-Age", v, sizeof(v)) != NULL);
    T_CHECK(hdr(&r, "X-Request-Id", v, sizeof(v)) != NULL);
    /* Another origin: refused in the OpenAI shape, no CORS grant. */
    T_EQ_INT(exchange("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      "Origin: https://evil.example\r\n"
                      "Access-Control-Request-Method: POST\r\n\r\n",
                      &r, 0),
             0);
    T_EQ_INT(r.status, 403);
    T_CHECK(!hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)));
    T_CHECK(strstr(r.body, "cors_origin_not_allowed") != NULL);
    /* An actual request from the allowed origin, and one from another. */
    char raw[2048];
    snprintf(raw, sizeof(raw),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: " ORIGIN
             "\r\nAuthorization: Bearer @KEY@\r\nContent-Length: %zu"
             "\r\n\r\n%s",
             strlen(chat_body()), chat_body());
    T_EQ_INT(exchange(raw, &r, 0), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)), ORIGIN);
    T_CHECK(hdr(&r, "Vary", v, sizeof(v)) && strstr(v, "Origin"));
    T_CHECK(hdr(&r, "Access-Control-Expose-Headers", v, sizeof(v)) &&
            strcasestr(v, "x-request-id"));
    T_EQ_INT(exchange("GET /health HTTP/1.1\r\nHost: x\r\n"
                      "Origin: https://evil.example\r\n\r\n",
                      &r, 0),
             0);
    T_EQ_INT(r.status, 200);
    T_CHECK(!hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)));
    /* An error (401) to the allowed origin is readable by the page. */
    T_EQ_INT(exchange("GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: " ORIGIN
                      "\r\nAuthorization: Bearer sk-llmux-nope\r\n\r\n",
                      &r, 0),
             0);
    T_EQ_INT(r.status, 401);
    T_EQ_STR(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)), ORIGIN);
}

static void
test_head_and_methods(void)
{
    /* HEAD then GET pipelined: the HEAD reply has a length but no body,
     * so the next bytes are the GET's status line. */
    int fd = fresh();
    if (fd < 0)
        return;
    struct hresp r;
    char v[128];
    T_EQ_INT(send_str(fd, "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
                          "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"),
             0);
    T_EQ_INT(read_resp(fd, &rbg, &r, 1, 10000), 0);
    T_EQ_INT(r.status, 200);
    T_CHECK(hdr(&r, "Content-Length", v, sizeof(v)) && atoi(v) > 0);
    T_EQ_INT(read_resp(fd, &rbg, &r, 0, 10000), 0);
    T_EQ_INT(r.status, 200);
    T_CHECK(strstr(r.body, "\"ok\"") != NULL);
    close(fd);
    /* Methods llmux does not serve, known or not to the parser. */
    const char *m[] = {"PUT", "PATCH", "TRACE", "BREW", "PROPFIND"};
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        char raw[256];
        snprintf(raw, sizeof(raw),
                 "%s /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", m[i]);
        T_EQ_INT(exchange(raw, &r, 0), 0);
        T_EQ_INT(r.status, 405);
        T_CHECK(hdr(&r, "Allow", v, sizeof(v)) && strstr(v, "POST"));
        T_CHECK(strstr(r.body, "method_not_allowed") != NULL);
        T_CHECK(hdr(&r, "X-Request-Id", v, sizeof(v)) != NULL);
    }
    /* A served method on the wrong path: 405 with Allow, JSON. */
    T_EQ_INT(exchange("GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      "Authorization: Bearer @KEY@\r\n\r\n",
                      &r, 0),
             0);
    T_EQ_INT(r.status, 405);
    T_CHECK(hdr(&r, "Allow", v, sizeof(v)) && strstr(v, "POST"));
    /* Plain OPTIONS (no preflight): 204 with Allow. */
    T_EQ_INT(exchange("OPTIONS /health HTTP/1.1\r\nHost: x\r\n\r\n", &r, 0),
             0);
    T_EQ_INT(r.status, 204);
    T_CHECK(hdr(&r, "Allow", v, sizeof(v)) != NULL);
}

/* Headers that announce a body, and no body: the answer must come from
 * the headers alone, then the connection closes. */
static void
test_decided_before_body(void)
{
    struct hresp r;
    const char *raws[] = {
        /* no key: 401 */
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        "Content-Length: 900000\r\n\r\n",
        /* a wrong key, chunked: 401 */
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
        "Bearer sk-llmux-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\r\n"
        "Transfer-Encoding: chunked\r\n\r\n",
        /* the admin key, over limits.max_body_bytes: 413 */
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
        "Bearer @KEY@\r\nContent-Length: 1048577\r\n\r\n",
        /* far over it: 413 in the same shape */
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
        "Bearer @KEY@\r\nContent-Length: 900000000000\r\n\r\n",
        /* no key, admin API: 401 */
        "POST /admin/keys HTTP/1.1\r\nHost: x\r\nContent-Length: 500000\r\n"
        "\r\n",
        /* a valid key that is not the admin's, admin API: 403 (keys) and
         * 401 (providers), as the handlers answer, from the headers */
        "POST /admin/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        "@KEY@\r\nContent-Length: 500000\r\n\r\n",
        "DELETE /admin/keys/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        "@KEY@\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET /admin/providers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        "@KEY@\r\nContent-Length: 500000\r\n\r\n",
    };
    const int want[] = {401, 401, 413, 413, 401, 403, 403, 401};
    const char *codes[] = {"invalid_api_key",    "invalid_api_key",
                           "request_too_large",  "request_too_large",
                           "invalid_api_key",    "admin_key_required",
                           "admin_key_required", "invalid_api_key"};
    long long n413 = refused_413();
    int lines413 = refused_413_lines();
    T_CHECK(n413 >= 0);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        int fd = fresh();
        if (fd < 0)
            continue;
        T_EQ_INT(send_str(fd, raws[i]), 0);
        T_EQ_INT(read_resp(fd, &rbg, &r, 0, 10000), 0);
        T_EQ_INT(r.status, want[i]);
        T_CHECK(strstr(r.body, codes[i]) != NULL);
        char v[64];
        T_CHECK(hdr(&r, "Connection", v, sizeof(v)) &&
                !strcasecmp(v, "close"));
        T_CHECK(closed_within(fd, 10000, NULL));
        close(fd);
    }
    /* The two 413s were refused by the connection layer before any
     * handler ran: counted and logged all the same. */
    T_EQ_INT(refused_413(), n413 + 2);
    T_EQ_INT(refused_413_lines(), lines413 + 2);
}

/* Request smuggling shapes: each 400 and close; the "second request"
 * hidden in the body is never answered. */
static void
test_framing(void)
{
    const char *smuggled =
        "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    const char *heads[] = {
        "Content-Length: 0\r\nContent-Length: 36\r\n",
        "Content-Length: 36\r\nContent-Length: 36\r\n",
        "Content-Length: +36\r\n",
        "Content-Length: -1\r\n",
        "Content-Length: 3x\r\n",
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: identity\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 36\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "X-Bad: a\001b\r\n",
        "Content-Length : 36\r\n",
    };
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        char raw[1024];
        snprintf(raw, sizeof(raw),
                 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 "Authorization: Bearer @KEY@\r\n%s\r\n%s",
                 heads[i], smuggled);
        int fd = fresh();
        if (fd < 0)
            continue;
        struct hresp r;
        T_EQ_INT(send_str(fd, raw), 0);
        T_EQ_INT(read_resp(fd, &rbg, &r, 0, 10000), 0);
        if (r.status != 400)
            fprintf(stderr, "  framing case %zu: status %d\n", i, r.status);
        T_EQ_INT(r.status, 400);
        T_CHECK(strstr(r.body, "invalid_request_error") != NULL);
        size_t extra = rbg.len;
        T_CHECK(closed_within(fd, 10000, &extra));
        T_EQ_INT(extra, 0); /* no second response */
        close(fd);
    }
}

static void
test_chunked_body(void)
{
    const char *b = chat_body();
    size_t n = strlen(b), h = n / 3;
    char raw[4096];
    snprintf(raw, sizeof(raw),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
             "Bearer @KEY@\r\nTransfer-Encoding: chunked\r\n\r\n"
             "%zx\r\n%.*s\r\n%zx;ext=1\r\n%s\r\n0\r\n\r\n",
             h, (int)h, b, n - h, b + h);
    struct hresp r;
    T_EQ_INT(exchange(raw, &r, 0), 0);
    T_EQ_INT(r.status, 200);
    T_CHECK(strstr(r.body, "choices") != NULL);
    /* A chunked body over the limit is refused as it arrives (and
     * counted and logged like other refusals). */
    long long n413 = refused_413();
    int lines413 = refused_413_lines();
    int fd = fresh();
    if (fd < 0)
        return;
    T_EQ_INT(send_str(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                          "Authorization: Bearer @KEY@\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n"),
             0);
    static char chunk[70000];
    int len = snprintf(chunk, sizeof(chunk), "%x\r\n", 65536);
    memset(chunk + len, 'x', 65536);
    memcpy(chunk + len + 65536, "\r\n", 2);
    int sent = 0, got = 0;
    for (int i = 0; i < 40 && !got; i++) { /* 2.5 MB > the 1 MB limit */
        if (send_all(fd, chunk, (size_t)len + 65538) != 0)
            break;
        sent++;
        struct pollfd p = {fd, POLLIN, 0};
        got = poll(&p, 1, 0) > 0;
    }
    T_EQ_INT(read_resp(fd, &rbg, &r, 0, 10000), 0);
    T_EQ_INT(r.status, 413);
    T_CHECK(sent >= 16 && sent <= 40); /* refused after ~1 MB */
    close(fd);
    T_EQ_INT(refused_413(), n413 + 1);
    T_EQ_INT(refused_413_lines(), lines413 + 1);
}

static void
test_pipelining(void)
{
    char raw[4096];
    snprintf(raw, sizeof(raw),
             "GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: p1\r\n\r\n"
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
             "X-Request-Id: p2\r\nAuthorization: Bearer @KEY@\r\n"
             "Content-Length: %zu\r\n\r\n%s"
             "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Request-Id: p3\r\n"
             "Authorization: Bearer @KEY@\r\n\r\n",
             strlen(chat_body()), chat_body());
    int fd = fresh();
    if (fd < 0)
        return;
    T_EQ_INT(send_str(fd, raw), 0); /* one write */
    struct hresp r;
    char v[64];
    const char *ids[] = {"p1", "p2", "p3"};
    const char *in_body[] = {"\"ok\"", "choices", "\"list\""};
    for (int i = 0; i < 3; i++) {
        T_EQ_INT(read_resp(fd, &rbg, &r, 0, 10000), 0);
        T_EQ_INT(r.status, 200);
        T_EQ_STR(hdr(&r, "X-Request-Id", v, sizeof(v)), ids[i]);
        T_CHECK(strstr(r.body, in_body[i]) != NULL);
    }
    close(fd);
}

/* Query parameters are %-decoded; one that cannot be is refused by the
 * handler, not taken as absent. */
static void
test_query(void)
{
    struct hresp r;
    T_EQ_INT(exchange("GET /v1/usage?since=7%64&group_by=m%6Fdel HTTP/1.1\r\n"
                      "Host: x\r\nAuthorization: Bearer @KEY@\r\n\r\n",
                      &r, 0),
             0);
    T_EQ_INT(r.status, 200);
    T_CHECK(strstr(r.body, "\"data\"") != NULL);
    T_EQ_INT(exchange("GET /v1/usage?since=%zz HTTP/1.1\r\nHost: x\r\n"
                      "Authorization: Bearer @KEY@\r\n\r\n",
                      &r, 0),
             0);
    T_EQ_INT(r.status, 400);
    T_CHECK(strstr(r.body, "\"since\"") != NULL);
}

/* HTTP/1.0: keep-alive only when asked; a stream is close-delimited. */
static void
test_http10(void)
{
    int fd = fresh();
    if (fd < 0)
        return;
    struct hresp r;
    char v[64];
    T_EQ_INT(send_str(fd, "GET /health HTTP/1.0\r\nConnection: keep-alive"
                          "\r\n\r\n"),
             0);
    T_EQ_INT(read_resp(fd, &rbg, &r, 0, 10000), 0);
    T_EQ_STR(hdr(&r, "Connection", v, sizeof(v)), "keep-alive");
    T_EQ_INT(send_str(fd, "GET /health HTTP/1.0\r\n\r\n"), 0);
    T_EQ_INT(read_resp(fd, &rbg, &r, 0, 10000), 0);
    T_EQ_INT(r.status, 200);
    T_EQ_STR(hdr(&r, "Connection", v, sizeof(v)), "close");
    T_CHECK(closed_within(fd, 10000, NULL));
    close(fd);
    const char *body = "{\"model\":\"gpt-4.1\",\"stream\":true,\"messages\":"
                       "[{\"role\":\"user\",\"content\":\"hi\"}]}";
    char raw[1024];
    snprintf(raw, sizeof(raw),
             "POST /v1/chat/completions HTTP/1.0\r\nAuthorization: Bearer "
             "@KEY@\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    fd = fresh();
    if (fd < 0)
        return;
    T_EQ_INT(send_str(fd, raw), 0);
    while (rb_fill(fd, &rbg, 10000) > 0)
        ;
    T_CHECK(strstr(rbg.d, "HTTP/1.1 200") == rbg.d);
    T_CHECK(!strcasestr(rbg.d, "Transfer-Encoding"));
    size_t n = rbg.len;
    T_CHECK(n > 14 && !memcmp(rbg.d + n - 14, "data: [DONE]\n\n", 14));
    close(fd);
}

/* limits.header_timeout_ms is 1000 here: one header byte every 200 ms
 * never completes the headers, and the connection ends at the deadline
 * with a 408, long before the 60 bytes we would send. */
static void
test_header_deadline(void)
{
    int fd = fresh();
    if (fd < 0)
        return;
    long long t0 = mono_ms();
    T_EQ_INT(send_str(fd, "GET /health HTTP/1.1\r\nX-Slow: "), 0);
    int sent = 0, closed = 0;
    size_t got = 0;
    char b[4096];
    while (sent < 60 && !closed) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) > 0) {
            ssize_t n = recv(fd, b + got, sizeof(b) - 1 - got, 0);
            if (n <= 0)
                closed = 1;
            else
                got += (size_t)n;
            continue;
        }
        if (send(fd, "a", 1, MSG_NOSIGNAL) != 1)
            closed = 1;
        sent++;
    }
    b[got] = '\0';
    printf("  slow headers: closed after %d trickled bytes, %lld ms\n", sent,
           mono_ms() - t0);
    T_CHECK(closed);
    T_CHECK(sent < 30);
    T_CHECK(strstr(b, "HTTP/1.1 408") == b);
    T_CHECK(strstr(b, "request_timeout") != NULL);
    close(fd);
}

/* limits.idle_timeout_ms is 1500: a kept-alive connection left idle is
 * closed by llmux; one never used is closed at the header deadline. */
static void
test_idle_timeout(void)
{
    int fd = fresh();
    if (fd < 0)
        return;
    struct hresp r;
    T_EQ_INT(send_str(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
    T_EQ_INT(read_resp(fd, &rbg, &r, 0, 10000), 0);
    T_EQ_INT(r.status, 200);
    T_CHECK(!strcasestr(r.head, "Connection: close"));
    size_t extra = 0;
    T_CHECK(closed_within(fd, 15000, &extra));
    T_EQ_INT(extra, 0);
    close(fd);
    fd = tcp_connect(gw.port);
    T_CHECK(fd >= 0 && closed_within(fd, 15000, NULL));
    if (fd >= 0)
        close(fd);
}

/* The server side of our connection, from llmux's own descriptor table
 * (pidfd_getfd: the test is llmux's parent): TCP_NODELAY must be on. */
static int
server_nodelay(int client_fd)
{
    struct sockaddr_in me;
    socklen_t ml = sizeof(me);
    if (getsockname(client_fd, (struct sockaddr *)&me, &ml) != 0)
        return -1;
    int pfd = pidfd_open(gw.pid, 0);
    if (pfd < 0)
        return -1;
    int result = -1;
    for (int fd = 3; fd < 1024 && result < 0; fd++) {
        int dup = pidfd_getfd(pfd, fd, 0);
        if (dup < 0)
            continue;
        struct sockaddr_in peer;
        socklen_t pl = sizeof(peer);
        if (getpeername(dup, (struct sockaddr *)&peer, &pl) == 0 &&
            peer.sin_family == AF_INET && peer.sin_port == me.sin_port) {
            int v = 0;
            socklen_t vl = sizeof(v);
            if (getsockopt(dup, IPPROTO_TCP, TCP_NODELAY, &v, &vl) == 0)
                result = v != 0;
        }
        close(dup);
    }
    close(pfd);
    return result;
}

/* 20 streams one after another on one kept-alive connection.  Each must
 * end with its last event and the terminating chunk in one segment (one
 * write with TCP_NODELAY: read together), so no delayed ACK can hold the
 * end back.  The time per stream is printed, not asserted. */
static void
test_streams_keepalive(void)
{
    int fd = fresh();
    if (fd < 0)
        return;
    const char *body = "{\"model\":\"gpt-4.1\",\"stream\":true,\"messages\":"
                       "[{\"role\":\"user\",\"content\":\"fake:chunks=3;"
                       "chunk_delay_ms=2\"}]}";
    char raw[2048];
    snprintf(raw, sizeof(raw),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
             "Bearer @KEY@\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    int together = 0, ok = 0;
    long long ms[20];
    for (int i = 0; i < 20; i++) {
        long long t0 = mono_ms();
        if (send_str(fd, raw) != 0)
            break;
        static char acc[65536];
        size_t alen = 0;
        int done = 0;
        while (!done && alen < sizeof(acc) - 1) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, 10000) <= 0)
                break;
            char b[65536];
            ssize_t n = recv(fd, b, sizeof(b), 0);
            if (n <= 0)
                break;
            if (alen + (size_t)n >= sizeof(acc))
                break;
            memcpy(acc + alen, b, (size_t)n);
            alen += (size_t)n;
            acc[alen] = '\0';
            char *d = strstr(acc, "data: [DONE]");
            if (d) {
                /* The read that brought [DONE] also brought the end. */
                done = 1;
                together += memmem(b, (size_t)n, "data: [DONE]", 12) &&
                            alen >= 5 && !memcmp(acc + alen - 5, "0\r\n\r\n", 5);
            }
        }
        ms[i] = mono_ms() - t0;
        ok += done;
    }
    T_EQ_INT(ok, 20);
    T_EQ_INT(together, 20);
    T_EQ_INT(server_nodelay(fd), 1);
    long long s[20];
    memcpy(s, ms, sizeof(s));
    for (int i = 0; i < 20; i++)
        for (int j = i + 1; j < 20; j++)
            if (s[j] < s[i]) {
                long long t = s[i];
                s[i] = s[j];
                s[j] = t;
            }
    printf("  20 streams on one connection: median %lld ms, max %lld ms\n",
           s[10], s[19]);
    close(fd);
}

static long
rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* 120 clients announce 8 MB bodies without a key and send 1 MB of each:
 * llmux answers 401 from the headers and never buffers them. */
static void
test_unauthenticated_bodies(void)
{
    long before = rss_kb(gw.pid);
    static char mb[1 << 20];
    memset(mb, 'x', sizeof(mb));
    int n401 = 0;
    long peak = before;
    for (int batch = 0; batch < 6; batch++) {
        int fds[20];
        for (int i = 0; i < 20; i++) {
            fds[i] = tcp_connect(gw.port);
            if (fds[i] < 0)
                continue;
            send_str(fds[i], "POST /v1/chat/completions HTTP/1.1\r\n"
                             "Host: x\r\nContent-Length: 8388608\r\n\r\n");
            /* Non-blocking body: as much as the socket takes. */
            fcntl(fds[i], F_SETFL, O_NONBLOCK);
            size_t off = 0;
            for (int k = 0; k < 2000 && off < sizeof(mb); k++) {
                ssize_t w = send(fds[i], mb + off, sizeof(mb) - off,
                                 MSG_NOSIGNAL);
                if (w > 0)
                    off += (size_t)w;
                else if (w < 0 && errno == EAGAIN)
                    usleep(500);
                else
                    break;
            }
        }
        long r = rss_kb(gw.pid);
        if (r > peak)
            peak = r;
        for (int i = 0; i < 20; i++) {
            if (fds[i] < 0)
                continue;
            fcntl(fds[i], F_SETFL, 0);
            struct hresp resp;
            rbg.len = 0;
            if (read_resp(fds[i], &rbg, &resp, 0, 10000) == 0 &&
                resp.status == 401)
                n401++;
            close(fds[i]);
        }
    }
    long after = rss_kb(gw.pid);
    printf("  120 unauthenticated 8 MB bodies: RSS %ld kB before, peak %ld, "
           "after %ld\n",
           before, peak, after);
    T_EQ_INT(n401, 120);
    T_CHECK(before > 0 && peak - before < 40 * 1024);
}

/* ---- servers -------------------------------------------------------------- */

static int
make_key(void)
{
    const char *b = "{\"name\":\"conn-test\"}";
    char raw[512];
    snprintf(raw, sizeof(raw),
             "POST /admin/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             ADMIN "\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(b), b);
    struct hresp r;
    if (exchange(raw, &r, 0) != 0 || r.status != 200)
        return -1;
    const char *k = strstr(r.body, "\"key\":\"");
    if (!k)
        return -1;
    k += 7;
    size_t n = strcspn(k, "\"");
    if (n >= sizeof(key))
        return -1;
    memcpy(key, k, n);
    key[n] = '\0';
    return 0;
}

static int
start_gw(const char *name, const char *limits, const char *extra)
{
    char cfg[4096];
    char *dir = e2e_temp_dir();
    snprintf(cfg, sizeof(cfg),
             "{\"listen\": \"127.0.0.1:0\", \"workers\": 2, \"database\": "
             "\"%s/ledger.db\", \"require_keys\": true, \"admin_key\": \"%s\","
             " \"limits\": {%s}, %s \"providers\": {\"fake\": {\"kind\": "
             "\"openai\", \"base_url\": \"http://127.0.0.1:%d/v1\", "
             "\"api_key\": \"sk-fake-secret\", \"models\": {\"gpt-4.1\": {}}}}}"
             "\n",
             dir, ADMIN, limits, extra, fake.port);
    free(dir);
    char *path = e2e_write_temp(name, cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 15000);
    free(path);
    return rc;
}

/* utime + stime of pid in clock ticks. */
static long long
cpu_ticks(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                            "%llu %llu",
                     &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

static long long
file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* GET /health on a new connection, retried for up to timeout_ms: 1 if a
 * 200 came back. */
static int
health_ok(int timeout_ms)
{
    long long end = mono_ms() + timeout_ms;
    while (mono_ms() < end) {
        struct hresp r;
        if (exchange("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", &r, 0) == 0 &&
            r.status == 200)
            return 1;
        usleep(100 * 1000);
    }
    return 0;
}

/* Opens n connections (non-blocking connect; the kernel finishes the
 * handshake whether llmux accepts or not). */
static int
open_many(int *fds, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        0);
        if (fds[i] < 0)
            continue;
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons(gw.port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fds[i], (struct sockaddr *)&a, sizeof(a)) == 0 ||
            errno == EINPROGRESS)
            k++;
    }
    return k;
}

static long long
metric(const char *name)
{
    struct hresp r;
    if (exchange("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &r, 0) != 0)
        return -1;
    const char *p = strstr(r.body, name);
    while (p && p > r.body && p[-1] != '\n')
        p = strstr(p + 1, name);
    return p ? atoll(p + strlen(name) + 1) : -1;
}

/* More connections than limits.max_connections (8): the extra ones wait
 * (accept paused, no spin), llmux's CPU and log stay small, and service
 * resumes once connections close. */
static void
test_connection_cap(void)
{
    int fds[64];
    int n = open_many(fds, 64);
    T_EQ_INT(n, 64);
    usleep(300 * 1000);
    long long c0 = cpu_ticks(gw.pid);
    long long l0 = file_size(gw.log_path);
    usleep(2000 * 1000);
    long long c1 = cpu_ticks(gw.pid);
    long long l1 = file_size(gw.log_path);
    /* While every slot is held, a new client is not served. */
    struct hresp r;
    int fd = tcp_connect(gw.port);
    int served = 0;
    if (fd >= 0) {
        rbg.len = 0;
        send_str(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        served = read_resp(fd, &rbg, &r, 0, 1000) == 0;
        close(fd);
    }
    long hz = sysconf(_SC_CLK_TCK);
    printf("  64 connections at a cap of 8: llmux CPU %lld ms in 2 s, log "
           "+%lld bytes\n",
           (c1 - c0) * 1000 / hz, l1 - l0);
    T_CHECK(!served);
    T_CHECK(c0 >= 0 && (c1 - c0) * 1000 / hz < 400); /* no spin */
    T_CHECK(l1 >= 0 && l1 - l0 < 4096);
    for (int i = 0; i < 64; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    T_CHECK(health_ok(10000));
    T_CHECK(metric("llmux_accept_paused_total") > 0);
    T_CHECK(file_size(gw.log_path) < 64 * 1024);
}

/* Out of file descriptors: llmux runs under a low RLIMIT_NOFILE (set
 * before exec, inherited), 200 connections arrive; accept fails with
 * EMFILE and pauses (no spin, a few log lines), and /health is served
 * again once they are closed. */
static void
test_emfile(void)
{
    /* A client connected before the flood keeps being served. */
    int kept = fresh();
    struct hresp r;
    T_EQ_INT(send_str(kept, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
    T_EQ_INT(read_resp(kept, &rbg, &r, 0, 10000), 0);
    int fds[200];
    int n = open_many(fds, 200);
    T_EQ_INT(n, 200);
    usleep(300 * 1000);
    T_EQ_INT(send_str(kept, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
    T_EQ_INT(read_resp(kept, &rbg, &r, 0, 10000), 0);
    T_EQ_INT(r.status, 200);
    close(kept);
    long long c0 = cpu_ticks(gw.pid);
    long long l0 = file_size(gw.log_path);
    usleep(2000 * 1000);
    long long c1 = cpu_ticks(gw.pid);
    long long l1 = file_size(gw.log_path);
    long hz = sysconf(_SC_CLK_TCK);
    printf("  200 connections under RLIMIT_NOFILE 64: llmux CPU %lld ms in "
           "2 s, log +%lld bytes (total %lld)\n",
           (c1 - c0) * 1000 / hz, l1 - l0, l1);
    T_CHECK(c0 >= 0 && (c1 - c0) * 1000 / hz < 400);
    T_CHECK(l1 >= 0 && l1 - l0 < 4096 && l1 < 64 * 1024);
    for (int i = 0; i < 200; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    T_CHECK(health_ok(10000));
    T_CHECK(metric("llmux_accept_paused_total") > 0);
    /* The log says why, once per 10 s, not per failed accept. */
    FILE *f = fopen(gw.log_path, "r");
    char line[1024];
    int emfile_lines = 0;
    while (f && fgets(line, sizeof(line), f))
        emfile_lines += strstr(line, "out of file descriptors") != NULL;
    if (f)
        fclose(f);
    T_CHECK(emfile_lines >= 1 && emfile_lines <= 3);
    /* ... and warned at start that max_connections exceeds the limit. */
    f = fopen(gw.log_path, "r");
    int warned = 0;
    while (f && fgets(line, sizeof(line), f))
        warned += strstr(line, "may open only") != NULL;
    if (f)
        fclose(f);
    T_CHECK(warned >= 1);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    signal(SIGPIPE, SIG_IGN);
    e2e_small_asan_quarantine(); /* RSS is measured */
    if (e2e_start_fake(&fake) != 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    if (start_gw("conn.json",
                 "\"max_body_bytes\": 1048576, \"header_timeout_ms\": 1000, "
                 "\"idle_timeout_ms\": 1500",
                 "\"cors\": {\"origins\": [\"" ORIGIN "\"]}, "
                 "\"log\": {\"level\": \"info\"},") != 0) {
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    if (make_key() != 0) {
        T_CHECK(!"a key could not be created");
    }
    T_RUN(test_request_ids);
    T_RUN(test_cors);
    T_RUN(test_head_and_methods);
    T_RUN(test_decided_before_body);
    T_RUN(test_framing);
    T_RUN(test_chunked_body);
    T_RUN(test_pipelining);
    T_RUN(test_query);
    T_RUN(test_http10);
    T_RUN(test_header_deadline);
    T_RUN(test_idle_timeout);
    T_RUN(test_streams_keepalive);
    T_RUN(test_unauthenticated_bodies);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);

    if (start_gw("cap.json",
                 "\"max_connections\": 8, \"header_timeout_ms\": 30000", "") ==
        0) {
        T_RUN(test_connection_cap);
        T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
    } else {
        T_CHECK(!"llmux with a connection cap did not start");
    }

    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    low.rlim_cur = 64; /* llmux needs ~30 to run; the rest are clients */
    setrlimit(RLIMIT_NOFILE, &low);
    int rc = start_gw("emfile.json", "\"header_timeout_ms\": 30000", "");
    setrlimit(RLIMIT_NOFILE, &old);
    if (rc == 0) {
        T_RUN(test_emfile);
        T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
    } else {
        T_CHECK(!"llmux under RLIMIT_NOFILE 64 did not start");
    }
    e2e_stop(&fake, SIGTERM, 5000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
