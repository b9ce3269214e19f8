/*
 * messages.c: the Anthropic Messages API as an inbound format.  The
 * client's body is parsed once into the format-neutral request (struct
 * pv_chat: an OpenAI chat body every kind reads, plus the client's own
 * body in `native` for the kind that speaks Messages itself), and the
 * answer of whichever kind served it is written back in Messages shapes.
 * Pure functions over buffers; the gateway does the I/O.
 *
 * Request, Messages -> OpenAI chat (pv_msgs_parse):
 *   model, max_tokens   as they are (max_tokens required, 1..1000000,
 *                       except for count_tokens)
 *   system              a string or text blocks -> one system message
 *   messages            user / assistant turns of a string or blocks:
 *     text              a text part (assistant: the message content)
 *     image             base64 source -> image_url data: URL; url source ->
 *                       image_url (user turns only)
 *     tool_use          assistant tool_calls (arguments = input serialised)
 *     tool_result       a "tool" message per block, before the rest of the
 *                       user turn (content: a string or text blocks; an
 *                       is_error result's text starts "Error: ")
 *     thinking, redacted_thinking   left out of the translation (kept in
 *                       the native body): a thinking block can only be
 *                       replayed to Anthropic, with its signature
 *     cache_control     on any block: left out of the translation (a hint
 *                       to Anthropic's prompt cache; kept in native)
 *   tools               {name, description, input_schema} -> function
 *                       tools; server tools (a "type" other than custom)
 *                       are Anthropic-only
 *   tool_choice         auto / any / tool / none -> auto / required /
 *                       function / none; disable_parallel_tool_use ->
 *                       parallel_tool_calls false
 *   stop_sequences      stop; temperature, top_p, top_k as they are
 *   metadata.user_id    user
 *   stream              stream
 *   thinking (enabled), container, mcp_servers, service_tier,
 *   context_management, document and search_result blocks, citations
 *                       Anthropic-only: recorded in c->native_only, and a
 *                       target of another kind refuses the request (400)
 * Anything else (an unknown field or block type, a mistyped value) is a
 * 400 naming it, whatever the target.
 *
 * Answer, OpenAI chat -> Messages (pv_msgs_answer): content text -> a text
 * block, reasoning_content -> a thinking block (empty signature),
 * tool_calls -> tool_use blocks (input parsed from the arguments);
 * finish_reason -> stop_reason (pv_anth_stop_reason); usage from the
 * request's settled usage (pv_anth_usage_json).
 *
 * Stream, OpenAI chunks -> Messages events (struct pv_msgs_stream):
 * message_start and ping before the first block; each run of text,
 * reasoning or one tool call's arguments is one block (content_block_start,
 * content_block_delta with text_delta / thinking_delta / input_json_delta,
 * content_block_stop); pv_msgs_stream_end closes the last block and writes
 * message_delta (stop_reason, the settled usage) and message_stop.
 *
 * Passthrough (a kind that speaks Messages): the upstream's body and
 * events go to the client unchanged apart from "model" (the name the
 * client asked for); its message_stop is held back and written by
 * pv_msgs_stream_end after the ledger row is committed.
 */
#include "providers.h"
#include "providers_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define bad pv_refuse

static int
is_set(const json_t *v)
{
    return v && !json_is_null(v);
}

