/*
 * router: turns a request's "model" into an ordered list of attempts by
 * route policy and provider health (DESIGN.md sections 5 and 8), and keeps
 * that health: per target latency (EWMA + log histogram p50/p95 of time to
 * first byte and total time), error rate over the last RT_ERR_WINDOW
 * outcomes, consecutive failures, circuit breaker and Retry-After cooldown.
 *
 * It also owns the run of a request (run.c, struct rt_run below): a pure
 * state machine that, given the plan, each attempt's result and the time
 * (passed in: the clock is injected), says what to do next: start a
 * target, wait (backoff), hedge, deliver, pass an upstream 4xx on, or give
 * up with the final status.  The retry decision is made there, once.
 *
 * What it does not do: HTTP, timers, cancelling calls.  The gateway
 * performs the I/O each step asks for and feeds the results back.
 *
 * ---------------------------------------------------------------------
 * CALLING SEQUENCE (the gateway must follow it exactly)
 *
 *  serve start:  rt = rt_router_new(cfg)   (one per loaded cfg; shared by
 *                every worker thread; rt_router_free(rt) after the workers
 *                stopped.  On SIGHUP a new cfg gets a new router; pass the
 *                old one to rt_router_adopt to keep the health of targets
 *                that still exist.)
 *
 *  per request:
 *   1. n = rt_plan_route(rt, model, est_prompt_tokens, completion_cap,
 *                          &plan);
 *        the parsed request's (struct pv_chat) est_prompt_tokens and
 *        completion_cap, taken as they are: the parse alone puts
 *        PV_DEFAULT_COMPLETION_TOKENS in for an absent cap, so 0 means no
 *        completion (embeddings, completions' echo with max_tokens 0).
 *      plan.resolved == 0           -> 404 model_not_found.
 *      n == 0 && plan.resolved > 0  -> every target is out of rotation
 *        (open circuit / Retry-After / probe busy): answer 503 at once;
 *        rt_plan_explain() writes "gpt-4.1@relay: circuit open; ..." and
 *        plan.retry_after_ms is a hint for a Retry-After header.
 *   2. (the run, struct rt_run below, decides which i comes next, when,
 *      and when to stop; this is what each of its START steps does)
 *      for i = 0 .. plan.n-1 while attempts < plan.max_attempts:
 *        if (!rt_attempt_begin(rt, &plan, i, &att)) continue;
 *            (0 = this target went out of rotation since the plan was made,
 *             or its single half-open probe is taken: skip it, it is not an
 *             attempt; nothing to report)
 *        attempts++; start the call on plan.targets[i] (== att.target).
 *        If the call cannot even be started, report RT_CANCELLED.
 *   3. every begun attempt is reported EXACTLY ONCE, from any thread:
 *        rt_report_pv(rt, &att, cfg, res)   from pv's on_done (maps the
 *                                             pv_result; easiest), or
 *        rt_report(rt, &att, outcome, ttfb_us, total_us, retry_after_s).
 *      A hedged pair is two begun attempts: report the winner normally and
 *      the cancelled loser as RT_CANCELLED.  A client that went away:
 *      report the cancelled call as RT_CANCELLED.  A half-open probe that
 *      is never reported blocks further probes of that target for
 *      RT_PROBE_STALE_MS, so do not forget.
 *
 *  GET /admin/providers:  json_t *a = rt_health_json(rt);  (new reference)
 *
 * Order of a plan: the route's targets by policy, then the route's
 * fallback last.  Targets out of rotation are left out of the plan (listed
 * in plan.skipped): an open circuit, a half-open circuit whose one probe is
 * already running, a Retry-After cooldown.  They are not "put last": a
 * circuit breaker's point is to send the failing target nothing until its
 * cooldown ends, and the gateway answers 503 at once when nothing is left.
 *
 * Policies (cfg_route.policy; a model that is not a route is priority):
 *  priority  config order.
 *  weighted  the first target drawn at random by weight among the targets
 *            in rotation (seed: LLMUX_ROUTER_SEED or rt_router_seed), the
 *            rest after it by descending weight (ties: config order).
 *  cost      ascending expected cost of this request:
 *              est_prompt_tokens x input_pusd
 *              + completion_cap x output_pusd;
 *            ties to the lower TTFB EWMA (no samples counts as 0); targets
 *            whose p95 time to first byte exceeds the route's
 *            max_latency_ms go after the others (in the same order).
 *  latency   targets with no recent sample first (config order) so they
 *            get one, then ascending EWMA of time to first byte, then
 *            targets with no sample whose last attempt failed.
 *  "Recent": latency samples live in two rotating windows of RT_WINDOW_MS;
 *  a target with no sample for 2 x RT_WINDOW_MS counts as having none
 *  again, so a target once slow gets re-tried later instead of never.
 *
 * Circuit (failover.circuit_failures N, circuit_cooldown_ms C; N <= 0
 * disables it): closed -> open after N consecutive RT_FAILUREs; open for C
 * ms (no plan includes it); then half-open: exactly one probe admitted by
 * rt_attempt_begin; its RT_SUCCESS (or RT_REJECTED) closes the circuit, its
 * RT_FAILURE re-opens it for C ms, RT_CANCELLED frees the probe slot.
 * Retry-After: any RT_FAILURE with retry_after_s > 0 (an upstream 429 or
 * 503 with Retry-After) takes the target out of rotation for that long
 * (capped at RT_RETRY_AFTER_MAX_S); rt_report_pv marks a 429's cooldown
 * RT_SKIP_RATE_LIMITED, any other RT_SKIP_RETRY_AFTER.
 *
 * Threads: everything here is thread-safe.  rt_plan_route, rt_attempt_begin
 * and rt_report take one short per-target mutex at a time, never allocate
 * and never block on I/O.  rt_health_json allocates (admin path only).
 */
