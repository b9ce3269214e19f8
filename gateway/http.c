/*
 * http: reply helpers shared by the gateway's handlers: OpenAI-shaped
 * errors, JSON replies, request ids, /v1/models and /metrics.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "gw_int.h"

const char *
gw_status_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Entity";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : "Error";
    }
}

void
gw_reply_json(struct gw_hreq *req, int status, json_t *obj)
{
    static const char oom[] =
        "{\"error\":{\"message\":\"Out of memory.\",\"type\":"
        "\"server_error\",\"param\":null,\"code\":\"internal_error\"}}";
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    gw_hreq_add_header(req, "Content-Type", "application/json");
    if (!text) {
        gw_hreq_send_body(req, 500, oom, sizeof(oom) - 1);
        return;
    }
    gw_hreq_send_body(req, status, text, strlen(text));
    free(text);
}

void
gw_reply_error(struct gw_hreq *req, int status, const char *type,
               const char *code, const char *param, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *o = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg,
                          "type", type, "param",
                          param ? json_string(param) : json_null(), "code",
                          code ? json_string(code) : json_null());
    if (!o) {
        /* msg may hold invalid UTF-8 copied from input: fall back. */
        o = json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message",
                      "request failed", "type", type, "param", "code");
    }
    const struct gw_api *api = gw_api_of_path(gw_hreq_path(req));
    if (api && api->error) {
        /* The API's clients read its own shape (Messages: Anthropic's). */
        char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
        size_t n = 0;
        char *e = t ? api->error(status, t, strlen(t), &n) : NULL;
        free(t);
        json_decref(o);
        gw_hreq_add_header(req, "Content-Type", "application/json");
        if (e)
            gw_hreq_send_body(req, status, e, n);
        else
            gw_hreq_send_body(req, 500, NULL, 0);
        free(e);
        return;
    }
    gw_reply_json(req, status, o);
    json_decref(o);
}

static int
request_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > GW_REQUEST_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

void
gw_request_id(struct gw_worker *w, struct gw_hreq *req, char *out,
              size_t outlen)
{
    (void)w;
    if (!outlen)
        return;
    /* A bounded copy, cut as snprintf would cut it (without printf: once
     * a request). */
    const char *id = gw_hreq_id(req);
    size_t n = strnlen(id, outlen - 1);
    memcpy(out, id, n);
    out[n] = '\0';
}

void
gw_request_id_make(struct gw_worker *w, const char *client, char *out,
                   size_t outlen)
{
    if (client && request_id_ok(client)) {
        snprintf(out, outlen, "%s", client);
        return;
    }
    /* xorshift64*: unique enough within a worker, seeded from RAND_bytes;
     * the worker index and a sequence number make ids unique across
     * workers of one process. */
    uint64_t x = w->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    x *= 0x2545F4914F6CDD1DULL;
    /* "req_" + 16 + 2 + 6 hex digits, without printf (once a request). */
    static const char hex[] = "0123456789abcdef";
    char id[4 + 16 + 2 + 6 + 1] = "req_";
    uint64_t seq = ++w->seq & 0xffffff;
    unsigned idx = (unsigned)w->index & 0xff;
    for (int i = 0; i < 16; i++)
        id[4 + i] = hex[(x >> (60 - 4 * i)) & 15];
    id[20] = hex[idx >> 4];
    id[21] = hex[idx & 15];
    for (int i = 0; i < 6; i++)
        id[22 + i] = hex[(seq >> (20 - 4 * i)) & 15];
    if (!outlen)
        return;
    size_t n = outlen - 1 < 28 ? outlen - 1 : 28; /* cut as snprintf did */
    memcpy(out, id, n);
    out[n] = '\0';
}

void
gw_handle_models(struct gw_server *srv, struct gw_hreq *req)
{
    const struct cfg *c = gw_cfg(srv);
    json_t *data = json_array();
    json_t *seen = json_object();
    for (size_t i = 0; i < c->n_routes; i++) {
        if (json_object_get(seen, c->routes[i].name))
            continue;
        json_object_set_new(seen, c->routes[i].name, json_true());
        json_array_append_new(
            data, json_pack("{s:s,s:s,s:i,s:s}", "id", c->routes[i].name,
                            "object", "model", "created", 0, "owned_by",
                            "llmux"));
    }
    for (size_t p = 0; p < c->n_providers; p++) {
        const struct cfg_provider *pv = &c->providers[p];
        for (size_t m = 0; m < pv->n_models; m++) {
            const char *name = pv->models[m].name;
            if (json_object_get(seen, name))
                continue;
            json_object_set_new(seen, name, json_true());
            json_array_append_new(
                data, json_pack("{s:s,s:s,s:i,s:s}", "id", name, "object",
                                "model", "created", 0, "owned_by", pv->name));
        }
    }
    json_t *o = json_pack("{s:s,s:o}", "object", "list", "data", data);
    gw_reply_json(req, 200, o);
    json_decref(o);
    json_decref(seen);
}

void
gw_handle_metrics(struct gw_server *srv, struct gw_hreq *req)
{
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        gw_reply_error(req, 500, "server_error", "internal_error", NULL,
                       "Out of memory.");
        return;
    }
    struct gw_stats *s = &srv->stats;
    evbuffer_add_printf(
        b,
        "# HELP llmux_http_requests_total HTTP requests received.\n"
        "# TYPE llmux_http_requests_total counter\n"
        "llmux_http_requests_total %lld\n"
        "# HELP llmux_chat_requests_total Chat completion requests.\n"
        "# TYPE llmux_chat_requests_total counter\n"
        "llmux_chat_requests_total %lld\n"
        "# HELP llmux_chat_errors_total Chat requests answered with an "
        "error status.\n"
        "# TYPE llmux_chat_errors_total counter\n"
        "llmux_chat_errors_total %lld\n"
        "# HELP llmux_upstream_attempts_started_total Upstream attempts "
        "started.\n"
        "# TYPE llmux_upstream_attempts_started_total counter\n"
        "llmux_upstream_attempts_started_total %lld\n"
        "# HELP llmux_chat_inflight Chat requests in flight.\n"
        "# TYPE llmux_chat_inflight gauge\n"
        "llmux_chat_inflight %lld\n"
        "# HELP llmux_uptime_seconds Seconds since start.\n"
        "# TYPE llmux_uptime_seconds gauge\n"
        "llmux_uptime_seconds %lld\n"
        "# HELP llmux_connections_open Inbound connections open.\n"
        "# TYPE llmux_connections_open gauge\n"
        "llmux_connections_open %lld\n"
        "# HELP llmux_accept_paused_total Times accepting paused (at "
        "limits.max_connections or out of file descriptors).\n"
        "# TYPE llmux_accept_paused_total counter\n"
        "llmux_accept_paused_total %lld\n",
        (long long)atomic_load(&s->http_requests),
        (long long)atomic_load(&s->requests),
        (long long)atomic_load(&s->errors),
        (long long)atomic_load(&s->upstream_attempts),
        (long long)atomic_load(&s->inflight),
        (long long)((gx_now_ms() - srv->started_ms) / 1000),
        (long long)atomic_load(&s->conns_open),
        (long long)atomic_load(&s->conns_refused));
    gw_obs_write(srv, b);
    gw_hreq_add_header(req, "Content-Type", "text/plain; version=0.0.4");
    gw_hreq_send_reply(req, 200, b);
    evbuffer_free(b);
}
