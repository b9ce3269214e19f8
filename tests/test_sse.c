/*
 * Unit tests for the SSE parser (providers/sse.c): line endings, splits at
 * every byte position, multi-line data, comments, ignored fields, caps.
 */
#include "../providers/providers.h"
#include "harness.h"

/* The fuzz target's entry point, run here on generated inputs so CI
 * exercises it without libFuzzer. */
#include "fuzz/fuzz_sse.c"

#include <stdlib.h>
#include <string.h>

/* Collected events, joined as "<data>|" so a whole run compares as one
 * string. */
struct sink {
    char out[8192];
    size_t len;
    int n;
};

static void
sink_cb(void *ud, const char *data, size_t len)
{
    struct sink *s = ud;
    s->n++;
    if (s->len + len + 2 < sizeof(s->out)) {
        memcpy(s->out + s->len, data, len);
        s->len += len;
        s->out[s->len++] = '|';
        s->out[s->len] = '\0';
    }
}

static enum gx_status
parse_whole(const char *in, size_t max_line, struct sink *s)
{
    struct pv_sse p;
    memset(s, 0, sizeof(*s));
    pv_sse_init(&p, max_line);
    enum gx_status st = pv_sse_feed(&p, in, strlen(in), sink_cb, s);
    pv_sse_cleanup(&p);
    return st;
}

static void
test_line_endings(void)
{
    static const char *const ends[] = {"\n", "\r\n", "\r"};
    for (size_t e = 0; e < 3; e++) {
        char in[256];
        const char *E = ends[e];
        snprintf(in, sizeof(in), "data: one%s%sdata:two%s%s", E, E, E, E);
        struct sink s;
        T_EQ_INT(parse_whole(in, 1024, &s), GX_OK);
        T_EQ_STR(s.out, "one|two|");
        T_EQ_INT(s.n, 2);
    }
    /* Mixed endings in one stream. */
    struct sink s;
    T_EQ_INT(parse_whole("data: a\r\n\ndata: b\r\r\ndata: c\n\r", 64, &s),
             GX_OK);
    T_EQ_STR(s.out, "a|b|c|");
}

static void
test_crlf_split(void)
{
    /* "\r" at the end of one feed, "\n" at the start of the next: one line
     * end, not two (two would dispatch an empty line between). */
    struct pv_sse p;
    struct sink s;
    memset(&s, 0, sizeof(s));
    pv_sse_init(&p, 1024);
    T_EQ_INT(pv_sse_feed(&p, "data: x\r", 8, sink_cb, &s), GX_OK);
    T_EQ_INT(pv_sse_feed(&p, "\ndata: y\r", 9, sink_cb, &s), GX_OK);
    T_EQ_INT(s.n, 0);
    T_EQ_INT(pv_sse_feed(&p, "\n\r\n", 3, sink_cb, &s), GX_OK);
    T_EQ_STR(s.out, "x\ny|");
    T_EQ_INT(s.n, 1);
    pv_sse_cleanup(&p);
}

static const char sample[] =
    ": keep-alive comment\r\n"
    "event: message\r\n"
    "id: 7\n"
    "data: {\"a\":1}\n"
    "\n"
    "data:{\"b\":2}\r"
    "\r"
    "retry: 100\n"
    "data: line1\n"
    "data:  line2 (leading space kept)\n"
    "data\n"
    "\n"
    ":only a comment\n"
    "\n"
    "data:\n"
    "\n"
    "data: [DONE]\r\n"
    "\r\n"
    "data: not dispatched, no blank line";

static const char sample_expect[] =
    "{\"a\":1}|{\"b\":2}|line1\n line2 (leading space kept)\n||[DONE]|";

/* The event type of each event, as p->event showed it during the
 * callback. */
struct evsink {
    struct pv_sse *p;
    char types[256];
};

static void
evsink_cb(void *ud, const char *data, size_t len)
{
    (void)data;
    (void)len;
    struct evsink *e = ud;
    size_t l = strlen(e->types);
    snprintf(e->types + l, sizeof(e->types) - l, "%s|", e->p->event);
}

