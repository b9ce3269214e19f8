/*
 * request.c: the client's chat request parsed once at the edge into a
 * struct pv_chat (providers.h says what it holds and who reads it), with
 * every check every provider kind relies on, so that each kind sees the
 * same valid request and a bad one gets the same 400 whichever target it
 * would have reached (the local kind used to answer 502 for a max_tokens
 * it could not take, an openai upstream would have billed or refused it in
 * its own words).  The rules are listed in providers.h.
 *
 * One pass over the body: validation and the facts (caps, the prompt
 * summary and the estimate) come from the same walk of the messages.
 */
#include "providers.h"
#include "providers_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define bad pv_refuse

int
pv_refuse(char *msg, size_t len, const char **param, const char *p,
          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    *param = p;
    return -1;
}

/* An optional integer member in [lo, hi]; 0 = absent, null or in range. */
static int
check_int(const json_t *body, const char *name, json_int_t lo, json_int_t hi,
          char *msg, size_t len, const char **param)
{
    const json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return bad(msg, len, param, name, "'%s' must be an integer.", name);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return bad(msg, len, param, name,
                   "'%s' is %lld; it must be between %lld and %lld.", name,
                   (long long)x, (long long)lo, (long long)hi);
    return 0;
}

/* The facts that follow from the counted ones: one estimate, one default,
 * one bound, whichever way the body was read. */
static void
derive(struct pv_chat *c)
{
    c->completion_cap =
        (c->max_tokens ? c->max_tokens : PV_DEFAULT_COMPLETION_TOKENS) * c->n;
    int64_t nm = (int64_t)c->n_messages;
    c->est_prompt_tokens = c->text_bytes / 4 + 4 * nm;
    c->max_prompt_tokens =
        c->text_bytes + c->n_other_parts * PV_PART_BOUND_BYTES + 8 * nm + 8;
}

/* Checks the body and fills c's facts in the same walk. */
static int
validate(const json_t *body, struct pv_chat *c, char *msg, size_t len,
         const char **param)
{
    *param = NULL;
    if (!json_is_object(body))
        return bad(msg, len, param, NULL,
                   "The request body must be a JSON object.");
    const json_t *model = json_object_get(body, "model");
    if (!model)
        return bad(msg, len, param, "model",
                   "Missing required parameter: 'model'.");
    if (!json_is_string(model) || json_string_length(model) == 0)
        return bad(msg, len, param, "model",
                   "'model' must be a non-empty string.");
    c->model = json_string_value(model);
    const json_t *msgs = json_object_get(body, "messages");
    if (!msgs)
        return bad(msg, len, param, "messages",
                   "Missing required parameter: 'messages'.");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return bad(msg, len, param, "messages",
                   "'messages' must be a non-empty array.");
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const json_t *role = json_object_get(m, "role");
        const json_t *content = json_object_get(m, "content");
        if (!json_is_object(m) || !json_is_string(role))
            return bad(msg, len, param, "messages",
                       "messages[%zu] must be an object with a string "
                       "'role'.",
                       i);
        if (json_is_string(content)) {
            c->text_bytes += (int64_t)json_string_length(content);
        } else if (json_is_array(content)) {
            size_t k;
            const json_t *part;
            json_array_foreach(content, k, part) {
                const json_t *text = json_object_get(part, "text");
                if (json_is_string(text))
                    c->text_bytes += (int64_t)json_string_length(text);
                else
                    c->n_other_parts++;
            }
        } else if (content && !json_is_null(content)) {
            return bad(msg, len, param, "messages",
                       "messages[%zu].content must be a string, an array of "
                       "parts or null.",
                       i);
        }
    }
    c->n_messages = json_array_size(msgs);
    const json_t *stream = json_object_get(body, "stream");
    if (stream && !json_is_boolean(stream) && !json_is_null(stream))
        return bad(msg, len, param, "stream", "'stream' must be a boolean.");
    c->stream = json_is_true(stream);
    if (check_int(body, "max_tokens", 1, PV_MAX_COMPLETION_TOKENS, msg, len,
                  param) ||
        check_int(body, "max_completion_tokens", 1, PV_MAX_COMPLETION_TOKENS,
                  msg, len, param) ||
        check_int(body, "n", 1, PV_MAX_N, msg, len, param) ||
        check_int(body, "seed", INT64_MIN, INT64_MAX, msg, len, param))
        return -1;
    static const char *const nums[] = {"temperature", "top_p",
                                       "presence_penalty",
                                       "frequency_penalty"};
    for (size_t k = 0; k < sizeof(nums) / sizeof(nums[0]); k++) {
        const json_t *v = json_object_get(body, nums[k]);
        if (v && !json_is_number(v) && !json_is_null(v))
            return bad(msg, len, param, nums[k], "'%s' must be a number.",
                       nums[k]);
    }
    const json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_object(so) && !json_is_null(so))
        return bad(msg, len, param, "stream_options",
                   "'stream_options' must be an object.");
    const json_t *iu = json_object_get(so, "include_usage");
    if (iu && !json_is_boolean(iu) && !json_is_null(iu))
        return bad(msg, len, param, "stream_options.include_usage",
                   "'stream_options.include_usage' must be a boolean.");
    c->include_usage = json_is_true(iu);

    /* Validated: the caps are integers in range or absent. */
    const json_t *a = json_object_get(body, "max_tokens");
    const json_t *b = json_object_get(body, "max_completion_tokens");
    const json_t *n = json_object_get(body, "n");
    if (json_is_integer(a) && json_integer_value(a) > c->max_tokens)
        c->max_tokens = json_integer_value(a);
    if (json_is_integer(b) && json_integer_value(b) > c->max_tokens)
        c->max_tokens = json_integer_value(b);
    c->n = json_is_integer(n) ? json_integer_value(n) : 1;
    derive(c);
    return 0;
}

