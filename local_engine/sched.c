/*
 * sched.c: continuous batching over one model.
 *
 * What it does: one thread per scheduler (one scheduler per loaded model)
 * runs steps.  A step is ONE forward pass (le_model_forward_batch) over
 *   - the next token of every generating sequence that is not paused, and
 *   - pieces (<= chunk tokens) of the prompts of prefilling sequences,
 *     round robin, up to chunk prompt tokens in all per step while other
 *     sequences generate (n_batch when none does); a prompt's tokens on
 *     the per-row kernels (its last, short piece) only as many as keep
 *     the step within SCHED_STEP_ROWS rows (see step()),
 * so the weights are read once per step for every sequence, a long prompt
 * is cut into chunks interleaved with the other streams' tokens, and
 * sequences join (admission) and leave (finished, cancelled) between
 * steps.  Each sequence has its own KV cells, sampler and grammar state
 * (struct le_gen, engine.c).  What it does not: tokenize or render (the
 * caller submits token ids), or talk to sockets (callbacks do).
 *
 * KV memory and the prefix cache.  The scheduler holds parallel +
 * cache_seqs sequences of n_ctx cells each, allocated once (calloc: pages
 * untouched stay unmapped).  A finished sequence's cells stay, with the
 * tokens they hold, as an idle entry.  Admission picks, among every
 * sequence (idle or active), the one sharing the longest prefix with the
 * new prompt; the new sequence takes an idle slot: that same one when it
 * is idle, else (eviction rule) the least recently used idle slot, into
 * which the shared prefix cells are copied.  So the cache is an LRU of
 * idle sequences, bounded by the configured memory; cells are never
 * shared while written.  A request whose prompt shares SCHED_WAIT_MIN or
 * more tokens beyond those with a sequence still prefilling waits (FIFO)
 * until that prefill is done, so a burst sharing a system prompt computes
 * it once.  The last prompt token is always evaluated again
 * (its logits are needed).  A request with on_prompt_logprob (echo)
 * wants every position's logits: it reuses nothing, takes the LRU idle
 * slot (the best cached prefix stays) and never waits; every token of
 * its pieces is an output row of its step (lp_logits, one step's rows),
 * reported piece by piece before the step's sampling, and its cells stay
 * for later requests like any other's (the same cuts from 0 as a fresh
 * prompt's, so the same kernels made them).  A prompt_only request
 * (max_tokens 0: scoring a prompt) has no sampling row: it ends in the
 * step that evaluates its last prompt token, after that step's figures
 * went out, and never joins the generating sequences.
 *
 * Determinism: a token's kernels depend only on its own sequence: the
 * whole prefill pieces (chunk tokens) from position SCHED_AMX_POS on may
 * take the AMX GEMM when chunk reaches le_model_amx_min_tok (the
 * AMX-vs-per-row crossover of the model's weight types, le_int.h),
 * everything else the per-row kernels, whose floats do not depend on how
 * many rows share the product (model.c's matmul), so a sequence's greedy
 * output is the same alone and batched
 * (tests/test_sched.c).
 *
 * Threads and locks: mu guards the queue, the counters and stop; the
 * sequences' state is the scheduler thread's alone.  Callbacks run on the
 * scheduler thread without mu held.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "le_int.h"

struct sreq {
    struct le_sched_req r; /* prompt replaced by our copy */
    int32_t *prompt;
    struct sreq *next;
    double t_submit;
};

enum seq_state { SEQ_IDLE = 0, SEQ_PREFILL, SEQ_GEN };

struct seq {
    struct le_session *kv; /* cells: n_past, hist */
    enum seq_state state;
    uint64_t used;         /* clock of last use (LRU of idle slots) */
    struct sreq *rq;       /* active only */
    struct le_gen g;
    size_t fed;            /* prompt tokens in the cells */
    size_t cut0;           /* fed at admission: the pieces' cuts start there */
    int32_t next;          /* SEQ_GEN: the token to evaluate next */
    double t_admit, t_first;
};

