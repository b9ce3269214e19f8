/*
 * anthropic.c: the "anthropic" kind, Anthropic's native Messages API
 * (POST {base_url}/v1/messages, x-api-key, anthropic-version 2023-06-01)
 * behind OpenAI chat on both sides (native.c has the shared glue).
 *
 * Request, OpenAI chat -> Messages:
 *   messages      system/developer -> "system" (text blocks, in order);
 *                 user -> user (text; image_url as an image block: data:
 *                 URLs base64, http(s) URLs as a url source); assistant ->
 *                 assistant (text, tool_calls as tool_use blocks with the
 *                 parsed arguments as input); tool -> a tool_result block
 *                 in a user turn.  Consecutive turns of one role are
 *                 merged (tool results after a tool_use turn go together).
 *   max_tokens    max_completion_tokens or max_tokens (the larger if both);
 *                 PV_ANTH_DEFAULT_MAX_TOKENS (4096) when neither: the API
 *                 requires it.
 *   stop          stop_sequences; temperature, top_p, top_k as they are
 *   tools         {name, description, input_schema: parameters}
 *   tool_choice   auto/none/required -> auto/none/any; a named function ->
 *                 {type:tool,name}; parallel_tool_calls false ->
 *                 disable_parallel_tool_use
 *   user          metadata.user_id
 *   stream, stream_options   stream (usage always comes; the usage chunk
 *                 goes to the client only if it asked for include_usage)
 *   n             only 1
 * Anything else (response_format, logprobs, seed, penalties, audio ...)
 * is refused with a 400 naming it; a JSON null counts as absent.
 *
 * Answer, Messages -> OpenAI: text blocks -> content, tool_use ->
 * tool_calls (arguments = the input serialised), thinking ->
 * reasoning_content; stop_reason end_turn/stop_sequence/pause_turn ->
 * stop, max_tokens/model_context_window_exceeded -> length, tool_use ->
 * tool_calls, refusal -> content_filter.  usage: prompt_tokens =
 * input_tokens + cache_creation_input_tokens + cache_read_input_tokens,
 * cached_tokens = cache_read_input_tokens, cache_write_tokens =
 * cache_creation_input_tokens, completion_tokens = output_tokens
 * (thinking included; Anthropic does not count it apart).
 *
 * Stream events: message_start (id, model, input usage), content_block_
 * start (tool_use -> a tool_calls delta with id and name), content_block_
 * delta (text_delta -> content, input_json_delta -> arguments,
 * thinking_delta -> reasoning_content; signature_delta dropped),
 * content_block_stop, message_delta (stop_reason -> finish_reason, usage
 * output_tokens), message_stop (the end), ping (ignored), error (the call
 * fails).  The role chunk is held until there is content, so an error
 * right after message_start can still fail over.
 */
#include "providers.h"
#include "providers_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
is_set(const json_t *v)
{
    return v && !json_is_null(v);
}

/* ---- request ------------------------------------------------------------ */

static json_t *
text_block(const char *s)
{
    return json_pack("{s:s,s:s}", "type", "text", "text", s);
}

/* One user content part as a Messages block; NULL and a refusal when it
 * cannot be expressed. */
static json_t *
user_part(const json_t *part, size_t i, size_t j, char *refused, size_t rlen)
{
    const json_t *ty = json_object_get(part, "type");
    const char *t = json_is_string(ty) ? json_string_value(ty) : "";
    if (!strcmp(t, "text") && json_is_string(json_object_get(part, "text")))
        return text_block(json_string_value(json_object_get(part, "text")));
    if (!strcmp(t, "image_url")) {
        const json_t *iu = json_object_get(part, "image_url");
        const json_t *u = json_is_object(iu) ? json_object_get(iu, "url") : iu;
        const char *url = json_is_string(u) ? json_string_value(u) : "";
        char mime[64];
        const char *data;
        if (pv_x_data_url(url, mime, sizeof(mime), &data) == 0)
            return json_pack("{s:s,s:{s:s,s:s,s:s}}", "type", "image",
                             "source", "type", "base64", "media_type", mime,
                             "data", data);
        if (!strncmp(url, "https://", 8) || !strncmp(url, "http://", 7))
            return json_pack("{s:s,s:{s:s,s:s}}", "type", "image", "source",
                             "type", "url", "url", url);
        pv_x_refuse_add(refused, rlen, "messages[%zu].content[%zu].image_url",
                        i, j);
        return NULL;
    }
    pv_x_refuse_add(refused, rlen, "messages[%zu].content[%zu] (type '%s')",
                    i, j, t);
    return NULL;
}

