/*
 * tool_handoff: what one thread hand-off costs on this machine, the floor
 * under the gateway's two per request (worker -> ledger writer, writer ->
 * worker).
 *
 *   tool_handoff [--iters N] [--idle-us U] [--only NAME]
 *
 * Two threads ping-pong: A sleeps U us (default 1000: the partner is idle,
 * as the writer and the worker are between requests at ~1000 req/s),
 * stamps CLOCK_MONOTONIC, wakes B; B stamps its wake-up (one hand-off) and
 * wakes A back (the round trip is two).  Per method, p50/p99/max of the
 * one-way latency and of the round trip, in microseconds:
 *
 *   condvar    pthread mutex + condition variable (the ledger queue today)
 *   futex      a bare FUTEX_WAIT/FUTEX_WAKE on an atomic word
 *   eventfd    blocking read/write of an eventfd
 *   pipe       blocking read/write of a pipe
 *   event      event_active on a libevent base sleeping in epoll_wait, each
 *              way (the writer's wake-back of a worker today)
 *   cv+event   condvar to B, event_active back to A: the gateway's pair
 *   prewake    A wakes B with a futex, works P us (default 60: the
 *              worker finishing a request), then publishes; B, awake,
 *              spins at most 2*P us on the word before sleeping again.
 *              The one-way figure is publish -> seen.
 *   spin       B spins without a bound: the awake floor (a cache line
 *              moving between cores); takes a core, so only with
 *              --only spin.
 *
 * Wall-clock figures on a shared machine: run it more than once.
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void
spin_until_ns(int64_t t)
{
    while (now_ns() < t)
        ;
}

static void
futex_wait(_Atomic uint32_t *w, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void
futex_wake(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* One direction of a hand-off. */
struct chan {
    int kind;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int flag; /* condvar: guarded by mu */
    _Atomic uint32_t word;
    int fd[2]; /* eventfd: fd[0] both ways; pipe: read, write */
    struct event_base *base;
    struct event *ev;
    int fired; /* event: set by the callback, on the base's thread */
};

enum { K_CONDVAR, K_FUTEX, K_EVENTFD, K_PIPE, K_EVENT, K_SPIN };

static void
ev_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ((struct chan *)arg)->fired = 1;
}

static int
chan_init(struct chan *c, int kind)
{
    memset(c, 0, sizeof(*c));
    c->kind = kind;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (kind == K_EVENTFD) {
        c->fd[0] = c->fd[1] = eventfd(0, 0);
        return c->fd[0] >= 0;
    }
    if (kind == K_PIPE)
        return pipe(c->fd) == 0;
    if (kind == K_EVENT) {
        c->base = event_base_new();
        c->ev = c->base ? event_new(c->base, -1, 0, ev_cb, c) : NULL;
        /* A pending persistent timer keeps the loop from exiting with no
         * events; it never fires within a run. */
        struct event *keep =
            c->base ? event_new(c->base, -1, EV_PERSIST, ev_cb, c) : NULL;
        struct timeval day = {86400, 0};
        return c->ev && keep && event_add(keep, &day) == 0;
    }
    return 1;
}

static void
chan_free(struct chan *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    if (c->kind == K_EVENTFD)
        close(c->fd[0]);
    if (c->kind == K_PIPE) {
        close(c->fd[0]);
        close(c->fd[1]);
    }
    if (c->ev)
        event_free(c->ev);
    if (c->base)
        event_base_free(c->base); /* frees the keep-alive timer too */
}

static void
chan_send(struct chan *c)
{
    uint64_t one = 1;
    switch (c->kind) {
    case K_CONDVAR:
        pthread_mutex_lock(&c->mu);
        c->flag = 1;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        break;
    case K_FUTEX:
        atomic_store(&c->word, 1);
        futex_wake(&c->word);
        break;
    case K_SPIN:
        atomic_store(&c->word, 1);
        break;
    case K_EVENTFD:
    case K_PIPE:
        if (write(c->fd[1], &one, c->kind == K_PIPE ? 1 : 8) < 0)
            perror("write");
        break;
    case K_EVENT:
        event_active(c->ev, EV_READ, 0);
        break;
    }
}

static void
chan_wait(struct chan *c)
{
    uint64_t v;
    switch (c->kind) {
    case K_CONDVAR:
        pthread_mutex_lock(&c->mu);
        while (!c->flag)
            pthread_cond_wait(&c->cv, &c->mu);
        c->flag = 0;
        pthread_mutex_unlock(&c->mu);
        break;
    case K_FUTEX:
        while (atomic_exchange(&c->word, 0) == 0)
            futex_wait(&c->word, 0);
        break;
    case K_SPIN:
        while (atomic_exchange(&c->word, 0) == 0)
            ;
        break;
    case K_EVENTFD:
    case K_PIPE:
        if (read(c->fd[0], &v, c->kind == K_PIPE ? 1 : 8) < 0)
            perror("read");
        break;
    case K_EVENT:
        while (!c->fired)
            event_base_loop(c->base, EVLOOP_ONCE);
        c->fired = 0;
        break;
    }
}

struct run {
    struct chan ping, pong;
    int iters;
    long idle_us, work_us;
    int prewake;
    _Atomic int64_t t_send;
    int64_t *oneway, *rtt; /* [iters], ns */
    _Atomic uint32_t pre;   /* prewake: the wake-up word */
    _Atomic int64_t ready;  /* prewake: the published stamp, 0 = none */
    _Atomic int sleeping;   /* prewake: B is (about to be) in FUTEX_WAIT */
};

