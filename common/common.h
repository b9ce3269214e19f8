/*
 * common: status codes, logging, time and bounded buffers shared by every
 * folder except local_engine (which has its own le_status so it builds alone).
 *
 * Ownership: gx_buf owns its data; gx_buf_cleanup frees it.  Nothing else
 * here allocates.  All functions are thread-safe unless stated.
 */
#ifndef LLMUX_COMMON_H
#define LLMUX_COMMON_H

#include <stddef.h>
#include <stdint.h>

enum gx_status {
    GX_OK = 0,
    GX_ENOMEM,    /* allocation failed */
    GX_EINVAL,    /* bad input (caller's or outside data) */
    GX_EIO,       /* file or socket error */
    GX_ENOTFOUND, /* no such thing (model, key, file) */
    GX_ETIMEDOUT, /* a deadline passed */
    GX_ECANCELED, /* cancelled by the caller */
    GX_EPROTO,    /* the other side broke the protocol */
    GX_ETOOBIG,   /* a size cap was hit */
    GX_EAGAIN,    /* try again later (full queue, rate limit) */
    GX_EDENIED    /* not allowed */
};

/* Returns a static English word for the status ("out of memory", ...). */
const char *gx_status_str(enum gx_status st);

enum gx_log_level {
    GX_LOG_ERROR = 0,
    GX_LOG_WARN = 1,
    GX_LOG_INFO = 2,
    GX_LOG_DEBUG = 3
};

/* Current level; lines above it are dropped before their arguments are
 * evaluated.  Set once at start (LLMUX_LOG=error|warn|info|debug). */
extern _Atomic int gx_log_level; /* SIGHUP may change it (log.level) */

/* One line to stderr: time, level, request id (or "-"), message.  Never log
 * a key, a provider secret or prompt text. */
void gx_log_write(int level, const char *request_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define GX_LOG(lvl, reqid, ...)                                              \
    do {                                                                     \
        if ((lvl) <= gx_log_level)                                           \
            gx_log_write((lvl), (reqid), __VA_ARGS__);                       \
    } while (0)

/* Reads LLMUX_LOG from the environment and sets gx_log_level. */
void gx_log_init_from_env(void);

/* Wall clock in milliseconds since the epoch. */
int64_t gx_now_ms(void);
/* Monotonic clock in microseconds (arbitrary origin). */
int64_t gx_mono_us(void);

/* Writes a formatted sentence into err (always NUL-terminated if errlen>0).
 * err may be NULL. */
void gx_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * A bounded growable byte buffer: appends fail with GX_ETOOBIG past max.
 * data is always NUL-terminated when non-NULL (the NUL is not counted).
 */
struct gx_buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max; /* bytes; 0 = SIZE_MAX/2 */
};

void gx_buf_init(struct gx_buf *b, size_t max);
void gx_buf_cleanup(struct gx_buf *b);
void gx_buf_reset(struct gx_buf *b); /* len = 0, keeps memory */
enum gx_status gx_buf_append(struct gx_buf *b, const void *p, size_t n);
enum gx_status gx_buf_printf(struct gx_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Constant-time comparison of two byte strings; 1 if equal. */
int gx_secure_equal(const void *a, size_t alen, const void *b, size_t blen);

/* Checks that s[0..n) is valid UTF-8 (no overlongs, no surrogates). */
int gx_utf8_valid(const char *s, size_t n);

#endif
