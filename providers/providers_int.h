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

#include <stdatomic.h>

#include <curl/curl.h>
#include <event2/event.h>

struct pv_sock;
struct pv_easy;

/* Easy handles kept for reuse per loop (loop.c struct pv_easy: a handle
 * and the options it carries): curl_easy_init + cleanup per call showed in
 * profiles, and so did curl_easy_reset + setting every option again. */
#define PV_EASY_POOL 64
/* Upstream URLs kept parsed per loop (loop.c url_parsed); past this many
 * distinct URLs a call's URL is parsed by libcurl as usual. */
#define PV_URL_CACHE 64
#define PV_SCRUB_CACHE 4 /* scrubbers a loop keeps (loop_scrub) */
/* Freed call heads kept per loop for the next calls (loop.c). */
#define PV_SPARE_CALLS 64

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
    struct pv_easy *easy_pool[PV_EASY_POOL];
    int n_easy_pool;
    int settling;
    struct pv_url {
        char *url;
        CURLU *u;
    } urls[PV_URL_CACHE];
    int n_urls;
    int no_proxy_env;        /* no proxy variable set at creation */
    struct pv_call *spare_calls; /* freed heads, linked by next */
    int n_spare_calls;
    /* Scrubbers of recent providers, one holder each (pv_scrub_share
     * checks they still match the provider): building one per call was
     * 2.5k instructions. */
    struct pv_scrub *scrubs[PV_SCRUB_CACHE];
    int next_scrub; /* the slot replaced next */
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

/* 1 when an upstream's error body says the prompt does not fit the
 * model's context (openai.c): OpenAI's code context_length_exceeded,
 * llama-server's type exceed_context_size_error (or its message, "exceeds
 * the available context size"), or the message of vLLM and DeepSeek
 * ("maximum context length"), Anthropic ("prompt is too long") or Gemini
 * ("exceeds the maximum number of tokens").  Such a 400 sets
 * pv_result.other_may_serve: a target with a longer context may serve. */
int pv_error_is_context(const char *body, size_t len);

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
    struct pv_scrub_carry carry; /* the stream's partial matches */
    enum pv_outcome fail;        /* set with failed = 1 by a hook */
    int failed;

    /* HTTP transfer state */
    const struct pv_http_hooks *hooks;
    CURL *easy;                  /* ez->easy */
    struct pv_easy *ez;
    int added;                   /* easy is on the multi */
    int need_add;
    int need_resume;
    struct curl_slist *headers; /* pv_http_headers' list, owned */
    struct curl_slist expect;   /* "Expect:" before headers, large bodies */
    char *req_body;
    struct event *fb_timer;      /* first-byte timeout (the easy handle's,
                                  * NULL once stopped) */
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
extern const struct pv_ops pv_anthropic_ops; /* providers/anthropic.c */
extern const struct pv_ops pv_gemini_ops;    /* providers/gemini.c */

/* registry.c: the kind for a provider, NULL when none is built in. */
const struct pv_ops *pv_ops_for(enum cfg_kind kind);

/* The head every kind's instance starts with (registry.c counts the
 * references; the kind's inst_free frees the rest). */
struct pv_inst {
    const struct pv_ops *ops;
    atomic_long refs;
    char name[128]; /* the provider's, for log lines */
};
/* Sets up a new instance's head: one reference (the caller's). */
void pv_inst_init(struct pv_inst *i, const struct pv_ops *ops,
                  const char *name);
void pv_inst_ref(struct pv_inst *i);
/* Drops a reference; the last one calls ops->inst_free.  NULL ok. */
void pv_inst_unref(struct pv_inst *i);
/* inst_free's last act, once the instance's memory is gone: lets
 * pv_registry_drain return. */
void pv_inst_gone(void);
/* Provider p's instance in r (p points into r's config; a provider of
 * the same name is accepted too), borrowed: valid while r lives, so a
 * call takes its own reference.  NULL when r is NULL or p has none. */
struct pv_inst *pv_registry_get(const struct pv_registry *r,
                                const struct cfg_provider *p);