static json_t *
tool_use(const json_t *tc, const char *name, json_t *args, size_t i, size_t j,
         char *refused, size_t rlen)
{
    const char *id = json_string_value(json_object_get(tc, "id"));
    if (!id) {
        pv_x_refuse_add(refused, rlen, "messages[%zu].tool_calls[%zu].id", i,
                        j);
        json_decref(args);
        return NULL;
    }
    return json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id,
                     "name", name, "input", args);
}

static json_t *
tool_result(const json_t *msgs, size_t i, const char *id, const char *text)
{
    (void)msgs;
    (void)i;
    return json_pack("{s:s,s:s,s:s}", "type", "tool_result", "tool_use_id",
                     id, "content", text);
}

static const struct pv_x_msgs_ops anth_msgs = {
    .field = "content",
    .assistant_role = "assistant",
    .text = text_block,
    .user_part = user_part,
    .tool_call = tool_use,
    .tool_result = tool_result,
};

static json_t *
tool_choice(const json_t *tc, const json_t *ptc, char *refused, size_t rlen)
{
    json_t *out = NULL;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        const char *t = !strcmp(s, "auto")       ? "auto"
                        : !strcmp(s, "none")     ? "none"
                        : !strcmp(s, "required") ? "any"
                                                 : NULL;
        if (!t) {
            pv_x_refuse_add(refused, rlen, "tool_choice ('%s')", s);
            return NULL;
        }
        out = json_pack("{s:s}", "type", t);
    } else if (json_is_object(tc)) {
        const json_t *name =
            json_object_get(json_object_get(tc, "function"), "name");
        if (!json_is_string(name)) {
            pv_x_refuse_add(refused, rlen, "tool_choice");
            return NULL;
        }
        out = json_pack("{s:s,s:s}", "type", "tool", "name",
                        json_string_value(name));
    } else if (json_is_false(ptc)) {
        out = json_pack("{s:s}", "type", "auto");
    } else {
        return NULL;
    }
    if (out && json_is_false(ptc) &&
        strcmp(json_string_value(json_object_get(out, "type")), "none"))
        json_object_set_new(out, "disable_parallel_tool_use", json_true());
    return out;
}

static const char *const anth_keys[] = {
    "model",       "messages",    "max_tokens", "max_completion_tokens",
    "temperature", "top_p",       "top_k",      "stop",
    "stream",      "stream_options", "tools",   "tool_choice",
    "parallel_tool_calls", "user", "n",         NULL};

