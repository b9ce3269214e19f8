/*
 * tool_sched_bench: the scheduler's concurrency figures on one model
 * (bench/local.sh runs it; prints one line of JSON).
 *
 *   tool_sched_bench MODEL [--threads N] [--gen N] [--prefix N] [--chunk N]
 *   (--chunk: le_sched_params.chunk, default the scheduler's)
 *
 *   agg1, agg4   aggregate generation tokens/s of 1 and of 4 concurrent
 *                greedy streams (short distinct prompts, --gen tokens
 *                each; from each stream's first token to the last's end)
 *   ttft_first, ttft_second   ms to the first token of a request with a
 *                --prefix-token prompt, then of a second one sharing that
 *                prefix (8 own tokens after it): the prefix cache
 *   gap1, gap8   the largest gap (ms) between two tokens of one stream,
 *                1 stream alone and 8 concurrent streams
 *   med1, med4, med8, p99_1, p99_8   the median and 99th percentile of
 *                the gaps between two tokens over every stream of the 1-,
 *                4- and 8-stream runs (ms): one step's time, and steadier
 *                than the extremes when other processes share the cores
 *                (a step that lost its core to them shows as one long gap)
 *   gapj, p99_j  the largest and the 99th-percentile gap (ms) of 4
 *                generating streams while 4 more requests with 96-token
 *                prompts join (submitted after the 4's 4th token; 8 tokens
 *                each): what a joining prompt does to the others' steps
 *   cpu1, cpu4, cpu8   CPU time (ms, CLOCK_THREAD_CPUTIME_ID) of one
 *                decode step (le_model_forward_batch) of 1, 4 and 8
 *                sequences on a second copy of the model with 1 thread,
 *                median of 15: what a step costs, whatever other processes
 *                take of the cores (their cache traffic still counts)
 *   steal1, steal8   ms the hypervisor kept this machine's vCPUs from
 *                running during the 1- and 8-stream runs (/proc/stat's
 *                steal, summed over the CPUs, 10 ms resolution; -1 when
 *                the kernel does not say): a run with steal measured the
 *                host's pauses (seen here: 20-30 ms with neither vCPU
 *                running, no thread switched, in an 8 ms step)
 * Wall-clock figures: noisy on a shared machine; run it when quiet.
 *
 *   tool_sched_bench MODEL --steps [THREADS]
 *   decode steps of k = 1..8 sequences straight through the model (no
 *   scheduler, THREADS threads, default 2): median CPU time of the
 *   calling thread and median wall time of 15, one JSON line per k.
 *
 *   tool_sched_bench MODEL --crossover
 *   the AMX-vs-per-row crossover of one sequence's prompt piece: for n
 *   tokens, the CPU time (1 thread, median of 7) of one forward pass with
 *   every token on the per-row kernels (amx_from = n) and with the AMX
 *   GEMM allowed (amx_from = 0; it takes the products whose weight type
 *   has one when n reaches le_amx_min_tok), one JSON line per n.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../local_engine/le_int.h"

static double
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#define MAX_GAPS 4096

struct stream {
    double t_submit, t_first, t_last, max_gap;
    int n;
    _Atomic int done;
    double gaps[MAX_GAPS];
};

/* The time the hypervisor kept this machine's vCPUs from running (steal,
 * summed over the CPUs; /proc/stat, in clock ticks) in ms, or -1 when the
 * kernel does not say.  A pause of the whole virtual machine stops every
 * stream at once and shows as one long gap for all of them: the figures
 * of a run with steal are the host's, not the scheduler's. */
static double
steal_ms(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (n != 8 || hz <= 0)
        return -1;
    return (double)v[7] * 1000.0 / (double)hz;
}

/* steal_ms() since t0 (-1 when either is unknown) */
static double
steal_since(double t0)
{
    double t1 = steal_ms();
    return t0 < 0 || t1 < 0 ? -1 : t1 - t0;
}

/* on_done's signal to wait_done (and on_tok's to run_join) */
static pthread_mutex_t wake_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cv = PTHREAD_COND_INITIALIZER;

