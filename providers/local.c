/*
 * local: the `local` provider kind, llmux's in-process llama engine behind
 * the same interface as the HTTP kinds.
 *
 * Threads.  pv_local_init opens each local provider's model once and
 * starts `parallel` engine threads per model, each owning one le_session.
 * A request becomes a job on the model's queue; an engine thread renders
 * nothing and blocks no loop: it tokenizes, generates, and after each token
 * appends the new text to the job and event_active()s the job's event on
 * the owning worker's event_base.  The worker drains the text into SSE
 * chunks (or one body) on its own thread.
 *
 * Sharing.  A job is shared by its worker and one engine thread: refs
 * counts them, mu guards text/done/cancelled and the event_active call, so
 * once the worker has set cancelled under mu the engine thread never
 * touches the event again.  The generation stops at the next token.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "../local_engine/local_engine.h"
#include "providers_int.h"

#define LP_DEFAULT_MAX_TOKENS 512

struct lp_engine;

struct lp_job {
    pthread_mutex_t mu;
    int refs;
    int cancelled;
    _Atomic int stop; /* set with cancelled: the engine also checks it
                         between prompt batches (a long prefill stops) */
    struct event *ev; /* on the worker's base */
    struct lp_job *next;
    /* Input, owned. */
    char *prompt_text;
    struct le_sampling sp;
    char **stops;
    size_t n_stops;
    /* Output, under mu. */
    struct gx_buf text;
    int done;
    enum le_status st;
    struct le_gen_result res;
    char err[256];
};

struct lp_engine {
    const struct cfg_provider *prov;
    struct le_model *model;
    pthread_t *threads;
    struct le_session **sessions;
    int n_sessions;
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct lp_job *head, *tail;
    size_t queued; /* jobs waiting (not yet picked up) */
    size_t max_queued;
    int stop;
};

static struct lp_engine *engines;
static size_t n_engines;
static atomic_int abort_all;

/* The worker side of a call. */
struct lp_call {
    struct lp_job *job;
    int stream;
    int client_include_usage;
    int sent_role;
    char id[96];
    char model[128];
    int64_t created;
    struct gx_buf body; /* non-stream: accumulated content */
    struct event *timer; /* first-byte, then total timeout */
    int64_t deadline_us; /* total timeout, monotonic */
    int got_text;
};

static void
job_unref(struct lp_job *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0)
        return;
    pthread_mutex_destroy(&j->mu);
    free(j->prompt_text);
    for (size_t i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    free(j->stops);
    gx_buf_cleanup(&j->text);
    free(j);
}

/* ---- engine threads ---------------------------------------------------- */

static int
on_token(void *ud, int32_t id, const char *text, size_t len)
{
    (void)id;
    struct lp_job *j = ud;
    if (atomic_load(&abort_all))
        return 1;
    pthread_mutex_lock(&j->mu);
    int stop = j->cancelled;
    if (!stop && len) {
        if (gx_buf_append(&j->text, text, len) == GX_OK)
            event_active(j->ev, EV_READ, 0);
        else
            stop = 1;
    }
    pthread_mutex_unlock(&j->mu);
    return stop;
}

static void
run_job(struct lp_engine *e, struct le_session *s, struct lp_job *j)
{
    enum le_status st = LE_OK;
    char err[256] = "";
    struct le_gen_result res;
    memset(&res, 0, sizeof(res));
    int32_t *ids = NULL;
    size_t len = strlen(j->prompt_text);
    int64_t n = le_model_tokenize(e->model, j->prompt_text, len, 1, 1, NULL,
                                  0);
    if (n < 0) {
        st = LE_EINVAL;
        snprintf(err, sizeof(err), "the prompt could not be tokenized");
    } else {
        ids = malloc(((size_t)n + 1) * sizeof(*ids));
        if (!ids) {
            st = LE_ENOMEM;
            snprintf(err, sizeof(err), "out of memory tokenizing the prompt");
        } else {
            le_model_tokenize(e->model, j->prompt_text, len, 1, 1, ids,
                              (size_t)n);
            /* Without max_tokens: what the context leaves, capped. */
            if (j->sp.max_tokens <= 0) {
                int room = le_model_n_ctx(e->model) - (int)n;
                j->sp.max_tokens = room < LP_DEFAULT_MAX_TOKENS
                                       ? (room > 0 ? room : 1)
                                       : LP_DEFAULT_MAX_TOKENS;
            }
            j->sp.stop = (const char *const *)j->stops;
            j->sp.n_stop = j->n_stops;
            st = le_session_generate(s, ids, (size_t)n, &j->sp, on_token, j,
                                     &res, err, sizeof(err));
        }
    }
    free(ids);
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    j->st = st;
    j->res = res;
    snprintf(j->err, sizeof(j->err), "%s", err);
    if (!j->cancelled)
        event_active(j->ev, EV_READ, 0);
    pthread_mutex_unlock(&j->mu);
}

