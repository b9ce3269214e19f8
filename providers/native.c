/*
 * native.c: what the native kinds (anthropic.c, gemini.c) share: the
 * OpenAI shapes they translate into (chunks, completions, usage, error
 * bodies), small request helpers, and the HTTP glue that runs a
 * translated request through loop.c's transfer layer.
 *
 * The glue, per call:
 *   non-stream 2xx  the body (capped at max_body_bytes, else
 *                   PV_ERR_TOO_BIG) is parsed and translated by the kind;
 *                   pv_result.body is the OpenAI chat.completion (owned
 *                   here); a body that is not the upstream's answer shape
 *                   is PV_ERR_MALFORMED.
 *   stream 2xx      text/event-stream parsed as it arrives; every event's
 *                   data must be a JSON object, translated at once into
 *                   OpenAI chunks handed to on_event; when the kind says
 *                   the answer is complete, the usage chunk (if the client
 *                   asked for include_usage) and "[DONE]" follow.  An
 *                   upstream error event is PV_ERR_TRANSPORT (not passed
 *                   on), and so is a stream that ends before completion.
 *   non-2xx         PV_ERR_STATUS; the body (cut at the cap) becomes an
 *                   OpenAI error body carrying the upstream's message.
 * Every byte that came from upstream is scrubbed of the provider's
 * secrets before it is parsed, and the translation again before it leaves.
 *
 * Passthrough (pv_passthrough: the client spoke the kind's own API, i.e.
 * Messages to anthropic): the client's bytes go upstream with only the
 * value of "model" replaced (pv_msgs_pass_request: a splice, no
 * re-serialising), and the answer comes back untranslated: the body as
 * the upstream sent it (scrubbed), each stream event's data as it came
 * (message_start and pings held until the first content event, so an
 * error right after the start still fails over; an error event after
 * content handed on too, then the call fails), an Anthropic-shaped error
 * body as it is.  The kind's pass readers (pass_answer, pass_event) scan
 * those bytes for the usage, the end of the stream and in-band errors;
 * nothing is translated or rebuilt.
 *
 * A refused request (PV_X_REFUSE from the kind's translation) makes no
 * upstream request: the call ends from a zero timer with status 400 and an
 * OpenAI invalid_request_error naming the parameters, which the gateway
 * passes to the client like any upstream 4xx.
 */
#include "providers.h"
#include "providers_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define X_DEFAULT_MAX_BODY (8 * 1024 * 1024)

/* ---- OpenAI shapes ------------------------------------------------------ */

static json_t *
chunk_new(const struct pv_xstream *s, json_t *choices)
{
    json_t *c = json_object();
    if (!c || !choices) {
        json_decref(c);
        json_decref(choices);
        return NULL;
    }
    json_object_set_new(c, "id", json_string(s->id[0] ? s->id : "chatcmpl"));
    json_object_set_new(c, "object", json_string("chat.completion.chunk"));
    json_object_set_new(c, "created", json_integer(s->created));
    json_object_set_new(c, "model", json_string(s->model));
    json_object_set_new(c, "choices", choices);
    return c;
}

static json_t *
delta_chunk(const struct pv_xstream *s, json_t *delta, json_t *lp,
            const char *finish)
{
    json_t *ch = json_object();
    if (!ch || !delta) {
        json_decref(ch);
        json_decref(delta);
        json_decref(lp);
        return NULL;
    }
    json_object_set_new(ch, "index", json_integer(0));
    json_object_set_new(ch, "delta", delta);
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason",
                        finish ? json_string(finish) : json_null());
    json_t *arr = json_array();
    if (!arr || json_array_append_new(arr, ch) != 0) {
        json_decref(arr);
        return NULL;
    }
    return chunk_new(s, arr);
}

int
pv_x_emit_delta_lp(struct pv_xstream *s, json_t *delta, json_t *lp,
                   const char *finish, pv_xemit emit, void *ud)
{
    if (!s->started) {
        s->started = 1;
        json_t *r = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
        json_t *c = r ? delta_chunk(s, r, NULL, NULL) : NULL;
        if (!c || emit(ud, c) != 0) {
            json_decref(delta);
            json_decref(lp);
            return -1;
        }
    }
    json_t *c = delta_chunk(s, delta, lp, finish);
    if (!c)
        return -1;
    return emit(ud, c);
}

int
pv_x_emit_delta(struct pv_xstream *s, json_t *delta, const char *finish,
                pv_xemit emit, void *ud)
{
    return pv_x_emit_delta_lp(s, delta, NULL, finish, emit, ud);
}

