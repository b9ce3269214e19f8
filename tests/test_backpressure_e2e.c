/*
 * Streaming backpressure end to end (issue 2): the fake provider pours out
 * large streamed answers as fast as it can; slow clients (raw sockets that
 * first read nothing at all, then read at a throttled rate) take them
 * through the real llmux binary.  Meanwhile llmux's VmRSS is sampled from
 * /proc/PID/status: it must stay within RSS_BOUND_MB of its baseline while
 * several times that many bytes go through, and every stream must arrive
 * whole (every event parses, the content byte count is exact, [DONE] last,
 * the chunked body properly ended).
 *
 * Without backpressure llmux would read each upstream to the end at once
 * and hold what the client has not taken yet: about N_CLIENTS x BIG bytes
 * (180 MB) during the stall.  With it (gateway/chat.c pauses the upstream
 * past 256 KiB queued for the client) only socket and curl buffers fill.
 *
 * Under ASan the child's allocator quarantine (256 MB by default) would
 * keep freed memory resident and look like growth, so the test asks for
 * a small quarantine in the children's ASAN_OPTIONS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "lib/e2e.h"

#define N_CLIENTS 3
#define BIG 60000000L    /* content bytes per stream */
#define CHUNKS 600       /* content events per stream: 100 kB each */
#define STALL_MS 1500    /* each client first reads nothing this long */
#define RATE_BPS (12L * 1024 * 1024) /* then at most this many bytes/s */
#define RSS_BOUND_MB 64
#define DEADLINE_MS 45000 /* all the streams, bounded */

static struct e2e_proc fake, gw;

static long long
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* VmRSS of pid in kB, or -1. */
static long
rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6)) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

/* ---- a slow client on a raw socket ----------------------------------- */

struct client {
    int idx;
    /* results */
    int status;
    int chunked_end;  /* the terminating 0-size chunk arrived */
    int done;         /* data: [DONE] arrived, last */
    long events;      /* JSON data events */
    long bad_events;  /* unparsable, or error events */
    long long content; /* content bytes in the deltas */
    long long wire;   /* body bytes after de-chunking */
    char err[128];
    /* parser state */
    char *ev;         /* the SSE bytes not yet cut into events */
    size_t ev_len, ev_cap, ev_scan;
};

static void
sse_event(struct client *c, const char *p, size_t n)
{
    /* One event: "data: ...". */
    if (n < 6 || memcmp(p, "data: ", 6)) {
        c->bad_events++;
        return;
    }
    p += 6;
    n -= 6;
    if (c->done) {
        c->bad_events++; /* anything after [DONE] */
        return;
    }
    if (n == 6 && !memcmp(p, "[DONE]", 6)) {
        c->done = 1;
        return;
    }
    json_t *o = json_loadb(p, n, 0, NULL);
    if (!o || json_object_get(o, "error")) {
        c->bad_events++;
    } else {
        c->events++;
        json_t *s = json_object_get(
            json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                            "delta"),
            "content");
        if (json_is_string(s))
            c->content += (long long)json_string_length(s);
    }
    json_decref(o);
}

/* Feeds de-chunked body bytes to the SSE splitter. */
static int
sse_feed(struct client *c, const char *p, size_t n)
{
    c->wire += (long long)n;
    if (c->ev_len + n > c->ev_cap) {
        size_t cap = c->ev_cap ? c->ev_cap : 65536;
        while (cap < c->ev_len + n)
            cap *= 2;
        char *q = realloc(c->ev, cap);
        if (!q)
            return -1;
        c->ev = q;
        c->ev_cap = cap;
    }
    memcpy(c->ev + c->ev_len, p, n);
    c->ev_len += n;
    size_t start = 0;
    size_t i = c->ev_scan;
    for (; i + 1 < c->ev_len; i++) {
        if (c->ev[i] == '\n' && c->ev[i + 1] == '\n') {
            sse_event(c, c->ev + start, i - start);
            start = i + 2;
            i++;
        }
    }
    memmove(c->ev, c->ev + start, c->ev_len - start);
    c->ev_len -= start;
    c->ev_scan = c->ev_len ? c->ev_len - 1 : 0;
    return 0;
}

