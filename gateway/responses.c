/*
 * responses: the OpenAI Responses API inbound adapter (POST /v1/responses),
 * stateless.  Pure functions over jansson and gx_buf (no I/O), so the
 * parser and both writers are unit-tested and fuzzed alone.
 *
 * Request, Responses -> the format-neutral request (a Chat Completions
 * body every provider kind already translates, struct pv_chat with api
 * PV_API_RESPONSES):
 *   instructions          a first "system" message
 *   input (string)        one user message
 *   input (items)         message {role user|assistant|system|developer,
 *                         content a string or parts input_text /
 *                         output_text / refusal (text), input_image
 *                         (image_url, as an image_url part)}: a message
 *                         (developer -> system; an assistant's parts
 *                         joined into its string content);
 *                         function_call {call_id, name, arguments}: a
 *                         tool_calls entry of an assistant message
 *                         (consecutive calls, and calls right after the
 *                         assistant's text, share one message);
 *                         function_call_output {call_id, output}: a "tool"
 *                         message; reasoning: dropped (a chat-format
 *                         upstream cannot take an earlier turn's
 *                         reasoning back); item_reference: 400 (stored
 *                         items); any other type: 400 naming it
 *   tools                 [{type:function,name,description,parameters,
 *                         strict}] -> chat tools (strict only when true:
 *                         false is chat's default, and the native kinds
 *                         refuse strict); other tool types 400
 *   tool_choice           auto/none/required, {type:function,name}
 *   parallel_tool_calls   as is
 *   max_output_tokens     max_tokens (1..PV_MAX_COMPLETION_TOKENS)
 *   reasoning             {effort} -> reasoning_effort (the provider kind
 *                         takes it or refuses it by name); summary "auto"
 *                         or null only (no summariser: the reasoning text
 *                         itself comes back as a reasoning item)
 *   temperature, top_p    as they are
 *   text.format           text (nothing), json_object, json_schema
 *                         {name,schema,strict,description} ->
 *                         response_format
 *   stream                stream, with stream_options.include_usage (the
 *                         final event carries usage)
 *   user                  user;  metadata: echoed only (objects of strings)
 *   store                 false or absent; true is a 400 (nothing is
 *                         stored); truncation "disabled" only; include
 *                         empty only
 * Refused with a 400 naming the parameter, because they need state llmux
 * does not keep: previous_response_id, conversation, background, prompt,
 * store true, item_reference items.  Any other member is a 400 too
 * (never silently ignored); null counts as absent everywhere.
 *
 * Answer, chat completion -> Response object: reasoning_content (the
 * anthropic kind's thinking, DeepSeek's reasoning) -> a reasoning item
 * with one reasoning_text part (no summary, no encrypted_content);
 * content -> a message item with one output_text part; tool_calls -> function_call items (call_id =
 * the tool call id); finish_reason length -> status "incomplete"
 * (incomplete_details.reason max_output_tokens), content_filter ->
 * "incomplete" (content_filter); usage from the request's settled usage
 * (input_tokens, input_tokens_details.cached_tokens, output_tokens,
 * output_tokens_details.reasoning_tokens, total_tokens).
 *
 * Stream, chat chunks -> Responses events, each "event: TYPE\ndata: JSON"
 * with a sequence_number from 0: response.created and response.in_progress
 * before the first translated chunk; text -> response.output_item.added
 * (message), response.content_part.added, response.output_text.delta...;
 * reasoning -> the same for a reasoning item (reasoning_text part,
 * response.reasoning_text.delta / .done);
 * a tool call -> response.output_item.added (function_call),
 * response.function_call_arguments.delta...; a finish_reason (or the end)
 * closes every open item: response.output_text.done,
 * response.content_part.done / response.function_call_arguments.done,
 * response.output_item.done; then response.completed (or
 * response.incomplete) with the whole object, or on a failure after the
 * first byte an "error" event and response.failed.
 *
 * Memory: the stream keeps each item's text and arguments (for the .done
 * events and the final object), capped at max_bytes in all.
 */
#include "gw_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Request.                                                             */

#define refuse pv_refuse

static int
set(const json_t *v)
{
    return v && !json_is_null(v);
}

/* The text of a content part, or NULL when it has none. */
static const char *
part_text(const json_t *part)
{
    const char *t = json_string_value(json_object_get(part, "type"));
    const json_t *txt = json_object_get(part, "text");
    if (t && (!strcmp(t, "input_text") || !strcmp(t, "output_text")) &&
        json_is_string(txt))
        return json_string_value(txt);
    const json_t *rf = json_object_get(part, "refusal");
    if (t && !strcmp(t, "refusal") && json_is_string(rf))
        return json_string_value(rf);
    return NULL;
}

/* A message item's content as chat content: a string stays one; parts
 * become chat parts (text, image_url), or one string for an assistant. */
static json_t *
msg_content(const json_t *content, int assistant, size_t i, char *msg,
            size_t len, const char **param)
{
    if (json_is_string(content))
        return json_incref((json_t *)content);
    if (!json_is_array(content)) {
        refuse(msg, len, param, "input",
               "input[%zu].content must be a string or an array of parts.",
               i);
        return NULL;
    }
    json_t *parts = json_array();
    struct gx_buf joined;
    gx_buf_init(&joined, 0);
    size_t k;
    const json_t *p;
    json_array_foreach(content, k, p) {
        const char *t = json_string_value(json_object_get(p, "type"));
        const char *text = part_text(p);
        if (text) {
            if (assistant)
                gx_buf_append(&joined, text, strlen(text));
            else
                json_array_append_new(parts, json_pack("{s:s,s:s}", "type",
                                                       "text", "text", text));
            continue;
        }
        if (t && !strcmp(t, "input_image") && !assistant) {
            const json_t *url = json_object_get(p, "image_url");
            if (!json_is_string(url)) {
                refuse(msg, len, param, "input",
                       "input[%zu].content[%zu]: an input_image needs an "
                       "image_url (file_id needs stored files, which llmux "
                       "does not keep).",
                       i, k);
                goto bad;
            }
            json_t *iu = json_pack("{s:O}", "url", url);
            const json_t *detail = json_object_get(p, "detail");
            if (json_is_string(detail))
                json_object_set(iu, "detail", (json_t *)detail);
            json_array_append_new(parts, json_pack("{s:s,s:o}", "type",
                                                   "image_url", "image_url",
                                                   iu));
            continue;
        }
        refuse(msg, len, param, "input",
               "input[%zu].content[%zu] has type '%s', which llmux does not "
               "translate (input_text, output_text, refusal%s).",
               i, k, t ? t : "(none)", assistant ? "" : ", input_image");
        goto bad;
    }
    if (assistant) {
        json_t *s = json_stringn(joined.data ? joined.data : "", joined.len);
        gx_buf_cleanup(&joined);
        json_decref(parts);
        return s;
    }
    gx_buf_cleanup(&joined);
    return parts;
bad:
    gx_buf_cleanup(&joined);
    json_decref(parts);
    return NULL;
}

