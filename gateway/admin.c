/*
 * admin: the keys API (POST /admin/keys, GET /admin/keys, DELETE
 * /admin/keys/{id}; admin key only), the keys table functions the CLI
 * shares, and GET /v1/models filtered by the caller's allowlist.
 *
 * Writes and reads of the keys table run on the aux thread (auth.c), never
 * on an event loop; the in-memory table is updated there before the reply,
 * so a client that saw "created" can use its key on any worker at once,
 * and one that saw "revoked" is refused from then on.
 *
 * The secret exists only in the POST reply (and the CLI's stdout): the
 * table holds its SHA-256, listings never show either.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <openssl/crypto.h>

#include "gw_int.h"

#define NAME_MAX_LEN 128
#define MODELS_MAX_LEN 4096

/* ------------------------------------------------------------------ */
/* Validation.                                                          */

static int
get_limit(const json_t *obj, const char *name, int64_t *out, char *err,
          size_t errlen)
{
    const json_t *v = json_object_get(obj, name);
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > 1000000000) {
        gx_errf(err, errlen, "'%s' must be an integer from 0 to 1000000000",
                name);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

enum gx_status
gw_key_spec_from_json(const json_t *obj, struct pr_key *spec,
                      char *models_buf, size_t models_len, char *err,
                      size_t errlen)
{
    static const char *const known[] = {"name", "budget_usd", "rpm", "tpm",
                                        "models", "expires_days", NULL};
    memset(spec, 0, sizeof(*spec));
    spec->expires_ms = -1;
    spec->revoked_ms = -1;
    spec->budget_pusd = -1;
    if (!json_is_object(obj)) {
        gx_errf(err, errlen, "the body must be a JSON object");
        return GX_EINVAL;
    }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        int ok = 0;
        for (size_t i = 0; known[i]; i++)
            ok |= !strcmp(k, known[i]);
        if (!ok) {
            gx_errf(err, errlen, "unknown field '%.64s'", k);
            return GX_EINVAL;
        }
    }
    const json_t *name = json_object_get(obj, "name");
    if (!json_is_string(name) || json_string_length(name) == 0 ||
        json_string_length(name) > NAME_MAX_LEN) {
        gx_errf(err, errlen, "'name' must be a string of 1 to %d bytes",
                NAME_MAX_LEN);
        return GX_EINVAL;
    }
    const char *ns = json_string_value(name);
    for (size_t i = 0; i < json_string_length(name); i++)
        if ((unsigned char)ns[i] < 0x20 || ns[i] == 0x7f) {
            gx_errf(err, errlen, "'name' must not hold control characters");
            return GX_EINVAL;
        }
    spec->name = ns;

    const json_t *b = json_object_get(obj, "budget_usd");
    if (b && !json_is_null(b)) {
        int64_t per_tok = 0;
        if (!json_is_number(b) || json_number_value(b) < 0 ||
            pr_usd_per_mtok_from_double(json_number_value(b), &per_tok) !=
                GX_OK ||
            __builtin_mul_overflow(per_tok, (int64_t)1000000,
                                   &spec->budget_pusd)) {
            gx_errf(err, errlen, "'budget_usd' must be a number of USD >= 0 "
                                 "(at most 6 decimals, below 9 million)");
            return GX_EINVAL;
        }
    }
    if (get_limit(obj, "rpm", &spec->rpm, err, errlen) ||
        get_limit(obj, "tpm", &spec->tpm, err, errlen))
        return GX_EINVAL;

    const json_t *e = json_object_get(obj, "expires_days");
    if (e && !json_is_null(e)) {
        double d = json_is_number(e) ? json_number_value(e) : -1;
        if (!(d > 0 && d <= 36500)) {
            gx_errf(err, errlen,
                    "'expires_days' must be a number of days in (0, 36500]");
            return GX_EINVAL;
        }
        spec->expires_ms = gx_now_ms() + (int64_t)llround(d * 86400000.0);
    }

    const json_t *m = json_object_get(obj, "models");
    if (m && !json_is_null(m)) {
        if (!json_is_array(m)) {
            gx_errf(err, errlen, "'models' must be an array of model or "
                                 "route names");
            return GX_EINVAL;
        }
        if (json_array_size(m) == 0) {
            /* An empty list would read as "no limit" (every model) or as
             * "nothing"; neither is what a caller who wrote it meant to
             * be sure of, so it is refused. */
            gx_errf(err, errlen, "'models' is empty: list at least one "
                                 "route or model name, or leave it out "
                                 "(or use [\"*\"]) to allow every model");
            return GX_EINVAL;
        }
        size_t used = 0, i;
        const json_t *x;
        models_buf[0] = '\0';
        json_array_foreach(m, i, x) {
            const char *s = json_string_value(x);
            size_t sl = s ? json_string_length(x) : 0;
            if (!s || sl == 0 || sl > 200 || strchr(s, ',') ||
                strlen(s) != sl) {
                gx_errf(err, errlen, "models[%zu] must be a non-empty name "
                                     "without commas",
                        i);
                return GX_EINVAL;
            }
            if (used + sl + 2 > models_len) {
                gx_errf(err, errlen, "'models' is too long");
                return GX_EINVAL;
            }
            if (used)
                models_buf[used++] = ',';
            memcpy(models_buf + used, s, sl);
            used += sl;
            models_buf[used] = '\0';
        }
        if (used)
            spec->models = models_buf;
    }
    return GX_OK;
}