/* The i-th instance of kind ops in r (config order) and its provider;
 * NULL past the last.  pv_registry_count: how many there are. */
struct pv_inst *pv_registry_nth(const struct pv_registry *r,
                                const struct pv_ops *ops, size_t i,
                                const struct cfg_provider **prov);
size_t pv_registry_count(const struct pv_registry *r,
                         const struct pv_ops *ops);

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
/* (pv_http_start puts an empty Expect, no 100-continue round trip, before
 * headers when body_len is over 1 KiB.) */

/* The request headers of every HTTP kind, in this order: Content-Type:
 * application/json, Accept (text/event-stream for a stream; empty, so
 * none is sent, otherwise), "<key_name>: <key_prefix><api_key>" when the provider has a key, the provider's configured headers,
 * "<extra_name>: <extra_value>" unless configured already (both NULL:
 * none), X-Request-Id.  On success *out is a new list for pv_http_start
 * (one allocation: free it with pv_http_headers_free, not
 * curl_slist_free_all, if it is not handed on); on failure *out is NULL
 * and err says why: GX_EINVAL for a value with a line break (the api_key,
 * a configured header, the request id), GX_ENOMEM. */
enum gx_status pv_http_headers(const struct pv_request *req,
                               const char *key_name, const char *key_prefix,
                               const char *extra_name,
                               const char *extra_value,
                               struct curl_slist **out, char *err,
                               size_t errlen);

void pv_http_headers_free(struct curl_slist *h);

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

/* A stream answer's first 2xx body bytes: checks once per call (*checked
 * set on the first call) that the upstream sent text/event-stream.
 * Returns 0 if so (or already checked), else fails call with
 * PV_ERR_MALFORMED naming the content type it got and returns -1. */
int pv_stream_ct_check(struct pv_call *call, int *checked);

/* For non-HTTP kinds: delivers on_done with call->res (total_us filled
 * here) and schedules the free.  Call with loop->depth == 0 or from a
 * deferred context; runs pv_loop_settle when it can. */
void pv_call_complete(struct pv_call *call);

/* Runs deferred work when no frame is on the stack. */
void pv_loop_settle(struct pv_loop *loop);

/* json_schema.c: a JSON Schema subset compiled to local-engine grammar
 * text (the subset and the output rules are listed at the top of the
 * file).  pv_gram_init starts the text with the shared rules (ws, j-value,
 * j-string, ...); pv_gram_schema appends the rules of one schema and
 * writes the name of its rule into name; on an unsupported or bad schema
 * it returns -1 with a sentence naming the keyword and where it is.  The
 * caller then appends its own `root ::= ...` line (pv_gram_literal writes
 * a quoted literal) and parses text with le_grammar_parse. */
struct pv_xml_fmt; /* tool_args.c */
struct pv_gram {
    struct gx_buf text;
    int n_rules;
    int xml; /* GLM's XML value rules written (pv_gram_xml_args) */
};
void pv_gram_init(struct pv_gram *g);
void pv_gram_cleanup(struct pv_gram *g);
int pv_gram_schema(struct pv_gram *g, const json_t *schema, char name[24],
                   char *err, size_t errlen);
void pv_gram_literal(struct pv_gram *g, const char *s, size_t n);
/* 1 when schema s takes strings only (type "string", or an enum or const
 * of strings): GLM's XML calls write such a value as its text, any other
 * as JSON. */
int pv_schema_is_text(const json_t *s);
/* The rule (name) of a tool's arguments (schema, an object's; NULL or {}:
 * any) as XML format f writes them (tool_args.c: GLM's, Qwen3-Coder's):
 * each listed property in order, KEY_OPEN K KEY_MID V CLOSE, V its text
 * for a text schema (pv_schema_is_text: any text without the close or a
 * NUL, or without the close's first byte when it has a length bound; an
 * enum's or const's text) else its JSON; a required name not listed, and
 * any name when the schema lists none and allows others, with a text
 * value.  0, or -1 with err set (the schema is not an object's, a name
 * holds '<' or KEY_MID's first byte, or what pv_gram_schema refuses). */