/* Translates input into messages (appended). */
static int
add_input(json_t *msgs, const json_t *input, char *msg, size_t len,
          const char **param)
{
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user",
                                              "content", input));
        return 0;
    }
    if (!json_is_array(input))
        return refuse(msg, len, param, "input",
                      "'input' must be a string or an array of items.");
    size_t i;
    const json_t *it;
    json_array_foreach(input, i, it) {
        if (!json_is_object(it))
            return refuse(msg, len, param, "input",
                          "input[%zu] must be an object.", i);
        const json_t *tv = json_object_get(it, "type");
        const char *type = json_string_value(tv);
        if (set(tv) && !type)
            return refuse(msg, len, param, "input",
                          "input[%zu].type must be a string.", i);
        if (!type && json_object_get(it, "role"))
            type = "message";
        if (!type)
            return refuse(msg, len, param, "input",
                          "input[%zu] has neither a 'type' nor a 'role'.", i);
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        const char *last_role =
            json_string_value(json_object_get(last, "role"));
        if (!strcmp(type, "message")) {
            const char *role =
                json_string_value(json_object_get(it, "role"));
            if (!role || (strcmp(role, "user") && strcmp(role, "assistant") &&
                          strcmp(role, "system") && strcmp(role, "developer")))
                return refuse(msg, len, param, "input",
                              "input[%zu].role must be user, assistant, "
                              "system or developer.",
                              i);
            int asst = !strcmp(role, "assistant");
            json_t *c = msg_content(json_object_get(it, "content"), asst, i,
                                    msg, len, param);
            if (!c)
                return -1;
            json_array_append_new(
                msgs, json_pack("{s:s,s:o}", "role",
                                !strcmp(role, "developer") ? "system" : role,
                                "content", c));
        } else if (!strcmp(type, "function_call")) {
            const json_t *cid = json_object_get(it, "call_id");
            const json_t *name = json_object_get(it, "name");
            const json_t *args = json_object_get(it, "arguments");
            if (!json_is_string(cid) || !json_is_string(name) ||
                !json_is_string(args))
                return refuse(msg, len, param, "input",
                              "input[%zu]: a function_call needs string "
                              "call_id, name and arguments.",
                              i);
            json_t *tc = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", cid, "type",
                                   "function", "function", "name", name,
                                   "arguments", args);
            json_t *asst = NULL;
            if (last_role && !strcmp(last_role, "assistant")) {
                asst = last;
            } else {
                asst = json_pack("{s:s,s:n}", "role", "assistant", "content");
                json_array_append_new(msgs, asst);
            }
            json_t *calls = json_object_get(asst, "tool_calls");
            if (!calls) {
                calls = json_array();
                json_object_set_new(asst, "tool_calls", calls);
            }
            json_array_append_new(calls, tc);
        } else if (!strcmp(type, "function_call_output")) {
            const json_t *cid = json_object_get(it, "call_id");
            const json_t *out = json_object_get(it, "output");
            if (!json_is_string(cid))
                return refuse(msg, len, param, "input",
                              "input[%zu]: a function_call_output needs a "
                              "string call_id.",
                              i);
            json_t *c = NULL;
            if (json_is_string(out))
                c = json_incref((json_t *)out);
            else if (json_is_array(out))
                c = msg_content(out, 1, i, msg, len, param);
            else
                return refuse(msg, len, param, "input",
                              "input[%zu].output must be a string or an "
                              "array of parts.",
                              i);
            if (!c)
                return -1;
            json_array_append_new(msgs,
                                  json_pack("{s:s,s:O,s:o}", "role", "tool",
                                            "tool_call_id", cid, "content",
                                            c));
        } else if (!strcmp(type, "reasoning")) {
            continue; /* see the top of the file */
        } else if (!strcmp(type, "item_reference")) {
            return refuse(msg, len, param, "input",
                          "input[%zu] is an item_reference: llmux is "
                          "stateless and keeps no items; send the items "
                          "themselves.",
                          i);
        } else {
            return refuse(msg, len, param, "input",
                          "input[%zu] has type '%s', which llmux does not "
                          "support (message, function_call, "
                          "function_call_output, reasoning).",
                          i, type);
        }
    }
    return 0;
}

static json_t *
tools_of(const json_t *tools, char *msg, size_t len, const char **param)
{
    if (!json_is_array(tools)) {
        refuse(msg, len, param, "tools", "'tools' must be an array.");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        const json_t *name = json_object_get(t, "name");
        if (!type || strcmp(type, "function")) {
            refuse(msg, len, param, "tools",
                   "tools[%zu] has type '%s': llmux serves function tools "
                   "only (no hosted tools).",
                   i, type ? type : "(none)");
            goto bad;
        }
        if (!json_is_string(name) || !json_string_length(name)) {
            refuse(msg, len, param, "tools",
                   "tools[%zu] needs a non-empty string 'name'.", i);
            goto bad;
        }
        json_t *fn = json_pack("{s:O}", "name", name);
        static const char *const keep[] = {"description", "parameters"};
        for (size_t k = 0; k < 2; k++) {
            const json_t *v = json_object_get(t, keep[k]);
            if (set(v))
                json_object_set(fn, keep[k], (json_t *)v);
        }
        /* false is chat's default: left out, so kinds that cannot
         * enforce a schema (anthropic, gemini) refuse only a real ask. */
        if (json_is_true(json_object_get(t, "strict")))
            json_object_set_new(fn, "strict", json_true());
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)t, key, v) {
            if (strcmp(key, "type") && strcmp(key, "name") &&
                strcmp(key, "description") && strcmp(key, "parameters") &&
                strcmp(key, "strict") && set(v)) {
                json_decref(fn);
                refuse(msg, len, param, "tools",
                       "tools[%zu].%s is not supported.", i, key);
                goto bad;
            }
        }
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function",
                                             "function", fn));
    }
    return out;
