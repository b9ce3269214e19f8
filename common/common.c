/*
 * common: see common.h.  Logging writes one fprintf per line so lines from
 * different threads do not interleave (stdio locks the stream per call).
 */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

_Atomic int gx_log_level = GX_LOG_WARN;

static const char *const status_words[] = {
    [GX_OK] = "ok",
    [GX_ENOMEM] = "out of memory",
    [GX_EINVAL] = "invalid input",
    [GX_EIO] = "input/output error",
    [GX_ENOTFOUND] = "not found",
    [GX_ETIMEDOUT] = "timed out",
    [GX_ECANCELED] = "cancelled",
    [GX_EPROTO] = "protocol error",
    [GX_ETOOBIG] = "too large",
    [GX_EAGAIN] = "try again",
    [GX_EDENIED] = "not allowed",
};

const char *
gx_status_str(enum gx_status st)
{
    if ((unsigned)st < sizeof(status_words) / sizeof(status_words[0]) &&
        status_words[st])
        return status_words[st];
    return "unknown status";
}

void
gx_log_init_from_env(void)
{
    const char *v = getenv("LLMUX_LOG");
    if (!v)
        return;
    if (!strcasecmp(v, "error"))
        gx_log_level = GX_LOG_ERROR;
    else if (!strcasecmp(v, "warn"))
        gx_log_level = GX_LOG_WARN;
    else if (!strcasecmp(v, "info"))
        gx_log_level = GX_LOG_INFO;
    else if (!strcasecmp(v, "debug"))
        gx_log_level = GX_LOG_DEBUG;
}

void
gx_log_write(int level, const char *request_id, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s [%s] %s\n",
            tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
            tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
            names[level < 0 ? 0 : level > 3 ? 3 : level],
            request_id ? request_id : "-", msg);
}

int64_t
gx_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
gx_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
gx_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void
gx_buf_init(struct gx_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max ? max : SIZE_MAX / 2;
}

void
gx_buf_cleanup(struct gx_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void
gx_buf_reset(struct gx_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

enum gx_status
gx_buf_append(struct gx_buf *b, const void *p, size_t n)
{
    if (n > b->max || b->len > b->max - n)
        return GX_ETOOBIG;
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return GX_ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return GX_OK;
}

enum gx_status
gx_buf_printf(struct gx_buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return GX_EINVAL;
    if ((size_t)n < sizeof(small))
        return gx_buf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return GX_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    enum gx_status st = gx_buf_append(b, big, (size_t)n);
    free(big);
    return st;
}

int
gx_secure_equal(const void *a, size_t alen, const void *b, size_t blen)
{
    /* Length is not secret (keys have a fixed shape); contents are. */
    if (alen != blen)
        return 0;
    const unsigned char *x = a, *y = b;
    unsigned char acc = 0;
    for (size_t i = 0; i < alen; i++)
        acc |= (unsigned char)(x[i] ^ y[i]);
    return acc == 0;
}

int
gx_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        unsigned c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        size_t len;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if ((size_t)(end - p) < len)
            return 0;
        for (size_t i = 1; i < len; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        p += len;
    }
    return 1;
}