int
pv_anth_request(const json_t *oa, const char *upstream, int stream,
                json_t **out, char *msg, size_t len)
{
    char refused[512] = "";
    pv_x_refuse_keys(oa, anth_keys, refused, sizeof(refused));
    json_t *body = json_object(), *system = json_array(), *turns = json_array();
    int rc = PV_X_NOMEM;
    if (!body || !system || !turns)
        goto out;
    int64_t mt = pv_x_max_tokens(oa);
    if (mt <= 0)
        mt = PV_ANTH_DEFAULT_MAX_TOKENS;
    json_object_set_new(body, "model", json_string(upstream));
    json_object_set_new(body, "max_tokens", json_integer(mt));
    if ((rc = pv_x_messages(json_object_get(oa, "messages"), &anth_msgs,
                            system, turns, refused, sizeof(refused))) !=
        PV_X_OK)
        goto out;
    if (json_array_size(system))
        json_object_set(body, "system", system);
    json_object_set(body, "messages", turns);
    static const char *const same[] = {"temperature", "top_p", "top_k"};
    for (size_t k = 0; k < 3; k++) {
        const json_t *v = json_object_get(oa, same[k]);
        if (is_set(v)) {
            if (!json_is_number(v))
                pv_x_refuse_add(refused, sizeof(refused), "%s (a number)",
                                same[k]);
            else
                json_object_set_new(body, same[k], json_deep_copy(v));
        }
    }
    const json_t *stop = json_object_get(oa, "stop");
    if (json_is_string(stop)) {
        json_object_set_new(body, "stop_sequences",
                            json_pack("[s]", json_string_value(stop)));
    } else if (json_is_array(stop)) {
        json_object_set_new(body, "stop_sequences", json_deep_copy(stop));
    } else if (is_set(stop)) {
        pv_x_refuse_add(refused, sizeof(refused), "stop");
    }
    const json_t *tools = json_object_get(oa, "tools");
    if (json_is_array(tools) && json_array_size(tools)) {
        json_t *at = json_array();
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            const json_t *fn = json_object_get(t, "function");
            const json_t *name = json_object_get(fn, "name");
            const json_t *ty = json_object_get(t, "type");
            if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") ||
                !json_is_string(name)) {
                pv_x_refuse_add(refused, sizeof(refused),
                                "tools[%zu] (only function tools)", i);
                continue;
            }
            if (json_is_true(json_object_get(fn, "strict")))
                pv_x_refuse_add(refused, sizeof(refused),
                                "tools[%zu].function.strict", i);
            const json_t *params = json_object_get(fn, "parameters");
            json_t *o = json_pack("{s:s,s:o}", "name", json_string_value(name),
                                  "input_schema",
                                  json_is_object(params)
                                      ? json_deep_copy(params)
                                      : json_pack("{s:s}", "type", "object"));
            const json_t *d = json_object_get(fn, "description");
            if (o && json_is_string(d))
                json_object_set_new(o, "description", json_deep_copy(d));
            if (!at || !o || json_array_append_new(at, o)) {
                json_decref(at);
                rc = PV_X_NOMEM;
                goto out;
            }
        }
        json_object_set_new(body, "tools", at);
    }
    json_t *tc = tool_choice(json_object_get(oa, "tool_choice"),
                             json_object_get(oa, "parallel_tool_calls"),
                             refused, sizeof(refused));
    if (tc)
        json_object_set_new(body, "tool_choice", tc);
    const json_t *user = json_object_get(oa, "user");
    if (json_is_string(user))
        json_object_set_new(body, "metadata",
                            json_pack("{s:s}", "user_id",
                                      json_string_value(user)));
    if (stream)
        json_object_set_new(body, "stream", json_true());
    if (!json_array_size(turns) && !refused[0])
        pv_x_refuse_add(refused, sizeof(refused),
                        "messages (at least one user or assistant message)");
    rc = PV_X_OK;
out:
    json_decref(system);
    json_decref(turns);
    rc = pv_x_request_end(rc, "anthropic", refused, &body, msg, len);
    *out = body;
    return rc;
}

/* ---- answer ------------------------------------------------------------- */

/* stop_reason <-> finish_reason, both ways: the first row of a
 * finish_reason is what it becomes in Messages (messages.c). */
static const char *const stop_map[][2] = {
    {"end_turn", "stop"},
    {"max_tokens", "length"},
    {"tool_use", "tool_calls"},
    {"refusal", "content_filter"},
    {"stop_sequence", "stop"},
    {"pause_turn", "stop"},
    {"model_context_window_exceeded", "length"},
};

static const char *
finish_of(const char *stop_reason)
{
    for (size_t i = 0; stop_reason && i < sizeof(stop_map) / sizeof(*stop_map);
         i++)
        if (!strcmp(stop_reason, stop_map[i][0]))
            return stop_map[i][1];
    return "stop"; /* and stop reasons added later */
}

const char *
pv_anth_stop_reason(const char *finish)
{
    for (size_t i = 0; finish && i < sizeof(stop_map) / sizeof(*stop_map); i++)
        if (!strcmp(finish, stop_map[i][1]))
            return stop_map[i][0];
    return "end_turn";
}

