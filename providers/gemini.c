/*
 * gemini.c: the "gemini" kind, Google's native Gemini API
 * (POST {base_url}/v1beta/models/{model}:generateContent, or
 * :streamGenerateContent?alt=sse for streams; key in x-goog-api-key)
 * behind OpenAI chat on both sides (native.c has the shared glue).
 *
 * Request, OpenAI chat -> generateContent:
 *   messages      system/developer -> systemInstruction.parts (text);
 *                 user -> a "user" content (text parts; image_url data:
 *                 URLs as inlineData; other image URLs are refused);
 *                 assistant -> "model" (text, tool_calls as functionCall
 *                 parts with the parsed arguments as args); tool -> a
 *                 functionResponse part in a "user" content, its name
 *                 found from the assistant tool call it answers, the text
 *                 as response {"content": TEXT}.  Consecutive contents of
 *                 one role are merged.
 *   generationConfig  maxOutputTokens (max_completion_tokens/max_tokens,
 *                 the larger), temperature, topP, topK, stopSequences
 *                 (stop), seed, presencePenalty, frequencyPenalty;
 *                 response_format json_object -> responseMimeType
 *                 application/json, json_schema -> that and
 *                 responseJsonSchema; logprobs -> responseLogprobs,
 *                 top_logprobs (with logprobs) -> logprobs;
 *                 reasoning_effort -> thinkingConfig (thinking_config)
 *   tools         [{functionDeclarations: [{name, description,
 *                 parametersJsonSchema: parameters}]}]
 *   tool_choice   toolConfig.functionCallingConfig.mode AUTO/NONE/ANY (a
 *                 named function: ANY with allowedFunctionNames)
 *   stream, stream_options, n (only 1)
 * Anything else (user, parallel_tool_calls false, audio ...) is refused
 * with a 400 naming it; a JSON null counts as absent.
 *
 * Answer -> OpenAI: candidates[0].content.parts: text -> content
 * (thought: true parts -> reasoning_content), functionCall -> tool_calls
 * (id = functionCall.id when given, else call_N; arguments = args
 * serialised).  finishReason STOP -> stop (tool_calls when the answer
 * calls a tool), MAX_TOKENS -> length, SAFETY, RECITATION, BLOCKLIST,
 * PROHIBITED_CONTENT, SPII, IMAGE_SAFETY -> content_filter, others ->
 * stop; a prompt blocked without candidates -> content_filter.
 * usageMetadata: prompt_tokens = promptTokenCount +
 * toolUsePromptTokenCount (cachedContentTokenCount included, as OpenAI
 * counts), cached_tokens = cachedContentTokenCount, completion_tokens =
 * candidatesTokenCount + thoughtsTokenCount (thinking is billed as
 * output), reasoning_tokens = thoughtsTokenCount.  logprobsResult ->
 * choices[0].logprobs.content: an entry a chosenCandidates token (token,
 * logprob = logProbability, bytes = the token's UTF-8), top_logprobs from
 * topCandidates at the same step; in a stream, with the chunk's first
 * delta.
 *
 * Stream: each SSE event is a whole GenerateContentResponse with the next
 * piece; there is no end marker, so the stream is complete when a chunk
 * carried a finishReason and the upstream then closed it.  An in-band
 * {"error":...} fails the call.
 *
 * Not carried: Gemini 3's thoughtSignature on functionCall parts (an
 * OpenAI tool call has nowhere to keep it), so multi-turn tool use with
 * models that require it fails upstream with their 400.
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
text_part(const char *s)
{
    return json_pack("{s:s}", "text", s);
}

static json_t *
user_part(const json_t *part, size_t i, size_t j, char *refused, size_t rlen)
{
    const char *ty = json_string_value(json_object_get(part, "type"));
    const json_t *tx = json_object_get(part, "text");
    if (ty && !strcmp(ty, "text") && json_is_string(tx))
        return text_part(json_string_value(tx));
    if (ty && !strcmp(ty, "image_url")) {
        const json_t *iu = json_object_get(part, "image_url");
        const json_t *u = json_is_object(iu) ? json_object_get(iu, "url") : iu;
        char mime[64];
        const char *data;
        if (json_is_string(u) &&
            pv_x_data_url(json_string_value(u), mime, sizeof(mime), &data) ==
                0)
            return json_pack("{s:{s:s,s:s}}", "inlineData", "mimeType", mime,
                             "data", data);
        pv_x_refuse_add(refused, rlen,
                        "messages[%zu].content[%zu].image_url (gemini takes "
                        "images as data: URLs)",
                        i, j);
        return NULL;
    }
    pv_x_refuse_add(refused, rlen, "messages[%zu].content[%zu] (type '%s')", i,
                    j, ty ? ty : "?");
    return NULL;
}

static json_t *
function_call(const json_t *tc, const char *name, json_t *args, size_t i,
              size_t j, char *refused, size_t rlen)
{
    (void)tc;
    (void)i;
    (void)j;
    (void)refused;
    (void)rlen;
    return json_pack("{s:{s:s,s:o}}", "functionCall", "name", name, "args",
                     args);
}

/* Gemini matches a result to its call by the function's name, which the
 * OpenAI tool message does not carry: it is found in the history. */
