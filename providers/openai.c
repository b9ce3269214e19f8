/*
 * openai.c: the "openai" kind, for any upstream that speaks OpenAI Chat
 * Completions (OpenAI itself, relays, DeepSeek, vLLM, ...).
 *
 * Request: POST {base_url}/chat/completions with the client's JSON, its
 * "model" replaced by the upstream name: the client's bytes as sent with
 * the model's value spliced (upstream_splice) when pv_chat_parse took its
 * fast path, else the tree re-serialised (upstream_body);
 * {base_url}/embeddings and {base_url}/completions for those inbound APIs,
 * the same way (an embeddings answer must hold "data" where a chat answer
 * holds "choices").  For a stream whose client did
 * not ask for stream_options.include_usage we ask for it anyway (llmux
 * must bill from the upstream's own counts) and swallow the usage-only
 * chunk that results, so the client sees exactly what it asked for.
 *
 * Response:
 *   non-stream 2xx  the body must be a JSON object with "choices", else
 *                   PV_ERR_MALFORMED; usage is read from it.
 *   stream 2xx      text/event-stream parsed as it arrives; each event is
 *                   handed to on_event at once (nothing buffered beyond
 *                   the current event); every data event but [DONE] must
 *                   be a JSON object; a stream that ends before [DONE] is
 *                   PV_ERR_TRANSPORT, and so is an in-band error object
 *                   ({"error":...} without "choices"), which is not
 *                   passed on.
 *   non-2xx         PV_ERR_STATUS with the (capped) body, stream or not.
 *
 * Bounds: a 2xx non-stream body over max_body_bytes is PV_ERR_TOO_BIG; an
 * error body is cut at that size (the status still decides); a stream is
 * capped per event (one SSE line or event's data may not
 * exceed max_body_bytes) but not in total, since long generations are
 * legitimate and memory stays bounded by one event.
 *
 * Secrets: the api_key goes only into the Authorization header.  Every
 * body (error or not), stream event and detail an upstream sends back is
 * scrubbed of the provider's secrets (scrub.c: api_key, header values,
 * URL userinfo, in their encoded forms) before it reaches the caller.
 */
#include "providers.h"
#include "providers_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Used when a request carries no cap. */
#define OA_DEFAULT_MAX_BODY (8 * 1024 * 1024)

struct oa_call {
    int stream;
    int embeddings; /* the answer holds "data", not "choices" */
    int client_include_usage;
    int ct_checked;
    int done_seen;
    int n_events;
    struct pv_sse sse;
    struct gx_buf body; /* non-stream or error body */
};

static void
oa_event(void *ud, const char *data, size_t len)
{
    struct pv_call *c = ud;
    struct oa_call *oa = c->impl;
    if (c->failed || c->cancelled || c->finished || oa->done_seen)
        return;
    oa->n_events++;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        oa->done_seen = 1;
        pv_call_emit_event(c, data, len);
        return;
    }
    /* The common chunk without building a tree (jansson's parse was a
     * third of a stream's instructions): a valid object, no in-band
     * error.  Anything else goes the jansson way, which words it. */
    struct pv_js_chat sc;
    int usage_only = 0;
    if (pv_json_scan_chat(data, len, &sc) == PV_JS_OBJECT &&
        !(sc.has_error && !sc.has_choices) && !oa->sse.event[0]) {
        if (sc.usage.have) {
            c->res.usage = sc.usage;
            usage_only = !sc.has_choices || sc.choices_empty;
        }
    } else {
        json_error_t je;
        json_t *j = json_loadb(data, len, 0, &je);
        if (!json_is_object(j)) {
            pv_call_failf(c, PV_ERR_MALFORMED,
                          "malformed stream: event %d is not a JSON object "
                          "(%s)",
                          oa->n_events, j ? "wrong type" : je.text);
            json_decref(j);
            return;
        }
        json_t *err = json_object_get(j, "error");
        if ((err && !json_object_get(j, "choices")) ||
            strcmp(oa->sse.event, "error") == 0) {
            /* The upstream failed mid-stream and says so in-band (OpenAI
             * does this on server errors).  Not passed on as a chunk: the
             * caller learns it from on_done and decides (fail over if the
             * client has seen nothing yet, else end the client's
             * stream). */
            json_t *m = json_is_object(err) ? json_object_get(err, "message")
                                            : err;
            pv_call_failf(c, PV_ERR_TRANSPORT,
                          "upstream error in stream: %.160s",
                          json_is_string(m) ? json_string_value(m)
                                            : "(no message)");
            json_decref(j);
            return;
        }
        struct pv_usage u;
        if (pv_usage_parse(j, &u)) {
            c->res.usage = u;
            json_t *ch = json_object_get(j, "choices");
            usage_only =
                !ch || (json_is_array(ch) && json_array_size(ch) == 0);
        }
        json_decref(j);
    }
    if (usage_only && !oa->client_include_usage)
        return;
    pv_call_emit_event(c, data, len); /* it masks echoed secrets */
}