/* Reads a Messages usage object into u (present fields only). */
static void
usage_read(const json_t *us, struct pv_usage *u)
{
    if (!json_is_object(us))
        return;
    int64_t in = json_object_get(us, "input_tokens")
                     ? pv_x_num(us, "input_tokens")
                     : u->prompt_tokens - u->cached_tokens -
                           u->cache_write_tokens;
    if (json_object_get(us, "cache_read_input_tokens"))
        u->cached_tokens = pv_x_num(us, "cache_read_input_tokens");
    if (json_object_get(us, "cache_creation_input_tokens"))
        u->cache_write_tokens = pv_x_num(us, "cache_creation_input_tokens");
    if (json_object_get(us, "output_tokens"))
        u->completion_tokens = pv_x_num(us, "output_tokens");
    int64_t p = in;
    if (__builtin_add_overflow(p, u->cached_tokens, &p) ||
        __builtin_add_overflow(p, u->cache_write_tokens, &p))
        p = INT64_MAX;
    u->prompt_tokens = p;
    u->have = 1;
}

json_t *
pv_anth_usage_json(const struct pv_usage *u)
{
    int64_t in = u->prompt_tokens - u->cached_tokens - u->cache_write_tokens;
    return json_pack("{s:I,s:I,s:I,s:I}", "input_tokens",
                     (json_int_t)(in > 0 ? in : 0), "output_tokens",
                     (json_int_t)u->completion_tokens,
                     "cache_creation_input_tokens",
                     (json_int_t)u->cache_write_tokens,
                     "cache_read_input_tokens", (json_int_t)u->cached_tokens);
}

json_t *
pv_anth_answer(const json_t *up, struct pv_usage *u, char *why, size_t len)
{
    const json_t *content = json_object_get(up, "content");
    const json_t *type = json_object_get(up, "type");
    if (!json_is_array(content) || !json_is_string(type) ||
        strcmp(json_string_value(type), "message")) {
        snprintf(why, len, "not a Messages answer (no \"content\" array)");
        return NULL;
    }
    struct gx_buf text, think;
    gx_buf_init(&text, 0);
    gx_buf_init(&think, 0);
    json_t *calls = json_array();
    json_t *res = NULL;
    size_t i;
    const json_t *b;
    int ok = calls != NULL;
    json_array_foreach(content, i, b) {
        const char *bt = json_string_value(json_object_get(b, "type"));
        if (!bt)
            continue;
        const json_t *t;
        if (!strcmp(bt, "text") &&
            json_is_string(t = json_object_get(b, "text"))) {
            ok = ok && gx_buf_append(&text, json_string_value(t),
                                     json_string_length(t)) == GX_OK;
        } else if (!strcmp(bt, "thinking") &&
                   json_is_string(t = json_object_get(b, "thinking"))) {
            ok = ok && gx_buf_append(&think, json_string_value(t),
                                     json_string_length(t)) == GX_OK;
        } else if (!strcmp(bt, "tool_use")) {
            const json_t *id = json_object_get(b, "id");
            const json_t *name = json_object_get(b, "name");
            const json_t *input = json_object_get(b, "input");
            char *args = input ? json_dumps(input, JSON_COMPACT |
                                                       JSON_ENCODE_ANY)
                               : strdup("{}");
            if (!json_is_string(id) || !json_is_string(name) || !args) {
                free(args);
                snprintf(why, len, "tool_use block %zu without id or name", i);
                goto out;
            }
            json_t *c = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id",
                                  json_string_value(id), "type", "function",
                                  "function", "name", json_string_value(name),
                                  "arguments", args);
            free(args);
            ok = ok && c && json_array_append_new(calls, c) == 0;
        }
    }
    if (!ok || gx_buf_append(&text, "", 1) != GX_OK) {
        snprintf(why, len, "out of memory");
        goto out;
    }
    json_t *message = json_pack("{s:s,s:s}", "role", "assistant", "content",
                                text.data);
    if (message && text.len == 1 && json_array_size(calls))
        json_object_set_new(message, "content", json_null());
    if (message && json_array_size(calls))
        json_object_set(message, "tool_calls", calls);
    if (message && think.len &&
        gx_buf_append(&think, "", 1) == GX_OK)
        json_object_set_new(message, "reasoning_content",
                            json_string(think.data));
    memset(u, 0, sizeof(*u));
    usage_read(json_object_get(up, "usage"), u);
    pv_usage_clamp(u);
    const char *id = json_string_value(json_object_get(up, "id"));
    const char *model = json_string_value(json_object_get(up, "model"));
    res = message ? pv_x_completion(
                        id ? id : "msg", model ? model : "",
                        message,
                        finish_of(json_string_value(
                            json_object_get(up, "stop_reason"))),
                        u)
                  : NULL;
    if (!res)
        snprintf(why, len, "out of memory");