#ifndef LLMUX_ROUTER_H
#define LLMUX_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../config/config.h"

#define RT_MAX_TARGETS 16
#define RT_ERR_WINDOW 100          /* outcomes in the error-rate window */
#define RT_WINDOW_MS 60000         /* latency sample window (two kept) */
#define RT_PROBE_STALE_MS 600000   /* an unreported probe is forgotten */
#define RT_RETRY_AFTER_MAX_S 3600  /* Retry-After cap */

struct rt_router;  /* opaque; health of every (provider, model) target */
struct pv_result;  /* providers/providers.h */

/* Why a resolved target is not in the plan. */
enum rt_skip {
    RT_SKIP_OPEN = 1,     /* circuit open (cooldown running) */
    RT_SKIP_PROBE_BUSY,   /* half-open, its one probe is running */
    RT_SKIP_RETRY_AFTER,  /* upstream Retry-After cooldown (a 503 or
                             other failure that carried one) */
    RT_SKIP_RATE_LIMITED  /* Retry-After cooldown that came with a 429 */
};

struct rt_plan {
    const struct cfg_route *route; /* NULL when model was not a route */
    size_t n;                      /* targets to try; 0 = none */
    struct cfg_target targets[RT_MAX_TARGETS]; /* in the order to try */
    int max_attempts;              /* failover.max_attempts (>= 1) */
    size_t resolved;               /* targets the model named; 0 = unknown */
    size_t n_skipped;              /* out of rotation, not in targets */
    struct cfg_target skipped[RT_MAX_TARGETS];
    enum rt_skip skip_reason[RT_MAX_TARGETS];
    int64_t retry_after_ms; /* n == 0: ms until the first skipped target
                               comes back (>= 1), else 0 */
};

/* One begun attempt: filled by rt_attempt_begin, handed to rt_report. */
struct rt_attempt {
    struct cfg_target target;
    uint32_t slot;  /* internal index of the target */
    int probe;      /* 1 if this is the half-open probe */
    int reported;   /* set by rt_report; a second report is ignored */
};

/* How an attempt ended, as far as the target's health goes. */
enum rt_outcome {
    RT_SUCCESS = 0, /* 2xx and well-formed: latency sample, closes probe */
    RT_FAILURE,     /* transport error, a timeout, a retry_on_status
                       status, malformed body: counts toward the circuit */
    RT_REJECTED,    /* the target answered properly but said no (a 4xx not
                       in retry_on_status): healthy, no latency sample */
    RT_CANCELLED    /* we stopped it (hedge loser, client gone, could not
                       start): no judgement; frees a probe slot */
};

/* ---- the router object ---- */

/* Creates the health table for every (provider, model) of c.  c is
 * borrowed and must outlive the router.  Seeds the weighted RNG from
 * LLMUX_ROUTER_SEED when set (decimal), else from the clock.  NULL on
 * allocation failure. */
struct rt_router *rt_router_new(const struct cfg *c);
void rt_router_free(struct rt_router *rt); /* NULL ok */

/* Copies the health (stats, circuit, cooldown) of every target of old
 * whose "model@provider" name also exists in rt.  For SIGHUP reloads;
 * call before rt is shared.  old may be NULL. */
void rt_router_adopt(struct rt_router *rt, const struct rt_router *old);