struct le_sched {
    struct le_model *m;
    struct le_session *ws; /* scratch for parallel + chunk tokens */
    struct seq *seqs;
    int n_seqs, parallel, max_queue, chunk;
    int idle_budget;       /* prompt tokens of a step nobody waits on */
    int amx_ok;            /* chunk >= le_model_amx_min_tok > 0 */
    int rr;                /* round-robin start among prefilling seqs */
    uint64_t clock;
    /* batch arrays, [parallel + chunk] */
    int32_t *ids, *pos, *out, *out_seq;
    struct le_session **bseq;
    struct piece {
        int seq, len;
        int amx;           /* an AMX piece (after amx_from) */
        size_t from;
        int lp_row, lp_n;  /* on_prompt_logprob: output rows lp_row.. of
                              positions from..from + lp_n - 1 */
    } *pc;                 /* [idle_budget] this step's prompt pieces */
    /* [parallel + idle_budget][n_vocab] logits of a step with prompt
     * log-probability rows (every token of such a request's pieces is an
     * output); made at the first such request, then kept */
    float *lp_logits;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct sreq *head, *tail; /* under mu */
    int n_queued, n_active, n_inflight, stop;
    _Atomic int32_t st_paused;
    _Atomic uint64_t st_requests, st_prompt, st_cached, st_gen, st_steps;
};

static int
flag(const _Atomic int *f)
{
    return f && atomic_load(f);
}

static void
sreq_free(struct sreq *q)
{
    if (q) {
        free(q->prompt);
        free(q);
    }
}

/* Ends an active sequence: counts first (so a client that sees the end
 * may submit again at once), then the callback, outside mu. */
static void
seq_finish(struct le_sched *s, struct seq *q, enum le_status st,
           const char *err)
{
    struct sreq *rq = q->rq;
    double t = le_now_ms();
    q->g.r.prompt_ms = (q->t_first > 0 ? q->t_first : t) - q->t_admit;
    q->g.r.gen_ms = q->t_first > 0 ? t - q->t_first : 0;
    if (st == LE_ECANCELED && q->g.r.finish == LE_FINISH_NONE)
        q->g.r.finish = LE_FINISH_CANCEL;
    struct le_gen_result res = q->g.r;
    le_gen_cleanup(&q->g);
    q->rq = NULL;
    q->state = SEQ_IDLE;
    q->used = ++s->clock;
    pthread_mutex_lock(&s->mu);
    s->n_active--;
    s->n_inflight--;
    pthread_mutex_unlock(&s->mu);
    if (rq->r.on_done)
        rq->r.on_done(rq->r.ud, st, &res, err ? err : "");
    sreq_free(rq);
}

static size_t
common_prefix(const struct le_session *kv, const int32_t *p, size_t n)
{
    size_t c = 0, lim = (size_t)kv->n_past < n ? (size_t)kv->n_past : n;
    while (c < lim && kv->hist[c] == p[c])
        c++;
    return c;
}

/* Copies cells [0, n) of every layer (and their tokens) from a to b. */
static void
copy_cells(struct le_session *b, const struct le_session *a, size_t n)
{
    size_t layers = (size_t)b->m->hp.n_layer;
    size_t lbytes = (size_t)b->n_ctx * b->kv_row;
    for (size_t l = 0; l < layers; l++) {
        memcpy(b->kv_k + l * lbytes, a->kv_k + l * lbytes, n * b->kv_row);
        memcpy(b->kv_v + l * lbytes, a->kv_v + l * lbytes, n * b->kv_row);
    }
    memcpy(b->hist, a->hist, n * sizeof(int32_t));
}

/* Gives rq a sequence (there is an idle one: n_active < parallel <=
 * idle + active).  Scheduler thread, mu not held. */
