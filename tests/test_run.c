/*
 * Unit tests of the run of a request (router/run.c): the state machine
 * alone, no sockets, no sleeping.  Each test is one failover rule of the
 * README ("Failover", "Hedging", "Health ... Retry-After"): the test
 * builds a plan by hand on a real cfg, feeds attempt results with times
 * it chooses, and checks every step the run asks for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "../router/router.h"
#include "../providers/providers.h"

static const char *CFG_TEXT =
    "{\"require_keys\": false,\n"
    " \"providers\": {\n"
    "  \"a\": {\"kind\": \"openai\", \"base_url\": \"http://127.0.0.1:1/v1\",\n"
    "   \"models\": {\"m1\": {\"input_per_mtok\": 1, \"output_per_mtok\": 2},\n"
    "              \"m2\": {\"input_per_mtok\": 1, \"output_per_mtok\": 2},\n"
    "              \"m3\": {\"input_per_mtok\": 1, \"output_per_mtok\": 2},\n"
    "              \"m4\": {\"input_per_mtok\": 1, \"output_per_mtok\": 2}}}\n"
    " },\n"
    " \"failover\": {\"max_attempts\": 3, \"backoff_ms\": 100,\n"
    "              \"hedge_after_ms\": 0}\n"
    "}\n";

static struct cfg *cfg;

/* A plan of the first n models of provider a, in order. */
static void
plan_of(struct rt_plan *p, size_t n, int max_attempts)
{
    memset(p, 0, sizeof(*p));
    for (size_t i = 0; i < n; i++) {
        p->targets[i].provider = 0;
        p->targets[i].model = (uint32_t)i;
    }
    p->n = n;
    p->resolved = n;
    p->max_attempts = max_attempts;
}

static struct pv_result
res_of(enum pv_outcome o, int status, int retry_after_s)
{
    struct pv_result r;
    memset(&r, 0, sizeof(r));
    r.outcome = o;
    r.http_status = status;
    r.retry_after_s = retry_after_s;
    r.ttfb_us = -1;
    return r;
}

/* Starts the attempt a START step asks for; returns its slot. */
static int
begin(struct rt_run *run, struct rt_step *st, int64_t now, size_t want)
{
    T_EQ_INT(st->what, RT_DO_START);
    T_EQ_INT(st->target, want);
    int slot = st->slot;
    rt_run_begun(run, slot, 1, NULL, now, st);
    return slot;
}

static int64_t T0 = 1000000000;

/* A new run over p (config c) whose first attempt is begun at T0 in the
 * returned slot. */
static int
first(struct rt_run *run, const struct cfg *c, const struct rt_plan *p,
      uint64_t seed, struct rt_step *st)
{
    rt_run_init(run, c, p, seed);
    rt_run_next(run, T0, st);
    return begin(run, st, T0, 0);
}

static void
test_success_first(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 2, 3);
    int s = first(&run, cfg, &p, 1, &st);
    T_EQ_INT(st.what, RT_DO_NOTHING);
    T_EQ_INT(st.hedge_at_us, 0); /* hedging off */
    struct pv_result ok = res_of(PV_OK, 200, -1);
    rt_run_result(&run, s, &ok, T0 + 10, &st);
    T_EQ_INT(st.what, RT_DO_DELIVER);
    T_EQ_INT(st.slot, s);
    T_EQ_INT(st.cancel, -1);
    T_EQ_INT(run.attempts, 1);
    /* Done: nothing more is asked. */
    rt_run_next(&run, T0 + 20, &st);
    T_EQ_INT(st.what, RT_DO_NOTHING);
}

/* A status in retry_on_status moves to the next target after the backoff
 * (jittered into [b/2, b]), and the log names each attempt. */
