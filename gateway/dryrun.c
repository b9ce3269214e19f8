/*
 * dryrun: a chat request with `x-llmux-dry-run: 1` is parsed and routed
 * like any other, then answered here instead of being sent: every target
 * of the plan in the order the run would try it, with
 *
 *   expected_cost   the cost policy's estimate (rt_expected_cost: the
 *                   prompt estimate at the input price plus the completion
 *                   cap, the default when absent and none for an echo
 *                   with max_tokens 0, at the output price), the number
 *                   the router orders by;
 *   max_cost        the budget's worst case for that target
 *                   (gw_cost_worst: what admission reserves);
 *   affordable      whether the caller's key has max_cost left now;
 *
 * and "affordable" for the request as admission would decide it (the
 * worst case over the plan).  Nothing is sent upstream, nothing is
 * reserved or charged (no RPM/TPM token taken), no ledger row is written.
 * The key is still checked: 401 before the body (chat.c), 403 for a model
 * outside its allowlist, 404 for an unknown model.  Money is exact: each
 * amount as a decimal USD string and integer picodollars.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gw_int.h"

int64_t
gw_cost_worst(const struct cfg *c, struct cfg_target tg,
              const struct pv_chat *chat)
{
    const struct cfg_provider *cp = &c->providers[tg.provider];
    const struct cfg_model *cm = &cp->models[tg.model];
    if (!cm->has_price)
        return 0;
    /* Every prompt token at the dearer of input and cache write (an
     * Anthropic prompt may be all cache writes), and an anthropic target
     * without a client cap at the max_tokens it is sent. */
    struct pr_price p = {cm->input_pusd > cm->cache_write_pusd
                             ? cm->input_pusd
                             : cm->cache_write_pusd,
                         cm->cached_input_pusd, cm->output_pusd};
    int64_t comp = chat->completion_cap;
    if (cp->kind == CFG_KIND_ANTHROPIC && !chat->max_tokens)
        comp = PV_ANTH_DEFAULT_MAX_TOKENS * chat->n;
    int64_t v = 0;
    if (pr_cost(&p, chat->max_prompt_tokens, 0, comp, &v) != GX_OK)
        v = INT64_MAX / 4; /* absurd sizes: refused unless unlimited */
    return v;
}

int
gw_dry_run_wanted(const struct gw_hreq *req)
{
    const char *v = gw_hreq_header(req, "x-llmux-dry-run");
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true"));
}

static json_t *
usd(int64_t pusd)
{
    char b[48];
    pr_pusd_format(pusd, b, sizeof(b));
    return json_string(b);
}

/* The key's budget now: 1 and the numbers if it has a limit. */
static int
key_budget(struct gw_server *srv, int64_t key_id, int64_t *limit,
           int64_t *spent, int64_t *reserved)
{
    if (!srv->auth || key_id < 0)
        return 0;
    if (pr_budget_get(gw_auth_budget(srv->auth), key_id, limit, spent,
                      reserved) != GX_OK)
        return 0;
    return *limit >= 0;
}

/* pr_budget_reserve's test, without reserving. */
static int
fits(int has_limit, int64_t limit, int64_t spent, int64_t reserved,
     int64_t cost)
{
    if (!has_limit)
        return 1;
    int64_t total;
    if (pr_pusd_add(spent, reserved, &total) != GX_OK ||
        pr_pusd_add(total, cost, &total) != GX_OK)
        return 0;
    return total <= limit;
}

