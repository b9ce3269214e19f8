/*
 * registry.c: the provider kinds built into llmux, one line each, and the
 * registry of provider instances made from a config (providers.h tells
 * their life: one registry per config generation, a reference per call,
 * the last reference frees).  A new kind is one file (its pv_ops) plus one
 * line here.
 *
 * A registry is an array parallel to its config's providers: entry k is
 * provider k's instance, NULL for kinds without one.  It is immutable once
 * made, so every thread reads it without a lock; the references are
 * atomics.  Only the count of instances not yet freed is shared process
 * state (pv_registry_drain waits on it at exit).
 */
#include "providers.h"
#include "providers_int.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    enum cfg_kind kind;
    const struct pv_ops *ops;
} kinds[] = {
    {CFG_KIND_OPENAI, &pv_openai_ops},
    {CFG_KIND_LOCAL, &pv_local_ops},
    {CFG_KIND_ANTHROPIC, &pv_anthropic_ops},
    {CFG_KIND_GEMINI, &pv_gemini_ops},
};

const struct pv_ops *
pv_ops_for(enum cfg_kind kind)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (kinds[i].kind == kind)
            return kinds[i].ops;
    return NULL;
}

/* ---- instances --------------------------------------------------------- */

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cv = PTHREAD_COND_INITIALIZER;
static long live; /* instances made and not yet gone, under live_mu */

void
pv_inst_init(struct pv_inst *i, const struct pv_ops *ops, const char *name)
{
    i->ops = ops;
    atomic_store(&i->refs, 1);
    snprintf(i->name, sizeof(i->name), "%s", name ? name : "");
    pthread_mutex_lock(&live_mu);
    live++;
    pthread_mutex_unlock(&live_mu);
}

void
pv_inst_ref(struct pv_inst *i)
{
    atomic_fetch_add(&i->refs, 1);
}

void
pv_inst_unref(struct pv_inst *i)
{
    if (i && atomic_fetch_sub(&i->refs, 1) == 1)
        i->ops->inst_free(i);
}

void
pv_inst_gone(void)
{
    pthread_mutex_lock(&live_mu);
    live--;
    pthread_cond_broadcast(&live_cv);
    pthread_mutex_unlock(&live_mu);
}

void
pv_registry_drain(void)
{
    pthread_mutex_lock(&live_mu);
    while (live > 0)
        pthread_cond_wait(&live_cv, &live_mu);
    pthread_mutex_unlock(&live_mu);
}

/* ---- the registry ------------------------------------------------------ */

struct pv_registry {
    const struct cfg *cfg;
    struct pv_inst **inst; /* [cfg->n_providers], NULL: no instance */
};

void
pv_registry_free(struct pv_registry *r)
{
    if (!r)
        return;
    for (size_t k = 0; k < r->cfg->n_providers; k++)
        pv_inst_unref(r->inst[k]);
    free(r->inst);
    free(r);
}

/* prev's instance of the provider named name, if it has kind ops. */
static struct pv_inst *
prev_inst(const struct pv_registry *prev, const char *name,
          const struct pv_ops *ops)
{
    if (!prev)
        return NULL;
    const struct cfg_provider *p = cfg_provider_find(prev->cfg, name);
    struct pv_inst *i = p ? pv_registry_get(prev, p) : NULL;
    return i && i->ops == ops ? i : NULL;
}

enum gx_status
pv_registry_new(const struct cfg *c, const struct pv_registry *prev,
                struct pv_registry **out, char *err, size_t errlen)
{
    enum gx_status st = GX_ENOMEM;
    struct pv_registry *r = calloc(1, sizeof(*r));
    if (!r || !(r->inst = calloc(c->n_providers ? c->n_providers : 1,
                                 sizeof(*r->inst)))) {
        gx_errf(err, errlen, "out of memory");
        free(r);
        return GX_ENOMEM;
    }
    r->cfg = c;
    for (size_t k = 0; k < c->n_providers; k++) {
        const struct cfg_provider *p = &c->providers[k];
        const struct pv_ops *ops = pv_ops_for(p->kind);
        if (!ops || !ops->inst_new)
            continue;
        char why[768] = "";
        st = ops->inst_new(p, prev_inst(prev, p->name, ops), &r->inst[k],
                           why, sizeof(why));
        if (st != GX_OK) {
            gx_errf(err, errlen, "provider %s: %s", p->name, why);
            r->inst[k] = NULL;
            goto out;
        }
    }
    st = GX_OK;
    *out = r;
    r = NULL;
out:
    pv_registry_free(r);
    return st;
}

struct pv_inst *
pv_registry_get(const struct pv_registry *r, const struct cfg_provider *p)
{
    if (!r || !p)
        return NULL;
    const struct cfg *c = r->cfg;
    /* by address first (equality: p may point into another config) */
    for (size_t k = 0; k < c->n_providers; k++)
        if (&c->providers[k] == p)
            return r->inst[k];
    for (size_t k = 0; k < c->n_providers; k++)
        if (!strcmp(c->providers[k].name, p->name))
            return r->inst[k];
    return NULL;
}

struct pv_inst *
pv_registry_nth(const struct pv_registry *r, const struct pv_ops *ops,
                size_t i, const struct cfg_provider **prov)
{
    for (size_t k = 0; r && k < r->cfg->n_providers; k++) {
        if (!r->inst[k] || r->inst[k]->ops != ops)
            continue;
        if (i-- == 0) {
            if (prov)
                *prov = &r->cfg->providers[k];
            return r->inst[k];
        }
    }
    return NULL;
}

size_t
pv_registry_count(const struct pv_registry *r, const struct pv_ops *ops)
{
    size_t n = 0;
    for (size_t k = 0; r && k < r->cfg->n_providers; k++)
        n += r->inst[k] && r->inst[k]->ops == ops;
    return n;
}
