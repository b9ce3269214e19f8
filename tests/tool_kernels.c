/*
 * tool_kernels: one core's throughput of the repacked kernels, for
 * bench/engine.sh (the kernel table) and for choosing between variants on
 * a shared machine.
 *
 *   tool_kernels [--reps N] [--gemv-mib M]
 *
 * For Q4_0, Q8_0 and Q4_K and each level this CPU runs (avx2, avxvnni,
 * avx512, and amx: le_pack_traits.gemm_amx when le_amx_usable()):
 *   gemm  a 2048 x 5632 matrix (random quantised rows, repacked) against
 *         128 activation rows, in GMAC/s of the calling thread's CPU time
 *         (CLOCK_THREAD_CPUTIME_ID: time other processes take on the core
 *         is not counted), best of N (default 5);
 *   gemv  one activation row against about M MiB (default 64: in a large
 *         last-level cache, out of the core's own) of repacked groups, in
 *         GB/s of wall time, and beside it a plain 16-byte-load read of the
 *         same bytes in the same loop (the kernel's share of what this core
 *         reads at that moment).
 * One markdown table on stdout.  Exit 0, 1 when memory runs out.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../local_engine/le_int.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Values in [-1, 1] (their distribution does not change the timings). */
static float
frand(void)
{
    return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

static double
clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A plain read of n bytes (a multiple of 64): the reference for gemv. */
static uint64_t
plain_read(const uint8_t *p, size_t n)
{
#if defined(__SSE2__)
    __m128i s0 = _mm_setzero_si128(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i += 64) {
        s0 = _mm_add_epi64(s0, _mm_load_si128((const __m128i *)(p + i)));
        s1 = _mm_add_epi64(s1, _mm_load_si128((const __m128i *)(p + i + 16)));
        s2 = _mm_add_epi64(s2, _mm_load_si128((const __m128i *)(p + i + 32)));
        s3 = _mm_add_epi64(s3, _mm_load_si128((const __m128i *)(p + i + 48)));
    }
    s0 = _mm_add_epi64(_mm_add_epi64(s0, s1), _mm_add_epi64(s2, s3));
    uint64_t w[2];
    memcpy(w, &s0, sizeof(w));
    return w[0] + w[1];
#else
    uint64_t s = 0, w;
    for (size_t i = 0; i < n; i += 8) {
        memcpy(&w, p + i, 8);
        s += w;
    }
    return s;
#endif
}

/* Quantised rows of type t (n values each) from random floats. */
static uint8_t *
rand_rows(enum le_type t, int n, int rows, size_t *row_bytes)
{
    const struct le_type_traits *tt = le_type_get_ref(t);
    size_t rb = le_row_size(t, n);
    uint8_t *q = malloc(rb * (size_t)rows);
    float *f = malloc(sizeof(float) * (size_t)n);
    if (!q || !f) {
        free(q);
        free(f);
        return NULL;
    }
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < n; i++)
            f[i] = frand();
        tt->from_float(f, q + (size_t)r * rb, n);
    }
    free(f);
    *row_bytes = rb;
    return q;
}

struct level {
    const char *name;
    enum le_isa isa;
    int amx;
};

