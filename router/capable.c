/*
 * capable.c: narrowing a plan to the targets whose provider kind can serve
 * the request's inbound API (embeddings and legacy completions exist only
 * on OpenAI-format upstreams).  Applied after ordering, so the policy's
 * order among the capable targets is kept; out-of-rotation targets of an
 * incapable kind leave the skipped list too, so an explanation never
 * names a target that could not have served anyway.
 */
#include "router.h"

static size_t
keep(struct cfg_target *t, enum rt_skip *why, size_t n, const struct cfg *c,
     unsigned kinds)
{
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned bit = 1u << (unsigned)c->providers[t[i].provider].kind;
        if (!(kinds & bit))
            continue;
        t[out] = t[i];
        if (why)
            why[out] = why[i];
        out++;
    }
    return out;
}

size_t
rt_plan_keep_kinds(struct rt_plan *plan, const struct cfg *c, unsigned kinds)
{
    size_t before = plan->n + plan->n_skipped;
    plan->n = keep(plan->targets, NULL, plan->n, c, kinds);
    plan->n_skipped =
        keep(plan->skipped, plan->skip_reason, plan->n_skipped, c, kinds);
    if (plan->n)
        plan->retry_after_ms = 0;
    return before - plan->n - plan->n_skipped;
}