bad:
    json_decref(out);
    return NULL;
}

static json_t *
tool_choice_of(const json_t *tc, char *msg, size_t len, const char **param)
{
    const char *s = json_string_value(tc);
    if (s && (!strcmp(s, "auto") || !strcmp(s, "none") ||
              !strcmp(s, "required")))
        return json_string(s);
    const char *type = json_string_value(json_object_get(tc, "type"));
    const json_t *name = json_object_get(tc, "name");
    if (type && !strcmp(type, "function") && json_is_string(name))
        return json_pack("{s:s,s:{s:O}}", "type", "function", "function",
                         "name", name);
    refuse(msg, len, param, "tool_choice",
           "'tool_choice' must be auto, none, required or {\"type\":"
           "\"function\",\"name\":...}.");
    return NULL;
}

static json_t *
format_of(const json_t *text, char *msg, size_t len, const char **param)
{
    if (!json_is_object(text)) {
        refuse(msg, len, param, "text", "'text' must be an object.");
        return NULL;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)text, key, v) {
        if (strcmp(key, "format") && set(v)) {
            refuse(msg, len, param, "text", "text.%s is not supported.", key);
            return NULL;
        }
    }
    const json_t *f = json_object_get(text, "format");
    if (!set(f))
        return json_null();
    const char *type = json_string_value(json_object_get(f, "type"));
    if (type && !strcmp(type, "text"))
        return json_null();
    if (type && !strcmp(type, "json_object"))
        return json_pack("{s:s}", "type", "json_object");
    if (type && !strcmp(type, "json_schema")) {
        const json_t *name = json_object_get(f, "name");
        const json_t *schema = json_object_get(f, "schema");
        if (!json_is_string(name) || !json_is_object(schema)) {
            refuse(msg, len, param, "text.format",
                   "text.format json_schema needs a string 'name' and an "
                   "object 'schema'.");
            return NULL;
        }
        json_t *js = json_pack("{s:O,s:O}", "name", name, "schema", schema);
        const json_t *strict = json_object_get(f, "strict");
        const json_t *desc = json_object_get(f, "description");
        if (set(strict))
            json_object_set(js, "strict", (json_t *)strict);
        if (set(desc))
            json_object_set(js, "description", (json_t *)desc);
        return json_pack("{s:s,s:o}", "type", "json_schema", "json_schema",
                         js);
    }
    refuse(msg, len, param, "text.format",
           "text.format.type must be text, json_object or json_schema.");
    return NULL;
}

/* Members answered with a sentence of their own: they need stored state. */
static const char *
stateful(const char *key, const json_t *v)
{
    if (!strcmp(key, "previous_response_id"))
        return "llmux is stateless and stores no responses: send the whole "
               "conversation in 'input' instead of 'previous_response_id'.";
    if (!strcmp(key, "conversation"))
        return "llmux is stateless and keeps no conversations: send the "
               "whole conversation in 'input'.";
    if (!strcmp(key, "store") && json_is_true(v))
        return "llmux is stateless and stores no responses: send "
               "'store': false or leave it out.";
    if (!strcmp(key, "background") && json_is_true(v))
        return "llmux is stateless: background responses (stored and "
               "polled) are not supported.";
    if (!strcmp(key, "prompt"))
        return "llmux keeps no stored prompt templates: send the prompt "
               "itself in 'instructions' and 'input'.";
    return NULL;
}

/* The members translated (the rest are refused). */
static const char *const known[] = {
    "model", "input", "instructions", "tools", "tool_choice",
    "parallel_tool_calls", "max_output_tokens", "temperature", "top_p",
    "text", "stream", "store", "metadata", "user", "include", "truncation",
    "background", "top_logprobs", "reasoning"};

/* The one include value served: the output text's logprobs (the chat
 * answer's choices[0].logprobs.content, which has the same entries). */
#define RESP_INCLUDE_LOGPROBS "message.output_text.logprobs"

/* *param must outlive the body (a static string by the contract): an
 * unknown member's name is copied here, one per thread, read by the
 * caller right after the parse. */
static _Thread_local char unknown_param[64];