out:
    json_decref(calls);
    gx_buf_cleanup(&text);
    gx_buf_cleanup(&think);
    return res;
}

/* ---- stream ------------------------------------------------------------- */

static int
emit_content(struct pv_xstream *s, const char *field, const char *text,
             pv_xemit emit, void *ud)
{
    json_t *d = json_pack("{s:s}", field, text);
    return pv_x_emit_delta(s, d, NULL, emit, ud) ? PV_XS_EMIT : 0;
}

int
pv_anth_event(struct pv_xstream *s, const char *type, const json_t *ev,
              pv_xemit emit, void *ud, char *why, size_t len)
{
    const char *t = json_string_value(json_object_get(ev, "type"));
    if (!t || !*t)
        t = type;
    if (!t || !*t) {
        snprintf(why, len, "event without a type");
        return PV_XS_MALFORMED;
    }
    if (!strcmp(t, "ping") || !strcmp(t, "content_block_stop"))
        return 0;
    if (!strcmp(t, "error")) {
        const json_t *e = json_object_get(ev, "error");
        const char *m = json_string_value(json_object_get(e, "message"));
        const char *et = json_string_value(json_object_get(e, "type"));
        snprintf(why, len, "%s%s%s", et ? et : "error", m ? ": " : "",
                 m ? m : "");
        return PV_XS_UPSTREAM_ERROR;
    }
    if (!strcmp(t, "message_start")) {
        const json_t *m = json_object_get(ev, "message");
        const char *id = json_string_value(json_object_get(m, "id"));
        const char *model = json_string_value(json_object_get(m, "model"));
        snprintf(s->id, sizeof(s->id), "%s", id ? id : "msg");
        snprintf(s->model, sizeof(s->model), "%s", model ? model : "");
        usage_read(json_object_get(m, "usage"), &s->usage);
        pv_usage_clamp(&s->usage);
        return 0;
    }
    if (!strcmp(t, "content_block_start") ||
        !strcmp(t, "content_block_delta")) {
        const json_t *ix = json_object_get(ev, "index");
        if (!json_is_integer(ix) || json_integer_value(ix) < 0 ||
            json_integer_value(ix) >= PV_X_MAX_BLOCKS) {
            snprintf(why, len, "%s without a usable index", t);
            return PV_XS_MALFORMED;
        }
        size_t bi = (size_t)json_integer_value(ix);
        if (!strcmp(t, "content_block_start")) {
            const json_t *cb = json_object_get(ev, "content_block");
            const char *bt = json_string_value(json_object_get(cb, "type"));
            if (!bt || strcmp(bt, "tool_use")) {
                const char *tx = json_string_value(json_object_get(cb, "text"));
                return tx && *tx ? emit_content(s, "content", tx, emit, ud)
                                 : 0;
            }
            const char *id = json_string_value(json_object_get(cb, "id"));
            const char *name = json_string_value(json_object_get(cb, "name"));
            if (!id || !name) {
                snprintf(why, len, "tool_use block without id or name");
                return PV_XS_MALFORMED;
            }
            int k = s->n_tools++;
            s->block_tool[bi] = k + 1;
            json_t *d = json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}",
                                  "tool_calls", "index", k, "id", id, "type",
                                  "function", "function", "name", name,
                                  "arguments", "");
            return pv_x_emit_delta(s, d, NULL, emit, ud) ? PV_XS_EMIT : 0;
        }
        const json_t *d = json_object_get(ev, "delta");
        const char *dt = json_string_value(json_object_get(d, "type"));
        if (!dt) {
            snprintf(why, len, "content_block_delta without a delta type");
            return PV_XS_MALFORMED;
        }
        if (!strcmp(dt, "text_delta")) {
            const char *tx = json_string_value(json_object_get(d, "text"));
            return tx ? emit_content(s, "content", tx, emit, ud) : 0;
        }
        if (!strcmp(dt, "thinking_delta")) {
            const char *tx = json_string_value(json_object_get(d, "thinking"));
            return tx ? emit_content(s, "reasoning_content", tx, emit, ud) : 0;
        }
        if (!strcmp(dt, "input_json_delta")) {
            const char *pj =
                json_string_value(json_object_get(d, "partial_json"));
            if (!s->block_tool[bi]) {
                snprintf(why, len, "input_json_delta outside a tool_use block");
                return PV_XS_MALFORMED;
            }
            if (!pj || !*pj)
                return 0;
            json_t *dd = json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls",
                                   "index", s->block_tool[bi] - 1, "function",
                                   "arguments", pj);
            return pv_x_emit_delta(s, dd, NULL, emit, ud) ? PV_XS_EMIT : 0;
        }
        return 0; /* signature_delta, citations_delta ... */
    }
    if (!strcmp(t, "message_delta")) {
        const json_t *d = json_object_get(ev, "delta");
        usage_read(json_object_get(ev, "usage"), &s->usage);
        pv_usage_clamp(&s->usage);
        const json_t *sr = json_object_get(d, "stop_reason");
        if (json_is_string(sr)) {
            s->finish = finish_of(json_string_value(sr));
            json_t *e = json_object();
            return pv_x_emit_delta(s, e, s->finish, emit, ud) ? PV_XS_EMIT
                                                              : 0;
        }
        return 0;
    }
    if (!strcmp(t, "message_stop")) {
        if (!s->finish) {
            s->finish = "stop";
            if (pv_x_emit_delta(s, json_object(), s->finish, emit, ud))
                return PV_XS_EMIT;
        }
        s->complete = 1;
        return PV_XS_DONE;
    }
    return 0; /* event types added later are skipped, as the API asks */
}

