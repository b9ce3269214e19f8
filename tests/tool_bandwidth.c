/*
 * tool_bandwidth: the memory-bandwidth probe for bench/engine.sh, and the
 * bytes of weights a model reads per generated token (for the roofline).
 *
 *   tool_bandwidth [--mib N] [--threads 1,2] [--runs R] [--json]
 *       Streaming read over a buffer of N MiB (default: 4x the last-level
 *       cache, at least 1024, at most half the available memory), split
 *       into equal contiguous slices, one per thread; every thread sums its
 *       slice as 64-bit words (16-byte loads on x86-64).  Each thread
 *       count is run R times (default 5) after one warm-up pass that also
 *       faults the pages in; the best run is reported in GB/s (1e9 bytes
 *       per second, bytes read / wall time from the first thread's start
 *       to the last one's end).
 *   tool_bandwidth --weights FILE.gguf
 *       Prints the bytes of every tensor except token_embd.weight (one row
 *       of it is read per token): what one generated token streams.  Of
 *       a mixture of experts' ffn_*_exps tensors, expert_used_count /
 *       expert_count of their bytes (the experts one token goes through).
 *
 * Exit codes: 0 measured, 1 failed (memory, threads, an unreadable file),
 * 2 usage error.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../local_engine/le_int.h"

#define MAX_THREADS 64

struct slice {
    const uint64_t *p;
    size_t n;            /* words */
    pthread_barrier_t *start;
    uint64_t sum;        /* kept so the reads are not optimised away */
    double t_end;
};

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Sums the slice: 16-byte loads with four accumulators where SSE2 is the
 * baseline (x86-64), 8 scalar accumulators elsewhere; either keeps more
 * loads in flight than one core's memory bandwidth needs (measured in
 * cache: 2-3x the DRAM figure). */
static void *
reader(void *arg)
{
    struct slice *s = arg;
    pthread_barrier_wait(s->start);
    size_t i = 0;
    uint64_t sum = 0;
#if defined(__SSE2__)
    __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
    const __m128i *v = (const __m128i *)s->p;
    for (; i + 8 <= s->n; i += 8, v += 4) {
        a0 = _mm_add_epi64(a0, _mm_load_si128(v));
        a1 = _mm_add_epi64(a1, _mm_load_si128(v + 1));
        a2 = _mm_add_epi64(a2, _mm_load_si128(v + 2));
        a3 = _mm_add_epi64(a3, _mm_load_si128(v + 3));
    }
    uint64_t lanes[2];
    _mm_storeu_si128((__m128i *)lanes,
                     _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3)));
    sum = lanes[0] + lanes[1];
#else
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (; i + 8 <= s->n; i += 8) {
        a0 += s->p[i];
        a1 += s->p[i + 1];
        a2 += s->p[i + 2];
        a3 += s->p[i + 3];
        a4 += s->p[i + 4];
        a5 += s->p[i + 5];
        a6 += s->p[i + 6];
        a7 += s->p[i + 7];
    }
    sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
#endif
    for (; i < s->n; i++)
        sum += s->p[i];
    s->sum = sum;
    s->t_end = now_s();
    return NULL;
}

/* One pass with nt threads over words[0..n): GB/s, or -1. */
static double
pass(const uint64_t *words, size_t n, int nt, uint64_t *sink)
{
    pthread_t th[MAX_THREADS];
    struct slice sl[MAX_THREADS];
    pthread_barrier_t start;
    if (pthread_barrier_init(&start, NULL, (unsigned)nt + 1) != 0)
        return -1;
    size_t per = n / (size_t)nt;
    int started = 0;
    for (int i = 0; i < nt; i++) {
        sl[i].p = words + (size_t)i * per;
        sl[i].n = i == nt - 1 ? n - (size_t)i * per : per;
        sl[i].start = &start;
        if (pthread_create(&th[i], NULL, reader, &sl[i]) != 0)
            break;
        started++;
    }
    if (started < nt) { /* let the started ones through, then give up */
        for (int i = started; i < nt; i++)
            pthread_barrier_wait(&start);
    }
    pthread_barrier_wait(&start);
    double t0 = now_s(), t1 = t0;
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        *sink += sl[i].sum;
        if (sl[i].t_end > t1)
            t1 = sl[i].t_end;
    }
    pthread_barrier_destroy(&start);
    if (started < nt || t1 <= t0)
        return -1;
    return (double)n * sizeof(uint64_t) / (t1 - t0) / 1e9;
}