int pv_gram_xml_args(struct pv_gram *g, const json_t *schema,
                     const struct pv_xml_fmt *f, char name[24], char *err,
                     size_t errlen);

/* tool_args.c */
/* Where a JSON value ends, read as it arrives: from scan (set it to the
 * value's first byte, the rest 0) in buf[0, len); 1 with end set once it
 * has closed (a bare number or literal closes at the first byte that
 * cannot continue it, or at len when final).  Not a validator: the
 * grammar made the value. */
struct pv_jend {
    size_t scan, end;
    int depth, in_str, esc, scalar, started;
};
int pv_json_end(struct pv_jend *s, const char *buf, size_t len, int final);
/* A format of XML argument pairs: each KEY_OPEN K KEY_MID V CLOSE, END
 * after the last (GLM's: <arg_key>K</arg_key><arg_value>V</arg_value>
 * .. </tool_call>; Qwen3-Coder's: <parameter=K>\nV\n</parameter>\n ..
 * </function>). */
struct pv_xml_fmt {
    const char *key_open, *key_mid, *close, *end;
    const char *tag; /* its grammar rules' letter (pv_gram_xml_args) */
    const char *who; /* the model family, for messages */
};
extern const struct pv_xml_fmt pv_xml_glm, pv_xml_qwen3_coder;
/* The XML arguments x[0, n) of format f (a call's, from just after its
 * name) as the JSON object they stand for, as far as they are known,
 * appended to out: a longer x gives a longer text that starts with this
 * one (a stream sends the difference), and final (the output ended) only
 * adds what was held back.  A value is its parameter's text, JSON-quoted,
 * when keys (the tool's: name -> true for text, false for JSON) says so
 * or does not list it, else its JSON as it is; unless final, the end of
 * a text that may be starting its closing tag is held back.  1 once f's
 * END closes them, *end its offset. */
int pv_xml_args_json(const struct pv_xml_fmt *f, const json_t *keys,
                     const char *x, size_t n, int final, struct gx_buf *out,
                     size_t *end);
/* The same read as it arrives: each call appends to out what the longer
 * x adds, going on from st (zeroed before the first call; x the same
 * bytes as before and more), so that a stream does not read its call
 * again for every token.  1 once closed, st->end at END. */
enum { XR_BEGIN = 0, XR_PAIR, XR_TEXT, XR_JSON, XR_CLOSE, XR_DONE };
struct pv_xml_read {
    int stage, first;   /* XR_*; no pair written yet */
    size_t p, end;      /* where to go on in x; END's offset once closed */
    struct pv_jend js;  /* XR_JSON: the value's scan */
};
int pv_xml_args_read(const struct pv_xml_fmt *f, const json_t *keys,
                     const char *x, size_t n, int final, struct gx_buf *out,
                     struct pv_xml_read *st);
/* Bytes at the end of s[0, n) that begin a UTF-8 character not yet
 * complete (0 when it ends on a whole one). */
size_t pv_utf8_partial(const char *s, size_t n);

/* A tool call id as Mistral's templates require it, 9 characters
 * [a-zA-Z0-9] into out: the model's own for "call_" and 9 such (a Small
 * 3.2 answer's call as the local provider returned it), else the same 9
 * for the same id (a hash), so a call and its result name each other. */
void pv_mistral_id(const char *id, char out[10]);

