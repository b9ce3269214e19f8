/*
 * providers_int.h: structs shared inside providers/ only (loop.c, the
 * kinds, the registry).  Never include this from another folder.
 *
 * A pv_call is the common head of every kind's call: the loop it runs on,
 * its ops, the caller's callbacks and its result.  HTTP kinds (openai.c,
 * later anthropic.c ...) run through the transfer layer in loop.c and fill
 * a pv_http_hooks table; other kinds (local.c) keep their own state in
 * impl and use only the head.
 *
 * Deferred work: libcurl forbids adding/removing handles from inside its
 * callbacks, and a caller's callback may cancel a call, start another or
 * resume one.  While loop->depth > 0 (we are inside libcurl or inside a
 * caller's callback) such work is only recorded on the pending list;
 * pv_loop_settle() runs it once the stack has unwound.
 */
#ifndef LLMUX_PROVIDERS_INT_H
#define LLMUX_PROVIDERS_INT_H

#include "providers.h"

#include <curl/curl.h>
#include <event2/event.h>

struct pv_sock;

/* Easy handles kept for reuse per loop: curl_easy_init + cleanup per call
 * showed in profiles; a reset handle is much cheaper. */
#define PV_EASY_POOL 64

struct pv_loop {
    struct event_base *base;
    CURLM *multi;
    struct event *timer;     /* libcurl's single timeout */
    struct event *kick;      /* activated when deferred work is queued */
    struct pv_call *calls;   /* every call not yet freed */
    struct pv_call *pending; /* calls with deferred work (pend_next) */
    struct pv_sock *socks;   /* every socket event we hold */
    size_t n_active;         /* started, not done, not cancelled */
    int depth;               /* >0: inside libcurl or a callback */
    int closing;             /* pv_loop_free is running */
    CURL *easy_pool[PV_EASY_POOL];
    int n_easy_pool;
    int settling;
};

struct pv_call;

/* What an HTTP kind plugs into the transfer layer. */
struct pv_http_hooks {
    /* Body bytes as they arrive.  Returns 0 to go on; on failure sets
     * call->fail (and call->res.detail) and returns -1: the transfer stops
     * and that outcome is reported. */
    int (*on_body)(struct pv_call *call, const char *p, size_t n);
    /* The transfer ended without a transport error (CURLE_OK): set
     * res.outcome, body, usage from what was received. */
    void (*on_finish)(struct pv_call *call);
    /* Frees call->impl. */
    void (*free_impl)(struct pv_call *call);
};

struct pv_call {
    const struct pv_ops *ops;
    struct pv_loop *loop;
    struct pv_callbacks cb;
    struct pv_call *prev, *next; /* loop->calls */
    struct pv_call *pend_next;   /* loop->pending */
    int pending;                 /* on loop->pending */
    int cancelled;               /* no callback may run any more */
    int finished;                /* on_done was (being) delivered */
    int dead;                    /* free at the next settle */
    char request_id[64];
    int64_t t_start_us;          /* gx_mono_us at start */
    struct pv_result res;
    struct pv_scrub *scrub;      /* the provider's secrets; NULL: none */
    enum pv_outcome fail;        /* set with failed = 1 by a hook */
    int failed;

    /* HTTP transfer state */
    const struct pv_http_hooks *hooks;
    CURL *easy;
    int added;                   /* easy is on the multi */
    int need_add;
    int need_resume;
    struct curl_slist *headers;
    char *req_body;
    struct event *fb_timer;      /* first-byte timeout */
    int fb_timeout_ms;
    int connected;               /* a connection was ready (prereq) */
    int sends;                   /* prereq calls: sends libcurl began */
    int resend_refused;          /* we refused a second send */
    int paused;                  /* caller asked to pause */
    int recv_paused;             /* we returned CURL_WRITEFUNC_PAUSE */
    int head_done;
    int got_body;
    int64_t body_max;
    char content_type[128];
    char errbuf[CURL_ERROR_SIZE];

