/*
 * providers: the provider interface and its kinds (openai.c, anthropic.c,
 * gemini.c, local.c), the registry of provider instances made from a
 * config (registry.c), the libcurl-multi-on-libevent HTTP client, and the
 * SSE parser.
 *
 * Threads: a pv_loop belongs to one worker thread (its event_base); every
 * pv_* call on a loop and every callback happens on that thread.
 *
 * A call's life: pv_call_start -> on_head (once, when the upstream status
 * is known) -> on_event (stream only, once per SSE event, in order) ->
 * on_done (exactly once) -> the call is freed by the loop after on_done
 * returns.  pv_call_cancel before on_done frees it at once; no callback
 * runs after cancel.  Callbacks may call pv_call_cancel on their own call
 * (not on_done) and may start other calls.
 */
#ifndef LLMUX_PROVIDERS_H
#define LLMUX_PROVIDERS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../common/common.h"
#include "../config/config.h"

struct event_base;
struct pv_loop;
struct pv_call;

/* Creates the per-worker client: a curl multi driven by base's events
 * (CURLMOPT_SOCKETFUNCTION / TIMERFUNCTION).  The caller owns the result. */
struct pv_loop *pv_loop_new(struct event_base *base, char *err, size_t errlen);
/* Cancels every call still running (no callbacks) and frees.  NULL ok. */
void pv_loop_free(struct pv_loop *loop);
/* Number of calls in flight on this loop. */
size_t pv_loop_active(const struct pv_loop *loop);

enum pv_outcome {
    PV_OK = 0,               /* 2xx and a well-formed body/stream */
    PV_ERR_CONNECT,          /* could not connect / DNS / TLS */
    PV_ERR_CONNECT_TIMEOUT,  /* connect_timeout_ms passed */
    PV_ERR_FIRST_BYTE_TIMEOUT, /* first_byte_timeout_ms passed */
    PV_ERR_TIMEOUT,          /* timeout_ms (total) passed */
    PV_ERR_TRANSPORT,        /* reset, truncated, stream dropped midway */
    PV_ERR_STATUS,           /* non-2xx status: see http_status, body */
    PV_ERR_MALFORMED,        /* 2xx but body/SSE not valid OpenAI JSON */
    PV_ERR_TOO_BIG,          /* upstream body over the cap */
    PV_ERR_INTERNAL          /* our side failed (memory, engine) */
};

/* Short reason for messages: "connect failed", "first byte timeout", ... */
const char *pv_outcome_str(enum pv_outcome o);

struct pv_usage {
    int have;                  /* 1 if the upstream reported usage */
    int64_t prompt_tokens;     /* includes cached_tokens, as OpenAI counts */
    int64_t completion_tokens;
    int64_t cached_tokens;     /* prompt_tokens_details.cached_tokens */
    /* Native kinds only (0 elsewhere).  Both are parts of the counts
     * above: cache_write_tokens of prompt_tokens (Anthropic's
     * cache_creation_input_tokens, billed at cache_write_pusd),
     * reasoning_tokens of completion_tokens (Gemini thoughtsTokenCount,
     * billed as output). */
    int64_t cache_write_tokens;
    int64_t reasoning_tokens;
};

/* Room for the upstream headers a client gets (pv_result.headers). */
#define PV_FWD_HEADERS_MAX 1024

struct pv_result {
    enum pv_outcome outcome;
    int http_status;      /* 0 when no status was received */
    const char *body;     /* non-stream: the whole upstream body (also on
                             PV_ERR_STATUS); NULL for streams, except on
                             PV_ERR_STATUS where it is the error body (cut
                             at max_body_bytes).  Borrowed: valid only
                             during on_done. */
    size_t body_len;
    struct pv_usage usage;
    int retry_after_s;    /* from a Retry-After header, else -1 */
    int64_t ttfb_us;      /* request start to first body byte, -1 if none */
    int64_t total_us;     /* request start to done */
    char detail[256];     /* human sentence; never contains a secret */
    /* 1 when a PV_ERR_STATUS 4xx is this target's own limit, not a fault
     * of the request: a parameter or value it does not implement (the
     * local engine's unsupported_parameter and unsupported_value, what
     * a native translation refuses before sending), or a prompt longer
     * than its context (the local engine's context_length_exceeded, an
     * upstream's 400 that says so: pv_error_is_context).  Another target
     * may serve the request, so the router moves on to the next one
     * (router.h, the run). */
    int other_may_serve;
    /* Upstream headers for the client, "name: value\n" lines with lower
     * case names: every x-ratelimit-* header, and the upstream's own
     * x-request-id (or request-id) as x-llmux-upstream-request-id.
     * Values are scrubbed; what does not fit is left out. */
    char headers[PV_FWD_HEADERS_MAX];
};