static void
test_retryable_status_backoff(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 3, 3);
    int s = first(&run, cfg, &p, 7, &st);
    struct pv_result r503 = res_of(PV_ERR_STATUS, 503, -1);
    rt_run_result(&run, s, &r503, T0 + 1000, &st);
    T_EQ_INT(st.what, RT_DO_WAIT);
    int64_t w1 = st.at_us - (T0 + 1000);
    T_CHECK(w1 >= 50000 && w1 <= 100000); /* backoff_ms 100, jittered */
    /* Too early: still waiting (a timer that fired early). */
    rt_run_next(&run, st.at_us - 1, &st);
    T_EQ_INT(st.what, RT_DO_WAIT);
    int64_t t = st.at_us;
    rt_run_next(&run, t, &st);
    s = begin(&run, &st, t, 1);
    struct pv_result reset = res_of(PV_ERR_TRANSPORT, 0, -1);
    rt_run_result(&run, s, &reset, t + 1000, &st);
    T_EQ_INT(st.what, RT_DO_WAIT);
    int64_t w2 = st.at_us - (t + 1000);
    T_CHECK(w2 >= 100000 && w2 <= 200000); /* doubled after 2 attempts */
    T_EQ_STR(run.log, "m1@a: status 503; m2@a: transport error");
}

/* The backoff doubles per attempt and is capped at RT_BACKOFF_MAX_MS. */
static void
test_backoff_cap(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 4, 16);
    for (uint64_t seed = 1; seed < 50; seed++) {
        rt_run_init(&run, cfg, &p, seed);
        run.attempts = 6; /* as after six failed attempts */
        rt_run_next(&run, T0, &st);
        int s = begin(&run, &st, T0, 0);
        struct pv_result r = res_of(PV_ERR_CONNECT, 0, -1);
        rt_run_result(&run, s, &r, T0, &st);
        T_EQ_INT(st.what, RT_DO_WAIT);
        T_CHECK(st.at_us - T0 >= RT_BACKOFF_MAX_MS * 1000 / 2 &&
                st.at_us - T0 <= RT_BACKOFF_MAX_MS * 1000);
    }
}

/* A 4xx not in retry_on_status is the upstream's answer: passed on. */
static void
test_non_retryable_passes(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 3, 3);
    int s = first(&run, cfg, &p, 1, &st);
    struct pv_result r400 = res_of(PV_ERR_STATUS, 400, -1);
    rt_run_result(&run, s, &r400, T0 + 5, &st);
    T_EQ_INT(st.what, RT_DO_PASS);
    T_EQ_INT(st.status, 400);
    T_EQ_INT(run.attempts, 1);
    /* Our own failure (PV_ERR_INTERNAL) is not retried either: 502. */
    s = first(&run, cfg, &p, 1, &st);
    struct pv_result in = res_of(PV_ERR_INTERNAL, 0, -1);
    rt_run_result(&run, s, &in, T0 + 5, &st);
    T_EQ_INT(st.what, RT_DO_PASS);
    T_EQ_INT(st.status, 502);
}

/* A target's own-limit refusal (other_may_serve: the local engine's
 * unsupported parameter or value, a prompt past its context) starts the
 * next target at once; with none left the refusal is passed on when every
 * attempt was one, else the run fails with each reason in the log.  A
 * plain 400 still ends the run. */