/*
 * The local engine passes token bytes through as they are, and a sampled
 * byte token can make invalid UTF-8, which jansson refuses: the chunk
 * (stream) or the whole answer (non-stream) would be lost (local.c), as
 * would a logprobs token that is part of a character (pv_x_lp_token).
 * Replaces every byte that does not start a valid sequence with U+FFFD.
 * (The engine holds back a sequence that is only incomplete, so a chunk
 * of text never ends inside a valid one.)
 */
void
pv_utf8_repair(struct gx_buf *t)
{
    if (!t->len ||
        (gx_utf8_valid(t->data, t->len) && !memchr(t->data, 0, t->len)))
        return;
    struct gx_buf o;
    gx_buf_init(&o, t->max);
    const unsigned char *p = (const unsigned char *)t->data;
    size_t i = 0;
    while (i < t->len) {
        unsigned c = p[i];
        size_t l = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (c && i + l <= t->len && gx_utf8_valid(t->data + i, l)) {
            gx_buf_append(&o, t->data + i, l);
            i += l;
        } else {
            gx_buf_append(&o, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    gx_buf_cleanup(t);
    *t = o;
}

json_t *
pv_x_lp_token(const char *bytes, size_t n, double logprob)
{
    struct gx_buf t;
    gx_buf_init(&t, 3 * n + 1);
    gx_buf_append(&t, bytes, n);
    pv_utf8_repair(&t);
    json_t *b = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(b, json_integer((unsigned char)bytes[i]));
    double v = logprob >= -9999.0 ? logprob : -9999.0;
    json_t *o = json_pack("{s:s%,s:f,s:o}", "token", t.data ? t.data : "",
                          t.data ? t.len : 0, "logprob", v, "bytes", b);
    gx_buf_cleanup(&t);
    return o;
}

json_t *
pv_x_usage_json(const struct pv_usage *u)
{
    json_t *ptd = json_pack("{s:I}", "cached_tokens",
                            (json_int_t)u->cached_tokens);
    if (ptd && u->cache_write_tokens)
        json_object_set_new(ptd, "cache_write_tokens",
                            json_integer(u->cache_write_tokens));
    int64_t total = u->prompt_tokens;
    if (__builtin_add_overflow(total, u->completion_tokens, &total))
        total = INT64_MAX;
    return json_pack("{s:I,s:I,s:I,s:o,s:{s:I}}", "prompt_tokens",
                     (json_int_t)u->prompt_tokens, "completion_tokens",
                     (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)total, "prompt_tokens_details", ptd,
                     "completion_tokens_details", "reasoning_tokens",
                     (json_int_t)u->reasoning_tokens);
}

json_t *
pv_x_usage_chunk(const struct pv_xstream *s)
{
    json_t *c = chunk_new(s, json_array());
    json_t *u = pv_x_usage_json(&s->usage);
    if (!c || !u || json_object_set_new(c, "usage", u) != 0) {
        json_decref(c);
        return NULL;
    }
    return c;
}

json_t *
pv_x_completion(const char *id, const char *model, json_t *message,
                const char *finish, const struct pv_usage *u)
{
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:s}]}", "id",
                          id, "object", "chat.completion", "created",
                          (json_int_t)time(NULL), "model", model, "choices",
                          "index", 0, "message", message, "logprobs",
                          "finish_reason", finish);
    if (r && u && u->have) {
        json_t *uj = pv_x_usage_json(u);
        if (!uj || json_object_set_new(r, "usage", uj) != 0) {
            json_decref(r);
            return NULL;
        }
    }
    return r;
}

/* Finds the error object in an Anthropic ({"type":"error","error":{}}),
 * Google ({"error":{"code","message","status"}} or that in an array) or
 * OpenAI-like body. */
static const json_t *
find_error(const json_t *j)
{
    if (json_is_array(j))
        j = json_array_get(j, 0);
    const json_t *e = json_object_get(j, "error");
    return json_is_object(e) ? e : NULL;
}

