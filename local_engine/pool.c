/*
 * pool.c: the persistent compute pool.  n - 1 worker threads are created
 * once (le_pool_new) and woken for each parallel step (one matrix product,
 * one attention layer); the caller of le_pool_run does share 0 itself,
 * then every share no worker has claimed, and then waits for the claimed
 * ones (below).  No thread is created per token.
 *
 * Waiting: a forward pass issues its steps back to back (microseconds of
 * serial work in between), so between the steps of a pass nobody sleeps:
 * a worker that has finished a step spins (pause) on the job counter, and
 * the caller spins for the workers, until POOL_IDLE_NS have passed without
 * a new job; only then does it sleep on a condition variable.  A futex
 * sleep and wake-up costs tens of microseconds per step, which at 30+
 * steps per token was measurable in generation; spinning for longer than
 * a few ms would burn a core that this machine class (2 cores shared with
 * the gateway's event loops) needs, so an idle pool still sleeps.
 *
 * Layout: the job fields the caller writes (gen, fn, arg, nth) share one
 * cache line that workers only read; the completion counter the workers
 * write and the sleep flags live on lines of their own, so a worker
 * finishing its share does not invalidate the line the others poll.
 *
 * Shares are claimed, not assigned: a job's shares 1..nth-1 are handed
 * to the workers that claim them (slot: the job's generation and the
 * count of shares still open, taken by compare-and-swap), and when the
 * caller has done share 0 it closes the job and does every share still
 * open itself.  So a worker that another process has descheduled (2
 * cores shared with the gateway and whatever else runs) no longer holds
 * up every step of a forward pass: the caller does its share instead of
 * waiting for it to be scheduled again.  A share computes the same
 * whoever runs it (the jobs index their scratch by share, not by
 * thread), so results do not depend on who claimed what.
 *
 * Invariants: at most one le_pool_run is in flight (run_lock).  A worker
 * reads the job fields only after claiming a share of that generation,
 * and the caller waits until every claimed share is done (done == the
 * shares claimed), so no worker reads them after le_pool_run returns;
 * the caller writes them before the seq_cst stores of slot and gen,
 * workers read them after an acquire-load of gen and their claim.  A
 * worker that finds its generation's slot closed (or a newer one) skips
 * the job without touching it.  No wake-up is lost: a worker registers
 * in sleepers (seq_cst) under mu and then checks gen before waiting; the
 * caller bumps gen (seq_cst) and then broadcasts under mu if it sees a
 * sleeper.  The caller and a finishing worker do the same with
 * caller_waiting and done.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "le_int.h"

/* Waiting for a job (workers) or for the workers (caller): pause-spin for
 * POOL_PAUSE_NS, then spin with sched_yield until POOL_IDLE_NS, then sleep.
 * The yield phase matters when the cores are oversubscribed (the gateway,
 * other processes): a thread spinning with pause would hold the core that
 * the thread it waits for needs (measured: 8 instead of 56 t/s in
 * generation at load 1.5 on 2 cores), while sched_yield hands it over and
 * costs about a microsecond when nobody else wants it. */
#define POOL_PAUSE_NS 50000
#define POOL_IDLE_NS 3000000
/* Pauses between clock reads while pause-spinning. */
#define POOL_SPIN_CHECK 64

struct le_pool {
    /* written by the caller per job, read by workers */
    _Alignas(64) atomic_uint_fast64_t gen;
    void (*fn)(void *arg, int ith, int nth);
    void *arg;
    int nth;
    /* the job's generation (high 32 bits) and its shares not yet
     * claimed (low 32): claimed by workers, closed by the caller */
    _Alignas(64) atomic_uint_fast64_t slot;
    /* claimed shares done, written by the workers per job */
    _Alignas(64) atomic_int done;
    /* sleeping state, touched only around sleeps */
    _Alignas(64) atomic_int sleepers;
    atomic_int caller_waiting;
    atomic_int quit;
    int n;         /* threads incl. the caller */
    pthread_t *th; /* [n - 1] */
    int n_started;
    pthread_mutex_t run_lock;
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* workers wait for gen to change */
    pthread_cond_t cv_done; /* the caller waits for busy == 0 */
};

struct le_pool_worker {
    struct le_pool *p;
};

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One step of a wait that began at *t0 (0: not yet read): returns 0 to
 * go on spinning, 1 when it is time to sleep. */