static int
oa_on_body(struct pv_call *c, const char *p, size_t n)
{
    struct oa_call *oa = c->impl;
    int st2xx = c->res.http_status >= 200 && c->res.http_status < 300;
    if (!st2xx) {
        /* An error page over the cap is cut, not an error of its own: the
         * status is what the router decides on (a proxy's 503 page must
         * stay a retryable 503). */
        size_t room = oa->body.max > oa->body.len
                          ? oa->body.max - oa->body.len : 0;
        if (n > room)
            n = room;
        if (n && gx_buf_append(&oa->body, p, n) != GX_OK) {
            pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
            return -1;
        }
        return 0;
    }
    if (!oa->stream) {
        enum gx_status st = gx_buf_append(&oa->body, p, n);
        if (st == GX_ETOOBIG) {
            pv_call_failf(c, PV_ERR_TOO_BIG,
                          "upstream body over %zu bytes", oa->body.max);
            return -1;
        }
        if (st != GX_OK) {
            pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
            return -1;
        }
        return 0;
    }
    if (pv_stream_ct_check(c, &oa->ct_checked) != 0)
        return -1;
    if (oa->done_seen)
        return 0;
    enum gx_status st = pv_sse_feed(&oa->sse, p, n, oa_event, c);
    if (st == GX_ETOOBIG)
        pv_call_failf(c, PV_ERR_TOO_BIG, "upstream stream event over %zu bytes",
                      oa->sse.line.max);
    else if (st != GX_OK)
        pv_call_failf(c, PV_ERR_INTERNAL, "out of memory");
    return c->failed ? -1 : 0;
}

