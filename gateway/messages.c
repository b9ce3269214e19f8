/*
 * messages: POST /v1/messages and /v1/messages/count_tokens, the Anthropic
 * Messages API inbound.  The request life is chat.c's (parse once, route,
 * admit, run, ledger, reply after the commit): this file is the client's
 * writer it calls for api PV_API_MESSAGES, over the pure translations of
 * providers/messages.c, plus count_tokens.
 *
 * Errors: every llmux error on these paths (gw_reply_error, chat.c's
 * failures, a provider's 4xx passed on) reaches the client as
 * {"type":"error","error":{"type","message"}} with the same status; a
 * stream that fails after its first byte ends with an `error` event.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "gw_int.h"

int
gw_msgs_path(const char *path)
{
    return path && (!strcmp(path, "/v1/messages") ||
                    !strcmp(path, "/v1/messages/count_tokens"));
}

char *
gw_msgs_reply_body(const struct pv_chat *chat, int pass, const char *id,
                   const struct pv_usage *u, int *status, const char *body,
                   size_t len, size_t *out_len)
{
    if (!body)
        return NULL;
    if (*status >= 400)
        return pv_msgs_error_from(body, len, *status, out_len);
    char *m = pass ? pv_msgs_pass_answer(body, len, chat->model, out_len)
                   : pv_msgs_answer(body, len, chat->model, id, u, out_len);
    if (!m) { /* not an answer we can read: say so, in the client's shape */
        *status = 502;
        m = pv_msgs_error(502, NULL,
                          "The upstream answer could not be translated to "
                          "the Messages API.",
                          out_len);
    }
    return m;
}

static void
put(struct evbuffer *b, struct gx_buf *g)
{
    if (g->len)
        evbuffer_add(b, g->data, g->len);
    gx_buf_cleanup(g);
}

void
gw_msgs_stream_event(struct pv_msgs_stream *s, int pass, const char *data,
                     size_t len, struct evbuffer *b)
{
    struct gx_buf g;
    gx_buf_init(&g, 0);
    if (pass)
        pv_msgs_stream_pass(s, data, len, &g);
    else
        pv_msgs_stream_chunk(s, data, len, &g);
    put(b, &g);
}

void
gw_msgs_stream_end(struct pv_msgs_stream *s, int pass,
                   const struct pv_usage *u, int status, const char *error,
                   struct evbuffer *b)
{
    struct gx_buf g;
    gx_buf_init(&g, 0);
    if (status >= 400)
        pv_msgs_stream_error(status, error, &g);
    else
        pv_msgs_stream_end(s, pass, u, &g);
    put(b, &g);
}

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
                    pv_local_count_tokens(p, c.body, &count, err,
                                          sizeof(err)) == 0;
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