/* think.c */
/*
 * A reasoning model's answer (le_chat_reasoning) split as it arrives into
 * its reasoning and its content: mode 1 the answer may open with
 * "<think>" (after blanks), mode 2 (and 4 and 5, deepseek3.1 and
 * glm4.7 reasoning) it starts inside the reasoning (the prompt opened
 * it), mode 6 as 1 with "[THINK]" and "[/THINK]" (magistral); the
 * reasoning ends at the first "</think>", and the
 * blanks after it and those that open the reasoning belong to neither
 * (the templates write "\n" and "\n\n" there).  Only ASCII is ever held
 * back (a possible "<think>" or "</think>"), so a cut never splits a
 * character.  state: 0 undecided (mode 1's start), 4 the blanks opening
 * the reasoning, 1 in it, 2 the blanks after it, 3 content.
 *
 * Mode 3 is OpenAI's harmony format (gpt-oss): the answer is messages,
 * each a header up to "<|message|>" ("<|channel|>analysis", later ones
 * after "<|start|>assistant"), a body, and "<|end|>" between them; the
 * analysis channel's bodies are the reasoning, every other channel's
 * (final, commentary) content, and the markers belong to neither.
 * state: 0 in a header (held in pend), 1 an analysis body, 3 another
 * body (np: how much of "<|end|>" its text ends with).
 */
struct pv_think {
    int mode, state;
    /* held back: state 0 the blanks and a prefix of "<think>" (pend);
     * state 1 how much of "</think>" the text ends with (np bytes) */
    char pend[64];
    size_t np;
};

void pv_think_init(struct pv_think *t, int mode);
/* Feeds s[0, n): reasoning bytes to r, content bytes to c (either NULL:
 * only the state moves); final: the answer ended, nothing is held. */
void pv_think_feed(struct pv_think *t, const char *s, size_t n,
                   struct gx_buf *r, struct gx_buf *c, int final);

/* request.c: the function an OpenAI "tool" message at msgs[before]
 * answers: the name of the call with its tool_call_id id in the
 * assistant messages before it; else, with latest, the last call of the
 * nearest one with calls (gpt-oss's template's rule); else NULL. */
const char *pv_tool_call_name(const json_t *msgs, size_t before,
                              const char *id, int latest);

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

/* The facts pv_chat needs from a client's chat request (request.c's fast
 * path).  pv_json_scan_request answers 0 only for a body json_loadb
 * (JSON_REJECT_DUPLICATES) accepts and request.c's rules pass, with the
 * facts as read from that tree; -1 means "take the jansson way" (which
 * words the error, if any). */
struct pv_js_req {
    int has_model, has_messages, has_stream_options;
    size_t model_at, model_len; /* model's value, quotes included */
    size_t n_messages;
    int stream, include_usage;
    int64_t n;                  /* 0: not given */
    int64_t max_tokens;         /* the larger cap, 0: none */
    int64_t text_bytes, n_other_parts;
};
int pv_json_scan_request(const char *data, size_t n, struct pv_js_req *out);
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
/* Where the values of chosen members lie in a JSON object text, for a
 * passthrough that changes one value and keeps every other byte (see
 * json_scan.c for the rules).  paths: at most 8 of "key" (top level) or
 * "key.sub" (a member of the object under top-level key).  Each
 * occurrence (duplicate keys included; jansson keeps the last) fills one
 * out[] entry {path index, value span with its quotes or brackets}, in
 * the order values start.  PV_JS_OBJECT: text is what json_loadb(flags 0)
 * accepts as an object and every span is in out; PV_JS_INVALID: jansson
 * rejects it or it is not an object; PV_JS_UNSURE: not decided here (too
 * deep, a real not convertible here, more than max occurrences). */
struct pv_js_member {
    int path;
    size_t at, len;
};
enum pv_js_verdict pv_json_scan_members(const char *data, size_t n,
                                        const char *const *paths,
                                        int n_paths, struct pv_js_member *out,
                                        size_t max, size_t *n_out);
/* Writes s at o as a JSON string the way jansson escapes it (", \ and
 * control characters; UTF-8 as it is): at most 2 + 6 * strlen(s) bytes.
 * Returns the end. */
char *pv_json_put_string(char *o, const char *s);
/* text with the value at each of m[0..nm) (ascending, disjoint) replaced
 * by s as a JSON string: malloc'd, NUL-terminated, its length in
 * *out_len; NULL when the spans are not ascending and disjoint inside
 * text, or on out of memory. */