struct pv_callbacks {
    void *ud;
    /* Upstream status line and headers are in (status 2xx or not). */
    void (*on_head)(void *ud, int http_status);
    /* Stream only: one SSE event's data field (no "data: " prefix, no
     * trailing newline), e.g. "{...chunk...}" or "[DONE]".  data is
     * borrowed for the call.  The usage chunk llmux itself asked for
     * (include_usage added when the client did not) is not delivered. */
    void (*on_event)(void *ud, const char *data, size_t len);
    /* Exactly once, last. res is borrowed for the call. */
    void (*on_done)(void *ud, const struct pv_result *res);
};

struct pv_request {
    const struct pv_chat *chat; /* the parsed request (borrowed); body,
                                   stream and client_include_usage below
                                   are its fields, kept for the kinds */
    const struct cfg_provider *provider;
    const struct cfg_model *model; /* its upstream name replaces "model" */
    const json_t *body;  /* the client's parsed request; borrowed, not
                            changed (the provider copies what it edits) */
    int stream;          /* body's "stream" was true */
    int client_include_usage; /* client set stream_options.include_usage */
    const char *request_id;
    int64_t max_body_bytes; /* cap on the upstream response body */
    /* The instances of the config provider points into (borrowed, alive
     * while the caller's config is); kinds with instances (local) take
     * theirs from it.  NULL: none (such kinds then refuse to start). */
    const struct pv_registry *registry;
};

/* Starts req on loop; on success *out is the call (owned by the loop).
 * Returns GX_EINVAL with a sentence in err when the request cannot be
 * built (no callbacks then). */
enum gx_status pv_call_start(struct pv_loop *loop, const struct pv_request *req,
                             const struct pv_callbacks *cb,
                             struct pv_call **out, char *err, size_t errlen);

/* The call's forwardable upstream headers (as pv_result.headers) once
 * on_head ran; "" before.  Borrowed: valid until on_done returns. */
const char *pv_call_headers(const struct pv_call *call);

/* Stops the transfer (curl_multi_remove_handle) and frees the call; no
 * callback runs afterwards.  Idempotent-safe only before on_done. */
void pv_call_cancel(struct pv_call *call);

/* Backpressure: stop reading from upstream while the client is slow, and
 * go on later.  Both are cheap and idempotent.  Pause takes effect at the
 * next read (events already read in this read are still delivered);
 * resume hands held data over from a later loop turn, never from inside
 * pv_call_resume itself. */
void pv_call_pause(struct pv_call *call);
void pv_call_resume(struct pv_call *call);

/*
 * Provider instances (registry.c).  A pv_registry is the set of provider
 * instances made from one config: one per provider whose kind keeps state
 * of its own (today the local kind: its model loaded, its scheduler
 * running); the HTTP kinds have none and need no instance.
 *
 * Life.  The gateway makes one registry per config (at start and at each
 * reload) and frees it with the config's generation.  A registry holds a
 * reference on each of its instances, and each call on a provider holds
 * one on its instance for as long as it runs (local.c), so a reload that
 * changes or drops a provider lets the calls in flight (streams included)
 * finish on the old instance while new calls, made from the new config,
 * reach the new one.  The last reference stops the instance and frees it,
 * on a thread of its own (stopping a scheduler waits for its step, which
 * must not block an event loop).
 *
 * Reuse.  An instance of prev (the registry being replaced, or NULL) is
 * carried over, shared, when the new config's provider of the same name
 * and kind would make the same one (local: same model file, unchanged on
 * disk, and the same threads, context, parallel, queue, prefix_cache and
 * prefill_chunk): a reload that changes only routes or prices loads
 * nothing and keeps the prefix cache warm.
 *
 * pv_registry_new blocks while models load: call it off the event loops
 * (the main thread) and only after evthread_use_pthreads().  On an error
 * (a model that does not load) it returns GX_EINVAL or GX_ENOMEM with
 * "provider NAME: reason" in err and changes nothing: prev and its
 * instances are untouched.  c must outlive the registry (the registry
 * points into its providers).  pv_registry_free accepts NULL and may run
 * on any thread.  pv_registry_drain waits until every instance released
 * so far is freed (at exit, after the last registry and the last call are
 * gone).
 */
