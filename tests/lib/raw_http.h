/*
 * raw_http: an HTTP/1.1 client on a plain socket for end-to-end tests
 * that need what libcurl hides: the socket's receive buffer set before
 * connect, reading the head and then nothing, the exact bytes on the
 * wire.  Every read is bounded by a deadline and a byte cap.
 * Memory: a raw_conn's buffer is its own (raw_close frees it); the body
 * and events returned by the parsers are the caller's (free them, and
 * each event string).
 */
#ifndef LLMUX_TEST_RAW_HTTP_H
#define LLMUX_TEST_RAW_HTTP_H

#include <stddef.h>

struct raw_conn {
    int fd;
    char *in;    /* everything read so far, NUL-terminated */
    size_t len;  /* bytes in in */
    size_t cap;
};

/* Connects to 127.0.0.1:port.  rcvbuf > 0: SO_RCVBUF = rcvbuf and a small
 * TCP_MAXSEG (so the peer's send buffer, sized from the MSS, stays small
 * too) are set before connect, so the advertised window stays small.
 * 0 on success. */
int raw_open(struct raw_conn *c, int port, int rcvbuf);
/* The socket's receive buffer as the kernel keeps it (getsockopt). */
int raw_rcvbuf(const struct raw_conn *c);
/* Sends a POST of a JSON body with Connection: close.  0 on success. */
int raw_post(struct raw_conn *c, const char *path, const char *body);
/* Reads at most `step` bytes at a time until in holds marker (0), EOF,
 * max bytes or the deadline (-1). */
int raw_read_until(struct raw_conn *c, const char *marker, size_t step,
                   size_t max, int timeout_ms);
/* Reads until EOF (0), or max bytes / the deadline (-1). */
int raw_read_all(struct raw_conn *c, size_t max, int timeout_ms);
void raw_close(struct raw_conn *c);

/* The status and de-chunked body of one response in raw[0..len).
 * Returns 1 when the body was chunked and ended with its 0-size chunk, 0
 * when it was not chunked (the rest is the body), -1 when malformed or
 * cut.  *body is malloc'd (NUL-terminated). */
int raw_response(const char *raw, size_t len, int *status, char **body,
                 size_t *body_len);
/* The data payloads of the SSE events in body[0..len), in order (one
 * "data: " line per event, as llmux writes them); *n_out their count.
 * Returns the array (malloc'd; NULL when there is none). */
char **raw_sse_events(const char *body, size_t len, size_t *n_out);
void raw_sse_free(char **ev, size_t n);

#endif
