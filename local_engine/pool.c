/*
 * pool.c: the persistent compute pool.  n - 1 worker threads are created
 * once (le_pool_new) and woken for each parallel step (one matrix product,
 * one attention layer); the caller of le_pool_run does share 0 itself and
 * then waits for the others.  No thread is created per token.
 *
 * Waking: a forward pass issues its steps back to back (a few microseconds
 * of serial work in between), so a worker that has just finished a step
 * first spins briefly on the job counter and only then sleeps on a
 * condition variable; the caller likewise spins briefly for the workers
 * before sleeping.  The spin is short (POOL_SPIN pause instructions, tens
 * of microseconds) because this machine class (2 cores shared with the
 * gateway's event loops) punishes long spinning; a sleeping worker costs
 * one futex wake-up, measured at tens of microseconds.
 *
 * Invariants: at most one le_pool_run is in flight (run_lock).  Every
 * worker takes part in every job, so when busy reaches 0 no worker is
 * still reading the job fields (fn, arg, nth), which the caller writes
 * before the release-store that bumps gen; workers read them after an
 * acquire-load of gen.  Sleeping and waking go through mu so no wake-up is
 * lost: the caller bumps gen and then broadcasts under mu; a worker checks
 * gen under mu before waiting (and symmetrically for busy / cv_done).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "le_int.h"

#define POOL_SPIN 2000

struct le_pool {
    int n;                 /* threads incl. the caller */
    pthread_t *th;         /* [n - 1] */
    int n_started;
    pthread_mutex_t run_lock;
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* workers wait for gen to change */
    pthread_cond_t cv_done; /* the caller waits for busy == 0 */
    atomic_uint_fast64_t gen;
    atomic_int busy;
    atomic_int quit;
    void (*fn)(void *arg, int ith, int nth);
    void *arg;
    int nth;
};

struct le_pool_worker {
    struct le_pool *p;
    int ith;
};

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *
pool_main(void *varg)
{
    struct le_pool_worker *w = varg;
    struct le_pool *p = w->p;
    int ith = w->ith;
    free(w);
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = seen;
        for (int i = 0; i < POOL_SPIN; i++) {
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen || atomic_load(&p->quit))
                break;
            cpu_relax();
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load_explicit(&p->gen,
                                             memory_order_acquire)) == seen &&
                   !atomic_load(&p->quit))
                pthread_cond_wait(&p->cv_work, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit))
            break;
        seen = g;
        p->fn(p->arg, ith, p->nth);
        if (atomic_fetch_sub(&p->busy, 1) == 1) {
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
    struct le_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return LE_ENOMEM;
    p->n = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->busy, 0);
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
            w->ith = i;
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
    atomic_store(&p->busy, nth - 1);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    fn(arg, 0, nth);

    for (int i = 0; i < POOL_SPIN && atomic_load(&p->busy) > 0; i++)
        cpu_relax();
    if (atomic_load(&p->busy) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->busy) > 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&p->run_lock);
}