/* One row of the table; 0, or -1 when memory ran out. */
static int
measure(enum le_type wt, const struct level *lv, int reps, size_t gemv_mib)
{
    struct le_pack_traits pt;
    if (!le_pack_traits_at(wt, lv->isa, &pt) || (lv->amx && !pt.gemm_amx))
        return 0;
    le_gemm_fn gemm = lv->amx ? pt.gemm_amx : pt.gemm;
    const int n_in = 2048, n_out = 5632, ntok = 128;
    size_t wrow, xrow;
    uint8_t *w = rand_rows(wt, n_in, n_out, &wrow);
    uint8_t *x = rand_rows(pt.act_type, n_in, ntok, &xrow);
    size_t prow = le_pack_prep_size(pt.act_type, n_in);
    size_t gb = le_pack_group_bytes(&pt, n_in);
    int ng = (n_out + LE_PACK_ROWS - 1) / LE_PACK_ROWS;
    size_t ngv = gemv_mib * 1048576 / gb + 1; /* gemv groups */
    uint8_t *pk = aligned_alloc(64, gb * (ngv > (size_t)ng ? ngv : (size_t)ng));
    uint8_t *prep = malloc(prow * ntok + 1);
    float *y = malloc(sizeof(float) * (size_t)n_out * ntok);
    float *yv = malloc(sizeof(float) * ngv * LE_PACK_ROWS);
    uint8_t *tl = NULL; /* AMX A tiles */
    int rc = -1;
    if (!w || !x || !pk || !prep || !y || !yv)
        goto out;
    for (int g = 0; g < ng; g++)
        le_pack_rows(&pt, w + (size_t)g * LE_PACK_ROWS * wrow, wrow,
                     LE_PACK_ROWS, n_in, pk + (size_t)g * gb);
    for (int t = 0; t < ntok; t++)
        le_pack_prep(pt.act_type, x + (size_t)t * xrow, n_in,
                     prep + (size_t)t * prow);
    /* the AMX kernels read Q8_0 activations as A tiles, as in the engine
     * (le_quant_job.t: tile t / 16, row t % 16, 32 bytes per block) */
    if (lv->amx && pt.act_type == LE_TYPE_Q8_0) {
        int nb = n_in / 32;
        tl = aligned_alloc(64, (size_t)(ntok / 16 + 1) * nb * 512);
        if (!tl)
            goto out;
        for (int t = 0; t < ntok; t++)
            for (int b = 0; b < nb; b++)
                memcpy(tl + ((size_t)(t / 16) * nb + b) * 512 +
                           (size_t)(t % 16) * 32,
                       x + (size_t)t * xrow + (size_t)b * 34 + 2, 32);
    }
    struct le_pack_act act = {x, xrow, prep, prow, tl};

    double best = 1e30;
    for (int k = 0; k < reps; k++) {
        double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        for (int g = 0; g < ng; g++)
            gemm(n_in, pk + (size_t)g * gb, &act, ntok,
                 y + (size_t)g * LE_PACK_ROWS, (size_t)n_out, LE_PACK_ROWS);
        double t = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
        if (t < best)
            best = t;
    }
    double gmacs = (double)n_in * n_out * ntok / best * 1e-9;

    char gv[64] = "-";
    if (!lv->amx) { /* generation never takes the AMX kernel */
        for (size_t g = (size_t)ng; g < ngv; g++)
            memcpy(pk + g * gb, pk + (g % (size_t)ng) * gb, gb);
        double bk = 1e30, br = 1e30;
        volatile uint64_t sink = 0; /* the read is not optimised away */
        for (int k = 0; k < reps + 2; k++) {
            double t0 = clock_s(CLOCK_MONOTONIC);
            for (size_t g = 0; g < ngv; g++)
                pt.gemm(n_in, pk + g * gb, &act, 1, yv + g * LE_PACK_ROWS,
                        LE_PACK_ROWS, LE_PACK_ROWS);
            double t1 = clock_s(CLOCK_MONOTONIC);
            sink += plain_read(pk, ngv * gb);
            double t2 = clock_s(CLOCK_MONOTONIC);
            if (t1 - t0 < bk)
                bk = t1 - t0;
            if (t2 - t1 < br)
                br = t2 - t1;
        }
        double bytes = (double)(ngv * gb);
        snprintf(gv, sizeof(gv), "%.1f | %.1f | %.0f%%", bytes / bk * 1e-9,
                 bytes / br * 1e-9, 100.0 * br / bk);
    } else {
        snprintf(gv, sizeof(gv), "- | - | -");
    }
    printf("| %s | %s | %.1f | %s |\n", le_type_get_ref(wt)->name, lv->name,
           gmacs, gv);
    rc = 0;
out:
    free(tl);
    free(w);
    free(x);
    free(pk);
    free(prep);
    free(y);
    free(yv);
    return rc;
}

int
main(int argc, char **argv)
{
    int reps = 5;
    size_t gemv_mib = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--gemv-mib") && i + 1 < argc) {
            gemv_mib = (size_t)atoi(argv[++i]);
        } else {
            fprintf(stderr,
                    "usage: tool_kernels [--reps N] [--gemv-mib M]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 1000 || gemv_mib < 1 || gemv_mib > 4096) {
        fprintf(stderr, "tool_kernels: --reps 1..1000, --gemv-mib 1..4096\n");
        return 2;
    }
    static const struct level levels[] = {
        {"avx2", LE_ISA_AVX2, 0},
        {"avxvnni", LE_ISA_AVXVNNI, 0},
        {"avx512", LE_ISA_AVX512, 0},
        {"amx", LE_ISA_AVX512, 1},
    };
    static const enum le_type types[] = {LE_TYPE_Q4_0, LE_TYPE_Q8_0,
                                         LE_TYPE_Q4_K};
    le_amx_usable(); /* asks the kernel for the tiles once */
    printf("| type | level | gemm GMAC/s (2048x5632, 128 tokens) | gemv GB/s "
           "(%zu MiB) | plain read GB/s | gemv / read |\n",
           gemv_mib);
    printf("|---|---|---|---|---|---|\n");
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++)
            if (measure(types[t], &levels[l], reps, gemv_mib) != 0) {
                fprintf(stderr, "tool_kernels: out of memory\n");
                return 1;
            }
    return 0;
}