/* Appends one Anthropic-only feature to c->native_only. */
static void
native_only(struct pv_chat *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
native_only(struct pv_chat *c, const char *fmt, ...)
{
    size_t n = strlen(c->native_only);
    if (n + 4 >= sizeof(c->native_only))
        return;
    if (n)
        n += (size_t)snprintf(c->native_only + n, sizeof(c->native_only) - n,
                              ", ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->native_only + n, sizeof(c->native_only) - n, fmt, ap);
    va_end(ap);
}

/* Keys a block of type t may have (besides type and cache_control). */
static int
block_key_ok(const char *t, const char *k)
{
    static const char *const keys[][4] = {
        {"text", "text", "citations", NULL},
        {"image", "source", NULL, NULL},
        {"tool_use", "id", "name", "input"},
        {"tool_result", "tool_use_id", "content", "is_error"},
        {"thinking", "thinking", "signature", NULL},
        {"redacted_thinking", "data", NULL, NULL},
    };
    if (!strcmp(k, "type") || !strcmp(k, "cache_control"))
        return 1;
    for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++)
        if (!strcmp(t, keys[i][0]))
            for (int j = 1; j < 4 && keys[i][j]; j++)
                if (!strcmp(k, keys[i][j]))
                    return 1;
    return 0;
}

/* An image block as an OpenAI image_url part; NULL with a reason. */
static json_t *
image_part(const json_t *b, const char *where, char *msg, size_t len,
           const char **param)
{
    const json_t *src = json_object_get(b, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    if (st && !strcmp(st, "base64")) {
        const char *mt = json_string_value(json_object_get(src, "media_type"));
        const char *data = json_string_value(json_object_get(src, "data"));
        if (!mt || !data || strpbrk(mt, ";,")) {
            bad(msg, len, param, "messages",
                "%s.source: a base64 image needs string 'media_type' and "
                "'data'.",
                where);
            return NULL;
        }
        size_t n = strlen(mt) + strlen(data) + 16;
        char *url = malloc(n);
        if (!url)
            return NULL;
        snprintf(url, n, "data:%s;base64,%s", mt, data);
        json_t *p = json_pack("{s:s,s:{s:s}}", "type", "image_url",
                              "image_url", "url", url);
        free(url);
        return p;
    }
    if (st && !strcmp(st, "url") &&
        json_is_string(json_object_get(src, "url")))
        return json_pack("{s:s,s:{s:O}}", "type", "image_url", "image_url",
                         "url", json_object_get(src, "url"));
    bad(msg, len, param, "messages",
        "%s.source: the type must be 'base64' or 'url' (file sources are "
        "not supported).",
        where);
    return NULL;
}

/* A tool_result's content as text (a string or text blocks). */
static int
result_text(const json_t *content, struct gx_buf *out)
{
    if (!content || json_is_null(content))
        return 0;
    if (json_is_string(content))
        return gx_buf_append(out, json_string_value(content),
                             json_string_length(content)) == GX_OK
                   ? 0
                   : -1;
    if (!json_is_array(content))
        return -1;
    size_t i;
    const json_t *b;
    json_array_foreach(content, i, b) {
        const char *t = json_string_value(json_object_get(b, "type"));
        const json_t *tx = json_object_get(b, "text");
        if (!t || strcmp(t, "text") || !json_is_string(tx))
            return -1;
        if ((i && gx_buf_append(out, "\n", 1) != GX_OK) ||
            gx_buf_append(out, json_string_value(tx),
                          json_string_length(tx)) != GX_OK)
            return -1;
    }
    return 0;
}

/* One message of the client's messages into OpenAI messages appended to
 * out (a user turn's tool results first, each its own tool message). */
static int
message_in(struct pv_chat *c, const json_t *m, size_t i, json_t *out,
           char *msg, size_t len, const char **param)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    const json_t *content = json_object_get(m, "content");
    if (!json_is_object(m) || !role ||
        (strcmp(role, "user") && strcmp(role, "assistant")))
        return bad(msg, len, param, "messages",
                   "messages[%zu] must be an object with 'role' \"user\" or "
                   "\"assistant\".",
                   i);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (strcmp(k, "role") && strcmp(k, "content"))
            return bad(msg, len, param, "messages",
                       "messages[%zu]: unknown field '%s'.", i, k);
    }
    int user = !strcmp(role, "user");
    if (json_is_string(content)) {
        json_t *o = json_pack("{s:s,s:O}", "role", role, "content", content);
        return o && json_array_append_new(out, o) == 0 ? 0 : -2;
    }
    if (!json_is_array(content))
        return bad(msg, len, param, "messages",
                   "messages[%zu].content must be a string or an array of "
                   "content blocks.",
                   i);
    json_t *parts = json_array();      /* user: OpenAI content parts */
    json_t *calls = json_array();      /* assistant: tool_calls */
    struct gx_buf text;                /* assistant: its text */
    gx_buf_init(&text, 0);
    int rc = parts && calls ? 0 : -2;
    size_t j;
    const json_t *b;
    json_array_foreach(content, j, b) {
        if (rc)
            break;
        char where[64];
        snprintf(where, sizeof(where), "messages[%zu].content[%zu]", i, j);
        const char *t = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !t) {
            rc = bad(msg, len, param, "messages",
                     "%s must be an object with a string 'type'.", where);
            break;
        }
        if (!strcmp(t, "document") || !strcmp(t, "search_result") ||
            !strcmp(t, "server_tool_use") ||
            !strcmp(t, "web_search_tool_result") ||
            !strcmp(t, "container_upload")) {
            native_only(c, "%s (type '%s')", where, t);
            continue;
        }
        json_object_foreach((json_t *)b, k, v) {
            if (!block_key_ok(t, k)) {
                rc = bad(msg, len, param, "messages",
                         "%s: unknown field '%s' for a '%s' block.", where, k,
                         t);
                break;
            }
        }
        if (rc)
            break;
        if (is_set(json_object_get(b, "citations")))
            native_only(c, "%s.citations", where);
        if (!strcmp(t, "text")) {
            const json_t *tx = json_object_get(b, "text");
            if (!json_is_string(tx)) {
                rc = bad(msg, len, param, "messages",
                         "%s.text must be a string.", where);
            } else if (user) {
                json_t *p = json_pack("{s:s,s:O}", "type", "text", "text", tx);
                rc = p && json_array_append_new(parts, p) == 0 ? 0 : -2;
            } else {
                rc = gx_buf_append(&text, json_string_value(tx),
                                   json_string_length(tx)) == GX_OK
                         ? 0
                         : -2;
            }
        } else if (!strcmp(t, "image")) {
            if (!user) {
                rc = bad(msg, len, param, "messages",
                         "%s: images are only allowed in user turns.", where);
                break;
            }
            json_t *p = image_part(b, where, msg, len, param);
            rc = p ? (json_array_append_new(parts, p) == 0 ? 0 : -2)
                   : (*param ? -1 : -2);
        } else if (!strcmp(t, "tool_use")) {
            const json_t *id = json_object_get(b, "id");
            const json_t *name = json_object_get(b, "name");
            const json_t *input = json_object_get(b, "input");
            if (user || !json_is_string(id) || !json_is_string(name) ||
                !json_is_object(input)) {
                rc = bad(msg, len, param, "messages",
                         "%s: a tool_use block belongs to an assistant turn "
                         "and needs string 'id', 'name' and an object "
                         "'input'.",
                         where);
                break;
            }
            char *args = json_dumps(input, JSON_COMPACT);
            json_t *call = args ? json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id,
                                            "type", "function", "function",
                                            "name", name, "arguments", args)
                                : NULL;
            free(args);
            rc = call && json_array_append_new(calls, call) == 0 ? 0 : -2;
        } else if (!strcmp(t, "tool_result")) {
            const json_t *id = json_object_get(b, "tool_use_id");
            const json_t *ie = json_object_get(b, "is_error");
            struct gx_buf rt;
            gx_buf_init(&rt, 0);
            if (!user || !json_is_string(id) || (is_set(ie) &&
                                                 !json_is_boolean(ie))) {
                rc = bad(msg, len, param, "messages",
                         "%s: a tool_result block belongs to a user turn "
                         "and needs a string 'tool_use_id' (is_error a "
                         "boolean).",
                         where);
            } else if ((json_is_true(ie) &&
                        gx_buf_append(&rt, "Error: ", 7) != GX_OK) ||
                       result_text(json_object_get(b, "content"), &rt) ||
                       gx_buf_append(&rt, "", 1) != GX_OK) {
                rc = bad(msg, len, param, "messages",
                         "%s.content: only a string or text blocks can be "
                         "translated for this target.",
                         where);
            } else if (json_array_size(parts)) {
                rc = bad(msg, len, param, "messages",
                         "%s: tool_result blocks must come before any other "
                         "content of the user turn.",
                         where);
            } else {
                json_t *o = json_pack("{s:s,s:O,s:s}", "role", "tool",
                                      "tool_call_id", id, "content", rt.data);
                rc = o && json_array_append_new(out, o) == 0 ? 0 : -2;
            }
            gx_buf_cleanup(&rt);
        } else if (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")) {
            if (user)
                rc = bad(msg, len, param, "messages",
                         "%s: thinking blocks belong to assistant turns.",
                         where);
            /* else left out of the translation; the native body has it */
        } else {
            rc = bad(msg, len, param, "messages",
                     "%s: unknown content block type '%s'.", where, t);
        }
    }
    if (rc == 0 && user && json_array_size(parts)) {
        json_t *o = json_pack("{s:s,s:O}", "role", "user", "content", parts);
        rc = o && json_array_append_new(out, o) == 0 ? 0 : -2;
    } else if (rc == 0 && !user &&
               (text.len || json_array_size(calls) || !json_array_size(content))) {
        json_t *o = json_object();
        rc = o && gx_buf_append(&text, "", 1) == GX_OK ? 0 : -2;
        if (rc == 0) {
            json_object_set_new(o, "role", json_string("assistant"));
            json_object_set_new(o, "content",
                                text.len > 1 || !json_array_size(calls)
                                    ? json_string(text.data)
                                    : json_null());
            if (json_array_size(calls))
                json_object_set(o, "tool_calls", calls);
            rc = json_array_append_new(out, o) == 0 ? 0 : -2;
        } else {
            json_decref(o);
        }
    }
    json_decref(parts);
    json_decref(calls);
    gx_buf_cleanup(&text);
    return rc;
}