static void *
client_main(void *arg)
{
    struct client *c = arg;
    c->status = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)gw.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        snprintf(c->err, sizeof(c->err), "connect: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char body[256], head[512];
    snprintf(body, sizeof(body),
             "{\"model\":\"main\",\"stream\":true,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"fake:big=%ld;chunks=%d\"}]}",
             BIG, CHUNKS);
    int hl = snprintf(head, sizeof(head),
                      "POST /v1/chat/completions HTTP/1.1\r\nHost: "
                      "127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                      strlen(body), body);
    if (write(fd, head, (size_t)hl) != hl) {
        snprintf(c->err, sizeof(c->err), "write: %s", strerror(errno));
        close(fd);
        return NULL;
    }
    /* Read nothing at first: the answer piles up somewhere. */
    usleep(STALL_MS * 1000);

    enum { HEAD, SIZE, DATA, DATA_CRLF, END } st = HEAD;
    char hbuf[4096];
    size_t hlen = 0;
    char sline[32];
    size_t slen = 0;
    long long left = 0;
    static __thread char buf[65536];
    long long t0 = mono_ms(), got = 0, deadline = t0 + DEADLINE_MS;
    while (st != END && mono_ms() < deadline) {
        /* Throttle: never ahead of RATE_BPS since reading began. */
        long long ahead_ms = got * 1000 / RATE_BPS - (mono_ms() - t0);
        if (ahead_ms > 0)
            usleep((useconds_t)(ahead_ms * 1000));
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 500) <= 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        got += n;
        for (ssize_t i = 0; i < n && st != END;) {
            switch (st) {
            case HEAD:
                if (hlen + 1 < sizeof(hbuf))
                    hbuf[hlen++] = buf[i];
                hbuf[hlen] = '\0';
                i++;
                if (hlen >= 4 && !strcmp(hbuf + hlen - 4, "\r\n\r\n")) {
                    c->status = atoi(hbuf + 9);
                    if (!strcasestr(hbuf, "transfer-encoding: chunked")) {
                        snprintf(c->err, sizeof(c->err), "not chunked");
                        st = END;
                    } else {
                        st = SIZE;
                    }
                }
                break;
            case SIZE:
                if (buf[i] == '\n') {
                    sline[slen] = '\0';
                    left = strtoll(sline, NULL, 16);
                    slen = 0;
                    if (left == 0) {
                        c->chunked_end = 1;
                        st = END;
                    } else {
                        st = DATA;
                    }
                } else if (buf[i] != '\r' && slen + 1 < sizeof(sline)) {
                    sline[slen++] = buf[i];
                }
                i++;
                break;
            case DATA: {
                size_t take = (size_t)(n - i);
                if ((long long)take > left)
                    take = (size_t)left;
                if (sse_feed(c, buf + i, take) != 0) {
                    snprintf(c->err, sizeof(c->err), "out of memory");
                    st = END;
                    break;
                }
                i += (ssize_t)take;
                left -= (long long)take;
                if (left == 0)
                    st = DATA_CRLF;
                break;
            }
            case DATA_CRLF:
                if (buf[i] == '\n')
                    st = SIZE;
                i++;
                break;
            case END:
                break;
            }
        }
    }
    if (!c->chunked_end && !c->err[0])
        snprintf(c->err, sizeof(c->err), "body not ended (%lld bytes read)",
                 got);
    close(fd);
    free(c->ev);
    c->ev = NULL;
    return NULL;
}

/* ---- RSS sampler -------------------------------------------------------- */

static atomic_int sampling;
static atomic_long rss_max_kb;
static atomic_long rss_samples;

static void *
sampler_main(void *arg)
{
    (void)arg;
    while (atomic_load(&sampling)) {
        long kb = rss_kb(gw.pid);
        if (kb > atomic_load(&rss_max_kb))
            atomic_store(&rss_max_kb, kb);
        atomic_fetch_add(&rss_samples, 1);
        usleep(20 * 1000);
    }
    return NULL;
}

static int
start_all(void)
{
    /* A small allocator quarantine for sanitizer builds of the children
     * (see the top of the file); no effect on release builds. */
    e2e_small_asan_quarantine();
    if (e2e_start_fake(&fake) != 0)
        return -1;
    char *dir = e2e_temp_dir();
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\n"
             " \"listen\": \"127.0.0.1:0\", \"workers\": 2,\n"
             " \"database\": \"%s/bp.db\", \"require_keys\": false,\n"
             " \"providers\": {\n"
             "  \"fake\": {\"kind\": \"openai\", \"base_url\": "
             "\"http://127.0.0.1:%d/v1\",\n"
             "   \"api_key\": \"sk-bp-0123456789\", \"timeout_ms\": 120000,\n"
             "   \"first_byte_timeout_ms\": 20000,\n"
             "   \"models\": {\"m\": {\"input_per_mtok\": 1, "
             "\"output_per_mtok\": 2}}}\n"
             " },\n"
             " \"routes\": {\"main\": {\"policy\": \"priority\", "
             "\"targets\": [\"m@fake\"]}}\n"
             "}\n",
             dir, fake.port);
    free(dir);
    char *path = e2e_write_temp("bp.json", cfg);
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *argv[] = {(char *)bin, "serve", "--config", path, NULL};
    int rc = e2e_start(&gw, argv, "listening on http://127.0.0.1:", 20000);
    free(path);
    return rc;
}

