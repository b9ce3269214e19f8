/*
 * embeddings: the inbound adapters of POST /v1/embeddings and the legacy
 * POST /v1/completions.  Both go to OpenAI-format upstreams (the openai
 * kind posts them to {base_url}/embeddings and /completions with the
 * client's bytes as sent, only the value of "model" spliced to the
 * upstream name: pv_chat_keep_bytes; the answer as the upstream sent it)
 * and to the
 * local engine (providers/local.c refuses what it does not implement),
 * so the parse checks only what llmux itself relies on and fills the
 * neutral request's facts; every other member passes on unchanged and the
 * upstream judges it.  Pure (jansson only) for unit tests and fuzzing.
 *
 * Checked:
 *   model          non-empty string
 *   input          embeddings: a non-empty string, or a non-empty array
 *                  (at most GW_EMB_MAX_INPUTS) of strings, of token ids
 *                  (integers), or of arrays of token ids
 *   prompt         completions: the same shapes as input
 *   stream         completions: boolean or null (embeddings: absent)
 *   stream_options completions: object or null; include_usage boolean
 *   max_tokens     completions: integer in [0, PV_MAX_COMPLETION_TOKENS]
 *                  (0 with echo scores the prompt: evaluation harnesses
 *                  send it; the target judges it without echo)
 *   n, best_of     completions: integer in [1, PV_MAX_N]
 *
 * The estimate: each string's bytes / 4 + 1, each token id 1; the bound:
 * each string's bytes + 1, each token id 1, plus 8.  Completions reserve
 * max_tokens (PV_DEFAULT_COMPLETION_TOKENS when absent; none for 0: echo
 * with max_tokens 0 generates nothing) x the larger of n and best_of x
 * the number of prompts (each prompt gets its own choices); embeddings
 * produce no completion tokens (completion_cap 0).  The router and the
 * budget take completion_cap as it is, so an absent cap is told from 0
 * here alone (max_tokens -1 until the body gives one).
 */
#include "gw_int.h"

#include <stdio.h>
#include <string.h>

#define GW_EMB_MAX_INPUTS 2048 /* OpenAI's cap on inputs per request */

#define refuse pv_refuse

/* input / prompt: counts bytes and token ids into c. */
static int
scan_input(const json_t *v, const char *name, struct pv_chat *c, char *msg,
           size_t len, const char **param)
{
    int64_t ids = 0;
    if (json_is_string(v)) {
        c->text_bytes = (int64_t)json_string_length(v);
        c->n_messages = 1;
    } else if (json_is_array(v) && json_array_size(v) > 0 &&
               json_array_size(v) <= GW_EMB_MAX_INPUTS) {
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x) {
            if (json_is_string(x)) {
                c->text_bytes += (int64_t)json_string_length(x);
                c->n_messages++;
            } else if (json_is_integer(x)) {
                ids++;
            } else if (json_is_array(x) && json_array_size(x) > 0) {
                size_t k;
                const json_t *t;
                json_array_foreach(x, k, t) {
                    if (!json_is_integer(t))
                        return refuse(msg, len, param, name,
                                      "%s[%zu][%zu] must be a token id "
                                      "(integer).",
                                      name, i, k);
                }
                ids += (int64_t)json_array_size(x);
                c->n_messages++;
            } else {
                return refuse(msg, len, param, name,
                              "%s[%zu] must be a string, a token id or a "
                              "non-empty array of token ids.",
                              name, i);
            }
        }
        if (ids && c->n_messages == 0)
            c->n_messages = 1; /* one prompt of token ids */
    } else {
        return refuse(msg, len, param, name,
                      "'%s' must be a string or a non-empty array of at most "
                      "%d strings or token arrays.",
                      name, GW_EMB_MAX_INPUTS);
    }
    if (json_is_string(v) && json_string_length(v) == 0)
        return refuse(msg, len, param, name, "'%s' must not be empty.", name);
    c->n_other_parts = ids; /* one token each, bounded exactly */
    c->est_prompt_tokens =
        c->text_bytes / 4 + (int64_t)c->n_messages + ids;
    c->max_prompt_tokens =
        c->text_bytes + (int64_t)c->n_messages + ids + 8;
    return 0;
}