/* ------------------------------------------------------------------ */
/* The keys table: pricing's pr_key_* own it (SQLite or PostgreSQL).    */

enum gx_status
gw_keys_db_create(const char *db_path, const struct pr_key *k,
                  int64_t *id_out, char *err, size_t errlen)
{
    return pr_key_create(db_path, k, id_out, err, errlen);
}

enum gx_status
gw_keys_db_revoke(const char *db_path, int64_t id, int64_t now_ms, char *err,
                  size_t errlen)
{
    return pr_key_revoke(db_path, id, now_ms, err, errlen);
}

static json_t *
pusd_json(int64_t v)
{
    if (v < 0)
        return json_null();
    char buf[48];
    pr_pusd_format(v, buf, sizeof(buf));
    return json_real(strtod(buf, NULL));
}

static json_t *
int_or_null(int64_t v, int64_t null_below)
{
    return v < null_below ? json_null() : json_integer(v);
}

static int
list_one(void *ud, const struct pr_key *k)
{
    json_t *arr = ud;
    json_t *ml = json_null();
    if (k->models && k->models[0]) {
        ml = json_array();
        const char *p = k->models;
        while (ml && *p) {
            const char *c = strchr(p, ',');
            size_t n = c ? (size_t)(c - p) : strlen(p);
            json_array_append_new(ml, json_stringn(p, n));
            p += n + (c ? 1 : 0);
        }
    }
    int revoked = k->revoked_ms >= 0;
    int64_t exp = k->expires_ms;
    const char *state = revoked                          ? "revoked"
                        : exp >= 0 && gx_now_ms() >= exp ? "expired"
                                                         : "active";
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(k->id));
    json_object_set_new(o, "object", json_string("key"));
    json_object_set_new(o, "name", json_string(k->name));
    json_object_set_new(o, "state", json_string(state));
    json_object_set_new(o, "created_ms", json_integer(k->created_ms));
    json_object_set_new(o, "expires_ms", int_or_null(k->expires_ms, 0));
    json_object_set_new(o, "revoked_ms", int_or_null(k->revoked_ms, 0));
    json_object_set_new(o, "budget_usd", pusd_json(k->budget_pusd));
    json_object_set_new(o, "budget_pusd", int_or_null(k->budget_pusd, 0));
    json_object_set_new(o, "spent_usd", pusd_json(k->spent_pusd));
    json_object_set_new(o, "spent_pusd", json_integer(k->spent_pusd));
    json_object_set_new(o, "rpm", int_or_null(k->rpm, 1));
    json_object_set_new(o, "tpm", int_or_null(k->tpm, 1));
    json_object_set_new(o, "models", ml);
    return json_array_append_new(arr, o) != 0;
}

