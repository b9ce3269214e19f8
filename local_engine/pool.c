/*
 * pool.c: the persistent compute pool.  n - 1 worker threads are created
 * once (le_pool_new) and woken for each parallel step (one matrix product,
 * one attention layer) by a generation counter under a condition variable;
 * the caller of le_pool_run does share 0 itself and then waits for the
 * others.  No thread is created per token.
 *
 * Why a condition variable and no spinning: this machine class (2 cores
 * shared with the gateway's event loops) punishes spinning workers; the
 * wake-up cost (tens of microseconds) is small next to a matrix product of
 * a real model.  A spin-then-wait phase can be added here alone later.
 *
 * Invariants: at most one le_pool_run is in flight (run_lock); a job's
 * fields (fn, arg, nth) are written under mu before gen is bumped, and read
 * by workers under mu; `busy` counts workers of the current job that have
 * not finished.
 */
#include <pthread.h>
#include <stdlib.h>

#include "le_int.h"

struct le_pool {
    int n;                 /* threads incl. the caller */
    pthread_t *th;         /* [n - 1] */
    int n_started;
    pthread_mutex_t run_lock;
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* workers wait for gen to change */
    pthread_cond_t cv_done; /* the caller waits for busy == 0 */
    uint64_t gen;
    int busy;
    int quit;
    void (*fn)(void *arg, int ith, int nth);
    void *arg;
    int nth;
};

struct le_pool_worker {
    struct le_pool *p;
    int ith;
};

static void *
pool_main(void *varg)
{
    struct le_pool_worker *w = varg;
    struct le_pool *p = w->p;
    int ith = w->ith;
    free(w);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->quit)
            pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        if (ith >= p->nth)
            continue; /* not part of this job */
        void (*fn)(void *, int, int) = p->fn;
        void *arg = p->arg;
        int nth = p->nth;
        pthread_mutex_unlock(&p->mu);
        fn(arg, ith, nth);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
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
    p->quit = 1;
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
    return p ? p->n : 1;
}

void
le_pool_run(struct le_pool *p, void (*fn)(void *arg, int ith, int nth),
            void *arg, int max_nth)
{
    int nth = p ? p->n_started + 1 : 1;
    if (max_nth > 0 && nth > max_nth)
        nth = max_nth;
    if (nth <= 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->run_lock);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->nth = nth;
    p->busy = nth - 1;
    p->gen++;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    fn(arg, 0, nth);

    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->run_lock);
}