char *
pv_x_error_body(const char *body, size_t len, int status, size_t *out_len)
{
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    const json_t *e = find_error(j);
    const json_t *m = json_object_get(e, "message");
    const json_t *t = json_object_get(e, "type");   /* Anthropic */
    if (!json_is_string(t))
        t = json_object_get(e, "status");           /* Google */
    char fallback[160];
    const char *msg = json_is_string(m) ? json_string_value(m) : NULL;
    if (!msg) {
        /* Not a JSON error: keep the start of the text, if it is text. */
        size_t n = len < 120 ? len : 120, k;
        for (k = 0; k < n; k++)
            if ((unsigned char)body[k] < 0x20 || body[k] == 0x7f)
                break;
        snprintf(fallback, sizeof(fallback), "upstream status %d%s%.*s",
                 status, k ? ": " : "", (int)k, k ? body : "");
        msg = fallback;
    }
    const char *type = json_is_string(t) ? json_string_value(t)
                       : status == 429   ? "rate_limit_error"
                       : status >= 500   ? "api_error"
                                         : "invalid_request_error";
    json_t *o = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg,
                          "type", type, "param", "code", type);
    json_decref(j);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s && out_len)
        *out_len = strlen(s);
    return s;
}

/* ---- request helpers ---------------------------------------------------- */

char *
pv_x_content_text(const json_t *content)
{
    if (json_is_null(content) || !content)
        return strdup("");
    if (json_is_string(content))
        return strdup(json_string_value(content));
    if (!json_is_array(content))
        return NULL;
    struct gx_buf b;
    gx_buf_init(&b, 0);
    size_t i;
    const json_t *part;
    json_array_foreach(content, i, part) {
        const json_t *ty = json_object_get(part, "type");
        const json_t *tx = json_object_get(part, "text");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
            !json_is_string(tx) ||
            gx_buf_append(&b, json_string_value(tx), json_string_length(tx)) !=
                GX_OK) {
            gx_buf_cleanup(&b);
            return NULL;
        }
    }
    if (gx_buf_append(&b, "", 1) != GX_OK) {
        gx_buf_cleanup(&b);
        return NULL;
    }
    return b.data;
}

int
pv_x_data_url(const char *url, char *mime, size_t mime_len, const char **data)
{
    if (strncmp(url, "data:", 5) != 0)
        return -1;
    const char *p = url + 5;
    const char *semi = strstr(p, ";base64,");
    if (!semi || semi == p || (size_t)(semi - p) >= mime_len)
        return -1;
    memcpy(mime, p, (size_t)(semi - p));
    mime[semi - p] = '\0';
    if (strchr(mime, ',') || strchr(mime, ';'))
        return -1;
    *data = semi + 8;
    return **data ? 0 : -1;
}

void
pv_x_refuse_add(char *list, size_t len, const char *fmt, ...)
{
    size_t used = strlen(list);
    if (used + 4 >= len)
        return;
    if (used)
        used += (size_t)snprintf(list + used, len - used, ", ");
    if (used >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(list + used, len - used, fmt, ap);
    va_end(ap);
}

static int
msg_key_ok(const char *role, const char *key)
{
    if (!strcmp(key, "role") || !strcmp(key, "content"))
        return 1;
    /* reasoning_content (what llmux answers thinking with) comes back
     * in histories; it is left out: without the upstream's signature it
     * cannot be replayed, and both APIs drop earlier turns' thinking. */
    if (!strcmp(role, "assistant"))
        return !strcmp(key, "tool_calls") || !strcmp(key, "refusal") ||
               !strcmp(key, "reasoning_content");
    if (!strcmp(role, "tool"))
        return !strcmp(key, "tool_call_id");
    return 0;
}

void
pv_x_refuse_msg_fields(const json_t *m, size_t i, char *refused, size_t rlen)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)m, key, val)
        if (!json_is_null(val) && !msg_key_ok(role ? role : "", key))
            pv_x_refuse_add(refused, rlen, "messages[%zu].%s", i, key);
}

void
pv_x_refuse_keys(const json_t *oa, const char *const *known, char *refused,
                 size_t rlen)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)oa, key, val) {
        if (json_is_null(val))
            continue;
        int ok = 0;
        for (size_t k = 0; known[k] && !ok; k++)
            ok = !strcmp(key, known[k]);
        if (!ok)
            pv_x_refuse_add(refused, rlen, "%s", key);
    }
    const json_t *n = json_object_get(oa, "n");
    if (n && !json_is_null(n) && json_integer_value(n) != 1)
        pv_x_refuse_add(refused, rlen, "n (only 1)");
}

int64_t
pv_x_max_tokens(const json_t *oa)
{
    json_int_t mt = 0;
    const json_t *a = json_object_get(oa, "max_tokens");
    const json_t *b = json_object_get(oa, "max_completion_tokens");
    if (json_is_integer(a))
        mt = json_integer_value(a);
    if (json_is_integer(b) && json_integer_value(b) > mt)
        mt = json_integer_value(b);
    return mt > 0 ? (int64_t)mt : 0;
}