enum gx_status
gw_keys_db_list(const char *db_path, json_t **out, char *err, size_t errlen)
{
    json_t *arr = json_array();
    if (!arr) {
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    enum gx_status rs = pr_key_list(db_path, list_one, arr, err, errlen);
    if (rs == GX_ECANCELED)
        gx_errf(err, errlen, "out of memory");
    if (rs != GX_OK) {
        json_decref(arr);
        return rs == GX_ECANCELED ? GX_ENOMEM : rs;
    }
    *out = arr;
    return GX_OK;
}

/* ------------------------------------------------------------------ */
/* HTTP.                                                                */

void
gw_reply_unauthorized(struct gw_hreq *req, const struct gw_authn *an)
{
    gw_hreq_add_header(req, "WWW-Authenticate", "Bearer realm=\"llmux\"");
    gw_reply_error(req, an->status ? an->status : 401,
                   "invalid_request_error",
                   an->code ? an->code : "invalid_api_key", NULL, "%s",
                   an->message[0] ? an->message
                                  : "You didn't provide an API key.");
}

enum admin_op { OP_CREATE, OP_LIST, OP_REVOKE };

struct admin_job {
    enum admin_op op;
    struct pr_key spec;
    json_t *body;      /* owns spec's strings */
    char models[MODELS_MAX_LEN];
    char secret[GW_KEY_LEN + 1];
    int64_t id;
    enum gx_status st;
    char err[256];
    json_t *list;
};

static void
admin_run(struct gw_server *srv, void *arg)
{
    struct admin_job *j = arg;
    const char *path = gw_auth_db_path(srv->auth);
    switch (j->op) {
    case OP_CREATE:
        j->spec.created_ms = gx_now_ms();
        j->st = gw_keys_db_create(path, &j->spec, &j->id, j->err,
                                  sizeof(j->err));
        if (j->st == GX_OK) {
            j->spec.id = j->id;
            j->st = gw_auth_put(srv->auth, &j->spec);
            if (j->st != GX_OK)
                snprintf(j->err, sizeof(j->err), "%s",
                         gx_status_str(j->st));
        }
        break;
    case OP_LIST:
        j->st = gw_keys_db_list(path, &j->list, j->err, sizeof(j->err));
        break;
    case OP_REVOKE: {
        int64_t now = gx_now_ms();
        j->st = gw_keys_db_revoke(path, j->id, now, j->err, sizeof(j->err));
        if (j->st == GX_OK)
            gw_auth_revoke(srv->auth, j->id, now);
        break;
    }
    }
}

static void
admin_job_free(struct admin_job *j)
{
    json_decref(j->body);
    json_decref(j->list);
    OPENSSL_cleanse(j->secret, sizeof(j->secret));
    free(j);
}

static void
admin_reply(struct gw_server *srv, struct gw_hreq *req, void *arg)
{
    (void)srv;
    struct admin_job *j = arg;
    if (!req) {
        admin_job_free(j);
        return;
    }
    if (j->st == GX_ENOTFOUND) {
        gw_reply_error(req, 404, "invalid_request_error", "key_not_found",
                       "id", "No key with id %lld.", (long long)j->id);
    } else if (j->st != GX_OK) {
        GX_LOG(GX_LOG_ERROR, NULL, "admin keys: %s", j->err);
        gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                       "The keys table could not be updated.");
    } else if (j->op == OP_CREATE) {
        json_t *o = json_object();
        json_object_set_new(o, "id", json_integer(j->id));
        json_object_set_new(o, "object", json_string("key"));
        json_object_set_new(o, "key", json_string(j->secret));
        json_object_set_new(o, "name", json_string(j->spec.name));
        json_object_set_new(o, "created_ms",
                            json_integer(j->spec.created_ms));
        json_object_set_new(o, "expires_ms",
                            j->spec.expires_ms >= 0
                                ? json_integer(j->spec.expires_ms)
                                : json_null());
        char b[48];
        pr_pusd_format(j->spec.budget_pusd, b, sizeof(b));
        json_object_set_new(o, "budget_usd",
                            j->spec.budget_pusd >= 0
                                ? json_real(strtod(b, NULL))
                                : json_null());
        json_object_set_new(o, "rpm", j->spec.rpm ? json_integer(j->spec.rpm)
                                                  : json_null());
        json_object_set_new(o, "tpm", j->spec.tpm ? json_integer(j->spec.tpm)
                                                  : json_null());
        json_object_set(o, "models",
                        json_object_get(j->body, "models")
                            ? json_object_get(j->body, "models")
                            : json_null());
        gw_hreq_add_header(req, "Cache-Control", "no-store");
        gw_reply_json(req, 200, o);
        json_decref(o);
    } else if (j->op == OP_LIST) {
        json_t *o = json_pack("{s:s,s:O}", "object", "list", "data", j->list);
        gw_reply_json(req, 200, o);
        json_decref(o);
    } else {
        json_t *o = json_pack("{s:I,s:s,s:b}", "id", (json_int_t)j->id,
                              "object", "key", "revoked", 1);
        gw_reply_json(req, 200, o);
        json_decref(o);
    }
    admin_job_free(j);
}

