/* metrics.c: the labelled Prometheus families of DESIGN.md section 11 and
 * the access log (one line per chat request, JSON or logfmt).
 *
 * chat.c calls gw_obs_request() once per ledger row and gw_obs_attempt()
 * once per finished upstream attempt; both run on worker threads.
 *
 * Shared state: one series table for the whole server behind one mutex.
 * A request takes it once (gw_obs_request: 3 hashed look-ups and a few
 * additions; not yet measured) and an attempt once; /metrics takes
 * it while it copies the table out.  Label values come only from the
 * config (route, provider, model names), numbers (status) and the fixed
 * outcome words of providers.h (and chat.c's "refused"); a model name not in the config becomes
 * "other", and past GW_OBS_MAX_SERIES every new tuple lands in one
 * "other" series, so the table never grows without bound.
 *
 * Access log lines: formatted on the worker, written with one write(2)
 * on an O_APPEND descriptor; SIGHUP (gw_obs_reopen) opens log.file anew
 * and dup2()s it over the old descriptor, so writers never see a closed
 * one.  SIGHUP with a new config (gw_obs_apply) applies log.format and
 * log.level at once and a new log.file the same way: the file is opened
 * (an error is logged and the old destination kept) and dup2()ed over
 * llmux's own descriptor, or becomes it when lines went to stderr so far;
 * back to stderr, stderr is dup2()ed over it.  That descriptor is never
 * closed while llmux runs.  A line carries the key id, never the key. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw_int.h"

#define GW_OBS_MAX_SERIES 2048
#define GW_OBS_SLOTS 4096 /* power of two, > 1.5 * GW_OBS_MAX_SERIES */

/* Histogram bounds in milliseconds (printed as seconds). */
static const int64_t bounds_ms[] = {5,    10,   25,   50,    100,   250,  500,
                                    1000, 2500, 5000, 10000, 30000, 60000};
#define N_BOUNDS (sizeof(bounds_ms) / sizeof(bounds_ms[0]))

enum series_kind { S_REQ, S_PM, S_PROV, S_ATT };

struct hist {
    int64_t bucket[N_BOUNDS + 1]; /* not cumulative; last = above all */
    int64_t count, sum_ms;
};

struct series {
    int used;
    enum series_kind kind;
    char key[256]; /* kind-specific label values joined by '\x1f' */
    int64_t n;     /* S_REQ requests, S_ATT attempts */
    int64_t prompt, completion, cached, cost_pusd; /* S_PM */
    struct hist dur, ttft;                         /* S_PROV */
};

/* Ledger commit latency bounds in microseconds (printed as seconds). */
static const int64_t commit_bounds_us[] = {250,   500,    1000,   2500,
                                           5000,  10000,  25000,  50000,
                                           100000, 250000, 500000, 1000000,
                                           2500000, 5000000};
#define N_COMMIT_BOUNDS (sizeof(commit_bounds_us) / sizeof(commit_bounds_us[0]))

struct gw_obs {
    pthread_mutex_t mu;
    /* Ledger commit latency (submit to commit callback), lock-free: the
     * ledger thread adds, /metrics reads. */
    _Atomic int64_t commit_bucket[N_COMMIT_BOUNDS + 1]; /* not cumulative */
    _Atomic int64_t commit_count, commit_sum_us;
    struct series *slots; /* GW_OBS_SLOTS */
    size_t n_series;
    int64_t dropped; /* tuples folded into "other" at the cap */
    /* access log */
    atomic_int fd;   /* 2 = stderr, else own_fd */
    int own_fd;      /* our descriptor for log files, -1 none yet */
    char *file;      /* NULL = stderr; main thread */
    atomic_int logfmt;
    atomic_int level; /* access lines are written when info <= level */
    int env_level;   /* gx_log_level before any "log" block (LLMUX_LOG) */
};

static uint64_t
hash_str(const char *s, enum series_kind k)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)k;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* The series for (kind, key), created if absent; mu held.  Past the cap a
 * new tuple lands in the kind's "other" series (the slots outnumber the
 * cap, so those always fit). */