int
pv_chat_from_json(struct pv_chat *c, enum pv_api api, json_t *body,
                  char *msg, size_t msglen, const char **param)
{
    memset(c, 0, sizeof(*c));
    if (validate(body, c, msg, msglen, param) != 0) {
        memset(c, 0, sizeof(*c));
        return -1;
    }
    c->api = api;
    c->body = body;
    return 0;
}

json_t *
pv_json_body(const char *text, size_t len, char *msg, size_t msglen)
{
    json_error_t jerr;
    json_t *body = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!body)
        snprintf(msg, msglen,
                 "We could not parse the JSON body of your request (line "
                 "%d, column %d): %s.",
                 jerr.line, jerr.column, jerr.text);
    return body;
}

/* The common valid request without a tree: json_scan.c's scanner reads
 * the same facts validate() reads from jansson's tree, or declines (then
 * jansson decides, and words any error).  0 when it took the request. */
static int
parse_fast(struct pv_chat *c, enum pv_api api, const char *text, size_t len)
{
    struct pv_js_req q;
    if (pv_json_scan_request(text, len, &q) != 0)
        return -1;
    c->text = malloc(len ? len : 1);
    /* The model's value has no escapes: its bytes inside the quotes. */
    c->model_own = malloc(q.model_len - 1);
    if (!c->text || !c->model_own) {
        free(c->text);
        free(c->model_own);
        c->text = c->model_own = NULL;
        return -1; /* jansson will fail too, and say so */
    }
    memcpy(c->text, text, len);
    memcpy(c->model_own, text + q.model_at + 1, q.model_len - 2);
    c->model_own[q.model_len - 2] = '\0';
    c->text_len = len;
    c->model_at = q.model_at;
    c->model_len = q.model_len;
    c->model = c->model_own;
    c->api = api;
    c->owned = 1;
    c->stream = q.stream;
    c->include_usage = q.include_usage;
    c->has_stream_options = q.has_stream_options;
    c->n_messages = q.n_messages;
    c->text_bytes = q.text_bytes;
    c->n_other_parts = q.n_other_parts;
    c->max_tokens = q.max_tokens;
    c->n = q.n ? q.n : 1;
    derive(c);
    return 0;
}