/* Reseeds the weighted RNG (tests). Thread-safe. */
void rt_router_seed(struct rt_router *rt, uint64_t seed);

/* Replaces the monotonic clock (microseconds) for tests; NULL restores
 * gx_mono_us.  Call before the router is shared. */
void rt_router_set_clock(struct rt_router *rt, int64_t (*now_us)(void *ud),
                         void *ud);

/* ---- per request ---- */

/* Resolves model (route name, MODEL@PROVIDER or bare model, as
 * cfg_resolve) and orders its targets by policy and health into *plan.
 * Returns plan->n.  See the calling sequence above. */
size_t rt_plan_route(struct rt_router *rt, const char *model,
                     int64_t est_prompt_tokens, int64_t completion_cap,
                     struct rt_plan *plan);

/* Keeps only the targets (and skipped targets) whose provider kind is in
 * kinds (bit 1u << CFG_KIND_x), in their order; returns how many were
 * dropped.  For inbound APIs only some kinds serve (capable.c). */
size_t rt_plan_keep_kinds(struct rt_plan *plan, const struct cfg *c,
                          unsigned kinds);

/* The cost policy's expected cost of a request on model m, in pUSD
 * (saturating at INT64_MAX): est_prompt_tokens x input_pusd + completion_cap
 * x output_pusd (pv_chat's completion_cap: 0 is none, a count <= 0 adds
 * nothing).  The one estimate rt_plan_route orders by; the gateway's dry
 * run reports it. */
int64_t rt_expected_cost(const struct cfg_model *m, int64_t est_prompt_tokens,
                         int64_t completion_cap);

/* Admits plan->targets[i] as an attempt now (claims the half-open probe
 * when the circuit is half-open).  1 = go, *a filled; 0 = skip it. */
int rt_attempt_begin(struct rt_router *rt, const struct rt_plan *plan,
                     size_t i, struct rt_attempt *a);

/* Records how a begun attempt ended.  ttfb_us: start to first body byte,
 * < 0 if none; total_us: start to done, < 0 if unknown; retry_after_s:
 * the upstream's Retry-After in seconds, < 0 if none.  Any thread. */
void rt_report(struct rt_router *rt, struct rt_attempt *a,
               enum rt_outcome outcome, int64_t ttfb_us, int64_t total_us,
               int retry_after_s);

/* rt_report from a provider result: PV_OK -> RT_SUCCESS; PV_ERR_STATUS
 * with a status in c's retry_on_status or a provider fault (401, 403) ->
 * RT_FAILURE, other statuses ->
 * RT_REJECTED; PV_ERR_INTERNAL -> RT_CANCELLED (our side, not the
 * target's); every other error -> RT_FAILURE.  Passes res->ttfb_us,
 * total_us and retry_after_s on. */
void rt_report_pv(struct rt_router *rt, struct rt_attempt *a,
                  const struct cfg *c, const struct pv_result *res);

/* 1 when res is a target's refusal of what it cannot do (a 4xx with
 * pv_result.other_may_serve): the run moves on to the next target (see
 * "the run of a request"), and metrics and traces name it "refused". */
int rt_is_refusal(const struct pv_result *res);

/* The outcome rt_report_pv would use (for callers that report later). */
enum rt_outcome rt_outcome_of(const struct cfg *c,
                              const struct pv_result *res);

/* Writes "model@provider: circuit open; ..." for plan->skipped into buf
 * (always NUL-terminated when len > 0). Returns buf. */
char *rt_plan_explain(const struct rt_plan *plan, const struct cfg *c,
                      char *buf, size_t len);