static json_t *
function_response(const json_t *msgs, size_t i, const char *id,
                  const char *text)
{
    const char *name = pv_tool_call_name(msgs, i, id, 0);
    if (!name)
        return NULL;
    return json_pack("{s:{s:s,s:{s:s}}}", "functionResponse", "name", name,
                     "response", "content", text);
}

static const struct pv_x_msgs_ops gem_msgs = {
    .field = "parts",
    .assistant_role = "model",
    .text = text_part,
    .user_part = user_part,
    .tool_call = function_call,
    .tool_result = function_response,
};

static const char *const gem_keys[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature",
    "top_p", "top_k", "stop", "stream", "stream_options", "tools",
    "tool_choice", "n", "seed", "presence_penalty", "frequency_penalty",
    "response_format", "parallel_tool_calls", "logprobs", "top_logprobs",
    "reasoning_effort", NULL};

/* reasoning_effort -> thinkingConfig.thinkingBudget, as Google's OpenAI
 * compatibility layer maps it for Gemini 2.5: low 1024, medium 8192,
 * high 24576 tokens, none 0 (thinking off; 2.5 Pro cannot, and says so);
 * minimal, which that layer does not name, takes low's budget.  The
 * thoughts' summaries come back (includeThoughts) as reasoning_content,
 * unless thinking is off. */
static void
thinking_config(const json_t *oa, json_t *gc, char *refused, size_t rlen)
{
    static const struct {
        const char *effort;
        int budget;
    } eff[] = {{"none", 0},     {"minimal", 1024}, {"low", 1024},
               {"medium", 8192}, {"high", 24576}};
    const json_t *v = json_object_get(oa, "reasoning_effort");
    if (!is_set(v))
        return;
    for (size_t k = 0; json_is_string(v) && k < sizeof(eff) / sizeof(eff[0]);
         k++)
        if (!strcmp(json_string_value(v), eff[k].effort)) {
            json_object_set_new(
                gc, "thinkingConfig",
                eff[k].budget ? json_pack("{s:i,s:b}", "thinkingBudget",
                                          eff[k].budget, "includeThoughts",
                                          1)
                              : json_pack("{s:i}", "thinkingBudget", 0));
            return;
        }
    pv_x_refuse_add(refused, rlen,
                    "reasoning_effort (none, minimal, low, medium or high)");
}