static int
on_tok(void *ud, int32_t id, const char *text, size_t len)
{
    (void)text;
    (void)len;
    struct stream *s = ud;
    if (id < 0)
        return 0;
    double t = now_ms();
    if (s->n == 0)
        s->t_first = t;
    else {
        if (s->n - 1 < MAX_GAPS)
            s->gaps[s->n - 1] = t - s->t_last;
        if (t - s->t_last > s->max_gap)
            s->max_gap = t - s->t_last;
    }
    s->t_last = t;
    s->n++;
    return 0;
}

static void
on_done(void *ud, enum le_status st, const struct le_gen_result *res,
        const char *err)
{
    (void)res;
    struct stream *s = ud;
    if (st != LE_OK)
        fprintf(stderr, "request failed: %s\n", err);
    pthread_mutex_lock(&wake_mu);
    atomic_store(&s->done, 1);
    pthread_cond_broadcast(&wake_cv);
    pthread_mutex_unlock(&wake_mu);
}

/* Waits until the first k streams are done (0) or 600 s pass (-1): on a
 * condition variable signalled by on_done, not by polling, so the waiting
 * thread takes no core from the steps it measures (a 1 ms poll woke it
 * 1000 times a second, each time preempting a compute thread). */
static int
wait_done(struct stream *st, int k)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 600;
    int rc = 0;
    pthread_mutex_lock(&wake_mu);
    for (;;) {
        int all = 1;
        for (int i = 0; i < k; i++)
            all &= atomic_load(&st[i].done);
        if (all)
            break;
        if (pthread_cond_timedwait(&wake_cv, &wake_mu, &until) != 0) {
            rc = -1;
            break;
        }
    }
    pthread_mutex_unlock(&wake_mu);
    return rc;
}

static void
fill(int32_t *p, int n, int32_t vocab, unsigned seed)
{
    unsigned x = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = 3 + (int32_t)((x >> 8) % (unsigned)(vocab - 3));
    }
}

/* Runs k streams at once; returns 0 when all finished. */
static int
run(struct le_sched *sc, struct stream *st, int32_t **prompts, int *lens,
    int k, const struct le_sampling *sp)
{
    for (int i = 0; i < k; i++) {
        memset(&st[i], 0, sizeof(st[i]));
        st[i].t_submit = now_ms();
        struct le_sched_req q = {prompts[i], (size_t)lens[i], sp, on_tok,
                                 on_done, &st[i], NULL, NULL, NULL, NULL, 0};
        char err[256];
        if (le_sched_submit(sc, &q, err, sizeof(err)) != LE_OK) {
            fprintf(stderr, "submit: %s\n", err);
            return -1;
        }
    }
    return wait_done(st, k);
}

/* Streams 0..3 (--gen tokens each) with 4 joiners (4..7, prompts
 * lens[4..7], jsp) submitted once stream 0 has 4 tokens; 0 when all
 * finished. */
static int
run_join(struct le_sched *sc, struct stream *st, int32_t **prompts,
         int *lens, const struct le_sampling *sp,
         const struct le_sampling *jsp)
{
    for (int i = 0; i < 8; i++) {
        if (i == 4)
            for (int w = 0; w < 600000 && st[0].n < 4 &&
                            !atomic_load(&st[0].done);
                 w++) {
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
            }
        memset(&st[i], 0, sizeof(st[i]));
        st[i].t_submit = now_ms();
        struct le_sched_req q = {prompts[i], (size_t)lens[i],
                                 i < 4 ? sp : jsp, on_tok, on_done, &st[i],
                                 NULL, NULL, NULL, NULL, 0};
        char err[256];
        if (le_sched_submit(sc, &q, err, sizeof(err)) != LE_OK) {
            fprintf(stderr, "submit: %s\n", err);
            return -1;
        }
    }
    return wait_done(st, 8);
}