/* ---- passthrough readers ------------------------------------------------
 * A passthrough hands the upstream's bytes on untouched; llmux only reads
 * what it needs from them: the answer's shape and usage, and per event
 * the type, the usage (message_start's message.usage, message_delta's
 * usage), the end (message_stop) and an in-band error.  The member scanner
 * places those values and only they are parsed (a usage object is tens of
 * bytes; the text and the thinking blocks around it are never decoded).
 * When the scanner cannot decide (nesting past PV_JS_MAX_DEPTH, a real it
 * cannot convert) the whole text goes through jansson instead: the same
 * answers, more work. */
enum { AP_TYPE, AP_USAGE, AP_MUSAGE, AP_ERROR, AP_CONTENT, AP_N };

struct anth_view {
    json_t *v[AP_N]; /* owned (scanner) or borrowed from tree */
    json_t *tree;
    int content_is_array;
};

static void
view_free(struct anth_view *w)
{
    if (w->tree)
        json_decref(w->tree);
    else
        for (int k = 0; k < AP_N; k++)
            json_decref(w->v[k]);
    memset(w, 0, sizeof(*w));
}

/* 0, or -1 when data is not a JSON object (why says so). */
static int
view_of(const char *data, size_t len, struct anth_view *w, char *why,
        size_t wlen)
{
    static const char *const paths[AP_N] = {"type", "usage", "message.usage",
                                            "error", "content"};
    struct pv_js_member m[16];
    size_t nm = 0;
    memset(w, 0, sizeof(*w));
    enum pv_js_verdict vd = pv_json_scan_members(data, len, paths, AP_N, m,
                                                 16, &nm);
    if (vd == PV_JS_INVALID) {
        snprintf(why, wlen, "not a JSON object");
        return -1;
    }
    if (vd == PV_JS_OBJECT) {
        /* The last occurrence of each, as jansson keeps it. */
        const struct pv_js_member *last[AP_N] = {0};
        for (size_t k = 0; k < nm; k++)
            last[m[k].path] = &m[k];
        for (int k = 0; k < AP_N; k++) {
            if (!last[k])
                continue;
            const char *at = data + last[k]->at;
            if (k == AP_CONTENT) {
                w->content_is_array = *at == '[';
                continue;
            }
            w->v[k] = json_loadb(at, last[k]->len, JSON_DECODE_ANY, NULL);
        }
        return 0;
    }
    json_error_t je;
    w->tree = json_loadb(data, len, 0, &je);
    if (!json_is_object(w->tree)) {
        snprintf(why, wlen, "%s", w->tree ? "not a JSON object" : je.text);
        json_decref(w->tree);
        w->tree = NULL;
        return -1;
    }
    w->v[AP_TYPE] = json_object_get(w->tree, "type");
    w->v[AP_USAGE] = json_object_get(w->tree, "usage");
    w->v[AP_MUSAGE] =
        json_object_get(json_object_get(w->tree, "message"), "usage");
    w->v[AP_ERROR] = json_object_get(w->tree, "error");
    w->content_is_array =
        json_is_array(json_object_get(w->tree, "content"));
    return 0;
}

