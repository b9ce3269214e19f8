/*
 * router: policies, provider health and circuit breakers (see router.h for
 * the contract and the gateway's calling sequence).
 *
 * Layout: one struct rt_slot per (provider, model) of the cfg, in one
 * array allocated at rt_router_new; slot index = base[provider] + model.
 * Each slot has its own mutex, held only for a few hundred instructions
 * (no I/O, no allocation), so workers reporting on different targets never
 * meet and workers on the same target wait at most for one histogram walk.
 * A plan locks the slots of its targets one after the other, never two at
 * once, so there is no lock order to get wrong.
 *
 * Latency histogram: log buckets with 4 linear sub-buckets per power of
 * two of microseconds: bucket(v) = 4*msb(v) + the two bits below the msb
 * (v < 4: bucket v).  A bucket [lo, hi) has hi - lo = lo/(4+k) for
 * k = 0..3, so reporting the midpoint is within 12.5% of any value in it.
 * Values are capped at 2^31-1 us (~36 min), the top bucket is 123.
 * Two windows of RT_WINDOW_MS rotate (current, previous); quantiles are
 * read over both, so they follow the last one to two minutes.  When both
 * windows are empty the EWMAs are forgotten too: the target has "no
 * samples" again and the latency/cost policies re-try it.
 */
#include "router.h"

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../providers/providers.h"

#define RT_HIST_BUCKETS 128
#define RT_EWMA_ALPHA 0.3
#define RT_LAT_CAP_US ((int64_t)INT32_MAX)

enum rt_state { RT_ST_CLOSED = 0, RT_ST_OPEN = 1, RT_ST_HALF = 2 };

struct rt_hist {
    uint32_t n;
    uint32_t c[RT_HIST_BUCKETS];
};

struct rt_slot {
    pthread_mutex_t mu;
    struct cfg_target t;
    /* circuit */
    enum rt_state state;
    int64_t open_until_us;  /* RT_ST_OPEN: back as half-open at this time */
    int probe_busy;         /* RT_ST_HALF: the one probe is running */
    int64_t probe_since_us;
    int64_t retry_until_us; /* Retry-After cooldown end; 0 = none */
    int retry_rate_limited; /* that cooldown came with a 429 */
    /* counters */
    int64_t requests, failures, consec, in_flight;
    /* error-rate ring: 1 = failure, over the last RT_ERR_WINDOW outcomes */
    uint8_t ring[RT_ERR_WINDOW];
    int ring_pos, ring_n, ring_fail;
    /* latency: windows [0] current, [1] previous */
    int64_t win_start_us;
    struct rt_hist ttfb[2], total[2];
    double ewma_ttfb_us, ewma_total_us; /* < 0: no sample */
};

struct rt_router {
    const struct cfg *cfg;
    size_t *base;  /* [n_providers] first slot of each provider */
    struct rt_slot *slots;
    size_t n_slots;
    _Atomic uint64_t rng;
    int64_t (*now_fn)(void *ud);
    void *now_ud;
};

/* ------------------------------------------------------------------ */
/* Histogram.                                                           */

static int
hist_bucket(int64_t v)
{
    if (v < 0)
        v = 0;
    if (v > RT_LAT_CAP_US)
        v = RT_LAT_CAP_US;
    if (v < 4)
        return (int)v;
    int msb = 63 - __builtin_clzll((unsigned long long)v);
    return msb * 4 + (int)((v >> (msb - 2)) & 3);
}

/* Midpoint of bucket b, in microseconds. */
static double
hist_mid(int b)
{
    if (b < 4)
        return b + 0.5;
    int msb = b / 4, k = b % 4;
    double lo = (double)((int64_t)(4 + k) << (msb - 2));
    double w = (double)((int64_t)1 << (msb - 2));
    return lo + w / 2;
}