static int
system_in(const json_t *sys, json_t *out, char *msg, size_t len,
          const char **param)
{
    if (!is_set(sys))
        return 0;
    struct gx_buf t;
    gx_buf_init(&t, 0);
    int rc = 0;
    if (json_is_string(sys)) {
        rc = gx_buf_append(&t, json_string_value(sys), json_string_length(sys))
                 ? -2
                 : 0;
    } else if (json_is_array(sys)) {
        size_t i;
        const json_t *b;
        json_array_foreach(sys, i, b) {
            const char *ty = json_string_value(json_object_get(b, "type"));
            const json_t *tx = json_object_get(b, "text");
            const char *k;
            const json_t *v;
            if (!ty || strcmp(ty, "text") || !json_is_string(tx)) {
                rc = bad(msg, len, param, "system",
                         "system[%zu] must be a text block.", i);
                break;
            }
            json_object_foreach((json_t *)b, k, v) {
                if (!block_key_ok("text", k)) {
                    rc = bad(msg, len, param, "system",
                             "system[%zu]: unknown field '%s'.", i, k);
                    break;
                }
            }
            if (rc)
                break;
            /* Blocks are one prompt to Anthropic: joined by a blank line. */
            if ((i && gx_buf_append(&t, "\n\n", 2) != GX_OK) ||
                gx_buf_append(&t, json_string_value(tx),
                              json_string_length(tx)) != GX_OK) {
                rc = -2;
                break;
            }
        }
    } else {
        rc = bad(msg, len, param, "system",
                 "'system' must be a string or an array of text blocks.");
    }
    if (rc == 0 && gx_buf_append(&t, "", 1) != GX_OK)
        rc = -2;
    if (rc == 0) {
        json_t *o = json_pack("{s:s,s:s}", "role", "system", "content",
                              t.data);
        rc = o && json_array_append_new(out, o) == 0 ? 0 : -2;
    }
    gx_buf_cleanup(&t);
    return rc;
}