static void *
engine_main(void *arg)
{
    struct lp_engine *e = ((void **)arg)[0];
    struct le_session *s = ((void **)arg)[1];
    free(arg);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->head && !e->stop)
            pthread_cond_wait(&e->cv, &e->mu);
        if (!e->head && e->stop) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        struct lp_job *j = e->head;
        e->head = j->next;
        if (!e->head)
            e->tail = NULL;
        e->queued--;
        pthread_mutex_unlock(&e->mu);
        pthread_mutex_lock(&j->mu);
        int skip = j->cancelled;
        pthread_mutex_unlock(&j->mu);
        if (!skip) {
            le_session_set_cancel(s, &j->stop);
            run_job(e, s, j);
            le_session_set_cancel(s, NULL);
        }
        job_unref(j);
    }
    return NULL;
}

enum gx_status
pv_local_init(const struct cfg *c, char *err, size_t errlen)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_providers; i++)
        n += c->providers[i].kind == CFG_KIND_LOCAL;
    if (n == 0)
        return GX_OK;
    engines = calloc(n, sizeof(*engines));
    if (!engines) {
        gx_errf(err, errlen, "out of memory");
        return GX_ENOMEM;
    }
    atomic_store(&abort_all, 0);
    for (size_t i = 0; i < c->n_providers; i++) {
        const struct cfg_provider *p = &c->providers[i];
        if (p->kind != CFG_KIND_LOCAL)
            continue;
        struct lp_engine *e = &engines[n_engines];
        e->prov = p;
        pthread_mutex_init(&e->mu, NULL);
        pthread_cond_init(&e->cv, NULL);
        n_engines++;
        struct le_model_params mp;
        le_model_params_default(&mp);
        mp.n_threads = p->threads > 0 ? p->threads : 1;
        mp.n_ctx = p->context;
        char lerr[512] = "";
        if (le_model_open(p->model_path, &mp, &e->model, lerr,
                          sizeof(lerr)) != LE_OK) {
            gx_errf(err, errlen, "provider %s: %s", p->name, lerr);
            return GX_EINVAL;
        }
        int par = p->parallel > 0 ? p->parallel : 1;
        e->max_queued = (size_t)par * 64;
        e->threads = calloc((size_t)par, sizeof(*e->threads));
        e->sessions = calloc((size_t)par, sizeof(*e->sessions));
        if (!e->threads || !e->sessions) {
            gx_errf(err, errlen, "out of memory");
            return GX_ENOMEM;
        }
        for (int t = 0; t < par; t++) {
            if (le_session_new(e->model, &e->sessions[t], lerr,
                               sizeof(lerr)) != LE_OK) {
                gx_errf(err, errlen, "provider %s: %s", p->name, lerr);
                return GX_EINVAL;
            }
            e->n_sessions++;
            void **arg = malloc(2 * sizeof(void *));
            if (!arg) {
                gx_errf(err, errlen, "out of memory");
                return GX_ENOMEM;
            }
            arg[0] = e;
            arg[1] = e->sessions[t];
            if (pthread_create(&e->threads[t], NULL, engine_main, arg) != 0) {
                free(arg);
                gx_errf(err, errlen, "provider %s: cannot start a thread",
                        p->name);
                return GX_EINVAL;
            }
            e->n_threads++;
        }
        GX_LOG(GX_LOG_INFO, NULL, "provider %s: %s, %d parallel", p->name,
               le_model_desc(e->model), par);
    }
    return GX_OK;
}