struct pv_registry;
enum gx_status pv_registry_new(const struct cfg *c,
                               const struct pv_registry *prev,
                               struct pv_registry **out, char *err,
                               size_t errlen);
void pv_registry_free(struct pv_registry *r);
void pv_registry_drain(void);

/* The exact prompt token count of the OpenAI chat body as provider p (a
 * local one of r's config) would generate from it: rendered with the
 * model's chat template (tools described as for a generation) and
 * tokenized.  Any thread while r lives (the model is read-only); costs a
 * tokenization.  0, or -1 with a reason in err (not a local provider, a
 * request it would refuse). */
int pv_local_count_tokens(const struct pv_registry *r,
                          const struct cfg_provider *p, const json_t *body,
                          int64_t *n, char *err, size_t errlen);

/* The scheduler counters of r's local instances, for /metrics (any
 * thread while r lives).  Instance i < pv_local_count(r), in config
 * order; the strings are r's config's (borrowed).  An instance replaced
 * by a reload starts from zero (a counter reset, as after a restart). */
struct pv_local_stat {
    const char *provider;
    const char *model;         /* the provider's first model name */
    int queued;                /* requests waiting for a sequence */
    int active;                /* sequences running (paused included) */
    int paused;                /* of active: held for a slow client */
    uint64_t generated_tokens; /* total */
    uint64_t prompt_tokens;    /* total, cached included */
    uint64_t cached_tokens;    /* prompt tokens served by the prefix cache */
};
size_t pv_local_count(const struct pv_registry *r);
void pv_local_stats(const struct pv_registry *r, size_t i,
                    struct pv_local_stat *out);

/* A provider instance: the common head of a kind's state made from one
 * provider's config (providers_int.h has its body). */
struct pv_inst;

/* A provider kind is a table: one file plus one line in the registry. */
struct pv_ops {
    const char *kind; /* "openai", "local", "anthropic", "gemini" */
    enum gx_status (*start)(struct pv_loop *loop, const struct pv_request *req,
                            const struct pv_callbacks *cb,
                            struct pv_call **out, char *err, size_t errlen);
    void (*cancel)(struct pv_call *call);
    void (*pause)(struct pv_call *call);
    void (*resume)(struct pv_call *call);
    /* Optional, for kinds with state of their own (NULL for the HTTP
     * kinds).  inst_new makes provider p's instance (its head set up with
     * pv_inst_init), or hands back prev (p's instance under the config
     * being replaced, NULL when none) with a new reference when prev can
     * serve p as it is; it may block (models load).  inst_free runs when
     * the last reference goes (any thread) and must end with
     * pv_inst_gone. */
    enum gx_status (*inst_new)(const struct cfg_provider *p,
                               struct pv_inst *prev, struct pv_inst **out,
                               char *err, size_t errlen);
    void (*inst_free)(struct pv_inst *inst);
};

/*
 * Incremental SSE parser (the event-stream format, per the WHATWG HTML
 * spec's "event stream interpretation"): feed any byte slices; each
 * complete event's data (multi-line data fields joined with '\n') is
 * passed to cb.  While cb runs, p->event holds the event's type ("" when
 * it had no event field, i.e. "message"); the data is not NUL-terminated
 * and is valid only during the call.  Comments, id and retry fields
 * are skipped; a leading UTF-8 BOM is dropped.  Lines longer than max_line
 * bytes make pv_sse_feed return GX_ETOOBIG.
 *
 * Re-emitting an event must write one "data:" line per line of its data: a data that spans several lines written after one
 * "data: " would leave its later lines as unknown fields.
 */
