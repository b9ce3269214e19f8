/*
 * usage_api: GET /v1/usage?since=&until=&group_by=[&key=ID][&what_if=1].
 *
 * The query (pricing's pr_usage_query, a SQLite read) runs on the aux
 * thread, never on the event loop; the body goes back to the worker that
 * owns the request (gw_aux_submit).  Who sees what: a normal key only its
 * own rows (asking for another key's is 403), the admin key every row or
 * one key's (key=ID), an anonymous caller (require_keys false) only the
 * anonymous rows.  what_if=1 adds the period's tokens re-priced at every
 * priced model of the config (as MODEL@PROVIDER) and of the built-in
 * table (pricing's pr_usage_result_json_whatif), computed on the aux
 * thread from a copy of the names (the config may be reloaded meanwhile).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/buffer.h>

#include "gw_int.h"

#define USAGE_BODY_MAX (16 * 1024 * 1024)

struct usage_job {
    struct pr_usage_query q;
    struct pr_whatif_model *wi; /* what_if=1: owned, names too */
    size_t n_wi;
    enum gx_status st;
    char err[256];
    struct gx_buf out;
};

static void
usage_run(struct gw_server *srv, void *arg)
{
    struct usage_job *j = arg;
    struct pr_usage_result *res = NULL;
    j->st = pr_usage_query(gw_auth_db_path(srv->auth), &j->q, &res, j->err,
                           sizeof(j->err));
    if (j->st == GX_OK)
        j->st = pr_usage_result_json_whatif(res, j->wi, j->n_wi, &j->out);
    pr_usage_result_free(res);
}

struct pr_whatif_model *
gw_whatif_models(const struct cfg *c, int with_builtin, size_t *n)
{
    size_t nc = 0, nb = with_builtin ? pr_whatif_builtin(NULL, 0) : 0;
    for (size_t p = 0; p < c->n_providers; p++)
        nc += c->providers[p].n_models;
    struct pr_whatif_model *m = calloc(nc + nb + 1, sizeof(*m));
    if (!m)
        return NULL;
    size_t k = 0;
    for (size_t p = 0; p < c->n_providers; p++)
        for (size_t i = 0; i < c->providers[p].n_models; i++) {
            const struct cfg_model *cm = &c->providers[p].models[i];
            if (!cm->has_price)
                continue;
            size_t len = strlen(cm->name) + strlen(c->providers[p].name) + 2;
            char *name = malloc(len);
            if (!name) {
                gw_whatif_models_free(m, k);
                return NULL;
            }
            snprintf(name, len, "%s@%s", cm->name, c->providers[p].name);
            m[k].name = name;
            m[k].source = "config";
            m[k].rates = (struct pr_rates){cm->input_pusd,
                                           cm->cached_input_pusd,
                                           cm->cache_write_pusd,
                                           cm->output_pusd};
            k++;
        }
    size_t nbuilt = with_builtin ? pr_whatif_builtin(m + k, nb) : 0;
    /* Built-in names are static: duplicated so one free rule holds. */
    for (size_t i = k; i < k + nbuilt; i++)
        m[i].name = strdup(m[i].name);
    for (size_t i = k; i < k + nbuilt; i++)
        if (!m[i].name) {
            gw_whatif_models_free(m, k + nbuilt);
            return NULL;
        }
    *n = k + nbuilt;
    return m;
}

void
gw_whatif_models_free(struct pr_whatif_model *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++)
        free((char *)m[i].name);
    free(m);
}

static void
usage_free(struct usage_job *j)
{
    gw_whatif_models_free(j->wi, j->n_wi);
    gx_buf_cleanup(&j->out);
    free(j);
}

static void
usage_reply(struct gw_server *srv, struct gw_hreq *req, void *arg)
{
    (void)srv;
    struct usage_job *j = arg;
    if (req) {
        if (j->st != GX_OK) {
            GX_LOG(GX_LOG_ERROR, NULL, "usage query: %s", j->err);
            gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                           "The usage query failed.");
        } else {
            gw_hreq_add_header(req, "Content-Type", "application/json");
            gw_hreq_send_body(req, 200,
                              j->out.data ? j->out.data : "{\"data\":[]}",
                              j->out.data ? j->out.len : 11);
        }
    }
    usage_free(j);
}

