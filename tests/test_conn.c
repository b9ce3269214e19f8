/*
 * gw_hparse (gateway/conn.c) from bytes, without sockets: each request of
 * a stream fed whole and one byte at a time must give the same events,
 * heads, bodies and errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gateway/gw_int.h"
#include "harness.h"

struct run {
    int heads, dones, error;
    char url[3][256];
    char body[3][256];
    int64_t cl[3];
    int chunked[3];
    int keep_alive[3];
    char host[3][64];
};

/* Feeds text in pieces of step bytes (0: all at once), body cap `cap`,
 * for up to three requests. */
static void
parse(const char *text, size_t step, int64_t cap, struct run *r)
{
    memset(r, 0, sizeof(*r));
    struct gw_hparse p;
    if (gw_hparse_init(&p) != GX_OK) {
        r->error = -1;
        return;
    }
    size_t n = strlen(text), off = 0;
    while (off < n && !r->error && r->dones < 3) {
        size_t len = step ? step : n - off;
        if (len > n - off)
            len = n - off;
        size_t pos = 0;
        while (pos < len && !r->error) {
            size_t used = 0;
            enum gw_hp_event ev =
                gw_hparse_feed(&p, text + off + pos, len - pos, &used);
            pos += used;
            if (ev == GW_HP_ERROR) {
                r->error = p.err_status;
            } else if (ev == GW_HP_HEAD) {
                int i = r->heads++;
                snprintf(r->url[i], sizeof(r->url[i]), "%s",
                         gw_hparse_url(&p));
                const char *h = gw_hparse_header(&p, "host");
                snprintf(r->host[i], sizeof(r->host[i]), "%s", h ? h : "");
                r->cl[i] = p.content_length;
                r->chunked[i] = p.chunked;
                r->keep_alive[i] = p.keep_alive;
                p.body_max = cap;
            } else if (ev == GW_HP_DONE) {
                int i = r->dones++;
                size_t bl = evbuffer_get_length(p.body);
                if (bl >= sizeof(r->body[i]))
                    bl = sizeof(r->body[i]) - 1;
                evbuffer_copyout(p.body, r->body[i], bl);
                r->body[i][bl] = '\0';
                gw_hparse_next(&p);
                if (r->dones == 3)
                    break;
            }
        }
        off += len;
    }
    gw_hparse_cleanup(&p);
}

/* The same results whole and byte by byte. */
static void
parse_both(const char *text, int64_t cap, struct run *r)
{
    struct run b;
    parse(text, 0, cap, r);
    parse(text, 1, cap, &b);
    T_EQ_INT(b.heads, r->heads);
    T_EQ_INT(b.dones, r->dones);
    T_EQ_INT(b.error, r->error);
    for (int i = 0; i < r->dones; i++) {
        T_EQ_STR(b.url[i], r->url[i]);
        T_EQ_STR(b.body[i], r->body[i]);
        T_EQ_STR(b.host[i], r->host[i]);
    }
}

static void
test_pipelined(void)
{
    struct run r;
    parse_both("GET /health?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"
               "POST /v1/chat/completions HTTP/1.1\r\nHOST:  b \r\n"
               "Content-Length: 5\r\n\r\nhello"
               "POST /c HTTP/1.1\r\nHost: c\r\nTransfer-Encoding: chunked\r\n"
               "\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n",
               1024, &r);
    T_EQ_INT(r.error, 0);
    T_EQ_INT(r.dones, 3);
    T_EQ_STR(r.url[0], "/health?x=1");
    T_EQ_STR(r.host[0], "a");
    T_EQ_STR(r.host[1], "b"); /* http-parser trims the value */
    T_EQ_INT(r.cl[0], -1);
    T_EQ_INT(r.cl[1], 5);
    T_EQ_STR(r.body[1], "hello");
    T_EQ_INT(r.chunked[2], 1);
    T_EQ_STR(r.body[2], "abcde");
    T_EQ_INT(r.keep_alive[0], 1);
    parse_both("GET / HTTP/1.0\r\n\r\n", 0, &r);
    T_EQ_INT(r.dones, 1);
    T_EQ_INT(r.keep_alive[0], 0);
    parse_both("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", 0, &r);
    T_EQ_INT(r.keep_alive[0], 0);
}