static void *
b_main(void *arg)
{
    struct run *r = arg;
    for (int i = 0; i < r->iters; i++) {
        if (r->prewake) {
            /* Woken early, the row follows within the worker's finishing
             * time: spin a bounded while, then sleep until the publish
             * wakes us (it does only when we said we sleep). */
            int64_t t = 0, until = 0;
            for (;;) {
                while ((t = atomic_load(&r->ready)) == 0 && now_ns() < until)
                    ;
                if (t)
                    break;
                atomic_store(&r->sleeping, 1);
                if ((t = atomic_load(&r->ready)) != 0) {
                    atomic_store(&r->sleeping, 0);
                    break;
                }
                while (atomic_exchange(&r->pre, 0) == 0)
                    futex_wait(&r->pre, 0);
                atomic_store(&r->sleeping, 0);
                until = now_ns() + 2 * r->work_us * 1000;
            }
            r->oneway[i] = now_ns() - t;
            atomic_store(&r->ready, 0);
        } else {
            chan_wait(&r->ping);
            r->oneway[i] = now_ns() - atomic_load(&r->t_send);
        }
        chan_send(&r->pong);
    }
    return NULL;
}

static int
cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void
report(const char *name, const char *what, int64_t *a, int n)
{
    qsort(a, (size_t)n, sizeof(*a), cmp64);
    printf("  %-9s %-8s p50 %7.1f  p90 %7.1f  p99 %7.1f  max %8.1f us\n",
           name, what, (double)a[n / 2] / 1e3, (double)a[n * 9 / 10] / 1e3,
           (double)a[n * 99 / 100] / 1e3, (double)a[n - 1] / 1e3);
}

static int
run_one(const char *name, int kping, int kpong, int prewake, int iters,
        long idle_us, long work_us)
{
    struct run r;
    memset(&r, 0, sizeof(r));
    r.iters = iters;
    r.idle_us = idle_us;
    r.work_us = work_us;
    r.prewake = prewake;
    r.oneway = calloc((size_t)iters, sizeof(int64_t));
    r.rtt = calloc((size_t)iters, sizeof(int64_t));
    if (!r.oneway || !r.rtt || !chan_init(&r.ping, kping) ||
        !chan_init(&r.pong, kpong)) {
        fprintf(stderr, "%s: set-up failed\n", name);
        return 1;
    }
    pthread_t tb;
    if (pthread_create(&tb, NULL, b_main, &r) != 0)
        return 1;
    for (int i = 0; i < iters; i++) {
        sleep_us(idle_us);
        int64_t t0 = now_ns();
        if (prewake) {
            if (atomic_load(&r.sleeping)) {
                atomic_store(&r.pre, 1);
                futex_wake(&r.pre);
            }
            spin_until_ns(t0 + work_us * 1000); /* the worker finishing */
            atomic_store(&r.ready, now_ns());
            if (atomic_load(&r.sleeping)) { /* it gave up spinning */
                atomic_store(&r.pre, 1);
                futex_wake(&r.pre);
            }
        } else {
            atomic_store(&r.t_send, t0);
            chan_send(&r.ping);
        }
        chan_wait(&r.pong);
        r.rtt[i] = now_ns() - t0;
    }
    pthread_join(tb, NULL);
    printf("%s\n", name);
    report(name, "one-way", r.oneway, iters);
    report(name, prewake ? "finish+rt" : "round", r.rtt, iters);
    chan_free(&r.ping);
    chan_free(&r.pong);
    free(r.oneway);
    free(r.rtt);
    return 0;
}

int
main(int argc, char **argv)
{
    int iters = 2000;
    long idle_us = 1000, work_us = 60;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--idle-us") && i + 1 < argc)
            idle_us = atol(argv[++i]);
        else if (!strcmp(argv[i], "--work-us") && i + 1 < argc)
            work_us = atol(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr,
                    "usage: tool_handoff [--iters N] [--idle-us U]"
                    " [--work-us P] [--only NAME]\n");
            return 2;
        }
    }
    if (iters < 10 || idle_us < 0 || work_us < 1) {
        fprintf(stderr, "tool_handoff: --iters >= 10, --work-us >= 1\n");
        return 2;
    }
    evthread_use_pthreads();
    printf("tool_handoff: %d pings, partner idle %ld us between them\n",
           iters, idle_us);
    static const struct {
        const char *name;
        int ping, pong, prewake;
    } m[] = {
        {"condvar", K_CONDVAR, K_CONDVAR, 0},
        {"futex", K_FUTEX, K_FUTEX, 0},
        {"eventfd", K_EVENTFD, K_EVENTFD, 0},
        {"pipe", K_PIPE, K_PIPE, 0},
        {"event", K_EVENT, K_EVENT, 0},
        {"cv+event", K_CONDVAR, K_EVENT, 0},
        {"prewake", K_FUTEX, K_FUTEX, 1},
        {"spin", K_SPIN, K_SPIN, 0},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
        if (only ? !strcmp(only, m[i].name) : m[i].ping != K_SPIN)
            rc |= run_one(m[i].name, m[i].ping, m[i].pong, m[i].prewake,
                          iters, idle_us, work_us);
    return rc;
}