static struct series *
series_get(struct gw_obs *o, enum series_kind k, const char *key, int over)
{
    uint64_t h = hash_str(key, k);
    for (size_t i = 0; i < GW_OBS_SLOTS; i++) {
        struct series *s = &o->slots[(h + i) & (GW_OBS_SLOTS - 1)];
        if (s->used && s->kind == k && !strcmp(s->key, key))
            return s;
        if (s->used)
            continue;
        if (o->n_series >= GW_OBS_MAX_SERIES && !over) {
            static const char *const other[] = {
                "other\x1fother\x1fother\x1f" "0", "other\x1fother", "other",
                "other\x1fother"};
            o->dropped++;
            return series_get(o, k, other[k], 1);
        }
        s->used = 1;
        s->kind = k;
        snprintf(s->key, sizeof(s->key), "%s", key);
        o->n_series++;
        return s;
    }
    return NULL;
}

static void
hist_add(struct hist *h, int64_t ms)
{
    if (ms < 0)
        return;
    size_t b = 0;
    while (b < N_BOUNDS && ms > bounds_ms[b])
        b++;
    h->bucket[b]++;
    h->count++;
    h->sum_ms += ms;
}

struct gw_obs *
gw_obs_new(const struct cfg *c, char *err, size_t errlen)
{
    struct gw_obs *o = calloc(1, sizeof(*o));
    if (!o || !(o->slots = calloc(GW_OBS_SLOTS, sizeof(*o->slots)))) {
        free(o);
        gx_errf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&o->mu, NULL);
    o->fd = 2;
    o->own_fd = -1;
    o->env_level = gx_log_level;
    o->logfmt = c->log_logfmt;
    o->level = c->log_level >= 0 ? c->log_level : gx_log_level;
    if (c->log_level >= 0)
        gx_log_level = c->log_level;
    if (c->log_file) {
        o->file = strdup(c->log_file);
        o->own_fd = o->file ? open(o->file, O_WRONLY | O_CREAT | O_APPEND |
                                                O_CLOEXEC,
                                   0640)
                            : -1;
        if (o->own_fd < 0) {
            gx_errf(err, errlen, "log.file %s: %s", c->log_file,
                    o->file ? strerror(errno) : "out of memory");
            gw_obs_free(o);
            return NULL;
        }
        o->fd = o->own_fd;
    }
    return o;
}

