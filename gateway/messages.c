/*
 * messages: POST /v1/messages and /v1/messages/count_tokens, the Anthropic
 * Messages API inbound.  The request life is chat.c's (parse once, route,
 * admit, run, ledger, reply after the commit): this file is its inbound
 * API table gw_api_messages (gw_int.h) over the pure translations of
 * providers/messages.c, plus count_tokens.
 *
 * Errors: every llmux error on these paths (gw_reply_error, chat.c's
 * failures, a provider's 4xx passed on) reaches the client as
 * {"type":"error","error":{"type","message"}} with the same status; a
 * stream that fails after its first byte ends with an `error` event.
 *
 * Passthrough (a target of kind anthropic: the same API both ways): the
 * upstream gets the client's bytes with only the value of "model"
 * replaced by the upstream name, and the client gets the upstream's bytes
 * (the JSON answer; each SSE event's data, thinking signatures,
 * redacted_thinking, pings, event and block types llmux does not know,
 * an error event or an Anthropic error body) with only the value of
 * "model" (message_start's message.model in a stream) replaced by the
 * name the client asked for (a route, a target or a model), as a
 * translated answer carries it, so a client sees one name whichever
 * target served it (x-llmux-provider and x-llmux-model say which one did;
 * the upstream's own spelling of its model, e.g. a dated snapshot name,
 * is not passed on).  Events are framed as
 * "event: TYPE\ndata: DATA\n\n" (TYPE the data's "type"), which is
 * how Anthropic frames them; message_stop comes after the ledger row
 * commits.  The ledger's usage is read from those bytes by scanning
 * (providers/anthropic.c), never by rebuilding them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "gw_int.h"

static enum pv_chat_err
msgs_parse(struct pv_chat *c, const char *text, size_t len, json_t **echo,
           char *msg, size_t msglen, const char **param)
{
    *echo = NULL;
    return pv_msgs_parse(c, text, len, 0, msg, msglen, param);
}

/* The client's anthropic-beta header goes upstream on a passthrough
 * (native.c), printable ASCII only and whole or not at all. */
static void
msgs_headers(struct pv_chat *c, struct gw_hreq *req)
{
    const char *beta = gw_hreq_header(req, "anthropic-beta");
    if (!beta || strlen(beta) >= sizeof(c->anthropic_beta))
        return;
    for (const char *p = beta; *p; p++)
        if (*p < 0x20 || *p >= 0x7f)
            return;
    snprintf(c->anthropic_beta, sizeof(c->anthropic_beta), "%s", beta);
}

static char *
msgs_body(const struct gw_api_ctx *x, const char *up, size_t len,
          size_t *out_len, char *msg, size_t msglen)
{
    char *m = x->pass ? pv_msgs_pass_answer(up, len, x->chat->model, out_len)
                      : pv_msgs_answer(up, len, x->chat->model, x->id,
                                       x->usage, out_len);
    if (!m)
        snprintf(msg, msglen, "%s",
                 x->pass ? "the anthropic answer is not JSON"
                         : "it is not a chat completion");
    return m;
}

static char *
msgs_error(int status, const char *body, size_t len, size_t *out_len)
{
    return pv_msgs_error_from(body, len, status, out_len);
}

static void *
msgs_new(const struct gw_api_ctx *x)
{
    struct pv_msgs_stream *s = malloc(sizeof(*s));
    if (s)
        pv_msgs_stream_init(s, x->chat->model, x->id);
    return s;
}

static enum gx_status
msgs_event(void *s, int pass, const char *data, size_t len,
           struct gx_buf *out)
{
    int rc = pass ? pv_msgs_stream_pass(s, data, len, out)
                  : pv_msgs_stream_chunk(s, data, len, out);
    return rc == 0 ? GX_OK : GX_ENOMEM;
}

static void
msgs_free(void *s)
{
    pv_msgs_stream_cleanup(s);
    free(s);
}