char *pv_json_splice(const char *text, size_t len,
                     const struct pv_js_member *m, size_t nm, const char *s,
                     size_t *out_len);

/*
 * The native kinds (native.c shared, anthropic.c, gemini.c): the client's
 * OpenAI chat request is translated into the upstream's own API, and the
 * upstream's answer, stream and errors back into OpenAI chat shapes, so
 * callers see what an "openai" kind gives (pv_result.body an OpenAI
 * chat.completion, on_event OpenAI chunks then "[DONE]", error bodies
 * {"error":{"message","type","param","code"}}).  The translations are
 * pure functions, unit-tested apart from HTTP.
 *
 * Translation results: PV_X_OK; PV_X_REFUSE (the request has a parameter
 * this kind cannot express, or a bad value: msg names it, the client gets
 * a 400); PV_X_NOMEM.
 */
enum { PV_X_OK = 0, PV_X_REFUSE = -1, PV_X_NOMEM = -2 };

/* Stream translation state, one per call (zeroed at start). */
#define PV_X_MAX_BLOCKS 512
struct pv_xstream {
    char id[96];
    char model[128];
    int64_t created;
    int started;          /* the role chunk went out */
    int n_tools;          /* tool calls started */
    int block_tool[PV_X_MAX_BLOCKS]; /* anthropic: block -> tool index + 1 */
    const char *finish;   /* finish_reason, once known */
    int complete;         /* the upstream ended the answer properly */
    struct pv_usage usage;
};
/* Hands one OpenAI chunk on (reference stolen).  0, or -1 (stop). */
typedef int (*pv_xemit)(void *ud, json_t *chunk);
/* Stream event results (besides 0 = go on). */
enum { PV_XS_DONE = 1, PV_XS_UPSTREAM_ERROR = -1, PV_XS_MALFORMED = -2,
       PV_XS_EMIT = -3 };

/* anthropic.c (PV_ANTH_DEFAULT_MAX_TOKENS is in providers.h). */
#define PV_ANTH_VERSION "2023-06-01"
int pv_anth_request(const json_t *oa, const char *upstream, int stream,
                    json_t **out, char *msg, size_t len);
/* The OpenAI chat.completion for a Messages answer (new reference), usage
 * in *u; NULL with a reason in why when up is not a message. */
json_t *pv_anth_answer(const json_t *up, struct pv_usage *u, char *why,
                       size_t len);
/* The inverse of the answer's usage reading, for clients of the Messages
 * API (messages.c): input_tokens = prompt - cache reads - cache writes,
 * output_tokens, cache_creation_input_tokens, cache_read_input_tokens. */
json_t *pv_anth_usage_json(const struct pv_usage *u);
/* finish_reason -> stop_reason (stop -> end_turn, length -> max_tokens,
 * tool_calls -> tool_use, content_filter -> refusal; else end_turn). */
const char *pv_anth_stop_reason(const char *finish);
/* One SSE event (type from its event field or its data's "type"). */
int pv_anth_event(struct pv_xstream *s, const char *type, const json_t *ev,
                  pv_xemit emit, void *ud, char *why, size_t len);

/* Passthrough readers of a Messages answer and event (pv_xkind's
 * pass_answer and pass_event): json_scan.c's member scanner finds type,
 * usage, message.usage and error, and only those values are parsed. */
int pv_anth_pass_answer(const char *body, size_t len, struct pv_usage *u,
                        char *why, size_t wlen);
int pv_anth_pass_event(struct pv_xstream *s, const char *sse_type,
                       const char *data, size_t len, char *type, size_t tlen,
                       char *why, size_t wlen);

/* gemini.c */
int pv_gem_request(const json_t *oa, int stream, json_t **out, char *msg,
                   size_t len);
json_t *pv_gem_answer(const json_t *up, struct pv_usage *u, char *why,
                      size_t len);
/* One streamGenerateContent chunk (a GenerateContentResponse). */
int pv_gem_event(struct pv_xstream *s, const char *type, const json_t *ev,
                 pv_xemit emit, void *ud, char *why, size_t len);