static int
check_top(const json_t *body, char *msg, size_t len, const char **param)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        static const char *const state_keys[] = {
            "previous_response_id", "conversation", "store", "background",
            "prompt"};
        for (size_t k = 0; k < 5; k++) {
            const char *why = stateful(state_keys[k], v);
            if (!strcmp(key, state_keys[k]) && why && set(v))
                return refuse(msg, len, param, state_keys[k], "%s", why);
        }
        int ok = 0;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
            ok |= !strcmp(key, known[k]);
        if (!ok && set(v)) {
            snprintf(unknown_param, sizeof(unknown_param), "%s", key);
            return refuse(msg, len, param, unknown_param,
                          "Unsupported parameter: '%s' (llmux translates "
                          "the Responses API to every provider kind and "
                          "does not serve it).",
                          key);
        }
    }
    const json_t *inc = json_object_get(body, "include");
    if (set(inc) && !json_is_array(inc))
        return refuse(msg, len, param, "include",
                      "'include' must be an array of strings.");
    size_t ii;
    json_array_foreach(inc, ii, v) {
        if (!json_is_string(v) ||
            strcmp(json_string_value(v), RESP_INCLUDE_LOGPROBS) != 0)
            return refuse(msg, len, param, "include",
                          "'include' may only hold \"" RESP_INCLUDE_LOGPROBS
                          "\": llmux adds no other output data.");
    }
    v = json_object_get(body, "top_logprobs");
    if (set(v) && (!json_is_integer(v) || json_integer_value(v) < 0 ||
                   json_integer_value(v) > 20))
        return refuse(msg, len, param, "top_logprobs",
                      "'top_logprobs' must be an integer between 0 and 20.");
    /* reasoning {effort, summary}: effort becomes chat's reasoning_effort
     * (each provider kind takes or refuses it); summary may only be
     * "auto" or null: llmux gives the reasoning text the upstream returns
     * (reasoning_text), and has no summariser to honour concise or
     * detailed */
    const json_t *rs = json_object_get(body, "reasoning");
    if (set(rs)) {
        if (!json_is_object(rs))
            return refuse(msg, len, param, "reasoning",
                          "'reasoning' must be an object.");
        json_object_foreach((json_t *)rs, key, v) {
            if (!set(v))
                continue;
            if (!strcmp(key, "effort")) {
                static const char *const eff[] = {"none", "minimal", "low",
                                                  "medium", "high"};
                int ok = 0;
                for (size_t k = 0; k < 5 && json_is_string(v); k++)
                    ok |= !strcmp(json_string_value(v), eff[k]);
                if (!ok)
                    return refuse(msg, len, param, "reasoning.effort",
                                  "reasoning.effort must be none, minimal, "
                                  "low, medium or high.");
            } else if (!strcmp(key, "summary")) {
                if (!json_is_string(v) ||
                    strcmp(json_string_value(v), "auto") != 0)
                    return refuse(msg, len, param, "reasoning.summary",
                                  "reasoning.summary may only be \"auto\": "
                                  "llmux returns the reasoning text the "
                                  "model gives, not a summary of it.");
            } else {
                return refuse(msg, len, param, "reasoning",
                              "reasoning.%s is not supported (effort and "
                              "summary are).",
                              key);
            }
        }
    }
    const json_t *tr = json_object_get(body, "truncation");
    if (set(tr) && !(json_is_string(tr) &&
                     !strcmp(json_string_value(tr), "disabled")))
        return refuse(msg, len, param, "truncation",
                      "'truncation' may only be \"disabled\".");
    const json_t *md = json_object_get(body, "metadata");
    if (set(md)) {
        if (!json_is_object(md))
            return refuse(msg, len, param, "metadata",
                          "'metadata' must be an object of strings.");
        json_object_foreach((json_t *)md, key, v)
            if (!json_is_string(v))
                return refuse(msg, len, param, "metadata",
                              "metadata.%s must be a string.", key);
    }
    static const char *const bools[] = {"stream", "parallel_tool_calls",
                                        "store", "background"};
    for (size_t k = 0; k < 4; k++) {
        v = json_object_get(body, bools[k]);
        if (set(v) && !json_is_boolean(v))
            return refuse(msg, len, param, bools[k], "'%s' must be a boolean.",
                          bools[k]);
    }
    static const char *const nums[] = {"temperature", "top_p"};
    for (size_t k = 0; k < 2; k++) {
        v = json_object_get(body, nums[k]);
        if (set(v) && !json_is_number(v))
            return refuse(msg, len, param, nums[k], "'%s' must be a number.",
                          nums[k]);
    }
    v = json_object_get(body, "max_output_tokens");
    if (set(v) && (!json_is_integer(v) || json_integer_value(v) < 1 ||
                   json_integer_value(v) > PV_MAX_COMPLETION_TOKENS))
        return refuse(msg, len, param, "max_output_tokens",
                      "'max_output_tokens' must be an integer between 1 and "
                      "%d.",
                      PV_MAX_COMPLETION_TOKENS);
    v = json_object_get(body, "instructions");
    if (set(v) && !json_is_string(v))
        return refuse(msg, len, param, "instructions",
                      "'instructions' must be a string.");
    v = json_object_get(body, "user");
    if (set(v) && !json_is_string(v))
        return refuse(msg, len, param, "user", "'user' must be a string.");
    return 0;
}

/* What the Response object echoes of the request. */
static json_t *
echo_of(const json_t *body)
{
    json_t *e = json_object();
    static const char *const keys[] = {
        "instructions", "max_output_tokens", "temperature", "top_p", "user"};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        const json_t *v = json_object_get(body, keys[k]);
        json_object_set_new(e, keys[k], set(v) ? json_incref((json_t *)v)
                                               : json_null());
    }
    const json_t *v = json_object_get(body, "tools");
    json_object_set_new(e, "tools", set(v) ? json_incref((json_t *)v)
                                           : json_array());
    v = json_object_get(body, "tool_choice");
    json_object_set_new(e, "tool_choice", set(v) ? json_incref((json_t *)v)
                                                 : json_string("auto"));
    v = json_object_get(body, "parallel_tool_calls");
    json_object_set_new(e, "parallel_tool_calls",
                        json_boolean(!set(v) || json_is_true(v)));
    v = json_object_get(json_object_get(body, "text"), "format");
    json_object_set_new(e, "text",
                        set(v) ? json_pack("{s:O}", "format", v)
                               : json_pack("{s:{s:s}}", "format", "type",
                                           "text"));
    v = json_object_get(body, "metadata");
    json_object_set_new(e, "metadata", set(v) ? json_incref((json_t *)v)
                                              : json_object());
    const json_t *rs = json_object_get(body, "reasoning");
    const json_t *ef = json_object_get(rs, "effort"),
                 *su = json_object_get(rs, "summary");
    json_object_set_new(e, "reasoning",
                        json_pack("{s:O,s:O}", "effort",
                                  set(ef) ? ef : json_null(), "summary",
                                  set(su) ? su : json_null()));
    return e;
}