int
pv_x_turn_add(json_t *turns, const char *role, const char *field,
              json_t *part)
{
    if (!part)
        return -1;
    size_t n = json_array_size(turns);
    json_t *last = n ? json_array_get(turns, n - 1) : NULL;
    const json_t *lr = json_object_get(last, "role");
    if (last && json_is_string(lr) && !strcmp(json_string_value(lr), role))
        return json_array_append_new(json_object_get(last, field), part);
    json_t *t = json_pack("{s:s,s:[o]}", "role", role, field, part);
    if (!t)
        return -1;
    return json_array_append_new(turns, t);
}

json_t *
pv_x_tool_args(const json_t *tc, const char **name)
{
    const json_t *fn = json_object_get(tc, "function");
    const json_t *args = json_object_get(fn, "arguments");
    const char *as = json_is_string(args) ? json_string_value(args) : "";
    *name = json_string_value(json_object_get(fn, "name"));
    json_t *a = *as ? json_loads(as, 0, NULL) : json_object();
    if (!*name || !json_is_object(a)) {
        json_decref(a);
        return NULL;
    }
    return a;
}

int
pv_x_request_end(int rc, const char *kind, const char *refused, json_t **body,
                 char *msg, size_t len)
{
    if (rc == PV_X_OK && refused[0]) {
        snprintf(msg, len, "Unsupported by provider kind %s: %s.", kind,
                 refused);
        rc = PV_X_REFUSE;
    }
    if (rc != PV_X_OK) {
        json_decref(*body);
        *body = NULL;
        if (rc == PV_X_NOMEM)
            snprintf(msg, len, "out of memory");
    }
    return rc;
}

int64_t
pv_x_num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? pv_usage_num(json_number_value(v)) : 0;
}

int
pv_x_messages(const json_t *msgs, const struct pv_x_msgs_ops *ops,
              json_t *system, json_t *turns, char *refused, size_t rlen)
{
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const json_t *content = json_object_get(m, "content");
        pv_x_refuse_msg_fields(m, i, refused, rlen);
        int is_sys = !strcmp(role, "system") || !strcmp(role, "developer");
        if (is_sys || !strcmp(role, "assistant")) {
            char *t = pv_x_content_text(content);
            if (!t) {
                pv_x_refuse_add(refused, rlen, "messages[%zu].content", i);
                continue;
            }
            int rc = is_sys ? json_array_append_new(system, ops->text(t))
                     : *t   ? pv_x_turn_add(turns, ops->assistant_role,
                                            ops->field, ops->text(t))
                            : 0;
            free(t);
            if (rc)
                return PV_X_NOMEM;
            size_t j;
            const json_t *tc;
            json_array_foreach(json_object_get(m, "tool_calls"), j, tc) {
                const char *name = NULL;
                json_t *args = pv_x_tool_args(tc, &name);
                if (!args) {
                    pv_x_refuse_add(refused, rlen,
                                    "messages[%zu].tool_calls[%zu] (needs "
                                    "function.name and arguments that are a "
                                    "JSON object)",
                                    i, j);
                    continue;
                }
                json_t *b = ops->tool_call(tc, name, args, i, j, refused,
                                           rlen);
                if (b && pv_x_turn_add(turns, ops->assistant_role, ops->field,
                                       b))
                    return PV_X_NOMEM;
            }
        } else if (!strcmp(role, "user")) {
            if (json_is_string(content)) {
                if (pv_x_turn_add(turns, "user", ops->field,
                                  ops->text(json_string_value(content))))
                    return PV_X_NOMEM;
                continue;
            }
            size_t j;
            const json_t *part;
            json_array_foreach(content, j, part) {
                json_t *b = ops->user_part(part, i, j, refused, rlen);
                if (b && pv_x_turn_add(turns, "user", ops->field, b))
                    return PV_X_NOMEM;
            }
        } else if (!strcmp(role, "tool")) {
            const char *id = json_string_value(json_object_get(m,
                                                               "tool_call_id"));
            char *t = pv_x_content_text(content);
            json_t *b = t && id ? ops->tool_result(msgs, i, id, t) : NULL;
            free(t);
            if (!b) {
                pv_x_refuse_add(refused, rlen,
                                "messages[%zu] (a tool message needs text "
                                "content and the tool_call_id of an earlier "
                                "assistant tool call)",
                                i);
                continue;
            }
            if (pv_x_turn_add(turns, "user", ops->field, b))
                return PV_X_NOMEM;
        } else {
            pv_x_refuse_add(refused, rlen, "messages[%zu].role ('%s')", i,
                            role);
        }
    }
    return PV_X_OK;
}

/* ---- the HTTP glue ------------------------------------------------------ */

