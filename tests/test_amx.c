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

#include <unistd.h>

#include "../local_engine/le_int.h"
#include "harness.h"
#include "lib/e2e.h"
#include "lib/gguf_writer.h"

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
/* One score in the order of the one-head SIMD kernels (per position, w
 * double lanes: 8 for AVX-512, 4 for AVX2): a0[j] and a1[j] sum the float
 * products of elements 2wc + j and 2wc + w + j over the chunks c in
 * order, then s = a0 + a1 across lanes in _mm512_reduce_add_pd's tree
 * (lanes j and j + 4, j and j + 2, 0 and 1) or the AVX2 one (j and j + 2,
 * 0 and 1).  The grouped kernels must give these bits, not merely values
 * within the contract. */
static float
score_lanes(int hd, int w, const uint16_t *q, const uint16_t *k, float scale)
{
    double a0[8] = {0}, a1[8] = {0}, s[8];
    for (int c = 0; c < hd / (2 * w); c++)
        for (int j = 0; j < w; j++) {
            int e = 2 * w * c + j;
            float p0 = le_fp16_to_fp32(q[e]) * le_fp16_to_fp32(k[e]);
            float p1 = le_fp16_to_fp32(q[e + w]) * le_fp16_to_fp32(k[e + w]);
            a0[j] += (double)p0;
            a1[j] += (double)p1;
        }
    for (int j = 0; j < w; j++)
        s[j] = a0[j] + a1[j];
    double d = w == 8 ? ((s[0] + s[4]) + (s[2] + s[6])) +
                            ((s[1] + s[5]) + (s[3] + s[7]))
                      : (s[0] + s[2]) + (s[1] + s[3]);
    return (float)d * scale;
}

