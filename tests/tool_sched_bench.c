/*
 * tool_sched_bench: the scheduler's concurrency figures on one model
 * (bench/local.sh runs it; prints one line of JSON).
 *
 *   tool_sched_bench MODEL [--threads N] [--gen N] [--prefix N]
 *
 *   agg1, agg4   aggregate generation tokens/s of 1 and of 4 concurrent
 *                greedy streams (short distinct prompts, --gen tokens
 *                each; from each stream's first token to the last's end)
 *   ttft_first, ttft_second   ms to the first token of a request with a
 *                --prefix-token prompt, then of a second one sharing that
 *                prefix (8 own tokens after it): the prefix cache
 *   gap1, gap8   the largest gap (ms) between two tokens of one stream,
 *                1 stream alone and 8 concurrent streams
 * Wall-clock figures: noisy on a shared machine; run it when quiet.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../local_engine/local_engine.h"

static double
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

struct stream {
    double t_submit, t_first, t_last, max_gap;
    int n;
    _Atomic int done;
};

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
    else if (t - s->t_last > s->max_gap)
        s->max_gap = t - s->t_last;
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
    atomic_store(&s->done, 1);
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
                                 on_done, &st[i], NULL, NULL};
        char err[256];
        if (le_sched_submit(sc, &q, err, sizeof(err)) != LE_OK) {
            fprintf(stderr, "submit: %s\n", err);
            return -1;
        }
    }
    for (int w = 0; w < 600000; w++) {
        int all = 1;
        for (int i = 0; i < k; i++)
            all &= atomic_load(&st[i].done);
        if (all)
            return 0;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return -1;
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

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tool_sched_bench MODEL [--threads N] "
                        "[--gen N] [--prefix N]\n");
        return 2;
    }
    int threads = 2, gen = 32, prefix = 1500;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gen"))
            gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefix"))
            prefix = atoi(argv[i + 1]);
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
        pr[i] = malloc((size_t)(prefix + 16) * sizeof(int32_t));
        fill(pr[i], 16, V, (unsigned)i + 1);
    }
    int rc = 0;
    rc |= run(sc, st, pr, lens, 1, &sp); /* warm up */
    rc |= run(sc, st, pr, lens, 1, &sp);
    double agg1 = aggregate(st, 1), gap1 = st[0].max_gap;
    struct le_sched_stats s0, s1;
    le_sched_get_stats(sc, &s0);
    rc |= run(sc, st, pr, lens, 4, &sp);
    double agg4 = aggregate(st, 4);
    le_sched_get_stats(sc, &s1);
    unsigned long long steps4 = s1.steps - s0.steps;
    rc |= run(sc, st, pr, lens, 8, &sp);
    double gap8 = 0;
    for (int i = 0; i < 8; i++)
        gap8 = st[i].max_gap > gap8 ? st[i].max_gap : gap8;
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
    printf("{\"threads\": %d, \"gen\": %d, \"prefix\": %d, \"agg1\": %.1f, "
           "\"agg4\": %.1f, \"gap1\": %.1f, \"gap8\": %.1f, \"ttft_first\": "
           "%.1f, \"ttft_second\": %.1f, \"cached_tokens\": %llu, "
           "\"steps4\": %llu, \"ok\": %d}\n",
           threads, gen, prefix, agg1, agg4, gap1, gap8, ttft1, ttft2,
           (unsigned long long)ss.cached_tokens, steps4, rc == 0);
    le_sched_free(sc);
    for (int i = 0; i < 8; i++)
        free(pr[i]);
    le_model_free(m);
    return rc == 0 ? 0 : 1;
}