static double
aggregate(const struct stream *st, int k)
{
    double t0 = st[0].t_first, t1 = st[0].t_last;
    int n = 0;
    for (int i = 0; i < k; i++) {
        t0 = st[i].t_first < t0 ? st[i].t_first : t0;
        t1 = st[i].t_last > t1 ? st[i].t_last : t1;
        n += st[i].n;
    }
    return t1 > t0 ? (n - k) * 1000.0 / (t1 - t0) : 0;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of every gap of streams 0..k-1 (0 if none). */
static double
gap_quantile(const struct stream *st, int k, double q)
{
    static double all[8 * MAX_GAPS];
    size_t n = 0;
    for (int i = 0; i < k; i++)
        for (int g = 0; g + 1 < st[i].n && g < MAX_GAPS; g++)
            all[n++] = st[i].gaps[g];
    if (n == 0)
        return 0;
    qsort(all, n, sizeof(all[0]), cmp_double);
    size_t at = (size_t)(q * (double)(n - 1) + 0.5);
    return all[at < n ? at : n - 1];
}

static double
cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The median CPU time of one decode step of k sequences (k <= 8) on m
 * (1 thread), into cpu[k]; -1 on error. */
static int
step_time(struct le_model *m, double cpu[9], double wall[9])
{
    enum { REPS = 15 };
    struct le_session *ws = NULL, *kv[8] = {0};
    char err[256];
    int rc = -1;
    if (le_session_new_sized(m, 8, 8, 0, &ws, err, sizeof(err)) != LE_OK)
        goto out;
    for (int i = 0; i < 8; i++)
        if (le_session_new_sized(m, 0, 0, 1, &kv[i], err, sizeof(err)) !=
            LE_OK)
            goto out;
    for (int pass = 0; pass < 2; pass++) /* the first warms up */
        for (int k = 1; k <= 8; k++) {
            double t[REPS], tw[REPS];
            for (int r = 0; r < REPS; r++) {
                int32_t ids[8], pos[8], out[8];
                struct le_session *seq[8];
                for (int i = 0; i < k; i++) {
                    if (kv[i]->n_past >= kv[i]->n_ctx - 1)
                        kv[i]->n_past = 0;
                    ids[i] = 3 + (r * 7 + i * 13) % (le_model_n_vocab(m) - 3);
                    seq[i] = kv[i];
                    pos[i] = kv[i]->n_past;
                    out[i] = i;
                }
                struct le_fwd_batch b = {0};
                b.n_tok = k;
                b.ids = ids;
                b.seq = seq;
                b.pos = pos;
                b.amx_from = k;
                b.n_out = k;
                b.out = out;
                b.logits = ws->logits;
                double t0 = cpu_ms(), w0 = now_ms();
                if (le_model_forward_batch(ws, &b, err, sizeof(err)) != LE_OK)
                    goto out;
                t[r] = cpu_ms() - t0;
                tw[r] = now_ms() - w0;
            }
            qsort(t, REPS, sizeof(t[0]), cmp_double);
            qsort(tw, REPS, sizeof(tw[0]), cmp_double);
            cpu[k] = t[REPS / 2];
            if (wall)
                wall[k] = tw[REPS / 2];
        }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "step timing: %s\n", err);
    le_session_free(ws);
    for (int i = 0; i < 8; i++)
        le_session_free(kv[i]);
    return rc;
}

/* The median CPU time of a forward pass of n prompt tokens of one
 * sequence (1 thread), amx_from as given; < 0 on error. */
static double
piece_cpu(struct le_model *m, struct le_session *ws, struct le_session *kv,
          int n, int amx_from)
{
    enum { REPS = 7 };
    int32_t ids[256], pos[256], out = n - 1;
    struct le_session *seq[256];
    double t[REPS];
    char err[256];
    for (int r = 0; r < REPS + 1; r++) { /* the first warms up */
        kv->n_past = 0;
        for (int i = 0; i < n; i++) {
            ids[i] = 3 + (r * 7 + i * 13) % (le_model_n_vocab(m) - 3);
            seq[i] = kv;
            pos[i] = i;
        }
        struct le_fwd_batch b = {0};
        b.n_tok = n;
        b.ids = ids;
        b.seq = seq;
        b.pos = pos;
        b.amx_from = amx_from;
        b.n_out = 1;
        b.out = &out;
        b.logits = ws->logits;
        double t0 = cpu_ms();
        if (le_model_forward_batch(ws, &b, err, sizeof(err)) != LE_OK) {
            fprintf(stderr, "crossover: %s\n", err);
            return -1;
        }
        if (r > 0)
            t[r - 1] = cpu_ms() - t0;
    }
    qsort(t, REPS, sizeof(t[0]), cmp_double);
    return t[REPS / 2];
}