static size_t
default_mib(void)
{
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
        llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    size_t mib = llc > 0 ? (size_t)llc * 4 / 1048576 : 0;
    if (mib < 1024)
        mib = 1024;
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) {
        size_t half = (size_t)pages * (size_t)psz / 2 / 1048576;
        if (mib > half)
            mib = half;
    }
    return mib;
}

static int
weights(const char *path)
{
    struct le_gguf *g = NULL;
    char err[256];
    if (le_gguf_open(path, LE_GGUF_MMAP, &g, err, sizeof(err)) != LE_OK) {
        fprintf(stderr, "tool_bandwidth: %s\n", err);
        return 1;
    }
    uint64_t total = 0, embd = 0;
    uint32_t nx = 0, used = 0;
    struct le_gguf_str as;
    if (le_gguf_get_str(g, "general.architecture", &as) && as.len < 64) {
        char k[128];
        snprintf(k, sizeof(k), "%.*s.expert_count", (int)as.len, as.ptr);
        (void)le_gguf_get_u32(g, k, &nx);
        snprintf(k, sizeof(k), "%.*s.expert_used_count", (int)as.len, as.ptr);
        (void)le_gguf_get_u32(g, k, &used);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct le_gguf_tensor *t = &g->tensors[i];
        int exps = t->name.len > 12 &&
                   !memcmp(t->name.ptr + t->name.len - 12, "_exps.weight", 12);
        if (le_gguf_str_eq(t->name, "token_embd.weight"))
            embd = t->nbytes;
        else if (exps && nx > 0 && used <= nx)
            total += t->nbytes / nx * used;
        else
            total += t->nbytes;
    }
    printf("{\"weights_per_token_bytes\":%llu,\"token_embd_bytes\":%llu}\n",
           (unsigned long long)total, (unsigned long long)embd);
    le_gguf_free(g);
    return 0;
}

static void
usage(FILE *f)
{
    fputs("usage: tool_bandwidth [--mib N] [--threads 1,2] [--runs R] "
          "[--json]\n"
          "       tool_bandwidth --weights FILE.gguf\n",
          f);
}

int
main(int argc, char **argv)
{
    size_t mib = 0;
    int runs = 5, json = 0, nthr[MAX_THREADS], n_nthr = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--weights") && v) {
            return weights(v);
        } else if (!strcmp(a, "--mib") && v) {
            mib = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--runs") && v) {
            runs = atoi(v);
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            for (const char *p = v; *p && n_nthr < MAX_THREADS;) {
                char *e;
                long n = strtol(p, &e, 10);
                if (e == p || n < 1 || n > MAX_THREADS) {
                    usage(stderr);
                    return 2;
                }
                nthr[n_nthr++] = (int)n;
                p = *e == ',' ? e + 1 : e;
                if (*e && *e != ',') {
                    usage(stderr);
                    return 2;
                }
            }
            i++;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!n_nthr) {
        nthr[0] = 1;
        nthr[1] = 2;
        n_nthr = 2;
    }
    if (!mib)
        mib = default_mib();
    if (runs < 1 || mib < 1) {
        usage(stderr);
        return 2;
    }
    size_t bytes = mib * 1048576;
    uint64_t *buf = aligned_alloc(4096, bytes);
    if (!buf) {
        fprintf(stderr, "tool_bandwidth: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    size_t n = bytes / sizeof(uint64_t);
    for (size_t i = 0; i < n; i++)
        buf[i] = i * 0x9e3779b97f4a7c15ull;
    uint64_t sink = 0;
    if (json)
        printf("{\"mib\":%zu,\"runs\":%d", mib, runs);
    for (int k = 0; k < n_nthr; k++) {
        double best = -1;
        pass(buf, n, nthr[k], &sink); /* warm-up */
        for (int r = 0; r < runs; r++) {
            double gbs = pass(buf, n, nthr[k], &sink);
            if (gbs > best)
                best = gbs;
        }
        if (best < 0) {
            fprintf(stderr, "tool_bandwidth: could not start %d threads\n",
                    nthr[k]);
            free(buf);
            return 1;
        }
        if (json)
            printf(",\"gbs_%d\":%.2f", nthr[k], best);
        else
            printf("threads %d: %.2f GB/s (streaming read of %zu MiB, best "
                   "of %d)\n",
                   nthr[k], best, mib, runs);
    }
    if (json)
        printf(",\"checksum\":%llu}\n", (unsigned long long)(sink & 0xffff));
    free(buf);
    return 0;
}
