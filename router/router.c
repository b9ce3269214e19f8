/*
 * router: see router.h.  Priority order only for now.
 */
#include "router.h"

size_t
rt_plan_make(const struct cfg *c, const char *model, struct rt_plan *plan)
{
    plan->route = NULL;
    plan->n = cfg_resolve(c, model, &plan->route, plan->targets,
                          RT_MAX_TARGETS);
    plan->max_attempts = c->failover.max_attempts > 0
                             ? c->failover.max_attempts
                             : 1;
    return plan->n;
}

int
rt_status_retryable(const struct cfg *c, int http_status)
{
    for (size_t i = 0; i < c->failover.n_retry_on_status; i++)
        if (c->failover.retry_on_status[i] == http_status)
            return 1;
    return 0;
}