json_t *
pv_chat_body(const struct pv_chat *c)
{
    if (c->body || !c->text)
        return c->body;
    struct pv_chat *m = (struct pv_chat *)c; /* the cache; see providers.h */
    m->body = json_loadb(c->text, c->text_len, JSON_REJECT_DUPLICATES, NULL);
    return m->body;
}

char *
pv_json_dump(json_t *o, size_t *out_len)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s)
        *out_len = strlen(s);
    return s;
}

enum pv_chat_err
pv_chat_parse(struct pv_chat *c, enum pv_api api, const char *text,
              size_t len, char *msg, size_t msglen, const char **param)
{
    memset(c, 0, sizeof(*c));
    *param = NULL;
    if (api == PV_API_CHAT && parse_fast(c, api, text, len) == 0)
        return PV_CHAT_OK;
    json_t *body = pv_json_body(text, len, msg, msglen);
    if (!body)
        return PV_CHAT_BAD_JSON;
    if (pv_chat_from_json(c, api, body, msg, msglen, param) != 0) {
        json_decref(body);
        return PV_CHAT_INVALID;
    }
    c->owned = 1;
    if (api == PV_API_CHAT) {
        /* What the fast path declined (an escaped key, an escaped model
         * name, ...) still goes to an openai kind as the client's bytes,
         * only the model's value spliced. */
        c->has_stream_options = json_object_get(body, "stream_options") != NULL;
        pv_chat_keep_bytes(c, text, len, 1);
    }
    return PV_CHAT_OK;
}

void
pv_chat_cleanup(struct pv_chat *c)
{
    if (c->owned) {
        json_decref(c->body);
        json_decref(c->native);
    }
    free(c->text);
    free(c->model_own);
    memset(c, 0, sizeof(*c));
}

const char *
pv_api_name(enum pv_api api)
{
    switch (api) {
    case PV_API_MESSAGES:
        return "messages";
    case PV_API_RESPONSES:
        return "responses";
    case PV_API_EMBEDDINGS:
        return "embeddings";
    case PV_API_COMPLETIONS:
        return "completions";
    default:
        return "chat";
    }
}

int
pv_chat_keep_bytes(struct pv_chat *c, const char *text, size_t len,
                   int drop_tree)
{
    static const char *const paths[] = {"model"};
    struct pv_js_member m;
    size_t nm = 0;
    if (c->text || !c->model ||
        pv_json_scan_members(text, len, paths, 1, &m, 1, &nm) !=
            PV_JS_OBJECT ||
        nm != 1)
        return -1;
    char *copy = malloc(len ? len : 1);
    char *model = drop_tree ? strdup(c->model) : NULL;
    if (!copy || (drop_tree && !model)) {
        free(copy);
        free(model);
        return -1;
    }
    memcpy(copy, text, len);
    c->text = copy;
    c->text_len = len;
    c->model_at = m.at;
    c->model_len = m.len;
    if (drop_tree) {
        c->model_own = model;
        c->model = model;
        if (c->owned)
            json_decref(c->body);
        c->body = NULL;
        c->owned = 1; /* text and the tree pv_chat_body rebuilds */
    }
    return 0;
}

const char *
pv_tool_call_name(const json_t *msgs, size_t before, const char *id,
                  int latest)
{
    const char *last = NULL;
    for (size_t i = before; i-- > 0;) {
        const json_t *tcs = json_object_get(json_array_get(msgs, i),
                                            "tool_calls");
        size_t j;
        const json_t *tc;
        json_array_foreach(tcs, j, tc) {
            const char *name = json_string_value(
                json_object_get(json_object_get(tc, "function"), "name"));
            const char *tid = json_string_value(json_object_get(tc, "id"));
            if (id && tid && !strcmp(tid, id))
                return name;
            if (latest && !last && j + 1 == json_array_size(tcs))
                last = name;
        }
    }
    return last;
}