static int
int_in(const json_t *body, const char *name, int64_t lo, int64_t hi,
       int64_t *out, char *msg, size_t len, const char **param)
{
    const json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo ||
        json_integer_value(v) > hi)
        return refuse(msg, len, param, name,
                      "'%s' must be an integer between %lld and %lld.", name,
                      (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return 0;
}

static enum pv_chat_err
parse(struct pv_chat *c, enum pv_api api, const char *text, size_t len,
      char *msg, size_t msglen, const char **param)
{
    memset(c, 0, sizeof(*c));
    *param = NULL;
    json_t *body = pv_json_body(text, len, msg, msglen);
    if (!body)
        return PV_CHAT_BAD_JSON;
    const char *in = api == PV_API_EMBEDDINGS ? "input" : "prompt";
    const json_t *model = json_object_get(body, "model");
    const json_t *stream = json_object_get(body, "stream");
    const json_t *so = json_object_get(body, "stream_options");
    const json_t *iu = json_object_get(so, "include_usage");
    int64_t max_tokens = -1, n = 1, best_of = 1; /* -1: absent */
    if (!json_is_object(body)) {
        refuse(msg, msglen, param, NULL,
               "The request body must be a JSON object.");
        goto bad;
    }
    if (!json_is_string(model) || json_string_length(model) == 0) {
        refuse(msg, msglen, param, "model",
               model ? "'model' must be a non-empty string."
                     : "Missing required parameter: 'model'.");
        goto bad;
    }
    if (!json_object_get(body, in)) {
        refuse(msg, msglen, param, in, "Missing required parameter: '%s'.",
               in);
        goto bad;
    }
    if (scan_input(json_object_get(body, in), in, c, msg, msglen, param))
        goto bad;
    if (api == PV_API_EMBEDDINGS) {
        if (stream && !json_is_null(stream) && !json_is_false(stream)) {
            refuse(msg, msglen, param, "stream",
                   "Embeddings are not streamed.");
            goto bad;
        }
    } else {
        if (stream && !json_is_boolean(stream) && !json_is_null(stream)) {
            refuse(msg, msglen, param, "stream",
                   "'stream' must be a boolean.");
            goto bad;
        }
        if (so && !json_is_object(so) && !json_is_null(so)) {
            refuse(msg, msglen, param, "stream_options",
                   "'stream_options' must be an object.");
            goto bad;
        }
        if (iu && !json_is_boolean(iu) && !json_is_null(iu)) {
            refuse(msg, msglen, param, "stream_options.include_usage",
                   "'stream_options.include_usage' must be a boolean.");
            goto bad;
        }
        if (int_in(body, "max_tokens", 0, PV_MAX_COMPLETION_TOKENS,
                   &max_tokens, msg, msglen, param) ||
            int_in(body, "n", 1, PV_MAX_N, &n, msg, msglen, param) ||
            int_in(body, "best_of", 1, PV_MAX_N, &best_of, msg, msglen,
                   param))
            goto bad;
        c->stream = json_is_true(stream);
        c->include_usage = json_is_true(iu);
    }
    c->api = api;
    c->body = body;
    c->owned = 1;
    c->model = json_string_value(model);
    c->n = n > best_of ? n : best_of;
    c->max_tokens = max_tokens > 0 ? max_tokens : 0;
    c->completion_cap =
        api == PV_API_EMBEDDINGS
            ? 0
            : (max_tokens < 0 ? PV_DEFAULT_COMPLETION_TOKENS : max_tokens) *
                  c->n * (int64_t)(c->n_messages > 1 ? c->n_messages : 1);
    /* The openai kind then sends the client's bytes, only the model's
     * value spliced (any stream_options, even null, makes it take the
     * tree to set include_usage). */
    c->has_stream_options = so != NULL;
    pv_chat_keep_bytes(c, text, len, 1);
    return PV_CHAT_OK;
bad:
    json_decref(body);
    memset(c, 0, sizeof(*c));
    return PV_CHAT_INVALID;
}

enum pv_chat_err
gw_embeddings_parse(struct pv_chat *c, const char *text, size_t len,
                    json_t **echo, char *msg, size_t msglen,
                    const char **param)
{
    *echo = NULL;
    return parse(c, PV_API_EMBEDDINGS, text, len, msg, msglen, param);
}

enum pv_chat_err
gw_completions_parse(struct pv_chat *c, const char *text, size_t len,
                     json_t **echo, char *msg, size_t msglen,
                     const char **param)
{
    *echo = NULL;
    return parse(c, PV_API_COMPLETIONS, text, len, msg, msglen, param);
}

const struct gw_api gw_api_embeddings = {
    .api = PV_API_EMBEDDINGS,
    .what = "embeddings",
    .parse = gw_embeddings_parse,
    .kinds = 1u << CFG_KIND_OPENAI | 1u << CFG_KIND_LOCAL,
};

const struct gw_api gw_api_completions = {
    .api = PV_API_COMPLETIONS,
    .what = "completions",
    .parse = gw_completions_parse,
    .kinds = 1u << CFG_KIND_OPENAI | 1u << CFG_KIND_LOCAL,
};
