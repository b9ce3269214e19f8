/*
 * e2e: helpers for end-to-end tests: start a real program and learn its
 * port, make real HTTP requests with libcurl, write temp files.
 * Every wait is bounded.  Memory: e2e_resp fields are owned by the resp
 * and freed by e2e_resp_free.
 */
#ifndef LLMUX_TEST_E2E_H
#define LLMUX_TEST_E2E_H

#include <stddef.h>
#include <sys/types.h>

struct e2e_proc {
    pid_t pid;
    int port;     /* from the first line matching the pattern */
    int out_fd;   /* the child's stdout (read end) */
    char log_path[256]; /* its stderr */
};

/* Starts argv (argv[0] a path) with stdout piped; waits up to timeout_ms
 * for a line containing marker followed by a port number (e.g. "PORT " or
 * "listening on http://127.0.0.1:").  Returns 0 and fills p. */
int e2e_start(struct e2e_proc *p, char *const argv[], const char *marker,
              int timeout_ms);
/* Sends sig and waits up to timeout_ms; returns the exit status (as from
 * waitpid's WEXITSTATUS) or -1 (killed with SIGKILL after the timeout, or
 * died of a signal). */
int e2e_stop(struct e2e_proc *p, int sig, int timeout_ms);
/* Number of stopped processes whose stderr held a sanitizer report
 * (AddressSanitizer, LeakSanitizer, UBSan "runtime error"); e2e_stop prints
 * such a log.  Tests check it is 0 at the end. */
extern int e2e_sanitizer_reports;

/* Starts the fake provider ($FAKE_PROVIDER). */
int e2e_start_fake(struct e2e_proc *p);
/* Starts `llmux serve --config cfg` ($LLMUX_BIN, default
 * build/release/llmux) and waits for its listening line; -1 when cfg is
 * NULL or it did not start. */
int e2e_start_llmux(struct e2e_proc *p, const char *cfg, int timeout_ms);

struct e2e_resp {
    long status;
    char *body;     /* NUL-terminated */
    size_t body_len;
    char *headers;  /* raw header block, NUL-terminated */
    double total_s;
    int curl_code;  /* CURLcode */
};

/* One request.  method "GET"/"POST"/...; body may be NULL; extra_headers a
 * NULL-terminated list of "Name: value" or NULL.  timeout_ms bounds it. */
int e2e_http(const char *method, const char *url, const char *body,
             const char *const *extra_headers, int timeout_ms,
             struct e2e_resp *out);
void e2e_resp_free(struct e2e_resp *r);
/* Value of header name (case-insensitive) in r->headers, copied into buf;
 * returns buf or NULL. */
const char *e2e_header(const struct e2e_resp *r, const char *name, char *buf,
                       size_t len);

/* Writes text to a new file under a temp dir; returns a static-lifetime
 * path (malloc'd; caller frees). */
char *e2e_write_temp(const char *name, const char *text);
/* Writes text to path.tmp, then renames it over path, so a reader (a
 * SIGHUP reload) never sees a half-written file.  0 or -1. */
int e2e_replace_file(const char *path, const char *text);
/* Lines of p's stderr log holding needle (0 when it cannot be read). */
int e2e_log_count(const struct e2e_proc *p, const char *needle);
/* A fresh temp directory (malloc'd path). */
char *e2e_temp_dir(void);
/* Adds a small allocator quarantine to ASAN_OPTIONS for children started
 * afterwards: under ASan freed memory stays resident in the quarantine
 * (256 MB by default) and would look like growth to a test measuring a
 * child's RSS.  No effect on release builds. */
void e2e_small_asan_quarantine(void);
/* The first column of the first row of sql on the SQLite file db (opened
 * read-only, 5 s busy timeout); -1 when the query fails. */
long long e2e_db_int(const char *db, const char *sql);
/* Runs a real client script from tests/clients (the official SDKs and
 * playwright-core, installed there by `make clients` / npm ci) with
 * node: `node tests/clients/<script>`, with each "NAME=value" of env
 * (NULL-terminated, may be NULL) added to the environment, stdout and
 * stderr captured into *out (malloc'd, NUL-terminated; caller frees; may be
 * NULL) and the whole run bounded by timeout_s (then killed).  Returns the
 * script's exit status (0 = its checks passed), -1 when it could not be
 * run or was killed, and E2E_NO_CLIENTS when node or tests/clients's
 * node_modules is missing: the caller then skips, saying so, and fails if
 * LLMUX_REQUIRE_CLIENTS is set (CI). */
#define E2E_NO_CLIENTS (-2)
int e2e_node(const char *script, const char *const *env, int timeout_s,
             char **out);
/* Exact decimal USD text ("0.00187178") -> picodollars (1871780000),
 * parsed here rather than by pricing/ so tests check it independently;
 * -1 for NULL. */
long long e2e_usd_to_pusd(const char *s);
/* Environment helpers. */
const char *e2e_env(const char *name, const char *fallback);

/* The JSON objects of an SSE body's "data: {...}" records, in order, as a
 * JSON array (records that are not JSON objects, [DONE] among them, are
 * left out).  The caller owns it.  Needs jansson.h. */
struct json_t;
struct json_t *e2e_sse_objects(const char *body);
/* The text of the first choice's delta.FIELD ("content",
 * "reasoning_content") over the events evs (e2e_sse_objects) joined into
 * out[0, cap): its length (at most cap - 1; a NUL follows; bytes past it
 * are left out). */
size_t e2e_sse_deltas(const struct json_t *evs, const char *field,
                      char *out, size_t cap);
/* POST body to base + path (120 s timeout): the response as text in *raw
 * when raw is not NULL (malloc'd; caller frees), else parsed as JSON and
 * returned (NULL when not JSON, said on stderr); *status the HTTP status
 * or -1. */
struct json_t *e2e_post(const char *base, const char *path, const char *body,
                        long *status, char **raw);

#endif
