/*
 * test_amx.c: the AMX-INT8 prefill GEMM (quants_amx.c) against its plain C
 * twin (amx.c) and both against the engine's vec_dot.
 *
 * On random weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) quantised by the engine's own
 * from_float and random activations quantised to the type's vec_dot_type
 * (Q8_0, Q8_K), for row lengths 256..5632 (odd block counts included), token counts 1..130 (not
 * multiples of 16, and past the kernel's 128-token chunk) and row ranges
 * that start and end inside a 16-row panel:
 *   - AMX == twin, bit for bit (same integer block sums, same float
 *     operations in the same order);
 *   - twin vs vec_dot (plain C and the table's SIMD one): within
 *     1e-5 * sum |w_i x_i| (+1e-30): the same block sums, rounded in
 *     another order (for the K-quants the same expression: exact here);
 *   - rows outside [r0, r1) are not written.
 * Where AMX is not usable (CPU, OS, kernel permission, LLMUX_NO_AMX) the
 * AMX comparisons are skipped with the reason on stderr; the twin is still
 * checked against vec_dot.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../local_engine/le_int.h"
#include "harness.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float
frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}

struct mats {
    enum le_type wt;
    int n_in, n_out, n_tok;
    size_t w_row, x_row;
    uint8_t *w, *x;
    float *wf, *xf; /* dequantised, for the tolerance */
};

static int
mats_make(struct mats *m, enum le_type wt, int n_in, int n_out, int n_tok)
{
    const struct le_type_traits *tt = le_type_get_ref(wt);
    const struct le_type_traits *vt = le_type_get_ref(tt->vec_dot_type);
    m->wt = wt;
    m->n_in = n_in;
    m->n_out = n_out;
    m->n_tok = n_tok;
    m->w_row = le_row_size(wt, n_in);
    m->x_row = le_row_size(tt->vec_dot_type, n_in);
    m->w = malloc(m->w_row * n_out);
    m->x = malloc(m->x_row * n_tok);
    m->wf = malloc(sizeof(float) * n_in * n_out);
    m->xf = malloc(sizeof(float) * n_in * n_tok);
    float *tmp = malloc(sizeof(float) * n_in);
    if (!m->w || !m->x || !m->wf || !m->xf || !tmp) {
        free(tmp);
        return -1;
    }
    for (int r = 0; r < n_out; r++) {
        /* rows of different magnitude so the block scales differ */
        float g = 0.01f + (float)(r % 7) * 0.3f;
        for (int i = 0; i < n_in; i++)
            tmp[i] = frand() * g;
        tt->from_float(tmp, m->w + (size_t)r * m->w_row, n_in);
        tt->to_float(m->w + (size_t)r * m->w_row, m->wf + (size_t)r * n_in,
                     n_in);
    }
    for (int t = 0; t < n_tok; t++) {
        float g = 0.5f + (float)(t % 5);
        for (int i = 0; i < n_in; i++)
            tmp[i] = frand() * g * (i % 97 == 0 ? 20.0f : 1.0f);
        vt->from_float(tmp, m->x + (size_t)t * m->x_row, n_in);
        vt->to_float(m->x + (size_t)t * m->x_row, m->xf + (size_t)t * n_in,
                     n_in);
    }
    free(tmp);
    return 0;
}

static void
mats_free(struct mats *m)
{
    free(m->w);
    free(m->x);
    free(m->wf);
    free(m->xf);
}

/* One case: rows [r0, r1) of every token through the twin, AMX (when
 * usable) and vec_dot. */