static int
same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* The attention kernels of attn.c for g query heads sharing a KV head:
 * the active level's, then each level's this CPU runs, head sizes 64 and
 * 128, n = 1..17 (every tail of the 8- and 4-position blocks), 64, 129,
 * g = 1..5 (the values' 4- and 2-head blocks and their remainders):
 *   - scores: each head equals score_lanes of its level to the bit and
 *     the plain C twin within 1e-6 * sum |q_i k_i| * scale; a call for g
 *     heads gives each head the bits of a call for that head alone; the
 *     row past n is not written; mx is le_attn_row_max of the row;
 *   - values: SIMD == twin bit for bit, and g heads == one at a time. */
static void
test_attn_f16(void)
{
    struct le_attn_f16 kern[3];
    int lanes[3], nk = 0;
    if (le_attn_f16_get(64, &kern[nk])) {
        lanes[nk] = le_isa_active() >= LE_ISA_AVX512 ? 8 : 4;
        nk++;
    } else {
        fprintf(stderr, "test_amx: no SIMD attention at level %s\n",
                le_isa_name(le_isa_active()));
    }
#if defined(__x86_64__)
    if (le_isa_supported(LE_ISA_AVX2)) {
        kern[nk] = (struct le_attn_f16){le_attn_scores_f16_avx2,
                                        le_attn_values_f16_avx2,
                                        le_attn_to_f16_avx2};
        lanes[nk++] = 4;
    }
    if (le_isa_supported(LE_ISA_AVX512)) {
        kern[nk] = (struct le_attn_f16){le_attn_scores_f16_avx512,
                                        le_attn_values_f16_avx512,
                                        le_attn_to_f16_avx512};
        lanes[nk++] = 8;
    }
#endif
    static const int ns[] = {1,  2,  3,  4,  5,  6,  7,  8,  9, 10,
                             11, 12, 13, 14, 15, 16, 17, 64, 129};
    enum { NN = sizeof(ns) / sizeof(ns[0]), GMAX = 5 };
    int bad_lanes = 0, bad_near = 0, bad_group = 0, bad_tail = 0;
    int bad_vals = 0, bad_vgroup = 0, runs = 0, order_shows = 0, bad_max = 0;
    for (int c = 0; c < 2 * nk; c++) { /* kernels x head sizes 64, 128 */
        struct le_attn_f16 ak = kern[c / 2];
        int hd = 64 * (1 + c % 2);
        for (int ni = 0; ni < NN; ni++) {
            int n = ns[ni], scs = n + 3;
            size_t ks = (size_t)hd * 2 * 3; /* rows of 3 heads, as a cache */
            uint16_t *q = malloc((size_t)GMAX * hd * 2);
            uint8_t *k = malloc(ks * (size_t)n), *v = malloc(ks * (size_t)n);
            float *s0 = malloc((size_t)GMAX * scs * sizeof(float));
            float *s1 = malloc((size_t)GMAX * scs * sizeof(float));
            float *s2 = malloc((size_t)scs * sizeof(float));
            float *o0 = malloc((size_t)GMAX * hd * sizeof(float));
            float *o1 = malloc((size_t)GMAX * hd * sizeof(float));
            float *o2 = malloc((size_t)hd * sizeof(float));
            float *w = malloc((size_t)GMAX * scs * sizeof(float));
            float inv[GMAX];
            /* magnitudes 2^-24..2^6 (subnormal halves included) and,
             * in most key rows, two pairs of products of +-2^12..2^20
             * that cancel: the double sums round and the float score
             * shows the order they were added in */
            static const int big[4] = {3, 22, 37, 62};
            for (int i = 0; i < GMAX * hd; i++)
                q[i] = i % hd == big[0] || i % hd == big[1] ||
                               i % hd == big[2] || i % hd == big[3]
                           ? le_fp32_to_fp16(ldexpf(1.0f + frand() / 2, 10))
                           : le_fp32_to_fp16(
                                 ldexpf(frand(), (int)(rng % 13) - 8));
            for (int h = 0; h < GMAX; h++) {
                q[h * hd + big[1]] = q[h * hd + big[0]];
                q[h * hd + big[3]] = q[h * hd + big[2]];
            }
            for (size_t i = 0; i < ks * (size_t)n / 2; i++) {
                ((uint16_t *)k)[i] =
                    le_fp32_to_fp16(ldexpf(frand(), (int)(rng % 15) - 16));
                ((uint16_t *)v)[i] = le_fp32_to_fp16(3 * frand());
            }
            for (int p = 0; p < n; p++) { /* the cancelling pairs */
                uint16_t *kr = (uint16_t *)(k + 2 * hd + (size_t)p * ks);
                for (int b = 0; b < 4 && p % 4 != 3; b += 2) {
                    uint16_t x = le_fp32_to_fp16(
                        ldexpf(frand(), (int)(rng % 9) + 2));
                    kr[big[b]] = x, kr[big[b + 1]] = x ^ 0x8000;
                }
            }
            for (int i = 0; i < GMAX * scs; i++)
                w[i] = fabsf(frand());
            for (int h = 0; h < GMAX; h++)
                inv[h] = 0.37f + 0.01f * h;
            const uint8_t *kh = k + 2 * hd, *vh = v + 2 * hd;
            float scale = 0.125f;
            for (int g = 1; g <= GMAX; g++, runs++) {
                for (int i = 0; i < GMAX * scs; i++)
                    s1[i] = -1234.5f; /* must survive past n */
                float mx0[GMAX], mx1[GMAX], mx2;
                le_attn_scores_f16_ref(hd, g, n, q, kh, ks, scale, s0, scs,
                                       mx0, NULL);
                ak.scores(hd, g, n, q, kh, ks, scale, s1, scs, mx1, vh);
                for (int h = 0; h < g; h++) {
                    const uint16_t *qh = q + (size_t)h * hd;
                    ak.scores(hd, 1, n, qh, kh, ks, scale, s2, scs, &mx2,
                              NULL);
                    bad_group += !same_bits(s1 + (size_t)h * scs, s2, n);
                    bad_group += !same_bits(&mx1[h], &mx2, 1);
                    /* == : a zero maximum may differ in sign */
                    bad_max += !(mx1[h] ==
                                 le_attn_row_max(n, s1 + (size_t)h * scs));
                    bad_max += !(mx0[h] ==
                                 le_attn_row_max(n, s0 + (size_t)h * scs));
                    for (int p = n; p < scs; p++)
                        bad_tail += s1[(size_t)h * scs + p] != -1234.5f;
                    for (int p = 0; p < n; p++) {
                        const uint16_t *kr =
                            (const uint16_t *)(kh + (size_t)p * ks);
                        float want = score_lanes(hd, lanes[c / 2], qh, kr,
                                                 scale);
                        float got = s1[(size_t)h * scs + p];
                        bad_lanes += memcmp(&want, &got, sizeof(got)) != 0;
                        order_shows += want != s0[(size_t)h * scs + p];
                        double mag = 0;
                        for (int i = 0; i < hd; i++)
                            mag += fabs((double)le_fp16_to_fp32(qh[i]) *
                                        le_fp16_to_fp32(kr[i]));
                        bad_near += !(fabs((double)got -
                                           s0[(size_t)h * scs + p]) <=
                                      1e-6 * mag * scale + 1e-30);
                    }
                }
                le_attn_values_f16_ref(hd, g, n, w, scs, inv, vh, ks, o0);
                ak.values(hd, g, n, w, scs, inv, vh, ks, o1);
                bad_vals += !same_bits(o0, o1, (size_t)g * hd);
                for (int h = 0; h < g; h++) {
                    ak.values(hd, 1, n, w + (size_t)h * scs, scs, inv + h,
                              vh, ks, o2);
                    bad_vgroup += !same_bits(o1 + (size_t)h * hd, o2, hd);
                }
            }
            free(q), free(k), free(v), free(s0), free(s1), free(s2);
            free(o0), free(o1), free(o2), free(w);
        }
    }
    fprintf(stderr,
            "test_amx: attention: %d kernel x head size x n x g runs, %d "
            "scores where the lane order and the twin's differ\n",
            runs, order_shows);
    T_CHECK(nk == 0 || order_shows > 0); /* the data can tell orders */
    T_EQ_INT(bad_lanes, 0);
    T_EQ_INT(bad_near, 0);
    T_EQ_INT(bad_group, 0);
    T_EQ_INT(bad_tail, 0);
    T_EQ_INT(bad_max, 0);
    T_EQ_INT(bad_vals, 0);
    T_EQ_INT(bad_vgroup, 0);
}

/* The values kernels at head sizes the fused scores do not take (any
 * multiple of their block: deepseek2's 576, gemma's 256, 96 at AVX2):
 * bit for bit the twin, whatever the number of heads a call. */
static void
test_attn_values_wide(void)
{
    struct le_attn_f16 kern[2];
    int nk = 0;
#if defined(__x86_64__)
    if (le_isa_supported(LE_ISA_AVX2))
        kern[nk++] = (struct le_attn_f16){le_attn_scores_f16_avx2,
                                          le_attn_values_f16_avx2,
                                          le_attn_to_f16_avx2};
    if (le_isa_supported(LE_ISA_AVX512))
        kern[nk++] = (struct le_attn_f16){le_attn_scores_f16_avx512,
                                          le_attn_values_f16_avx512,
                                          le_attn_to_f16_avx512};
#endif
    static const int hds[] = {96, 192, 256, 576};
    static const int ns[] = {1, 2, 7, 16, 33};
    enum { GMAX = 8 };
    int bad = 0, runs = 0;
    for (int c = 0; c < nk; c++)
        for (size_t hi = 0; hi < sizeof(hds) / sizeof(hds[0]); hi++)
            for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
                int hd = hds[hi], n = ns[ni], scs = n + 1;
                size_t vs = (size_t)hd * 2 + 6; /* rows apart, as a cache */
                uint8_t *v = malloc(vs * (size_t)n);
                float *w = malloc((size_t)GMAX * scs * sizeof(float));
                float *o0 = malloc((size_t)GMAX * hd * sizeof(float));
                float *o1 = malloc((size_t)GMAX * hd * sizeof(float));
                float inv[GMAX];
                for (int p = 0; p < n; p++)
                    for (int i = 0; i < hd; i++)
                        memcpy(v + (size_t)p * vs + 2 * (size_t)i,
                               &(uint16_t){le_fp32_to_fp16(
                                   ldexpf(frand(), (int)(rng % 9) - 4))},
                               2);
                for (int i = 0; i < GMAX * scs; i++)
                    w[i] = fabsf(frand());
                for (int h = 0; h < GMAX; h++)
                    inv[h] = 0.29f + 0.013f * h;
                for (int g = 1; g <= GMAX; g++, runs++) {
                    le_attn_values_f16_ref(hd, g, n, w, scs, inv, v, vs, o0);
                    kern[c].values(hd, g, n, w, scs, inv, v, vs, o1);
                    bad += !same_bits(o0, o1, (size_t)g * hd);
                }
                free(v), free(w), free(o0), free(o1);
            }
    fprintf(stderr, "test_amx: wide attention values: %d runs\n", runs);
    T_EQ_INT(bad, 0);
}