static int
crossover(const char *path)
{
    struct le_model_params mp;
    le_model_params_default(&mp);
    mp.n_threads = 1;
    mp.n_ctx = 256;
    struct le_model *m = NULL;
    struct le_session *ws = NULL, *kv = NULL;
    char err[512];
    int rc = 1;
    if (le_model_open(path, &mp, &m, err, sizeof(err)) != LE_OK ||
        le_session_new_sized(m, 256, 1, 0, &ws, err, sizeof(err)) != LE_OK ||
        le_session_new_sized(m, 0, 0, 1, &kv, err, sizeof(err)) != LE_OK) {
        fprintf(stderr, "%s\n", err);
        goto out;
    }
    static const int ns[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128, 256};
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        double row = piece_cpu(m, ws, kv, ns[k], ns[k]);
        double amx = piece_cpu(m, ws, kv, ns[k], 0);
        if (row < 0 || amx < 0)
            goto out;
        printf("{\"n\": %d, \"per_row_ms\": %.2f, \"amx_ms\": %.2f}\n",
               ns[k], row, amx);
        fflush(stdout);
    }
    rc = 0;
out:
    le_session_free(ws);
    le_session_free(kv);
    le_model_free(m);
    return rc;
}

/* --steps [THREADS]: decode steps of 1..8 sequences straight through
 * le_model_forward_batch (no scheduler), THREADS threads (default 2):
 * the median CPU time of the calling thread and the median wall time,
 * one JSON line per k. */