static void
admit(struct le_sched *s, struct sreq *rq)
{
    size_t n = rq->r.n_prompt;
    int best = -1, slot = -1, lru = -1;
    size_t best_len = 0, slot_len = 0;
    for (int i = 0; i < s->n_seqs; i++) {
        struct seq *q = &s->seqs[i];
        size_t c = common_prefix(q->kv, rq->prompt, n);
        if (c > best_len) {
            best_len = c;
            best = i;
        }
        if (q->state != SEQ_IDLE)
            continue;
        if (lru < 0 || q->used < s->seqs[lru].used)
            lru = i;
        if (c > slot_len) {
            slot_len = c;
            slot = i;
        }
    }
    size_t reuse;
    int want_lp = rq->r.on_prompt_logprob != NULL;
    if (want_lp) {
        /* every position's logits are wanted: nothing reused, and the
         * least recently used slot taken so the best cached prefix stays */
        slot = lru;
        reuse = 0;
    } else if (slot >= 0 && slot_len == best_len) {
        reuse = slot_len; /* in place */
    } else {
        slot = lru;
        reuse = best_len;
        if (best >= 0 && reuse > 0)
            copy_cells(s->seqs[slot].kv, s->seqs[best].kv, reuse);
    }
    if (reuse >= n)
        reuse = n - 1;
    struct seq *q = &s->seqs[slot];
    q->kv->n_past = (int32_t)reuse;
    q->fed = reuse;
    q->cut0 = reuse;
    q->rq = rq;
    q->t_admit = le_now_ms();
    q->t_first = 0;
    q->state = SEQ_PREFILL;
    q->next = -1;
    q->used = ++s->clock;
    char err[256] = "";
    enum le_status st =
        le_gen_init(&q->g, s->m, rq->r.sp, rq->prompt, n, rq->r.on_token,
                    rq->r.ud, err, sizeof(err));
    q->g.r.cached_tokens = (int32_t)reuse;
    if (st == LE_OK)
        q->g.lp_cb = rq->r.on_logprob;
    if (st == LE_OK && want_lp && !s->lp_logits) {
        size_t rows = (size_t)(s->parallel + s->idle_budget);
        s->lp_logits = malloc(rows * (size_t)s->m->hp.n_vocab * sizeof(float));
        if (!s->lp_logits) {
            le_gen_cleanup(&q->g);
            st = LE_ENOMEM;
            snprintf(err, sizeof(err), "out of memory for the prompt's "
                                       "log-probabilities");
        }
    }
    atomic_fetch_add(&s->st_prompt, n);
    atomic_fetch_add(&s->st_cached, reuse);
    if (st != LE_OK) {
        memset(&q->g, 0, sizeof(q->g));
        q->g.r.prompt_tokens = (int32_t)n;
        seq_finish(s, q, st, err);
    }
}

/* Rows of a step on the per-row kernels (generating sequences' tokens and
 * prompt tails) up to which prompt tokens join while others generate:
 * the decode kernel's tile is 4 tokens x 2 groups, and 8 rows cost about
 * twice one (measured on the 1B q4_0 slice, one thread, CPU time: 21-23
 * vs 11-12 ms), so a newcomer's prompt tail keeps a step within that. */
#define SCHED_STEP_ROWS 8

/* Position from which a prompt's whole pieces may take the AMX GEMM.  A
 * step's AMX piece costs a fixed 16-token tile whatever its other rows
 * (2048x4 Q4_0 slice, 1 thread: ~50 ms for a 32-token piece against 28
 * ms for a decode step of 8 sequences), so a short prompt joining
 * generating streams (a chat turn, a small request) goes per-row, a few
 * rows a step, and only a long one, whose time to first token the GEMM's
 * speed decides, makes those steps longer.  By position, not by prompt
 * length, so that cells a cached prefix holds were made by the kernels a
 * fresh prompt would use (the pieces' cuts permitting, as before). */
#define SCHED_AMX_POS 128