struct x_call {
    const struct pv_xkind *k;
    int stream;
    int include_usage;
    int ct_checked;
    int n_events;
    int ended;           /* "[DONE]" went out */
    struct pv_sse sse;
    struct gx_buf body;  /* upstream body (non-stream or error) */
    char *out;           /* the translated body handed to on_done */
    struct pv_xstream xs;
    struct event *refuse_ev;
    char *refusal;
    int pass;            /* passthrough (see the top) */
    struct gx_buf held;  /* pass: events held before the first content,
                            "len:data" records */
    int content_seen;
};

/* Pass mode: hands data on, after whatever was held. */
static void
x_pass_deliver(struct pv_call *c, const char *data, size_t len)
{
    struct x_call *x = c->impl;
    size_t off = 0;
    while (off < x->held.len && !c->cancelled) {
        size_t n = 0;
        memcpy(&n, x->held.data + off, sizeof(n));
        off += sizeof(n);
        pv_call_emit_event(c, x->held.data + off, n);
        off += n;
    }
    gx_buf_reset(&x->held);
    if (!c->cancelled)
        pv_call_emit_event(c, data, len);
}

static int
x_emit(void *ud, json_t *chunk)
{
    struct pv_call *c = ud;
    if (!chunk) {
        pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
        return -1;
    }
    char *s = json_dumps(chunk, JSON_COMPACT);
    json_decref(chunk);
    if (!s) {
        pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
        return -1;
    }
    size_t n = strlen(s);
    pv_call_emit_event(c, s, n); /* it masks echoed secrets */
    free(s);
    return c->cancelled ? -1 : 0;
}

/* The answer is complete: the usage chunk if asked for, then [DONE]. */
static void
x_end_stream(struct pv_call *c)
{
    struct x_call *x = c->impl;
    if (x->ended || c->failed)
        return;
    x->ended = 1;
    if (!x->pass && x->include_usage && x->xs.usage.have &&
        x_emit(c, pv_x_usage_chunk(&x->xs)) != 0)
        return;
    pv_call_emit_event(c, "[DONE]", 6);
}

/* Pass mode: one upstream event, read (not parsed whole: the kind's
 * pass_event scans it) for the usage, the end and errors, then handed on
 * as it came; held while nothing but message_start and pings came, so an
 * error right after the start still fails over.  An error event after
 * content reached the client is handed on too (the client reads the
 * upstream's own words), then the call fails. */
static void
x_pass_event(struct pv_call *c, const char *data, size_t len)
{
    struct x_call *x = c->impl;
    char why[200] = "", t[32];
    int r = x->k->pass_event(&x->xs, x->sse.event, data, len, t, sizeof(t),
                             why, sizeof(why));
    if (r == PV_XS_UPSTREAM_ERROR) {
        if (x->content_seen)
            x_pass_deliver(c, data, len);
        if (!c->cancelled)
            pv_call_failf(c, PV_ERR_TRANSPORT,
                          "upstream error in stream: %.160s", why);
        return;
    }
    if (r == PV_XS_MALFORMED) {
        pv_call_failf(c, PV_ERR_MALFORMED, "malformed stream: event %d: %s",
                      x->n_events, why);
        return;
    }
    if (!x->content_seen && r != PV_XS_DONE &&
        (!strcmp(t, "message_start") || !strcmp(t, "ping"))) {
        if (gx_buf_append(&x->held, &len, sizeof(len)) != GX_OK ||
            gx_buf_append(&x->held, data, len) != GX_OK)
            pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
        return;
    }
    x->content_seen = 1;
    x_pass_deliver(c, data, len);
    if (r == PV_XS_DONE && !c->cancelled) {
        c->res.usage = x->xs.usage;
        x_end_stream(c);
    }
}

static void
x_event(void *ud, const char *data, size_t len)
{
    struct pv_call *c = ud;
    struct x_call *x = c->impl;
    if (c->failed || c->cancelled || c->finished || x->ended)
        return;
    x->n_events++;
    if (x->pass) {
        x_pass_event(c, data, len);
        return;
    }
    json_error_t je;
    json_t *j = json_loadb(data, len, 0, &je);
    if (!json_is_object(j)) {
        pv_call_failf(c, PV_ERR_MALFORMED,
                      "malformed stream: event %d is not a JSON object (%s)",
                      x->n_events, j ? "wrong type" : je.text);
        json_decref(j);
        return;
    }
    char why[200] = "";
    int r = x->k->event(&x->xs, x->sse.event, j, x_emit, c, why,
                        sizeof(why));
    json_decref(j);
    if (r == PV_XS_DONE) {
        c->res.usage = x->xs.usage;
        x_end_stream(c);
    } else if (r == PV_XS_UPSTREAM_ERROR) {
        pv_call_failf(c, PV_ERR_TRANSPORT, "upstream error in stream: %.160s",
                      why);
    } else if (r == PV_XS_MALFORMED) {
        pv_call_failf(c, PV_ERR_MALFORMED, "malformed stream: event %d: %s",
                      x->n_events, why);
    } else if (r != 0 && !c->failed && !c->cancelled) {
        pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
    }
}