static int
gen_config(const json_t *oa, json_t *gc, char *refused, size_t rlen)
{
    int64_t mt = pv_x_max_tokens(oa);
    if (mt > 0)
        json_object_set_new(gc, "maxOutputTokens", json_integer(mt));
    static const char *const map[][2] = {
        {"temperature", "temperature"},
        {"top_p", "topP"},
        {"top_k", "topK"},
        {"seed", "seed"},
        {"presence_penalty", "presencePenalty"},
        {"frequency_penalty", "frequencyPenalty"}};
    for (size_t k = 0; k < sizeof(map) / sizeof(map[0]); k++) {
        const json_t *v = json_object_get(oa, map[k][0]);
        if (!is_set(v))
            continue;
        if (!json_is_number(v))
            pv_x_refuse_add(refused, rlen, "%s (a number)", map[k][0]);
        else
            json_object_set_new(gc, map[k][1], json_deep_copy(v));
    }
    const json_t *stop = json_object_get(oa, "stop");
    if (json_is_string(stop))
        json_object_set_new(gc, "stopSequences",
                            json_pack("[s]", json_string_value(stop)));
    else if (json_is_array(stop))
        json_object_set_new(gc, "stopSequences", json_deep_copy(stop));
    else if (is_set(stop))
        pv_x_refuse_add(refused, rlen, "stop");
    const json_t *lp = json_object_get(oa, "logprobs"),
                 *tl = json_object_get(oa, "top_logprobs");
    if (is_set(lp) && !json_is_boolean(lp))
        pv_x_refuse_add(refused, rlen, "logprobs (a boolean)");
    else if (json_is_true(lp))
        json_object_set_new(gc, "responseLogprobs", json_true());
    if (is_set(tl)) {
        if (!json_is_integer(tl) || json_integer_value(tl) < 0 ||
            json_integer_value(tl) > 20)
            pv_x_refuse_add(refused, rlen, "top_logprobs (0 to 20)");
        else if (!json_is_true(lp))
            pv_x_refuse_add(refused, rlen, "top_logprobs (needs logprobs)");
        else if (json_integer_value(tl) > 0)
            json_object_set_new(gc, "logprobs", json_deep_copy(tl));
    }
    thinking_config(oa, gc, refused, rlen);
    const json_t *rf = json_object_get(oa, "response_format");
    if (is_set(rf)) {
        const char *t = json_string_value(json_object_get(rf, "type"));
        const json_t *schema =
            json_object_get(json_object_get(rf, "json_schema"), "schema");
        if (t && !strcmp(t, "text")) {
            /* the default */
        } else if (t && !strcmp(t, "json_object")) {
            json_object_set_new(gc, "responseMimeType",
                                json_string("application/json"));
        } else if (t && !strcmp(t, "json_schema") && json_is_object(schema)) {
            json_object_set_new(gc, "responseMimeType",
                                json_string("application/json"));
            json_object_set_new(gc, "responseJsonSchema",
                                json_deep_copy(schema));
        } else {
            pv_x_refuse_add(refused, rlen, "response_format");
        }
    }
    return PV_X_OK;
}

static int
add_tools(const json_t *oa, json_t *body, char *refused, size_t rlen)
{
    const json_t *tools = json_object_get(oa, "tools");
    if (json_is_array(tools) && json_array_size(tools)) {
        json_t *decl = json_array();
        if (!decl)
            return PV_X_NOMEM;
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            const json_t *fn = json_object_get(t, "function");
            const json_t *name = json_object_get(fn, "name");
            const char *ty = json_string_value(json_object_get(t, "type"));
            if (!ty || strcmp(ty, "function") || !json_is_string(name)) {
                pv_x_refuse_add(refused, rlen,
                                "tools[%zu] (only function tools)", i);
                continue;
            }
            if (json_is_true(json_object_get(fn, "strict")))
                pv_x_refuse_add(refused, rlen, "tools[%zu].function.strict",
                                i);
            json_t *d = json_pack("{s:s}", "name", json_string_value(name));
            const json_t *desc = json_object_get(fn, "description");
            const json_t *params = json_object_get(fn, "parameters");
            if (d && json_is_string(desc))
                json_object_set_new(d, "description", json_deep_copy(desc));
            if (d && json_is_object(params))
                json_object_set_new(d, "parametersJsonSchema",
                                    json_deep_copy(params));
            if (!d || json_array_append_new(decl, d)) {
                json_decref(decl);
                return PV_X_NOMEM;
            }
        }
        json_object_set_new(body, "tools",
                            json_pack("[{s:o}]", "functionDeclarations",
                                      decl));
    }
    const json_t *tc = json_object_get(oa, "tool_choice");
    json_t *fcc = NULL;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        const char *mode = !strcmp(s, "auto")       ? "AUTO"
                           : !strcmp(s, "none")     ? "NONE"
                           : !strcmp(s, "required") ? "ANY"
                                                    : NULL;
        if (!mode)
            pv_x_refuse_add(refused, rlen, "tool_choice ('%s')", s);
        else
            fcc = json_pack("{s:s}", "mode", mode);
    } else if (json_is_object(tc)) {
        const char *name = json_string_value(
            json_object_get(json_object_get(tc, "function"), "name"));
        if (!name)
            pv_x_refuse_add(refused, rlen, "tool_choice");
        else
            fcc = json_pack("{s:s,s:[s]}", "mode", "ANY",
                            "allowedFunctionNames", name);
    } else if (is_set(tc)) {
        pv_x_refuse_add(refused, rlen, "tool_choice");
    }
    if (fcc)
        json_object_set_new(body, "toolConfig",
                            json_pack("{s:o}", "functionCallingConfig", fcc));
    const json_t *ptc = json_object_get(oa, "parallel_tool_calls");
    if (json_is_false(ptc))
        pv_x_refuse_add(refused, rlen,
                        "parallel_tool_calls (false: gemini cannot turn "
                        "parallel calls off)");
    return PV_X_OK;
}