static void
test_bom_and_event(void)
{
    /* A UTF-8 BOM first is dropped, whole or split across feeds. */
    static const char in[] = "\xEF\xBB\xBF" "data: a\n\n";
    for (size_t cut = 0; cut <= 4; cut++) {
        struct pv_sse p;
        struct sink s;
        memset(&s, 0, sizeof(s));
        pv_sse_init(&p, 64);
        T_EQ_INT(pv_sse_feed(&p, in, cut, sink_cb, &s), GX_OK);
        T_EQ_INT(pv_sse_feed(&p, in + cut, strlen(in) - cut, sink_cb, &s),
                 GX_OK);
        T_EQ_STR(s.out, "a|");
        pv_sse_cleanup(&p);
    }
    /* Not a BOM: the bytes are kept (a field named "\xEF\xBBx": no data). */
    struct sink s;
    T_EQ_INT(parse_whole("\xEF\xBBx\ndata: b\n\n", 64, &s), GX_OK);
    T_EQ_STR(s.out, "b|");
    /* The event field types the event it belongs to, and is reset at the
     * blank line (also after an event without data). */
    struct pv_sse p;
    struct evsink e = {&p, ""};
    pv_sse_init(&p, 64);
    static const char ev[] = "event: error\ndata: {}\n\n"
                             "data: x\n\n"
                             "event: ping\n\n"
                             "data: y\nevent:delta\n\n";
    T_EQ_INT(pv_sse_feed(&p, ev, strlen(ev), evsink_cb, &e), GX_OK);
    T_EQ_STR(e.types, "error||delta|");
    pv_sse_cleanup(&p);
}

static void
test_sample_whole(void)
{
    struct sink s;
    T_EQ_INT(parse_whole(sample, 1024, &s), GX_OK);
    T_EQ_STR(s.out, sample_expect);
    T_EQ_INT(s.n, 5);
}

static void
test_every_split(void)
{
    size_t n = strlen(sample);
    int bad = 0;
    /* One split at each position. */
    for (size_t cut = 0; cut <= n; cut++) {
        struct pv_sse p;
        struct sink s;
        memset(&s, 0, sizeof(s));
        pv_sse_init(&p, 1024);
        if (pv_sse_feed(&p, sample, cut, sink_cb, &s) != GX_OK ||
            pv_sse_feed(&p, sample + cut, n - cut, sink_cb, &s) != GX_OK ||
            strcmp(s.out, sample_expect) != 0)
            bad++;
        pv_sse_cleanup(&p);
    }
    T_EQ_INT(bad, 0);
    /* Byte by byte. */
    struct pv_sse p;
    struct sink s;
    memset(&s, 0, sizeof(s));
    pv_sse_init(&p, 1024);
    for (size_t i = 0; i < n; i++)
        T_CHECK(pv_sse_feed(&p, sample + i, 1, sink_cb, &s) == GX_OK);
    T_EQ_STR(s.out, sample_expect);
    pv_sse_cleanup(&p);
    /* Random slices, fixed seed so a failure reproduces. */
    unsigned seed = 12345;
    bad = 0;
    for (int round = 0; round < 500; round++) {
        memset(&s, 0, sizeof(s));
        pv_sse_init(&p, 1024);
        size_t i = 0;
        while (i < n) {
            seed = seed * 1103515245u + 12345u;
            size_t k = 1 + (seed >> 16) % 17;
            if (k > n - i)
                k = n - i;
            if (pv_sse_feed(&p, sample + i, k, sink_cb, &s) != GX_OK)
                bad++;
            i += k;
        }
        if (strcmp(s.out, sample_expect) != 0)
            bad++;
        pv_sse_cleanup(&p);
    }
    T_EQ_INT(bad, 0);
}

static void
test_multiline_and_empty(void)
{
    struct sink s;
    T_EQ_INT(parse_whole("data: a\ndata: b\ndata: c\n\n", 64, &s), GX_OK);
    T_EQ_STR(s.out, "a\nb\nc|");
    /* Empty data lines still make an event; an event with no data line
     * does not. */
    T_EQ_INT(parse_whole("data:\n\nevent: x\n\n\n\ndata: \n\n", 64, &s),
             GX_OK);
    T_EQ_INT(s.n, 2);
    T_EQ_STR(s.out, "||");
    T_EQ_INT(parse_whole("data:\ndata:\n\n", 64, &s), GX_OK);
    T_EQ_STR(s.out, "\n|");
    /* Only one leading space is removed; "data" with no colon is empty. */
    T_EQ_INT(parse_whole("data:   x\n\ndata\n\n", 64, &s), GX_OK);
    T_EQ_STR(s.out, "  x||");
}

static void
test_comments_and_fields(void)
{
    struct sink s;
    T_EQ_INT(parse_whole(": hi\n:\nid: 1\nevent: e\nretry: 5\nfoo: bar\n"
                         "datax: no\nDATA: no\ndata: yes\n\n",
                         64, &s),
             GX_OK);
    T_EQ_STR(s.out, "yes|");
    T_EQ_INT(s.n, 1);
    /* A colon inside the value is kept. */
    T_EQ_INT(parse_whole("data: {\"k\":\"a:b\"}\n\n", 64, &s), GX_OK);
    T_EQ_STR(s.out, "{\"k\":\"a:b\"}|");
}