void
gw_admin_refuse(struct gw_hreq *req, struct gw_authn *an)
{
    if (an->who == GW_CALLER_NONE) {
        gw_reply_unauthorized(req, an);
    } else if (an->who == GW_CALLER_ANON) {
        an->status = 401;
        an->code = "invalid_api_key";
        snprintf(an->message, sizeof(an->message),
                 "The admin API needs the admin key as a bearer token.");
        gw_reply_unauthorized(req, an);
    } else {
        gw_reply_error(req, 403, "invalid_request_error",
                       "admin_key_required", NULL,
                       "This key may not use the admin API.");
    }
}

/* 1 if the caller is the admin; else replies 401/403 and returns 0. */
static int
require_admin(struct gw_server *srv, struct gw_hreq *req)
{
    struct gw_authn an;
    const char *authz = gw_hreq_credentials(req);
    gw_auth_identify(srv->auth, authz, gx_now_ms(), &an);
    if (an.who == GW_CALLER_ADMIN)
        return 1;
    gw_admin_refuse(req, &an);
    return 0;
}

void
gw_admin_handle(struct gw_worker *w, struct gw_hreq *req,
                const char *path)
{
    struct gw_server *srv = w->srv;
    if (!srv->auth) {
        gw_reply_error(req, 503, "server_error", "unavailable", NULL,
                       "The admin API is not available.");
        return;
    }
    if (!require_admin(srv, req))
        return;
    enum gw_method m = gw_hreq_method(req);
    struct admin_job *j = calloc(1, sizeof(*j));
    if (!j) {
        gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                       "Out of memory.");
        return;
    }
    if (!strcmp(path, "/admin/keys") && m == GW_METHOD_POST) {
        struct evbuffer *in = gw_hreq_body(req);
        size_t n = evbuffer_get_length(in);
        json_error_t jerr;
        j->body = n ? json_loadb((const char *)evbuffer_pullup(in, -1), n,
                                 JSON_REJECT_DUPLICATES, &jerr)
                    : NULL;
        char err[256];
        if (!j->body) {
            gw_reply_error(req, 400, "invalid_request_error", "invalid_json",
                           NULL, "The body must be a JSON object like "
                                 "{\"name\":\"team-a\"}.");
            admin_job_free(j);
            return;
        }
        if (gw_key_spec_from_json(j->body, &j->spec, j->models,
                                  sizeof(j->models), err,
                                  sizeof(err)) != GX_OK) {
            gw_reply_error(req, 400, "invalid_request_error", "invalid_value",
                           NULL, "%s.", err);
            admin_job_free(j);
            return;
        }
        if (gw_key_generate(j->secret, sizeof(j->secret)) != GX_OK) {
            gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                           "No randomness available for a key.");
            admin_job_free(j);
            return;
        }
        gw_key_hash(j->secret, strlen(j->secret), j->spec.hash, NULL);
        j->op = OP_CREATE;
    } else if (!strcmp(path, "/admin/keys") && m == GW_METHOD_GET) {
        j->op = OP_LIST;
    } else if (!strncmp(path, "/admin/keys/", 12) &&
               m == GW_METHOD_DELETE) {
        char *end;
        const char *ids = path + 12;
        long long id = strtoll(ids, &end, 10);
        if (!*ids || *end || id <= 0) {
            gw_reply_error(req, 404, "invalid_request_error",
                           "key_not_found", "id", "No such key.");
            admin_job_free(j);
            return;
        }
        j->op = OP_REVOKE;
        j->id = id;
    } else {
        gw_reply_error(req, 405, "invalid_request_error",
                       "method_not_allowed", NULL,
                       "Use POST or GET /admin/keys, DELETE "
                       "/admin/keys/{id}.");
        admin_job_free(j);
        return;
    }
    if (gw_aux_submit(w, req, admin_run, admin_reply, j) != 0) {
        gw_hreq_add_header(req, "Retry-After", "1");
        gw_reply_error(req, 503, "server_error", "unavailable", NULL,
                       "The admin API is busy; retry shortly.");
        admin_job_free(j);
    }
}