int
pv_gem_request(const json_t *oa, int stream, json_t **out, char *msg,
               size_t len)
{
    (void)stream; /* the method in the URL says it */
    char refused[512] = "";
    pv_x_refuse_keys(oa, gem_keys, refused, sizeof(refused));
    json_t *body = json_object(), *system = json_array(),
           *contents = json_array(), *gc = json_object();
    int rc = PV_X_NOMEM;
    if (!body || !system || !contents || !gc)
        goto out;
    if ((rc = pv_x_messages(json_object_get(oa, "messages"), &gem_msgs,
                            system, contents, refused, sizeof(refused))) !=
            PV_X_OK ||
        (rc = gen_config(oa, gc, refused, sizeof(refused))) != PV_X_OK ||
        (rc = add_tools(oa, body, refused, sizeof(refused))) != PV_X_OK)
        goto out;
    json_object_set(body, "contents", contents);
    if (json_array_size(system))
        json_object_set_new(body, "systemInstruction",
                            json_pack("{s:O}", "parts", system));
    if (json_object_size(gc))
        json_object_set(body, "generationConfig", gc);
    if (!json_array_size(contents) && !refused[0])
        pv_x_refuse_add(refused, sizeof(refused),
                        "messages (at least one user or assistant message)");
    rc = PV_X_OK;
out:
    json_decref(system);
    json_decref(contents);
    json_decref(gc);
    rc = pv_x_request_end(rc, "gemini", refused, &body, msg, len);
    *out = body;
    return rc;
}

/* ---- answer ------------------------------------------------------------- */

static const char *
finish_of(const char *r, int tools)
{
    if (!r || !strcmp(r, "STOP"))
        return tools ? "tool_calls" : "stop";
    if (!strcmp(r, "MAX_TOKENS"))
        return "length";
    static const char *const filtered[] = {
        "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
        "IMAGE_SAFETY"};
    for (size_t i = 0; i < sizeof(filtered) / sizeof(filtered[0]); i++)
        if (!strcmp(r, filtered[i]))
            return "content_filter";
    return tools ? "tool_calls" : "stop";
}

static void
usage_read(const json_t *um, struct pv_usage *u)
{
    if (!json_is_object(um))
        return;
    int64_t p = pv_x_num(um, "promptTokenCount"), c = pv_x_num(um, "candidatesTokenCount");
    int64_t th = pv_x_num(um, "thoughtsTokenCount");
    if (__builtin_add_overflow(p, pv_x_num(um, "toolUsePromptTokenCount"), &p))
        p = INT64_MAX;
    if (__builtin_add_overflow(c, th, &c))
        c = INT64_MAX;
    u->have = 1;
    u->prompt_tokens = p;
    u->cached_tokens = pv_x_num(um, "cachedContentTokenCount");
    u->cache_write_tokens = 0;
    u->completion_tokens = c;
    u->reasoning_tokens = th;
    pv_usage_clamp(u);
    if (u->reasoning_tokens > u->completion_tokens)
        u->reasoning_tokens = u->completion_tokens;
}

/* A functionCall part as an OpenAI tool call (index k). */
static json_t *
tool_call(const json_t *fc, int k, int with_index)
{
    const char *name = json_string_value(json_object_get(fc, "name"));
    const json_t *args = json_object_get(fc, "args");
    const char *gid = json_string_value(json_object_get(fc, "id"));
    if (!name)
        return NULL;
    char id[96];
    if (gid && *gid)
        snprintf(id, sizeof(id), "%s", gid);
    else
        snprintf(id, sizeof(id), "call_%d", k);
    char *as = args ? json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY)
                    : strdup("{}");
    json_t *t = as ? json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type",
                               "function", "function", "name", name,
                               "arguments", as)
                   : NULL;
    free(as);
    if (t && with_index)
        json_object_set_new(t, "index", json_integer(k));
    return t;
}

/* One OpenAI logprobs entry of a Gemini logprobs candidate ({token,
 * tokenId, logProbability}; a zero logProbability may be left out). */
static json_t *
lp_entry(const json_t *c)
{
    const json_t *t = json_object_get(c, "token");
    const json_t *v = json_object_get(c, "logProbability");
    return pv_x_lp_token(json_is_string(t) ? json_string_value(t) : "",
                         json_is_string(t) ? json_string_length(t) : 0,
                         json_is_number(v) ? json_number_value(v) : 0.0);
}