static void
test_slow_clients(void)
{
    /* Warm up (connections, first allocations), then take the baseline. */
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/chat/completions",
             gw.port);
    for (int i = 0; i < 3; i++) {
        struct e2e_resp r;
        T_EQ_INT(e2e_http("POST", url,
                          "{\"model\":\"main\",\"stream\":true,\"messages\":"
                          "[{\"role\":\"user\",\"content\":\"fake:big="
                          "200000;chunks=20\"}]}",
                          NULL, 20000, &r),
                 0);
        T_EQ_INT(r.status, 200);
        e2e_resp_free(&r);
    }
    long base_kb = 0;
    for (int i = 0; i < 5; i++) {
        long kb = rss_kb(gw.pid);
        if (kb > base_kb)
            base_kb = kb;
        usleep(20 * 1000);
    }
    T_CHECK(base_kb > 0);

    atomic_store(&sampling, 1);
    atomic_store(&rss_max_kb, base_kb);
    pthread_t sampler, th[N_CLIENTS];
    pthread_create(&sampler, NULL, sampler_main, NULL);
    struct client cl[N_CLIENTS];
    memset(cl, 0, sizeof(cl));
    long long t0 = mono_ms();
    for (int i = 0; i < N_CLIENTS; i++) {
        cl[i].idx = i;
        pthread_create(&th[i], NULL, client_main, &cl[i]);
    }
    for (int i = 0; i < N_CLIENTS; i++)
        pthread_join(th[i], NULL);
    long long took = mono_ms() - t0;
    atomic_store(&sampling, 0);
    pthread_join(sampler, NULL);

    long long total = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        struct client *c = &cl[i];
        if (c->err[0])
            fprintf(stderr, "  client %d: %s\n", i, c->err);
        T_EQ_INT(c->status, 200);
        T_CHECK(c->chunked_end);
        T_CHECK(c->done);
        T_EQ_INT(c->bad_events, 0);
        T_EQ_INT(c->events, CHUNKS + 2); /* role, content..., stop */
        T_EQ_INT(c->content, BIG);
        total += c->wire;
    }
    long grow_kb = atomic_load(&rss_max_kb) - base_kb;
    fprintf(stderr,
            "  %d slow clients, %.1f MB through llmux in %.1f s; llmux RSS "
            "baseline %.1f MB, peak +%.1f MB (bound +%d MB), %ld samples\n",
            N_CLIENTS, (double)total / 1e6, (double)took / 1000.0,
            (double)base_kb / 1024.0, (double)grow_kb / 1024.0, RSS_BOUND_MB,
            atomic_load(&rss_samples));
    T_CHECK(atomic_load(&rss_samples) >= 10);
    T_CHECK(total > (long long)N_CLIENTS * BIG);
    T_CHECK(grow_kb < RSS_BOUND_MB * 1024L);
}

/* After the slow streams the gateway still answers (nothing stuck paused). */
static void
test_still_serving(void)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/chat/completions",
             gw.port);
    struct e2e_resp r;
    T_EQ_INT(e2e_http("POST", url,
                      "{\"model\":\"main\",\"messages\":[{\"role\":\"user\","
                      "\"content\":\"hi\"}]}",
                      NULL, 10000, &r),
             0);
    T_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

int
main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    signal(SIGPIPE, SIG_IGN);
    if (start_all() != 0) {
        fprintf(stderr, "could not start the fake provider or llmux\n");
        e2e_stop(&fake, SIGKILL, 1000);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_slow_clients);
    T_RUN(test_still_serving);
    T_EQ_INT(e2e_stop(&gw, SIGTERM, 10000), 0);
    e2e_stop(&fake, SIGTERM, 10000);
    T_EQ_INT(e2e_sanitizer_reports, 0);
    curl_global_cleanup();
    return T_END();
}