/* native.c: shared pieces. */
/* {"id","object":"chat.completion.chunk","created","model","choices":
 * [{"index":0,"delta":delta,"finish_reason":finish|null}]}; delta stolen.
 * The first call also sends the role chunk first (through emit). */
int pv_x_emit_delta(struct pv_xstream *s, json_t *delta, const char *finish,
                    pv_xemit emit, void *ud);
/* Replaces every byte of t that does not start a valid UTF-8 sequence,
 * and every NUL, with U+FFFD (jansson refuses invalid UTF-8, and \u0000
 * when it parses an answer again, as the Responses and Messages adapters
 * do; a model's byte tokens can make either). */
void pv_utf8_repair(struct gx_buf *t);
/* One OpenAI logprobs entry {"token", "logprob", "bytes"} of a token's
 * bytes[0..n): the token string repaired as pv_utf8_repair does, the
 * bytes exact, logprob -9999 below that (OpenAI's floor; -inf has no JSON
 * form).  The caller owns it. */
json_t *pv_x_lp_token(const char *bytes, size_t n, double logprob);
/* The same with the choice's logprobs (stolen; NULL: null). */
int pv_x_emit_delta_lp(struct pv_xstream *s, json_t *delta, json_t *lp,
                       const char *finish, pv_xemit emit, void *ud);
/* OpenAI usage object for u (prompt_tokens_details.cached_tokens,
 * completion_tokens_details.reasoning_tokens, and cache_write_tokens in
 * prompt_tokens_details when nonzero). */
json_t *pv_x_usage_json(const struct pv_usage *u);
/* The usage-only chunk ("choices":[]) that closes an OpenAI stream. */
json_t *pv_x_usage_chunk(const struct pv_xstream *s);
/* The OpenAI chat.completion around one message (stolen). */
json_t *pv_x_completion(const char *id, const char *model, json_t *message,
                        const char *finish, const struct pv_usage *u);
/* The upstream's error body (Anthropic or Google shape, or anything) as an
 * OpenAI error body; malloc'd, NUL-terminated. */
char *pv_x_error_body(const char *body, size_t len, int status,
                      size_t *out_len);
/* Message text of an OpenAI content (string, or array of text parts);
 * NULL when it has a part that is not text. */
char *pv_x_content_text(const json_t *content);
/* Splits a data: URL ("data:image/png;base64,AAAA") into a mime type
 * and the base64 data; 0 on success. */
int pv_x_data_url(const char *url, char *mime, size_t mime_len,
                  const char **data);