static void
check_case(enum le_type wt, int n_in, int n_out, int r0, int r1, int n_tok)
{
    struct mats m;
    T_CHECK(mats_make(&m, wt, n_in, n_out, n_tok) == 0);
    size_t ny = (size_t)n_out * n_tok;
    float *yr = malloc(sizeof(float) * ny), *ya = malloc(sizeof(float) * ny);
    T_CHECK(yr && ya);
    if (!yr || !ya)
        goto out;
    for (size_t i = 0; i < ny; i++)
        yr[i] = ya[i] = -12345.0f; /* sentinel: must stay outside r0..r1 */
    T_EQ_INT(le_gemm_amx_ref(wt, n_in, m.w, m.w_row, r0, r1, m.x, m.x_row,
                             n_tok, yr, n_out),
             0);

    const struct le_type_traits *simd = le_type_get(wt);
    const struct le_type_traits *ref = le_type_get_ref(wt);
    int bad_vd = 0, bad_out = 0;
    double worst = 0;
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < n_out; r++) {
            float got = yr[(size_t)t * n_out + r];
            if (r < r0 || r >= r1) {
                bad_out += got != -12345.0f;
                continue;
            }
            const uint8_t *wr = m.w + (size_t)r * m.w_row;
            const uint8_t *xr = m.x + (size_t)t * m.x_row;
            double mag = 0;
            for (int i = 0; i < n_in; i++)
                mag += fabs((double)m.wf[(size_t)r * n_in + i] *
                            m.xf[(size_t)t * n_in + i]);
            double tol = 1e-5 * mag + 1e-30;
            float s1, s2;
            ref->vec_dot(n_in, &s1, wr, xr);
            simd->vec_dot(n_in, &s2, wr, xr);
            double e = fmax(fabs(got - s1), fabs(got - s2));
            if (e > tol) {
                if (bad_vd++ < 3)
                    fprintf(stderr,
                            "  %s n_in=%d r=%d t=%d: twin %.9g vec_dot "
                            "%.9g/%.9g (tol %.3g)\n",
                            ref->name, n_in, r, t, got, s1, s2, tol);
            }
            if (mag > 0 && e / mag > worst)
                worst = e / mag;
        }
    T_EQ_INT(bad_vd, 0);
    T_EQ_INT(bad_out, 0);

    if (le_amx_usable()) {
        T_EQ_INT(le_gemm_amx(wt, n_in, m.w, m.w_row, r0, r1, m.x, m.x_row,
                             n_tok, ya, n_out),
                 0);
        size_t diff = 0;
        for (size_t i = 0; i < ny; i++)
            if (memcmp(&ya[i], &yr[i], sizeof(float)) != 0) {
                if (diff++ < 3)
                    fprintf(stderr,
                            "  %s n_in=%d rows %d..%d tok %d: y[%zu] amx "
                            "%.9g twin %.9g\n",
                            ref->name, n_in, r0, r1, n_tok, i, ya[i], yr[i]);
            }
        T_EQ_INT(diff, 0);
    }
out:
    free(yr);
    free(ya);
    mats_free(&m);
}

static void
test_gemm_q8_0(void)
{
    /* n_in 2080 = 65 blocks: an odd count (the kernel pairs blocks). */
    static const int lens[] = {256, 2048, 2080, 5632};
    static const int toks[] = {1, 2, 15, 16, 17, 33, 100, 130};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (size_t j = 0; j < sizeof(toks) / sizeof(toks[0]); j++) {
            check_case(LE_TYPE_Q8_0, lens[i], 48, 0, 48, toks[j]);
            check_case(LE_TYPE_Q8_0, lens[i], 48, 5, 37, toks[j]);
        }
}

static void
test_gemm_q4_0(void)
{
    static const int lens[] = {256, 2048, 2080, 5632};
    static const int toks[] = {1, 3, 16, 31, 64, 130};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (size_t j = 0; j < sizeof(toks) / sizeof(toks[0]); j++) {
            check_case(LE_TYPE_Q4_0, lens[i], 48, 0, 48, toks[j]);
            check_case(LE_TYPE_Q4_0, lens[i], 40, 3, 40, toks[j]);
        }
}

