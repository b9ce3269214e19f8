/*
 * Incremental parser for the event-stream format (text/event-stream), as
 * upstream providers send it:
 *
 *   stream = *event
 *   event  = *(comment / field) end-of-line     ; a blank line dispatches
 *   comment = ":" *any-char end-of-line          ; ignored
 *   field  = name [":" [" "] value] end-of-line  ; "data" and "event" kept
 *   end-of-line = CRLF / LF / CR
 *   (a UTF-8 BOM before the first line is dropped)
 *
 * Bytes may arrive in any slices: a line is collected in p->line until its
 * end, and a CR at the end of one slice followed by LF at the start of the
 * next counts as one line end (p->skip_lf).  Several "data" lines of one
 * event are joined with '\n'.  An event without any data line dispatches
 * nothing (as browsers do).  An event still open when the stream ends is
 * dropped by the caller simply not feeding more (the format says so).
 * "event" sets p->event for the event being collected (reset at every
 * blank line, as the spec resets the event type buffer); "id" and
 * "retry" only matter to a browser reconnecting, so they are skipped.
 * Field names are case-sensitive; a line without a colon is a field name
 * with an empty value ("data" alone adds an empty line to the data).
 * An event whose one data line lies in the slice being fed (the common
 * case: a whole "data: {...}" line and its blank line in one read) is
 * passed from that slice without a copy (p->pend); it is copied into
 * p->data only when a second data line joins it or the slice ends first.
 *
 * Bounds: a single line longer than max_line bytes, or an event's data
 * longer than max_line bytes, makes pv_sse_feed return GX_ETOOBIG; the
 * parser is then in an unspecified state and should be cleaned up.
 */
#include "providers.h"

#include <string.h>

void
pv_sse_init(struct pv_sse *p, size_t max_line)
{
    gx_buf_init(&p->line, max_line);
    gx_buf_init(&p->data, max_line);
    p->pend = NULL;
    p->pend_len = 0;
    p->have_data = 0;
    p->skip_lf = 0;
    p->started = 0;
    p->event[0] = '\0';
}

void
pv_sse_cleanup(struct pv_sse *p)
{
    gx_buf_cleanup(&p->line);
    gx_buf_cleanup(&p->data);
    p->pend = NULL;
    p->have_data = 0;
    p->skip_lf = 0;
}

/* The pending data line (in the caller's slice) into p->data. */
static enum gx_status
sse_keep(struct pv_sse *p)
{
    if (!p->pend)
        return GX_OK;
    enum gx_status st = gx_buf_append(&p->data, p->pend, p->pend_len);
    p->pend = NULL;
    return st;
}

/* One complete line (without its end) is in s[0..n); in_slice: s points
 * into the slice being fed (valid until pv_sse_feed returns). */
static enum gx_status
sse_line(struct pv_sse *p, const char *s, size_t n, int in_slice,
         pv_sse_cb cb, void *ud)
{
    if (n == 0) {
        if (p->have_data) {
            /* data.data may be NULL for an empty "data:" line. */
            const char *d = p->pend ? p->pend
                            : p->data.data ? p->data.data : "";
            size_t dl = p->pend ? p->pend_len : p->data.len;
            p->have_data = 0;
            p->pend = NULL;
            if (cb)
                cb(ud, d, dl);
            gx_buf_reset(&p->data);
        }
        p->event[0] = '\0';
        return GX_OK;
    }
    if (s[0] == ':')
        return GX_OK;
    const char *colon = memchr(s, ':', n);
    size_t name_len = colon ? (size_t)(colon - s) : n;
    const char *v = colon ? colon + 1 : s + n;
    size_t vl = (size_t)(s + n - v);
    if (vl > 0 && v[0] == ' ') {
        v++;
        vl--;
    }
    if (name_len == 5 && memcmp(s, "event", 5) == 0) {
        if (vl > PV_SSE_EVENT_MAX)
            vl = PV_SSE_EVENT_MAX;
        memcpy(p->event, v, vl);
        p->event[vl] = '\0';
        return GX_OK;
    }
    if (name_len != 4 || memcmp(s, "data", 4) != 0)
        return GX_OK; /* id, retry and unknown fields: not ours */
    enum gx_status st;
    if (!p->have_data && in_slice) {
        p->pend = v;
        p->pend_len = vl;
        p->have_data = 1;
        return GX_OK;
    }
    if (p->have_data) {
        st = sse_keep(p);
        if (st == GX_OK)
            st = gx_buf_append(&p->data, "\n", 1);
        if (st != GX_OK)
            return st;
    }
    st = gx_buf_append(&p->data, v, vl);
    if (st != GX_OK)
        return st;
    p->have_data = 1;
    return GX_OK;
}

static enum gx_status sse_feed(struct pv_sse *p, const char *buf, size_t len,
                               pv_sse_cb cb, void *ud);

enum gx_status
pv_sse_feed(struct pv_sse *p, const char *buf, size_t len, pv_sse_cb cb,
            void *ud)
{
    enum gx_status st = sse_feed(p, buf, len, cb, ud);
    /* The slice is the caller's: a data line still waiting for its blank
     * line is kept. */
    enum gx_status kst = sse_keep(p);
    return st != GX_OK ? st : kst;
}

static enum gx_status
sse_feed(struct pv_sse *p, const char *buf, size_t len, pv_sse_cb cb,
         void *ud)
{
    size_t i = 0;
    if (!p->started && len > 0) {
        /* The BOM may itself arrive split across feeds. */
        static const char bom[3] = {'\xEF', '\xBB', '\xBF'};
        size_t have = p->line.len;
        while (have < 3 && i < len && buf[i] == bom[have]) {
            have++;
            i++;
        }
        if (have == 3 || (i == len && have < 3 && have > 0)) {
            if (have == 3) {
                gx_buf_reset(&p->line);
                p->started = 1;
                buf += i;
                len -= i;
                i = 0;
            } else {
                /* A partial BOM so far: keep it until we know. */
                return gx_buf_append(&p->line, buf, len);
            }
        } else {
            /* Not a BOM: what was held is ordinary line text. */
            p->started = 1;
            i = 0;
        }
    }
    if (p->skip_lf && len > 0) {
        p->skip_lf = 0;
        if (buf[0] == '\n')
            i = 1;
    }
    while (i < len) {
        /* Find the next CR or LF from i without a byte-by-byte loop in the
         * common case: memchr for each and take the nearer. */
        const char *lf = memchr(buf + i, '\n', len - i);
        size_t lim = lf ? (size_t)(lf - buf) : len;
        const char *cr = memchr(buf + i, '\r', lim - i);
        size_t end = cr ? (size_t)(cr - buf) : lim;
        if (end == len) {
            /* No line end in the rest: keep it for the next feed. */
            return gx_buf_append(&p->line, buf + i, len - i);
        }
        enum gx_status st;
        if (p->line.len > 0) {
            st = gx_buf_append(&p->line, buf + i, end - i);
            if (st != GX_OK)
                return st;
            st = sse_line(p, p->line.data, p->line.len, 0, cb, ud);
            gx_buf_reset(&p->line);
        } else {
            if (end - i > p->line.max)
                return GX_ETOOBIG;
            st = sse_line(p, buf + i, end - i, 1, cb, ud);
        }
        if (st != GX_OK)
            return st;
        i = end + 1;
        if (buf[end] == '\r') {
            if (i < len) {
                if (buf[i] == '\n')
                    i++;
            } else {
                p->skip_lf = 1;
            }
        }
    }
    return GX_OK;
}