static int
x_on_body(struct pv_call *c, const char *p, size_t n)
{
    struct x_call *x = c->impl;
    int ok2xx = c->res.http_status >= 200 && c->res.http_status < 300;
    if (!ok2xx || !x->stream) {
        /* An error page over the cap is cut (the status decides); an
         * answer over it is an error. */
        size_t room = x->body.max > x->body.len ? x->body.max - x->body.len
                                                : 0;
        if (n > room && ok2xx) {
            pv_call_failf(c, PV_ERR_TOO_BIG, "upstream body over %zu bytes",
                          x->body.max);
            return -1;
        }
        if (n > room)
            n = room;
        if (n && gx_buf_append(&x->body, p, n) != GX_OK) {
            pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
            return -1;
        }
        return 0;
    }
    if (pv_stream_ct_check(c, &x->ct_checked) != 0)
        return -1;
    if (x->ended)
        return 0;
    /* Not masked here: every event out is (pv_call_emit_event), seeing
     * the text as it came, so a secret split across events is caught. */
    enum gx_status st = pv_sse_feed(&x->sse, p, n, x_event, c);
    if (st == GX_ETOOBIG)
        pv_call_failf(c, PV_ERR_TOO_BIG, "upstream stream event over %zu bytes",
                      x->sse.line.max);
    else if (st != GX_OK)
        pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
    return c->failed ? -1 : 0;
}

static void
x_on_finish(struct pv_call *c)
{
    struct x_call *x = c->impl;
    int status = c->res.http_status;
    pv_scrub(c->scrub, x->body.data, x->body.len);
    if (status < 200 || status >= 300) {
        c->res.outcome = PV_ERR_STATUS;
        size_t n = 0;
        json_t *raw = x->pass ? json_loadb(x->body.data ? x->body.data : "",
                                           x->body.len, 0, NULL)
                              : NULL;
        const json_t *rt = json_object_get(raw, "type");
        int anth = json_is_string(rt) &&
                   !strcmp(json_string_value(rt), "error") &&
                   json_is_object(json_object_get(raw, "error"));
        json_decref(raw);
        if (anth) { /* passthrough: the upstream's own error body */
            x->out = malloc(x->body.len + 1);
            if (x->out) {
                memcpy(x->out, x->body.data, x->body.len);
                x->out[x->body.len] = '\0';
                n = x->body.len;
            }
        } else {
            x->out = pv_x_error_body(x->body.data, x->body.len, status, &n);
        }
        if (!x->out) {
            c->res.outcome = PV_ERR_INTERNAL;
            snprintf(c->res.detail, sizeof(c->res.detail), "out of memory");
            return;
        }
        pv_scrub(c->scrub, x->out, n);
        json_t *j = json_loadb(x->out, n, 0, NULL);
        const json_t *m = json_object_get(json_object_get(j, "error"),
                                          "message");
        snprintf(c->res.detail, sizeof(c->res.detail),
                 "upstream status %d: %.160s", status,
                 json_is_string(m) ? json_string_value(m) : "");
        json_decref(j);
        c->res.body = x->out;
        c->res.body_len = n;
        c->res.other_may_serve =
            status == 400 && pv_error_is_context(x->body.data, x->body.len);
        return;
    }
    if (x->stream) {
        if (!x->ended && x->k->complete_at_eof && x->xs.complete) {
            c->res.usage = x->xs.usage;
            x_end_stream(c);
        }
        if (c->failed) {
            c->res.outcome = c->fail;
            return;
        }
        if (!x->ended) {
            c->res.outcome = PV_ERR_TRANSPORT;
            snprintf(c->res.detail, sizeof(c->res.detail),
                     "stream ended before the answer was complete (after "
                     "%d events)",
                     x->n_events);
            return;
        }
        c->res.outcome = PV_OK;
        return;
    }
    char why[160] = "";
    if (x->pass) {
        /* The usage is read; the client gets the upstream's own bytes. */
        if (x->k->pass_answer(x->body.data ? x->body.data : "", x->body.len,
                              &c->res.usage, why, sizeof(why)) != 0) {
            c->res.outcome = PV_ERR_MALFORMED;
            snprintf(c->res.detail, sizeof(c->res.detail),
                     "malformed upstream body: %s", why);
            return;
        }
        c->res.body = x->body.data ? x->body.data : "";
        c->res.body_len = x->body.len;
        c->res.outcome = PV_OK;
        return;
    }
    json_error_t je;
    json_t *j = json_loadb(x->body.data ? x->body.data : "", x->body.len, 0,
                           &je);
    json_t *oa = json_is_object(j)
                     ? x->k->answer(j, &c->res.usage, why, sizeof(why))
                     : NULL;
    json_decref(j);
    if (!oa) {
        c->res.outcome = PV_ERR_MALFORMED;
        snprintf(c->res.detail, sizeof(c->res.detail),
                 "malformed upstream body: %s",
                 !j ? je.text : why[0] ? why : "not a JSON object");
        return;
    }
    x->out = json_dumps(oa, JSON_COMPACT);
    json_decref(oa);
    if (!x->out) {
        c->res.outcome = PV_ERR_INTERNAL;
        snprintf(c->res.detail, sizeof(c->res.detail), "out of memory");
        return;
    }
    c->res.body = x->out;
    c->res.body_len = strlen(x->out);
    pv_scrub(c->scrub, x->out, c->res.body_len);
    c->res.outcome = PV_OK;
}