static uint32_t
f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float
u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* to_f16 of every level this CPU runs (and le_attn_f16_get's, also at a
 * head size without SIMD scores) == le_fp32_to_fp16 bit for bit on: each
 * half's value and its float neighbours, each midpoint between adjacent
 * halves (ties, to even) and its neighbours, in both signs (normal,
 * subnormal, the overflow boundary 65520), float subnormals, zeros,
 * infinities, overflow, and NaNs (quiet, signalling, with payloads, both
 * signs), at every length 0..40 and offset (the vector tails). */
static void
test_attn_to_f16(void)
{
    enum { NX = 65536 * 6 * 2 + 64 };
    float *x = malloc(NX * sizeof(float));
    uint16_t *y = malloc(NX * sizeof(uint16_t));
    uint16_t *want = malloc(NX * sizeof(uint16_t));
    int nx = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) { /* finite non-negative halves */
        float f = le_fp16_to_fp32((uint16_t)h);
        float mid = (f + le_fp16_to_fp32((uint16_t)(h + 1))) / 2; /* exact */
        float v6[6] = {f,   nextafterf(f, INFINITY),   nextafterf(f, 0),
                       mid, nextafterf(mid, INFINITY), nextafterf(mid, 0)};
        for (int i = 0; i < 6; i++) {
            x[nx++] = v6[i];
            x[nx++] = -v6[i];
        }
    }
    static const uint32_t special[] = {
        0x00000001, 0x007fffff, 0x00400000, 0x33000000, 0x33000001,
        0x32ffffff, 0x477fefff, 0x477ff000, 0x477ff001, 0x47800000,
        0x7f7fffff, 0x7f800000, 0x7f800001, 0x7fbfffff, 0x7fc00000,
        0x7fc00001, 0x7fc02000, 0x7fffffff, 0x7fffe000, 0x80000000,
        0x80000001, 0xff800000, 0xff800001, 0xffc00000, 0xffffffff,
        0xffc02000, 0x3f800000, 0x38800000, 0x387fffff, 0x387fc000};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
        x[nx++] = u2f(special[i]);
    /* NaNs between finite values, so a vector holds both */
    for (int i = 0; i < 24 && nx < NX; i++)
        x[nx++] = i % 3 ? frand() * 70000.0f : u2f(0x7fa00000u + (uint32_t)i);
    for (int i = 0; i < nx; i++)
        want[i] = le_fp32_to_fp16(x[i]);
    /* the plain rounding itself on a few known values */
    T_EQ_INT(le_fp32_to_fp16(65520.0f), 0x7c00);
    T_EQ_INT(le_fp32_to_fp16(nextafterf(65520.0f, 0)), 0x7bff);
    T_EQ_INT(le_fp32_to_fp16(0x1p-25f), 0x0000); /* tie to even 0 */
    T_EQ_INT(le_fp32_to_fp16(0x3p-25f), 0x0002); /* tie to even 2 */
    T_EQ_INT(le_fp32_to_fp16(u2f(0x7fc02000)), 0x7e00);
    T_EQ_INT(le_fp32_to_fp16(u2f(0xffc02000)), 0xfe00);

    void (*fn[4])(int, const float *, uint16_t *);
    int nf = 0;
    struct le_attn_f16 ak;
    le_attn_f16_get(64, &ak);
    fn[nf++] = ak.to_f16;
    le_attn_f16_get(80, &ak);
    fn[nf++] = ak.to_f16;