/* The chat body for a checked Responses body; NULL + msg on a 400. */
static json_t *
chat_of(const json_t *body, char *msg, size_t len, const char **param)
{
    json_t *chat = json_object();
    json_t *msgs = json_array();
    json_object_set_new(chat, "model",
                        json_incref(json_object_get(body, "model")));
    json_object_set_new(chat, "messages", msgs);
    const json_t *ins = json_object_get(body, "instructions");
    if (json_is_string(ins))
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system",
                                              "content", ins));
    const json_t *input = json_object_get(body, "input");
    if (!set(input)) {
        refuse(msg, len, param, "input", "Missing required parameter: "
                                         "'input'.");
        goto bad;
    }
    if (add_input(msgs, input, msg, len, param) != 0)
        goto bad;
    if (json_array_size(msgs) == 0) {
        refuse(msg, len, param, "input",
               "'input' holds no message to answer.");
        goto bad;
    }
    const json_t *v = json_object_get(body, "tools");
    if (set(v)) {
        json_t *t = tools_of(v, msg, len, param);
        if (!t)
            goto bad;
        if (json_array_size(t))
            json_object_set_new(chat, "tools", t);
        else
            json_decref(t);
    }
    v = json_object_get(body, "tool_choice");
    if (set(v)) {
        json_t *t = tool_choice_of(v, msg, len, param);
        if (!t)
            goto bad;
        json_object_set_new(chat, "tool_choice", t);
    }
    v = json_object_get(body, "text");
    if (set(v)) {
        json_t *f = format_of(v, msg, len, param);
        if (!f)
            goto bad;
        if (json_is_null(f))
            json_decref(f);
        else
            json_object_set_new(chat, "response_format", f);
    }
    static const char *const same[] = {"parallel_tool_calls", "temperature",
                                       "top_p", "user"};
    for (size_t k = 0; k < 4; k++) {
        v = json_object_get(body, same[k]);
        if (set(v))
            json_object_set(chat, same[k], (json_t *)v);
    }
    v = json_object_get(body, "max_output_tokens");
    if (set(v))
        json_object_set(chat, "max_tokens", (json_t *)v);
    v = json_object_get(json_object_get(body, "reasoning"), "effort");
    if (set(v))
        json_object_set(chat, "reasoning_effort", (json_t *)v);
    /* logprobs: asked by include, or by top_logprobs (alternatives) */
    v = json_object_get(body, "top_logprobs");
    if (json_array_size(json_object_get(body, "include")) || set(v))
        json_object_set_new(chat, "logprobs", json_true());
    if (set(v))
        json_object_set(chat, "top_logprobs", (json_t *)v);
    if (json_is_true(json_object_get(body, "stream"))) {
        json_object_set_new(chat, "stream", json_true());
        json_object_set_new(chat, "stream_options",
                            json_pack("{s:b}", "include_usage", 1));
    }
    return chat;
bad:
    json_decref(chat);
    return NULL;
}

enum pv_chat_err
gw_resp_parse(struct pv_chat *c, const char *text, size_t len, json_t **echo,
              char *msg, size_t msglen, const char **param)
{
    memset(c, 0, sizeof(*c));
    *echo = NULL;
    *param = NULL;
    json_t *body = pv_json_body(text, len, msg, msglen);
    if (!body)
        return PV_CHAT_BAD_JSON;
    enum pv_chat_err rc = PV_CHAT_INVALID;
    json_t *chat = NULL;
    if (!json_is_object(body)) {
        refuse(msg, msglen, param, NULL,
               "The request body must be a JSON object.");
        goto out;
    }
    const json_t *model = json_object_get(body, "model");
    if (!json_is_string(model) || !json_string_length(model)) {
        refuse(msg, msglen, param, "model",
               model ? "'model' must be a non-empty string."
                     : "Missing required parameter: 'model'.");
        goto out;
    }
    if (check_top(body, msg, msglen, param) != 0)
        goto out;
    chat = chat_of(body, msg, msglen, param);
    if (!chat)
        goto out;
    /* The neutral facts (caps, estimate) from the chat body, checked by
     * the same rules as a chat request; a translation that broke one would
     * name a chat field, so it is worded as ours. */
    if (pv_chat_from_json(c, PV_API_RESPONSES, chat, msg, msglen, param) !=
        0) {
        json_decref(chat);
        goto out;
    }
    c->owned = 1;
    *echo = echo_of(body);
    rc = PV_CHAT_OK;
out:
    json_decref(body);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Answer.                                                              */

static json_t *
usage_of(const struct pv_usage *u)
{
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens",
                     (json_int_t)u->prompt_tokens, "input_tokens_details",
                     "cached_tokens", (json_int_t)u->cached_tokens,
                     "output_tokens", (json_int_t)u->completion_tokens,
                     "output_tokens_details", "reasoning_tokens",
                     (json_int_t)u->reasoning_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens));
}

/* An output_text part; lp (borrowed, may be NULL: none) its logprobs,
 * entries as chat's logprobs.content. */
static json_t *
text_part(const char *text, size_t n, const json_t *lp)
{
    return json_pack("{s:s,s:s%,s:[],s:o}", "type", "output_text", "text",
                     text ? text : "", text ? n : 0, "annotations",
                     "logprobs",
                     json_is_array(lp) ? json_copy((json_t *)lp)
                                       : json_array());
}

static json_t *
msg_item(const char *id, const char *text, size_t n, const char *status,
         const json_t *lp)
{
    json_t *content = json_array();
    if (text)
        json_array_append_new(content, text_part(text, n, lp));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id,
                     "status", status, "role", "assistant", "content",
                     content);
}

static json_t *
fc_item(const char *id, const char *call_id, const char *name,
        const char *args, size_t n, const char *status)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:s%,s:s}", "type", "function_call",
                     "id", id, "call_id", call_id, "name", name, "arguments",
                     args ? args : "", args ? n : 0, "status", status);
}

/* A reasoning item: the upstream's reasoning text (chat's
 * reasoning_content) as one reasoning_text part; no summary. */
static json_t *
rs_item(const char *id, const char *text, size_t n, const char *status)
{
    json_t *content = json_array();
    if (text)
        json_array_append_new(content,
                              json_pack("{s:s,s:s%}", "type",
                                        "reasoning_text", "text", text, n));
    return json_pack("{s:s,s:s,s:[],s:o,s:s}", "type", "reasoning", "id", id,
                     "summary", "content", content, "status", status);
}

/* status from a chat finish_reason; *reason for incomplete_details. */
static const char *
status_of(const char *finish, const char **reason)
{
    *reason = NULL;
    if (finish && !strcmp(finish, "length"))
        *reason = "max_output_tokens";
    else if (finish && !strcmp(finish, "content_filter"))
        *reason = "content_filter";
    return *reason ? "incomplete" : "completed";
}

