/*
 * cfg_defaults: the built-in configuration of DESIGN.md section 4, used by
 * `llmux serve` without --config.  Everything comes from the environment
 * (a variable set to "" counts as unset):
 *
 *   OPENAI_API_KEY     provider "openai"    https://api.openai.com/v1
 *                      gpt-4.1, gpt-4.1-mini
 *   ANTHROPIC_API_KEY  provider "anthropic" https://api.anthropic.com/v1
 *                      (Anthropic's OpenAI-compatible endpoint)
 *                      claude-sonnet-4.5, claude-haiku-4.5
 *   GEMINI_API_KEY     provider "gemini"
 *                      https://generativelanguage.googleapis.com/v1beta/openai
 *                      gemini-2.5-flash, gemini-2.5-pro
 *   DEEPSEEK_API_KEY   provider "deepseek"  https://api.deepseek.com/v1
 *                      deepseek-v3.2 (sent upstream as "deepseek-chat")
 *   LLMUX_RELAY_URL    provider "relay" at that URL serving all the models
 *   (+ LLMUX_RELAY_KEY)  above under their own names; the key is optional
 *                      (a relay on localhost may need none)
 *   LLMUX_MODEL        provider "local" (kind local, model "local")
 *   LLMUX_LISTEN       HOST:PORT instead of 127.0.0.1:8080
 *   LLMUX_DATABASE     instead of llmux.db
 *   LLMUX_ADMIN_KEY    the admin key (none by default)
 *
 * Providers come in that order, so a bare model name resolves to a direct
 * provider before the relay.  Keys are not required (require_keys 0).
 *
 * Route "auto": policy cost over every cloud target (MODEL@PROVIDER for
 * each model of each cloud provider above), with fallback local@local when
 * the local engine is configured; with only the local engine its single
 * target is local@local; with nothing configured there is no route.
 *
 * Prices come from pr_price_default; a model missing from that table keeps
 * has_price 0 (cost 0) rather than failing the start.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "../pricing/pricing.h"
#include "config_int.h"

struct builtin {
    const char *env;
    const char *name;
    const char *base_url;
    const char *models[2];
    const char *upstreams[2]; /* NULL = same as the model */
};

static const struct builtin builtins[] = {
    {"OPENAI_API_KEY",
     "openai",
     "https://api.openai.com/v1",
     {"gpt-4.1", "gpt-4.1-mini"},
     {NULL, NULL}},
    {"ANTHROPIC_API_KEY",
     "anthropic",
     "https://api.anthropic.com/v1",
     {"claude-sonnet-4.5", "claude-haiku-4.5"},
     {NULL, NULL}},
    {"GEMINI_API_KEY",
     "gemini",
     "https://generativelanguage.googleapis.com/v1beta/openai",
     {"gemini-2.5-flash", "gemini-2.5-pro"},
     {NULL, NULL}},
    {"DEEPSEEK_API_KEY",
     "deepseek",
     "https://api.deepseek.com/v1",
     {"deepseek-v3.2", NULL},
     {"deepseek-chat", NULL}},
};
#define N_BUILTINS (sizeof(builtins) / sizeof(builtins[0]))

static const char *
env(const char *name)
{
    const char *s = getenv(name);
    return s && s[0] ? s : NULL;
}

static enum gx_status
add_model(struct cfg_provider *p, const char *name, const char *upstream)
{
    struct cfg_model *m = &p->models[p->n_models++];
    m->name = strdup(name);
    m->upstream = strdup(upstream ? upstream : name);
    if (!m->name || !m->upstream)
        return GX_ENOMEM;
    struct pr_rates pp;
    if (p->kind == CFG_KIND_LOCAL) {
        m->has_price = 1; /* free */
    } else if (pr_rates_default(name, &pp)) {
        m->has_price = 1;
        m->input_pusd = pp.input_pusd;
        m->cached_input_pusd = pp.cached_input_pusd;
        m->cache_write_pusd = pp.cache_write_pusd;
        m->output_pusd = pp.output_pusd;
    }
    return GX_OK;
}

static struct cfg_provider *
add_provider(struct cfg *c, const char *name, enum cfg_kind kind,
             size_t n_models)
{
    struct cfg_provider *p = &c->providers[c->n_providers++];
    p->kind = kind;
    p->timeout_ms = CFG_DEFAULT_TIMEOUT_MS;
    p->connect_timeout_ms = CFG_DEFAULT_CONNECT_TIMEOUT_MS;
    p->first_byte_timeout_ms = CFG_DEFAULT_FIRST_BYTE_TIMEOUT_MS;
    p->threads = cfg_ncpu();
    p->context = 4096;
    p->parallel = 4;
    p->queue = 64;
    p->prefix_cache = 2;
    p->prefill_chunk = 32;
    p->name = strdup(name);
    p->models = calloc(n_models, sizeof(*p->models));
    return p->name && p->models ? p : NULL;
}

static enum gx_status
add_url(struct cfg_provider *p, const char *url, const char *key)
{
    if (!(p->base_url = strdup(url)))
        return GX_ENOMEM;
    size_t n = strlen(p->base_url);
    while (n > 0 && p->base_url[n - 1] == '/')
        p->base_url[--n] = '\0';
    if (key && !(p->api_key = strdup(key)))
        return GX_ENOMEM;
    return GX_OK;
}

