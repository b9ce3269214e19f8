/*
 * usage_api: GET /v1/usage?since=&until=&group_by=[&key=ID].
 *
 * The query (pricing's pr_usage_query, a SQLite read) runs on the aux
 * thread, never on the event loop; the body goes back to the worker that
 * owns the request (gw_aux_submit).  Who sees what: a normal key only its
 * own rows (asking for another key's is 403), the admin key every row or
 * one key's (key=ID), an anonymous caller (require_keys false) only the
 * anonymous rows.
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
        j->st = pr_usage_result_json(res, &j->out);
    pr_usage_result_free(res);
}

static void
usage_free(struct usage_job *j)
{
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
                       "key, day, hour.");
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