static void
test_refusal_moves_on(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 3, 3);
    struct pv_result ref = res_of(PV_ERR_STATUS, 400, -1);
    ref.other_may_serve = 1;
    snprintf(ref.detail, sizeof(ref.detail),
             "the local engine does not support the parameter 'x'");
    /* refused, then the next target at once (no WAIT), which answers */
    int s = first(&run, cfg, &p, 1, &st);
    rt_run_result(&run, s, &ref, T0 + 5, &st);
    s = begin(&run, &st, T0 + 5, 1);
    struct pv_result ok = res_of(PV_OK, 200, -1);
    rt_run_result(&run, s, &ok, T0 + 10, &st);
    T_EQ_INT(st.what, RT_DO_DELIVER);
    T_EQ_INT(run.attempts, 2);
    T_EQ_STR(run.log, "m1@a: status 400 (the local engine does not support "
                      "the parameter 'x')");
    /* every target refuses: the last refusal is passed on */
    plan_of(&p, 2, 3);
    s = first(&run, cfg, &p, 1, &st);
    rt_run_result(&run, s, &ref, T0 + 5, &st);
    s = begin(&run, &st, T0 + 5, 1);
    rt_run_result(&run, s, &ref, T0 + 10, &st);
    T_EQ_INT(st.what, RT_DO_PASS);
    T_EQ_INT(st.status, 400);
    T_EQ_INT(st.slot, s);
    /* the only target refuses: passed on as before */
    plan_of(&p, 1, 3);
    s = first(&run, cfg, &p, 1, &st);
    rt_run_result(&run, s, &ref, T0 + 5, &st);
    T_EQ_INT(st.what, RT_DO_PASS);
    T_EQ_INT(st.status, 400);
    /* a failure, then the fallback refuses: the run fails (502), the log
     * naming both */
    plan_of(&p, 2, 3);
    s = first(&run, cfg, &p, 1, &st);
    struct pv_result r503 = res_of(PV_ERR_STATUS, 503, -1);
    rt_run_result(&run, s, &r503, T0 + 5, &st);
    T_EQ_INT(st.what, RT_DO_WAIT);
    int64_t t = st.at_us;
    rt_run_next(&run, t, &st);
    s = begin(&run, &st, t, 1);
    rt_run_result(&run, s, &ref, t + 5, &st);
    T_EQ_INT(st.what, RT_DO_FAIL);
    T_EQ_INT(st.status, 502);
    T_EQ_STR(st.code, "upstream_failed");
    T_EQ_STR(run.log, "m1@a: status 503; m2@a: status 400 (the local engine "
                      "does not support the parameter 'x')");
    /* a refusal, then a failure with nothing left: 502 as well */
    s = first(&run, cfg, &p, 1, &st);
    rt_run_result(&run, s, &ref, T0 + 5, &st);
    s = begin(&run, &st, T0 + 5, 1);
    rt_run_result(&run, s, &r503, T0 + 10, &st);
    T_EQ_INT(st.what, RT_DO_FAIL);
    T_EQ_INT(st.status, 502);
    /* max_attempts still bounds the run: the refusal is passed on */
    plan_of(&p, 3, 1);
    s = first(&run, cfg, &p, 1, &st);
    rt_run_result(&run, s, &ref, T0 + 5, &st);
    T_EQ_INT(st.what, RT_DO_PASS);
    T_EQ_INT(st.status, 400);
    /* without the flag a 400 ends the run (test_non_retryable_passes) */
    plan_of(&p, 3, 3);
    s = first(&run, cfg, &p, 1, &st);
    ref.other_may_serve = 0;
    rt_run_result(&run, s, &ref, T0 + 5, &st);
    T_EQ_INT(st.what, RT_DO_PASS);
    T_EQ_INT(run.attempts, 1);
}

/* An upstream 401/403 is a provider fault: failover, never passed on. */
static void
test_provider_fault_fails_over(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 2, 3);
    int s = first(&run, cfg, &p, 1, &st);
    struct pv_result r401 = res_of(PV_ERR_STATUS, 401, -1);
    rt_run_result(&run, s, &r401, T0, &st);
    T_EQ_INT(st.what, RT_DO_WAIT);
    rt_run_next(&run, st.at_us, &st);
    int64_t t = T0 + 200000;
    s = begin(&run, &st, t, 1);
    struct pv_result r403 = res_of(PV_ERR_STATUS, 403, -1);
    rt_run_result(&run, s, &r403, t, &st);
    T_EQ_INT(st.what, RT_DO_FAIL);
    T_EQ_INT(st.status, 502);
    T_EQ_STR(st.code, "upstream_failed");
    T_EQ_STR(run.log, "m1@a: status 401; m2@a: status 403");
}