static void
test_cap(void)
{
    struct sink s;
    /* A line of exactly max bytes passes, one more fails. */
    char in[64];
    snprintf(in, sizeof(in), "data: %s\n\n", "0123456789"); /* 16 bytes */
    T_EQ_INT(parse_whole(in, 16, &s), GX_OK);
    T_EQ_STR(s.out, "0123456789|");
    T_EQ_INT(parse_whole(in, 15, &s), GX_ETOOBIG);
    /* The same when the long line arrives in pieces. */
    struct pv_sse p;
    memset(&s, 0, sizeof(s));
    pv_sse_init(&p, 15);
    enum gx_status st = GX_OK;
    for (size_t i = 0; in[i] && st == GX_OK; i++)
        st = pv_sse_feed(&p, in + i, 1, sink_cb, &s);
    T_EQ_INT(st, GX_ETOOBIG);
    T_EQ_INT(s.n, 0);
    pv_sse_cleanup(&p);
    /* A comment line is bounded too (memory is memory). */
    char big[200];
    memset(big, 'x', sizeof(big));
    big[0] = ':';
    big[sizeof(big) - 1] = '\0';
    T_EQ_INT(parse_whole(big, 100, &s), GX_ETOOBIG);
    /* Many short data lines whose join exceeds the cap. */
    T_EQ_INT(parse_whole("data: 0123456789\ndata: 0123456789\n\n", 20, &s),
             GX_ETOOBIG);
}

static void
test_no_callback(void)
{
    /* A NULL callback only consumes. */
    struct pv_sse p;
    pv_sse_init(&p, 64);
    T_EQ_INT(pv_sse_feed(&p, "data: a\n\n", 9, NULL, NULL), GX_OK);
    T_EQ_INT(pv_sse_feed(&p, "", 0, NULL, NULL), GX_OK);
    pv_sse_cleanup(&p);
    T_CHECK(p.line.data == NULL);
}

/* Random streams from SSE-ish pieces: fed whole, byte by byte and in
 * random slices, they give the same events (or the same cap error). */
static void
test_property_random(void)
{
    static const char *const parts[] = {
        "data:", "data: ", "data", ":", ": c", "event: e", "id: 1", "x",
        "{\"a\":1}", " ", "\r", "\n", "\r\n", "[DONE]", "retry: 3",
        "dat", "a:", "data: x\n", "\n\n", "\r\n\r\n", "data: y\r"};
    unsigned seed = 4242;
    int mismatches = 0, events = 0;
    for (int round = 0; round < 3000; round++) {
        char in[512];
        size_t n = 0;
        seed = seed * 1103515245u + 12345u;
        int np = 1 + (int)((seed >> 16) % 40);
        for (int k = 0; k < np; k++) {
            seed = seed * 1103515245u + 12345u;
            const char *p = parts[(seed >> 16) % (sizeof(parts) /
                                                  sizeof(parts[0]))];
            size_t pl = strlen(p);
            if (n + pl >= sizeof(in))
                break;
            memcpy(in + n, p, pl);
            n += pl;
        }
        struct sink a, b, c;
        struct pv_sse p;
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        memset(&c, 0, sizeof(c));
        pv_sse_init(&p, 64);
        enum gx_status sa = pv_sse_feed(&p, in, n, sink_cb, &a);
        pv_sse_cleanup(&p);
        pv_sse_init(&p, 64);
        enum gx_status sb = GX_OK;
        for (size_t i = 0; i < n && sb == GX_OK; i++)
            sb = pv_sse_feed(&p, in + i, 1, sink_cb, &b);
        pv_sse_cleanup(&p);
        pv_sse_init(&p, 64);
        enum gx_status sc = GX_OK;
        for (size_t i = 0; i < n && sc == GX_OK;) {
            seed = seed * 1103515245u + 12345u;
            size_t k = 1 + (seed >> 16) % 9;
            if (k > n - i)
                k = n - i;
            sc = pv_sse_feed(&p, in + i, k, sink_cb, &c);
            i += k;
        }
        pv_sse_cleanup(&p);
        /* On a cap error the events before it may differ by where the
         * error was noticed; only the error itself must agree. */
        if ((sa == GX_OK) != (sb == GX_OK) || (sa == GX_OK) != (sc == GX_OK))
            mismatches++;
        else if (sa == GX_OK &&
                 (strcmp(a.out, b.out) != 0 || strcmp(a.out, c.out) != 0))
            mismatches++;
        events += a.n;
        /* The fuzz entry point on the same bytes must not crash. */
        LLVMFuzzerTestOneInput((const uint8_t *)in, n);
    }
    T_EQ_INT(mismatches, 0);
    fprintf(stderr, "property: %d events\n", events);
    T_CHECK(events > 1000); /* the generator does make events */
}

int
main(void)
{
    T_RUN(test_line_endings);
    T_RUN(test_crlf_split);
    T_RUN(test_sample_whole);
    T_RUN(test_bom_and_event);
    T_RUN(test_every_split);
    T_RUN(test_multiline_and_empty);
    T_RUN(test_comments_and_fields);
    T_RUN(test_cap);
    T_RUN(test_no_callback);
    T_RUN(test_property_random);
    return T_END();
}