/* The Response object around output (stolen); usage NULL = null. */
static json_t *
resp_object(const struct gw_api_ctx *x, const char *model,
            const char *status, const char *reason, json_t *output,
            const struct pv_usage *usage, json_t *error)
{
    char id[GW_REQUEST_ID_MAX + 8];
    snprintf(id, sizeof(id), "resp_%s", x->id);
    json_t *o = json_pack(
        "{s:s,s:s,s:I,s:s,s:o,s:o,s:s,s:o,s:n,s:{s:n,s:n},s:b,s:s}", "id", id,
        "object", "response", "created_at", (json_int_t)x->created_s,
        "status", status, "error", error ? error : json_null(),
        "incomplete_details",
        reason ? json_pack("{s:s}", "reason", reason) : json_null(), "model",
        model ? model : x->chat->model, "output", output,
        "previous_response_id", "reasoning", "effort", "summary", "store", 0,
        "truncation", "disabled");
    if (!o)
        return NULL;
    json_object_update(o, (json_t *)x->echo);
    json_object_set_new(o, "usage", usage ? usage_of(usage) : json_null());
    return o;
}

char *
gw_resp_body(const struct gw_api_ctx *x, const char *up, size_t len,
             size_t *out_len, char *msg, size_t msglen)
{
    json_t *o = json_loadb(up, len, 0, NULL);
    const json_t *ch = json_object_get(o, "choices");
    const json_t *c0 = json_array_get(ch, 0);
    const json_t *m = json_object_get(c0, "message");
    if (!json_is_object(m)) {
        snprintf(msg, msglen, "the upstream answer has no choices[0].message");
        json_decref(o);
        return NULL;
    }
    json_t *output = json_array();
    const json_t *rsn = json_object_get(m, "reasoning_content");
    if (json_is_string(rsn) && json_string_length(rsn)) {
        char id[GW_REQUEST_ID_MAX + 16];
        snprintf(id, sizeof(id), "rs_%s_0", x->id);
        json_array_append_new(output, rs_item(id, json_string_value(rsn),
                                              json_string_length(rsn),
                                              "completed"));
    }
    const json_t *content = json_object_get(m, "content");
    if (json_is_string(content) && json_string_length(content)) {
        char id[GW_REQUEST_ID_MAX + 16];
        snprintf(id, sizeof(id), "msg_%s_0", x->id);
        json_array_append_new(
            output, msg_item(id, json_string_value(content),
                             json_string_length(content), "completed",
                             json_object_get(json_object_get(c0, "logprobs"),
                                             "content")));
    }
    size_t i;
    const json_t *tc;
    json_array_foreach(json_object_get(m, "tool_calls"), i, tc) {
        const json_t *fn = json_object_get(tc, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const json_t *args = json_object_get(fn, "arguments");
        const char *cid = json_string_value(json_object_get(tc, "id"));
        char id[GW_REQUEST_ID_MAX + 32], gen[GW_REQUEST_ID_MAX + 32];
        snprintf(id, sizeof(id), "fc_%s_%zu", x->id, i + 1);
        snprintf(gen, sizeof(gen), "call_%s_%zu", x->id, i + 1);
        json_array_append_new(
            output, fc_item(id, cid ? cid : gen, name ? name : "",
                            json_string_value(args),
                            json_is_string(args) ? json_string_length(args)
                                                 : 0,
                            "completed"));
    }
    const char *reason;
    const char *status = status_of(
        json_string_value(json_object_get(c0, "finish_reason")), &reason);
    json_t *r = resp_object(x, json_string_value(json_object_get(o, "model")),
                            status, reason, output, x->usage, NULL);
    json_decref(o);
    char *s = pv_json_dump(r, out_len);
    if (!s)
        snprintf(msg, msglen, "out of memory");
    return s;
}

/* ------------------------------------------------------------------ */
/* Stream.                                                              */

enum { IT_MSG, IT_FC, IT_RS }; /* message, function_call, reasoning */

struct resp_item {
    int kind;
    int open;
    int64_t chat_index;       /* IT_FC: the chat tool_calls index */
    char id[GW_REQUEST_ID_MAX + 32];
    char *call_id, *name;     /* IT_FC (owned) */
    struct gx_buf text;       /* message text or arguments */
    json_t *lps;              /* IT_MSG: its logprobs entries so far */
};

struct gw_resp_stream {
    struct gw_api_ctx x;     /* id and echo copied: the stream owns them */
    char id[GW_REQUEST_ID_MAX + 1];
    json_t *echo;
    int started;
    int64_t seq;
    struct resp_item *items;
    size_t n_items, cap_items;
    size_t bytes;             /* text kept, against max_bytes */
    char finish[32];          /* the last finish_reason */
    char *model;              /* from the chunks */
};

struct gw_resp_stream *
gw_resp_stream_new(const struct gw_api_ctx *x)
{
    struct gw_resp_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->x = *x;
    snprintf(s->id, sizeof(s->id), "%s", x->id);
    s->x.id = s->id;
    s->echo = x->echo ? json_deep_copy(x->echo) : json_object();
    s->x.echo = s->echo;
    s->x.usage = NULL;
    if (!s->echo) {
        free(s);
        return NULL;
    }
    return s;
}

void
gw_resp_stream_free(struct gw_resp_stream *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_items; i++) {
        free(s->items[i].call_id);
        free(s->items[i].name);
        gx_buf_cleanup(&s->items[i].text);
        json_decref(s->items[i].lps);
    }
    free(s->items);
    free(s->model);
    json_decref(s->echo);
    free(s);
}

/* One event: o gets type and sequence_number (o stolen). */
static enum gx_status
emit(struct gw_resp_stream *s, struct gx_buf *out, const char *type,
     json_t *o)
{
    if (!o)
        return GX_ENOMEM;
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(s->seq++));
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!t)
        return GX_ENOMEM;
    enum gx_status st = gx_buf_printf(out, "event: %s\ndata: %s\n\n", type, t);
    free(t);
    return st;
}

/* The part and event names of a text-carrying item (message, reasoning). */
static json_t *
part_of(int kind, const char *text, size_t n, const json_t *lp)
{
    if (kind == IT_RS)
        return json_pack("{s:s,s:s%}", "type", "reasoning_text", "text",
                         text ? text : "", text ? n : 0);
    return text_part(text, n, lp);
}