#define PV_SSE_EVENT_MAX 32 /* longer event types are cut (never matched) */
struct pv_sse {
    struct gx_buf line;
    struct gx_buf data;
    const char *pend; /* the event's one data line, in the slice being fed */
    size_t pend_len;
    int have_data;
    int skip_lf; /* last byte was CR */
    int started; /* past the (optional) BOM */
    char event[PV_SSE_EVENT_MAX + 1];
};
typedef void (*pv_sse_cb)(void *ud, const char *data, size_t len);
void pv_sse_init(struct pv_sse *p, size_t max_line);
void pv_sse_cleanup(struct pv_sse *p);
enum gx_status pv_sse_feed(struct pv_sse *p, const char *buf, size_t len,
                           pv_sse_cb cb, void *ud);

/*
 * The request, parsed once (request.c).
 *
 * An inbound adapter (today: OpenAI Chat Completions, gateway/chat.c)
 * parses the client's body ONCE into a struct pv_chat; every layer then
 * reads this struct and nothing re-reads the body for a fact it holds:
 *   - the gateway's admission (key limits, the budget reservation) takes
 *     est_prompt_tokens, max_prompt_tokens and completion_cap from it;
 *   - the router's plan (cost policy) takes est_prompt_tokens and
 *     completion_cap;
 *   - an outbound provider kind (pv_ops.start) reads model, stream,
 *     include_usage and the body it translates (openai.c passes it through
 *     with the upstream model name; local.c reads its messages and
 *     sampling fields);
 *   - the usage fallback (no usage from the upstream) uses
 *     est_prompt_tokens.
 * It is format-neutral on purpose: the next inbound formats (Anthropic
 * Messages, Responses) parse into the same struct (api says which one),
 * and the client-facing writer (errors, SSE framing) is chosen by api.
 * What the gateway adds per request (the key's reservation, the plan and
 * the run of it, router.h's struct rt_run) lives beside it in the
 * gateway's request, not here: providers sit below router and gateway.
 *
 * Checked (OpenAI's rules where it has them; the same 400 whichever
 * provider kind a target has):
 *   model            non-empty string
 *   messages         non-empty array of objects with a string "role";
 *                    "content" a string, an array of parts or null
 *   stream           boolean or null
 *   max_tokens, max_completion_tokens
 *                    integer in [1, PV_MAX_COMPLETION_TOKENS] or null
 *   n                integer in [1, PV_MAX_N] or null
 *   seed             integer or null
 *   temperature, top_p, presence_penalty, frequency_penalty
 *                    number or null
 *   stream_options   object or null; its include_usage boolean or null
 * Extra fields pass through unchanged.
 *
 * The one prompt estimate: (text bytes of every message's content, strings
 * or the "text" of content parts) / 4 + 4 per message.  The one default
 * completion size: PV_DEFAULT_COMPLETION_TOKENS when neither cap is given
 * (the budget's reservation and the cost policy's expected output alike).
 */
#define PV_MAX_COMPLETION_TOKENS 1000000 /* max_tokens, max_completion_tokens */
#define PV_MAX_N 128                     /* choices per request, as OpenAI */
/* What the anthropic kind sends as max_tokens (which the Messages API
 * requires) when the client gives neither cap; budgets reserve it. */
#define PV_ANTH_DEFAULT_MAX_TOKENS 4096
#define PV_DEFAULT_COMPLETION_TOKENS 1024 /* neither cap given */
#define PV_PART_BOUND_BYTES 1024 /* a non-text part (image...) in the bound */

enum pv_api {
    PV_API_CHAT = 0,     /* POST /v1/chat/completions (OpenAI) */
    PV_API_MESSAGES,     /* POST /v1/messages (Anthropic) */
    PV_API_RESPONSES,    /* POST /v1/responses (OpenAI Responses) */
    PV_API_EMBEDDINGS,   /* POST /v1/embeddings (OpenAI) */
    PV_API_COMPLETIONS   /* POST /v1/completions (OpenAI legacy) */
};

/* "chat", "messages", "responses", "embeddings", "completions": the
 * ledger's api column (static strings). */
const char *pv_api_name(enum pv_api api);