/* choices[].logprobs of a candidate's logprobsResult, or NULL when it has
 * none. */
static json_t *
lp_of(const json_t *cand)
{
    const json_t *lr = json_object_get(cand, "logprobsResult");
    const json_t *chosen = json_object_get(lr, "chosenCandidates");
    const json_t *top = json_object_get(lr, "topCandidates");
    if (!json_is_array(chosen))
        return NULL;
    json_t *content = json_array();
    size_t i, k;
    const json_t *c, *a;
    json_array_foreach(chosen, i, c) {
        json_t *e = lp_entry(c), *alts = json_array();
        json_array_foreach(json_object_get(json_array_get(top, i),
                                           "candidates"),
                           k, a)
            json_array_append_new(alts, lp_entry(a));
        json_object_set_new(e, "top_logprobs", alts);
        json_array_append_new(content, e);
    }
    return json_pack("{s:o,s:n}", "content", content, "refusal");
}

json_t *
pv_gem_answer(const json_t *up, struct pv_usage *u, char *why, size_t len)
{
    const json_t *cands = json_object_get(up, "candidates");
    const json_t *pf = json_object_get(up, "promptFeedback");
    if (!json_is_array(cands) && !json_is_object(pf)) {
        snprintf(why, len, "not a generateContent answer (no \"candidates\")");
        return NULL;
    }
    const json_t *cand = json_array_get(cands, 0);
    const json_t *parts = json_object_get(json_object_get(cand, "content"),
                                          "parts");
    struct gx_buf text, think;
    gx_buf_init(&text, 0);
    gx_buf_init(&think, 0);
    json_t *calls = json_array(), *res = NULL;
    int ok = calls != NULL;
    size_t i;
    const json_t *p;
    json_array_foreach(parts, i, p) {
        const json_t *t = json_object_get(p, "text");
        const json_t *fc = json_object_get(p, "functionCall");
        if (json_is_string(t)) {
            struct gx_buf *b = json_is_true(json_object_get(p, "thought"))
                                   ? &think : &text;
            ok = ok && gx_buf_append(b, json_string_value(t),
                                     json_string_length(t)) == GX_OK;
        } else if (json_is_object(fc)) {
            json_t *c = tool_call(fc, (int)json_array_size(calls), 0);
            if (!c) {
                snprintf(why, len, "functionCall part %zu without a name", i);
                goto out;
            }
            ok = ok && json_array_append_new(calls, c) == 0;
        }
    }
    if (!ok || gx_buf_append(&text, "", 1) != GX_OK) {
        snprintf(why, len, "out of memory");
        goto out;
    }
    json_t *message = json_pack("{s:s,s:s}", "role", "assistant", "content",
                                text.data);
    int nt = (int)json_array_size(calls);
    if (message && text.len == 1 && nt)
        json_object_set_new(message, "content", json_null());
    if (message && nt)
        json_object_set(message, "tool_calls", calls);
    if (message && think.len && gx_buf_append(&think, "", 1) == GX_OK)
        json_object_set_new(message, "reasoning_content",
                            json_string(think.data));
    memset(u, 0, sizeof(*u));
    usage_read(json_object_get(up, "usageMetadata"), u);
    const char *fr = json_string_value(json_object_get(cand, "finishReason"));
    const char *finish = cand ? finish_of(fr, nt) : "content_filter";
    const char *id = json_string_value(json_object_get(up, "responseId"));
    const char *model = json_string_value(json_object_get(up, "modelVersion"));
    res = message ? pv_x_completion(id ? id : "gemini", model ? model : "",
                                    message, finish, u)
                  : NULL;
    json_t *lp = lp_of(cand);
    if (res && lp)
        json_object_set_new(json_array_get(json_object_get(res, "choices"), 0),
                            "logprobs", lp);
    else
        json_decref(lp);
    if (!res)
        snprintf(why, len, "out of memory");
out:
    json_decref(calls);
    gx_buf_cleanup(&text);
    gx_buf_cleanup(&think);
    return res;
}

/* ---- stream ------------------------------------------------------------- */