static int
same_path(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

void
gw_obs_apply(struct gw_obs *o, const struct cfg *c)
{
    if (!o)
        return;
    int fmt = c->log_logfmt ? 1 : 0;
    if (atomic_exchange(&o->logfmt, fmt) != fmt)
        GX_LOG(GX_LOG_WARN, NULL, "SIGHUP: log.format is now %s",
               fmt ? "logfmt" : "json");
    int lv = c->log_level >= 0 ? c->log_level : o->env_level;
    if (atomic_exchange(&o->level, lv) != lv)
        GX_LOG(GX_LOG_WARN, NULL, "SIGHUP: log.level is now %d", lv);
    gx_log_level = lv;
    if (same_path(o->file, c->log_file))
        return;
    char *nf = c->log_file ? strdup(c->log_file) : NULL;
    if (c->log_file && !nf) {
        GX_LOG(GX_LOG_ERROR, NULL,
               "SIGHUP: log.file: out of memory; access lines go where they "
               "went");
        return;
    }
    if (!nf) { /* back to stderr */
        if (o->own_fd >= 0 && dup2(2, o->own_fd) < 0) {
            GX_LOG(GX_LOG_ERROR, NULL, "SIGHUP: log.file: %s; lines go to %s",
                   strerror(errno), o->file);
            return;
        }
    } else {
        int fd = open(nf, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (fd < 0) {
            GX_LOG(GX_LOG_ERROR, NULL,
                   "SIGHUP: log.file %s: %s; access lines go where they went "
                   "(%s)",
                   nf, strerror(errno), o->file ? o->file : "stderr");
            free(nf);
            return;
        }
        if (o->own_fd < 0) {
            o->own_fd = fd;
        } else {
            int r = dup2(fd, o->own_fd); /* a writer sees old or new */
            close(fd);
            if (r < 0) {
                GX_LOG(GX_LOG_ERROR, NULL,
                       "SIGHUP: log.file %s: %s; access lines go where they "
                       "went",
                       nf, strerror(errno));
                free(nf);
                return;
            }
        }
        atomic_store(&o->fd, o->own_fd);
    }
    GX_LOG(GX_LOG_WARN, NULL, "SIGHUP: log.file is now %s",
           nf ? nf : "stderr");
    free(o->file);
    o->file = nf;
}

void
gw_obs_free(struct gw_obs *o)
{
    if (!o)
        return;
    if (o->own_fd > 2)
        close(o->own_fd);
    pthread_mutex_destroy(&o->mu);
    free(o->slots);
    free(o->file);
    free(o);
}

void
gw_obs_reopen(struct gw_obs *o)
{
    if (!o || !o->file)
        return;
    int fd = open(o->file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        GX_LOG(GX_LOG_ERROR, NULL,
               "SIGHUP: log.file %s: %s; writing to the old file", o->file,
               strerror(errno));
        return;
    }
    /* Atomic swap under the same number: a writer sees old or new. */
    if (dup2(fd, o->own_fd) < 0)
        GX_LOG(GX_LOG_ERROR, NULL, "SIGHUP: log.file %s: %s", o->file,
               strerror(errno));
    close(fd);
    GX_LOG(GX_LOG_INFO, NULL, "SIGHUP: access log reopened: %s", o->file);
}

/* Whether name is a route or a model of some provider in c. */
static int
known_model(const struct cfg *c, const char *name)
{
    if (!name)
        return 0;
    for (size_t i = 0; i < c->n_routes; i++)
        if (!strcmp(c->routes[i].name, name))
            return 1;
    for (size_t p = 0; p < c->n_providers; p++)
        for (size_t m = 0; m < c->providers[p].n_models; m++)
            if (!strcmp(c->providers[p].models[m].name, name))
                return 1;
    return 0;
}

static int
known_provider(const struct cfg *c, const char *name)
{
    for (size_t p = 0; name && p < c->n_providers; p++)
        if (!strcmp(c->providers[p].name, name))
            return 1;
    return 0;
}

static int
known_route(const struct cfg *c, const char *name)
{
    for (size_t i = 0; name && i < c->n_routes; i++)
        if (!strcmp(c->routes[i].name, name))
            return 1;
    return 0;
}

/* ---- access log ---------------------------------------------------- */

/* Appends s JSON-escaped (no quotes) to b. */
static void
json_esc(struct gx_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            gx_buf_printf(b, "\\%c", ch);
        else if (ch < 0x20)
            gx_buf_printf(b, "\\u%04x", ch);
        else
            gx_buf_printf(b, "%c", ch);
    }
}

static void
field_s(int logfmt, struct gx_buf *b, int *first, const char *k,
        const char *v)
{
    if (logfmt) {
        gx_buf_printf(b, "%s%s=", *first ? "" : " ", k);
        if (!v) {
            gx_buf_printf(b, "-");
        } else {
            gx_buf_printf(b, "\"");
            json_esc(b, v); /* same escaping: quotes, backslashes */
            gx_buf_printf(b, "\"");
        }
    } else {
        gx_buf_printf(b, "%s\"%s\":", *first ? "{" : ",", k);
        if (!v) {
            gx_buf_printf(b, "null");
        } else {
            gx_buf_printf(b, "\"");
            json_esc(b, v);
            gx_buf_printf(b, "\"");
        }
    }
    *first = 0;
}

static void
field_raw(int logfmt, struct gx_buf *b, int *first, const char *k,
          const char *v)
{
    if (logfmt)
        gx_buf_printf(b, "%s%s=%s", *first ? "" : " ", k, v);
    else
        gx_buf_printf(b, "%s\"%s\":%s", *first ? "{" : ",", k, v);
    *first = 0;
}

static void
field_i(int logfmt, struct gx_buf *b, int *first, const char *k,
        int64_t v)
{
    char n[32];
    snprintf(n, sizeof(n), "%lld", (long long)v);
    field_raw(logfmt, b, first, k, n);
}

static void
access_line(struct gw_obs *o, const struct pr_usage_row *row)
{
    if (atomic_load_explicit(&o->level, memory_order_relaxed) < GX_LOG_INFO)
        return;
    int fmt = atomic_load_explicit(&o->logfmt, memory_order_relaxed);
    struct gx_buf b;
    gx_buf_init(&b, 1024);
    int first = 1;
    char ts[32], cost[48];
    snprintf(ts, sizeof(ts), "%lld", (long long)row->ts_ms);
    field_raw(fmt, &b, &first, "ts_ms", ts);
    field_s(fmt, &b, &first, "level", "info");
    field_s(fmt, &b, &first, "request_id", row->request_id);
    if (row->key_id >= 0)
        field_i(fmt, &b, &first, "key_id", row->key_id);
    else
        field_raw(fmt, &b, &first, "key_id", fmt ? "-" : "null");
    field_s(fmt, &b, &first, "api", "chat");
    field_s(fmt, &b, &first, "route", row->route);
    field_s(fmt, &b, &first, "provider", row->provider);
    field_s(fmt, &b, &first, "model", row->model);
    field_i(fmt, &b, &first, "status", row->status);
    field_i(fmt, &b, &first, "attempts", row->attempts);
    field_raw(fmt, &b, &first, "stream", row->stream ? "true" : "false");
    field_i(fmt, &b, &first, "prompt_tokens", row->prompt_tokens);
    field_i(fmt, &b, &first, "completion_tokens", row->completion_tokens);
    field_i(fmt, &b, &first, "cached_tokens", row->cached_tokens);
    pr_pusd_format(row->cost_pusd, cost, sizeof(cost));
    field_s(fmt, &b, &first, "cost_usd", cost); /* exact decimal, a string */
    field_i(fmt, &b, &first, "latency_ms", row->latency_ms);
    if (row->ttft_ms >= 0)
        field_i(fmt, &b, &first, "ttft_ms", row->ttft_ms);
    else
        field_raw(fmt, &b, &first, "ttft_ms", fmt ? "-" : "null");
    field_s(fmt, &b, &first, "usage_source", row->usage_source);
    field_s(fmt, &b, &first, "error", row->error);
    gx_buf_printf(&b, fmt ? "\n" : "}\n");
    if (b.data) {
        ssize_t w = write(atomic_load(&o->fd), b.data, b.len);
        (void)w; /* a full disk loses log lines, never requests */
    }
    gx_buf_cleanup(&b);
}

/* ---- hooks ----------------------------------------------------------- */

/* parts[0..n) joined into k[cap], cut as snprintf cuts: a series key of
 * every request, without printf (two snprintf were 2.3k instructions a
 * request). */
static void
key_join(char *k, size_t cap, const char *const *parts, size_t n)
{
    size_t at = 0;
    for (size_t i = 0; i < n && at + 1 < cap; i++) {
        size_t l = strlen(parts[i]);
        if (l > cap - 1 - at)
            l = cap - 1 - at;
        memcpy(k + at, parts[i], l);
        at += l;
    }
    k[at] = '\0';
}

void
gw_obs_request(struct gw_worker *w, const struct pr_usage_row *row)
{
    struct gw_obs *o = w->srv->obs;
    if (!o)
        return;
    const struct cfg *c = gw_cfg(w->srv);
    const char *route = known_route(c, row->route) ? row->route : "";
    const char *prov = known_provider(c, row->provider) ? row->provider : "";
    const char *model = known_model(c, row->model) ? row->model
                        : row->model                ? "other"
                                                    : "";
    char k1[256], k2[256];
    int st = row->status >= 100 && row->status <= 999 ? row->status : 0;
    char sd[4] = "0";
    if (st) {
        sd[0] = (char)('0' + st / 100);
        sd[1] = (char)('0' + st / 10 % 10);
        sd[2] = (char)('0' + st % 10);
    }
    const char *p1[] = {route, "\x1f", prov, "\x1f", model, "\x1f", sd};
    const char *p2[] = {prov, "\x1f", model};
    key_join(k1, sizeof(k1), p1, sizeof(p1) / sizeof(p1[0]));
    key_join(k2, sizeof(k2), p2, sizeof(p2) / sizeof(p2[0]));
    pthread_mutex_lock(&o->mu);
    struct series *s = series_get(o, S_REQ, k1, 0);
    if (s)
        s->n++;
    if ((s = series_get(o, S_PM, k2, 0))) {
        s->prompt += row->prompt_tokens;
        s->completion += row->completion_tokens;
        s->cached += row->cached_tokens;
        s->cost_pusd += row->cost_pusd;
    }
    if ((s = series_get(o, S_PROV, prov, 0))) {
        hist_add(&s->dur, row->latency_ms);
        hist_add(&s->ttft, row->ttft_ms);
    }
    pthread_mutex_unlock(&o->mu);
    access_line(o, row);
}

void
gw_obs_attempt(struct gw_worker *w, const char *provider, const char *outcome)
{
    struct gw_obs *o = w->srv->obs;
    if (!o)
        return;
    const struct cfg *c = gw_cfg(w->srv);
    char k[256];
    const char *p[] = {known_provider(c, provider) ? provider : "", "\x1f"};
    key_join(k, sizeof(k), p, 2);
    int n = (int)strlen(k);
    /* "connect failed" -> connect_failed: one word per outcome. */
    for (size_t i = 0; outcome[i] && n >= 0 && (size_t)n + 1 < sizeof(k);
         i++)
        k[n++] = outcome[i] == ' ' ? '_' : outcome[i];
    if (n >= 0 && (size_t)n < sizeof(k))
        k[n] = '\0';
    pthread_mutex_lock(&o->mu);
    struct series *s = series_get(o, S_ATT, k, 0);
    if (s)
        s->n++;
    pthread_mutex_unlock(&o->mu);
}

void
gw_obs_refused(struct gw_server *srv, struct gw_hreq *req, int status,
               const char *model, const char *reason)
{
    gw_otel_refused(srv->otel, req, status, model, reason);
    struct gw_obs *o = srv->obs;
    if (!o)
        return;
    const struct cfg *c = gw_cfg(srv);
    char k[256];
    snprintf(k, sizeof(k), "\x1f\x1f%s\x1f%d",
             known_model(c, model) ? model : model ? "other" : "",
             status >= 100 && status <= 999 ? status : 0);
    pthread_mutex_lock(&o->mu);
    struct series *s = series_get(o, S_REQ, k, 0);
    if (s)
        s->n++;
    pthread_mutex_unlock(&o->mu);
    /* Its access line: no route, attempt, tokens or cost; latency 0 (the
     * refusal is immediate). */
    struct pr_usage_row row = {
        .ts_ms = gx_now_ms(),
        .request_id = gw_hreq_id(req),
        .key_id = -1,
        .model = model,
        .status = status,
        .ttft_ms = -1,
        .usage_source = "none",
        .error = "refused before routing",
    };
    access_line(o, &row);
}

void
gw_obs_commit(struct gw_obs *o, int64_t us)
{
    if (!o || us < 0)
        return;
    size_t b = 0;
    while (b < N_COMMIT_BOUNDS && us > commit_bounds_us[b])
        b++;
    atomic_fetch_add(&o->commit_bucket[b], 1);
    atomic_fetch_add(&o->commit_sum_us, us);
    atomic_fetch_add(&o->commit_count, 1);
}

/* ---- exposition -------------------------------------------------------- */

/* Writes label values of key (split at '\x1f') as name="value" pairs. */
static void
labels(struct evbuffer *b, const char *const *names, const char *key,
       const char *extra)
{
    evbuffer_add(b, "{", 1);
    const char *p = key;
    for (int i = 0; names[i]; i++) {
        evbuffer_add_printf(b, "%s%s=\"", i ? "," : "", names[i]);
        for (; *p && *p != '\x1f'; p++) {
            if (*p == '\\' || *p == '"')
                evbuffer_add_printf(b, "\\%c", *p);
            else if (*p == '\n')
                evbuffer_add(b, "\\n", 2);
            else
                evbuffer_add(b, p, 1);
        }
        if (*p)
            p++;
        evbuffer_add(b, "\"", 1);
    }
    if (extra)
        evbuffer_add_printf(b, ",%s", extra);
    evbuffer_add(b, "}", 1);
}

static void
ms_seconds(char *out, size_t n, int64_t ms)
{
    snprintf(out, n, "%lld.%03lld", (long long)(ms / 1000),
             (long long)(ms % 1000));
}

static void
hist_write(struct evbuffer *b, const char *name, const char *prov,
           const struct hist *h)
{
    static const char *const pn[] = {"provider", NULL};
    int64_t cum = 0;
    char le[48], v[32];
    for (size_t i = 0; i <= N_BOUNDS; i++) {
        cum += h->bucket[i];
        if (i < N_BOUNDS) {
            ms_seconds(v, sizeof(v), bounds_ms[i]);
            snprintf(le, sizeof(le), "le=\"%s\"", v);
        } else {
            snprintf(le, sizeof(le), "le=\"+Inf\"");
        }
        evbuffer_add_printf(b, "%s_bucket", name);
        labels(b, pn, prov, le);
        evbuffer_add_printf(b, " %lld\n", (long long)cum);
    }
    ms_seconds(v, sizeof(v), h->sum_ms);
    evbuffer_add_printf(b, "%s_sum", name);
    labels(b, pn, prov, NULL);
    evbuffer_add_printf(b, " %s\n%s_count", v, name);
    labels(b, pn, prov, NULL);
    evbuffer_add_printf(b, " %lld\n", (long long)h->count);
}

static void
family(struct evbuffer *b, const char *name, const char *type,
       const char *help)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
                        type);
}