/* Every attempt an upstream 429: 429 with the smallest Retry-After. */
static void
test_all_rate_limited(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 2, 3);
    int s = first(&run, cfg, &p, 1, &st);
    struct pv_result a = res_of(PV_ERR_STATUS, 429, 30);
    rt_run_result(&run, s, &a, T0, &st);
    rt_run_next(&run, st.at_us, &st);
    s = begin(&run, &st, T0 + 200000, 1);
    struct pv_result b = res_of(PV_ERR_STATUS, 429, 7);
    rt_run_result(&run, s, &b, T0 + 200000, &st);
    T_EQ_INT(st.what, RT_DO_FAIL);
    T_EQ_INT(st.status, 429);
    T_EQ_STR(st.code, "rate_limit_exceeded");
    T_EQ_STR(st.type, "requests");
    T_EQ_INT(st.retry_after_s, 7);
    /* One 429 and one 503: not "all rate limited" -> 502. */
    s = first(&run, cfg, &p, 1, &st);
    rt_run_result(&run, s, &a, T0, &st);
    rt_run_next(&run, st.at_us, &st);
    s = begin(&run, &st, T0 + 200000, 1);
    struct pv_result c = res_of(PV_ERR_STATUS, 503, -1);
    rt_run_result(&run, s, &c, T0 + 200000, &st);
    T_EQ_INT(st.status, 502);
    T_EQ_INT(st.retry_after_s, 0);
}

/* Every attempt a 503 with Retry-After (a full local engine answers so):
 * 503 server_busy with the smallest Retry-After; a 503 without one, or
 * one other failure, is not "all busy". */
static void
test_all_busy(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 2, 3);
    int s = first(&run, cfg, &p, 1, &st);
    struct pv_result a = res_of(PV_ERR_STATUS, 503, 5);
    rt_run_result(&run, s, &a, T0, &st);
    rt_run_next(&run, st.at_us, &st);
    s = begin(&run, &st, T0 + 200000, 1);
    struct pv_result b = res_of(PV_ERR_STATUS, 503, 1);
    rt_run_result(&run, s, &b, T0 + 200000, &st);
    T_EQ_INT(st.what, RT_DO_FAIL);
    T_EQ_INT(st.status, 503);
    T_EQ_STR(st.code, "server_busy");
    T_EQ_INT(st.retry_after_s, 1);
    s = first(&run, cfg, &p, 1, &st);
    rt_run_result(&run, s, &a, T0, &st);
    rt_run_next(&run, st.at_us, &st);
    s = begin(&run, &st, T0 + 200000, 1);
    struct pv_result c = res_of(PV_ERR_STATUS, 503, -1);
    rt_run_result(&run, s, &c, T0 + 200000, &st);
    T_EQ_INT(st.status, 502);
}

/* Every attempt a timeout: 504; one not: 502. */
static void
test_all_timeouts(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 2, 3);
    int s = first(&run, cfg, &p, 1, &st);
    struct pv_result a = res_of(PV_ERR_FIRST_BYTE_TIMEOUT, 0, -1);
    rt_run_result(&run, s, &a, T0, &st);
    rt_run_next(&run, st.at_us, &st);
    s = begin(&run, &st, T0 + 200000, 1);
    struct pv_result b = res_of(PV_ERR_CONNECT_TIMEOUT, 0, -1);
    rt_run_result(&run, s, &b, T0 + 200000, &st);
    T_EQ_INT(st.what, RT_DO_FAIL);
    T_EQ_INT(st.status, 504);
    T_EQ_STR(st.code, "upstream_timeout");
}

/* At most max_attempts attempts, whatever the plan's length. */
static void
test_max_attempts(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 4, 2);
    int s = first(&run, cfg, &p, 1, &st);
    struct pv_result r = res_of(PV_ERR_STATUS, 500, -1);
    rt_run_result(&run, s, &r, T0, &st);
    rt_run_next(&run, st.at_us, &st);
    s = begin(&run, &st, T0 + 200000, 1);
    rt_run_result(&run, s, &r, T0 + 200000, &st);
    T_EQ_INT(st.what, RT_DO_FAIL);
    T_EQ_INT(run.attempts, 2);
}