/* One forward pass over every runnable sequence; 0 if none ran. */
static int
step(struct le_sched *s)
{
    int V = s->m->hp.n_vocab;
    int nt = 0, no = 0;
    for (int i = 0; i < s->n_seqs; i++) {
        struct seq *q = &s->seqs[i];
        if (q->state != SEQ_IDLE && flag(q->rq->r.cancel))
            seq_finish(s, q, LE_ECANCELED, "generation cancelled");
    }
    int paused = 0;
    /* per-row part: generating sequences' next tokens */
    for (int i = 0; i < s->n_seqs; i++) {
        struct seq *q = &s->seqs[i];
        if (q->state == SEQ_IDLE)
            continue;
        if (flag(q->rq->r.paused)) {
            paused++;
            continue;
        }
        if (q->state != SEQ_GEN)
            continue;
        s->ids[nt] = q->next;
        s->bseq[nt] = q->kv;
        s->pos[nt] = q->kv->n_past;
        s->out[no] = nt;
        s->out_seq[no] = i;
        nt++;
        no++;
    }
    atomic_store(&s->st_paused, paused);
    /* Prompt pieces, round robin over the prefilling sequences.  A
     * prompt is cut into pieces of s->chunk tokens from where its cells
     * end at admission (the last one shorter), the same cuts whatever
     * else runs.  A whole piece from position SCHED_AMX_POS on is an
     * AMX piece (when chunk reaches the model's AMX crossover): fed in
     * one step (after amx_from).  Every other token (a
     * prompt's last, shorter piece; all of them when chunk is small) takes
     * the per-row kernels, whose results do not depend on the batch, so
     * those may be fed a few per step: while other sequences generate, up
     * to SCHED_STEP_ROWS rows in all with the generating ones (at least
     * one prompt token per step), so a newcomer's prompt tail does not
     * make the others' step longer than that (an AMX piece's step costs
     * what it costs: its GEMM's fixed cost is the weights' unpacking).
     * At most s->chunk prompt tokens per step while others generate, up
     * to s->idle_budget when none does. */
    int budget = nt > 0 ? s->chunk : s->idle_budget, n_pc = 0;
    int rows = nt > 0 ? (nt < SCHED_STEP_ROWS ? SCHED_STEP_ROWS - nt : 1)
                      : budget;
    for (int k = 0; k < s->n_seqs && budget > 0; k++) {
        int i = (s->rr + k) % s->n_seqs;
        struct seq *q = &s->seqs[i];
        if (q->state != SEQ_PREFILL || flag(q->rq->r.paused))
            continue;
        size_t from = q->fed, n = q->rq->r.n_prompt;
        while (from < n && budget > 0) {
            size_t into = (from - q->cut0) % (size_t)s->chunk;
            size_t cut = from - into + (size_t)s->chunk; /* next cut */
            if (cut > n)
                cut = n;
            int c = (int)(cut - from);
            int amx = s->amx_ok && into == 0 && c == s->chunk &&
                      from >= SCHED_AMX_POS;
            if (amx && c > budget)
                break;
            if (!amx) {
                if (rows <= 0)
                    break;
                c = c < rows ? c : rows;
                c = c < budget ? c : budget;
                rows -= c;
            }
            s->pc[n_pc].seq = i;
            s->pc[n_pc].from = from;
            s->pc[n_pc].len = c;
            s->pc[n_pc].amx = amx;
            s->pc[n_pc].lp_n = 0;
            n_pc++;
            from += (size_t)c;
            budget -= c;
        }
    }
    s->rr = (s->rr + 1) % s->n_seqs;
    int amx_from = nt, lp_rows = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            amx_from = nt;
        for (int k = 0; k < n_pc; k++) {
            struct seq *q = &s->seqs[s->pc[k].seq];
            size_t from = s->pc[k].from;
            int c = s->pc[k].len;
            int want_lp = q->rq->r.on_prompt_logprob != NULL;
            if (s->pc[k].amx != pass)
                continue;
            s->pc[k].lp_row = no;
            for (int t = 0; t < c; t++) {
                s->ids[nt] = q->rq->prompt[from + (size_t)t];
                s->bseq[nt] = q->kv;
                s->pos[nt] = (int32_t)(from + (size_t)t);
                nt++;
                /* a row that predicts the next prompt token (the last
                 * one's predicts the first sampled token: below) */
                if (want_lp && from + (size_t)t + 1 < q->rq->r.n_prompt) {
                    s->out[no] = nt - 1;
                    s->out_seq[no] = -1;
                    no++;
                    s->pc[k].lp_n++;
                    lp_rows++;
                }
            }
            if (from + (size_t)c > q->fed)
                q->fed = from + (size_t)c;
            /* the last prompt token's row predicts the first sampled
             * token: none for a prompt_only request (ended below) */
            if (from + (size_t)c == q->rq->r.n_prompt &&
                !q->rq->r.prompt_only) {
                s->out[no] = nt - 1;
                s->out_seq[no] = s->pc[k].seq;
                no++;
            }
        }
    }
    if (nt == 0)
        return 0;
    struct le_fwd_batch b = {0};
    b.n_tok = nt;
    b.ids = s->ids;
    b.seq = s->bseq;
    b.pos = s->pos;
    b.amx_from = amx_from;
    b.n_out = no;
    b.out = s->out;
    /* the output product's rows are computed each on its own (per-row
     * kernels), so extra rows change no other row's figures */
    float *logits = lp_rows ? s->lp_logits : s->ws->logits;
    b.logits = logits;
    char err[256] = "";
    enum le_status st = le_model_forward_batch(s->ws, &b, err, sizeof(err));
    atomic_fetch_add(&s->st_steps, 1);
    if (st != LE_OK) {
        /* cannot happen for checked prompts; end every sequence in it */
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < s->n_seqs; i++)
                if (s->seqs[i].state != SEQ_IDLE &&
                    s->seqs[i].kv == s->bseq[t])
                    seq_finish(s, &s->seqs[i], st, err);
        return 1;
    }
    /* prompt log-probabilities, piece by piece: a sequence's pieces are
     * in pc[] in prompt order */
    for (int k = 0; k < n_pc && lp_rows; k++) {
        const struct piece *pk = &s->pc[k];
        struct seq *q = &s->seqs[pk->seq];
        for (int r = 0; r < pk->lp_n && q->state != SEQ_IDLE; r++) {
            size_t pos = pk->from + (size_t)r;
            struct le_logprob lp;
            le_logprobs(logits + (size_t)(pk->lp_row + r) * V, V,
                        q->rq->prompt[pos + 1], q->rq->r.sp->top_logprobs,
                        &lp);
            q->rq->r.on_prompt_logprob(q->rq->r.ud, &lp);
        }
    }
    /* prompt_only requests whose prefill this step completed end here,
     * their figures all reported: nothing is sampled, no decode runs */
    for (int k = 0; k < n_pc; k++) {
        struct seq *q = &s->seqs[s->pc[k].seq];
        if (q->state == SEQ_PREFILL && q->rq->r.prompt_only &&
            q->fed == q->rq->r.n_prompt) {
            q->g.r.finish = LE_FINISH_LENGTH;
            seq_finish(s, q, LE_OK, "");
        }
    }
    double t = le_now_ms();
    for (int o = 0; o < no; o++) {
        if (s->out_seq[o] < 0)
            continue; /* a prompt log-probability row */
        struct seq *q = &s->seqs[s->out_seq[o]];
        if (q->state == SEQ_IDLE)
            continue;
        if (q->state == SEQ_PREFILL) {
            q->state = SEQ_GEN;
            q->t_first = t;
        }
        int32_t before = q->g.r.completion_tokens, next;
        st = le_gen_step(&q->g, logits + (size_t)o * V,
                         q->kv->n_past, q->kv->n_ctx, &next, err,
                         sizeof(err));
        atomic_fetch_add(&s->st_gen,
                         (uint64_t)(q->g.r.completion_tokens - before));
        if (st != LE_OK)
            seq_finish(s, q, st,
                       st == LE_ECANCELED ? "generation cancelled" : err);
        else if (next < 0)
            seq_finish(s, q, LE_OK, "");
        else
            q->next = next;
    }
    return 1;
}