static void
x_free_impl(struct pv_call *c)
{
    struct x_call *x = c->impl;
    if (!x)
        return;
    if (x->refuse_ev)
        event_free(x->refuse_ev);
    x->refuse_ev = NULL;
    pv_sse_cleanup(&x->sse);
    gx_buf_cleanup(&x->body);
    gx_buf_cleanup(&x->held);
    free(x->out);
    free(x->refusal);
}

static const struct pv_http_hooks x_hooks = {
    .on_body = x_on_body,
    .on_finish = x_on_finish,
    .free_impl = x_free_impl,
};

static void
x_refuse_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pv_call *c = arg;
    struct x_call *x = c->impl;
    if (c->cancelled || c->finished)
        return;
    json_t *o = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message",
                          x->refusal, "type", "invalid_request_error",
                          "param", "code", "unsupported_parameter");
    x->out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    c->res.http_status = 400;
    /* what this kind cannot carry another target may serve */
    c->res.other_may_serve = 1;
    if (x->out) {
        c->res.outcome = PV_ERR_STATUS;
        c->res.body = x->out;
        c->res.body_len = strlen(x->out);
        snprintf(c->res.detail, sizeof(c->res.detail),
                 "refused before sending: %.200s", x->refusal);
    } else {
        c->res.outcome = PV_ERR_INTERNAL;
        snprintf(c->res.detail, sizeof(c->res.detail), "out of memory");
    }
    pv_call_complete(c);
}

/* Length of base without trailing slashes and, when it ends in an API
 * version segment ("/v1", "/v1beta"), without that too; *versioned says
 * which. */
static size_t
root_len(const char *base, int *versioned)
{
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    size_t k = n;
    while (k > 0 && base[k - 1] != '/')
        k--;
    const char *seg = base + k;
    *versioned = k > 0 && n - k >= 2 && seg[0] == 'v' && seg[1] >= '0' &&
                 seg[1] <= '9';
    return n;
}

/* Sends text (the upstream body, owned from here on; NULL with a
 * refusal). */
static enum gx_status
x_send(struct pv_loop *loop, const struct pv_request *req,
       const struct pv_callbacks *cb, const struct pv_xkind *k,
       const char *url, char *text, size_t text_len, const char *refusal,
       struct pv_call **out, char *err, size_t errlen)
{
    const struct cfg_provider *prov = req->provider;
    struct curl_slist *hdr = NULL;
    enum gx_status st = GX_EINVAL;