/* A target that went out of rotation since the plan (rt_attempt_begin
 * says skip) is no attempt: the next START is the following target. */
static void
test_skip_is_not_an_attempt(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 3, 1);
    rt_run_init(&run, cfg, &p, 1);
    rt_run_next(&run, T0, &st);
    T_EQ_INT(st.what, RT_DO_START);
    T_EQ_INT(st.target, 0);
    rt_run_next(&run, T0, &st); /* skipped: ask again */
    T_EQ_INT(st.what, RT_DO_START);
    T_EQ_INT(st.target, 1);
    int s = begin(&run, &st, T0, 1);
    T_EQ_INT(run.attempts, 1);
    struct pv_result ok = res_of(PV_OK, 200, -1);
    rt_run_result(&run, s, &ok, T0, &st);
    T_EQ_INT(st.what, RT_DO_DELIVER);
}

/* An attempt that cannot even be started counts as a failed attempt
 * (not a timeout, not rate limited) and the run moves on. */
static void
test_could_not_start(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 1, 3);
    rt_run_init(&run, cfg, &p, 1);
    rt_run_next(&run, T0, &st);
    T_EQ_INT(st.what, RT_DO_START);
    rt_run_begun(&run, st.slot, 0, "bad header", T0, &st);
    T_EQ_INT(st.what, RT_DO_FAIL);
    T_EQ_INT(st.status, 502);
    T_EQ_INT(run.attempts, 1);
    T_EQ_STR(run.log, "m1@a: bad header");
}

/* Before any attempt: 404 for an unknown model; 503 (or 429 when every
 * target is out for an upstream 429) with the plan's Retry-After. */
static void
test_empty_plan(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    memset(&p, 0, sizeof(p));
    p.max_attempts = 3;
    rt_run_init(&run, cfg, &p, 1);
    rt_run_next(&run, T0, &st);
    T_EQ_INT(st.what, RT_DO_FAIL);
    T_EQ_INT(st.status, 404);
    T_EQ_STR(st.code, "model_not_found");
    p.resolved = 1;
    p.n_skipped = 1;
    p.skip_reason[0] = RT_SKIP_OPEN;
    p.retry_after_ms = 1500;
    rt_run_init(&run, cfg, &p, 1);
    rt_run_next(&run, T0, &st);
    T_EQ_INT(st.status, 503);
    T_EQ_STR(st.code, "no_target_available");
    T_EQ_INT(st.retry_after_s, 2);
    p.skip_reason[0] = RT_SKIP_RATE_LIMITED;
    rt_run_init(&run, cfg, &p, 1);
    rt_run_next(&run, T0, &st);
    T_EQ_INT(st.status, 429);
    T_EQ_STR(st.code, "rate_limit_exceeded");
}

/* A stream fails over only before its first byte reached the client. */
static void
test_stream_after_first_byte(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 2, 3);
    int s = first(&run, cfg, &p, 1, &st);
    T_EQ_INT(rt_run_first_byte(&run, s), -1);
    struct pv_result r = res_of(PV_ERR_TRANSPORT, 200, -1);
    rt_run_result(&run, s, &r, T0 + 10, &st);
    T_EQ_INT(st.what, RT_DO_BROKEN);
    T_EQ_INT(st.status, 502);
    T_EQ_INT(run.attempts, 1);
}

/* Hedging: with hedge_after_ms, an attempt asks for a hedge; when it fires
 * with nothing received the next target starts beside it; the first to
 * answer wins and the other is cancelled. */