/* Appends ": <error.message>" from an OpenAI error body, if any. */
static void
detail_add_message(struct pv_call *c, const struct oa_call *oa)
{
    if (!oa->body.len)
        return;
    json_t *j = json_loadb(oa->body.data, oa->body.len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    json_t *m = json_is_object(e) ? json_object_get(e, "message")
                                  : json_is_string(e) ? e : NULL;
    if (json_is_string(m)) {
        size_t used = strlen(c->res.detail);
        snprintf(c->res.detail + used, sizeof(c->res.detail) - used,
                 ": %.160s", json_string_value(m));
    }
    json_decref(j);
}

int
pv_error_is_context(const char *body, size_t len)
{
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    const json_t *e = json_object_get(j, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *msg = json_is_string(e)
                          ? json_string_value(e)
                          : json_string_value(json_object_get(e, "message"));
    int hit = (code && !strcmp(code, "context_length_exceeded")) ||
              (type && !strcmp(type, "exceed_context_size_error")) ||
              (msg && (strstr(msg, "maximum context length") ||
                       strstr(msg, "exceeds the available context size") ||
                       !strncmp(msg, "prompt is too long", 18) ||
                       strstr(msg, "exceeds the maximum number of tokens")));
    json_decref(j);
    return hit;
}

static void
oa_on_finish(struct pv_call *c)
{
    struct oa_call *oa = c->impl;
    int status = c->res.http_status;
    if (status < 200 || status >= 300) {
        c->res.outcome = PV_ERR_STATUS;
        snprintf(c->res.detail, sizeof(c->res.detail), "upstream status %d",
                 status);
        pv_scrub(c->scrub, oa->body.data, oa->body.len);
        detail_add_message(c, oa);
        pv_scrub(c->scrub, c->res.detail, strlen(c->res.detail));
        c->res.body = oa->body.data ? oa->body.data : "";
        c->res.body_len = oa->body.len;
        c->res.other_may_serve =
            status == 400 && pv_error_is_context(oa->body.data, oa->body.len);
        return;
    }
    if (oa->stream) {
        if (!oa->done_seen) {
            c->res.outcome = PV_ERR_TRANSPORT;
            snprintf(c->res.detail, sizeof(c->res.detail),
                     "stream ended before [DONE] (after %d events)",
                     oa->n_events);
            return;
        }
        c->res.outcome = PV_OK;
        return;
    }
    pv_scrub(c->scrub, oa->body.data, oa->body.len);
    c->res.body = oa->body.data ? oa->body.data : "";
    c->res.body_len = oa->body.len;
    /* The common case without building a tree: a valid object with
     * "choices".  Anything else (or anything the scanner is unsure of)
     * goes the jansson way below, which also words the detail. */
    struct pv_js_chat sc;
    if (!oa->embeddings &&
        pv_json_scan_chat(c->res.body, c->res.body_len, &sc) == PV_JS_OBJECT &&
        sc.has_choices) {
        if (sc.usage.have)
            c->res.usage = sc.usage;
        c->res.outcome = PV_OK;
        return;
    }
    json_error_t je;
    json_t *j = json_loadb(c->res.body, c->res.body_len, 0, &je);
    const char *need = oa->embeddings ? "data" : "choices";
    if (!json_is_object(j) || !json_is_array(json_object_get(j, need))) {
        c->res.outcome = PV_ERR_MALFORMED;
        snprintf(c->res.detail, sizeof(c->res.detail),
                 "malformed upstream body: %s",
                 !j ? je.text
                    : !json_is_object(j) ? "not a JSON object"
                    : oa->embeddings     ? "no \"data\" array"
                                         : "no \"choices\" array");
        json_decref(j);
        return;
    }
    pv_usage_parse(j, &c->res.usage);
    json_decref(j);
    c->res.outcome = PV_OK;
}

static void
oa_free_impl(struct pv_call *c)
{
    struct oa_call *oa = c->impl;
    if (!oa)
        return;
    pv_sse_cleanup(&oa->sse);
    gx_buf_cleanup(&oa->body);
}

static const struct pv_http_hooks oa_hooks = {
    .on_body = oa_on_body,
    .on_finish = oa_on_finish,
    .free_impl = oa_free_impl,
};

/* Sets key on obj to v (reference stolen), first taking a reference to
 * the old value (NULL when absent) into *old.  Returns 0 on success. */
static int
swap_in(json_t *obj, const char *key, json_t *v, json_t **old)
{
    *old = json_incref(json_object_get(obj, key));
    if (!v || json_object_set_new(obj, key, v) != 0) {
        json_decref(*old);
        *old = NULL;
        return -1;
    }
    return 0;
}

/* Puts back what swap_in took out: the old value at the same place (an
 * existing key keeps its position in jansson's ordered objects), or no
 * key at all when there was none. */
static void
swap_out(json_t *obj, const char *key, json_t *old)
{
    if (old)
        json_object_set_new(obj, key, old);
    else
        json_object_del(obj, key);
}

/* The upstream request body: the client's JSON with "model" replaced by
 * the upstream name and, for a stream whose client did not ask for it,
 * stream_options.include_usage = true.  Built by setting those members on
 * the client's own object, dumping it and putting the old values back
 * exactly (a missing key is removed again), which gives the same bytes as
 * dumping a modified copy without copying (the copy and its free showed
 * in profiles).  The body is only ever used on this loop's thread, so
 * nothing sees the object in between.  Returns a malloc'd string or NULL
 * on out of memory. */
/* The upstream body from the client's own bytes (pv_chat's fast path):
 * the model's value replaced by the upstream name and, for a stream whose
 * client did not ask for usage and sent no stream_options,
 * "stream_options":{"include_usage":true} added as the last member.  No
 * tree and no re-serialising: everything else is the client's bytes as
 * sent.  NULL when the tree way must be taken (a stream_options object
 * to edit) or out of memory (*nomem). */
static char *
upstream_splice(const struct pv_request *req, const char *up, int *nomem)
{
    static const char so[] = ",\"stream_options\":{\"include_usage\":true}";
    const struct pv_chat *ch = req->chat;
    int add_so = req->stream && !req->client_include_usage;
    *nomem = 0;
    if (add_so && ch->has_stream_options)
        return NULL;
    size_t rest = ch->model_at + ch->model_len, end = ch->text_len;
    if (add_so) {
        /* Before the top object's closing brace (what trails it kept). */
        while (end > rest && ch->text[end - 1] != '}')
            end--;
        if (end <= rest)
            return NULL; /* cannot be: the scan saw the brace */
        end--;
    }
    char *out = malloc(ch->text_len + 2 + 6 * strlen(up) + sizeof(so));
    if (!out) {
        *nomem = 1;
        return NULL;
    }
    char *o = out;
    memcpy(o, ch->text, ch->model_at);
    o = pv_json_put_string(o + ch->model_at, up);
    memcpy(o, ch->text + rest, end - rest);
    o += end - rest;
    if (add_so) {
        memcpy(o, so, sizeof(so) - 1);
        o += sizeof(so) - 1;
        memcpy(o, ch->text + end, ch->text_len - end);
        o += ch->text_len - end;
    }
    *o = '\0';
    return out;
}

static char *
upstream_body(const struct pv_request *req, const char *up)
{
    json_t *body = (json_t *)req->body;
    json_t *old_model = NULL, *old_so = NULL;
    char *out = NULL;
    if (swap_in(body, "model", json_string(up), &old_model) != 0)
        return NULL;
    int so_set = 0;
    if (req->stream && !req->client_include_usage) {
        json_t *so = json_object_get(body, "stream_options");
        json_t *nso = json_is_object(so) ? json_copy(so) : json_object();
        if (nso && json_object_set_new(nso, "include_usage", json_true())) {
            json_decref(nso);
            nso = NULL;
        }
        if (swap_in(body, "stream_options", nso, &old_so) != 0)
            goto restore;
        so_set = 1;
    }
    /* The same bytes as json_dumps(body, JSON_COMPACT), cheaper; that
     * when the fast writer declines. */
    out = pv_json_dump_compact(body, NULL);
    if (!out)
        out = json_dumps(body, JSON_COMPACT);
restore:
    if (so_set)
        swap_out(body, "stream_options", old_so);
    swap_out(body, "model", old_model);
    return out;
}

static enum gx_status
oa_start(struct pv_loop *loop, const struct pv_request *req,
         const struct pv_callbacks *cb, struct pv_call **out, char *err,
         size_t errlen)
{
    const struct cfg_provider *prov = req->provider;
    const struct cfg_model *model = req->model;
    const char *pname = prov->name ? prov->name : "?";
    struct curl_slist *hdr = NULL;
    char *body = NULL, *url = NULL;
    enum gx_status st = GX_EINVAL;

    if (!prov->base_url || !*prov->base_url) {
        gx_errf(err, errlen, "provider %s: no base_url", pname);
        return GX_EINVAL;
    }
    const char *up = model->upstream ? model->upstream : model->name;
    if (!up) {
        gx_errf(err, errlen, "provider %s: model without a name", pname);
        return GX_EINVAL;
    }
    if (!req->body) {
        int nomem = 0;
        body = upstream_splice(req, up, &nomem);
        if (nomem)
            goto nomem;
    }
    if (!body) {
        struct pv_request tree_req = *req;
        if (!tree_req.body)
            tree_req.body = pv_chat_body(req->chat);
        if (!json_is_object(tree_req.body)) {
            gx_errf(err, errlen, "request body is not a JSON object");
            return GX_EINVAL;
        }
        body = upstream_body(&tree_req, up);
        if (!body)
            goto nomem;
    }

    size_t blen = strlen(prov->base_url);
    while (blen > 0 && prov->base_url[blen - 1] == '/')
        blen--;
    enum pv_api api = req->chat ? req->chat->api : PV_API_CHAT;
    const char *path = api == PV_API_EMBEDDINGS    ? "/embeddings"
                       : api == PV_API_COMPLETIONS ? "/completions"
                                                   : "/chat/completions";
    url = malloc(blen + strlen(path) + 1);
    if (!url)
        goto nomem;
    memcpy(url, prov->base_url, blen);
    memcpy(url + blen, path, strlen(path) + 1);

    st = pv_http_headers(req, "Authorization", "Bearer ", NULL, NULL, &hdr,
                         err, errlen);
    if (st != GX_OK)
        goto out;

    struct pv_call *c =
        pv_call_alloc(loop, &pv_openai_ops, req, cb, sizeof(struct oa_call));
    if (!c)
        goto nomem;
    struct oa_call *oa = c->impl;
    size_t cap = req->max_body_bytes > 0 ? (size_t)req->max_body_bytes
                                         : (size_t)OA_DEFAULT_MAX_BODY;
    oa->stream = req->stream;
    oa->embeddings = api == PV_API_EMBEDDINGS;
    oa->client_include_usage = req->client_include_usage;
    pv_sse_init(&oa->sse, cap);
    gx_buf_init(&oa->body, cap);
    size_t body_len = strlen(body);
    /* pv_http_start owns hdr and body from here on, even on failure. */
    st = pv_http_start(c, &oa_hooks, prov, url, hdr, body, body_len, err,
                       errlen);
    hdr = NULL;
    body = NULL;
    if (st == GX_OK)
        *out = c;
    goto out;
nomem:
    gx_errf(err, errlen, "out of memory");
    st = GX_ENOMEM;
out:
    pv_http_headers_free(hdr);
    free(body);
    free(url);
    return st;
}

const struct pv_ops pv_openai_ops = {
    .kind = "openai",
    .start = oa_start,
    .cancel = pv_http_cancel,
    .pause = pv_http_pause,
    .resume = pv_http_resume,
};
