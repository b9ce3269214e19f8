/*
 * think.c: a reasoning model's answer split into reasoning and content
 * (providers_int.h, pv_think).  The local provider feeds it the engine's
 * text as it arrives.
 */
#include <string.h>

#include "providers_int.h"

void
pv_think_init(struct pv_think *t, int mode)
{
    memset(t, 0, sizeof(*t));
    t->mode = mode;
    t->state = mode == 2 || mode == 4 || mode == 5       ? 4
               : mode == 1 || mode == 3 || mode == 6 ? 0
                                                     : 3;
}

static void
think_out(struct gx_buf *b, const char *s, size_t n)
{
    if (b && n)
        gx_buf_append(b, s, n);
}

/* One byte of a body that ends at the marker mk (ml bytes, whose first
 * byte, '<' or '[', occurs nowhere else in it): held while it matches
 * (t->np bytes), 1 once all of mk has come; a held prefix that stops
 * matching goes to `to` as text. */
static int
body_byte(struct pv_think *t, char ch, const char *mk, size_t ml,
          struct gx_buf *to)
{
    if (ch == mk[t->np]) {
        if (++t->np < ml)
            return 0;
        t->np = 0;
        return 1;
    }
    think_out(to, mk, t->np);
    t->np = ch == mk[0];
    if (!t->np)
        think_out(to, &ch, 1);
    return 0;
}

/* mode 3 (harmony): see providers_int.h */
static void
harmony_feed(struct pv_think *t, const char *s, size_t n, struct gx_buf *r,
             struct gx_buf *c, int final)
{
    static const char end[] = "<|end|>", msg[] = "<|message|>",
                      chan[] = "<|channel|>";
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (t->state == 0) {
            if (t->np == 0 && ch != '<') { /* no header: plain content */
                t->state = 3;
                think_out(c, &ch, 1);
                continue;
            }
            t->pend[t->np++] = ch;
            size_t ml = sizeof(msg) - 1;
            if (t->np >= ml && !memcmp(t->pend + t->np - ml, msg, ml)) {
                const char *ch0 = memmem(t->pend, t->np, chan, 11);
                int analysis = ch0 && (size_t)(ch0 - t->pend) + 11 + 8 <=
                                          t->np &&
                               !memcmp(ch0 + 11, "analysis", 8);
                t->state = analysis ? 1 : 3;
                t->np = 0;
            } else if (t->np == sizeof(t->pend)) {
                /* not a header after all: content */
                t->state = 3;
                think_out(c, t->pend, t->np);
                t->np = 0;
            }
            continue;
        }
        /* the message ends at <|end|>: a header follows */
        if (body_byte(t, ch, end, 7, t->state == 1 ? r : c))
            t->state = 0;
    }
    if (final && t->np) { /* a cut header's markers are dropped */
        if (t->state != 0)
            think_out(t->state == 1 ? r : c, end, t->np);
        else if (t->np < 2 || memcmp(t->pend, "<|", 2))
            think_out(c, t->pend, t->np);
        t->np = 0;
    }
}

/* Feeds s[0, n): reasoning bytes to r, content bytes to c (either NULL:
 * only the state moves); final: the answer ended, nothing is held. */
void
pv_think_feed(struct pv_think *t, const char *s, size_t n,
              struct gx_buf *r, struct gx_buf *c, int final)
{
    /* Mistral's markers are as long as the others: "[THINK]" (7 bytes),
     * "[/THINK]" (8) */
    const char *open = t->mode == 6 ? "[THINK]" : "<think>",
               *close = t->mode == 6 ? "[/THINK]" : "</think>";
    if (t->mode == 3) {
        harmony_feed(t, s, n, r, c, final);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (t->state == 0) {
            t->pend[t->np++] = ch;
            size_t b = 0; /* leading blanks */
            while (b < t->np && strchr(" \t\r\n", t->pend[b]))
                b++;
            size_t m = t->np - b;
            if (m == 0 && t->np < 8) /* at most 8 blanks before it */
                continue;
            if (m > 0 && m <= 7 && !memcmp(t->pend + b, open, m)) {
                if (m == 7) {
                    t->state = 4;
                    t->np = 0;
                }
                continue;
            }
            t->state = 3; /* no reasoning: all of it is content */
            think_out(c, t->pend, t->np);
            t->np = 0;
        } else if (t->state == 4 && strchr(" \t\r\n", ch)) {
            continue; /* the blanks that open the reasoning */
        } else if (t->state == 1 || t->state == 4) {
            t->state = body_byte(t, ch, close, 8, r) ? 2 : 1;
        } else if (t->state == 2 && strchr(" \t\r\n", ch)) {
            continue;
        } else {
            t->state = 3;
            think_out(c, s + i, n - i);
            break;
        }
    }
    if (final && t->np) { /* what was held back is what it looked like */
        think_out(t->state == 0 ? c : r, t->state == 0 ? t->pend : close,
                  t->np);
        t->np = 0;
    }
}
