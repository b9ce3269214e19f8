/*
 * Unit tests of router/: each policy's order on a real cfg (cfg_load_string),
 * the circuit breaker's transitions, Retry-After cooldowns, histogram
 * percentiles, the admin JSON and concurrent reporting.  Time is a fake
 * clock the test moves (rt_router_set_clock), so nothing waits or depends
 * on the machine's speed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "../router/router.h"
#include "../providers/providers.h"

static int64_t fake_now_us = 1000000;

static int64_t
fake_clock(void *ud)
{
    (void)ud;
    return fake_now_us;
}

/* cheap: 1/2 $/Mtok, mid: 2/8, dear: 10/30, free local. */
static const char *CFG_TEXT =
    "{\n"
    " \"require_keys\": false,\n"
    " \"providers\": {\n"
    "  \"a\": {\"kind\": \"openai\", \"base_url\": \"http://127.0.0.1:1/v1\",\n"
    "   \"models\": {\n"
    "    \"cheap\": {\"input_per_mtok\": 1, \"output_per_mtok\": 2},\n"
    "    \"mid\": {\"input_per_mtok\": 2, \"output_per_mtok\": 8},\n"
    "    \"dear\": {\"input_per_mtok\": 10, \"output_per_mtok\": 30},\n"
    "    \"inonly\": {\"input_per_mtok\": 50, \"output_per_mtok\": 1},\n"
    "    \"outonly\": {\"input_per_mtok\": 1, \"output_per_mtok\": 50}}},\n"
    "  \"b\": {\"kind\": \"openai\", \"base_url\": \"http://127.0.0.1:2/v1\",\n"
    "   \"models\": {\n"
    "    \"cheap\": {\"input_per_mtok\": 1, \"output_per_mtok\": 2},\n"
    "    \"mid\": {\"input_per_mtok\": 2, \"output_per_mtok\": 8}}}\n"
    " },\n"
    " \"routes\": {\n"
    "  \"prio\": {\"policy\": \"priority\",\n"
    "   \"targets\": [\"mid@a\", \"cheap@a\", \"dear@a\"],\n"
    "   \"fallback\": \"cheap@b\"},\n"
    "  \"w\": {\"policy\": \"weighted\",\n"
    "   \"targets\": [\"mid@a\", \"cheap@a\", \"dear@a\"],\n"
    "   \"weights\": [1, 3, 0]},\n"
    "  \"cost\": {\"policy\": \"cost\",\n"
    "   \"targets\": [\"cheap@a\", \"dear@a\", \"mid@a\"],\n"
    "   \"fallback\": \"mid@b\", \"max_latency_ms\": 500},\n"
    "  \"tie\": {\"policy\": \"cost\", \"targets\": [\"cheap@a\", \"cheap@b\"]},\n"
    "  \"io\": {\"policy\": \"cost\", \"targets\": [\"inonly@a\", "
    "\"outonly@a\"]},\n"
    "  \"lat\": {\"policy\": \"latency\",\n"
    "   \"targets\": [\"mid@a\", \"cheap@a\", \"mid@b\"]}\n"
    " },\n"
    " \"failover\": {\"circuit_failures\": 3, \"circuit_cooldown_ms\": 1000}\n"
    "}\n";

static struct cfg *cfg;

/* Target of "model@provider" in cfg. */
static struct cfg_target
tg(const char *name)
{
    struct cfg_target t[RT_MAX_TARGETS];
    size_t n = cfg_resolve(cfg, name, NULL, t, RT_MAX_TARGETS);
    if (n != 1) {
        fprintf(stderr, "no target %s\n", name);
        abort();
    }
    return t[0];
}

static int
is(struct cfg_target a, const char *name)
{
    struct cfg_target b = tg(name);
    return a.provider == b.provider && a.model == b.model;
}

/* The plan as "mid@a,cheap@a" into buf. */
static const char *
order(const struct rt_plan *p, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < p->n && off < len; i++) {
        const struct cfg_provider *pr = &cfg->providers[p->targets[i].provider];
        off += (size_t)snprintf(buf + off, len - off, "%s%s@%s", i ? "," : "",
                                pr->models[p->targets[i].model].name,
                                pr->name);
    }
    return buf;
}

static struct rt_router *
new_router(void)
{
    struct rt_router *rt = rt_router_new(cfg);
    if (rt) {
        rt_router_set_clock(rt, fake_clock, NULL);
        rt_router_seed(rt, 42);
    }
    return rt;
}