static void
test_gemm_kquants(void)
{
    /* 2304 = 9 blocks of 256 (the kernel works a block ahead) */
    static const int lens[] = {256, 2048, 2304, 5632};
    static const int toks[] = {1, 5, 16, 47, 130};
    static const enum le_type types[] = {LE_TYPE_Q4_K, LE_TYPE_Q5_K,
                                         LE_TYPE_Q6_K};
    for (size_t k = 0; k < 3; k++)
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
            for (size_t j = 0; j < sizeof(toks) / sizeof(toks[0]); j++) {
                check_case(types[k], lens[i], 48, 0, 48, toks[j]);
                check_case(types[k], lens[i], 40, 9, 33, toks[j]);
            }
}

/* The AMX kernels over the repacked layout (le_pack_traits.gemm_amx):
 * rows r0..r1 packed in groups of 16 from the GGUF rows, the prep rows
 * made, each group through gemm_amx; bit-identical to the twin. */
static void
check_packed(enum le_type wt, int n_in, int r0, int r1, int n_tok)
{
    struct le_pack_traits pt;
    if (!le_pack_traits_at(wt, LE_ISA_AVX512, &pt) || !pt.gemm_amx)
        return;
    struct mats m;
    T_CHECK(mats_make(&m, wt, n_in, r1, n_tok) == 0);
    size_t ny = (size_t)r1 * n_tok, gb = le_pack_group_bytes(&pt, n_in);
    size_t p_row = le_pack_prep_size(pt.act_type, n_in);
    float *yr = malloc(sizeof(float) * ny), *ya = malloc(sizeof(float) * ny);
    uint8_t *g = aligned_alloc(64, gb);
    uint8_t *prep = malloc(p_row * n_tok), *tl = NULL;
    T_CHECK(yr && ya && g && prep);
    if (!yr || !ya || !g || !prep)
        goto out;
    for (size_t i = 0; i < ny; i++)
        yr[i] = ya[i] = -12345.0f;
    T_EQ_INT(le_gemm_amx_ref(wt, n_in, m.w, m.w_row, r0, r1, m.x, m.x_row,
                             n_tok, yr, r1),
             0);
    for (int t = 0; t < n_tok; t++)
        le_pack_prep(pt.act_type, m.x + (size_t)t * m.x_row, n_in,
                     prep + (size_t)t * p_row);
    /* the activations as A tiles too (le_pack_act.t: 16 rows x 32 bytes
     * per tile and block; the last tile's rows past n_tok are garbage,
     * which the kernel must not read into the results) */
    int nb = n_in / 32, ntt = (n_tok + 15) / 16;
    tl = aligned_alloc(64, (size_t)ntt * nb * 512);
    T_CHECK(tl != NULL);
    if (!tl)
        goto out;
    memset(tl, 0x7f, (size_t)ntt * nb * 512);
    for (int t = 0; t < n_tok; t++)
        for (int b = 0; b < nb; b++)
            memcpy(tl + ((size_t)(t / 16) * nb + b) * 512 + (t % 16) * 32,
                   m.x + (size_t)t * m.x_row + (size_t)b * 34 + 2, 32);
    for (int with_t = 0; with_t < 2; with_t++) {
        struct le_pack_act act = {m.x, m.x_row, prep, p_row,
                                  with_t ? tl : NULL};
        for (size_t i = 0; i < ny; i++)
            ya[i] = -12345.0f;
        for (int r = r0; r < r1; r += 16) {
            int nr = r1 - r < 16 ? r1 - r : 16;
            le_pack_rows(&pt, m.w + (size_t)r * m.w_row, m.w_row, nr, n_in,
                         g);
            pt.gemm_amx(n_in, g, &act, n_tok, ya + r, (size_t)r1, nr);
        }
        size_t diff = 0;
        for (size_t i = 0; i < ny; i++)
            if (memcmp(&ya[i], &yr[i], sizeof(float)) != 0 && diff++ < 3)
                fprintf(stderr,
                        "  packed %s%s n_in=%d rows %d..%d tok %d: y[%zu] "
                        "amx %.9g twin %.9g\n",
                        pt.type == LE_TYPE_Q8_0 ? "q8_0" : "q4_0",
                        with_t ? " (A tiles)" : "", n_in, r0, r1, n_tok, i,
                        ya[i], yr[i]);
        T_EQ_INT(diff, 0);
    }
out:
    free(tl);
    free(yr);
    free(ya);
    free(g);
    free(prep);
    mats_free(&m);
}