void
pv_local_shutdown(void)
{
    atomic_store(&abort_all, 1);
    for (size_t i = 0; i < n_engines; i++) {
        struct lp_engine *e = &engines[i];
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        for (int t = 0; t < e->n_threads; t++)
            pthread_join(e->threads[t], NULL);
        /* Jobs never picked up. */
        while (e->head) {
            struct lp_job *j = e->head;
            e->head = j->next;
            job_unref(j);
        }
        for (int t = 0; t < e->n_sessions; t++)
            le_session_free(e->sessions[t]);
        free(e->sessions);
        free(e->threads);
        le_model_free(e->model);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
    }
    free(engines);
    engines = NULL;
    n_engines = 0;
}

/* ---- worker side ----------------------------------------------------- */

static const char *
finish_reason(enum le_finish f)
{
    return f == LE_FINISH_LENGTH ? "length" : "stop";
}

static void
emit_chunk(struct pv_call *call, struct lp_call *lc, json_t *delta,
           const char *finish, json_t *usage)
{
    json_t *choices = json_array();
    if (delta || finish) {
        json_t *ch = json_pack("{s:i,s:o,s:o,s:n}", "index", 0, "delta",
                               delta ? delta : json_object(), "finish_reason",
                               finish ? json_string(finish) : json_null(),
                               "logprobs");
        json_array_append_new(choices, ch);
    } else if (delta) {
        json_decref(delta);
    }
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", lc->id, "object",
                          "chat.completion.chunk", "created",
                          (json_int_t)lc->created, "model", lc->model,
                          "choices", choices);
    if (usage)
        json_object_set_new(o, "usage", usage);
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (t)
        pv_call_emit_event(call, t, strlen(t));
    free(t);
    json_decref(o);
}

static json_t *
usage_json(const struct le_gen_result *r)
{
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens",
                     r->prompt_tokens, "completion_tokens",
                     r->completion_tokens, "total_tokens",
                     r->prompt_tokens + r->completion_tokens,
                     "prompt_tokens_details", "cached_tokens",
                     r->cached_tokens);
}

/*
 * The engine passes token bytes through as they are, and a sampled byte
 * token can make invalid UTF-8, which jansson refuses: the chunk (stream)
 * or the whole answer (non-stream) would be lost.  Replaces every byte
 * that does not start a valid sequence with U+FFFD.  (The engine holds
 * back a sequence that is only incomplete, so a chunk never ends inside a
 * valid one.)
 */