/* The local engines' schedulers (providers/local.c, sched.c). */
static void
local_metrics(const struct pv_registry *r, struct evbuffer *b)
{
    static const char *const mn[] = {"model", NULL};
    static const struct {
        const char *name, *type, *help;
    } fam[5] = {
        {"llmux_local_tokens_total", "counter",
         "Tokens generated by the local engine."},
        {"llmux_local_queue_length", "gauge",
         "Local requests waiting for a sequence."},
        {"llmux_local_active_sequences", "gauge",
         "Local sequences running (paused ones included)."},
        {"llmux_local_prefix_cache_tokens_total", "counter",
         "Prompt tokens served from the local prefix cache."},
        {"llmux_local_paused_sequences", "gauge",
         "Local sequences held out of the batch for a slow client."}};
    size_t n = pv_local_count(r);
    for (int f = 0; f < 5 && n; f++) {
        family(b, fam[f].name, fam[f].type, fam[f].help);
        for (size_t i = 0; i < n; i++) {
            struct pv_local_stat st;
            pv_local_stats(r, i, &st);
            unsigned long long v = f == 0   ? st.generated_tokens
                                   : f == 1 ? (unsigned long long)st.queued
                                   : f == 2 ? (unsigned long long)st.active
                                   : f == 3 ? st.cached_tokens
                                            : (unsigned long long)st.paused;
            char tk[256]; /* the target: two providers may share a name */
            snprintf(tk, sizeof(tk), "%s@%s", st.model ? st.model : "",
                     st.provider ? st.provider : "");
            evbuffer_add_printf(b, "%s", fam[f].name);
            labels(b, mn, tk, NULL);
            evbuffer_add_printf(b, " %llu\n", v);
        }
    }
}