/* Prompt tokens a prefilling sequence will soon hold that rq could reuse
 * beyond what the cells hold now: worth waiting for (a burst of requests
 * sharing a system prompt prefills it once).  Never for a paused
 * sequence (it may not move for long).  Scheduler thread. */
#define SCHED_WAIT_MIN 32

static int
defer(struct le_sched *s, const struct sreq *rq)
{
    size_t have = 0, n = rq->r.n_prompt;
    if (rq->r.on_prompt_logprob)
        return 0; /* it reuses nothing */
    for (int i = 0; i < s->n_seqs; i++) {
        size_t c = common_prefix(s->seqs[i].kv, rq->prompt, n);
        have = c > have ? c : have;
    }
    for (int i = 0; i < s->n_seqs; i++) {
        const struct seq *q = &s->seqs[i];
        if (q->state != SEQ_PREFILL || flag(q->rq->r.paused) ||
            flag(q->rq->r.cancel))
            continue;
        size_t lim = q->rq->r.n_prompt < n ? q->rq->r.n_prompt : n, c = 0;
        while (c < lim && q->rq->prompt[c] == rq->prompt[c])
            c++;
        /* a long shared prefix, or the very same prompt (n > 1) */
        if (c >= have + SCHED_WAIT_MIN || (c == n && c > have + 1))
            return 1;
    }
    return 0;
}