/* A passthrough stream that broke with the upstream's own error event
 * has said so already (that event went out as it came). */
static enum gx_status
msgs_end(void *s, int pass, const struct pv_usage *u, int status,
         const char *error, struct gx_buf *out)
{
    const struct pv_msgs_stream *ms = s;
    int rc = status < 400                  ? pv_msgs_stream_end(s, pass, u, out)
             : pass && ms->pass_error ? 0
                                      : pv_msgs_stream_error(status, error,
                                                             out);
    return rc == 0 ? GX_OK : GX_ENOMEM;
}

const struct gw_api gw_api_messages = {
    .api = PV_API_MESSAGES,
    .what = "messages",
    .parse = msgs_parse,
    .kinds = GW_KINDS_ALL,
    .body = msgs_body,
    .stream_new = msgs_new,
    .stream_free = msgs_free,
    .stream_event = msgs_event,
    .stream_end = msgs_end,
    .pass = pv_passthrough,
    .headers = msgs_headers,
    .error = msgs_error,
};

/* POST /v1/messages/count_tokens: {"input_tokens": N} for the model the
 * caller may use: exact when the model's first target is the local engine
 * (its chat template and tokenizer, as a generation would count), else the
 * one prompt estimate every layer uses (providers.h); the header
 * x-llmux-token-count says which ("exact" or "estimate"). */
void
gw_msgs_count_tokens(struct gw_worker *w, struct gw_hreq *req)
{
    struct gw_server *srv = w->srv;
    const struct gw_key *key = NULL;
    if (srv->auth) {
        struct gw_authn an;
        gw_auth_identify(srv->auth, gw_hreq_credentials(req), gx_now_ms(),
                         &an);
        if (an.who == GW_CALLER_NONE) {
            gw_reply_unauthorized(req, &an);
            return;
        }
        key = an.key;
    }
    struct evbuffer *in = gw_hreq_body(req);
    size_t n = evbuffer_get_length(in);
    struct pv_chat c;
    char msg[512];
    const char *param = NULL;
    const char *text = n ? (const char *)evbuffer_pullup(in, -1) : "";
    enum pv_chat_err pe = pv_msgs_parse(&c, text, n, 1, msg, sizeof(msg),
                                        &param);
    if (pe != PV_CHAT_OK) {
        gw_reply_error(req, 400, "invalid_request_error",
                       pe == PV_CHAT_BAD_JSON ? "invalid_json"
                                              : "invalid_value",
                       param, "%s", msg);
        return;
    }
    struct rt_plan plan;
    rt_plan_route(gw_router(srv), c.model, c.est_prompt_tokens,
                  c.completion_cap, &plan);
    if (key && !gw_key_allows(key, c.model)) {
        gw_reply_error(req, 403, "invalid_request_error", "model_not_allowed",
                       "model", "This key may not use the model '%s'.",
                       c.model);
    } else if (plan.resolved == 0) {
        gw_reply_error(req, 404, "invalid_request_error", "model_not_found",
                       "model",
                       "The model '%s' does not exist: it is not a route, a "
                       "MODEL@PROVIDER target or a model any provider "
                       "serves.",
                       c.model);
    } else {
        const struct cfg *cfg = gw_cfg(srv);
        const struct cfg_provider *p =
            plan.n ? &cfg->providers[plan.targets[0].provider] : NULL;
        int64_t count = c.est_prompt_tokens;
        char err[256];
        int exact = p && p->kind == CFG_KIND_LOCAL &&
                    pv_local_count_tokens(gw_registry(srv), p, c.body,
                                          &count, err, sizeof(err)) == 0;
        json_t *o = json_pack("{s:I}", "input_tokens", (json_int_t)count);
        gw_hreq_add_header(req, "X-Llmux-Token-Count",
                           exact ? "exact" : "estimate");
        if (o)
            gw_reply_json(req, 200, o);
        else
            gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                           "Out of memory.");
        json_decref(o);
    }
    pv_chat_cleanup(&c);
}