/* One attempt on target name, begun and reported. */
static int
attempt(struct rt_router *rt, const char *name, enum rt_outcome o,
        int64_t ttfb_us, int retry_after_s)
{
    struct rt_plan p;
    rt_plan_route(rt, name, 10, 10, &p);
    struct rt_attempt a;
    if (!rt_attempt_begin(rt, &p, 0, &a))
        return 0;
    rt_report(rt, &a, o, ttfb_us, ttfb_us >= 0 ? ttfb_us * 2 : -1,
              retry_after_s);
    return 1;
}

/* ------------------------------------------------------------------ */

static void
test_resolve_and_priority(void)
{
    struct rt_router *rt = new_router();
    struct rt_plan p;
    char b[256];
    T_EQ_INT(rt_plan_route(rt, "nope", 0, 0, &p), 0);
    T_EQ_INT(p.resolved, 0);
    T_EQ_INT(rt_plan_route(rt, "prio", 0, 0, &p), 4);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@a,cheap@a,dear@a,cheap@b");
    T_CHECK(p.route && !strcmp(p.route->name, "prio"));
    T_EQ_INT(p.max_attempts, 3);
    /* A bare model served by two providers: config order. */
    T_EQ_INT(rt_plan_route(rt, "cheap", 0, 0, &p), 2);
    T_EQ_STR(order(&p, b, sizeof(b)), "cheap@a,cheap@b");
    T_CHECK(p.route == NULL);
    T_EQ_INT(rt_plan_route(rt, "dear@a", 0, 0, &p), 1);
    /* The old call still works. */
    T_EQ_INT(rt_plan_make(cfg, "prio", &p), 4);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@a,cheap@a,dear@a,cheap@b");
    rt_router_free(rt);
}

static void
test_weighted(void)
{
    struct rt_router *rt = new_router();
    struct rt_plan p;
    char b[256];
    enum { DRAWS = 4000 };
    int first_mid = 0, first_cheap = 0, first_dear = 0;
    for (int i = 0; i < DRAWS; i++) {
        rt_plan_route(rt, "w", 0, 0, &p);
        T_EQ_INT(p.n, 3);
        if (is(p.targets[0], "mid@a")) {
            first_mid++;
            T_EQ_STR(order(&p, b, sizeof(b)), "mid@a,cheap@a,dear@a");
        } else if (is(p.targets[0], "cheap@a")) {
            first_cheap++;
            T_EQ_STR(order(&p, b, sizeof(b)), "cheap@a,mid@a,dear@a");
        } else {
            first_dear++;
        }
        if (t_fail > 20)
            break;
    }
    /* Weights 1:3:0 -> p(mid) = 0.25: sd = sqrt(4000*.25*.75) = 27.4;
     * 6 sd = 164 around 1000. */
    T_CHECK(first_mid > 1000 - 164 && first_mid < 1000 + 164);
    T_EQ_INT(first_cheap + first_mid, DRAWS);
    T_EQ_INT(first_dear, 0);
    /* Same seed, same sequence. */
    char s1[64] = "", s2[64] = "";
    rt_router_seed(rt, 7);
    for (int i = 0; i < 20; i++) {
        rt_plan_route(rt, "w", 0, 0, &p);
        s1[i] = is(p.targets[0], "mid@a") ? 'm' : 'c';
    }
    rt_router_seed(rt, 7);
    for (int i = 0; i < 20; i++) {
        rt_plan_route(rt, "w", 0, 0, &p);
        s2[i] = is(p.targets[0], "mid@a") ? 'm' : 'c';
    }
    T_EQ_STR(s1, s2);
    /* An open circuit on cheap: mid always first, weights renormalised. */
    for (int i = 0; i < 3; i++)
        T_CHECK(attempt(rt, "cheap@a", RT_FAILURE, -1, -1));
    for (int i = 0; i < 50; i++) {
        rt_plan_route(rt, "w", 0, 0, &p);
        T_EQ_STR(order(&p, b, sizeof(b)), "mid@a,dear@a");
        if (t_fail)
            break;
    }
    rt_router_free(rt);
}