/* ------------------------------------------------------------------ */
/* GET /v1/models for a key with an allowlist.                          */

static void
add_model(json_t *data, json_t *seen, const char *id, const char *owner)
{
    if (json_object_get(seen, id))
        return;
    json_object_set_new(seen, id, json_true());
    json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", id,
                                          "object", "model", "created", 0,
                                          "owned_by", owner));
}

void
gw_models_handle(struct gw_worker *w, struct gw_hreq *req)
{
    struct gw_server *srv = w->srv;
    if (!srv->auth) {
        gw_handle_models(srv, req);
        return;
    }
    struct gw_authn an;
    const char *authz = gw_hreq_credentials(req);
    gw_auth_identify(srv->auth, authz, gx_now_ms(), &an);
    if (an.who == GW_CALLER_NONE) {
        gw_reply_unauthorized(req, &an);
        return;
    }
    if (an.who != GW_CALLER_KEY || !gw_key_restricted(an.key)) {
        gw_handle_models(srv, req); /* everything */
        return;
    }
    const struct cfg *c = gw_cfg(srv);
    json_t *data = json_array();
    json_t *seen = json_object();
    for (size_t i = 0; i < c->n_routes; i++)
        if (gw_key_allows(an.key, c->routes[i].name))
            add_model(data, seen, c->routes[i].name, "llmux");
    for (size_t p = 0; p < c->n_providers; p++) {
        const struct cfg_provider *pv = &c->providers[p];
        for (size_t m = 0; m < pv->n_models; m++) {
            char t[512];
            snprintf(t, sizeof(t), "%s@%s", pv->models[m].name, pv->name);
            if (gw_key_allows(an.key, pv->models[m].name))
                add_model(data, seen, pv->models[m].name, pv->name);
            else if (gw_key_allows(an.key, t))
                add_model(data, seen, t, pv->name);
        }
    }
    json_t *o = json_pack("{s:s,s:o}", "object", "list", "data", data);
    gw_reply_json(req, 200, o);
    json_decref(o);
    json_decref(seen);
}

/* %XX-decodes s into out (the SDKs encode '@' of MODEL@PROVIDER); -1 when
 * it does not fit or is malformed. */
static int
url_decode(const char *s, char *out, size_t len)
{
    size_t o = 0;
    for (; *s; s++) {
        int c = (unsigned char)*s;
        if (c == '%') {
            int hi, lo;
            if (sscanf(s + 1, "%1x%1x", (unsigned *)&hi, (unsigned *)&lo) != 2)
                return -1;
            c = hi * 16 + lo;
            s += 2;
        }
        if (c == 0 || o + 1 >= len)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 0;
}

void
gw_model_one_handle(struct gw_worker *w, struct gw_hreq *req,
                    const char *raw)
{
    struct gw_server *srv = w->srv;
    struct gw_authn an = {.who = GW_CALLER_ANON};
    if (srv->auth) {
        gw_auth_identify(srv->auth, gw_hreq_header(req, "Authorization"),
                         gx_now_ms(), &an);
        if (an.who == GW_CALLER_NONE) {
            gw_reply_unauthorized(req, &an);
            return;
        }
    }
    char id[512];
    const struct cfg *c = gw_cfg(srv);
    const struct cfg_route *route = NULL;
    struct cfg_target t[1];
    size_t n = 0;
    int ok = url_decode(raw, id, sizeof(id)) == 0;
    if (ok)
        n = cfg_resolve(c, id, &route, t, 1);
    /* A model the key may not use is as unknown to it as a missing one. */
    if (!ok || n == 0 ||
        (an.who == GW_CALLER_KEY && !gw_key_allows(an.key, id))) {
        gw_reply_error(req, 404, "invalid_request_error", "model_not_found",
                       "model",
                       "The model '%s' does not exist or you do not have "
                       "access to it.",
                       ok ? id : raw);
        return;
    }
    const char *owner =
        route ? "llmux" : c->providers[t[0].provider].name;
    json_t *o = json_pack("{s:s,s:s,s:i,s:s}", "id", id, "object", "model",
                          "created", 0, "owned_by", owner);
    gw_reply_json(req, 200, o);
    json_decref(o);
}