struct pv_chat {
    enum pv_api api;        /* the inbound format: picks the client writer */
    json_t *body;           /* the parsed body; NULL after pv_chat_parse's
                               fast path until pv_chat_body builds it: read
                               it through pv_chat_body */
    int owned;              /* 1: pv_chat_cleanup frees body */
    const char *model;      /* borrowed from body (or model_own) */
    /* pv_chat_parse's fast path (no tree): a copy of the client's bytes,
     * the span of the model's value (quotes included) in it, and the
     * model as a string; all owned, NULL/0 otherwise.  An outbound kind
     * that only swaps the model name splices text (openai.c). */
    char *text;
    size_t text_len;
    size_t model_at, model_len;
    char *model_own;
    int has_stream_options; /* fast path: the body has "stream_options" */
    int stream;             /* "stream": true */
    int include_usage;      /* stream_options.include_usage: true */
    int64_t n;              /* choices asked for, 1..PV_MAX_N */
    int64_t max_tokens;     /* larger of max_tokens, max_completion_tokens;
                               0 when neither is given (or completions'
                               max_tokens is 0) */
    int64_t completion_cap; /* (max_tokens or the default) x n: what an
                               upstream may bill as completion tokens (it
                               honours one of the two caps; which one
                               differs, so only the larger bounds it); 0
                               for none (embeddings, completions' echo
                               with max_tokens 0), which the router and
                               the budget take as it is */
    size_t n_messages;
    int64_t text_bytes;     /* content text of every message */
    int64_t n_other_parts;  /* content parts without text (images...) */
    int64_t est_prompt_tokens; /* the estimate above */
    int64_t max_prompt_tokens; /* upper bound: byte-level BPE makes at most
                                  one token a byte, plus framing, with
                                  PV_PART_BOUND_BYTES per non-text part */
    /* api != CHAT: the client's own body (freed with body when owned),
     * sent as it is (apart from the model name) by a kind that speaks
     * that API (pv_passthrough); body is then its OpenAI translation. */
    json_t *native;
    /* Features of native the translation cannot carry ("thinking, tools[1]
     * (type 'web_search_20250305')"); "" when none.  A target whose kind
     * is not a passthrough refuses such a request with a 400 naming them,
     * and nothing is sent. */
    char native_only[256];
    /* The client's anthropic-beta header (api MESSAGES; "" when none),
     * sent upstream on a passthrough unless the provider's own headers
     * set one.  Printable ASCII only (the gateway checks). */
    char anthropic_beta[512];
};

/* Why pv_chat_parse refused a body: the OpenAI error code to answer. */
enum pv_chat_err {
    PV_CHAT_OK = 0,
    PV_CHAT_BAD_JSON, /* "invalid_json": not JSON, or duplicate keys */
    PV_CHAT_INVALID   /* "invalid_value": a field breaks a rule above */
};

/* Parses and checks text[0..len) (the client's body, borrowed) into *c.
 * On PV_CHAT_OK *c owns the parsed body; otherwise *c holds nothing,
 * msg has a sentence for the client and *param the offending parameter
 * (NULL for the body as a whole; a static string). */
enum pv_chat_err pv_chat_parse(struct pv_chat *c, enum pv_api api,
                               const char *text, size_t len, char *msg,
                               size_t msglen, const char **param);
/* Checks an already parsed body and fills *c from it (c->body = body,
 * borrowed: pv_chat_cleanup does not free it).  0 or -1 as above. */
int pv_chat_from_json(struct pv_chat *c, enum pv_api api, json_t *body,
                      char *msg, size_t msglen, const char **param);
void pv_chat_cleanup(struct pv_chat *c); /* frees an owned body */
/* After a tree parse of text (the client's body, which jansson accepted
 * with duplicate keys refused) into c: keeps a copy of text and the span
 * of its one "model" value in c (text, text_len, model_at, model_len), so
 * a kind that speaks the client's own API splices the upstream name into
 * the client's bytes instead of re-serialising the tree.  drop_tree: also
 * frees c->body (c->model then points into model_own), so the openai kind
 * splices (its body NULL) and pv_chat_body rebuilds the tree for a kind
 * that needs one.  0, or -1 with c unchanged (the tree way stays). */
int pv_chat_keep_bytes(struct pv_chat *c, const char *text, size_t len,
                       int drop_tree);
