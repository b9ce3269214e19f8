/*
 * raw_http: see raw_http.h.  The response parser is strict where llmux's
 * own output is concerned (chunk sizes in hex, each chunk followed by
 * CRLF, the 0-size chunk last) so a test sees a stream cut short.
 */
#include "raw_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RAW_MSS 1000 /* bytes: the TCP segment size a small window asks for */

static long long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
raw_open(struct raw_conn *c, int port, int rcvbuf)
{
    memset(c, 0, sizeof(*c));
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        return -1;
    if (rcvbuf > 0) {
        int mss = RAW_MSS;
        if (setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
                       sizeof(rcvbuf)) != 0 ||
            setsockopt(c->fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss)) !=
                0) {
            close(c->fd);
            c->fd = -1;
            return -1;
        }
    }
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    return 0;
}

int
raw_rcvbuf(const struct raw_conn *c)
{
    int v = 0;
    socklen_t l = sizeof(v);
    if (getsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &v, &l) != 0)
        return -1;
    return v;
}

int
raw_post(struct raw_conn *c, const char *path, const char *body)
{
    size_t bl = strlen(body);
    size_t cap = bl + strlen(path) + 256;
    char *req = malloc(cap);
    if (!req)
        return -1;
    int hl = snprintf(req, cap,
                      "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      "application/json\r\nConnection: close\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      path, bl);
    memcpy(req + hl, body, bl);
    size_t n = (size_t)hl + bl, off = 0;
    while (off < n) {
        ssize_t w = write(c->fd, req + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(req);
    return off == n ? 0 : -1;
}

/* One read of at most step bytes into c->in; 1 read, 0 EOF, -1 error or
 * nothing before the deadline. */
static int
read_some(struct raw_conn *c, size_t step, long long deadline)
{
    if (c->len + step + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 65536;
        while (cap < c->len + step + 1)
            cap *= 2;
        char *q = realloc(c->in, cap);
        if (!q)
            return -1;
        c->in = q;
        c->cap = cap;
    }
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return -1;
        struct pollfd pf = {c->fd, POLLIN, 0};
        int pr = poll(&pf, 1, left > 500 ? 500 : (int)left);
        if (pr < 0 && errno != EINTR)
            return -1;
        if (pr <= 0)
            continue;
        ssize_t n = read(c->fd, c->in + c->len, step);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        c->len += (size_t)n;
        c->in[c->len] = '\0';
        return n > 0;
    }
}

int
raw_read_until(struct raw_conn *c, const char *marker, size_t step,
               size_t max, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    while (!(c->in && strstr(c->in, marker))) {
        if (c->len >= max || read_some(c, step, deadline) != 1)
            return -1;
    }
    return 0;
}

int
raw_read_all(struct raw_conn *c, size_t max, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        if (c->len >= max)
            return -1;
        int r = read_some(c, 65536, deadline);
        if (r == 0)
            return 0;
        if (r < 0)
            return -1;
    }
}

void
raw_close(struct raw_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->in);
    c->in = NULL;
    c->len = c->cap = 0;
}

int
raw_response(const char *raw, size_t len, int *status, char **body,
             size_t *body_len)
{
    *body = NULL;
    *body_len = 0;
    *status = 0;
    const char *end = memmem(raw, len, "\r\n\r\n", 4);
    if (!end || len < 12 || memcmp(raw, "HTTP/1.1 ", 9))
        return -1;
    *status = atoi(raw + 9);
    size_t hl = (size_t)(end - raw) + 4;
    char *head = strndup(raw, hl);
    if (!head)
        return -1;
    int chunked = strcasestr(head, "\r\ntransfer-encoding: chunked") != NULL;
    free(head);
    char *out = malloc(len - hl + 1);
    if (!out)
        return -1;
    size_t o = 0, p = hl;
    int rc = -1;
    if (!chunked) {
        memcpy(out, raw + p, len - p);
        o = len - p;
        rc = 0;
    } else {
        for (;;) {
            char *e = NULL;
            const char *crlf = memmem(raw + p, len - p, "\r\n", 2);
            if (!crlf)
                break;
            unsigned long long n = strtoull(raw + p, &e, 16);
            if (e != crlf || e == raw + p)
                break;
            p = (size_t)(crlf - raw) + 2;
            if (n == 0) {
                rc = len - p >= 2 && !memcmp(raw + p, "\r\n", 2) ? 1 : -1;
                break;
            }
            if (n > len - p || len - p - n < 2 ||
                memcmp(raw + p + n, "\r\n", 2))
                break;
            memcpy(out + o, raw + p, n);
            o += n;
            p += n + 2;
        }
    }
    out[o] = '\0';
    *body = out;
    *body_len = o;
    return rc;
}

char **
raw_sse_events(const char *body, size_t len, size_t *n_out)
{
    char **ev = NULL;
    size_t n = 0, cap = 0, p = 0;
    *n_out = 0;
    while (p < len) {
        const char *sep = memmem(body + p, len - p, "\n\n", 2);
        size_t el = sep ? (size_t)(sep - (body + p)) : len - p;
        if (el >= 6 && !memcmp(body + p, "data: ", 6)) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                char **q = realloc(ev, nc * sizeof(*q));
                if (!q)
                    break;
                ev = q;
                cap = nc;
            }
            if (!(ev[n] = strndup(body + p + 6, el - 6)))
                break;
            n++;
        }
        p += el + (sep ? 2 : 0);
    }
    *n_out = n;
    return ev;
}

void
raw_sse_free(char **ev, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ev[i]);
    free(ev);
}