/* le_quant_rows' A tiles (struct le_quant_job.t) hold the bytes of its
 * Q8_0 rows from t_from on, whatever the split between threads. */
static void
test_quant_tiles(void)
{
    int n = 2080, rows = 37, from = 3, nb = n / 32;
    size_t q_row = le_row_size(LE_TYPE_Q8_0, n);
    float *x = malloc(sizeof(float) * n * rows);
    uint8_t *q = malloc(q_row * rows);
    uint8_t *tl = calloc((size_t)(rows / 16 + 1) * nb, 512);
    T_CHECK(x && q && tl);
    if (!x || !q || !tl)
        goto out;
    for (int i = 0; i < n * rows; i++)
        x[i] = frand();
    struct le_quant_job qj = {.vdt = LE_TYPE_Q8_0, .x = x, .n = n,
                              .n_rows = rows, .q = q, .q_row = q_row,
                              .t = tl, .t_from = from};
    le_quant_rows(&qj, 0, 2);
    le_quant_rows(&qj, 1, 2);
    size_t bad = 0;
    for (int t = from; t < rows; t++)
        for (int b = 0; b < nb; b++)
            bad += memcmp(tl + ((size_t)((t - from) / 16) * nb + b) * 512 +
                              ((t - from) % 16) * 32,
                          q + (size_t)t * q_row + (size_t)b * 34 + 2,
                          32) != 0;
    T_EQ_INT(bad, 0);
out:
    free(x);
    free(q);
    free(tl);
}

static void
test_gemm_packed(void)
{
    static const int lens[] = {256, 2048, 2080, 5632};
    static const int toks[] = {1, 4, 15, 16, 17, 33, 130};
    static const enum le_type types[] = {LE_TYPE_Q8_0, LE_TYPE_Q4_0};
    struct le_pack_traits pt;
    int have = le_pack_traits_at(LE_TYPE_Q8_0, LE_ISA_AVX512, &pt) &&
               pt.gemm_amx;
    /* the AMX kernels are offered exactly when AMX is usable */
    T_EQ_INT(have, le_amx_usable() && le_isa_supported(LE_ISA_AVX512));
    if (!have) {
        fprintf(stderr, "test_amx: SKIPPING the packed AMX kernels: %s\n",
                le_amx_status());
        return;
    }
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
            for (size_t j = 0; j < sizeof(toks) / sizeof(toks[0]); j++) {
                check_packed(types[k], lens[i], 0, 48, toks[j]);
                check_packed(types[k], lens[i], 0, 37, toks[j]);
            }
}

static void
test_refuses(void)
{
    float y[4] = {0};
    uint8_t w[64] = {0}, x[64] = {0};
    /* types without an AMX kernel, and rows not made of whole blocks */
    T_EQ_INT(le_gemm_amx_type(LE_TYPE_F32), 0);
    T_EQ_INT(le_gemm_amx_type(LE_TYPE_Q3_K), 0);
    T_EQ_INT(le_gemm_amx_ref(LE_TYPE_F32, 16, w, 64, 0, 1, x, 64, 1, y, 1),
             -1);
    T_EQ_INT(le_gemm_amx_ref(LE_TYPE_Q8_0, 40, w, 64, 0, 1, x, 64, 1, y, 1),
             -1);
    T_EQ_INT(le_gemm_amx_ref(LE_TYPE_Q4_K, 32, w, 64, 0, 1, x, 64, 1, y, 1),
             -1);
    if (le_amx_usable())
        T_EQ_INT(le_gemm_amx(LE_TYPE_Q8_1, 32, w, 36, 0, 1, x, 36, 1, y, 1),
                 -1);
    T_CHECK(le_amx_status() != NULL);
}

/* attn.c's F16 attention loops: the SIMD twin against the plain C one
 * (scores within 1e-6 of sum |q_i k_i| times the scale, the same exact
 * products summed in double in another order; values bit for bit), for
 * the head sizes it takes and position counts around its unrolling. */