static const char *
text_event(int kind, int done)
{
    if (kind == IT_RS)
        return done ? "response.reasoning_text.done"
                    : "response.reasoning_text.delta";
    return done ? "response.output_text.done" : "response.output_text.delta";
}

static json_t *
item_json(const struct resp_item *it, const char *status)
{
    if (it->kind == IT_MSG)
        return msg_item(it->id, status[0] == 'c' ? it->text.data : NULL,
                        it->text.len, status, it->lps);
    if (it->kind == IT_RS)
        return rs_item(it->id, status[0] == 'c' ? it->text.data : NULL,
                       it->text.len, status);
    return fc_item(it->id, it->call_id, it->name,
                   status[0] == 'c' ? it->text.data : NULL, it->text.len,
                   status);
}

static json_t *
output_json(const struct gw_resp_stream *s)
{
    json_t *a = json_array();
    for (size_t i = 0; i < s->n_items; i++)
        json_array_append_new(a, item_json(&s->items[i], "completed"));
    return a;
}

static enum gx_status
start(struct gw_resp_stream *s, struct gx_buf *out)
{
    if (s->started)
        return GX_OK;
    s->started = 1;
    enum gx_status st =
        emit(s, out, "response.created",
             json_pack("{s:o}", "response",
                       resp_object(&s->x, s->model, "in_progress", NULL,
                                   json_array(), NULL, NULL)));
    if (st == GX_OK)
        st = emit(s, out, "response.in_progress",
                  json_pack("{s:o}", "response",
                            resp_object(&s->x, s->model, "in_progress", NULL,
                                        json_array(), NULL, NULL)));
    return st;
}

static struct resp_item *
item_add(struct gw_resp_stream *s, int kind)
{
    if (s->n_items == s->cap_items) {
        size_t n = s->cap_items ? s->cap_items * 2 : 4;
        struct resp_item *a = realloc(s->items, n * sizeof(*a));
        if (!a)
            return NULL;
        s->items = a;
        s->cap_items = n;
    }
    struct resp_item *it = &s->items[s->n_items];
    memset(it, 0, sizeof(*it));
    it->kind = kind;
    it->open = 1;
    gx_buf_init(&it->text, 0);
    snprintf(it->id, sizeof(it->id), "%s_%s_%zu",
             kind == IT_MSG ? "msg" : kind == IT_RS ? "rs" : "fc", s->id,
             s->n_items);
    s->n_items++;
    return it;
}

static enum gx_status
item_close(struct gw_resp_stream *s, size_t i, struct gx_buf *out)
{
    struct resp_item *it = &s->items[i];
    if (!it->open)
        return GX_OK;
    it->open = 0;
    const char *txt = it->text.data ? it->text.data : "";
    enum gx_status st;
    if (it->kind != IT_FC) {
        json_t *d = json_pack("{s:s,s:I,s:i,s:s%}", "item_id", it->id,
                              "output_index", (json_int_t)i, "content_index",
                              0, "text", txt, it->text.len);
        if (d && it->kind == IT_MSG)
            json_object_set_new(d, "logprobs",
                                it->lps ? json_copy(it->lps) : json_array());
        st = emit(s, out, text_event(it->kind, 1), d);
        if (st == GX_OK)
            st = emit(s, out, "response.content_part.done",
                      json_pack("{s:s,s:I,s:i,s:o}", "item_id", it->id,
                                "output_index", (json_int_t)i,
                                "content_index", 0, "part",
                                part_of(it->kind, txt, it->text.len,
                                        it->lps)));
    } else {
        st = emit(s, out, "response.function_call_arguments.done",
                  json_pack("{s:s,s:I,s:s,s:s%}", "item_id", it->id,
                            "output_index", (json_int_t)i, "name", it->name,
                            "arguments", txt, it->text.len));
    }
    if (st == GX_OK)
        st = emit(s, out, "response.output_item.done",
                  json_pack("{s:I,s:o}", "output_index", (json_int_t)i,
                            "item", item_json(it, "completed")));
    return st;
}

static enum gx_status
close_all(struct gw_resp_stream *s, struct gx_buf *out)
{
    enum gx_status st = GX_OK;
    for (size_t i = 0; i < s->n_items && st == GX_OK; i++)
        st = item_close(s, i, out);
    return st;
}

static enum gx_status
keep(struct gw_resp_stream *s, struct resp_item *it, const char *p, size_t n)
{
    if (s->x.max_bytes && s->bytes + n > s->x.max_bytes)
        return GX_ETOOBIG;
    s->bytes += n;
    return gx_buf_append(&it->text, p, n);
}

/* Text of a message (IT_MSG) or of reasoning (IT_RS): appended to the
 * open item of that kind, else to a new one (what came before it is
 * complete then); lp (borrowed, may be NULL) the chunk's logprobs
 * entries, kept with a message's text. */
static enum gx_status
on_text(struct gw_resp_stream *s, int kind, const char *t, size_t n,
        const json_t *lp, struct gx_buf *out)
{
    struct resp_item *it = s->n_items ? &s->items[s->n_items - 1] : NULL;
    enum gx_status st = GX_OK;
    if (!it || it->kind != kind || !it->open) {
        st = close_all(s, out);
        if (st != GX_OK)
            return st;
        it = item_add(s, kind);
        if (!it)
            return GX_ENOMEM;
        size_t i = s->n_items - 1;
        st = emit(s, out, "response.output_item.added",
                  json_pack("{s:I,s:o}", "output_index", (json_int_t)i,
                            "item", item_json(it, "in_progress")));
        if (st == GX_OK)
            st = emit(s, out, "response.content_part.added",
                      json_pack("{s:s,s:I,s:i,s:o}", "item_id", it->id,
                                "output_index", (json_int_t)i,
                                "content_index", 0, "part",
                                part_of(kind, "", 0, NULL)));
    }
    if (st == GX_OK && kind == IT_MSG && json_array_size(lp)) {
        if (!it->lps && !(it->lps = json_array()))
            return GX_ENOMEM;
        if (json_array_extend(it->lps, (json_t *)lp) != 0)
            return GX_ENOMEM;
    }
    if (st == GX_OK)
        st = keep(s, it, t, n);
    if (st == GX_OK) {
        json_t *d = json_pack("{s:s,s:I,s:i,s:s%}", "item_id", it->id,
                              "output_index", (json_int_t)(s->n_items - 1),
                              "content_index", 0, "delta", t, n);
        if (d && kind == IT_MSG)
            json_object_set_new(d, "logprobs", json_is_array(lp)
                                                   ? json_copy((json_t *)lp)
                                                   : json_array());
        st = emit(s, out, text_event(kind, 0), d);
    }
    return st;
}