void
gw_usage_handle(struct gw_worker *w, struct gw_hreq *req)
{
    struct gw_server *srv = w->srv;
    if (gw_hreq_method(req) != GW_METHOD_GET) {
        gw_reply_error(req, 405, "invalid_request_error",
                       "method_not_allowed", NULL, "Use GET /v1/usage.");
        return;
    }
    if (!srv->auth || !gw_auth_db_path(srv->auth)) {
        gw_reply_error(req, 503, "server_error", "unavailable", NULL,
                       "Usage is not available.");
        return;
    }
    struct gw_authn an;
    const char *authz = gw_hreq_credentials(req);
    int64_t now = gx_now_ms();
    gw_auth_identify(srv->auth, authz, now, &an);
    if (an.who == GW_CALLER_NONE) {
        gw_reply_unauthorized(req, &an);
        return;
    }

    /* %-decoded by conn.c, owned by req. */
    const char *since = gw_hreq_param(req, "since");
    const char *until = gw_hreq_param(req, "until");
    const char *group = gw_hreq_param(req, "group_by");
    const char *key = gw_hreq_param(req, "key");
    const char *what_if = gw_hreq_param(req, "what_if");

    struct usage_job *j = calloc(1, sizeof(*j));
    if (!j) {
        gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                       "Out of memory.");
        return;
    }
    gx_buf_init(&j->out, USAGE_BODY_MAX);
    j->q.until_ms = now + 1;
    if (pr_time_parse(since ? since : "24h", now, &j->q.since_ms) != GX_OK) {
        gw_reply_error(req, 400, "invalid_request_error", "invalid_value",
                       "since",
                       "'since' must be like 24h, 7d, 30m, epoch ms or an "
                       "ISO 8601 UTC time.");
        goto fail;
    }
    if (until && pr_time_parse(until, now, &j->q.until_ms) != GX_OK) {
        gw_reply_error(req, 400, "invalid_request_error", "invalid_value",
                       "until",
                       "'until' must be like 24h, 7d, 30m, epoch ms or an "
                       "ISO 8601 UTC time.");
        goto fail;
    }
    if (pr_group_parse(group ? group : "", &j->q.group_by) != GX_OK) {
        gw_reply_error(req, 400, "invalid_request_error", "invalid_value",
                       "group_by",
                       "'group_by' must be one of model, provider, route, "
                       "key, day, hour, api.");
        goto fail;
    }
    if (what_if && strcmp(what_if, "0") && strcmp(what_if, "1")) {
        gw_reply_error(req, 400, "invalid_request_error", "invalid_value",
                       "what_if", "'what_if' must be 0 or 1.");
        goto fail;
    }
    if (what_if && !strcmp(what_if, "1") &&
        !(j->wi = gw_whatif_models(gw_cfg(srv), 1, &j->n_wi))) {
        gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                       "Out of memory.");
        goto fail;
    }
    int64_t want = PR_KEY_ALL;
    if (key) {
        char *end;
        long long v = strtoll(key, &end, 10);
        if (!*key || *end || v <= 0) {
            gw_reply_error(req, 400, "invalid_request_error",
                           "invalid_value", "key",
                           "'key' must be a key id.");
            goto fail;
        }
        want = v;
    }
    switch (an.who) {
    case GW_CALLER_ADMIN:
        j->q.key_filter = want;
        break;
    case GW_CALLER_KEY:
        if (want != PR_KEY_ALL && want != an.key_id) {
            gw_reply_error(req, 403, "invalid_request_error",
                           "permission_denied", "key",
                           "A key may read only its own usage.");
            goto fail;
        }
        j->q.key_filter = an.key_id;
        break;
    default: /* anonymous: only what anonymous callers did */
        if (want != PR_KEY_ALL) {
            gw_reply_error(req, 403, "invalid_request_error",
                           "permission_denied", "key",
                           "Anonymous callers may read only anonymous "
                           "usage.");
            goto fail;
        }
        j->q.key_filter = -1;
        break;
    }
    if (gw_aux_submit(w, req, usage_run, usage_reply, j) != 0) {
        gw_hreq_add_header(req, "Retry-After", "1");
        gw_reply_error(req, 503, "server_error", "unavailable", NULL,
                       "Usage is busy; retry shortly.");
        usage_free(j);
    }
    return;
fail:
    usage_free(j);
}