static void
test_framing_refused(void)
{
    static const struct {
        const char *head;
        int status;
    } cases[] = {
        {"Content-Length: 1\r\nContent-Length: 1\r\n", 400},
        {"Content-Length: 1\r\nContent-Length: 2\r\n", 400},
        {"Content-Length: +1\r\n", 400},
        {"Content-Length: -1\r\n", 400},
        {"Content-Length: 1 1\r\n", 400},
        {"Content-Length: 0x10\r\n", 400},
        /* Too many digits: a number, larger than any limit (19 digits is
         * llmux's own check, 20 and more http-parser's overflow guard). */
        {"Content-Length: 1000000000000000000\r\n", 413},
        {"Content-Length: 99999999999999999999\r\n", 413},
        {"Content-Length: 123456789012345678901234567890\r\n", 413},
        {"Content-Length: 1234567890123456789x\r\n", 400},
        {"Transfer-Encoding: gzip, chunked\r\n", 400},
        {"Transfer-Encoding: chunked, gzip\r\n", 400},
        {"Transfer-Encoding: identity\r\n", 400},
        {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400},
        {"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", 400},
        {"X: a\001b\r\n", 400},
        {"Bad Header: x\r\n", 400},
        {"Content-Length : 3\r\n", 400},
        {"Content-Length\t: 3\r\n", 400},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[512];
        snprintf(text, sizeof(text),
                 "POST / HTTP/1.1\r\nHost: x\r\n%s\r\nabc", cases[i].head);
        struct run r;
        parse_both(text, 1024, &r);
        if (r.error != cases[i].status)
            fprintf(stderr, "  case %zu: %d\n", i, r.error);
        T_EQ_INT(r.error, cases[i].status);
        T_EQ_INT(r.heads, 0);
    }
    struct run r;
    parse_both("BREW / HTTP/1.1\r\n\r\n", 0, &r);
    T_EQ_INT(r.error, 405);
    parse_both("GET / HTTP/2.0\r\n\r\n", 0, &r);
    T_EQ_INT(r.error, 505);
    /* Accepted spellings. */
    parse_both("POST / HTTP/1.1\r\nTransfer-Encoding:  Chunked \r\n\r\n"
               "1\r\nz\r\n0\r\n\r\n",
               1024, &r);
    T_EQ_INT(r.error, 0);
    T_EQ_STR(r.body[0], "z");
    parse_both("POST / HTTP/1.1\r\nContent-Length: 007\r\n\r\nabcdefg", 1024,
               &r);
    T_EQ_INT(r.error, 0);
    T_EQ_STR(r.body[0], "abcdefg");
    /* Leading zeros are not digits of the size. */
    parse_both("POST / HTTP/1.1\r\nContent-Length: 000000000000000000000000"
               "7\r\n\r\nabcdefg",
               1024, &r);
    T_EQ_INT(r.error, 0);
    T_EQ_STR(r.body[0], "abcdefg");
}

static void
test_limits(void)
{
    /* A chunked body is counted as it arrives. */
    struct run r;
    parse_both("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               "4\r\nabcd\r\n4\r\nefgh\r\n0\r\n\r\n",
               6, &r);
    T_EQ_INT(r.error, 413);
    parse_both("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               "4\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n",
               6, &r);
    T_EQ_INT(r.error, 0);
    /* Headers: 64 KiB, 100 lines. */
    size_t n = 70 * 1024;
    char *big = malloc(n + 64);
    if (!big)
        return;
    int k = snprintf(big, n + 64, "GET / HTTP/1.1\r\nX: ");
    memset(big + k, 'a', n - (size_t)k);
    big[n] = '\0';
    parse(big, 0, 0, &r);
    T_EQ_INT(r.error, 431);
    parse(big, 4096, 0, &r);
    T_EQ_INT(r.error, 431);
    k = snprintf(big, n + 64, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 101; i++)
        k += snprintf(big + k, n + 64 - (size_t)k, "H%d: v\r\n", i);
    snprintf(big + k, n + 64 - (size_t)k, "\r\n");
    parse(big, 0, 0, &r);
    T_EQ_INT(r.error, 431);
    free(big);
}

int
main(void)
{
    T_RUN(test_pipelined);
    T_RUN(test_framing_refused);
    T_RUN(test_limits);
    return T_END();
}