void
gw_obs_write(struct gw_server *srv, struct evbuffer *b)
{
    struct gw_obs *o = srv->obs;
    if (!o)
        return;
    size_t n = 0;
    struct series *copy = malloc(sizeof(*copy) * (GW_OBS_MAX_SERIES + 4));
    if (!copy)
        return;
    pthread_mutex_lock(&o->mu);
    for (size_t i = 0; i < GW_OBS_SLOTS && n < GW_OBS_MAX_SERIES + 4; i++)
        if (o->slots[i].used)
            copy[n++] = o->slots[i];
    pthread_mutex_unlock(&o->mu);

    static const char *const rq[] = {"route", "provider", "model", "status",
                                     NULL};
    static const char *const pm[] = {"provider", "model", NULL};
    static const char *const po[] = {"provider", "outcome", NULL};
    family(b, "llmux_requests_total", "counter",
           "Chat requests by route, provider, model and HTTP status: every "
           "ledger row, and requests refused before routing (401, 400, "
           "413, unknown model 404, admission 403/429/503) with route and "
           "provider \"\".");
    for (size_t i = 0; i < n; i++)
        if (copy[i].kind == S_REQ) {
            evbuffer_add_printf(b, "llmux_requests_total");
            labels(b, rq, copy[i].key, NULL);
            evbuffer_add_printf(b, " %lld\n", (long long)copy[i].n);
        }
    family(b, "llmux_tokens_total", "counter",
           "Tokens of logged chat requests (prompt includes cached).");
    for (size_t i = 0; i < n; i++)
        if (copy[i].kind == S_PM) {
            const char *ty[] = {"type=\"prompt\"", "type=\"completion\"",
                                "type=\"cached\""};
            int64_t v[] = {copy[i].prompt, copy[i].completion,
                           copy[i].cached};
            for (int t = 0; t < 3; t++) {
                evbuffer_add_printf(b, "llmux_tokens_total");
                labels(b, pm, copy[i].key, ty[t]);
                evbuffer_add_printf(b, " %lld\n", (long long)v[t]);
            }
        }
    family(b, "llmux_cost_usd_total", "counter",
           "Cost in USD of logged chat requests (exact: the ledger's sum).");
    for (size_t i = 0; i < n; i++)
        if (copy[i].kind == S_PM) {
            char cost[48];
            pr_pusd_format(copy[i].cost_pusd, cost, sizeof(cost));
            evbuffer_add_printf(b, "llmux_cost_usd_total");
            labels(b, pm, copy[i].key, NULL);
            evbuffer_add_printf(b, " %s\n", cost);
        }
    family(b, "llmux_request_duration_seconds", "histogram",
           "Chat request duration, arrival to last byte.");
    for (size_t i = 0; i < n; i++)
        if (copy[i].kind == S_PROV)
            hist_write(b, "llmux_request_duration_seconds", copy[i].key,
                       &copy[i].dur);
    family(b, "llmux_time_to_first_token_seconds", "histogram",
           "Time from arrival to the first token sent.");
    for (size_t i = 0; i < n; i++)
        if (copy[i].kind == S_PROV)
            hist_write(b, "llmux_time_to_first_token_seconds", copy[i].key,
                       &copy[i].ttft);
    family(b, "llmux_upstream_attempts_total", "counter",
           "Finished upstream attempts by provider and outcome.");
    for (size_t i = 0; i < n; i++)
        if (copy[i].kind == S_ATT) {
            evbuffer_add_printf(b, "llmux_upstream_attempts_total");
            labels(b, po, copy[i].key, NULL);
            evbuffer_add_printf(b, " %lld\n", (long long)copy[i].n);
        }
    free(copy);

    family(b, "llmux_circuit_state", "gauge",
           "Circuit of each model@provider target: 0 closed, 1 open, 2 "
           "half-open.");
    const struct cfg *c = gw_cfg(srv);
    struct rt_router *rt = gw_router(srv);
    static const char *const tn[] = {"target", NULL};
    for (size_t p = 0; p < c->n_providers; p++)
        for (size_t m = 0; m < c->providers[p].n_models; m++) {
            struct cfg_target t = {.provider = p, .model = m};
            struct rt_health h;
            if (rt_health_get(rt, t, &h) != 0)
                continue;
            char tk[256];
            snprintf(tk, sizeof(tk), "%s@%s", c->providers[p].models[m].name,
                     c->providers[p].name);
            evbuffer_add_printf(b, "llmux_circuit_state");
            labels(b, tn, tk, NULL);
            evbuffer_add_printf(b, " %d\n", h.state);
        }
    local_metrics(gw_registry(srv), b);
    family(b, "llmux_inflight_requests", "gauge", "Chat requests in flight.");
    evbuffer_add_printf(b, "llmux_inflight_requests %lld\n",
                        (long long)atomic_load(&srv->stats.inflight));
    struct pr_ledger_stats ls = {0};
    if (srv->ledger)
        pr_ledger_stats(srv->ledger, &ls);
    family(b, "llmux_ledger_queue_depth", "gauge",
           "Usage rows waiting for the ledger writer.");
    evbuffer_add_printf(b, "llmux_ledger_queue_depth %lld\n",
                        (long long)ls.queued);
    family(b, "llmux_ledger_commit_seconds", "histogram",
           "Time from a usage row handed to the ledger to its commit "
           "(the wait a response has before it completes).");
    int64_t cum = 0;
    for (size_t i = 0; i <= N_COMMIT_BOUNDS; i++) {
        cum += atomic_load(&o->commit_bucket[i]);
        if (i < N_COMMIT_BOUNDS)
            evbuffer_add_printf(b,
                                "llmux_ledger_commit_seconds_bucket{le=\""
                                "%lld.%06lld\"} %lld\n",
                                (long long)(commit_bounds_us[i] / 1000000),
                                (long long)(commit_bounds_us[i] % 1000000),
                                (long long)cum);
        else
            evbuffer_add_printf(b,
                                "llmux_ledger_commit_seconds_bucket{le=\""
                                "+Inf\"} %lld\n",
                                (long long)cum);
    }
    int64_t sum_us = atomic_load(&o->commit_sum_us);
    evbuffer_add_printf(b,
                        "llmux_ledger_commit_seconds_sum %lld.%06lld\n"
                        "llmux_ledger_commit_seconds_count %lld\n",
                        (long long)(sum_us / 1000000),
                        (long long)(sum_us % 1000000),
                        (long long)atomic_load(&o->commit_count));
    family(b, "llmux_metrics_series_dropped_total", "counter",
           "Label tuples folded into \"other\" at the series cap.");
    pthread_mutex_lock(&o->mu);
    long long dropped = o->dropped;
    pthread_mutex_unlock(&o->mu);
    evbuffer_add_printf(b, "llmux_metrics_series_dropped_total %lld\n",
                        dropped);
    gw_otel_write_metrics(srv->otel, b); /* otel.c */
}