static int
tools_in(struct pv_chat *c, const json_t *tools, json_t *oa, char *msg,
         size_t len, const char **param)
{
    if (!is_set(tools))
        return 0;
    if (!json_is_array(tools))
        return bad(msg, len, param, "tools", "'tools' must be an array.");
    json_t *out = json_array();
    if (!out)
        return -2;
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const char *ty = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t)) {
            json_decref(out);
            return bad(msg, len, param, "tools",
                       "tools[%zu] must be an object.", i);
        }
        if (ty && strcmp(ty, "custom")) {
            native_only(c, "tools[%zu] (type '%s')", i, ty);
            continue;
        }
        const json_t *name = json_object_get(t, "name");
        const json_t *schema = json_object_get(t, "input_schema");
        const json_t *d = json_object_get(t, "description");
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)t, k, v) {
            if (strcmp(k, "type") && strcmp(k, "name") &&
                strcmp(k, "description") && strcmp(k, "input_schema") &&
                strcmp(k, "cache_control")) {
                json_decref(out);
                return bad(msg, len, param, "tools",
                           "tools[%zu]: unknown field '%s'.", i, k);
            }
        }
        if (!json_is_string(name) || !json_is_object(schema) ||
            (is_set(d) && !json_is_string(d))) {
            json_decref(out);
            return bad(msg, len, param, "tools",
                       "tools[%zu] needs a string 'name' and an object "
                       "'input_schema' ('description' a string).",
                       i);
        }
        json_t *fn = json_pack("{s:O,s:O}", "name", name, "parameters",
                               schema);
        if (fn && json_is_string(d))
            json_object_set(fn, "description", (json_t *)d);
        json_t *o = fn ? json_pack("{s:s,s:o}", "type", "function",
                                   "function", fn)
                       : NULL;
        if (!o || json_array_append_new(out, o)) {
            json_decref(out);
            return -2;
        }
    }
    if (json_array_size(out))
        json_object_set(oa, "tools", out);
    json_decref(out);
    return 0;
}

static int
tool_choice_in(const json_t *tc, json_t *oa, char *msg, size_t len,
               const char **param)
{
    if (!is_set(tc))
        return 0;
    const char *t = json_string_value(json_object_get(tc, "type"));
    const json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (!json_is_object(tc) || !t || (is_set(dp) && !json_is_boolean(dp)))
        return bad(msg, len, param, "tool_choice",
                   "'tool_choice' must be an object with a string 'type' "
                   "(disable_parallel_tool_use a boolean).");
    json_t *v = NULL;
    if (!strcmp(t, "auto"))
        v = json_string("auto");
    else if (!strcmp(t, "any"))
        v = json_string("required");
    else if (!strcmp(t, "none"))
        v = json_string("none");
    else if (!strcmp(t, "tool") &&
             json_is_string(json_object_get(tc, "name")))
        v = json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name",
                      json_object_get(tc, "name"));
    else
        return bad(msg, len, param, "tool_choice",
                   "tool_choice.type must be auto, any, none or tool (with "
                   "a string 'name').");
    if (!v)
        return -2;
    json_object_set_new(oa, "tool_choice", v);
    if (json_is_true(dp))
        json_object_set_new(oa, "parallel_tool_calls", json_false());
    return 0;
}

/* The top-level fields of a Messages request: translated, Anthropic-only,
 * or passed as they are. */
static const char *const known_keys[] = {
    "model",       "messages",    "system",         "max_tokens",
    "stop_sequences", "temperature", "top_p",        "top_k",
    "metadata",    "stream",      "tools",          "tool_choice",
    "thinking",    "container",   "mcp_servers",    "service_tier",
    "context_management", NULL};