int
pv_gem_event(struct pv_xstream *s, const char *type, const json_t *ev,
             pv_xemit emit, void *ud, char *why, size_t len)
{
    (void)type;
    const json_t *err = json_object_get(ev, "error");
    if (err) {
        const char *m = json_string_value(json_object_get(err, "message"));
        const char *st = json_string_value(json_object_get(err, "status"));
        snprintf(why, len, "%s%s%s", st ? st : "error", m ? ": " : "",
                 m ? m : "");
        return PV_XS_UPSTREAM_ERROR;
    }
    const json_t *cands = json_object_get(ev, "candidates");
    const json_t *pf = json_object_get(ev, "promptFeedback");
    const json_t *um = json_object_get(ev, "usageMetadata");
    if (!json_is_array(cands) && !json_is_object(pf) && !json_is_object(um)) {
        snprintf(why, len, "not a GenerateContentResponse");
        return PV_XS_MALFORMED;
    }
    if (!s->id[0]) {
        const char *id = json_string_value(json_object_get(ev, "responseId"));
        const char *mv = json_string_value(json_object_get(ev,
                                                           "modelVersion"));
        snprintf(s->id, sizeof(s->id), "%s", id ? id : "gemini");
        snprintf(s->model, sizeof(s->model), "%s", mv ? mv : "");
    }
    usage_read(um, &s->usage);
    const json_t *cand = json_array_get(cands, 0);
    const json_t *parts = json_object_get(json_object_get(cand, "content"),
                                          "parts");
    size_t i;
    const json_t *p;
    json_t *lp = lp_of(cand); /* with the chunk's first delta */
    json_array_foreach(parts, i, p) {
        const json_t *t = json_object_get(p, "text");
        const json_t *fc = json_object_get(p, "functionCall");
        json_t *d = NULL;
        if (json_is_string(t) && json_string_length(t)) {
            d = json_pack("{s:O}",
                          json_is_true(json_object_get(p, "thought"))
                              ? "reasoning_content"
                              : "content",
                          t);
        } else if (json_is_object(fc)) {
            json_t *c = tool_call(fc, s->n_tools, 1);
            if (!c) {
                json_decref(lp);
                snprintf(why, len, "functionCall part without a name");
                return PV_XS_MALFORMED;
            }
            s->n_tools++;
            d = json_pack("{s:[o]}", "tool_calls", c);
        } else {
            continue;
        }
        int bad = pv_x_emit_delta_lp(s, d, lp, NULL, emit, ud);
        lp = NULL;
        if (bad)
            return PV_XS_EMIT;
    }
    json_decref(lp); /* no delta to carry it */
    const char *fr = json_string_value(json_object_get(cand, "finishReason"));
    const char *block = json_string_value(json_object_get(pf, "blockReason"));
    if ((fr || (block && !cand)) && !s->finish) {
        s->finish = fr ? finish_of(fr, s->n_tools) : "content_filter";
        s->complete = 1;
        if (pv_x_emit_delta(s, json_object(), s->finish, emit, ud))
            return PV_XS_EMIT;
    }
    return 0;
}

/* ---- the kind ----------------------------------------------------------- */

/* The model goes into the URL path: plain model ids only. */
static int
gem_path(const char *upstream, int stream, char *buf, size_t len)
{
    if (strspn(upstream, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                         "0123456789._-") != strlen(upstream))
        return -1;
    int n = snprintf(buf, len, "/v1beta/models/%s:%s", upstream,
                     stream ? "streamGenerateContent?alt=sse"
                            : "generateContent");
    return n > 0 && (size_t)n < len ? 0 : -1;
}

static int
gem_translate(const json_t *oa, const char *upstream, int stream,
              json_t **out, char *msg, size_t len)
{
    (void)upstream; /* in the URL */
    return pv_gem_request(oa, stream, out, msg, len);
}

static const struct pv_xkind gem_kind = {
    .ops = &pv_gemini_ops,
    .name = "gemini",
    .translate = gem_translate,
    .path = gem_path,
    .key_header = "x-goog-api-key",
    .answer = pv_gem_answer,
    .event = pv_gem_event,
    .complete_at_eof = 1,
};

static enum gx_status
gem_start(struct pv_loop *loop, const struct pv_request *req,
          const struct pv_callbacks *cb, struct pv_call **out, char *err,
          size_t errlen)
{
    return pv_x_start(loop, req, cb, &gem_kind, out, err, errlen);
}

const struct pv_ops pv_gemini_ops = {
    .kind = "gemini",
    .start = gem_start,
    .cancel = pv_http_cancel,
    .pause = pv_http_pause,
    .resume = pv_http_resume,
};