#if defined(__x86_64__)
    if (le_isa_supported(LE_ISA_AVX2))
        fn[nf++] = le_attn_to_f16_avx2;
    if (le_isa_supported(LE_ISA_AVX512))
        fn[nf++] = le_attn_to_f16_avx512;
#endif
    for (int f = 0; f < nf; f++) {
        int bad = 0, bad_tail = 0;
        memset(y, 0, NX * sizeof(uint16_t));
        fn[f](nx, x, y);
        for (int i = 0; i < nx; i++)
            if (y[i] != want[i]) {
                if (bad++ < 5)
                    fprintf(stderr,
                            "test_amx: to_f16 %d: %08x -> %04x, want %04x\n",
                            f, (unsigned)f2u(x[i]), y[i], want[i]);
            }
        int base = nx - 64; /* the specials and the mixed NaNs */
        for (int off = 0; off < 8; off++)
            for (int len = 0; len <= 40 && base + off + len + 1 <= nx;
                 len++) {
                uint16_t buf[48];
                memset(buf, 0xab, sizeof(buf));
                fn[f](len, x + base + off, buf);
                bad_tail += memcmp(buf, want + base + off,
                                   (size_t)len * 2) != 0;
                bad_tail += buf[len] != 0xabab;
            }
        T_EQ_INT(bad, 0);
        T_EQ_INT(bad_tail, 0);
    }
    free(x), free(y), free(want);
}