static enum gx_status
on_tool(struct gw_resp_stream *s, const json_t *tc, struct gx_buf *out)
{
    const json_t *ix = json_object_get(tc, "index");
    int64_t index = json_is_integer(ix) ? json_integer_value(ix) : 0;
    const json_t *fn = json_object_get(tc, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    const json_t *args = json_object_get(fn, "arguments");
    size_t i;
    for (i = 0; i < s->n_items; i++)
        if (s->items[i].kind == IT_FC && s->items[i].chat_index == index &&
            s->items[i].open)
            break;
    enum gx_status st = GX_OK;
    if (i == s->n_items) {
        /* A new call: the text before it is complete. */
        st = close_all(s, out);
        if (st != GX_OK)
            return st;
        struct resp_item *it = item_add(s, IT_FC);
        if (!it)
            return GX_ENOMEM;
        it->chat_index = index;
        const char *cid = json_string_value(json_object_get(tc, "id"));
        char gen[GW_REQUEST_ID_MAX + 32];
        snprintf(gen, sizeof(gen), "call_%s_%zu", s->id, i);
        it->call_id = strdup(cid ? cid : gen);
        it->name = strdup(name ? name : "");
        if (!it->call_id || !it->name)
            return GX_ENOMEM;
        st = emit(s, out, "response.output_item.added",
                  json_pack("{s:I,s:o}", "output_index", (json_int_t)i,
                            "item", item_json(it, "in_progress")));
    } else if (name && !s->items[i].name[0]) {
        char *nm = strdup(name);
        if (!nm)
            return GX_ENOMEM;
        free(s->items[i].name);
        s->items[i].name = nm;
    }
    struct resp_item *it = &s->items[i];
    if (st == GX_OK && json_is_string(args) && json_string_length(args)) {
        st = keep(s, it, json_string_value(args), json_string_length(args));
        if (st == GX_OK)
            st = emit(s, out, "response.function_call_arguments.delta",
                      json_pack("{s:s,s:I,s:s%}", "item_id", it->id,
                                "output_index", (json_int_t)i, "delta",
                                json_string_value(args),
                                json_string_length(args)));
    }
    return st;
}

enum gx_status
gw_resp_stream_chunk(struct gw_resp_stream *s, const char *data, size_t len,
                     struct gx_buf *out)
{
    json_t *o = json_loadb(data, len, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return GX_EPROTO;
    }
    const char *model = json_string_value(json_object_get(o, "model"));
    if (model && !s->model)
        s->model = strdup(model);
    enum gx_status st = start(s, out);
    const json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
    const json_t *d = json_object_get(c0, "delta");
    const json_t *reasoning = json_object_get(d, "reasoning_content");
    if (st == GX_OK && json_is_string(reasoning) &&
        json_string_length(reasoning))
        st = on_text(s, IT_RS, json_string_value(reasoning),
                     json_string_length(reasoning), NULL, out);
    const json_t *content = json_object_get(d, "content");
    if (st == GX_OK && json_is_string(content) && json_string_length(content))
        st = on_text(s, IT_MSG, json_string_value(content),
                     json_string_length(content),
                     json_object_get(json_object_get(c0, "logprobs"),
                                     "content"),
                     out);
    size_t i;
    const json_t *tc;
    json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
        if (st != GX_OK)
            break;
        st = on_tool(s, tc, out);
    }
    const char *fin = json_string_value(json_object_get(c0, "finish_reason"));
    if (st == GX_OK && fin) {
        snprintf(s->finish, sizeof(s->finish), "%s", fin);
        st = close_all(s, out);
    }
    json_decref(o);
    return st;
}

enum gx_status
gw_resp_stream_end(struct gw_resp_stream *s, const struct pv_usage *u,
                   const char *error, struct gx_buf *out)
{
    enum gx_status st = start(s, out);
    if (st == GX_OK)
        st = close_all(s, out);
    if (st != GX_OK)
        return st;
    if (error) {
        st = emit(s, out, "error",
                  json_pack("{s:s,s:s,s:n}", "code", "stream_interrupted",
                            "message", error, "param"));
        if (st == GX_OK)
            st = emit(s, out, "response.failed",
                      json_pack("{s:o}", "response",
                                resp_object(&s->x, s->model, "failed", NULL,
                                            output_json(s), u,
                                            json_pack("{s:s,s:s}", "code",
                                                      "server_error",
                                                      "message", error))));
        return st;
    }
    const char *reason;
    const char *status = status_of(s->finish[0] ? s->finish : NULL, &reason);
    return emit(s, out,
                reason ? "response.incomplete" : "response.completed",
                json_pack("{s:o}", "response",
                          resp_object(&s->x, s->model, status, reason,
                                      output_json(s), u, NULL)));
}

static void *
resp_new(const struct gw_api_ctx *x)
{
    return gw_resp_stream_new(x);
}
static void
resp_free(void *s)
{
    gw_resp_stream_free(s);
}
static enum gx_status
resp_event(void *s, int pass, const char *data, size_t len,
           struct gx_buf *out)
{
    (void)pass; /* no kind gets a Responses body as it is */
    return gw_resp_stream_chunk(s, data, len, out);
}
static enum gx_status
resp_end(void *s, int pass, const struct pv_usage *u, int status,
         const char *error, struct gx_buf *out)
{
    (void)pass;
    (void)status; /* error is set exactly when status >= 400 */
    return gw_resp_stream_end(s, u, error, out);
}

const struct gw_api gw_api_responses = {
    .api = PV_API_RESPONSES,
    .what = "responses",
    .parse = gw_resp_parse,
    .kinds = GW_KINDS_ALL,
    .body = gw_resp_body,
    .stream_new = resp_new,
    .stream_free = resp_free,
    .stream_event = resp_event,
    .stream_end = resp_end,
};
