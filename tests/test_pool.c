/*
 * test_pool: the compute pool (local_engine/pool.c) runs every share of
 * every job exactly once, whoever runs it: back-to-back jobs (workers
 * spinning, they claim their shares), jobs after a pause longer than the
 * pool's idle spin (workers asleep: the caller often does their shares
 * itself), and a pool whose caller is slower than its workers; 1 to 4
 * threads, and max_nth == 1 inline.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "../local_engine/le_int.h"

#define MAX_TH 4

struct job {
    _Atomic int runs[MAX_TH];
    _Atomic int bad_nth;
    int want_nth;
    int slow_share; /* share that sleeps a little (-1: none) */
    pthread_t caller;
    _Atomic int on_caller; /* shares > 0 the calling thread ran */
};

static void
sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void
job_fn(void *arg, int ith, int nth)
{
    struct job *j = arg;
    if (nth != j->want_nth || ith < 0 || ith >= MAX_TH)
        atomic_fetch_add(&j->bad_nth, 1);
    else
        atomic_fetch_add(&j->runs[ith], 1);
    if (ith > 0 && pthread_equal(pthread_self(), j->caller))
        atomic_fetch_add(&j->on_caller, 1);
    if (ith == j->slow_share)
        sleep_us(200);
}

/* n jobs on p; pause_us between them; returns the shares > 0 that the
 * caller ran, or -1 when a share ran other than once. */
static int
run_jobs(struct le_pool *p, int nth, int n, long pause_us, int slow_share,
         int max_nth)
{
    int on_caller = 0;
    for (int k = 0; k < n; k++) {
        struct job j;
        memset(&j, 0, sizeof(j));
        j.want_nth = max_nth == 1 ? 1 : nth;
        j.slow_share = slow_share;
        j.caller = pthread_self();
        le_pool_run(p, job_fn, &j, max_nth);
        if (atomic_load(&j.bad_nth))
            return -1;
        for (int i = 0; i < MAX_TH; i++)
            if (atomic_load(&j.runs[i]) != (i < j.want_nth ? 1 : 0))
                return -1;
        on_caller += atomic_load(&j.on_caller);
        if (pause_us)
            sleep_us(pause_us);
    }
    return on_caller;
}

static void
test_every_share_once(void)
{
    for (int nth = 1; nth <= MAX_TH; nth++) {
        struct le_pool *p = NULL;
        T_EQ_INT(le_pool_new(nth, &p), LE_OK);
        T_EQ_INT(le_pool_size(p), nth);
        /* back to back, the workers spinning */
        T_CHECK(run_jobs(p, nth, 2000, 0, -1, 0) >= 0);
        /* a slow share 0: the workers have long claimed theirs */
        T_CHECK(run_jobs(p, nth, 50, 0, 0, 0) >= 0);
        /* slow workers' shares */
        T_CHECK(run_jobs(p, nth, 50, 0, nth - 1, 0) >= 0);
        /* inline */
        T_EQ_INT(run_jobs(p, nth, 100, 0, -1, 1), 0);
        /* after pauses past the idle spin (3 ms) the workers sleep, and
         * the caller may do their shares before they wake */
        int on_caller = run_jobs(p, nth, 20, 5000, -1, 0);
        T_CHECK(on_caller >= 0);
        fprintf(stderr, "  (%d threads: the caller ran %d of the %d worker "
                        "shares after pauses)\n",
                nth, on_caller, 20 * (nth - 1));
        if (nth == 1)
            T_EQ_INT(on_caller, 0);
        le_pool_free(p);
    }
}

int
main(void)
{
    T_RUN(test_every_share_once);
    return T_END();
}