static int
translate(struct pv_chat *c, const json_t *in, json_t *oa, int count_only,
          char *msg, size_t len, const char **param)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)in, k, v) {
        size_t i = 0;
        while (known_keys[i] && strcmp(known_keys[i], k))
            i++;
        if (!known_keys[i])
            /* param NULL: the name lives in the body, freed on refusal
             * (params are static strings); the message names it. */
            return bad(msg, len, param, NULL,
                       "Unknown parameter '%s' for the Messages API.", k);
    }
    const json_t *model = json_object_get(in, "model");
    if (!json_is_string(model) || !json_string_length(model))
        return bad(msg, len, param, "model",
                   "'model' is required and must be a non-empty string.");
    json_object_set(oa, "model", (json_t *)model);
    const json_t *mt = json_object_get(in, "max_tokens");
    if (!count_only || is_set(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1 ||
            json_integer_value(mt) > PV_MAX_COMPLETION_TOKENS)
            return bad(msg, len, param, "max_tokens",
                       "'max_tokens' is required: an integer from 1 to %d.",
                       PV_MAX_COMPLETION_TOKENS);
        json_object_set(oa, "max_tokens", (json_t *)mt);
    }
    const json_t *msgs = json_object_get(in, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return bad(msg, len, param, "messages",
                   "'messages' is required: a non-empty array.");
    json_t *out = json_array();
    if (!out)
        return -2;
    json_object_set_new(oa, "messages", out);
    int rc = system_in(json_object_get(in, "system"), out, msg, len, param);
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        if (rc)
            return rc;
        rc = message_in(c, m, i, out, msg, len, param);
    }
    if (rc)
        return rc;
    if (!json_array_size(out))
        return bad(msg, len, param, "messages",
                   "'messages' holds nothing that can be sent.");
    static const char *const nums[] = {"temperature", "top_p"};
    for (size_t n = 0; n < 2; n++) {
        v = json_object_get(in, nums[n]);
        if (is_set(v) && !json_is_number(v))
            return bad(msg, len, param, nums[n], "'%s' must be a number.",
                       nums[n]);
        if (is_set(v))
            json_object_set(oa, nums[n], (json_t *)v);
    }
    v = json_object_get(in, "top_k");
    if (is_set(v) && (!json_is_integer(v) || json_integer_value(v) < 0))
        return bad(msg, len, param, "top_k",
                   "'top_k' must be a non-negative integer.");
    if (is_set(v))
        json_object_set(oa, "top_k", (json_t *)v);
    v = json_object_get(in, "stop_sequences");
    if (is_set(v)) {
        size_t n;
        const json_t *s;
        int ok = json_is_array(v);
        json_array_foreach(v, n, s) ok = ok && json_is_string(s);
        if (!ok)
            return bad(msg, len, param, "stop_sequences",
                       "'stop_sequences' must be an array of strings.");
        if (json_array_size(v))
            json_object_set(oa, "stop", (json_t *)v);
    }
    v = json_object_get(in, "metadata");
    if (is_set(v)) {
        const json_t *u = json_object_get(v, "user_id");
        if (!json_is_object(v) || json_object_size(v) > (u ? 1u : 0u) ||
            (is_set(u) && !json_is_string(u)))
            return bad(msg, len, param, "metadata",
                       "'metadata' may only hold a string 'user_id'.");
        if (json_is_string(u))
            json_object_set(oa, "user", (json_t *)u);
    }
    v = json_object_get(in, "stream");
    if (is_set(v) && !json_is_boolean(v))
        return bad(msg, len, param, "stream", "'stream' must be a boolean.");
    if (json_is_true(v))
        json_object_set_new(oa, "stream", json_true());
    if ((rc = tools_in(c, json_object_get(in, "tools"), oa, msg, len, param)) ||
        (rc = tool_choice_in(json_object_get(in, "tool_choice"), oa, msg, len,
                             param)))
        return rc;
    v = json_object_get(in, "thinking");
    if (is_set(v)) {
        const char *t = json_string_value(json_object_get(v, "type"));
        if (!json_is_object(v) || !t)
            return bad(msg, len, param, "thinking",
                       "'thinking' must be an object with a string 'type'.");
        if (strcmp(t, "disabled"))
            native_only(c, "thinking");
    }
    static const char *const only[] = {"container", "mcp_servers",
                                       "service_tier", "context_management"};
    for (size_t n = 0; n < sizeof(only) / sizeof(*only); n++)
        if (is_set(json_object_get(in, only[n])))
            native_only(c, "%s", only[n]);
    return 0;
}

enum pv_chat_err
pv_msgs_parse(struct pv_chat *c, const char *text, size_t len, int count_only,
              char *msg, size_t msglen, const char **param)
{
    memset(c, 0, sizeof(*c));
    *param = NULL;
    json_t *in = pv_json_body(text, len, msg, msglen);
    if (!in)
        return PV_CHAT_BAD_JSON;
    json_t *oa = json_object();
    char native[sizeof(c->native_only)] = "";
    int rc = -2;
    if (!json_is_object(in)) {
        rc = bad(msg, msglen, param, NULL,
                 "The request body must be a JSON object.");
    } else if (oa) {
        rc = translate(c, in, oa, count_only, msg, msglen, param);
        memcpy(native, c->native_only, sizeof(native));
    }
    if (rc == -2)
        snprintf(msg, msglen, "Out of memory.");
    /* The facts (caps, the one prompt estimate) from the translation,
     * checked by the same rules as a chat request. */
    if (rc == 0 && pv_chat_from_json(c, PV_API_MESSAGES, oa, msg, msglen,
                                     param) != 0)
        rc = -1;
    if (rc != 0) {
        json_decref(oa);
        json_decref(in);
        memset(c, 0, sizeof(*c));
        return PV_CHAT_INVALID;
    }
    memcpy(c->native_only, native, sizeof(native));
    c->native = in;
    c->owned = 1;
    /* For pv_msgs_pass_request; without it the tree is dumped. */
    if (!count_only)
        pv_chat_keep_bytes(c, text, len, 0);
    return PV_CHAT_OK;
}