/* ---- the run of a request (run.c) ----
 *
 * A pure state machine over one plan: no I/O, no clock of its own (every
 * call takes now_us), no allocation, no locks; one request's run belongs
 * to the thread serving it.  The gateway drives it:
 *
 *   rt_run_init(&run, cfg, &plan, seed);
 *   rt_run_next(&run, now, &st)          what to do first
 *   loop on st.what:
 *     RT_DO_START   target plan.targets[st.target] in slot st.slot (0/1):
 *                   rt_attempt_begin(); if it says skip, rt_run_next
 *                   again (a skipped target is no attempt); else start the
 *                   call, then rt_run_begun(&run, slot, ok, now, &st):
 *                   ok = 0 (could not start) makes it a failed attempt.
 *                   After a begun attempt st.hedge_at_us > 0 asks for a
 *                   hedge timer: when it fires, rt_run_hedge(&run, now,
 *                   &st).
 *     RT_DO_WAIT    backoff: arm a timer for st.at_us, then rt_run_next.
 *     RT_DO_NOTHING a running attempt decides: wait for its result.
 *     RT_DO_DELIVER slot st.slot answered well: give it to the client.
 *     RT_DO_PASS    slot st.slot's upstream answered a non-retryable 4xx
 *                   (or our side failed): pass it on with st.status.
 *     RT_DO_BROKEN  a stream failed after its first byte reached the
 *                   client: end it with an error (st.status 502).
 *     RT_DO_FAIL    give up: answer st.status / st.code (st.retry_after_s
 *                   > 0: a Retry-After header); the message is the
 *                   caller's, run.log lists each attempt.
 *   In DELIVER, PASS and BROKEN st.cancel >= 0 names a rival slot (a
 *   hedge) the gateway must cancel (and report RT_CANCELLED).
 *   Each attempt's end:  rt_run_result(&run, slot, &res, now, &st).
 *   A stream's first event: rt_run_first_byte(&run, slot) returns the
 *   rival slot to cancel (or -1); from then on that attempt cannot fail
 *   over and nothing is hedged.
 *
 * Rules (README "Failover", "Hedging"):
 *   - retryable (rt_outcome_of gives RT_FAILURE): transport errors,
 *     timeouts, malformed bodies, statuses in retry_on_status, and an
 *     upstream 401/403 (a provider fault); an attempt that could not be
 *     started counts as failed too.  Anything else ends the run
 *     (RT_DO_PASS), except a target's own-limit refusal (a 4xx with
 *     pv_result.other_may_serve: an unsupported parameter or value, a
 *     prompt past the model's context): the next target
 *     is started at once (no backoff); with none left the refusal is
 *     passed on when every attempt was one, else the run fails (502) with
 *     each reason in run.log.
 *   - after a retryable failure, with no rival running, the next target is
 *     started after a backoff of backoff_ms doubled per attempt made so far
 *     (the first retry waits backoff_ms), capped at RT_BACKOFF_MAX_MS,
 *     jittered into [b/2, b]; at most max_attempts attempts.
 *   - hedge: with hedge_after_ms > 0, an attempt begun while it is the only
 *     one running and another target is left asks for a hedge at
 *     begin + hedge_after_ms; when it fires and still nothing reached the
 *     client, the next target starts beside it.  The first to deliver
 *     wins; a rival's retryable failure while the other runs waits for it.
 *   - give up: 404 model_not_found when the model named nothing; with an
 *     empty plan 503 no_target_available, or 429 rate_limit_exceeded when
 *     every target is out for an upstream 429 (Retry-After from the plan);
 *     after attempts: 429 rate_limit_exceeded when every attempt was an
 *     upstream 429 (the smallest Retry-After among them), 504
 *     upstream_timeout when every one timed out, else 502
 *     upstream_failed.
 */
#define RT_BACKOFF_MAX_MS 1000

enum rt_do {
    RT_DO_START = 1,
    RT_DO_WAIT,
    RT_DO_NOTHING,
    RT_DO_DELIVER,
    RT_DO_PASS,
    RT_DO_BROKEN,
    RT_DO_FAIL
};

struct rt_step {
    enum rt_do what;
    int slot;            /* START, DELIVER, PASS, BROKEN: 0 or 1 */
    size_t target;       /* START: index into plan->targets */
    int cancel;          /* a rival slot to cancel, or -1 */
    int64_t at_us;       /* WAIT: when to call rt_run_next */
    int64_t hedge_at_us; /* after rt_run_begun: hedge time, 0 = none */
    int status;          /* PASS, BROKEN, FAIL: the HTTP status */
    const char *type, *code; /* FAIL: OpenAI error type and code */
    int64_t retry_after_s;   /* FAIL: > 0 = send Retry-After */
};

struct rt_run {
    const struct cfg *cfg;   /* borrowed */
    const struct rt_plan *plan; /* borrowed, outlives the run */
    size_t next;             /* next index into plan->targets */
    int attempts;            /* begun (or failed to start) */
    int running[2];          /* slot busy */
    size_t slot_target[2];   /* plan index of each slot's attempt */
    int winner;              /* slot whose bytes reached the client, -1 */
    int done;                /* a final step was given */
    int all_timeouts;        /* every attempt so far timed out */
    int all_rate_limited;    /* every attempt so far was an upstream 429 */
    int all_busy;            /* every attempt so far was a 503 with
                                Retry-After (e.g. a full local engine) */
    int64_t retry_after_s;   /* smallest Retry-After of those 429s (or
                                503s), 0 */
    int all_refused;         /* every attempt so far ended with a target's
                                own-limit refusal (pv_result's
                                other_may_serve) */
    int64_t wait_until_us;   /* backoff: no start before this */
    uint64_t rng;            /* backoff jitter (xorshift64), never 0 */
    char log[768];           /* "gpt-4.1@relay: status 503; ..." */
    size_t log_len;
};