/* Quantile q of a and b together, in microseconds; -1 when empty. */
static double
hist_quantile(const struct rt_hist *a, const struct rt_hist *b, double q)
{
    uint64_t n = (uint64_t)a->n + b->n;
    if (n == 0)
        return -1;
    uint64_t rank = (uint64_t)(q * (double)n);
    if ((double)rank < q * (double)n)
        rank++;
    if (rank < 1)
        rank = 1;
    uint64_t cum = 0;
    for (int i = 0; i < RT_HIST_BUCKETS; i++) {
        cum += (uint64_t)a->c[i] + b->c[i];
        if (cum >= rank)
            return hist_mid(i);
    }
    return hist_mid(RT_HIST_BUCKETS - 1);
}

static void
hist_add(struct rt_hist *h, int64_t v)
{
    h->c[hist_bucket(v)]++;
    h->n++;
}

/* ------------------------------------------------------------------ */
/* Slots.                                                               */

/* The router's clock only times cooldowns, windows and probe ages
 * (latencies come measured from providers/), so a few ms of resolution
 * is plenty: CLOCK_MONOTONIC_COARSE reads a cached value, where the precise
 * clock was a third of the plan+begin+report time on our VMs. */
static int64_t
rt_now(const struct rt_router *rt)
{
    if (rt->now_fn)
        return rt->now_fn(rt->now_ud);
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
#endif
    return gx_mono_us();
}

static struct rt_slot *
slot_of(const struct rt_router *rt, struct cfg_target t)
{
    if (t.provider >= rt->cfg->n_providers ||
        t.model >= rt->cfg->providers[t.provider].n_models)
        return NULL;
    return &rt->slots[rt->base[t.provider] + t.model];
}

/* Caller holds s->mu.  Rotates the latency windows up to now. */
static void
slot_rotate(struct rt_slot *s, int64_t now)
{
    const int64_t w = (int64_t)RT_WINDOW_MS * 1000;
    int64_t age = now - s->win_start_us;
    if (age < w)
        return;
    if (age >= 2 * w) {
        memset(s->ttfb, 0, sizeof(s->ttfb));
        memset(s->total, 0, sizeof(s->total));
        s->win_start_us = now;
    } else {
        s->ttfb[1] = s->ttfb[0];
        s->total[1] = s->total[0];
        memset(&s->ttfb[0], 0, sizeof(s->ttfb[0]));
        memset(&s->total[0], 0, sizeof(s->total[0]));
        s->win_start_us += w;
    }
    if (s->ttfb[0].n + s->ttfb[1].n == 0)
        s->ewma_ttfb_us = -1;
    if (s->total[0].n + s->total[1].n == 0)
        s->ewma_total_us = -1;
}

/* Caller holds s->mu.  An open circuit whose cooldown ended is half-open. */
static void
slot_tick(struct rt_slot *s, int64_t now)
{
    slot_rotate(s, now);
    if (s->state == RT_ST_OPEN && now >= s->open_until_us) {
        s->state = RT_ST_HALF;
        s->probe_busy = 0;
    }
    if (s->retry_until_us && now >= s->retry_until_us) {
        s->retry_until_us = 0;
        s->retry_rate_limited = 0;
    }
}

/* Caller holds s->mu, after slot_tick.  0 = in rotation, else why not. */
static int
slot_skip(const struct rt_slot *s, int64_t now)
{
    if (s->state == RT_ST_OPEN)
        return RT_SKIP_OPEN;
    if (s->retry_until_us)
        return s->retry_rate_limited ? RT_SKIP_RATE_LIMITED
                                     : RT_SKIP_RETRY_AFTER;
    if (s->state == RT_ST_HALF && s->probe_busy &&
        now - s->probe_since_us < (int64_t)RT_PROBE_STALE_MS * 1000)
        return RT_SKIP_PROBE_BUSY;
    return 0;
}

/* Caller holds s->mu: microseconds until s is back in rotation. */
static int64_t
slot_back_in(const struct rt_slot *s, int64_t now)
{
    int64_t until = 0;
    if (s->state == RT_ST_OPEN && s->open_until_us > until)
        until = s->open_until_us;
    if (s->retry_until_us > until)
        until = s->retry_until_us;
    if (s->state == RT_ST_HALF && s->probe_busy) {
        int64_t stale = s->probe_since_us + (int64_t)RT_PROBE_STALE_MS * 1000;
        if (stale > until)
            until = stale;
    }
    return until > now ? until - now : 0;
}