char *
pv_msgs_pass_request(const struct pv_chat *c, const char *upstream,
                     size_t *out_len)
{
    if (c->text) {
        struct pv_js_member m = {0, c->model_at, c->model_len};
        return pv_json_splice(c->text, c->text_len, &m, 1, upstream,
                              out_len);
    }
    /* The tree (the scan could not place the model): semantically the
     * client's body, but re-serialised. */
    json_t *body = json_deep_copy(c->native);
    if (!body || json_object_set_new(body, "model", json_string(upstream))) {
        json_decref(body);
        return NULL;
    }
    return pv_json_dump(body, out_len);
}

int
pv_passthrough(const struct pv_chat *c, enum cfg_kind kind)
{
    return c && c->api == PV_API_MESSAGES && c->native &&
           kind == CFG_KIND_ANTHROPIC;
}

/* ---- answers ------------------------------------------------------------ */

/* A tool call's arguments as the input object (its text when it is not
 * JSON: kept, never dropped). */
static json_t *
args_input(const char *args)
{
    json_t *j = args && *args ? json_loads(args, 0, NULL) : json_object();
    if (json_is_object(j))
        return j;
    json_decref(j);
    return json_pack("{s:s}", "_arguments", args ? args : "");
}

char *
pv_msgs_answer(const char *body, size_t len, const char *model,
               const char *id, const struct pv_usage *u, size_t *out_len)
{
    json_t *oa = json_loadb(body, len, 0, NULL);
    const json_t *ch = json_array_get(json_object_get(oa, "choices"), 0);
    const json_t *m = json_object_get(ch, "message");
    json_t *content = json_array();
    json_t *res = NULL;
    if (!json_is_object(m) || !content)
        goto out;
    const json_t *r = json_object_get(m, "reasoning_content");
    if (json_is_string(r) && json_string_length(r))
        json_array_append_new(content,
                              json_pack("{s:s,s:O,s:s}", "type", "thinking",
                                        "thinking", r, "signature", ""));
    const json_t *tx = json_object_get(m, "content");
    char *joined = pv_x_content_text(tx);
    if (joined && *joined)
        json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text",
                                                 "text", joined));
    free(joined);
    size_t i;
    const json_t *tc;
    json_array_foreach(json_object_get(m, "tool_calls"), i, tc) {
        const json_t *fn = json_object_get(tc, "function");
        const char *tid = json_string_value(json_object_get(tc, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        char tbuf[64];
        if (!tid) {
            snprintf(tbuf, sizeof(tbuf), "toolu_%s_%zu", id, i);
            tid = tbuf;
        }
        json_array_append_new(
            content,
            json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", tid,
                      "name", name ? name : "", "input",
                      args_input(json_string_value(
                          json_object_get(fn, "arguments")))));
    }
    const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
    char mid[128];
    snprintf(mid, sizeof(mid), "msg_%s", id);
    res = json_pack("{s:s,s:s,s:s,s:s,s:O,s:s,s:n,s:o}", "id", mid, "type",
                    "message", "role", "assistant", "model", model, "content",
                    content, "stop_reason", pv_anth_stop_reason(fin),
                    "stop_sequence", "usage", pv_anth_usage_json(u));
out:
    json_decref(content);
    json_decref(oa);
    return pv_json_dump(res, out_len);
}

/* Replaces the "model" member of o (an object), if it has one. */
static void
set_model(json_t *o, const char *model)
{
    if (json_is_object(o) && json_object_get(o, "model"))
        json_object_set_new(o, "model", json_string(model));
}

/* text with every value at path (the client's model name) replaced by
 * model: the bytes kept apart from those values.  Only when the scanner
 * cannot decide does the tree get re-serialised (set_model); NULL when
 * text is not a JSON object. */
static char *
replace_model(const char *text, size_t len, const char *path,
              const char *model, size_t *out_len)
{
    const char *const paths[] = {path};
    struct pv_js_member m[8];
    size_t nm = 0;
    enum pv_js_verdict v = pv_json_scan_members(text, len, paths, 1, m, 8,
                                                &nm);
    if (v == PV_JS_INVALID)
        return NULL;
    if (v == PV_JS_OBJECT)
        return pv_json_splice(text, len, m, nm, model, out_len);
    json_t *o = json_loadb(text, len, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return NULL;
    }
    set_model(strchr(path, '.') ? json_object_get(o, "message") : o, model);
    return pv_json_dump(o, out_len);
}

char *
pv_msgs_pass_answer(const char *body, size_t len, const char *model,
                    size_t *out_len)
{
    return replace_model(body, len, "model", model, out_len);
}

const char *
pv_msgs_error_type(int status, const char *code)
{
    if (code && !strcmp(code, "insufficient_quota"))
        return "billing_error";
    switch (status) {
    case 400:
    case 405:
    case 422:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 402:
        return "billing_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 408:
    case 504:
        return "timeout_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 529:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *
pv_msgs_error(int status, const char *code, const char *message,
              size_t *out_len)
{
    json_t *o = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error",
                          "type", pv_msgs_error_type(status, code), "message",
                          message ? message : "");
    if (!o) /* invalid UTF-8 in message */
        o = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                      pv_msgs_error_type(status, code), "message",
                      "request failed");
    return pv_json_dump(o, out_len);
}