/* For every inbound adapter (gateway/): the client's body parsed with
 * duplicate keys refused, or NULL with the sentence pv_chat_parse gives
 * for bad JSON in msg; the caller owns the result. */
json_t *pv_json_body(const char *text, size_t len, char *msg, size_t msglen);
/* o (stolen, may be NULL) as compact JSON, malloc'd, its length in
 * *out_len; NULL on out of memory. */
char *pv_json_dump(json_t *o, size_t *out_len);
/* Writes a refusal into msg, points *param at p (static), returns -1. */
int pv_refuse(char *msg, size_t len, const char **param, const char *p,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The parsed body as a jansson tree: c->body, built from c->text on the
 * first call after the fast path (the text was valid, so only out of
 * memory gives NULL).  The tree belongs to c; call it on the thread that
 * owns c (it caches into c although c is const here). */
json_t *pv_chat_body(const struct pv_chat *c);

/*
 * Secret scrubbing (scrub.c): a provider's api_key, header values and
 * base_url userinfo, masked with '*' (in place, same length) wherever an
 * upstream echoes them: raw, JSON-escaped (\u00XX, \/ ...), %-encoded,
 * hex-escaped (\x73, 0x73, 0x6b byte lists),
 * base64 (as in an echoed Basic header), hex (lower or upper case) of
 * those, and, for credentials of 12 or more characters, any run of 8 or
 * more of their leading characters; in streams also across events
 * (pv_scrub_event).  The rules are at the
 * top of scrub.c.  pv_scrub_new returns NULL when the provider has nothing
 * to scrub (or on out of memory); every other call accepts NULL.  The
 * object is read-only after creation (any thread), apart from its count
 * of holders: pv_scrub_share and pv_scrub_free of one object stay on one
 * thread.
 */
struct pv_scrub;
struct pv_scrub *pv_scrub_new(const struct cfg_provider *p);
/* s itself with one more holder when it was built from a provider whose
 * api_key, base_url and headers are byte for byte p's (so it masks the
 * same secrets); NULL otherwise (then build one with pv_scrub_new). */
struct pv_scrub *pv_scrub_share(struct pv_scrub *s,
                                const struct cfg_provider *p);
void pv_scrub_free(struct pv_scrub *s); /* drops a holder; the last frees */
/* Masks every match in buf[0..len); returns how many. */
size_t pv_scrub(const struct pv_scrub *s, char *buf, size_t len);
/* 1 if buf[0..len) holds a match. */
int pv_scrub_has(const struct pv_scrub *s, const char *buf, size_t len);
/* Streams: a secret split across events (the text of consecutive deltas)
 * is caught through a carry, one per stream, zeroed before its first
 * event, owned by the caller (no heap inside): the partial matches at the
 * ends of the string values of earlier events, by key.  pv_scrub_event
 * masks event data[0..len) like pv_scrub, and the continuation of a
 * carried match once the joined match counts, then updates cy; data is
 * left as it is: *masked is NULL when nothing was masked, else a malloc'd
 * masked copy of len bytes (the caller frees it).  Returns the masks
 * made, or -1 out of memory (*masked NULL). */
#define PV_SCRUB_CARRY 64 /* past that, the least advanced go (scrub.c) */
struct pv_scrub_carry {
    unsigned n;
    struct {
        char key[24]; /* the JSON key of the value (longer ones: not kept) */
        uint32_t pat, k; /* pattern, characters of it matched so far */
        /* an escape (%XX, \\x73, 0x73 ...) cut by the event's end: its
         * pend bytes in pb (scrub.c) */
        unsigned char pend, rawn;
        char pb[7];
    } m[PV_SCRUB_CARRY];
};
int pv_scrub_event(const struct pv_scrub *s, struct pv_scrub_carry *cy,
                   const char *data, size_t len, char **masked);

/*
 * The Anthropic Messages API inbound (messages.c; its top lists what is
 * translated, what is Anthropic-only and what is refused).  Pure functions.
 */
/* Parses and checks a Messages body into *c (api PV_API_MESSAGES, body
 * the OpenAI chat translation, native the client's body, both owned);
 * pv_chat_parse's contract otherwise.  count_only: the count_tokens body
 * (max_tokens optional). */
enum pv_chat_err pv_msgs_parse(struct pv_chat *c, const char *text,
                               size_t len, int count_only, char *msg,
                               size_t msglen, const char **param);
/* 1 if a provider of kind gets c's native body as it is (Messages to the
 * anthropic kind): its answer and events are then the upstream's own. */
int pv_passthrough(const struct pv_chat *c, enum cfg_kind kind);
/* The Messages answer for an OpenAI chat.completion body: model as given,
 * id "msg_" + id, usage from u (the request's settled usage).  malloc'd,
 * length in *out_len; NULL when body is not a chat.completion. */
char *pv_msgs_answer(const char *body, size_t len, const char *model,
                     const char *id, const struct pv_usage *u,
                     size_t *out_len);
/* The upstream body of a passthrough: the client's bytes as sent with
 * the value of "model" replaced by upstream (the tree dumped when
 * pv_msgs_parse could not place the model); malloc'd, NULL on out of
 * memory. */
char *pv_msgs_pass_request(const struct pv_chat *c, const char *upstream,
                           size_t *out_len);
/* A passthrough answer: the upstream's bytes with the value of its
 * top-level "model" replaced by model (the client's name for it); NULL if
 * not a JSON object. */
char *pv_msgs_pass_answer(const char *body, size_t len, const char *model,
                          size_t *out_len);
/* Anthropic's error type for an HTTP status (and llmux's OpenAI code:
 * insufficient_quota is billing_error): 400 invalid_request_error, 401
 * authentication_error, 403 permission_error, 404 not_found_error, 413
 * request_too_large, 429 rate_limit_error, 504 timeout_error, 529
 * overloaded_error, other 5xx api_error. */
const char *pv_msgs_error_type(int status, const char *code);
/* {"type":"error","error":{"type","message"}}; malloc'd. */
char *pv_msgs_error(int status, const char *code, const char *message,
                    size_t *out_len);
/* An error body in OpenAI's (or already Anthropic's) shape as Anthropic's. */
char *pv_msgs_error_from(const char *body, size_t len, int status,
                         size_t *out_len);
/* The client's stream: events appended to out as "event: T\ndata: J\n\n".
 * Functions return 0, or -1 on out of memory. */
struct pv_msgs_stream {
    char id[96];
    char model[128];
    int started;    /* message_start went out */
    int open;       /* the open block's kind (0 text, 1 thinking, 2 tool),
                       -1 none */
    int open_tool;  /* its OpenAI tool_calls index */
    int n_blocks;   /* blocks opened */
    int pass_stop;  /* passthrough: the upstream's message_stop was seen */
    int pass_error; /* passthrough: the upstream's error event went out */
    char *stop;     /* passthrough: that message_stop's data (owned) */
    size_t stop_len;
    const char *stop_reason; /* static */
};
void pv_msgs_stream_init(struct pv_msgs_stream *s, const char *model,
                         const char *id);
/* Frees what the stream holds (not s itself). */
void pv_msgs_stream_cleanup(struct pv_msgs_stream *s);
/* One OpenAI chunk (data of an SSE event) translated. */
int pv_msgs_stream_chunk(struct pv_msgs_stream *s, const char *data,
                         size_t len, struct gx_buf *out);
/* One upstream Messages event passed through: "event: TYPE\ndata: " and
 * the data's bytes as they came, apart from message_start's
 * message.model, which becomes the client's model; message_stop held
 * back for the end. */
int pv_msgs_stream_pass(struct pv_msgs_stream *s, const char *data,
                        size_t len, struct gx_buf *out);
/* The end of a complete answer: translated streams close the open block
 * and write message_delta (stop_reason, usage u) and message_stop;
 * passthrough (pass = 1) the held message_stop. */
int pv_msgs_stream_end(struct pv_msgs_stream *s, int pass,
                       const struct pv_usage *u, struct gx_buf *out);
/* An error event (a stream that failed after its first byte). */
int pv_msgs_stream_error(int status, const char *message, struct gx_buf *out);

/* Parses OpenAI "usage" from a response or chunk object; returns 1 if found. */
int pv_usage_parse(const json_t *obj, struct pv_usage *u);

#endif