/* Starts a run over plan (both borrowed).  seed: any value (jitter). */
void rt_run_init(struct rt_run *run, const struct cfg *c,
                 const struct rt_plan *plan, uint64_t seed);
/* What to do now (START, WAIT, NOTHING or FAIL). */
void rt_run_next(struct rt_run *run, int64_t now_us, struct rt_step *st);
/* The attempt given by the last START is begun in slot: ok = 1 started
 * (st: hedge_at_us set, what = NOTHING), ok = 0 it could not be started
 * (reason: a sentence for the log; st as after rt_run_result). */
void rt_run_begun(struct rt_run *run, int slot, int ok, const char *reason,
                  int64_t now_us, struct rt_step *st);
/* The hedge timer fired: START the next target beside the running one,
 * or NOTHING. */
void rt_run_hedge(struct rt_run *run, int64_t now_us, struct rt_step *st);
/* A stream's first byte to the client from slot: it wins.  Returns the
 * rival slot to cancel, or -1. */
int rt_run_first_byte(struct rt_run *run, int slot);
/* The attempt in slot ended with res (borrowed). */
void rt_run_result(struct rt_run *run, int slot, const struct pv_result *res,
                   int64_t now_us, struct rt_step *st);
/* The client left or the server stops: nothing more is started. */
void rt_run_abort(struct rt_run *run);
/* "model@provider" of plan index i into buf. Returns buf. */
char *rt_target_name(const struct cfg *c, struct cfg_target t, char *buf,
                     size_t len);

/* ---- admin ---- */

/* GET /admin/providers: a new JSON array, one object per target:
 *   {"target":"gpt-4.1@relay","provider":"relay","model":"gpt-4.1",
 *    "state":"up"|"open"|"half_open","ewma_ms","p50_ms","p95_ms",
 *    "total_ewma_ms","total_p50_ms","total_p95_ms" (null without samples),
 *    "error_rate" (0..1 over the last RT_ERR_WINDOW outcomes),
 *    "requests","failures","consecutive_failures","in_flight",
 *    "cooldown_until" (epoch ms when it comes back, null if in rotation)}
 * ewma/p50/p95 are of time to first byte.  NULL on allocation failure. */
json_t *rt_health_json(struct rt_router *rt);

/* Health numbers of one target (tests, metrics).  0 = found. */
struct rt_health {
    int state;               /* 0 up, 1 open, 2 half_open */
    int64_t requests;        /* reported attempts, excluding cancelled */
    int64_t failures;        /* RT_FAILURE reports */
    int64_t consecutive_failures;
    int64_t in_flight;       /* begun, not yet reported */
    double error_rate;       /* over the last RT_ERR_WINDOW outcomes */
    int64_t samples;         /* latency samples in the live windows */
    double ewma_ttfb_ms, p50_ttfb_ms, p95_ttfb_ms; /* -1 without samples */
    double ewma_total_ms, p50_total_ms, p95_total_ms;
    int64_t cooldown_ms;     /* ms until back in rotation, 0 if in it */
};
int rt_health_get(struct rt_router *rt, struct cfg_target t,
                  struct rt_health *out);

/* ---- kept from the first version ---- */

/* Config-only plan in priority order, no health (the gateway's old call;
 * use rt_plan_route).  Fills *plan; returns plan->n (0: unknown model). */
size_t rt_plan_make(const struct cfg *c, const char *model,
                    struct rt_plan *plan);

/* 1 if an attempt that ended with this HTTP status may move on to the next
 * target: config failover.retry_on_status, and always a provider fault
 * (rt_status_provider_fault). */
int rt_status_retryable(const struct cfg *c, int http_status);

/* 1 for an upstream 401 or 403: the provider refused llmux's own
 * credentials (its api_key or headers), which says nothing about the
 * client's request.  Such an attempt fails over, counts toward the circuit
 * (rt_outcome_of gives RT_FAILURE) and is never passed to the client as
 * its own 401/403. */
int rt_status_provider_fault(int http_status);

/* 1 when the plan is empty and every target is out of rotation because it
 * answered 429 with a Retry-After (so the client should get 429 with
 * plan->retry_after_ms, not 503). */
int rt_plan_rate_limited(const struct rt_plan *plan);

#endif