    void *impl; /* the kind's own state */
};

/* Ops of each kind (one file each). */
extern const struct pv_ops pv_openai_ops;
extern const struct pv_ops pv_local_ops; /* providers/local.c */

/* registry.c: the kind for a provider, NULL when none is built in. */
const struct pv_ops *pv_ops_for(enum cfg_kind kind);

/* loop.c: the HTTP transfer layer. */

/* Allocates a call on loop with the common head filled (not yet started).
 * impl_size bytes of zeroed kind state are allocated behind call->impl. */
struct pv_call *pv_call_alloc(struct pv_loop *loop, const struct pv_ops *ops,
                              const struct pv_request *req,
                              const struct pv_callbacks *cb,
                              size_t impl_size);

/* Starts an HTTP POST of body (takes ownership of body and headers) to url
 * with the provider's timeouts.  On failure frees the call and returns
 * GX_ENOMEM/GX_EINVAL; no callback runs. */
enum gx_status pv_http_start(struct pv_call *call,
                             const struct pv_http_hooks *hooks,
                             const struct cfg_provider *prov, const char *url,
                             struct curl_slist *headers, char *body,
                             size_t body_len, char *err, size_t errlen);

/* The generic cancel/pause/resume for HTTP kinds (their pv_ops use them). */
void pv_http_cancel(struct pv_call *call);
void pv_http_pause(struct pv_call *call);
void pv_http_resume(struct pv_call *call);

/* Calls the caller's on_event/on_head unless cancelled; runs with
 * loop->depth raised so the callback's own pv_* calls are deferred. */
void pv_call_emit_event(struct pv_call *call, const char *data, size_t len);

/* Records a failure (first one wins) with a detail sentence. */
void pv_call_failf(struct pv_call *call, enum pv_outcome o, const char *fmt,
                   ...) __attribute__((format(printf, 3, 4)));

/* For non-HTTP kinds: delivers on_done with call->res (total_us filled
 * here) and schedules the free.  Call with loop->depth == 0 or from a
 * deferred context; runs pv_loop_settle when it can. */
void pv_call_complete(struct pv_call *call);

/* Runs deferred work when no frame is on the stack. */
void pv_loop_settle(struct pv_loop *loop);

/* json_scan.c: a strict non-allocating validator of a chat completion body
 * or stream chunk that reads usage as pv_usage_parse would from the tree
 * json_loadb(flags 0) builds. */
#define PV_JS_MAX_DEPTH 256
enum pv_js_verdict {
    PV_JS_INVALID = 0, /* json_loadb fails, or the top is not an object */
    PV_JS_OBJECT = 1,  /* json_loadb gives an object; *out is filled */
    PV_JS_UNSURE = 2,  /* not decided here (too deep, escaped key, ...):
                        * use jansson */
};
struct pv_js_chat {
    int has_choices;       /* the object has a "choices" member (any type) */
    int choices_empty;     /* ... and its (last) value is [] */
    int has_error;         /* the object has an "error" member */
    struct pv_usage usage; /* as pv_usage_parse; have = 0 when none */
};
enum pv_js_verdict pv_json_scan_chat(const char *data, size_t n,
                                     struct pv_js_chat *out);
/* A usage count from a JSON number: (int64_t)d for 0 < d < 2^63, 0 for
 * negative or NaN, INT64_MAX from 2^63 on (a plain cast would be
 * undefined there). */
int64_t pv_usage_num(double d);
/* Negative counts to 0, cached_tokens at most prompt_tokens. */
void pv_usage_clamp(struct pv_usage *u);
/* The bytes json_dumps(j, JSON_COMPACT) gives for an object or array,
 * built faster (malloc'd, NUL-terminated, length in *len).  NULL when it
 * cannot be sure of matching (invalid UTF-8, very deep nesting) or on out
 * of memory: then use json_dumps. */
char *pv_json_dump_compact(const json_t *j, size_t *len);

#endif
