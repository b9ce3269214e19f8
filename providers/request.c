/*
 * request.c: the facts of a client's chat request that every provider kind
 * relies on, checked once at the edge (before routing) so that each kind
 * sees the same valid request and a bad one gets the same 400 whichever
 * target it would have reached (the local kind used to answer 502 for a
 * max_tokens it could not take, an openai upstream would have billed or
 * refused it in its own words).
 *
 * Checked (OpenAI's rules where it has them):
 *   model            non-empty string
 *   messages         non-empty array of objects with a string "role";
 *                    "content" a string, an array of parts or null
 *   stream           boolean or null
 *   max_tokens, max_completion_tokens
 *                    integer in [1, PV_MAX_COMPLETION_TOKENS] or null
 *                    (0 asks for nothing, a real 5e6 is a typo or an
 *                    attack on a budget reservation)
 *   n                integer in [1, PV_MAX_N] or null
 *   seed             integer or null
 *   temperature, top_p, presence_penalty, frequency_penalty
 *                    number or null
 *   stream_options   object or null; its include_usage boolean or null
 *
 * What it does not check: anything a provider may legitimately accept that
 * OpenAI does not know (extra fields pass through unchanged).
 */
#include "providers.h"

#include <stdarg.h>
#include <stdio.h>

static int
bad(char *msg, size_t len, const char **param, const char *p,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int
bad(char *msg, size_t len, const char **param, const char *p,
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

int
pv_request_validate(const json_t *body, char *msg, size_t len,
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
        if (content && !json_is_string(content) && !json_is_array(content) &&
            !json_is_null(content))
            return bad(msg, len, param, "messages",
                       "messages[%zu].content must be a string, an array of "
                       "parts or null.",
                       i);
    }
    const json_t *stream = json_object_get(body, "stream");
    if (stream && !json_is_boolean(stream) && !json_is_null(stream))
        return bad(msg, len, param, "stream", "'stream' must be a boolean.");
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
    return 0;
}

int64_t
pv_request_completion_cap(const json_t *body, int64_t dflt)
{
    const json_t *a = json_object_get(body, "max_tokens");
    const json_t *b = json_object_get(body, "max_completion_tokens");
    int64_t cap = 0;
    if (json_is_integer(a) && json_integer_value(a) > cap)
        cap = json_integer_value(a);
    if (json_is_integer(b) && json_integer_value(b) > cap)
        cap = json_integer_value(b);
    if (cap <= 0)
        cap = dflt;
    if (cap > PV_MAX_COMPLETION_TOKENS)
        cap = PV_MAX_COMPLETION_TOKENS;
    const json_t *n = json_object_get(body, "n");
    int64_t k = json_is_integer(n) ? json_integer_value(n) : 1;
    if (k < 1)
        k = 1;
    if (k > PV_MAX_N)
        k = PV_MAX_N;
    return cap * k;
}