static void
test_hedge(void)
{
    struct cfg *hc = NULL;
    char err[512];
    char *text = strdup(CFG_TEXT);
    char *h = strstr(text, "\"hedge_after_ms\": 0");
    memcpy(h, "\"hedge_after_ms\": 5", 19);
    T_EQ_INT(cfg_load_string(text, "hedge.json", &hc, err, sizeof(err)),
             GX_OK);
    free(text);
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 3, 3);
    int a = first(&run, hc, &p, 1, &st);
    T_EQ_INT(st.hedge_at_us, T0 + 5000);
    rt_run_hedge(&run, T0 + 5000, &st);
    T_EQ_INT(st.what, RT_DO_START);
    T_EQ_INT(st.target, 1);
    T_CHECK(st.slot != a);
    int b = st.slot;
    rt_run_begun(&run, b, 1, NULL, T0 + 5000, &st);
    T_EQ_INT(st.hedge_at_us, 0); /* two running: no third hedge */
    /* The hedge answers first: it wins, the first is cancelled. */
    struct pv_result ok = res_of(PV_OK, 200, -1);
    rt_run_result(&run, b, &ok, T0 + 6000, &st);
    T_EQ_INT(st.what, RT_DO_DELIVER);
    T_EQ_INT(st.slot, b);
    T_EQ_INT(st.cancel, a);
    /* The cancelled one's late result changes nothing. */
    rt_run_result(&run, a, &ok, T0 + 7000, &st);
    T_EQ_INT(st.what, RT_DO_NOTHING);

    /* One of a hedged pair fails (retryable) while the other runs: wait
     * for the other, which then wins. */
    a = first(&run, hc, &p, 1, &st);
    rt_run_hedge(&run, T0 + 5000, &st);
    b = begin(&run, &st, T0 + 5000, 1);
    struct pv_result r502 = res_of(PV_ERR_STATUS, 502, -1);
    rt_run_result(&run, a, &r502, T0 + 6000, &st);
    T_EQ_INT(st.what, RT_DO_NOTHING);
    rt_run_result(&run, b, &ok, T0 + 7000, &st);
    T_EQ_INT(st.what, RT_DO_DELIVER);
    T_EQ_INT(st.cancel, -1);

    /* A stream's first byte cancels the rival and stops hedging. */
    a = first(&run, hc, &p, 1, &st);
    rt_run_hedge(&run, T0 + 5000, &st);
    b = begin(&run, &st, T0 + 5000, 1);
    T_EQ_INT(rt_run_first_byte(&run, a), b);
    rt_run_hedge(&run, T0 + 10000, &st);
    T_EQ_INT(st.what, RT_DO_NOTHING);
    /* A hedge timer after the first byte starts nothing either. */
    a = first(&run, hc, &p, 1, &st);
    T_EQ_INT(rt_run_first_byte(&run, a), -1);
    rt_run_hedge(&run, T0 + 5000, &st);
    T_EQ_INT(st.what, RT_DO_NOTHING);
    cfg_free(hc);
}

/* The client left: nothing more is started. */
static void
test_abort(void)
{
    struct rt_plan p;
    struct rt_run run;
    struct rt_step st;
    plan_of(&p, 2, 3);
    int s = first(&run, cfg, &p, 1, &st);
    rt_run_abort(&run);
    struct pv_result r = res_of(PV_ERR_STATUS, 503, -1);
    rt_run_result(&run, s, &r, T0, &st);
    T_EQ_INT(st.what, RT_DO_NOTHING);
    rt_run_next(&run, T0 + 1000000, &st);
    T_EQ_INT(st.what, RT_DO_NOTHING);
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
    T_RUN(test_success_first);
    T_RUN(test_retryable_status_backoff);
    T_RUN(test_backoff_cap);
    T_RUN(test_non_retryable_passes);
    T_RUN(test_refusal_moves_on);
    T_RUN(test_provider_fault_fails_over);
    T_RUN(test_all_rate_limited);
    T_RUN(test_all_busy);
    T_RUN(test_all_timeouts);
    T_RUN(test_max_attempts);
    T_RUN(test_skip_is_not_an_attempt);
    T_RUN(test_could_not_start);
    T_RUN(test_empty_plan);
    T_RUN(test_stream_after_first_byte);
    T_RUN(test_hedge);
    T_RUN(test_abort);
    cfg_free(cfg);
    return T_END();
}
