/*
 * run.c: the run of one request over its plan, as a pure state machine
 * (router.h, "the run of a request", has the calling sequence and the
 * rules).  Every transition is a function of the run's state, the event
 * (an attempt begun, its result, a first byte, a timer) and now_us passed
 * in, so each failover rule is unit-tested without sockets or sleeping
 * (tests/test_run.c).  The gateway performs the I/O a step asks for.
 *
 * States, per slot (at most two attempts at once, a hedge):
 *
 *   free --START--> starting --begun ok--> running --result--> free
 *                       \--begun !ok (counts as a failed attempt)--> free
 *
 * and for the run: going (steps START/WAIT/NOTHING) until one final step
 * (DELIVER, PASS, BROKEN, FAIL) sets done; after it every call answers
 * NOTHING.  The health of targets is not touched here (rt_report does
 * that); only the decision of what comes next.
 */
#include "router.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../providers/providers.h"

void
rt_run_init(struct rt_run *run, const struct cfg *c,
            const struct rt_plan *plan, uint64_t seed)
{
    memset(run, 0, sizeof(*run));
    run->cfg = c;
    run->plan = plan;
    run->winner = -1;
    run->all_timeouts = 1;
    run->all_rate_limited = 1;
    run->all_busy = 1;
    run->all_refused = 1;
    run->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
}

char *
rt_target_name(const struct cfg *c, struct cfg_target t, char *buf,
               size_t len)
{
    const struct cfg_provider *p = &c->providers[t.provider];
    snprintf(buf, len, "%s@%s", p->models[t.model].name, p->name);
    return buf;
}