static void
test_cost(void)
{
    struct rt_router *rt = new_router();
    struct rt_plan p;
    char b[256];
    rt_plan_route(rt, "cost", 1000, 100, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "cheap@a,mid@a,dear@a,mid@b");
    /* The expected cost depends on this request's shape: a long prompt
     * favours the cheap-input model, a long answer the cheap-output one. */
    rt_plan_route(rt, "io", 100000, 10, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "outonly@a,inonly@a");
    rt_plan_route(rt, "io", 10, 100000, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "inonly@a,outonly@a");
    /* Without max_tokens the parse's completion_cap is
     * PV_DEFAULT_COMPLETION_TOKENS (1024): 100 in: in-only 100*50+1024*1 =
     * 6024 < out-only 100*1+1024*50. */
    rt_plan_route(rt, "io", 100, PV_DEFAULT_COMPLETION_TOKENS, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "inonly@a,outonly@a");
    /* completion_cap 0 (echo with max_tokens 0 scores the prompt, an
     * embedding): the prompt alone, 100*1 < 100*50, not the default */
    rt_plan_route(rt, "io", 100, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "outonly@a,inonly@a");
    const struct cfg_provider *pa = &cfg->providers[tg("inonly@a").provider];
    const struct cfg_model *in = &pa->models[tg("inonly@a").model];
    T_EQ_INT(rt_expected_cost(in, 100, 0), 100 * in->input_pusd);
    T_EQ_INT(rt_expected_cost(in, 100, 7),
             100 * in->input_pusd + 7 * in->output_pusd);
    T_EQ_INT(rt_expected_cost(in, 100, PV_DEFAULT_COMPLETION_TOKENS),
             100 * in->input_pusd +
                 PV_DEFAULT_COMPLETION_TOKENS * in->output_pusd);
    /* Ties go to the lower latency. */
    rt_plan_route(rt, "tie", 10, 10, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "cheap@a,cheap@b");
    T_CHECK(attempt(rt, "cheap@a", RT_SUCCESS, 300000, -1));
    T_CHECK(attempt(rt, "cheap@b", RT_SUCCESS, 100000, -1));
    rt_plan_route(rt, "tie", 10, 10, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "cheap@b,cheap@a");
    /* cheap@a's p95 (300 ms) is under the 500 ms limit: still first. */
    rt_plan_route(rt, "cost", 1000, 100, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "cheap@a,mid@a,dear@a,mid@b");
    /* Slow samples push its p95 over max_latency_ms: it goes last of the
     * route's targets (the fallback stays last of all). */
    for (int i = 0; i < 5; i++)
        T_CHECK(attempt(rt, "cheap@a", RT_SUCCESS, 900000, -1));
    rt_plan_route(rt, "cost", 1000, 100, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@a,dear@a,cheap@a,mid@b");
    /* Two windows later the slow samples are gone and it is first again. */
    fake_now_us += 2LL * RT_WINDOW_MS * 1000 + 1;
    rt_plan_route(rt, "cost", 1000, 100, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "cheap@a,mid@a,dear@a,mid@b");
    rt_router_free(rt);
}

static void
test_latency(void)
{
    struct rt_router *rt = new_router();
    struct rt_plan p;
    char b[256];
    /* No samples: config order. */
    rt_plan_route(rt, "lat", 0, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@a,cheap@a,mid@b");
    /* mid@a has a sample, the others none: they are tried first. */
    T_CHECK(attempt(rt, "mid@a", RT_SUCCESS, 50000, -1));
    rt_plan_route(rt, "lat", 0, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "cheap@a,mid@b,mid@a");
    T_CHECK(attempt(rt, "cheap@a", RT_SUCCESS, 200000, -1));
    T_CHECK(attempt(rt, "mid@b", RT_SUCCESS, 20000, -1));
    rt_plan_route(rt, "lat", 0, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@b,mid@a,cheap@a");
    /* mid@b slows down: the EWMA moves it behind mid@a within a few
     * samples, then converges on the faster target. */
    int moved_after = -1;
    for (int i = 0; i < 10; i++) {
        T_CHECK(attempt(rt, "mid@b", RT_SUCCESS, 400000, -1));
        rt_plan_route(rt, "lat", 0, 0, &p);
        if (moved_after < 0 && is(p.targets[0], "mid@a"))
            moved_after = i + 1;
    }
    T_CHECK(moved_after >= 1 && moved_after <= 3);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@a,cheap@a,mid@b");
    struct rt_health h;
    T_EQ_INT(rt_health_get(rt, tg("mid@b"), &h), 0);
    T_NEAR(h.ewma_ttfb_ms, 400, 400 * 0.05);
    rt_router_free(rt);

    /* A target that only fails has no sample: it is not "unknown, try it
     * first" but last, until it answers once. */
    rt = new_router();
    T_CHECK(attempt(rt, "mid@a", RT_FAILURE, -1, -1));
    rt_plan_route(rt, "lat", 0, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "cheap@a,mid@b,mid@a");
    T_CHECK(attempt(rt, "cheap@a", RT_SUCCESS, 9000, -1));
    rt_plan_route(rt, "lat", 0, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@b,cheap@a,mid@a");
    T_CHECK(attempt(rt, "mid@a", RT_SUCCESS, 1000, -1));
    rt_plan_route(rt, "lat", 0, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@b,mid@a,cheap@a");
    rt_router_free(rt);
}

static void
test_circuit(void)
{
    struct rt_router *rt = new_router();
    struct rt_plan p;
    struct rt_attempt a, a2;
    struct rt_health h;
    char b[256];
    /* Two failures, a success: the count restarts. */
    T_CHECK(attempt(rt, "mid@a", RT_FAILURE, -1, -1));
    T_CHECK(attempt(rt, "mid@a", RT_FAILURE, -1, -1));
    T_CHECK(attempt(rt, "mid@a", RT_SUCCESS, 1000, -1));
    rt_health_get(rt, tg("mid@a"), &h);
    T_EQ_INT(h.consecutive_failures, 0);
    T_EQ_INT(h.state, 0);
    /* A 4xx answer is not the target's fault. */
    T_CHECK(attempt(rt, "mid@a", RT_FAILURE, -1, -1));
    T_CHECK(attempt(rt, "mid@a", RT_REJECTED, -1, -1));
    T_CHECK(attempt(rt, "mid@a", RT_FAILURE, -1, -1));
    T_CHECK(attempt(rt, "mid@a", RT_FAILURE, -1, -1));
    rt_health_get(rt, tg("mid@a"), &h);
    T_EQ_INT(h.state, 0);
    /* The third in a row opens it. */
    T_CHECK(attempt(rt, "mid@a", RT_FAILURE, -1, -1));
    rt_health_get(rt, tg("mid@a"), &h);
    T_EQ_INT(h.state, 1);
    T_EQ_INT(h.consecutive_failures, 3);
    T_EQ_INT(h.cooldown_ms, 1000);
    /* No plan includes it. */
    rt_plan_route(rt, "prio", 0, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "cheap@a,dear@a,cheap@b");
    T_EQ_INT(p.n_skipped, 1);
    T_EQ_INT(p.skip_reason[0], RT_SKIP_OPEN);
    T_EQ_STR(rt_plan_explain(&p, cfg, b, sizeof(b)), "mid@a: circuit open");
    /* Its only target: an empty plan that knows why and for how long. */
    T_EQ_INT(rt_plan_route(rt, "mid@a", 0, 0, &p), 0);
    T_EQ_INT(p.resolved, 1);
    T_EQ_INT(p.retry_after_ms, 1000);
    fake_now_us += 999 * 1000;
    T_EQ_INT(rt_plan_route(rt, "mid@a", 0, 0, &p), 0);
    /* Cooldown over: half-open, exactly one probe admitted. */
    fake_now_us += 1000;
    T_EQ_INT(rt_plan_route(rt, "mid@a", 0, 0, &p), 1);
    struct rt_plan p2 = p; /* a second request planned at the same time */
    T_CHECK(rt_attempt_begin(rt, &p, 0, &a));
    T_EQ_INT(a.probe, 1);
    T_CHECK(!rt_attempt_begin(rt, &p2, 0, &a2));
    T_EQ_INT(rt_plan_route(rt, "mid@a", 0, 0, &p2), 0);
    T_EQ_INT(p2.skip_reason[0], RT_SKIP_PROBE_BUSY);
    rt_health_get(rt, tg("mid@a"), &h);
    T_EQ_INT(h.state, 2);
    T_EQ_INT(h.in_flight, 1);
    /* The probe fails: open again for a full cooldown. */
    rt_report(rt, &a, RT_FAILURE, -1, -1, -1);
    rt_report(rt, &a, RT_SUCCESS, 1, 1, -1); /* second report ignored */
    rt_health_get(rt, tg("mid@a"), &h);
    T_EQ_INT(h.state, 1);
    T_EQ_INT(h.in_flight, 0);
    T_EQ_INT(rt_plan_route(rt, "mid@a", 0, 0, &p), 0);
    fake_now_us += 1000 * 1000;
    /* A cancelled probe frees the slot without a verdict. */
    T_EQ_INT(rt_plan_route(rt, "mid@a", 0, 0, &p), 1);
    T_CHECK(rt_attempt_begin(rt, &p, 0, &a));
    rt_report(rt, &a, RT_CANCELLED, -1, -1, -1);
    rt_health_get(rt, tg("mid@a"), &h);
    T_EQ_INT(h.state, 2);
    /* The next probe succeeds: closed, in every plan again. */
    T_EQ_INT(rt_plan_route(rt, "mid@a", 0, 0, &p), 1);
    T_CHECK(rt_attempt_begin(rt, &p, 0, &a));
    T_EQ_INT(a.probe, 1);
    rt_report(rt, &a, RT_SUCCESS, 1000, 2000, -1);
    rt_health_get(rt, tg("mid@a"), &h);
    T_EQ_INT(h.state, 0);
    T_EQ_INT(h.consecutive_failures, 0);
    rt_plan_route(rt, "prio", 0, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@a,cheap@a,dear@a,cheap@b");
    /* Closed: any number of concurrent attempts, none a probe. */
    T_CHECK(rt_attempt_begin(rt, &p, 0, &a));
    T_CHECK(rt_attempt_begin(rt, &p, 0, &a2));
    T_EQ_INT(a.probe + a2.probe, 0);
    rt_report(rt, &a, RT_SUCCESS, 1000, 2000, -1);
    rt_report(rt, &a2, RT_SUCCESS, 1000, 2000, -1);
    /* Every target of a route open: n == 0, resolved > 0. */
    for (int i = 0; i < 3; i++) {
        attempt(rt, "mid@a", RT_FAILURE, -1, -1);
        attempt(rt, "cheap@a", RT_FAILURE, -1, -1);
        attempt(rt, "mid@b", RT_FAILURE, -1, -1);
    }
    T_EQ_INT(rt_plan_route(rt, "lat", 0, 0, &p), 0);
    T_EQ_INT(p.resolved, 3);
    T_EQ_INT(p.n_skipped, 3);
    rt_router_free(rt);
}

static void
test_retry_after(void)
{
    struct rt_router *rt = new_router();
    struct rt_plan p;
    struct rt_health h;
    char b[256];
    /* One 429 with Retry-After: 2 takes it out for two seconds (the
     * circuit is still closed). */
    T_CHECK(attempt(rt, "cheap@a", RT_FAILURE, -1, 2));
    rt_health_get(rt, tg("cheap@a"), &h);
    T_EQ_INT(h.state, 0);
    T_EQ_INT(h.cooldown_ms, 2000);
    rt_plan_route(rt, "prio", 0, 0, &p);
    T_EQ_STR(order(&p, b, sizeof(b)), "mid@a,dear@a,cheap@b");
    T_EQ_INT(p.skip_reason[0], RT_SKIP_RETRY_AFTER);
    T_EQ_INT(rt_plan_route(rt, "cheap@a", 0, 0, &p), 0);
    T_EQ_INT(p.retry_after_ms, 2000);
    fake_now_us += 1999 * 1000;
    T_EQ_INT(rt_plan_route(rt, "cheap@a", 0, 0, &p), 0);
    fake_now_us += 1000;
    T_EQ_INT(rt_plan_route(rt, "cheap@a", 0, 0, &p), 1);
    /* A plan made before the cooldown: begin refuses the target. */
    struct rt_attempt a;
    T_CHECK(attempt(rt, "cheap@a", RT_FAILURE, -1, 5));
    T_CHECK(!rt_attempt_begin(rt, &p, 0, &a));
    /* A failure without Retry-After sets no cooldown; huge values are
     * capped. */
    T_CHECK(attempt(rt, "dear@a", RT_FAILURE, -1, -1));
    rt_health_get(rt, tg("dear@a"), &h);
    T_EQ_INT(h.cooldown_ms, 0);
    T_CHECK(attempt(rt, "dear@a", RT_FAILURE, -1, 1000000000));
    rt_health_get(rt, tg("dear@a"), &h);
    T_EQ_INT(h.cooldown_ms, (int64_t)RT_RETRY_AFTER_MAX_S * 1000);
    rt_router_free(rt);
}

/* An attempt on name reported from a provider result with this status. */
static int
attempt_status(struct rt_router *rt, const char *name, int status,
               int retry_after_s)
{
    struct rt_plan p;
    rt_plan_route(rt, name, 10, 10, &p);
    struct rt_attempt a;
    if (!rt_attempt_begin(rt, &p, 0, &a))
        return 0;
    struct pv_result res;
    memset(&res, 0, sizeof(res));
    res.outcome = PV_ERR_STATUS;
    res.http_status = status;
    res.retry_after_s = retry_after_s;
    res.ttfb_us = res.total_us = -1;
    rt_report_pv(rt, &a, cfg, &res);
    return 1;
}

static void
test_rate_limited_and_auth(void)
{
    struct rt_router *rt = new_router();
    struct rt_plan p;
    struct rt_health h;
    /* A 429's Retry-After: out of rotation as rate limited. */
    T_CHECK(attempt_status(rt, "cheap@a", 429, 4));
    T_EQ_INT(rt_plan_route(rt, "cheap@a", 0, 0, &p), 0);
    T_EQ_INT(p.skip_reason[0], RT_SKIP_RATE_LIMITED);
    T_EQ_INT(rt_plan_rate_limited(&p), 1);
    T_EQ_INT(p.retry_after_ms, 4000);
    /* A 503's: unavailable, and a plan with both is not "rate limited". */
    T_CHECK(attempt_status(rt, "dear@a", 503, 4));
    T_EQ_INT(rt_plan_route(rt, "dear@a", 0, 0, &p), 0);
    T_EQ_INT(p.skip_reason[0], RT_SKIP_RETRY_AFTER);
    T_EQ_INT(rt_plan_rate_limited(&p), 0);
    fake_now_us += 5000 * 1000; /* both back */
    T_EQ_INT(rt_plan_route(rt, "cheap@a", 0, 0, &p), 1);
    T_EQ_INT(rt_plan_rate_limited(&p), 0);
    /* 401 and 403: the provider refused our key, a failure of the target
     * (retryable, counted), whatever retry_on_status says. */
    T_EQ_INT(rt_status_retryable(cfg, 401), 1);
    T_EQ_INT(rt_status_retryable(cfg, 403), 1);
    T_EQ_INT(rt_status_retryable(cfg, 404), 0);
    T_CHECK(attempt_status(rt, "mid@a", 401, -1));
    T_CHECK(attempt_status(rt, "mid@a", 403, -1));
    rt_health_get(rt, tg("mid@a"), &h);
    T_EQ_INT(h.failures, 2);
    T_EQ_INT(h.consecutive_failures, 2);
    rt_router_free(rt);
}

static void
test_percentiles(void)
{
    struct rt_router *rt = new_router();
    struct rt_health h;
    T_EQ_INT(rt_health_get(rt, tg("dear@a"), &h), 0);
    T_EQ_INT(h.samples, 0);
    T_CHECK(h.p95_ttfb_ms < 0 && h.ewma_ttfb_ms < 0);
    /* 1..1000 ms, one sample each: true p50 = 500 ms, p95 = 950 ms; a
     * bucket midpoint is within 12.5% of any value in its bucket. */
    for (int i = 1; i <= 1000; i++)
        T_CHECK(attempt(rt, "dear@a", RT_SUCCESS, (int64_t)i * 1000, -1));
    rt_health_get(rt, tg("dear@a"), &h);
    T_EQ_INT(h.samples, 1000);
    T_EQ_INT(h.requests, 1000);
    T_NEAR(h.p50_ttfb_ms, 500, 500 * 0.125);
    T_NEAR(h.p95_ttfb_ms, 950, 950 * 0.125);
    /* total = 2 x ttfb in attempt(). */
    T_NEAR(h.p50_total_ms, 1000, 1000 * 0.125);
    T_NEAR(h.p95_total_ms, 1900, 1900 * 0.125);
    /* A constant value: every quantile within 12.5% of it. */
    for (int i = 0; i < 200; i++)
        T_CHECK(attempt(rt, "cheap@b", RT_SUCCESS, 7777, -1));
    rt_health_get(rt, tg("cheap@b"), &h);
    T_NEAR(h.p50_ttfb_ms, 7.777, 7.777 * 0.125);
    T_NEAR(h.p95_ttfb_ms, 7.777, 7.777 * 0.125);
    T_NEAR(h.ewma_ttfb_ms, 7.777, 1e-9);
    /* Tiny and huge values stay in range. */
    T_CHECK(attempt(rt, "mid@b", RT_SUCCESS, 0, -1));
    T_CHECK(attempt(rt, "mid@b", RT_SUCCESS, 1, -1));
    T_CHECK(attempt(rt, "mid@b", RT_SUCCESS, INT64_MAX / 4, -1));
    rt_health_get(rt, tg("mid@b"), &h);
    T_CHECK(h.p50_ttfb_ms >= 0 && h.p50_ttfb_ms < 0.01);
    T_CHECK(h.p95_ttfb_ms > 1e6); /* capped at ~36 min */
    /* Error rate over the last RT_ERR_WINDOW outcomes. */
    for (int i = 0; i < RT_ERR_WINDOW; i++)
        attempt(rt, "outonly@a", i % 4 == 0 ? RT_FAILURE : RT_SUCCESS, 10,
                -1);
    rt_health_get(rt, tg("outonly@a"), &h);
    T_NEAR(h.error_rate, 0.25, 1e-9);
    for (int i = 0; i < RT_ERR_WINDOW; i++)
        attempt(rt, "outonly@a", RT_SUCCESS, 10, -1);
    rt_health_get(rt, tg("outonly@a"), &h);
    T_NEAR(h.error_rate, 0, 1e-9);
    T_EQ_INT(h.failures, RT_ERR_WINDOW / 4);
    /* Windows: after one window the samples still count, after two not. */
    fake_now_us += (int64_t)RT_WINDOW_MS * 1000;
    rt_health_get(rt, tg("dear@a"), &h);
    T_EQ_INT(h.samples, 1000);
    fake_now_us += (int64_t)RT_WINDOW_MS * 1000;
    rt_health_get(rt, tg("dear@a"), &h);
    T_EQ_INT(h.samples, 0);
    T_CHECK(h.p95_ttfb_ms < 0 && h.ewma_ttfb_ms < 0);
    T_EQ_INT(h.requests, 1000); /* counters are lifetime */
    rt_router_free(rt);
}

static void
test_health_json(void)
{
    struct rt_router *rt = new_router();
    T_CHECK(attempt(rt, "mid@a", RT_SUCCESS, 12000, -1));
    for (int i = 0; i < 3; i++)
        T_CHECK(attempt(rt, "cheap@b", RT_FAILURE, -1, -1));
    json_t *a = rt_health_json(rt);
    T_CHECK(json_is_array(a));
    T_EQ_INT(json_array_size(a), 7);
    size_t i;
    json_t *o;
    int seen = 0;
    json_array_foreach(a, i, o) {
        const char *t = json_string_value(json_object_get(o, "target"));
        T_CHECK(t != NULL);
        T_CHECK(json_is_string(json_object_get(o, "state")));
        T_CHECK(json_is_number(json_object_get(o, "error_rate")));
        T_CHECK(json_is_integer(json_object_get(o, "requests")));
        T_CHECK(json_object_get(o, "p50_ms") != NULL);
        if (t && !strcmp(t, "mid@a")) {
            seen++;
            T_EQ_STR(json_string_value(json_object_get(o, "state")), "up");
            T_NEAR(json_number_value(json_object_get(o, "ewma_ms")), 12,
                   1e-9);
            T_NEAR(json_number_value(json_object_get(o, "p95_ms")), 12,
                   12 * 0.125);
            T_EQ_INT(json_integer_value(json_object_get(o, "requests")), 1);
            T_CHECK(json_is_null(json_object_get(o, "cooldown_until")));
        }
        if (t && !strcmp(t, "cheap@b")) {
            seen++;
            T_EQ_STR(json_string_value(json_object_get(o, "state")), "open");
            T_EQ_STR(json_string_value(json_object_get(o, "provider")), "b");
            T_EQ_STR(json_string_value(json_object_get(o, "model")), "cheap");
            T_NEAR(json_number_value(json_object_get(o, "error_rate")), 1,
                   1e-9);
            T_EQ_INT(json_integer_value(json_object_get(o, "failures")), 3);
            T_EQ_INT(json_integer_value(
                         json_object_get(o, "consecutive_failures")),
                     3);
            T_CHECK(json_is_null(json_object_get(o, "ewma_ms")));
            T_CHECK(json_integer_value(json_object_get(o, "cooldown_until")) >
                    gx_now_ms());
        }
    }
    T_EQ_INT(seen, 2);
    json_decref(a);
    rt_router_free(rt);
}

static void
test_adopt(void)
{
    struct rt_router *old = new_router();
    for (int i = 0; i < 3; i++)
        attempt(old, "cheap@b", RT_FAILURE, -1, -1);
    attempt(old, "mid@a", RT_SUCCESS, 5000, -1);
    struct rt_router *rt = new_router();
    rt_router_adopt(rt, old);
    rt_router_free(old);
    struct rt_health h;
    rt_health_get(rt, tg("cheap@b"), &h);
    T_EQ_INT(h.state, 1);
    T_EQ_INT(h.failures, 3);
    rt_health_get(rt, tg("mid@a"), &h);
    T_EQ_INT(h.samples, 1);
    T_NEAR(h.ewma_ttfb_ms, 5, 1e-9);
    rt_router_free(rt);
}

/* The example configs, one per policy (config/routing-*.example.json):
 * what each orders for a typical request. */
static struct cfg *
load_example(const char *name)
{
    char path[256], err[512];
    snprintf(path, sizeof(path), "config/%s", name);
    struct cfg *c = NULL;
    if (cfg_load_file(path, &c, err, sizeof(err)) != GX_OK) {
        fprintf(stderr, "  %s\n", err);
        return NULL;
    }
    return c;
}

static const char *
order_in(const struct cfg *c, const struct rt_plan *p, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < p->n && off < len; i++) {
        const struct cfg_provider *pr = &c->providers[p->targets[i].provider];
        off += (size_t)snprintf(buf + off, len - off, "%s%s@%s", i ? "," : "",
                                pr->models[p->targets[i].model].name,
                                pr->name);
    }
    return buf;
}

static void
test_examples(void)
{
    setenv("LLMUX_ADMIN_KEY", "adm-example", 1);
    setenv("OPENAI_API_KEY", "sk-example", 1);
    setenv("RELAY_API_KEY", "sk-example", 1);
    setenv("LLMUX_MODEL", "/nonexistent/model.gguf", 1);
    struct rt_plan p;
    char b[512];
    struct cfg *c = load_example("routing-cost.example.json");
    T_CHECK(c != NULL);
    if (c) {
        struct rt_router *rt = rt_router_new(c);
        /* 1000 prompt tokens, 1024 out: deepseek 0.28e-3 + 0.42*1024e-6
         * < gemini 0.30e-3 + 2.5*1024e-6 < gpt-4.1; the local fallback
         * last. */
        rt_plan_route(rt, "auto", 1000, 0, &p);
        T_EQ_STR(order_in(c, &p, b, sizeof(b)),
                 "deepseek-v3.2@relay,gemini-2.5-flash@relay,gpt-4.1@relay,"
                 "local@local");
        rt_router_free(rt);
        cfg_free(c);
    }
    c = load_example("routing-latency.example.json");
    T_CHECK(c != NULL);
    if (c) {
        struct rt_router *rt = rt_router_new(c);
        rt_plan_route(rt, "fast", 10, 10, &p);
        T_EQ_STR(order_in(c, &p, b, sizeof(b)),
                 "gpt-4.1@openai,gpt-4.1@relay,claude-sonnet-4.5@relay");
        T_EQ_INT(c->failover.hedge_after_ms, 1500);
        rt_router_free(rt);
        cfg_free(c);
    }
    c = load_example("routing-priority.example.json");
    T_CHECK(c != NULL);
    if (c) {
        struct rt_router *rt = rt_router_new(c);
        rt_plan_route(rt, "gpt", 10, 10, &p);
        T_EQ_STR(order_in(c, &p, b, sizeof(b)),
                 "gpt-4.1@openai,gpt-4.1@relay");
        rt_router_free(rt);
        cfg_free(c);
    }
    c = load_example("routing-weighted.example.json");
    T_CHECK(c != NULL);
    if (c) {
        struct rt_router *rt = rt_router_new(c);
        rt_router_seed(rt, 1);
        int first_openai = 0;
        for (int i = 0; i < 1000; i++) {
            rt_plan_route(rt, "gpt", 10, 10, &p);
            T_EQ_INT(p.n, 2);
            first_openai += p.targets[0].provider == 0;
        }
        /* 9:1 -> 900 +- 6 sd (57). */
        T_CHECK(first_openai > 843 && first_openai < 957);
        rt_router_free(rt);
        cfg_free(c);
    }
}

/* ------------------------------------------------------------------ */

#define THREADS 4
#define PER_THREAD 5000

static struct rt_router *mt_rt;

static void *
mt_worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        struct rt_plan p;
        rt_plan_route(mt_rt, "tie", 100, 100, &p);
        struct rt_attempt a;
        /* cheap@a is the target every thread reports on. */
        struct rt_plan one;
        rt_plan_route(mt_rt, "cheap@a", 1, 1, &one);
        if (!rt_attempt_begin(mt_rt, &one, 0, &a))
            continue;
        rt_report(mt_rt, &a, (i + id) % 10 == 0 ? RT_REJECTED : RT_SUCCESS,
                  1000 + i % 100, 2000, -1);
    }
    return NULL;
}

static void
test_threads(void)
{
    /* The real clock here; the circuit never opens (no failures). */
    mt_rt = rt_router_new(cfg);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, mt_worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    struct rt_health h;
    rt_health_get(mt_rt, tg("cheap@a"), &h);
    T_EQ_INT(h.requests, THREADS * PER_THREAD);
    T_EQ_INT(h.in_flight, 0);
    T_EQ_INT(h.failures, 0);
    T_EQ_INT(h.samples, THREADS * PER_THREAD * 9 / 10);
    rt_router_free(mt_rt);
}

int
main(void)
{
    char err[512];
    if (cfg_load_string(CFG_TEXT, "test.json", &cfg, err, sizeof(err)) !=
        GX_OK) {
        fprintf(stderr, "config: %s\n", err);
        return 1;
    }
    T_RUN(test_resolve_and_priority);
    T_RUN(test_weighted);
    T_RUN(test_cost);
    T_RUN(test_latency);
    T_RUN(test_circuit);
    T_RUN(test_retry_after);
    T_RUN(test_percentiles);
    T_RUN(test_health_json);
    T_RUN(test_rate_limited_and_auth);
    T_RUN(test_adopt);
    T_RUN(test_examples);
    T_RUN(test_threads);
    cfg_free(cfg);
    return T_END();
}