int
pv_anth_pass_answer(const char *body, size_t len, struct pv_usage *u,
                    char *why, size_t wlen)
{
    struct anth_view w;
    if (view_of(body, len, &w, why, wlen) != 0)
        return -1;
    const char *t = json_string_value(w.v[AP_TYPE]);
    int rc = -1;
    memset(u, 0, sizeof(*u));
    if (!w.content_is_array || !t || strcmp(t, "message")) {
        snprintf(why, wlen, "not a Messages answer (no \"content\" array)");
    } else {
        usage_read(w.v[AP_USAGE], u);
        pv_usage_clamp(u);
        rc = 0;
    }
    view_free(&w);
    return rc;
}

int
pv_anth_pass_event(struct pv_xstream *s, const char *sse_type,
                   const char *data, size_t len, char *type, size_t tlen,
                   char *why, size_t wlen)
{
    struct anth_view w;
    type[0] = '\0';
    if (view_of(data, len, &w, why, wlen) != 0)
        return PV_XS_MALFORMED;
    /* As pv_anth_event: the data's type, else the SSE event's. */
    const char *t = json_string_value(w.v[AP_TYPE]);
    if (!t || !*t)
        t = sse_type;
    int rc = 0;
    if (!t || !*t) {
        snprintf(why, wlen, "event without a type");
        rc = PV_XS_MALFORMED;
    } else if (!strcmp(t, "error")) {
        const json_t *e = w.v[AP_ERROR];
        const char *m = json_string_value(json_object_get(e, "message"));
        const char *et = json_string_value(json_object_get(e, "type"));
        snprintf(why, wlen, "%s%s%s", et ? et : "error", m ? ": " : "",
                 m ? m : "");
        rc = PV_XS_UPSTREAM_ERROR;
    } else if (!strcmp(t, "message_start") || !strcmp(t, "message_delta")) {
        usage_read(w.v[!strcmp(t, "message_start") ? AP_MUSAGE : AP_USAGE],
                   &s->usage);
        pv_usage_clamp(&s->usage);
    } else if (!strcmp(t, "message_stop")) {
        s->complete = 1;
        rc = PV_XS_DONE;
    }
    if (t)
        snprintf(type, tlen, "%s", t);
    view_free(&w);
    return rc;
}

/* ---- the kind ----------------------------------------------------------- */

static int
anth_path(const char *upstream, int stream, char *buf, size_t len)
{
    (void)upstream; /* the model goes in the body */
    (void)stream;
    snprintf(buf, len, "/v1/messages");
    return 0;
}

static const struct pv_xkind anth_kind = {
    .ops = &pv_anthropic_ops,
    .name = "anthropic",
    .translate = pv_anth_request,
    .path = anth_path,
    .key_header = "x-api-key",
    .extra_name = "anthropic-version",
    .extra_value = PV_ANTH_VERSION,
    .answer = pv_anth_answer,
    .event = pv_anth_event,
    .complete_at_eof = 0,
    .pass_answer = pv_anth_pass_answer,
    .pass_event = pv_anth_pass_event,
};

static enum gx_status
anth_start(struct pv_loop *loop, const struct pv_request *req,
           const struct pv_callbacks *cb, struct pv_call **out, char *err,
           size_t errlen)
{
    return pv_x_start(loop, req, cb, &anth_kind, out, err, errlen);
}

const struct pv_ops pv_anthropic_ops = {
    .kind = "anthropic",
    .start = anth_start,
    .cancel = pv_http_cancel,
    .pause = pv_http_pause,
    .resume = pv_http_resume,
};