static int
runnable(struct le_sched *s)
{
    int paused = 0;
    for (int i = 0; i < s->n_seqs; i++) {
        struct seq *q = &s->seqs[i];
        if (q->state == SEQ_IDLE)
            continue;
        if (!flag(q->rq->r.paused) || flag(q->rq->r.cancel))
            return 1;
        paused++;
    }
    /* No step runs while every sequence is paused, so the paused gauge
     * (step() keeps it otherwise) is kept here: a slow client's lone
     * sequence shows as paused, not as silently stalled. */
    atomic_store(&s->st_paused, paused);
    return 0;
}

/* A burst arriving at an idle engine (requests sent together) is
 * gathered for up to SCHED_BURST_MS after the first one's submission, so
 * that their prompts are prefilled in one step: taken one by one, the
 * first would run alone and the others would then join it a few prompt
 * rows per step (SCHED_STEP_ROWS), each of those steps slower, and their
 * first tokens several steps later.  A lone request waits that long
 * once, when the engine was idle; one arriving while others run never
 * waits (it joins at the next step).  Scheduler thread, mu held. */
#define SCHED_BURST_MS 1.0

static void
gather_burst(struct le_sched *s)
{
    while (!s->stop && s->n_active == 0 && s->head &&
           s->n_queued < s->parallel) {
        double left = s->head->t_submit + SCHED_BURST_MS - le_now_ms();
        if (left <= 0)
            return;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)(left * 1e6);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
}