static void
slot_reset(struct rt_slot *s)
{
    s->state = RT_ST_CLOSED;
    s->open_until_us = s->probe_since_us = s->retry_until_us = 0;
    s->retry_rate_limited = 0;
    s->probe_busy = 0;
    s->requests = s->failures = s->consec = s->in_flight = 0;
    memset(s->ring, 0, sizeof(s->ring));
    s->ring_pos = s->ring_n = s->ring_fail = 0;
    memset(s->ttfb, 0, sizeof(s->ttfb));
    memset(s->total, 0, sizeof(s->total));
    s->ewma_ttfb_us = s->ewma_total_us = -1;
}

/* ------------------------------------------------------------------ */
/* Router object.                                                       */

struct rt_router *
rt_router_new(const struct cfg *c)
{
    struct rt_router *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return NULL;
    rt->cfg = c;
    size_t n = 0;
    if (c->n_providers) {
        rt->base = calloc(c->n_providers, sizeof(*rt->base));
        if (!rt->base)
            goto err;
    }
    for (size_t p = 0; p < c->n_providers; p++) {
        rt->base[p] = n;
        n += c->providers[p].n_models;
    }
    if (n > UINT32_MAX)
        goto err;
    if (n) {
        rt->slots = calloc(n, sizeof(*rt->slots));
        if (!rt->slots)
            goto err;
    }
    for (size_t p = 0; p < c->n_providers; p++) {
        for (size_t m = 0; m < c->providers[p].n_models; m++) {
            struct rt_slot *s = &rt->slots[rt->base[p] + m];
            if (pthread_mutex_init(&s->mu, NULL) != 0)
                goto err;
            rt->n_slots++;
            s->t = (struct cfg_target){p, m};
            slot_reset(s);
        }
    }
    uint64_t seed = (uint64_t)gx_mono_us() ^ ((uint64_t)gx_now_ms() << 20);
    const char *env = getenv("LLMUX_ROUTER_SEED");
    if (env && *env)
        seed = strtoull(env, NULL, 10);
    atomic_init(&rt->rng, seed);
    return rt;
err:
    rt_router_free(rt);
    return NULL;
}

void
rt_router_free(struct rt_router *rt)
{
    if (!rt)
        return;
    for (size_t i = 0; i < rt->n_slots; i++)
        pthread_mutex_destroy(&rt->slots[i].mu);
    free(rt->slots);
    free(rt->base);
    free(rt);
}

void
rt_router_seed(struct rt_router *rt, uint64_t seed)
{
    atomic_store(&rt->rng, seed);
}

void
rt_router_set_clock(struct rt_router *rt, int64_t (*now_us)(void *ud),
                    void *ud)
{
    rt->now_fn = now_us;
    rt->now_ud = ud;
}

void
rt_router_adopt(struct rt_router *rt, const struct rt_router *old)
{
    if (!rt || !old)
        return;
    int64_t now_new = rt_now(rt), now_old = rt_now(old);
    for (size_t i = 0; i < rt->n_slots; i++) {
        struct rt_slot *s = &rt->slots[i];
        const struct cfg_provider *p = &rt->cfg->providers[s->t.provider];
        const struct cfg_model *m = &p->models[s->t.model];
        const struct cfg_provider *op = cfg_provider_find(old->cfg, p->name);
        if (!op)
            continue;
        size_t om = 0;
        while (om < op->n_models && strcmp(op->models[om].name, m->name))
            om++;
        if (om == op->n_models)
            continue;
        struct rt_slot *o =
            (struct rt_slot *)&old->slots[old->base[op - old->cfg->providers] +
                                          om];
        pthread_mutex_lock(&o->mu);
        pthread_mutex_lock(&s->mu);
        /* Everything after mu and t (state is the first such field). */
        size_t off = offsetof(struct rt_slot, state);
        memcpy((char *)s + off, (const char *)o + off, sizeof(*s) - off);
        /* Times move to the new clock's origin; old attempts report to the
         * old router, so nothing is in flight here. */
        int64_t d = now_new - now_old;
        if (s->open_until_us)
            s->open_until_us += d;
        if (s->retry_until_us)
            s->retry_until_us += d;
        s->win_start_us += d;
        s->in_flight = 0;
        s->probe_busy = 0;
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_unlock(&o->mu);
    }
}