    if (!refusal) {
        if (!text)
            goto nomem;
        st = pv_http_headers(req, k->key_header, "", k->extra_name,
                             k->extra_value, &hdr, err, errlen);
        if (st != GX_OK)
            goto out;
    }
    struct pv_call *c = pv_call_alloc(loop, k->ops, req, cb,
                                      sizeof(struct x_call));
    if (!c)
        goto nomem;
    struct x_call *x = c->impl;
    size_t cap = req->max_body_bytes > 0 ? (size_t)req->max_body_bytes
                                         : (size_t)X_DEFAULT_MAX_BODY;
    x->k = k;
    x->stream = req->stream;
    x->include_usage = req->client_include_usage;
    x->xs.created = (int64_t)time(NULL);
    x->pass = pv_passthrough(req->chat, prov->kind) && k->pass_event &&
              k->pass_answer;
    pv_sse_init(&x->sse, cap);
    gx_buf_init(&x->body, cap);
    gx_buf_init(&x->held, cap);
    if (refusal) {
        /* Nothing is sent; the 400 comes from the loop, as an answer
         * would (no callback may run inside start). */
        c->hooks = &x_hooks;
        x->refusal = strdup(refusal);
        x->refuse_ev = evtimer_new(loop->base, x_refuse_cb, c);
        struct timeval tv0 = {0, 0};
        if (!x->refusal || !x->refuse_ev || evtimer_add(x->refuse_ev, &tv0)) {
            pv_http_cancel(c);
            goto nomem;
        }
        *out = c;
        st = GX_OK;
        goto out;
    }
    /* pv_http_start owns hdr and text from here on, even on failure. */
    st = pv_http_start(c, &x_hooks, prov, url, hdr, text, text_len, err,
                       errlen);
    hdr = NULL;
    text = NULL;
    if (st == GX_OK)
        *out = c;
    goto out;
nomem:
    gx_errf(err, errlen, "out of memory");
    st = GX_ENOMEM;
out:
    pv_http_headers_free(hdr);
    free(text);
    return st;
}

enum gx_status
pv_x_refuse(struct pv_loop *loop, const struct pv_request *req,
            const struct pv_callbacks *cb, const char *refusal,
            struct pv_call **out, char *err, size_t errlen)
{
    /* An HTTP-shaped call that never sends: its cancel is pv_http_cancel
     * whatever the provider's kind (local calls have their own state). */
    static const struct pv_xkind refused = {.ops = &pv_anthropic_ops,
                                            .name = "refused"};
    return x_send(loop, req, cb, &refused, NULL, NULL, 0, refusal, out, err,
                  errlen);
}

enum gx_status
pv_x_start(struct pv_loop *loop, const struct pv_request *req,
           const struct pv_callbacks *cb, const struct pv_xkind *k,
           struct pv_call **out, char *err, size_t errlen)
{
    const struct cfg_provider *prov = req->provider;
    const char *pname = prov->name ? prov->name : "?";
    const char *up = req->model->upstream ? req->model->upstream
                                          : req->model->name;
    char path[512];
    if (!prov->base_url || !*prov->base_url || !up || !*up) {
        gx_errf(err, errlen, "provider %s: no base_url or model", pname);
        return GX_EINVAL;
    }
    if (k->path(up, req->stream, path, sizeof(path)) != 0) {
        gx_errf(err, errlen, "provider %s: model name '%.64s' cannot be "
                             "sent to a %s upstream",
                pname, up, k->name);
        return GX_EINVAL;
    }
    if (!json_is_object(req->body)) {
        gx_errf(err, errlen, "request body is not a JSON object");
        return GX_EINVAL;
    }
    char msg[700];
    char *text = NULL;
    size_t text_len = 0;
    int rc;
    if (pv_passthrough(req->chat, prov->kind)) {
        /* The client's own bytes; only the model's value changes. */
        text = pv_msgs_pass_request(req->chat, up, &text_len);
        rc = text ? PV_X_OK : PV_X_NOMEM;
    } else {
        json_t *body = NULL;
        rc = k->translate(req->body, up, req->stream, &body, msg,
                          sizeof(msg));
        if (rc == PV_X_OK) {
            text = body ? json_dumps(body, JSON_COMPACT) : NULL;
            rc = text ? PV_X_OK : PV_X_NOMEM;
            text_len = text ? strlen(text) : 0;
        }
        json_decref(body);
    }
    if (rc == PV_X_NOMEM) {
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    int versioned = 0;
    size_t bl = root_len(prov->base_url, &versioned);
    const char *p = path;
    if (versioned && *p == '/')
        p = strchr(p + 1, '/') ? strchr(p + 1, '/') : "";
    size_t need = bl + strlen(p) + 1;
    char *url = malloc(need);
    enum gx_status st = GX_ENOMEM;
    if (url) {
        snprintf(url, need, "%.*s%s", (int)bl, prov->base_url, p);
        st = x_send(loop, req, cb, k, url, text, text_len,
                    rc == PV_X_REFUSE ? msg : NULL, out, err, errlen);
        text = NULL;
    } else {
        gx_errf(err, errlen, "out of memory");
    }
    free(url);
    free(text);
    return st;
}