static int
spin_step(unsigned i, int64_t *t0)
{
    if (*t0 && (i % POOL_SPIN_CHECK) != 0) {
        cpu_relax();
        return 0;
    }
    int64_t t = now_ns();
    if (!*t0) {
        *t0 = t;
        return 0;
    }
    if (t - *t0 > POOL_IDLE_NS)
        return 1;
    if (t - *t0 > POOL_PAUSE_NS)
        sched_yield();
    else
        cpu_relax();
    return 0;
}

/* Spins until gen differs from seen (returns it), quit is set, or the
 * wait is long enough to sleep (returns seen). */
static uint64_t
spin_for_job(struct le_pool *p, uint64_t seen)
{
    int64_t t0 = 0;
    for (unsigned i = 1;; i++) {
        uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->quit, memory_order_relaxed))
            return g;
        if (spin_step(i, &t0))
            return seen;
    }
}

static uint64_t
slot_of(uint64_t gen, int open)
{
    return (uint64_t)(uint32_t)gen << 32 | (uint32_t)open;
}

/* A share (1..nth-1) of job generation g, or 0 when it has none left or
 * is no longer the current job. */
static int
claim_share(struct le_pool *p, uint64_t g)
{
    uint64_t s = atomic_load(&p->slot);
    for (;;) {
        if ((s >> 32) != (uint32_t)g || (uint32_t)s == 0)
            return 0;
        if (atomic_compare_exchange_weak(&p->slot, &s, s - 1))
            return (int)(uint32_t)s;
    }
}

static void *
pool_main(void *varg)
{
    struct le_pool_worker *w = varg;
    struct le_pool *p = w->p;
    free(w);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = spin_for_job(p, seen);
        if (g == seen && !atomic_load(&p->quit)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen &&
                   !atomic_load(&p->quit))
                pthread_cond_wait(&p->cv_work, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit))
            break;
        seen = g;
        int share = claim_share(p, g);
        if (share == 0)
            continue; /* closed: the caller did it */
        p->fn(p->arg, share, p->nth);
        atomic_fetch_add(&p->done, 1);
        if (atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

enum le_status
le_pool_new(int n_threads, struct le_pool **out)
{
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > 256)
        n_threads = 256;
    struct le_pool *p = aligned_alloc(64, sizeof(*p));
    if (!p)
        return LE_ENOMEM;
    memset(p, 0, sizeof(*p));
    p->n = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->slot, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->quit, 0);
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads - 1, sizeof(*p->th));
        if (!p->th)
            goto err;
        for (int i = 1; i < n_threads; i++) {
            struct le_pool_worker *w = malloc(sizeof(*w));
            if (!w)
                goto err;
            w->p = p;
            if (pthread_create(&p->th[i - 1], NULL, pool_main, w) != 0) {
                free(w);
                goto err;
            }
            p->n_started++;
        }
    }
    *out = p;
    return LE_OK;
err:
    le_pool_free(p);
    return LE_ENOMEM;
}

void
le_pool_free(struct le_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->th[i], NULL);
    free(p->th);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_lock);
    free(p);
}

int
le_pool_size(const struct le_pool *p)
{
    return p ? p->n_started + 1 : 1;
}

void
le_pool_run(struct le_pool *p, void (*fn)(void *arg, int ith, int nth),
            void *arg, int max_nth)
{
    int nth = p ? p->n_started + 1 : 1;
    if (nth <= 1 || max_nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->run_lock);
    p->fn = fn;
    p->arg = arg;
    p->nth = nth;
    atomic_store(&p->done, 0);
    uint64_t g = atomic_load(&p->gen) + 1;
    atomic_store(&p->slot, slot_of(g, nth - 1));
    atomic_store(&p->gen, g); /* seq_cst: see the invariants */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }

    fn(arg, 0, nth);

    /* close the job: the shares nobody claimed yet (1..open) are ours */
    int open = (int)(uint32_t)atomic_exchange(&p->slot, slot_of(g, 0));
    for (int sh = open; sh >= 1; sh--)
        fn(arg, sh, nth);
    int need = nth - 1 - open;
    int64_t t0 = 0;
    for (unsigned i = 1;
         atomic_load_explicit(&p->done, memory_order_acquire) < need; i++) {
        if (spin_step(i, &t0)) {
            pthread_mutex_lock(&p->mu);
            atomic_store(&p->caller_waiting, 1);
            while (atomic_load(&p->done) < need)
                pthread_cond_wait(&p->cv_done, &p->mu);
            atomic_store(&p->caller_waiting, 0);
            pthread_mutex_unlock(&p->mu);
            break;
        }
    }
    pthread_mutex_unlock(&p->run_lock);
}
