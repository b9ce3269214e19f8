/*
 * libFuzzer target for the inbound connection layer's framing
 * (gateway/conn.c, gw_hparse): request line, headers, Content-Length and
 * chunked bodies, pipelined requests, all from a byte string.
 *
 * Byte 0 picks the read sizes the stream is cut into (as a socket would
 * deliver it, 1..64 bytes or all at once), byte 1 the body cap set at
 * each head.  Every request that completes is checked: a Content-Length
 * body arrived exactly, a chunked one within the cap, framing headers
 * obey the rules (one Content-Length of digits; Transfer-Encoding exactly
 * "chunked", never with Content-Length).  After an error nothing more is
 * parsed, as conn.c closes the connection.
 */
#include "../../gateway/gw_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_request(struct gw_hparse *p)
{
    const char *cl = gw_hparse_header(p, "Content-Length");
    const char *te = gw_hparse_header(p, "Transfer-Encoding");
    if (cl && te)
        abort(); /* ambiguous framing accepted */
    if (cl) {
        const char *s = cl;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s < '0' || *s > '9')
            abort(); /* "+36", "-1", "" accepted */
        if (p->body_len != p->content_length)
            abort();
    }
    if (p->chunked && p->body_max >= 0 && p->body_len > p->body_max)
        abort();
    if ((int64_t)evbuffer_get_length(p->body) != p->body_len)
        abort();
    /* Names are tokens, values free of controls (but HTAB). */
    size_t t = strlen(gw_hparse_url(p));
    for (size_t i = 0; i < p->n_hdr; i++) {
        const unsigned char *nm =
            (const unsigned char *)p->arena.data + p->hdr[i][0];
        const unsigned char *v =
            (const unsigned char *)p->arena.data + p->hdr[i][1];
        for (; *nm; nm++, t++)
            if (*nm <= ' ' || *nm >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}",
                                                    *nm))
                abort();
        for (; *v; v++, t++)
            if ((*v < ' ' && *v != '\t') || *v == 0x7f)
                abort();
    }
    (void)t;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t step = data[0] % 65; /* 0: everything at once */
    int64_t cap = (int64_t)data[1] * 64;
    const char *s = (const char *)data + 2;
    size_t n = size - 2, off = 0;
    struct gw_hparse p;
    if (gw_hparse_init(&p) != GX_OK)
        return 0;
    int requests = 0;
    while (off < n) {
        size_t len = step ? step : n - off;
        if (len > n - off)
            len = n - off;
        size_t pos = 0;
        while (pos < len) {
            size_t used = 0;
            enum gw_hp_event ev =
                gw_hparse_feed(&p, s + off + pos, len - pos, &used);
            if (used > len - pos)
                abort();
            pos += used;
            if (ev == GW_HP_ERROR) {
                if (p.err_status < 400 || !p.err_msg[0])
                    abort();
                goto out;
            }
            if (ev == GW_HP_HEAD) {
                if (!p.head_done)
                    abort();
                p.body_max = cap;
                if (p.content_length > cap)
                    goto out; /* conn.c answers 413 here */
            } else if (ev == GW_HP_DONE) {
                check_request(&p);
                requests++;
                if (!p.keep_alive)
                    goto out; /* conn.c closes after the reply */
                gw_hparse_next(&p);
            } else if (used == 0) {
                break;
            }
        }
        off += len;
    }
out:
    (void)requests;
    gw_hparse_cleanup(&p);
    return 0;
}