static void
test_attn_f16(void)
{
    /* the active level's kernels, then each level's that this CPU runs
     * (each takes both head sizes) */
    struct le_attn_f16 kern[3];
    int nk = 0;
    if (le_attn_f16_get(64, &kern[nk]))
        nk++;
    else
        fprintf(stderr, "test_amx: no SIMD attention at level %s\n",
                le_isa_name(le_isa_active()));
#if defined(__x86_64__)
    if (le_isa_supported(LE_ISA_AVX2))
        kern[nk++] = (struct le_attn_f16){le_attn_scores_f16_avx2,
                                          le_attn_values_f16_avx2};
    if (le_isa_supported(LE_ISA_AVX512))
        kern[nk++] = (struct le_attn_f16){le_attn_scores_f16_avx512,
                                          le_attn_values_f16_avx512};
#endif
    for (int c = 0; c < 2 * nk; c++) { /* kernels x head sizes 64, 128 */
        struct le_attn_f16 ak = kern[c / 2];
        int hd = 64 * (1 + c % 2);
        static const int ns[] = {1, 2, 7, 64, 129};
        for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
            int n = ns[ni];
            size_t ks = (size_t)hd * 2 * 3; /* rows of 3 heads, as a cache */
            uint16_t *q = malloc((size_t)hd * 2);
            uint8_t *k = malloc(ks * (size_t)n), *v = malloc(ks * (size_t)n);
            float *s0 = malloc((size_t)n * sizeof(float));
            float *s1 = malloc((size_t)n * sizeof(float));
            float *o0 = malloc((size_t)hd * sizeof(float));
            float *o1 = malloc((size_t)hd * sizeof(float));
            float *w = malloc((size_t)n * sizeof(float));
            for (int i = 0; i < hd; i++)
                q[i] = le_fp32_to_fp16(4 * frand());
            for (size_t i = 0; i < ks * (size_t)n / 2; i++) {
                ((uint16_t *)k)[i] = le_fp32_to_fp16(2 * frand());
                ((uint16_t *)v)[i] = le_fp32_to_fp16(3 * frand());
            }
            for (int p = 0; p < n; p++)
                w[p] = fabsf(frand());
            float scale = 0.125f;
            le_attn_scores_f16_ref(hd, n, q, k + 2 * hd, ks, scale, s0);
            ak.scores(hd, n, q, k + 2 * hd, ks, scale, s1);
            for (int p = 0; p < n; p++) {
                const uint16_t *kr = (const uint16_t *)(k + 2 * hd +
                                                        (size_t)p * ks);
                double mag = 0;
                for (int i = 0; i < hd; i++)
                    mag += fabs((double)le_fp16_to_fp32(q[i]) *
                                le_fp16_to_fp32(kr[i]));
                T_NEAR(s1[p], s0[p], 1e-6 * mag * scale + 1e-30);
            }
            le_attn_values_f16_ref(hd, n, w, 0.37f, v + 2 * hd, ks, o0);
            ak.values(hd, n, w, 0.37f, v + 2 * hd, ks, o1);
            T_CHECK(memcmp(o0, o1, (size_t)hd * sizeof(float)) == 0);
            free(q), free(k), free(v), free(s0), free(s1), free(o0);
            free(o1), free(w);
        }
    }
}

int
main(void)
{
    if (le_amx_usable())
        fprintf(stderr, "test_amx: AMX usable: %s\n", le_amx_status());
    else
        fprintf(stderr,
                "test_amx: SKIPPING the AMX kernel comparisons: %s "
                "(the twin is still checked against vec_dot)\n",
                le_amx_status());
    T_RUN(test_gemm_q8_0);
    T_RUN(test_gemm_q4_0);
    T_RUN(test_gemm_kquants);
    T_RUN(test_gemm_packed);
    T_RUN(test_quant_tiles);
    T_RUN(test_refuses);
    T_RUN(test_attn_f16);
    return T_END();
}