/* Appends "name" to a comma-separated list of refused parameters. */
void pv_x_refuse_add(char *list, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Request pieces both kinds translate alike.  Refusals: every top-level
 * key not in known (a NULL-terminated list) and an n other than 1; every
 * field of message i its role cannot carry (nulls count as absent). */
void pv_x_refuse_keys(const json_t *oa, const char *const *known,
                      char *refused, size_t rlen);
void pv_x_refuse_msg_fields(const json_t *m, size_t i, char *refused,
                            size_t rlen);
/* The larger of max_tokens and max_completion_tokens; 0 when neither. */
int64_t pv_x_max_tokens(const json_t *oa);
/* Appends part (stolen) to the array field of the last turn when that
 * turn has role, else to a new turn {role, field: [part]}.  0 or -1. */
int pv_x_turn_add(json_t *turns, const char *role, const char *field,
                  json_t *part);
/* An assistant tool call's parsed arguments (new reference; "" is {})
 * and its function name; NULL unless both are there and the arguments
 * are a JSON object. */
json_t *pv_x_tool_args(const json_t *tc, const char **name);
/* Ends a translation: a non-empty refused list turns PV_X_OK into
 * PV_X_REFUSE with "Unsupported by provider kind KIND: LIST." in msg; on
 * any failure *body is freed and NULL.  Returns the result. */
int pv_x_request_end(int rc, const char *kind, const char *refused,
                     json_t **body, char *msg, size_t len);
/* A usage count member of o (pv_usage_num), 0 when absent. */
int64_t pv_x_num(const json_t *o, const char *k);

/* The walk over OpenAI messages both kinds share: system/developer text
 * into system (ops->text each), user, assistant (role assistant_role) and
 * tool messages into turns (merged per role, parts in the member field),
 * refusals named in refused.  The ops build one block or part each;
 * user_part and tool_call return NULL after naming a refusal; tool_result
 * returns NULL when the call it answers cannot be found (refused here). */
struct pv_x_msgs_ops {
    const char *field;          /* "content" (Anthropic), "parts" (Gemini) */
    const char *assistant_role; /* "assistant", "model" */
    json_t *(*text)(const char *s);
    json_t *(*user_part)(const json_t *part, size_t i, size_t j,
                         char *refused, size_t rlen);
    /* args (stolen): the parsed arguments, an object */
    json_t *(*tool_call)(const json_t *tc, const char *name, json_t *args,
                         size_t i, size_t j, char *refused, size_t rlen);
    json_t *(*tool_result)(const json_t *msgs, size_t i, const char *id,
                           const char *text);
};
int pv_x_messages(const json_t *msgs, const struct pv_x_msgs_ops *ops,
                  json_t *system, json_t *turns, char *refused, size_t rlen);

/* How a native kind plugs into native.c's HTTP glue. */
struct pv_xkind {
    const struct pv_ops *ops;
    const char *name; /* "anthropic" */
    /* The request translation (pv_anth_request's contract). */
    int (*translate)(const json_t *oa, const char *upstream, int stream,
                     json_t **out, char *msg, size_t len);
    /* The URL path after base_url, starting with the API version segment
     * ("/v1/messages"); a base_url that already ends in a version segment
     * ("/v1", "/v1beta") drops it.  -1 when upstream cannot go in it. */
    int (*path)(const char *upstream, int stream, char *buf, size_t len);
    const char *key_header;  /* where api_key goes: "x-api-key" */
    const char *extra_name;  /* one more header unless the provider's own
                                headers set it (NULL: none) */
    const char *extra_value;
    json_t *(*answer)(const json_t *up, struct pv_usage *u, char *why,
                      size_t len);
    int (*event)(struct pv_xstream *s, const char *type, const json_t *ev,
                 pv_xemit emit, void *ud, char *why, size_t len);
    /* Gemini: no end marker; a stream that reached a finishReason is
     * complete when the upstream closes it. */
    int complete_at_eof;
    /* Passthrough readers (NULL: the kind has no passthrough): the bytes
     * are read, never rebuilt.  pass_answer: 0 when body is the kind's
     * answer (usage into *u), else -1 with why.  pass_event: one stream
     * event's data (sse_type: its SSE event field, used when the data has
     * no "type"), the type into type[tlen], the usage into s->usage; 0,
     * PV_XS_DONE or a PV_XS_* error with why. */
    int (*pass_answer)(const char *body, size_t len, struct pv_usage *u,
                       char *why, size_t wlen);
    int (*pass_event)(struct pv_xstream *s, const char *sse_type,
                      const char *data, size_t len, char *type, size_t tlen,
                      char *why, size_t wlen);
};

/* A native kind's pv_ops.start: translates the request and POSTs it; a
 * refused request sends nothing and ends (from the event loop, never
 * inside this function) with status 400 and an OpenAI error naming the
 * refused parameters. */
/* A call that sends nothing and ends, from the loop, with status 400 and
 * an OpenAI invalid_request_error whose message is refusal (any kind). */
enum gx_status pv_x_refuse(struct pv_loop *loop, const struct pv_request *req,
                           const struct pv_callbacks *cb, const char *refusal,
                           struct pv_call **out, char *err, size_t errlen);
enum gx_status pv_x_start(struct pv_loop *loop, const struct pv_request *req,
                          const struct pv_callbacks *cb,
                          const struct pv_xkind *k, struct pv_call **out,
                          char *err, size_t errlen);

#endif