static int
steps(const char *path, int threads)
{
    struct le_model_params mp;
    le_model_params_default(&mp);
    mp.n_threads = threads;
    mp.n_ctx = 512;
    struct le_model *m = NULL;
    char err[512];
    if (le_model_open(path, &mp, &m, err, sizeof(err)) != LE_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double cpu[9] = {0}, wall[9] = {0};
    int rc = step_time(m, cpu, wall);
    for (int k = 1; rc == 0 && k <= 8; k++)
        printf("{\"threads\": %d, \"k\": %d, \"cpu_ms\": %.2f, "
               "\"wall_ms\": %.2f, \"wall_vs_1\": %.2f}\n",
               threads, k, cpu[k], wall[k], wall[k] / wall[1]);
    le_model_free(m);
    return rc == 0 ? 0 : 1;
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tool_sched_bench MODEL [--threads N] "
                        "[--gen N] [--prefix N] [--chunk N]\n");
        return 2;
    }
    if (argc == 3 && !strcmp(argv[2], "--crossover"))
        return crossover(argv[1]);
    if (argc >= 3 && !strcmp(argv[2], "--steps"))
        return steps(argv[1], argc > 3 ? atoi(argv[3]) : 2);
    int threads = 2, gen = 32, prefix = 1500, chunk = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gen"))
            gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefix"))
            prefix = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk"))
            chunk = atoi(argv[i + 1]);
    }
    struct le_model_params mp;
    le_model_params_default(&mp);
    mp.n_threads = threads;
    mp.n_ctx = prefix + 64 > 2048 ? prefix + 64 : 2048;
    struct le_model *m = NULL;
    char err[512];
    if (le_model_open(argv[1], &mp, &m, err, sizeof(err)) != LE_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct le_sched_params p;
    le_sched_params_default(&p);
    p.parallel = 8;
    p.cache_seqs = 2;
    if (chunk > 0)
        p.chunk = chunk;
    struct le_sched *sc = NULL;
    if (le_sched_new(m, &p, &sc, err, sizeof(err)) != LE_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int32_t V = le_model_n_vocab(m);
    struct le_sampling sp;
    le_sampling_default(&sp);
    sp.temperature = 0;
    sp.ignore_eos = 1;
    sp.max_tokens = gen;
    static struct stream st[8];
    int32_t *pr[8];
    int lens[8];
    for (int i = 0; i < 8; i++) {
        lens[i] = 16;
        pr[i] = malloc((size_t)((prefix > 96 ? prefix : 96) + 16) *
                       sizeof(int32_t));
        fill(pr[i], 16, V, (unsigned)i + 1);
    }
    int rc = 0;
    rc |= run(sc, st, pr, lens, 1, &sp); /* warm up */
    double st1 = steal_ms();
    rc |= run(sc, st, pr, lens, 1, &sp);
    st1 = steal_since(st1);
    double agg1 = aggregate(st, 1), gap1 = st[0].max_gap;
    double med1 = gap_quantile(st, 1, 0.5), p99_1 = gap_quantile(st, 1, 0.99);
    struct le_sched_stats s0, s1;
    le_sched_get_stats(sc, &s0);
    rc |= run(sc, st, pr, lens, 4, &sp);
    double agg4 = aggregate(st, 4), med4 = gap_quantile(st, 4, 0.5);
    le_sched_get_stats(sc, &s1);
    unsigned long long steps4 = s1.steps - s0.steps;
    double st8 = steal_ms();
    rc |= run(sc, st, pr, lens, 8, &sp);
    st8 = steal_since(st8);
    double gap8 = 0;
    for (int i = 0; i < 8; i++)
        gap8 = st[i].max_gap > gap8 ? st[i].max_gap : gap8;
    double med8 = gap_quantile(st, 8, 0.5), p99_8 = gap_quantile(st, 8, 0.99);
    /* prompts joining generating streams */
    struct le_sampling jsp = sp;
    jsp.max_tokens = 8;
    for (int i = 4; i < 8; i++) {
        lens[i] = 96;
        fill(pr[i], 96, V, (unsigned)i + 31);
    }
    rc |= run_join(sc, st, pr, lens, &sp, &jsp);
    double gapj = 0;
    for (int i = 0; i < 4; i++)
        gapj = st[i].max_gap > gapj ? st[i].max_gap : gapj;
    double p99_j = gap_quantile(st, 4, 0.99);
    for (int i = 4; i < 8; i++)
        lens[i] = 16;
    /* prefix cache: a long prompt, then another sharing its prefix */
    fill(pr[0], prefix + 8, V, 99);
    memcpy(pr[1], pr[0], (size_t)prefix * sizeof(int32_t));
    fill(pr[1] + prefix, 8, V, 98);
    lens[0] = lens[1] = prefix + 8;
    sp.max_tokens = 2;
    rc |= run(sc, st, pr, lens, 1, &sp);
    double ttft1 = st[0].t_first - st[0].t_submit;
    rc |= run(sc, st, pr + 1, lens + 1, 1, &sp);
    double ttft2 = st[0].t_first - st[0].t_submit;
    struct le_sched_stats ss;
    le_sched_get_stats(sc, &ss);
    le_sched_free(sc);
    sc = NULL;
    double cpu[9] = {0};
    struct le_model *m1 = NULL;
    mp.n_threads = 1;
    mp.n_ctx = 512;
    if (le_model_open(argv[1], &mp, &m1, err, sizeof(err)) != LE_OK ||
        step_time(m1, cpu, NULL) != 0)
        rc = -1;
    le_model_free(m1);
    printf("{\"threads\": %d, \"gen\": %d, \"prefix\": %d, \"agg1\": %.1f, "
           "\"agg4\": %.1f, \"gap1\": %.1f, \"gap8\": %.1f, \"ttft_first\": "
           "%.1f, \"ttft_second\": %.1f, \"cached_tokens\": %llu, "
           "\"steps4\": %llu, \"med1\": %.2f, \"med4\": %.2f, "
           "\"med8\": %.2f, \"p99_1\": %.2f, \"p99_8\": %.2f, "
           "\"gapj\": %.1f, \"p99_j\": %.2f, "
           "\"cpu1\": %.2f, \"cpu4\": %.2f, \"cpu8\": %.2f, "
           "\"steal1\": %.0f, \"steal8\": %.0f, \"ok\": %d}\n",
           threads, gen, prefix, agg1, agg4, gap1, gap8, ttft1, ttft2,
           (unsigned long long)ss.cached_tokens, steps4, med1, med4, med8,
           p99_1, p99_8, gapj, p99_j, cpu[1], cpu[4], cpu[8], st1, st8,
           rc == 0);
    for (int i = 0; i < 8; i++)
        free(pr[i]);
    le_model_free(m);
    return rc == 0 ? 0 : 1;
}