char *
pv_msgs_error_from(const char *body, size_t len, int status, size_t *out_len)
{
    json_t *o = json_loadb(body ? body : "", len, 0, NULL);
    const json_t *t = json_object_get(o, "type");
    const json_t *e = json_object_get(o, "error");
    if (json_is_string(t) && !strcmp(json_string_value(t), "error") &&
        json_is_object(e)) { /* already Anthropic's: its bytes (a
                                passthrough) */
        json_decref(o);
        char *r = malloc(len + 1);
        if (r) {
            memcpy(r, body, len);
            r[len] = '\0';
            *out_len = len;
        }
        return r;
    }
    const json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
    const json_t *c = json_object_get(e, "code");
    char *r = pv_msgs_error(status, json_string_value(c),
                            json_is_string(m) ? json_string_value(m)
                                              : "request failed",
                            out_len);
    json_decref(o);
    return r;
}

/* ---- streams ------------------------------------------------------------ */

/* "event: TYPE\ndata: JSON\n\n" (o stolen). */
static int
put_event(struct gx_buf *out, const char *type, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    /* type may live inside o: written before o goes. */
    enum gx_status st =
        s ? gx_buf_printf(out, "event: %s\ndata: %s\n\n", type, s) : GX_ENOMEM;
    free(s);
    json_decref(o);
    return st == GX_OK ? 0 : -1;
}

void
pv_msgs_stream_init(struct pv_msgs_stream *s, const char *model,
                    const char *id)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->model, sizeof(s->model), "%s", model ? model : "");
    snprintf(s->id, sizeof(s->id), "msg_%s", id ? id : "llmux");
    s->open = -1;
}

static int
start(struct pv_msgs_stream *s, struct gx_buf *out)
{
    if (s->started)
        return 0;
    s->started = 1;
    /* The counts come in message_delta, once they are known. */
    json_t *m = json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i}}}",
                          "type", "message_start", "message", "id", s->id,
                          "type", "message", "role", "assistant", "model",
                          s->model, "content", "stop_reason", "stop_sequence",
                          "usage", "input_tokens", 0, "output_tokens", 0);
    if (put_event(out, "message_start", m))
        return -1;
    return put_event(out, "ping", json_pack("{s:s}", "type", "ping"));
}

static int
close_block(struct pv_msgs_stream *s, struct gx_buf *out)
{
    if (s->open < 0)
        return 0;
    int ix = s->n_blocks - 1;
    s->open = -1;
    return put_event(out, "content_block_stop",
                     json_pack("{s:s,s:i}", "type", "content_block_stop",
                               "index", ix));
}

/* Opens a block of kind (0 text, 1 thinking, 2 tool_use) unless the open
 * one is that (for tools: the same call). */
static int
open_block(struct pv_msgs_stream *s, int kind, int tool, const char *tid,
           const char *name, struct gx_buf *out)
{
    if (s->open == kind && (kind != 2 || s->open_tool == tool))
        return 0;
    if (start(s, out) || close_block(s, out))
        return -1;
    json_t *b = kind == 0   ? json_pack("{s:s,s:s}", "type", "text", "text", "")
                : kind == 1 ? json_pack("{s:s,s:s,s:s}", "type", "thinking",
                                        "thinking", "", "signature", "")
                            : json_pack("{s:s,s:s,s:s,s:{}}", "type",
                                        "tool_use", "id", tid, "name", name,
                                        "input");
    s->open = kind;
    s->open_tool = tool;
    return put_event(out, "content_block_start",
                     json_pack("{s:s,s:i,s:o}", "type", "content_block_start",
                               "index", s->n_blocks++, "content_block", b));
}

static int
delta(struct pv_msgs_stream *s, const char *dtype, const char *field,
      const char *text, struct gx_buf *out)
{
    return put_event(out, "content_block_delta",
                     json_pack("{s:s,s:i,s:{s:s,s:s}}", "type",
                               "content_block_delta", "index",
                               s->n_blocks - 1, "delta", "type", dtype, field,
                               text));
}

