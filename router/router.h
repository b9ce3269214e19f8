/*
 * router: turns a request's "model" into an ordered list of attempts
 * (DESIGN.md sections 5 and 8).  This first version resolves the model
 * through config/ and keeps the route's order (priority); the policies,
 * provider health, circuit breakers and hedging arrive with the router
 * issue and plug in behind rt_plan without changing its callers.
 *
 * Threads: rt_plan only reads the immutable cfg; any thread may call it.
 */
#ifndef LLMUX_ROUTER_H
#define LLMUX_ROUTER_H

#include <stddef.h>

#include "../config/config.h"

#define RT_MAX_TARGETS 16

struct rt_plan {
    const struct cfg_route *route; /* NULL when model was not a route */
    size_t n;                      /* 0 = unknown model */
    struct cfg_target targets[RT_MAX_TARGETS]; /* in the order to try */
    int max_attempts;
};

/* Fills *plan for model; returns plan->n (0 when the model is unknown). */
size_t rt_plan_make(const struct cfg *c, const char *model,
                    struct rt_plan *plan);

/* 1 if an attempt that ended with this HTTP status may move on to the next
 * target (config failover.retry_on_status). */
int rt_status_retryable(const struct cfg *c, int http_status);

#endif