/* What `llmux run` prints for a greedy 40-token run of model at SIMD
 * level (malloc'd; NULL when it could not run or printed nothing). */
static char *
run_text(const char *bin, const char *model, const char *level)
{
    char cmd[1536];
    snprintf(cmd, sizeof(cmd),
             "LLMUX_SIMD=%s '%s' run --model '%s' -p 'Once upon a time' -n 40 "
             "--temp 0 2>/dev/null",
             level, bin, model);
    FILE *f = popen(cmd, "r");
    char *out = f ? calloc(1, 65536) : NULL;
    size_t n = out ? fread(out, 1, 65535, f) : 0;
    int rc = f ? pclose(f) : -1;
    if (rc != 0 || n == 0) {
        fprintf(stderr, "test_amx: %s at %s: exit %d, %zu bytes\n", model,
                level, rc, n);
        free(out);
        return NULL;
    }
    return out;
}

/* The grouped attention inside the model: llmux run (greedy, 40 tokens,
 * F16 KV cache) generates the same text at each SIMD level this CPU has
 * as at level none (the per-head plain C attention), on llamas whose KV
 * heads serve 16 query heads (two calls of 8: attention_heads' chunks), 4
 * (head size 128) and 3 (head size 64, the values' 2-head remainder). */
static void
test_attn_levels(void)
{
    static const struct {
        int n_embd, n_head, n_head_kv;
    } shape[] = {{1024, 16, 1}, {512, 4, 1}, {768, 12, 4}};
    static const struct {
        const char *name;
        enum le_isa isa;
    } level[] = {{"avx2", LE_ISA_AVX2}, {"avx512", LE_ISA_AVX512}};
    const char *bin = e2e_env("LLMUX_BIN", "build/release/llmux");
    char *dir = e2e_temp_dir();
    T_CHECK(dir != NULL);
    for (size_t i = 0; dir && i < sizeof(shape) / sizeof(shape[0]); i++) {
        struct gguf_w_llama lp = {0};
        lp.n_vocab = 330;
        lp.n_embd = shape[i].n_embd;
        lp.n_layer = 2;
        lp.n_head = shape[i].n_head;
        lp.n_head_kv = shape[i].n_head_kv;
        lp.n_ff = 256;
        lp.type = LE_TYPE_Q8_0;
        lp.seed = 11 + i;
        char p[600];
        snprintf(p, sizeof(p), "%s/attn_%zu.gguf", dir, i);
        T_EQ_INT(gguf_w_llama_write(&lp, p), 0);
        char *ref = run_text(bin, p, "none");
        T_CHECK(ref != NULL);
        for (size_t l = 0; ref && l < sizeof(level) / sizeof(level[0]); l++) {
            if (!le_isa_supported(level[l].isa))
                continue;
            char *out = run_text(bin, p, level[l].name);
            T_CHECK(out && strcmp(out, ref) == 0);
            if (out && strcmp(out, ref) != 0)
                fprintf(stderr, "test_amx: %d/%d heads at %s differ from "
                        "none\n", lp.n_head, lp.n_head_kv, level[l].name);
            free(out);
        }
        free(ref);
        unlink(p);
    }
    if (dir)
        rmdir(dir);
    free(dir);
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
    T_RUN(test_attn_values_wide);
    T_RUN(test_attn_to_f16);
    T_RUN(test_attn_levels);
    return T_END();
}