static enum gx_status
add_auto_route(struct cfg *c, int has_local)
{
    size_t n = 0;
    for (size_t k = 0; k < c->n_providers; k++)
        if (c->providers[k].kind == CFG_KIND_OPENAI)
            n += c->providers[k].n_models;
    if (n == 0 && !has_local)
        return GX_OK;
    if (!(c->routes = calloc(1, sizeof(*c->routes))))
        return GX_ENOMEM;
    c->n_routes = 1;
    struct cfg_route *r = &c->routes[0];
    r->policy = CFG_POLICY_COST;
    if (!(r->name = strdup("auto")) ||
        !(r->targets = calloc(n ? n : 1, sizeof(*r->targets))))
        return GX_ENOMEM;
    size_t local = 0;
    for (size_t k = 0; k < c->n_providers; k++) {
        if (c->providers[k].kind == CFG_KIND_LOCAL) {
            local = k;
            continue;
        }
        for (size_t m = 0; m < c->providers[k].n_models; m++)
            r->targets[r->n_targets++] = (struct cfg_target){k, m};
    }
    if (!has_local)
        return GX_OK;
    if (n == 0) {
        r->targets[r->n_targets++] = (struct cfg_target){local, 0};
    } else {
        r->has_fallback = 1;
        r->fallback = (struct cfg_target){local, 0};
    }
    return GX_OK;
}

enum gx_status
cfg_defaults(struct cfg **out, char *err, size_t errlen)
{
    enum gx_status st = GX_ENOMEM;
    struct cfg *c = calloc(1, sizeof(*c));
    if (!c)
        goto out;
    c->require_keys = 0;
    c->workers = cfg_ncpu();
    c->listen_port = 8080;
    c->max_body_bytes = 4194304;
    c->max_connections = 10000;
    c->log_level = -1;
    c->otel_sample = 1.0;
    c->otel_queue = 2048;
    c->otel_timeout_ms = 5000;
    c->header_timeout_ms = 10000;
    c->idle_timeout_ms = 60000;
    c->stream_buffer_bytes = CFG_STREAM_BUFFER_DEFAULT;
    if (!(c->path = strdup("(defaults)")) ||
        !(c->database = strdup(env("LLMUX_DATABASE") ? env("LLMUX_DATABASE")
                                                     : "llmux.db")) ||
        (env("LLMUX_ADMIN_KEY") &&
         !(c->admin_key = strdup(env("LLMUX_ADMIN_KEY")))) ||
        cfg_failover_defaults(&c->failover) != GX_OK)
        goto out;
    if (env("LLMUX_LISTEN")) {
        int rc = cfg_parse_listen(env("LLMUX_LISTEN"), &c->listen_host,
                                  &c->listen_port);
        if (rc == -3)
            goto out;
        if (rc) {
            st = GX_EINVAL;
            gx_errf(err, errlen,
                    "LLMUX_LISTEN: expected HOST:PORT with a port from 0 "
                    "to 65535 (e.g. 127.0.0.1:8080)");
            goto out;
        }
    } else if (!(c->listen_host = strdup("127.0.0.1"))) {
        goto out;
    }

    const char *relay = env("LLMUX_RELAY_URL");
    if (relay && strncmp(relay, "http://", 7) && strncmp(relay, "https://", 8)) {
        st = GX_EINVAL;
        gx_errf(err, errlen, "LLMUX_RELAY_URL: expected an http:// or "
                             "https:// URL");
        goto out;
    }
    if (!(c->providers = calloc(N_BUILTINS + 2, sizeof(*c->providers))))
        goto out;
    size_t n_all = 0;
    for (size_t k = 0; k < N_BUILTINS; k++)
        for (size_t m = 0; m < 2; m++)
            n_all += builtins[k].models[m] != NULL;
    for (size_t k = 0; k < N_BUILTINS; k++) {
        const struct builtin *b = &builtins[k];
        if (!env(b->env))
            continue;
        struct cfg_provider *p = add_provider(c, b->name, CFG_KIND_OPENAI, 2);
        if (!p || add_url(p, b->base_url, env(b->env)) != GX_OK)
            goto out;
        for (size_t m = 0; m < 2 && b->models[m]; m++)
            if (add_model(p, b->models[m], b->upstreams[m]) != GX_OK)
                goto out;
    }
    if (relay) {
        struct cfg_provider *p =
            add_provider(c, "relay", CFG_KIND_OPENAI, n_all);
        if (!p || add_url(p, relay, env("LLMUX_RELAY_KEY")) != GX_OK)
            goto out;
        for (size_t k = 0; k < N_BUILTINS; k++)
            for (size_t m = 0; m < 2 && builtins[k].models[m]; m++)
                if (add_model(p, builtins[k].models[m], NULL) != GX_OK)
                    goto out;
    }
    const char *model = env("LLMUX_MODEL");
    if (model) {
        struct cfg_provider *p = add_provider(c, "local", CFG_KIND_LOCAL, 1);
        if (!p || !(p->model_path = strdup(model)) ||
            add_model(p, "local", NULL) != GX_OK)
            goto out;
    }
    if ((st = add_auto_route(c, model != NULL)) != GX_OK)
        goto out;
    *out = c;
    c = NULL;
    st = GX_OK;
out:
    if (st == GX_ENOMEM)
        gx_errf(err, errlen, "built-in defaults: out of memory");
    cfg_free(c);
    return st;
}