int
pv_msgs_stream_chunk(struct pv_msgs_stream *s, const char *data, size_t len,
                     struct gx_buf *out)
{
    json_t *c = json_loadb(data, len, 0, NULL);
    const json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
    const json_t *d = json_object_get(ch, "delta");
    int rc = 0;
    if (!json_is_object(c)) {
        json_decref(c);
        return 0; /* not a chunk ("[DONE]"): nothing to say */
    }
    const char *t;
    if ((t = json_string_value(json_object_get(d, "reasoning_content"))) &&
        *t)
        rc = open_block(s, 1, 0, NULL, NULL, out) ||
             delta(s, "thinking_delta", "thinking", t, out);
    if (!rc && (t = json_string_value(json_object_get(d, "content"))) && *t)
        rc = open_block(s, 0, 0, NULL, NULL, out) ||
             delta(s, "text_delta", "text", t, out);
    size_t i;
    const json_t *tc;
    json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
        if (rc)
            break;
        const json_t *ix = json_object_get(tc, "index");
        int k = json_is_integer(ix) ? (int)json_integer_value(ix) : (int)i;
        const json_t *fn = json_object_get(tc, "function");
        const char *tid = json_string_value(json_object_get(tc, "id"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (tid || name || s->open != 2 || s->open_tool != k) {
            char gen[128];
            snprintf(gen, sizeof(gen), "toolu_%.96s_%d", s->id + 4, k);
            rc = open_block(s, 2, k, tid ? tid : gen, name ? name : "", out);
        }
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        if (!rc && args && *args)
            rc = delta(s, "input_json_delta", "partial_json", args, out);
    }
    const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
    if (!rc && fin) {
        s->stop_reason = pv_anth_stop_reason(fin);
        rc = start(s, out) || close_block(s, out);
    }
    json_decref(c);
    return rc ? -1 : 0;
}

void
pv_msgs_stream_cleanup(struct pv_msgs_stream *s)
{
    if (!s)
        return;
    free(s->stop);
    s->stop = NULL;
    s->stop_len = 0;
}

/* The "type" of an event's data (scanned), into t[tlen]; "" when it has
 * none, when it is not a string or when it holds a control character
 * (it becomes an SSE field).  -1 when data is not a JSON object. */
static int
event_type(const char *data, size_t len, char *t, size_t tlen)
{
    static const char *const paths[] = {"type"};
    struct pv_js_member m[4];
    size_t nm = 0;
    json_t *v = NULL;
    t[0] = '\0';
    enum pv_js_verdict vd = pv_json_scan_members(data, len, paths, 1, m, 4,
                                                 &nm);
    if (vd == PV_JS_INVALID)
        return -1;
    if (vd == PV_JS_OBJECT && nm) {
        v = json_loadb(data + m[nm - 1].at, m[nm - 1].len, JSON_DECODE_ANY,
                       NULL);
    } else if (vd == PV_JS_UNSURE) {
        json_t *o = json_loadb(data, len, 0, NULL);
        v = json_incref(json_object_get(o, "type"));
        json_decref(o);
    }
    const char *s = json_string_value(v);
    if (s && strlen(s) < tlen && !strpbrk(s, "\r\n"))
        snprintf(t, tlen, "%s", s);
    json_decref(v);
    return 0;
}

int
pv_msgs_stream_pass(struct pv_msgs_stream *s, const char *data, size_t len,
                    struct gx_buf *out)
{
    char t[64];
    if (event_type(data, len, t, sizeof(t)) != 0 || !t[0])
        return 0; /* "[DONE]" from the glue */
    if (!strcmp(t, "message_stop")) {
        /* Written after the row commits, as it came. */
        free(s->stop);
        s->stop = malloc(len ? len : 1);
        if (!s->stop)
            return -1;
        memcpy(s->stop, data, len);
        s->stop_len = len;
        s->pass_stop = 1;
        return 0;
    }
    s->started = 1;
    if (!strcmp(t, "error"))
        s->pass_error = 1; /* the end adds no error of its own */
    char *edited = NULL;
    size_t n = len;
    if (!strcmp(t, "message_start")) {
        edited = replace_model(data, len, "message.model", s->model, &n);
        if (!edited)
            return -1;
    }
    enum gx_status st =
        gx_buf_printf(out, "event: %s\ndata: ", t) == GX_OK &&
                gx_buf_append(out, edited ? edited : data, n) == GX_OK
            ? gx_buf_append(out, "\n\n", 2)
            : GX_ENOMEM;
    free(edited);
    return st == GX_OK ? 0 : -1;
}

int
pv_msgs_stream_end(struct pv_msgs_stream *s, int pass,
                   const struct pv_usage *u, struct gx_buf *out)
{
    if (pass) {
        if (!s->stop) /* cannot be: the glue ends a stream at message_stop */
            return put_event(out, "message_stop",
                             json_pack("{s:s}", "type", "message_stop"));
        if (gx_buf_append(out, "event: message_stop\ndata: ", 26) != GX_OK ||
            gx_buf_append(out, s->stop, s->stop_len) != GX_OK ||
            gx_buf_append(out, "\n\n", 2) != GX_OK)
            return -1;
        return 0;
    }
    if (start(s, out) || close_block(s, out))
        return -1;
    json_t *md = json_pack("{s:s,s:{s:s,s:n},s:o}", "type", "message_delta",
                           "delta", "stop_reason",
                           s->stop_reason ? s->stop_reason : "end_turn",
                           "stop_sequence", "usage", pv_anth_usage_json(u));
    if (put_event(out, "message_delta", md))
        return -1;
    return put_event(out, "message_stop",
                     json_pack("{s:s}", "type", "message_stop"));
}

int
pv_msgs_stream_error(int status, const char *message, struct gx_buf *out)
{
    size_t n = 0;
    char *e = pv_msgs_error(status, NULL, message, &n);
    if (!e)
        return -1;
    enum gx_status st = gx_buf_printf(out, "event: error\ndata: %s\n\n", e);
    free(e);
    return st == GX_OK ? 0 : -1;
}