static void
utf8_repair(struct gx_buf *t)
{
    if (!t->len || gx_utf8_valid(t->data, t->len))
        return;
    struct gx_buf o;
    gx_buf_init(&o, t->max);
    const unsigned char *p = (const unsigned char *)t->data;
    size_t i = 0;
    while (i < t->len) {
        unsigned c = p[i];
        size_t l = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (i + l <= t->len && gx_utf8_valid(t->data + i, l)) {
            gx_buf_append(&o, t->data + i, l);
            i += l;
        } else {
            gx_buf_append(&o, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    gx_buf_cleanup(t);
    *t = o;
}

static void
on_job_event(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pv_call *call = arg;
    struct lp_call *lc = call->impl;
    struct lp_job *j = lc->job;
    struct gx_buf text;
    pthread_mutex_lock(&j->mu);
    text = j->text; /* take what is there */
    gx_buf_init(&j->text, 64 * 1024 * 1024);
    int done = j->done;
    /* An engine error (context full...) before any text must reach the
     * client as its own status, so no role chunk is sent for it. */
    int failed = done && j->st != LE_OK;
    pthread_mutex_unlock(&j->mu);

    utf8_repair(&text);
    if (text.len && call->res.ttfb_us < 0)
        call->res.ttfb_us = gx_mono_us() - call->t_start_us;
    if (text.len && !lc->got_text) {
        /* First bytes: the first-byte timer becomes the total one. */
        lc->got_text = 1;
        if (lc->timer) {
            int64_t left = lc->deadline_us - gx_mono_us();
            struct timeval tv = {0, 0};
            if (left > 0) {
                tv.tv_sec = left / 1000000;
                tv.tv_usec = left % 1000000;
            }
            evtimer_add(lc->timer, &tv);
        }
    }
    if (lc->stream) {
        if (!lc->sent_role && (text.len || (done && !failed))) {
            lc->sent_role = 1;
            emit_chunk(call, lc,
                       json_pack("{s:s,s:s}", "role", "assistant", "content",
                                 ""),
                       NULL, NULL);
        }
        if (text.len && !call->cancelled)
            emit_chunk(call, lc,
                       json_pack("{s:s%}", "content", text.data, text.len),
                       NULL, NULL);
    } else if (text.len) {
        gx_buf_append(&lc->body, text.data, text.len);
    }
    gx_buf_cleanup(&text);
    if (!done || call->cancelled || call->finished)
        return;

    struct le_gen_result *r = &j->res;
    /* LE_ECANCELED here was not our caller's cancel (that frees the call
     * first): the engine is shutting down or the answer passed its cap.
     * Either way the answer is incomplete: an error, never a 200. */
    if (j->st != LE_OK) {
        if (j->st == LE_ECANCELED && !j->err[0])
            snprintf(j->err, sizeof(j->err),
                     "the local generation was stopped before it finished "
                     "(engine shutting down or answer too large)");
        int ctx = j->st == LE_ECONTEXT;
        call->res.outcome = ctx ? PV_ERR_STATUS : PV_ERR_INTERNAL;
        call->res.http_status = ctx ? 400 : 500;
        snprintf(call->res.detail, sizeof(call->res.detail), "%s", j->err);
        json_t *e = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message",
                              j->err[0] ? j->err : le_status_str(j->st),
                              "type", "invalid_request_error", "param",
                              "code",
                              ctx ? "context_length_exceeded"
                                  : "local_engine_error");
        char *t = e ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
        gx_buf_reset(&lc->body);
        if (t)
            gx_buf_append(&lc->body, t, strlen(t));
        free(t);
        call->res.body = lc->body.data;
        call->res.body_len = lc->body.len;
    } else {
        call->res.outcome = PV_OK;
        call->res.http_status = 200;
        call->res.usage.have = 1;
        call->res.usage.prompt_tokens = r->prompt_tokens;
        call->res.usage.completion_tokens = r->completion_tokens;
        call->res.usage.cached_tokens = r->cached_tokens;
        if (lc->stream) {
            emit_chunk(call, lc, NULL, finish_reason(r->finish), NULL);
            if (lc->client_include_usage)
                emit_chunk(call, lc, NULL, NULL, usage_json(r));
            pv_call_emit_event(call, "[DONE]", 6);
        } else {
            json_t *o = json_pack(
                "{s:s,s:s,s:I,s:s,s:[{s:i,s:{s:s,s:s%},s:s,s:n}],s:o}", "id",
                lc->id, "object", "chat.completion", "created",
                (json_int_t)lc->created, "model", lc->model, "choices",
                "index", 0, "message", "role", "assistant", "content",
                lc->body.data ? lc->body.data : "", lc->body.len,
                "finish_reason", finish_reason(r->finish), "logprobs",
                "usage", usage_json(r));
            char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
            json_decref(o);
            gx_buf_reset(&lc->body);
            if (t)
                gx_buf_append(&lc->body, t, strlen(t));
            free(t);
            if (!lc->body.len) {
                call->res.outcome = PV_ERR_INTERNAL;
                snprintf(call->res.detail, sizeof(call->res.detail),
                         "could not encode the local answer");
            }
            call->res.body = lc->body.data;
            call->res.body_len = lc->body.len;
        }
    }
    pv_call_complete(call);
}

/* Frees the worker's side; the engine may still hold the job. */
static void
lp_release(struct pv_call *call)
{
    struct lp_call *lc = call->impl;
    if (lc && lc->timer) {
        event_free(lc->timer);
        lc->timer = NULL;
    }
    if (!lc || !lc->job)
        return;
    struct lp_job *j = lc->job;
    pthread_mutex_lock(&j->mu);
    j->cancelled = 1;
    atomic_store(&j->stop, 1);
    pthread_mutex_unlock(&j->mu);
    event_free(j->ev);
    j->ev = NULL;
    job_unref(j);
    lc->job = NULL;
    gx_buf_cleanup(&lc->body);
}

static const struct pv_http_hooks lp_hooks = {NULL, NULL, lp_release};

/* The provider's first_byte_timeout_ms (no text yet) or timeout_ms passed:
 * stop the generation at its next token and fail the call so the gateway
 * can fail over. */
static void
on_local_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pv_call *call = arg;
    struct lp_call *lc = call->impl;
    if (call->cancelled || call->finished || !lc->job)
        return;
    struct lp_job *j = lc->job;
    pthread_mutex_lock(&j->mu);
    j->cancelled = 1; /* the engine thread stops at its next token */
    atomic_store(&j->stop, 1);
    pthread_mutex_unlock(&j->mu);
    call->res.outcome =
        lc->got_text ? PV_ERR_TIMEOUT : PV_ERR_FIRST_BYTE_TIMEOUT;
    snprintf(call->res.detail, sizeof(call->res.detail),
             "local engine: %s", lc->got_text ? "total timeout"
                                              : "first byte timeout");
    call->res.body = NULL;
    call->res.body_len = 0;
    pv_call_complete(call);
}

static char *
message_text(const json_t *content)
{
    if (json_is_string(content))
        return strdup(json_string_value(content));
    struct gx_buf b;
    gx_buf_init(&b, 0);
    size_t i;
    const json_t *part;
    json_array_foreach(content, i, part) {
        const json_t *t = json_object_get(part, "text");
        if (json_is_string(t))
            gx_buf_append(&b, json_string_value(t), json_string_length(t));
    }
    if (!b.data)
        return strdup("");
    return b.data;
}

static struct lp_engine *
engine_for(const struct cfg_provider *p)
{
    for (size_t i = 0; i < n_engines; i++)
        if (engines[i].prov == p ||
            (engines[i].prov && !strcmp(engines[i].prov->name, p->name)))
            return &engines[i];
    return NULL;
}

static int
read_sampling(const json_t *b, struct le_sampling *sp, char ***stops,
              size_t *n_stops, char *err, size_t errlen)
{
    le_sampling_default(sp);
    sp->temperature = 1.0f; /* OpenAI's default */
    sp->top_k = 0;
    sp->top_p = 1.0f;
    sp->min_p = 0.0f;
    sp->max_tokens = 0;
    const json_t *v;
    if ((v = json_object_get(b, "temperature")) && json_is_number(v))
        sp->temperature = (float)json_number_value(v);
    if ((v = json_object_get(b, "top_p")) && json_is_number(v))
        sp->top_p = (float)json_number_value(v);
    if ((v = json_object_get(b, "top_k")) && json_is_integer(v))
        sp->top_k = (int)json_integer_value(v);
    if ((v = json_object_get(b, "min_p")) && json_is_number(v))
        sp->min_p = (float)json_number_value(v);
    if ((v = json_object_get(b, "repeat_penalty")) && json_is_number(v))
        sp->repeat_penalty = (float)json_number_value(v);
    if ((v = json_object_get(b, "frequency_penalty")) && json_is_number(v))
        sp->frequency_penalty = (float)json_number_value(v);
    if ((v = json_object_get(b, "presence_penalty")) && json_is_number(v))
        sp->presence_penalty = (float)json_number_value(v);
    if ((v = json_object_get(b, "seed")) && json_is_integer(v))
        sp->seed = (uint64_t)json_integer_value(v);
    v = json_object_get(b, "max_completion_tokens");
    if (!json_is_integer(v))
        v = json_object_get(b, "max_tokens");
    if (json_is_integer(v)) {
        json_int_t m = json_integer_value(v);
        if (m < 1 || m > 1000000) {
            gx_errf(err, errlen, "max_tokens must be between 1 and 1000000");
            return -1;
        }
        sp->max_tokens = (int)m;
    }
    *stops = NULL;
    *n_stops = 0;
    v = json_object_get(b, "stop");
    if (json_is_string(v) || json_is_array(v)) {
        size_t n = json_is_string(v) ? 1 : json_array_size(v);
        if (n > 16) {
            gx_errf(err, errlen, "at most 16 stop strings");
            return -1;
        }
        *stops = calloc(n ? n : 1, sizeof(char *));
        if (!*stops) {
            gx_errf(err, errlen, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
            if (!json_is_string(s) || json_string_length(s) == 0)
                continue;
            char *d = strdup(json_string_value(s));
            if (!d) { /* a NULL stop string would reach the engine */
                gx_errf(err, errlen, "out of memory");
                return -1;
            }
            (*stops)[(*n_stops)++] = d;
        }
    }
    return 0;
}

static enum gx_status
lp_start(struct pv_loop *loop, const struct pv_request *req,
         const struct pv_callbacks *cb, struct pv_call **out, char *err,
         size_t errlen)
{
    struct lp_engine *e = engine_for(req->provider);
    if (!e || !e->model) {
        gx_errf(err, errlen, "local engine for provider %s is not running",
                req->provider->name);
        return GX_EINVAL;
    }
    /* Chat template over the messages. */
    const json_t *msgs = json_object_get(req->body, "messages");
    size_t n = json_array_size(msgs);
    struct le_chat_msg *cm = calloc(n ? n : 1, sizeof(*cm));
    char **texts = calloc(n ? n : 1, sizeof(char *));
    char *prompt = NULL;
    size_t plen = 0;
    enum gx_status st = GX_ENOMEM;
    if (!cm || !texts)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        cm[i].role = json_string_value(json_object_get(m, "role"));
        if (!cm[i].role)
            cm[i].role = "user";
        texts[i] = message_text(json_object_get(m, "content"));
        if (!texts[i])
            goto out;
        cm[i].content = texts[i];
    }
    if (le_chat_apply(le_model_chat_template(e->model), cm, n, 1, &prompt,
                      &plen) != LE_OK) {
        gx_errf(err, errlen, "the messages could not be rendered with the "
                             "model's chat template");
        st = GX_EINVAL;
        goto out;
    }
    struct lp_job *j = calloc(1, sizeof(*j));
    if (!j)
        goto out;
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    gx_buf_init(&j->text, 64 * 1024 * 1024);
    j->prompt_text = prompt;
    prompt = NULL;
    if (read_sampling(req->body, &j->sp, &j->stops, &j->n_stops, err,
                      errlen) != 0) {
        job_unref(j);
        st = GX_EINVAL;
        goto out;
    }
    struct pv_call *call =
        pv_call_alloc(loop, &pv_local_ops, req, cb, sizeof(struct lp_call));
    if (!call) {
        job_unref(j);
        goto out;
    }
    call->hooks = &lp_hooks;
    struct lp_call *lc = call->impl;
    lc->job = j;
    lc->stream = req->stream;
    lc->client_include_usage = req->client_include_usage;
    lc->created = (int64_t)time(NULL);
    snprintf(lc->id, sizeof(lc->id), "chatcmpl-%s",
             req->request_id ? req->request_id : "local");
    snprintf(lc->model, sizeof(lc->model), "%s", req->model->name);
    gx_buf_init(&lc->body, 64 * 1024 * 1024);
    j->ev = event_new(loop->base, -1, 0, on_job_event, call);
    if (!j->ev) {
        lc->job = NULL;
        job_unref(j);
        pv_http_cancel(call);
        goto out;
    }
    const struct cfg_provider *pc = req->provider;
    int fb = pc->first_byte_timeout_ms, total = pc->timeout_ms;
    if (total > 0 || fb > 0) {
        lc->timer = evtimer_new(loop->base, on_local_timeout, call);
        if (!lc->timer) {
            lc->job = NULL;
            job_unref(j);
            pv_http_cancel(call);
            goto out;
        }
        lc->deadline_us = call->t_start_us +
                          (int64_t)(total > 0 ? total : 86400000) * 1000;
        int first = fb > 0 && (total <= 0 || fb < total) ? fb : total;
        struct timeval tv = {first / 1000, (first % 1000) * 1000};
        evtimer_add(lc->timer, &tv);
    }
    j->refs = 2; /* the worker (lc) and the engine queue */
    pthread_mutex_lock(&e->mu);
    if (e->queued >= e->max_queued) {
        /* Bounded: a flood waits in clients, not in our memory; the
         * gateway fails over to the next target. */
        size_t q = e->queued;
        pthread_mutex_unlock(&e->mu);
        j->refs = 1;
        gx_errf(err, errlen, "local engine %s is busy (%zu requests "
                             "queued)",
                pc->name, q);
        pv_http_cancel(call); /* lp_release drops the worker's ref */
        st = GX_EAGAIN;
        goto out;
    }
    if (e->tail)
        e->tail->next = j;
    else
        e->head = j;
    e->tail = j;
    e->queued++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = call;
    st = GX_OK;
out:
    if (st == GX_ENOMEM)
        gx_errf(err, errlen, "out of memory");
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(cm);
    free(prompt);
    return st;
}

static void
lp_cancel(struct pv_call *call)
{
    /* The head goes through the common path; lp_release (free_impl) tells
     * the engine thread to stop at its next token. */
    pv_http_cancel(call);
}

static void
lp_noop(struct pv_call *call)
{
    (void)call; /* tokens are slow: the event loop keeps up without pause */
}

const struct pv_ops pv_local_ops = {"local", lp_start, lp_cancel, lp_noop,
                                    lp_noop};