void
gw_dry_run_reply(struct gw_worker *w, struct gw_hreq *req,
                 const struct cfg *c, const struct pv_chat *chat,
                 const struct rt_plan *plan)
{
    struct gw_server *srv = w->srv;
    char id[GW_REQUEST_ID_MAX + 1];
    gw_request_id(w, req, id, sizeof(id));
    gw_hreq_add_header(req, "X-Request-Id", id);
    gw_hreq_add_header(req, "X-Llmux-Dry-Run", "1");
    int64_t key_id = -1;
    if (srv->auth) {
        struct gw_authn an;
        struct gw_refusal ref;
        gw_auth_precheck(srv->auth, gw_hreq_header(req, "Authorization"),
                         chat->model, gx_now_ms(), &an, &ref);
        if (ref.status) {
            if (ref.status == 401)
                gw_hreq_add_header(req, "WWW-Authenticate",
                                   "Bearer realm=\"llmux\"");
            gw_reply_error(req, ref.status, ref.type, ref.code, NULL, "%s",
                           ref.message);
            return;
        }
        key_id = an.who == GW_CALLER_KEY ? an.key_id : -1;
    }
    if (plan->resolved == 0) {
        gw_reply_error(req, 404, "invalid_request_error", "model_not_found",
                       "model",
                       "The model '%s' does not exist: it is not a route, a "
                       "MODEL@PROVIDER target or a model any provider "
                       "serves (GET /v1/models lists them).",
                       chat->model);
        return;
    }
    int64_t limit = -1, spent = 0, reserved = 0;
    int has_limit = key_budget(srv, key_id, &limit, &spent, &reserved);

    json_t *o = json_object();
    json_t *ts = json_array();
    int64_t worst = 0;
    for (size_t i = 0; o && ts && i < plan->n; i++) {
        struct cfg_target tg = plan->targets[i];
        const struct cfg_provider *cp = &c->providers[tg.provider];
        const struct cfg_model *cm = &cp->models[tg.model];
        int64_t exp = cm->has_price
                          ? rt_expected_cost(cm, chat->est_prompt_tokens,
                                             chat->completion_cap)
                          : 0;
        int64_t mx = gw_cost_worst(c, tg, chat);
        if (mx > worst)
            worst = mx;
        char name[256];
        snprintf(name, sizeof(name), "%s@%s", cm->name, cp->name);
        json_t *t = json_object();
        json_object_set_new(t, "target", json_string(name));
        json_object_set_new(t, "provider", json_string(cp->name));
        json_object_set_new(t, "model", json_string(cm->name));
        json_object_set_new(t, "priced", json_boolean(cm->has_price));
        json_object_set_new(t, "expected_cost_usd", usd(exp));
        json_object_set_new(t, "expected_cost_pusd", json_integer(exp));
        json_object_set_new(t, "max_cost_usd", usd(mx));
        json_object_set_new(t, "max_cost_pusd", json_integer(mx));
        json_object_set_new(
            t, "affordable",
            json_boolean(fits(has_limit, limit, spent, reserved, mx)));
        json_array_append_new(ts, t);
    }
    json_t *sk = json_array();
    for (size_t i = 0; sk && i < plan->n_skipped; i++) {
        struct cfg_target tg = plan->skipped[i];
        const struct cfg_provider *cp = &c->providers[tg.provider];
        char name[256];
        snprintf(name, sizeof(name), "%s@%s", cp->models[tg.model].name,
                 cp->name);
        json_array_append_new(sk, json_string(name));
    }
    json_object_set_new(o, "object", json_string("llmux.dry_run"));
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "model", json_string(chat->model));
    json_object_set_new(o, "route", plan->route
                                        ? json_string(plan->route->name)
                                        : json_null());
    json_object_set_new(o, "estimated_prompt_tokens",
                        json_integer(chat->est_prompt_tokens));
    json_object_set_new(o, "max_prompt_tokens",
                        json_integer(chat->max_prompt_tokens));
    json_object_set_new(o, "completion_tokens",
                        json_integer(chat->completion_cap));
    json_object_set_new(o, "max_attempts", json_integer(plan->max_attempts));
    json_object_set_new(o, "targets", ts);
    json_object_set_new(o, "skipped", sk);
    json_object_set_new(o, "max_cost_usd", usd(worst));
    json_object_set_new(o, "max_cost_pusd", json_integer(worst));
    json_t *b = json_object();
    if (has_limit) {
        int64_t left = limit - spent - reserved;
        json_object_set_new(b, "limit_usd", usd(limit));
        json_object_set_new(b, "spent_usd", usd(spent));
        json_object_set_new(b, "reserved_usd", usd(reserved));
        json_object_set_new(b, "remaining_usd", usd(left > 0 ? left : 0));
    } else {
        json_object_set_new(b, "limit_usd", json_null());
    }
    json_object_set_new(o, "budget", b);
    json_object_set_new(
        o, "affordable",
        json_boolean(fits(has_limit, limit, spent, reserved, worst)));
    if (plan->route)
        gw_hreq_add_header(req, "X-Llmux-Route", plan->route->name);
    gw_reply_json(req, 200, o);
    json_decref(o);
}