static void
log_add(struct rt_run *run, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
log_add(struct rt_run *run, const char *fmt, ...)
{
    size_t cap = sizeof(run->log);
    if (run->log_len + 1 >= cap)
        return; /* full: the first attempts are the informative ones */
    if (run->log_len) {
        int w = snprintf(run->log + run->log_len, cap - run->log_len, "; ");
        run->log_len += (size_t)w;
        if (run->log_len >= cap)
            run->log_len = cap - 1;
    }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(run->log + run->log_len, cap - run->log_len, fmt, ap);
    va_end(ap);
    if (w > 0)
        run->log_len += (size_t)w;
    if (run->log_len >= cap)
        run->log_len = cap - 1;
}

static void
step_reset(struct rt_step *st)
{
    memset(st, 0, sizeof(*st));
    st->what = RT_DO_NOTHING;
    st->cancel = -1;
}

static int
n_running(const struct rt_run *run)
{
    return run->running[0] + run->running[1];
}

static int
can_start(const struct rt_run *run)
{
    return run->next < run->plan->n &&
           run->attempts < run->plan->max_attempts;
}

/* The final status when nothing is left to try. */
static void
give_up(struct rt_run *run, struct rt_step *st)
{
    run->done = 1;
    st->what = RT_DO_FAIL;
    const struct rt_plan *p = run->plan;
    if (p->resolved == 0) {
        st->status = 404;
        st->type = "invalid_request_error";
        st->code = "model_not_found";
    } else if (run->attempts == 0 && p->n == 0) {
        /* Every target out of rotation: at once, not queued behind it. */
        st->retry_after_s = (p->retry_after_ms + 999) / 1000;
        if (rt_plan_rate_limited(p)) {
            st->status = 429;
            st->type = "requests";
            st->code = "rate_limit_exceeded";
        } else {
            st->status = 503;
            st->type = "upstream_error";
            st->code = "no_target_available";
        }
    } else if (run->attempts > 0 && run->all_rate_limited) {
        /* So the client's rate-limit handling (an SDK's RateLimitError,
         * backoff on Retry-After) runs. */
        st->status = 429;
        st->type = "requests";
        st->code = "rate_limit_exceeded";
        st->retry_after_s = run->retry_after_s;
    } else if (run->attempts > 0 && run->all_busy) {
        /* Every target said "busy, retry later": so does the client. */
        st->status = 503;
        st->type = "server_error";
        st->code = "server_busy";
        st->retry_after_s = run->retry_after_s > 0 ? run->retry_after_s : 1;
    } else if (run->attempts > 0 && run->all_timeouts) {
        st->status = 504;
        st->type = "upstream_error";
        st->code = "upstream_timeout";
    } else {
        st->status = 502;
        st->type = "upstream_error";
        st->code = "upstream_failed";
    }
}

static int
free_slot(const struct rt_run *run)
{
    return run->running[0] ? 1 : 0;
}

void
rt_run_next(struct rt_run *run, int64_t now_us, struct rt_step *st)
{
    step_reset(st);
    if (run->done)
        return;
    if (n_running(run) == 2)
        return;
    if (run->wait_until_us > now_us && n_running(run) == 0) {
        st->what = RT_DO_WAIT;
        st->at_us = run->wait_until_us;
        return;
    }
    if (can_start(run)) {
        run->wait_until_us = 0;
        st->what = RT_DO_START;
        st->slot = free_slot(run);
        st->target = run->next++;
        run->slot_target[st->slot] = st->target;
        return;
    }
    if (n_running(run))
        return; /* the running attempt decides */
    give_up(run, st);
}

/* After a retryable failure: the next step of the run. */
static void
after_failure(struct rt_run *run, int64_t now_us, struct rt_step *st)
{
    if (n_running(run)) {
        step_reset(st); /* a hedged rival may yet answer */
        return;
    }
    if (!can_start(run)) {
        step_reset(st);
        give_up(run, st);
        return;
    }
    int64_t b = run->cfg->failover.backoff_ms;
    for (int i = 1; i < run->attempts && b < RT_BACKOFF_MAX_MS; i++)
        b *= 2;
    if (b > RT_BACKOFF_MAX_MS)
        b = RT_BACKOFF_MAX_MS;
    if (b > 0) {
        run->rng ^= run->rng << 13;
        run->rng ^= run->rng >> 7;
        run->rng ^= run->rng << 17;
        b = b / 2 + (int64_t)(run->rng % (uint64_t)(b / 2 + 1));
        run->wait_until_us = now_us + b * 1000;
    }
    rt_run_next(run, now_us, st);
}

static void
note_failure(struct rt_run *run, int timeout, int rate_limited, int busy,
             int64_t retry_after_s)
{
    if (!timeout)
        run->all_timeouts = 0;
    if (!busy)
        run->all_busy = 0;
    else if (retry_after_s > 0 && (run->retry_after_s == 0 ||
                                   retry_after_s < run->retry_after_s))
        run->retry_after_s = retry_after_s;
    if (!rate_limited) {
        run->all_rate_limited = 0;
    } else if (retry_after_s > 0 && (run->retry_after_s == 0 ||
                                     retry_after_s < run->retry_after_s)) {
        run->retry_after_s = retry_after_s;
    }
}

void
rt_run_begun(struct rt_run *run, int slot, int ok, const char *reason,
             int64_t now_us, struct rt_step *st)
{
    step_reset(st);
    if (run->done)
        return;
    run->attempts++;
    if (!ok) {
        char name[160];
        log_add(run, "%s: %s",
                rt_target_name(run->cfg,
                               run->plan->targets[run->slot_target[slot]],
                               name, sizeof(name)),
                reason ? reason : "could not start");
        run->all_refused = 0;
        note_failure(run, 0, 0, 0, 0);
        after_failure(run, now_us, st);
        return;
    }
    run->running[slot] = 1;
    int hedge = run->cfg->failover.hedge_after_ms;
    if (hedge > 0 && n_running(run) == 1 && run->winner < 0 &&
        can_start(run))
        st->hedge_at_us = now_us + (int64_t)hedge * 1000;
}

void
rt_run_hedge(struct rt_run *run, int64_t now_us, struct rt_step *st)
{
    step_reset(st);
    if (run->done || run->winner >= 0 || n_running(run) != 1 ||
        !can_start(run))
        return;
    rt_run_next(run, now_us, st);
}

int
rt_run_first_byte(struct rt_run *run, int slot)
{
    if (run->winner >= 0)
        return -1;
    run->winner = slot;
    int other = 1 - slot;
    if (run->running[other]) {
        run->running[other] = 0;
        return other;
    }
    return -1;
}

/* A final step for slot: the rival (if any) is cancelled. */
static void
final(struct rt_run *run, int slot, enum rt_do what, struct rt_step *st)
{
    run->done = 1;
    st->what = what;
    st->slot = slot;
    int other = 1 - slot;
    if (run->running[other]) {
        run->running[other] = 0;
        st->cancel = other;
    }
}

void
rt_run_result(struct rt_run *run, int slot, const struct pv_result *res,
              int64_t now_us, struct rt_step *st)
{
    step_reset(st);
    if (!run->running[slot])
        return; /* cancelled already: its result means nothing */
    run->running[slot] = 0;
    if (run->done)
        return;
    if (run->winner >= 0 && run->winner != slot)
        return;
    if (res->outcome == PV_OK) {
        final(run, slot, RT_DO_DELIVER, st);
        return;
    }
    char name[160];
    rt_target_name(run->cfg, run->plan->targets[run->slot_target[slot]],
                   name, sizeof(name));
    int refused = rt_is_refusal(res);
    if (refused)
        log_add(run, "%s: status %d (%s)", name, res->http_status,
                res->detail[0] ? res->detail : "cannot serve this request");
    else if (res->outcome == PV_ERR_STATUS)
        log_add(run, "%s: status %d", name, res->http_status);
    else
        log_add(run, "%s: %s", name, pv_outcome_str(res->outcome));
    int timeout = res->outcome == PV_ERR_CONNECT_TIMEOUT ||
                  res->outcome == PV_ERR_FIRST_BYTE_TIMEOUT ||
                  res->outcome == PV_ERR_TIMEOUT;
    int rl = res->outcome == PV_ERR_STATUS && res->http_status == 429;
    int busy = res->outcome == PV_ERR_STATUS && res->http_status == 503 &&
               res->retry_after_s > 0;
    note_failure(run, timeout, rl, busy, res->retry_after_s);
    if (!refused)
        run->all_refused = 0;
    if (refused && run->winner != slot) {
        /* This target's own limit (a parameter it does not implement, a
         * context too short): the next target may serve the request, at
         * once (no backoff: nothing is overloaded).  With none left, the
         * refusal itself goes to the client when every attempt was one
         * (it says what no target could do), else the run fails as any
         * other, its log naming each attempt's reason. */
        if (n_running(run))
            return; /* the hedged rival decides first */
        if (can_start(run)) {
            rt_run_next(run, now_us, st);
            return;
        }
        if (run->all_refused) {
            final(run, slot, RT_DO_PASS, st);
            st->status = res->http_status;
            return;
        }
        give_up(run, st);
        return;
    }
    if (run->winner == slot) {
        /* Bytes reached the client: no failover. */
        final(run, slot, RT_DO_BROKEN, st);
        st->status = 502;
        return;
    }
    if (rt_outcome_of(run->cfg, res) != RT_FAILURE) {
        /* The upstream's own answer to this request (or our own failure):
         * retrying elsewhere would not change it. */
        final(run, slot, RT_DO_PASS, st);
        st->status = res->http_status >= 400 ? res->http_status : 502;
        return;
    }
    after_failure(run, now_us, st);
}

void
rt_run_abort(struct rt_run *run)
{
    run->done = 1;
    run->running[0] = run->running[1] = 0;
}