static void *
sched_main(void *arg)
{
    struct le_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        gather_burst(s);
        while (!s->stop && s->head && s->n_active < s->parallel &&
               !defer(s, s->head)) {
            struct sreq *rq = s->head;
            s->head = rq->next;
            if (!s->head)
                s->tail = NULL;
            s->n_queued--;
            s->n_active++;
            pthread_mutex_unlock(&s->mu);
            if (flag(rq->r.cancel)) {
                pthread_mutex_lock(&s->mu);
                s->n_active--;
                s->n_inflight--;
                pthread_mutex_unlock(&s->mu);
                struct le_gen_result res = {0};
                res.prompt_tokens = (int32_t)rq->r.n_prompt;
                res.finish = LE_FINISH_CANCEL;
                if (rq->r.on_done)
                    rq->r.on_done(rq->r.ud, LE_ECANCELED, &res,
                                  "generation cancelled");
                sreq_free(rq);
            } else {
                admit(s, rq);
            }
            pthread_mutex_lock(&s->mu);
        }
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->mu);
        int ran = runnable(s) && step(s);
        pthread_mutex_lock(&s->mu);
        if (!ran && !s->stop &&
            !(s->head && s->n_active < s->parallel)) {
            /* Nothing to run: sleep until a submit or a wake (a cancel,
             * a resumed sequence); the timeout is only a safety net. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void
le_sched_params_default(struct le_sched_params *p)
{
    p->parallel = 4;
    p->max_queue = 64;
    p->cache_seqs = 2;
    p->chunk = 32;
}

void
le_sched_free(struct le_sched *s)
{
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    /* Every request not done: cancelled, on this thread. */
    for (int i = 0; s->seqs && i < s->n_seqs; i++)
        if (s->seqs[i].state != SEQ_IDLE)
            seq_finish(s, &s->seqs[i], LE_ECANCELED,
                       "the local engine is shutting down");
    while (s->head) {
        struct sreq *rq = s->head;
        s->head = rq->next;
        struct le_gen_result res = {0};
        res.prompt_tokens = (int32_t)rq->r.n_prompt;
        res.finish = LE_FINISH_CANCEL;
        if (rq->r.on_done)
            rq->r.on_done(rq->r.ud, LE_ECANCELED, &res,
                          "the local engine is shutting down");
        sreq_free(rq);
    }
    for (int i = 0; s->seqs && i < s->n_seqs; i++)
        le_session_free(s->seqs[i].kv);
    free(s->seqs);
    le_session_free(s->ws);
    free(s->ids);
    free(s->pos);
    free(s->out);
    free(s->out_seq);
    free(s->bseq);
    free(s->pc);
    free(s->lp_logits);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

enum le_status
le_sched_new(struct le_model *m, const struct le_sched_params *p,
             struct le_sched **out, char *err, size_t errlen)
{
    struct le_sched_params dp;
    if (!p) {
        le_sched_params_default(&dp);
        p = &dp;
    }
    if (!m || !out || m->vocab_only) {
        if (err && errlen)
            snprintf(err, errlen, "scheduler: no model with weights");
        return LE_EINVAL;
    }
    struct le_sched *s = calloc(1, sizeof(*s));
    if (!s)
        goto oom;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->m = m;
    s->parallel = p->parallel > 0 ? p->parallel : 1;
    if (s->parallel > 256)
        s->parallel = 256;
    s->max_queue = p->max_queue > 0 ? p->max_queue : 0;
    s->chunk = p->chunk > 0 ? p->chunk : m->params.n_batch;
    s->idle_budget = s->chunk > m->params.n_batch ? s->chunk
                                                  : m->params.n_batch;
    int amx_min = le_model_amx_min_tok(m);
    s->amx_ok = amx_min > 0 && s->chunk >= amx_min;
    s->n_seqs = s->parallel + (p->cache_seqs > 0 ? p->cache_seqs : 0);
    size_t cap = (size_t)(s->parallel + s->idle_budget);
    s->ids = calloc(cap, sizeof(int32_t));
    s->pos = calloc(cap, sizeof(int32_t));
    s->out = calloc(cap, sizeof(int32_t));
    s->out_seq = calloc(cap, sizeof(int32_t));
    s->bseq = calloc(cap, sizeof(*s->bseq));
    s->pc = calloc(cap, sizeof(*s->pc));
    s->seqs = calloc((size_t)s->n_seqs, sizeof(*s->seqs));
    if (!s->ids || !s->pos || !s->out || !s->out_seq || !s->bseq ||
        !s->pc || !s->seqs)
        goto oom;
    enum le_status st = le_session_new_sized(m, (int)cap, s->parallel, 0,
                                             &s->ws, err, errlen);
    for (int i = 0; st == LE_OK && i < s->n_seqs; i++)
        st = le_session_new_sized(m, 0, 0, 1, &s->seqs[i].kv, err, errlen);
    if (st != LE_OK) {
        le_sched_free(s);
        return st;
    }
    if (pthread_create(&s->th, NULL, sched_main, s) != 0) {
        if (err && errlen)
            snprintf(err, errlen, "scheduler: cannot start its thread");
        le_sched_free(s);
        return LE_ENOMEM;
    }
    s->started = 1;
    *out = s;
    return LE_OK;
oom:
    if (err && errlen)
        snprintf(err, errlen, "scheduler: out of memory");
    le_sched_free(s);
    return LE_ENOMEM;
}

enum le_status
le_sched_submit(struct le_sched *s, const struct le_sched_req *r, char *err,
                size_t errlen)
{
    if (!s || !r || !r->sp || (!r->prompt && r->n_prompt)) {
        if (err && errlen)
            snprintf(err, errlen, "scheduler: bad request");
        return LE_EINVAL;
    }
    int32_t n_ctx = s->m->params.n_ctx;
    enum le_status st;
    if (r->prompt_only && r->n_prompt > 0) {
        /* no token follows: the prompt alone must fit */
        st = r->n_prompt <= (size_t)n_ctx ? LE_OK : LE_ECONTEXT;
        if (st != LE_OK && err && errlen)
            snprintf(err, errlen,
                     "this model's context window is %d tokens; the "
                     "prompt has %zu tokens",
                     (int)n_ctx, r->n_prompt);
    } else {
        st = le_gen_check(r->sp, r->n_prompt, n_ctx, err, errlen);
    }
    if (st != LE_OK)
        return st;
    if (!le_sampling_bias_ok(r->sp, s->m->hp.n_vocab)) {
        if (err && errlen)
            snprintf(err, errlen,
                     "logit bias: a token id outside the vocabulary or a "
                     "bias that is not a finite number");
        return LE_EINVAL;
    }
    for (size_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->m->hp.n_vocab) {
            if (err && errlen)
                snprintf(err, errlen,
                         "token id %d is outside the vocabulary",
                         (int)r->prompt[i]);
            return LE_EINVAL;
        }
    struct sreq *q = calloc(1, sizeof(*q));
    if (q)
        q->prompt = malloc(r->n_prompt * sizeof(int32_t));
    if (!q || !q->prompt) {
        sreq_free(q);
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
        return LE_ENOMEM;
    }
    memcpy(q->prompt, r->prompt, r->n_prompt * sizeof(int32_t));
    q->r = *r;
    q->r.prompt = q->prompt;
    q->t_submit = le_now_ms();
    pthread_mutex_lock(&s->mu);
    if (s->stop || s->n_inflight >= s->parallel + s->max_queue) {
        int busy = s->n_inflight;
        pthread_mutex_unlock(&s->mu);
        sreq_free(q);
        if (err && errlen)
            snprintf(err, errlen,
                     "the local engine is busy (%d requests running or "
                     "queued; parallel %d, queue %d)",
                     busy, s->parallel, s->max_queue);
        return LE_EBUSY;
    }
    s->n_inflight++;
    s->n_queued++;
    if (s->tail)
        s->tail->next = q;
    else
        s->head = q;
    s->tail = q;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&s->st_requests, 1);
    return LE_OK;
}

void
le_sched_wake(struct le_sched *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void
le_sched_get_stats(struct le_sched *s, struct le_sched_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    out->queued = s->n_queued;
    out->active = s->n_active;
    pthread_mutex_unlock(&s->mu);
    out->paused = atomic_load(&s->st_paused);
    out->requests = atomic_load(&s->st_requests);
    out->prompt_tokens = atomic_load(&s->st_prompt);
    out->cached_tokens = atomic_load(&s->st_cached);
    out->generated_tokens = atomic_load(&s->st_gen);
    out->steps = atomic_load(&s->st_steps);
    out->parallel = s->parallel;
    out->max_queue = s->max_queue;
}