static uint64_t
rt_rand(struct rt_router *rt)
{
    /* splitmix64 over an atomic counter: lock-free, and one thread with a
     * fixed seed sees a fixed sequence. */
    uint64_t z = atomic_fetch_add(&rt->rng, 0x9E3779B97F4A7C15ULL) +
                 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------ */
/* Plans.                                                               */

struct cand {
    struct cfg_target t;
    size_t idx;        /* position in the route (config order) */
    double weight;
    int64_t cost;      /* pUSD, saturating */
    double ewma;       /* us, -1 = no sample */
    int slow;          /* cost: p95 over max_latency_ms */
    int failing;       /* no sample, and its last attempt failed */
};

static int64_t
sat_mul_add(int64_t acc, int64_t a, int64_t b)
{
    if (a <= 0 || b <= 0)
        return acc;
    if (a > INT64_MAX / b)
        return INT64_MAX;
    int64_t p = a * b;
    return acc > INT64_MAX - p ? INT64_MAX : acc + p;
}

int64_t
rt_expected_cost(const struct cfg_model *m, int64_t est_prompt_tokens,
                 int64_t completion_cap)
{
    /* completion_cap as the parse made it (the default already in for an
     * absent cap), so 0 is none: echo with max_tokens 0 only scores its
     * prompt and an embedding has no completion (sat_mul_add adds
     * nothing for a count <= 0) */
    return sat_mul_add(sat_mul_add(0, est_prompt_tokens, m->input_pusd),
                       completion_cap, m->output_pusd);
}

/* Negative if x goes before y. */
static int
cand_cmp(enum cfg_policy pol, const struct cand *x, const struct cand *y)
{
    switch (pol) {
    case CFG_POLICY_COST:
        if (x->slow != y->slow)
            return x->slow - y->slow;
        if (x->cost != y->cost)
            return x->cost < y->cost ? -1 : 1;
        {
            double ex = x->ewma < 0 ? 0 : x->ewma;
            double ey = y->ewma < 0 ? 0 : y->ewma;
            if (ex != ey)
                return ex < ey ? -1 : 1;
        }
        break;
    case CFG_POLICY_LATENCY:
        /* Unknown first (so it gets a sample), then known by EWMA, then
         * unknown-and-failing: a target that only ever failed never gets a
         * sample and would otherwise stay "unknown" and first forever. */
        if (x->failing != y->failing)
            return x->failing - y->failing;
        if ((x->ewma < 0) != (y->ewma < 0))
            return x->ewma < 0 ? -1 : 1;
        if (x->ewma != y->ewma)
            return x->ewma < y->ewma ? -1 : 1;
        break;
    case CFG_POLICY_WEIGHTED:
        if (x->weight != y->weight)
            return x->weight > y->weight ? -1 : 1;
        break;
    default:
        break;
    }
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static void
cand_sort(enum cfg_policy pol, struct cand *a, size_t n)
{
    for (size_t i = 1; i < n; i++) { /* stable insertion sort, n <= 16 */
        struct cand v = a[i];
        size_t j = i;
        while (j > 0 && cand_cmp(pol, &v, &a[j - 1]) < 0) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

static int
same_target(struct cfg_target a, struct cfg_target b)
{
    return a.provider == b.provider && a.model == b.model;
}

static void
plan_push(struct rt_plan *plan, struct cfg_target t)
{
    for (size_t k = 0; k < plan->n; k++)
        if (same_target(plan->targets[k], t))
            return;
    if (plan->n < RT_MAX_TARGETS)
        plan->targets[plan->n++] = t;
}

size_t
rt_plan_route(struct rt_router *rt, const char *model,
              int64_t est_prompt_tokens, int64_t completion_cap,
              struct rt_plan *plan)
{
    const struct cfg *c = rt->cfg;
    struct cfg_target all[RT_MAX_TARGETS];
    memset(plan, 0, sizeof(*plan));
    plan->max_attempts = c->failover.max_attempts > 0
                             ? c->failover.max_attempts
                             : 1;
    size_t nall = cfg_resolve(c, model, &plan->route, all, RT_MAX_TARGETS);
    plan->resolved = nall;
    if (nall == 0)
        return 0;
    const struct cfg_route *route = plan->route;
    enum cfg_policy pol = route ? route->policy : CFG_POLICY_PRIORITY;
    /* cfg_resolve put the route's targets first, then its fallback. */
    size_t npol = route ? (route->n_targets < nall ? route->n_targets : nall)
                        : nall;
    if (est_prompt_tokens < 0)
        est_prompt_tokens = 0;
    int64_t max_lat_us =
        route && route->max_latency_ms > 0 ? (int64_t)route->max_latency_ms *
                                                 1000
                                           : 0;

    struct cand cand[RT_MAX_TARGETS];
    size_t nc = 0;
    int fallback_ok = 0;
    int64_t now = rt_now(rt);
    int64_t back_min = 0;
    for (size_t i = 0; i < nall; i++) {
        struct rt_slot *s = slot_of(rt, all[i]);
        if (!s)
            continue;
        pthread_mutex_lock(&s->mu);
        slot_tick(s, now);
        int skip = slot_skip(s, now);
        struct cand cd = {.t = all[i], .idx = i, .ewma = s->ewma_ttfb_us};
        cd.failing = cd.ewma < 0 && s->consec > 0;
        if (!skip && max_lat_us > 0 && pol == CFG_POLICY_COST) {
            double p95 = hist_quantile(&s->ttfb[0], &s->ttfb[1], 0.95);
            cd.slow = p95 > (double)max_lat_us;
        }
        int64_t back = skip ? slot_back_in(s, now) : 0;
        pthread_mutex_unlock(&s->mu);
        if (skip) {
            /* A target listed twice is reported once. */
            int dup = 0;
            for (size_t k = 0; k < plan->n_skipped && !dup; k++)
                dup = same_target(plan->skipped[k], all[i]);
            if (!dup) {
                plan->skipped[plan->n_skipped] = all[i];
                plan->skip_reason[plan->n_skipped++] = (enum rt_skip)skip;
                if (back > 0 && (back_min == 0 || back < back_min))
                    back_min = back;
            }
            continue;
        }
        if (i >= npol) {
            fallback_ok = 1;
            continue;
        }
        const struct cfg_model *m =
            &c->providers[all[i].provider].models[all[i].model];
        cd.cost = rt_expected_cost(m, est_prompt_tokens, completion_cap);
        if (route && route->weights && i < route->n_targets)
            cd.weight = route->weights[i] > 0 ? route->weights[i] : 0;
        cand[nc++] = cd;
    }

    if (pol == CFG_POLICY_WEIGHTED && nc > 0) {
        double sum = 0;
        for (size_t i = 0; i < nc; i++)
            sum += cand[i].weight;
        size_t pick = 0;
        if (sum > 0) {
            double r = (double)(rt_rand(rt) >> 11) * 0x1.0p-53 * sum;
            double acc = 0;
            pick = nc;
            for (size_t i = 0; i < nc; i++) {
                if (cand[i].weight <= 0)
                    continue;
                acc += cand[i].weight;
                if (r < acc) {
                    pick = i;
                    break;
                }
            }
            if (pick == nc) { /* rounding: the last weighted one */
                for (size_t i = nc; i-- > 0;)
                    if (cand[i].weight > 0) {
                        pick = i;
                        break;
                    }
            }
        }
        plan_push(plan, cand[pick].t);
        cand[pick] = cand[--nc];
        cand_sort(pol, cand, nc);
    } else {
        cand_sort(pol, cand, nc);
    }
    for (size_t i = 0; i < nc; i++)
        plan_push(plan, cand[i].t);
    if (fallback_ok)
        plan_push(plan, all[nall - 1]);
    if (plan->n == 0)
        plan->retry_after_ms = back_min > 0 ? (back_min + 999) / 1000 : 1;
    return plan->n;
}

int
rt_attempt_begin(struct rt_router *rt, const struct rt_plan *plan, size_t i,
                 struct rt_attempt *a)
{
    if (i >= plan->n)
        return 0;
    struct rt_slot *s = slot_of(rt, plan->targets[i]);
    if (!s)
        return 0;
    int64_t now = rt_now(rt);
    int go = 0;
    pthread_mutex_lock(&s->mu);
    slot_tick(s, now);
    if (!slot_skip(s, now)) {
        go = 1;
        a->probe = s->state == RT_ST_HALF;
        if (a->probe) {
            s->probe_busy = 1;
            s->probe_since_us = now;
        }
        s->in_flight++;
    }
    pthread_mutex_unlock(&s->mu);
    if (go) {
        a->target = plan->targets[i];
        a->slot = (uint32_t)(s - rt->slots);
        a->reported = 0;
    }
    return go;
}

/* rt_report; rate_limited: the Retry-After came with a 429 (the target
 * is then out of rotation as rate limited, not as unavailable). */
static void
report(struct rt_router *rt, struct rt_attempt *a, enum rt_outcome outcome,
       int64_t ttfb_us, int64_t total_us, int retry_after_s, int rate_limited)
{
    if (!a || a->reported || a->slot >= rt->n_slots)
        return;
    a->reported = 1;
    struct rt_slot *s = &rt->slots[a->slot];
    const struct cfg_failover *fo = &rt->cfg->failover;
    int64_t now = rt_now(rt);
    pthread_mutex_lock(&s->mu);
    slot_tick(s, now);
    if (s->in_flight > 0)
        s->in_flight--;
    int probe = a->probe && s->state == RT_ST_HALF;
    if (outcome == RT_CANCELLED) {
        if (probe)
            s->probe_busy = 0;
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->requests++;
    int fail = outcome == RT_FAILURE;
    if (s->ring_n == RT_ERR_WINDOW)
        s->ring_fail -= s->ring[s->ring_pos];
    else
        s->ring_n++;
    s->ring[s->ring_pos] = (uint8_t)fail;
    s->ring_fail += fail;
    s->ring_pos = (s->ring_pos + 1) % RT_ERR_WINDOW;

    if (!fail) {
        if (outcome == RT_SUCCESS) {
            if (ttfb_us >= 0) {
                hist_add(&s->ttfb[0], ttfb_us);
                s->ewma_ttfb_us =
                    s->ewma_ttfb_us < 0
                        ? (double)ttfb_us
                        : s->ewma_ttfb_us +
                              RT_EWMA_ALPHA * ((double)ttfb_us - s->ewma_ttfb_us);
            }
            if (total_us >= 0) {
                hist_add(&s->total[0], total_us);
                s->ewma_total_us =
                    s->ewma_total_us < 0
                        ? (double)total_us
                        : s->ewma_total_us +
                              RT_EWMA_ALPHA *
                                  ((double)total_us - s->ewma_total_us);
            }
        }
        s->consec = 0;
        if (probe) {
            s->state = RT_ST_CLOSED;
            s->probe_busy = 0;
        }
    } else {
        s->failures++;
        s->consec++;
        if (retry_after_s > 0) {
            int64_t sec = retry_after_s < RT_RETRY_AFTER_MAX_S
                              ? retry_after_s
                              : RT_RETRY_AFTER_MAX_S;
            int64_t until = now + sec * 1000000;
            if (until > s->retry_until_us) {
                s->retry_until_us = until;
                s->retry_rate_limited = rate_limited;
            }
        }
        int64_t cool = (int64_t)(fo->circuit_cooldown_ms > 0
                                     ? fo->circuit_cooldown_ms
                                     : 0) *
                       1000;
        if (probe) {
            s->state = RT_ST_OPEN;
            s->open_until_us = now + cool;
            s->probe_busy = 0;
        } else if (s->state == RT_ST_CLOSED && fo->circuit_failures > 0 &&
                   s->consec >= fo->circuit_failures) {
            s->state = RT_ST_OPEN;
            s->open_until_us = now + cool;
        }
    }
    pthread_mutex_unlock(&s->mu);
}

void
rt_report(struct rt_router *rt, struct rt_attempt *a, enum rt_outcome outcome,
          int64_t ttfb_us, int64_t total_us, int retry_after_s)
{
    report(rt, a, outcome, ttfb_us, total_us, retry_after_s, 0);
}

int
rt_is_refusal(const struct pv_result *res)
{
    return res->outcome == PV_ERR_STATUS && res->other_may_serve &&
           res->http_status >= 400 && res->http_status < 500;
}

enum rt_outcome
rt_outcome_of(const struct cfg *c, const struct pv_result *res)
{
    switch (res->outcome) {
    case PV_OK:
        return RT_SUCCESS;
    case PV_ERR_STATUS:
        return rt_status_retryable(c, res->http_status) ? RT_FAILURE
                                                        : RT_REJECTED;
    case PV_ERR_INTERNAL:
        return RT_CANCELLED;
    default:
        return RT_FAILURE;
    }
}

void
rt_report_pv(struct rt_router *rt, struct rt_attempt *a, const struct cfg *c,
             const struct pv_result *res)
{
    report(rt, a, rt_outcome_of(c, res), res->ttfb_us, res->total_us,
           res->retry_after_s,
           res->outcome == PV_ERR_STATUS && res->http_status == 429);
}

static const char *
skip_str(enum rt_skip k)
{
    switch (k) {
    case RT_SKIP_OPEN:
        return "circuit open";
    case RT_SKIP_PROBE_BUSY:
        return "circuit half-open, probe running";
    case RT_SKIP_RETRY_AFTER:
        return "unavailable (Retry-After)";
    case RT_SKIP_RATE_LIMITED:
        return "rate limited (429 with Retry-After)";
    }
    return "unavailable";
}

char *
rt_plan_explain(const struct rt_plan *plan, const struct cfg *c, char *buf,
                size_t len)
{
    if (!len)
        return buf;
    buf[0] = '\0';
    size_t off = 0;
    for (size_t i = 0; i < plan->n_skipped && off < len; i++) {
        struct cfg_target t = plan->skipped[i];
        const struct cfg_provider *p = &c->providers[t.provider];
        int w = snprintf(buf + off, len - off, "%s%s@%s: %s", i ? "; " : "",
                         p->models[t.model].name, p->name,
                         skip_str(plan->skip_reason[i]));
        if (w < 0)
            break;
        off += (size_t)w;
    }
    return buf;
}

/* ------------------------------------------------------------------ */
/* Health views.                                                        */

static void
fill_health(struct rt_slot *s, int64_t now, struct rt_health *h)
{
    slot_tick(s, now);
    memset(h, 0, sizeof(*h));
    h->state = (int)s->state;
    h->requests = s->requests;
    h->failures = s->failures;
    h->consecutive_failures = s->consec;
    h->in_flight = s->in_flight;
    h->error_rate = s->ring_n ? (double)s->ring_fail / s->ring_n : 0;
    h->samples = (int64_t)s->ttfb[0].n + s->ttfb[1].n;
    h->ewma_ttfb_ms = s->ewma_ttfb_us < 0 ? -1 : s->ewma_ttfb_us / 1000;
    h->ewma_total_ms = s->ewma_total_us < 0 ? -1 : s->ewma_total_us / 1000;
    double v;
    v = hist_quantile(&s->ttfb[0], &s->ttfb[1], 0.50);
    h->p50_ttfb_ms = v < 0 ? -1 : v / 1000;
    v = hist_quantile(&s->ttfb[0], &s->ttfb[1], 0.95);
    h->p95_ttfb_ms = v < 0 ? -1 : v / 1000;
    v = hist_quantile(&s->total[0], &s->total[1], 0.50);
    h->p50_total_ms = v < 0 ? -1 : v / 1000;
    v = hist_quantile(&s->total[0], &s->total[1], 0.95);
    h->p95_total_ms = v < 0 ? -1 : v / 1000;
    int64_t back = slot_skip(s, now) ? slot_back_in(s, now) : 0;
    h->cooldown_ms = back > 0 ? (back + 999) / 1000 : 0;
}

int
rt_health_get(struct rt_router *rt, struct cfg_target t, struct rt_health *out)
{
    struct rt_slot *s = slot_of(rt, t);
    if (!s)
        return -1;
    int64_t now = rt_now(rt);
    pthread_mutex_lock(&s->mu);
    fill_health(s, now, out);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static json_t *
ms_or_null(double v)
{
    return v < 0 ? json_null() : json_real((double)(int64_t)(v * 10 + 0.5) / 10);
}

json_t *
rt_health_json(struct rt_router *rt)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    int64_t now = rt_now(rt);
    int64_t wall = gx_now_ms();
    static const char *const states[] = {"up", "open", "half_open"};
    for (size_t i = 0; i < rt->n_slots; i++) {
        struct rt_slot *s = &rt->slots[i];
        struct rt_health h;
        pthread_mutex_lock(&s->mu);
        fill_health(s, now, &h);
        pthread_mutex_unlock(&s->mu);
        const struct cfg_provider *p = &rt->cfg->providers[s->t.provider];
        const char *mname = p->models[s->t.model].name;
        char tname[512];
        snprintf(tname, sizeof(tname), "%s@%s", mname, p->name);
        json_t *o = json_pack(
            "{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:I, "
            "s:I, s:I, s:I, s:o}",
            "target", tname, "provider", p->name, "model", mname, "state",
            states[h.state], "ewma_ms", ms_or_null(h.ewma_ttfb_ms), "p50_ms",
            ms_or_null(h.p50_ttfb_ms), "p95_ms", ms_or_null(h.p95_ttfb_ms),
            "total_ewma_ms", ms_or_null(h.ewma_total_ms), "total_p50_ms",
            ms_or_null(h.p50_total_ms), "total_p95_ms",
            ms_or_null(h.p95_total_ms), "error_rate", h.error_rate,
            "requests", (json_int_t)h.requests, "failures",
            (json_int_t)h.failures, "consecutive_failures",
            (json_int_t)h.consecutive_failures, "in_flight",
            (json_int_t)h.in_flight, "cooldown_until",
            h.cooldown_ms > 0 ? json_integer(wall + h.cooldown_ms)
                              : json_null());
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* ------------------------------------------------------------------ */
/* The first version's calls.                                           */

size_t
rt_plan_make(const struct cfg *c, const char *model, struct rt_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    plan->n = cfg_resolve(c, model, &plan->route, plan->targets,
                          RT_MAX_TARGETS);
    plan->resolved = plan->n;
    plan->max_attempts = c->failover.max_attempts > 0
                             ? c->failover.max_attempts
                             : 1;
    return plan->n;
}

int
rt_plan_rate_limited(const struct rt_plan *plan)
{
    if (plan->n > 0 || plan->n_skipped == 0)
        return 0;
    for (size_t i = 0; i < plan->n_skipped; i++)
        if (plan->skip_reason[i] != RT_SKIP_RATE_LIMITED)
            return 0;
    return 1;
}

int
rt_status_provider_fault(int http_status)
{
    return http_status == 401 || http_status == 403;
}

int
rt_status_retryable(const struct cfg *c, int http_status)
{
    if (rt_status_provider_fault(http_status))
        return 1;
    for (size_t i = 0; i < c->failover.n_retry_on_status; i++)
        if (c->failover.retry_on_status[i] == http_status)
            return 1;
    return 0;
}
