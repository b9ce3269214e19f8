/*
 * test_quants.c: the per-type table of local_engine/quants.c.
 *
 * For every type: quantise random data, dequantise, and hold the error to
 * a stated per-type bound (relative RMS error, i.e. RMS(x - x') / RMS(x));
 * vec_dot against its vec_dot_type equals the double-precision dot of the
 * two dequantised vectors within a stated bound relative to sum |x_i y_i|.
 * Hand-made blocks pin the byte layouts (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) to values worked out from the GGUF/ggml
 * block definitions.  SIMD kernels are held against the plain C ones:
 * bit-exact for the K-quants, within a stated bound for Q4_0, Q8_0, F16.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../local_engine/le_int.h"
#include "harness.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float
frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * 0x1p-24 * 2.0 - 1.0);
}

/* Gaussian-ish with occasional outliers, like real weights. */
static void
fill(float *x, int n, float scale)
{
    for (int i = 0; i < n; i++) {
        float v = (frand() + frand() + frand()) * scale;
        if (i % 97 == 13)
            v *= 4;
        x[i] = v;
    }
}

struct case_ {
    enum le_type t;
    double rt_tol;  /* relative RMS error of the round trip */
    double dot_tol; /* |vec_dot - ref| / sum|x y| */
};

/* Bounds: about 1.5x the error measured with this generator (measured:
 * f16 2.1e-4, bf16 1.7e-3, q8_0 6.4e-3, q4_0 0.10, q4_1 0.084, q5_0 0.051,
 * q5_1 0.041, q2_K 0.35, q3_K 0.166, q4_K 0.085, q5_K 0.042, q6_K 0.022,
 * q8_K 0.011, mxfp4 0.128).  The vec_dot bounds are rounding only (float accumulation;
 * for the _1 types also the fp16 rounding of the Q8_1 block sum s, measured
 * up to 2.5e-5). */
static const struct case_ cases[] = {
    {LE_TYPE_F32, 0.0, 1e-6},   {LE_TYPE_F16, 5e-4, 1e-6},
    {LE_TYPE_BF16, 4e-3, 1e-6}, {LE_TYPE_Q8_0, 0.012, 1e-6},
    {LE_TYPE_Q8_1, 0.012, 1e-6}, {LE_TYPE_Q4_0, 0.15, 1e-6},
    {LE_TYPE_Q4_1, 0.12, 5e-5}, {LE_TYPE_Q5_0, 0.075, 1e-6},
    {LE_TYPE_Q5_1, 0.06, 5e-5}, {LE_TYPE_Q2_K, 0.50, 1e-6},
    {LE_TYPE_Q3_K, 0.24, 1e-6}, {LE_TYPE_Q4_K, 0.12, 1e-6},
    {LE_TYPE_Q5_K, 0.06, 1e-6}, {LE_TYPE_Q6_K, 0.03, 1e-6},
    {LE_TYPE_Q8_K, 0.02, 1e-6}, {LE_TYPE_MXFP4, 0.19, 1e-6},
};

#define N 4096

static void
test_types_table(void)
{
    static const struct {
        uint32_t t;
        int blck;
        size_t size;
        uint32_t vd;
    } want[] = {
        {0, 1, 4, 0},       {1, 1, 2, 1},       {30, 1, 2, 30},
        {2, 32, 18, 8},     {3, 32, 20, 9},     {6, 32, 22, 8},
        {7, 32, 24, 9},     {8, 32, 34, 8},     {9, 32, 36, 9},
        {10, 256, 84, 15},  {11, 256, 110, 15}, {12, 256, 144, 15},
        {13, 256, 176, 15}, {14, 256, 210, 15}, {15, 256, 292, 15},
        {39, 32, 17, 8},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct le_type_traits *tt = le_type_get(want[i].t);
        T_CHECK(tt != NULL);
        if (!tt)
            continue;
        T_EQ_INT(tt->blck_size, want[i].blck);
        T_EQ_INT(tt->type_size, want[i].size);
        T_EQ_INT(tt->vec_dot_type, want[i].vd);
        T_CHECK(tt->to_float && tt->from_float && tt->vec_dot);
    }
    T_CHECK(le_type_get(4) == NULL); /* removed Q4_2 */
    T_CHECK(le_type_get(5) == NULL);
    T_CHECK(le_type_get(16) == NULL); /* IQ types: not supported */
    T_CHECK(le_type_get(31) == NULL);
    T_CHECK(le_type_get(38) == NULL);
    T_CHECK(le_type_get(40) == NULL);
    T_CHECK(le_type_get(0xffffffffu) == NULL);
    T_EQ_INT(le_row_size(LE_TYPE_Q4_0, 4096), 4096 / 32 * 18);
    T_EQ_INT(le_row_size(LE_TYPE_Q6_K, 512), 2 * 210);
    T_EQ_INT(le_row_size(LE_TYPE_Q4_0, 100), 0);
    T_EQ_INT(le_row_size(LE_TYPE_F32, 7), 28);
}

static void
test_fp16(void)
{
    /* Exhaustive: every half converts to float and back unchanged (NaNs
     * stay NaN). */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = le_fp16_to_fp32((uint16_t)h);
        uint16_t back = le_fp32_to_fp16(f);
        if (isnan(f)) {
            if ((back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0)
                bad++;
        } else if (back != h) {
            bad++;
        }
    }
    T_EQ_INT(bad, 0);
    T_EQ_INT(le_fp32_to_fp16(1.0f), 0x3c00);
    T_EQ_INT(le_fp32_to_fp16(-2.0f), 0xc000);
    T_EQ_INT(le_fp32_to_fp16(65504.0f), 0x7bff);
    T_EQ_INT(le_fp32_to_fp16(65520.0f), 0x7c00); /* rounds to inf */
    T_EQ_INT(le_fp32_to_fp16(65519.0f), 0x7bff);
    T_EQ_INT(le_fp32_to_fp16(0x1p-24f), 0x0001);  /* smallest subnormal */
    T_EQ_INT(le_fp32_to_fp16(0x1p-25f), 0x0000);  /* tie to even: 0 */
    T_EQ_INT(le_fp32_to_fp16(0x1.8p-24f), 0x0002); /* tie to even: 2 */
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even is 1. */
    T_EQ_INT(le_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    T_EQ_INT(le_fp32_to_fp16(1.0f + 0x1.8p-10f), 0x3c02);
    T_NEAR(le_fp16_to_fp32(0x3555), 0.333251953125, 0);
    T_EQ_INT(le_fp32_to_bf16(1.0f), 0x3f80);
    T_EQ_INT(le_fp32_to_bf16(1.00390625f), 0x3f80); /* tie -> even */
    T_EQ_INT(le_fp32_to_bf16(1.01171875f), 0x3f82); /* tie -> even (up) */
    T_NEAR(le_bf16_to_fp32(0xc040), -3.0, 0);
    T_CHECK(isnan(le_bf16_to_fp32(le_fp32_to_bf16(NAN))));
}

static void
test_roundtrip_and_dot(void)
{
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    float *xd = malloc(N * sizeof(float)), *yd = malloc(N * sizeof(float));
    void *qx = malloc(N * 4), *qy = malloc(N * 4);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const struct le_type_traits *tt = le_type_get(cases[c].t);
        T_CHECK(tt != NULL);
        if (!tt)
            continue;
        const struct le_type_traits *vt = le_type_get(tt->vec_dot_type);
        for (int rep = 0; rep < 3; rep++) {
            fill(x, N, rep == 2 ? 1e-3f : 1.0f);
            fill(y, N, 0.5f);
            if (rep == 1) /* one all-zero block, one constant block */
                for (int i = 0; i < 512; i++)
                    x[i] = i < 256 ? 0.0f : 0.25f;
            tt->from_float(x, qx, N);
            tt->to_float(qx, xd, N);
            double se = 0, sx = 0;
            for (int i = 0; i < N; i++) {
                se += (double)(x[i] - xd[i]) * (x[i] - xd[i]);
                sx += (double)x[i] * x[i];
            }
            double rel = sqrt(se / sx);
            if (rel > cases[c].rt_tol)
                fprintf(stderr, "%s rep %d: round-trip rel rms %g\n",
                        tt->name, rep, rel);
            T_CHECK(rel <= cases[c].rt_tol);

            vt->from_float(y, qy, N);
            vt->to_float(qy, yd, N);
            double ref = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                ref += (double)xd[i] * yd[i];
                mag += fabs((double)xd[i] * yd[i]);
            }
            float s = NAN;
            tt->vec_dot(N, &s, qx, qy);
            double err = fabs(s - ref) / mag;
            if (!(err <= cases[c].dot_tol))
                fprintf(stderr, "%s rep %d: vec_dot %g ref %g rel err %g\n",
                        tt->name, rep, s, ref, err);
            T_CHECK(err <= cases[c].dot_tol);
            /* And the quantised dot is close to the exact float dot. */
            double exact = 0, emag = 0;
            for (int i = 0; i < N; i++) {
                exact += (double)x[i] * y[i];
                emag += fabs((double)x[i] * y[i]);
            }
            T_CHECK(fabs(s - exact) / emag <= 2 * cases[c].rt_tol + 0.02);
        }
    }
    free(x);
    free(y);
    free(xd);
    free(yd);
    free(qx);
    free(qy);
}

/* NaN / inf / huge activations (a diverging model) must not reach a
 * float-to-int conversion (UB) or crash; blocks without them still
 * round-trip normally.  Run under -fsanitize=float-cast-overflow to see
 * the UB side. */
static void
test_nonfinite(void)
{
    float x[512], xd[512], xc[512];
    uint8_t q[512 * 4];
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const struct le_type_traits *tt = le_type_get(cases[c].t);
        if (!tt)
            continue;
        for (int kind = 0; kind < 4; kind++) {
            fill(x, 512, 1.0f);
            tt->from_float(x, q, 512); /* the clean round trip */
            tt->to_float(q, xc, 512);
            float bad = kind == 0 ? NAN
                        : kind == 1 ? INFINITY
                        : kind == 2 ? -INFINITY
                                    : 3e38f;
            x[5] = bad; /* first block (of any size) only */
            tt->from_float(x, q, 512);
            tt->to_float(q, xd, 512);
            /* The second 256 values share no block with x[5]: as clean. */
            T_CHECK(memcmp(xd + 256, xc + 256, 256 * sizeof(float)) == 0);
        }
    }
}

/* SIMD kernels (if this CPU runs them) against their plain C twins: the
 * K-quant kernels do the same integer sums and float steps, so they must
 * agree bit for bit.  Q4_0 and Q8_0 do the same integer sums but add the
 * scaled block sums in 8 float lanes (quants_avx2.c): they must agree
 * within 1e-5 of the sum of |x_i * y_i| over the dequantised values (the
 * rounding bound for <= 96 blocks is about 6e-6).  Weights are both
 * quantised data and random bytes (every bit pattern of nibbles / scales)
 * with finite fp16 scales patched in. */
/* vec_dot_multi (where a type has one): each s[c * bs] equals the vec_dot
 * of the same rows bit for bit, for 1..9 activation rows (groups of 4 and
 * a remainder) and odd block counts. */
static void
test_vec_dot_multi(void)
{
    int n_multi = 0;
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    for (uint32_t t = 0; t < LE_TYPE_COUNT; t++) {
        const struct le_type_traits *tt = le_type_get(t);
        if (!tt || !tt->vec_dot_multi)
            continue;
        n_multi++;
        const struct le_type_traits *vt = le_type_get(tt->vec_dot_type);
        int bad = 0;
        for (int rep = 0; rep < 12; rep++) {
            int n = 32 * (1 + (rep * 37) % 96); /* 32 .. 3072, odd counts */
            int nc = 1 + rep % 9;
            size_t xr = le_row_size(t, n);
            size_t yr = le_row_size(tt->vec_dot_type, n);
            size_t by = yr + 34; /* rows not packed: the stride is honoured */
            uint8_t *qx = malloc(xr), *qy = calloc((size_t)nc, by);
            float out[9 * 3], want[9];
            fill(x, n, 1.0f);
            tt->from_float(x, qx, n);
            for (int c = 0; c < nc; c++) {
                fill(y, n, rep % 3 ? 1.0f : 50.0f);
                vt->from_float(y, qy + (size_t)c * by, n);
                tt->vec_dot(n, &want[c], qx, qy + (size_t)c * by);
            }
            for (int i = 0; i < 9 * 3; i++)
                out[i] = -12345.0f;
            tt->vec_dot_multi(n, out, 3, qx, qy, by, nc);
            for (int c = 0; c < nc; c++)
                bad += memcmp(&out[c * 3], &want[c], sizeof(float)) != 0;
            for (int i = 0; i < 9 * 3; i++) /* nothing else written */
                if (i % 3 || i / 3 >= nc)
                    bad += out[i] != -12345.0f;
            free(qx);
            free(qy);
        }
        T_EQ_INT(bad, 0);
    }
    fprintf(stderr, "  (%d types with vec_dot_multi on this CPU)\n",
            n_multi);
    free(x);
    free(y);
}

static void
test_simd_vs_ref(void)
{
    static const struct {
        enum le_type t;
        size_t d_off[2]; /* fp16 fields in a block (0 = none for [1]) */
        int n_d;
        int exact; /* 1: bit for bit; 0: within 1e-5 of sum |products| */
        int e8m0;  /* 1: a scale byte at 0 (random ones set to 2^-20..2^0) */
    } k[] = {
        {LE_TYPE_Q4_0, {0, 0}, 1, 0, 0},
        {LE_TYPE_Q8_0, {0, 0}, 1, 0, 0},
        {LE_TYPE_Q4_K, {0, 2}, 2, 1, 0},
        {LE_TYPE_Q6_K, {208, 0}, 1, 1, 0},
        {LE_TYPE_Q5_K, {0, 2}, 2, 1, 0},
        {LE_TYPE_MXFP4, {0, 0}, 0, 0, 1},
    };
    float *dx = malloc(N * sizeof(float)), *dy = malloc(N * sizeof(float));
    int n_simd = 0;
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *qx = malloc(N * 4), *qy = malloc(N * 4);
    for (size_t c = 0; c < sizeof(k) / sizeof(k[0]); c++) {
        const struct le_type_traits *tt = le_type_get(k[c].t);
        const struct le_type_traits *rt = le_type_get_ref(k[c].t);
        T_CHECK(tt && rt);
        if (!tt || !rt)
            continue;
        n_simd += tt->vec_dot != rt->vec_dot;
        const struct le_type_traits *vt = le_type_get_ref(rt->vec_dot_type);
        int mismatches = 0;
        for (int rep = 0; rep < 40; rep++) {
            int n = (rep % 4 + 1) * 256 * (rep % 3 + 1); /* 256 .. 3072 */
            if (rt->blck_size == 32 && rep % 4 == 3)
                n += 32; /* an odd block count: the kernels' tail */
            fill(y, n, rep % 5 == 0 ? 100.0f : 1.0f);
            vt->from_float(y, qy, n);
            if (rep % 2 == 0) {
                fill(x, n, 1.0f);
                rt->from_float(x, qx, n);
            } else {
                size_t nb = (size_t)n / (size_t)rt->blck_size;
                for (size_t i = 0; i < nb * rt->type_size; i++)
                    qx[i] = (uint8_t)(frand() * 128 + 128);
                for (size_t b = 0; k[c].e8m0 && b < nb; b++)
                    qx[b * rt->type_size] = (uint8_t)(108 + frand() * 10 + 10);
                for (size_t b = 0; b < nb; b++)
                    for (int f = 0; f < k[c].n_d; f++) {
                        uint16_t h = le_fp32_to_fp16(frand() * 0.01f);
                        uint8_t *p = qx + b * rt->type_size + k[c].d_off[f];
                        p[0] = (uint8_t)h;
                        p[1] = (uint8_t)(h >> 8);
                    }
            }
            float a = NAN, r = NAN;
            tt->vec_dot(n, &a, qx, qy);
            rt->vec_dot(n, &r, qx, qy);
            int bad;
            if (k[c].exact) {
                bad = memcmp(&a, &r, sizeof(float)) != 0;
            } else {
                rt->to_float(qx, dx, n);
                vt->to_float(qy, dy, n);
                double mag = 0;
                for (int i = 0; i < n; i++)
                    mag += fabs((double)dx[i] * dy[i]);
                bad = !(fabs((double)a - r) <= 1e-5 * mag);
            }
            if (bad) {
                fprintf(stderr, "%s n=%d rep %d: simd %.9g ref %.9g\n",
                        rt->name, n, rep, a, r);
                mismatches++;
            }
        }
        T_EQ_INT(mismatches, 0);
    }

    /* F16: dequantisation of every half is identical; the dot product is
     * identical for values of normal magnitude (the double sum is exact)
     * and within 1e-6 relative otherwise. */
    const struct le_type_traits *ht = le_type_get(LE_TYPE_F16);
    const struct le_type_traits *hr = le_type_get_ref(LE_TYPE_F16);
    n_simd += (ht->vec_dot != hr->vec_dot) + (ht->to_float != hr->to_float);
    uint16_t *h = malloc(65536 * 2);
    float *fa = malloc(65536 * sizeof(float)), *fr = malloc(65536 * 4);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    ht->to_float(h, fa, 65536);
    hr->to_float(h, fr, 65536);
    int conv_bad = 0;
    for (uint32_t i = 0; i < 65536; i++)
        if (isnan(fr[i]) ? !isnan(fa[i]) : memcmp(&fa[i], &fr[i], 4) != 0)
            conv_bad++;
    T_EQ_INT(conv_bad, 0);
    int dot_bad = 0, dot_far = 0;
    uint16_t *hx = malloc(N * 2), *hy = malloc(N * 2);
    for (int rep = 0; rep < 60; rep++) {
        int n = 1 + (rep * 397) % N; /* odd lengths: the scalar tail */
        for (int i = 0; i < n; i++) {
            if (rep % 2 == 0) { /* normal magnitudes */
                hx[i] = le_fp32_to_fp16(frand() * 4);
                hy[i] = le_fp32_to_fp16(frand() * 4);
                if ((hx[i] & 0x7c00) == 0)
                    hx[i] = 0x3c00;
                if ((hy[i] & 0x7c00) == 0)
                    hy[i] = 0xbc00;
            } else { /* any finite half */
                do
                    hx[i] = (uint16_t)(frand() * 32768 + 32768);
                while ((hx[i] & 0x7c00) == 0x7c00);
                do
                    hy[i] = (uint16_t)(frand() * 32768 + 32768);
                while ((hy[i] & 0x7c00) == 0x7c00);
            }
        }
        float a, r;
        ht->vec_dot(n, &a, hx, hy);
        hr->vec_dot(n, &r, hx, hy);
        if (rep % 2 == 0 && memcmp(&a, &r, 4) != 0)
            dot_bad++;
        double mag = 0;
        for (int i = 0; i < n; i++)
            mag += fabs((double)le_fp16_to_fp32(hx[i]) *
                        le_fp16_to_fp32(hy[i]));
        if (fabs((double)a - r) > 1e-6 * mag)
            dot_far++;
    }
    T_EQ_INT(dot_bad, 0);
    T_EQ_INT(dot_far, 0);

    /* F32: the same exact double products summed in another order; the
     * float result within 1e-6 of sum |x_i y_i| (and nearly always the
     * same float: at most a few ties in 60 runs). */
    const struct le_type_traits *ft = le_type_get(LE_TYPE_F32);
    const struct le_type_traits *fr32 = le_type_get_ref(LE_TYPE_F32);
    n_simd += ft->vec_dot != fr32->vec_dot;
    int f32_far = 0, f32_diff = 0;
    for (int rep = 0; rep < 60; rep++) {
        int n = 1 + (rep * 397) % N; /* odd lengths: the scalar tail */
        fill(x, n, rep % 3 == 0 ? 1000.0f : 1.0f);
        fill(y, n, 1.0f);
        float a, r;
        ft->vec_dot(n, &a, x, y);
        fr32->vec_dot(n, &r, x, y);
        double mag = 0;
        for (int i = 0; i < n; i++)
            mag += fabs((double)x[i] * y[i]);
        f32_far += !(fabs((double)a - r) <= 1e-6 * mag);
        f32_diff += memcmp(&a, &r, 4) != 0;
    }
    T_EQ_INT(f32_far, 0);
    T_CHECK(f32_diff <= 3);
    free(h);
    free(fa);
    free(fr);
    free(hx);
    free(hy);
    fprintf(stderr, "  (%d SIMD kernels active on this CPU)\n", n_simd);
    free(dx);
    free(dy);
    free(x);
    free(y);
    free(qx);
    free(qy);
}

/* ---- pinned layouts: blocks built by hand byte by byte ---- */

static void
test_layout_q4_0(void)
{
    uint8_t b[18];
    b[0] = 0x00, b[1] = 0x3c; /* d = 1.0 (fp16 little-endian) */
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    le_type_get(LE_TYPE_Q4_0)->to_float(b, y, 32);
    for (int j = 0; j < 16; j++) {
        T_NEAR(y[j], j - 8, 0);
        T_NEAR(y[j + 16], (15 - j) - 8, 0);
    }
}

/* MXFP4: value = le_mxfp4_values[code] x 2^(e - 128); every code, and
 * the scale bytes' extremes (a subnormal, 2^127) */
static void
test_layout_mxfp4(void)
{
    static const float e2m1[16] = {0,  0.5f,  1,  1.5f,  2,  3,  4,  6,
                                   -0.f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    uint8_t b[17];
    float y[32];
    const struct le_type_traits *tt = le_type_get(LE_TYPE_MXFP4);
    b[0] = 127 + 3; /* E8M0 2^3 */
    for (int j = 0; j < 16; j++)
        b[1 + j] = (uint8_t)(j | ((15 - j) << 4));
    tt->to_float(b, y, 32);
    for (int j = 0; j < 16; j++) {
        T_NEAR(y[j], e2m1[j] * 8, 0);
        T_NEAR(y[j + 16], e2m1[15 - j] * 8, 0);
    }
    T_NEAR(le_e8m0_half(0), ldexp(1, -128), 0);
    T_NEAR(le_e8m0_half(1), ldexp(1, -127), 0);
    T_NEAR(le_e8m0_half(128), 1, 0);
    T_NEAR(le_e8m0_half(255), ldexp(1, 127), 0);
    /* the quantiser's round trip of values on the grid is exact */
    float x[32], back[32];
    for (int j = 0; j < 32; j++)
        x[j] = e2m1[(j * 5) % 16] * 0.25f;
    x[3] = 6 * 0.25f; /* the largest magnitude sets the scale */
    tt->from_float(x, b, 32);
    tt->to_float(b, back, 32);
    for (int j = 0; j < 32; j++)
        T_NEAR(back[j], x[j], 0);
    /* MXFP4 . Q8_0 = sum of value x q times both scales */
    uint8_t q[34] = {0x00, 0x38}; /* d = 0.5 */
    for (int j = 0; j < 32; j++)
        q[2 + j] = (uint8_t)(int8_t)(j * 7 - 100);
    float s, s_ref;
    double want = 0;
    for (int j = 0; j < 32; j++)
        want += back[j] * (j * 7 - 100) * 0.5;
    tt->vec_dot(32, &s, b, q);
    le_type_get_ref(LE_TYPE_MXFP4)->vec_dot(32, &s_ref, b, q);
    T_NEAR(s, want, 0);
    T_NEAR(s_ref, want, 0);
    /* a row whose values Q4_0 holds too (-8..6 times a power of two per
     * block): the same dot as Q4_0's, bit for bit, at every level */
    enum { NB = 24 };
    static const int8_t code_of[13] = {0, 1, 2, 3, 4, -1, 5, -1, 6,
                                       -1, -1, -1, 7}; /* |value| -> code */
    uint8_t mx[NB * 17], q4[NB * 18], act[NB * 34];
    float xa[NB * 32];
    for (int i = 0; i < NB * 32; i++)
        xa[i] = frand() * 3;
    le_type_get(LE_TYPE_Q8_0)->from_float(xa, act, NB * 32);
    for (int bl = 0; bl < NB; bl++) {
        int k = bl % 5 - 2; /* scales 2^-2 .. 2^2 */
        uint16_t h = le_fp32_to_fp16(ldexpf(1, k));
        q4[bl * 18] = (uint8_t)h;
        q4[bl * 18 + 1] = (uint8_t)(h >> 8);
        mx[bl * 17] = (uint8_t)(128 + k);
        for (int j = 0; j < 16; j++) {
            int v[2];
            for (int hf = 0; hf < 2; hf++) {
                static const int grid[12] = {0,  1,  -1, 2,  -2, 3,
                                             -3, 4,  -4, 6,  -6, -8};
                v[hf] = grid[(int)((frand() + 1) * 6) % 12];
            }
            q4[bl * 18 + 2 + j] = (uint8_t)((v[0] + 8) | (v[1] + 8) << 4);
            uint8_t c[2];
            for (int hf = 0; hf < 2; hf++)
                c[hf] = (uint8_t)(code_of[abs(v[hf])] | (v[hf] < 0) << 3);
            mx[bl * 17 + 1 + j] = (uint8_t)(c[0] | c[1] << 4);
        }
    }
    /* repacked only when fp16 holds every scale 2^(e - 128): e 104..143 */
    T_CHECK(le_pack_accepts(LE_TYPE_MXFP4, mx, sizeof(mx)));
    mx[17 * 3] = 103;
    T_CHECK(!le_pack_accepts(LE_TYPE_MXFP4, mx, sizeof(mx)));
    mx[17 * 3] = 144;
    T_CHECK(!le_pack_accepts(LE_TYPE_MXFP4, mx, sizeof(mx)));
    mx[17 * 3] = 143;
    T_CHECK(le_pack_accepts(LE_TYPE_MXFP4, mx, sizeof(mx)));
    T_CHECK(le_pack_accepts(LE_TYPE_Q4_0, mx, sizeof(mx)));
    mx[17 * 3] = (uint8_t)(128 + 3 % 5 - 2); /* as it was */
    for (int lvl = 0; lvl < 2; lvl++) {
        const struct le_type_traits *m4 =
            lvl ? le_type_get(LE_TYPE_MXFP4) : le_type_get_ref(LE_TYPE_MXFP4);
        const struct le_type_traits *t4 =
            lvl ? le_type_get(LE_TYPE_Q4_0) : le_type_get_ref(LE_TYPE_Q4_0);
        float a4, am;
        t4->vec_dot(NB * 32, &a4, q4, act);
        m4->vec_dot(NB * 32, &am, mx, act);
        T_CHECK(memcmp(&a4, &am, sizeof(float)) == 0);
    }
}

static void
test_layout_q8_0(void)
{
    uint8_t b[34];
    b[0] = 0x00, b[1] = 0x38; /* d = 0.5 */
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)(j * 7 - 100);
    float y[32];
    le_type_get(LE_TYPE_Q8_0)->to_float(b, y, 32);
    for (int j = 0; j < 32; j++)
        T_NEAR(y[j], (j * 7 - 100) * 0.5, 0);
    /* Q8_0 . Q8_0 = d^2 * sum q^2 */
    float s;
    le_type_get(LE_TYPE_Q8_0)->vec_dot(32, &s, b, b);
    double want = 0;
    for (int j = 0; j < 32; j++)
        want += (j * 7 - 100) * (j * 7 - 100) * 0.25;
    T_NEAR(s, want, 0);
}

static void
test_layout_q5_0(void)
{
    uint8_t b[22] = {0x00, 0x40}; /* d = 2.0 */
    /* qh = 0x80000001: value 0 and value 31 have their 5th bit set. */
    b[2] = 0x01, b[3] = 0, b[4] = 0, b[5] = 0x80;
    for (int j = 0; j < 16; j++)
        b[6 + j] = 0x53; /* low nibble 3 (values 0..15), high 5 (16..31) */
    float y[32];
    le_type_get(LE_TYPE_Q5_0)->to_float(b, y, 32);
    T_NEAR(y[0], ((3 | 16) - 16) * 2.0, 0);
    T_NEAR(y[1], (3 - 16) * 2.0, 0);
    T_NEAR(y[16], (5 - 16) * 2.0, 0);
    T_NEAR(y[31], ((5 | 16) - 16) * 2.0, 0);
}

static void
test_layout_q4_K(void)
{
    /* d = 1.0, dmin = 0.5; 12 scale bytes chosen so that the 8 (scale,
     * min) pairs are, by the GGUF packing (bytes 0-3: low 6 bits scale
     * 0-3; 4-7: low 6 bits min 0-3; 8-11: low nibble scale 4-7 and high
     * nibble min 4-7; top 2 bits of 0-3 / 4-7: high bits of scale / min
     * 4-7): sc = 1 2 3 4 1 3 21 7, mn = 5 6 7 8 2 4 6 8. */
    uint8_t b[144] = {0x00, 0x3c, 0x00, 0x38, 1,    2,    3 | 0x40,
                      4,    5,    6,    7,    8,    0x21, 0x43, 0x65,
                      0x87};
    for (int j = 0; j < 128; j++)
        b[16 + j] = 0x21; /* low nibble 1, high nibble 2 */
    static const int sc[8] = {1, 2, 3, 4, 1, 3, 21, 7};
    static const int mn[8] = {5, 6, 7, 8, 2, 4, 6, 8};
    float y[256];
    le_type_get(LE_TYPE_Q4_K)->to_float(b, y, 256);
    /* Values 64*jj + 0..31 use byte low nibbles and sub-block 2*jj;
     * 64*jj + 32..63 the high nibbles and sub-block 2*jj+1. */
    int bad = 0;
    for (int i = 0; i < 256; i++) {
        int s = i / 32, q = (i % 64) < 32 ? 1 : 2;
        if (y[i] != 1.0f * sc[s] * q - 0.5f * mn[s])
            bad++;
    }
    T_EQ_INT(bad, 0);
    T_NEAR(y[0], -1.5, 0);
    T_NEAR(y[32], 1.0, 0);
    T_NEAR(y[192], 18.0, 0);
    T_NEAR(y[255], 10.0, 0);
}

static void
test_layout_q6_K(void)
{
    /* ql[0..127], qh[128..191], scales[192..207], d[208..209] */
    uint8_t b[210] = {0};
    b[0] = 0x21;   /* ql[0]: value 0 low 1, value 64 low 2 */
    b[32] = 0x43;  /* ql[32]: value 32 low 3, value 96 low 4 */
    b[128] = 0xe4; /* qh[0]: 2-bit highs 0,1,2,3 for values 0,32,64,96 */
    b[128 + 32] = 0x03; /* qh[32]: value 128 high bits 3 */
    b[64] = 0x0f;       /* ql[64]: value 128 low 15 */
    for (int s = 0; s < 16; s++)
        b[192 + s] = (uint8_t)(int8_t)(s - 8);
    b[208] = 0x00, b[209] = 0x3c; /* d = 1.0 */
    float y[256];
    le_type_get(LE_TYPE_Q6_K)->to_float(b, y, 256);
    /* value = d * scale[i/16] * (q - 32) */
    T_NEAR(y[0], (0 - 8) * ((1 | 0 << 4) - 32), 0);
    T_NEAR(y[32], (2 - 8) * ((3 | 1 << 4) - 32), 0);
    T_NEAR(y[64], (4 - 8) * ((2 | 2 << 4) - 32), 0);
    T_NEAR(y[96], (6 - 8) * ((4 | 3 << 4) - 32), 0);
    T_NEAR(y[128], (8 - 8) * ((15 | 3 << 4) - 32), 0);
    T_NEAR(y[1], (0 - 8) * (0 - 32), 0);
    T_NEAR(y[255], (15 - 8) * (0 - 32), 0);
    b[192 + 8] = 5;
    le_type_get(LE_TYPE_Q6_K)->to_float(b, y, 256);
    T_NEAR(y[128], 5 * ((15 | 3 << 4) - 32), 0);
}

static void
test_layout_q3_K(void)
{
    /* hmask[0..31], qs[32..95], scales[96..107], d[108..109] */
    uint8_t b[110] = {0};
    b[0] = 0x01;  /* hmask[0] bit 0: value 0 has its high bit (no -4) */
    b[32] = 0x0b; /* qs[0]: value 0 low 3, value 32 low 2 (shift 2) */
    /* scale 0 = 33 (-> +1): low nibble 1 in byte 0, high bits 2 (10b) in
     * byte 8 bits 0-1; scale 2 = 30 (-> -2): low nibble 14 in byte 2, high
     * bits 1 in byte 10. */
    b[96 + 0] = 0x01;
    b[96 + 8] = 0x02;
    b[96 + 2] = 0x0e;
    b[96 + 10] = 0x01;
    b[108] = 0x00, b[109] = 0x40; /* d = 2 */
    float y[256];
    le_type_get(LE_TYPE_Q3_K)->to_float(b, y, 256);
    T_NEAR(y[0], 2.0 * 1 * 3, 0);         /* q = 3, high bit set */
    T_NEAR(y[1], 2.0 * 1 * (0 - 4), 0);   /* q = 0, high bit clear */
    T_NEAR(y[32], 2.0 * -2 * (2 - 4), 0); /* sub-block 2 */
    T_NEAR(y[16], 2.0 * (0 - 32) * -4, 0);  /* scale 1 = 0 -> -32 */
}

static void
test_layout_q2_K(void)
{
    /* scales[0..15], qs[16..79], d[80..81], dmin[82..83] */
    uint8_t b[84] = {0};
    b[0] = 0x32;  /* sub-block 0: scale 2, min 3 */
    b[2] = 0x15;  /* sub-block 2 (values 32..47): scale 5, min 1 */
    b[16] = 0x0d; /* qs[0]: value 0 = 1, value 32 = 3 */
    b[80] = 0x00, b[81] = 0x3c; /* d = 1 */
    b[82] = 0x00, b[83] = 0x38; /* dmin = 0.5 */
    float y[256];
    le_type_get(LE_TYPE_Q2_K)->to_float(b, y, 256);
    T_NEAR(y[0], 2 * 1 - 0.5 * 3, 0);
    T_NEAR(y[1], 0 - 0.5 * 3, 0);
    T_NEAR(y[32], 5 * 3 - 0.5 * 1, 0);
}

static void
test_layout_q5_K(void)
{
    /* d, dmin, 12 scale bytes as in the Q4_K pin, qh[32], qs[128] */
    uint8_t b[176] = {0x00, 0x3c, 0x00, 0x38, 1,    2,    3 | 0x40,
                      4,    5,    6,    7,    8,    0x21, 0x43, 0x65,
                      0x87};
    b[16 + 0] = 0x01; /* qh[0] bit 0: value 0 gets +16 */
    b[16 + 1] = 0x02; /* qh[1] bit 1: value 32 + 1 gets +16 */
    b[16 + 2] = 0x40; /* qh[2] bit 6: value 192 + 2 gets +16 */
    for (int j = 0; j < 128; j++)
        b[48 + j] = 0x21;
    static const int sc[8] = {1, 2, 3, 4, 1, 3, 21, 7};
    static const int mn[8] = {5, 6, 7, 8, 2, 4, 6, 8};
    float y[256];
    le_type_get(LE_TYPE_Q5_K)->to_float(b, y, 256);
    int bad = 0;
    for (int i = 0; i < 256; i++) {
        int s = i / 32, q = (i % 64) < 32 ? 1 : 2;
        if (i == 0 || i == 33 || i == 194)
            q += 16;
        if (y[i] != 1.0f * sc[s] * q - 0.5f * mn[s])
            bad++;
    }
    T_EQ_INT(bad, 0);
    T_NEAR(y[0], 17 * 1 - 2.5, 0);
    T_NEAR(y[194], 21 * 17 - 3.0, 0);
}

static void
test_layout_q4_1_q5_1(void)
{
    uint8_t b[20] = {0x00, 0x40, 0x00, 0xbc}; /* d = 2, m = -1 */
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(j | (3 << 4));
    float y[32];
    le_type_get(LE_TYPE_Q4_1)->to_float(b, y, 32);
    for (int j = 0; j < 16; j++) {
        T_NEAR(y[j], j * 2.0 - 1.0, 0);
        T_NEAR(y[j + 16], 3 * 2.0 - 1.0, 0);
    }
    /* Q5_1: d, m, qh[4] (bit 31: value 31 gets +16), qs[16] */
    uint8_t c[24] = {0x00, 0x3c, 0x00, 0x40, 0, 0, 0, 0x80};
    for (int j = 0; j < 16; j++)
        c[8 + j] = 0xf1;
    le_type_get(LE_TYPE_Q5_1)->to_float(c, y, 32);
    T_NEAR(y[0], 1 + 2.0, 0);
    T_NEAR(y[16], 15 + 2.0, 0);
    T_NEAR(y[31], 31 + 2.0, 0);
}


/* Repacked kernels (repack.c) at every ISA level this CPU runs, against
 * the plain C vec_dot of quants.c row by row: bit for bit (same integer
 * sums, same float steps).  Row lengths are those the models use (n_embd
 * 64..4096, n_ff 5632, 11008, 14336; K-quants multiples of 256), weights
 * both quantised data and random bytes with finite scales, 1..9 tokens,
 * full and partial groups; nothing past nr rows is written. */
/* nr random rows of type t (n values, le_row_size bytes each) at w:
 * every other row (by r + rep) quantised from floats, the others raw
 * random bytes with random fp16 scales at d_off[0..n_d) of each block.
 * x: scratch of n floats. */
static void
rand_weights(enum le_type t, uint8_t *w, int nr, int n, int rep,
             const size_t *d_off, int n_d, float *x)
{
    const struct le_type_traits *rt = le_type_get_ref(t);
    size_t wr = le_row_size(t, n);
    size_t nb = (size_t)n / (size_t)rt->blck_size;
    for (int r = 0; r < nr; r++) {
        uint8_t *row = w + (size_t)r * wr;
        if ((r + rep) % 2 == 0) {
            fill(x, n, 1.0f);
            rt->from_float(x, row, n);
            continue;
        }
        for (size_t i = 0; i < wr; i++)
            row[i] = (uint8_t)(frand() * 128 + 128);
        /* F16 / BF16: any finite bit pattern (inf - inf would make a NaN
         * whose sign depends on the order the compiler picked) */
        uint16_t *hv = (uint16_t *)row;
        uint16_t em = t == LE_TYPE_F16 ? 0x7c00 : 0x7f80;
        if (rt->blck_size == 1)
            for (int i = 0; i < n; i++)
                if ((hv[i] & em) == em)
                    hv[i] &= (uint16_t)~0x4000;
        for (size_t b = 0; b < nb; b++)
            for (int f = 0; f < n_d; f++) {
                uint16_t h = le_fp32_to_fp16(frand() * 0.01f);
                uint8_t *q = row + b * rt->type_size + d_off[f];
                q[0] = (uint8_t)h;
                q[1] = (uint8_t)(h >> 8);
            }
        /* MXFP4: scales 2^-24 .. 2^15, the range it is repacked in */
        for (size_t b = 0; t == LE_TYPE_MXFP4 && b < nb; b++)
            row[b * rt->type_size] = (uint8_t)(104 + (frand() + 1) * 19.9);
    }
}

static void
test_packed(void)
{
    static const int lens[] = {64,   128,  256,  512,   768,  1024,
                               2048, 4096, 5632, 11008, 14336};
    static const struct {
        enum le_type t;
        size_t d_off[2];
        int n_d;
    } k[] = {
        {LE_TYPE_Q4_0, {0, 0}, 1},
        {LE_TYPE_Q8_0, {0, 0}, 1},
        {LE_TYPE_MXFP4, {0, 0}, 0},
        {LE_TYPE_Q4_K, {0, 2}, 2},
        {LE_TYPE_Q5_K, {0, 2}, 2},
        {LE_TYPE_Q6_K, {208, 0}, 1},
        {LE_TYPE_F16, {0, 0}, 0},
        {LE_TYPE_BF16, {0, 0}, 0},
    };
    int n_kernels = 0, n_plans = 0;
    float *x = malloc(14336 * sizeof(float));
    for (size_t c = 0; c < sizeof(k) / sizeof(k[0]); c++) {
        const struct le_type_traits *rt = le_type_get_ref(k[c].t);
        const struct le_type_traits *vt = le_type_get_ref(rt->vec_dot_type);
        for (int isa = LE_ISA_NONE; isa <= LE_ISA_AVX512; isa++) {
            struct le_pack_traits pt;
            if (!le_pack_traits_at(k[c].t, (enum le_isa)isa, &pt)) {
                T_CHECK(!le_isa_supported((enum le_isa)isa));
                continue;
            }
            n_kernels++;
            int bad = 0, rep = 0;
            for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
                int n = lens[li];
                if (n % rt->blck_size)
                    continue;
                rep++;
                int nr = rep % 3 == 0 ? 1 + rep % 15 : 16;
                int ntok = 1 + (rep * 5) % 9;
                size_t wr = le_row_size(k[c].t, n);
                size_t ar = le_row_size(rt->vec_dot_type, n);
                size_t pr = le_pack_prep_size(rt->vec_dot_type, n);
                uint8_t *w = malloc(wr * 16);
                uint8_t *packed = aligned_alloc(64, le_pack_group_bytes(&pt, n));
                uint8_t *aq = malloc(ar * (size_t)ntok);
                uint8_t *ap = malloc(pr * (size_t)ntok);
                float *out = malloc((size_t)ntok * 20 * sizeof(float));
                rand_weights(k[c].t, w, nr, n, rep, k[c].d_off, k[c].n_d, x);
                for (int t = 0; t < ntok; t++) {
                    fill(x, n, t % 3 ? 1.0f : 30.0f);
                    vt->from_float(x, aq + (size_t)t * ar, n);
                    le_pack_prep(rt->vec_dot_type, aq + (size_t)t * ar, n,
                                 ap + (size_t)t * pr);
                }
                le_pack_rows(&pt, w, wr, nr, n, packed);
                for (int i = 0; i < ntok * 20; i++)
                    out[i] = -12345.0f;
                struct le_pack_act act = {aq, ar, ap, pr, NULL};
                pt.gemm(n, packed, &act, ntok, out, 20, nr);
#if defined(__x86_64__)
                /* the prefetch plan not chosen here: the same floats */
                static const le_gemm_fn plans[][2] = {
                    {le_gemm_q4_K_avx512, le_gemm_q4_K_avx512_l2},
                    {le_gemm_q5_K_avx512, le_gemm_q5_K_avx512_l2},
                    {le_gemm_q6_K_avx512, le_gemm_q6_K_avx512_l2},
                    {le_gemm_q4_K_avx2, le_gemm_q4_K_avx2_l2},
                    {le_gemm_q5_K_avx2, le_gemm_q5_K_avx2_l2},
                };
                le_gemm_fn other = NULL;
                for (size_t pi = 0; pi < sizeof(plans) / sizeof(plans[0]);
                     pi++)
                    for (int h = 0; h < 2; h++)
                        if (pt.gemm == plans[pi][h])
                            other = plans[pi][1 - h];
                if (other) {
                    float *o2 = malloc((size_t)ntok * 20 * sizeof(float));
                    for (int i = 0; i < ntok * 20; i++)
                        o2[i] = -12345.0f;
                    other(n, packed, &act, ntok, o2, 20, nr);
                    if (memcmp(o2, out, (size_t)ntok * 20 * sizeof(float)))
                        bad++;
                    n_plans++;
                    free(o2);
                }
#endif
                for (int t = 0; t < ntok; t++)
                    for (int r = 0; r < 20; r++) {
                        float got = out[t * 20 + r], want = -12345.0f;
                        if (r < nr)
                            rt->vec_dot(n, &want, w + (size_t)r * wr,
                                        aq + (size_t)t * ar);
                        if (memcmp(&got, &want, 4) != 0) {
                            if (bad < 5)
                                fprintf(stderr,
                                        "%s %s n=%d nr=%d tok %d row %d: "
                                        "%.9g want %.9g\n",
                                        rt->name,
                                        le_isa_name((enum le_isa)isa), n,
                                        nr, t, r, got, want);
                            bad++;
                        }
                    }
                free(w);
                free(packed);
                free(aq);
                free(ap);
                free(out);
            }
            T_EQ_INT(bad, 0);
        }
    }
    fprintf(stderr, "  (%d repacked kernels on this CPU, up to %s)\n",
            n_kernels, le_isa_name(le_isa_detected()));
    T_CHECK(n_kernels >= 7);
    /* AVX-512 (and AVX2): both prefetch plans of Q4_K, Q5_K and Q6_K (Q4_K
     * and Q5_K) held against each other */
    if (le_isa_supported(LE_ISA_AVX512))
        T_CHECK(n_plans > 0);
    free(x);
}

/* The decode kernels (le_gemv_at: quants_avx512.c, quants_avx2.c and
 * their plain C twins): for Q4_0, Q8_0, Q4_K, Q5_K, Q6_K and MXFP4, every
 * row length
 * from one block to 14336
 * (the models': 64, 2048, 5632, 11008...), runs of 1-3 groups with a
 * partial last group, random blocks (quantised rows and raw bytes with
 * random scales) and each token count N 1..8: the floats are bit for bit
 * those of the twin, of the same kernel run on each token alone (N = 1:
 * a token's result does not depend on its batch mates), and of the plain
 * C vec_dot of the row; rows past the last group's are not written. */
static void
test_gemv(void)
{
    static const int lens[] = {32,   64,   96,   128,  256,   512,  768,
                               1024, 2048, 3072, 4096, 5632, 11008, 14336};
    static const enum le_type types[] = {LE_TYPE_Q4_0, LE_TYPE_Q8_0,
                                         LE_TYPE_Q4_K, LE_TYPE_Q5_K,
                                         LE_TYPE_Q6_K, LE_TYPE_MXFP4};
    /* rand_weights' scale offsets of each type (as test_packed) */
    static const size_t d_offs[][2] = {
        {0, 0}, {0, 0}, {0, 2}, {0, 2}, {208, 0}, {0, 0}};
    static const int n_ds[] = {1, 1, 2, 2, 1, 0};
    float *x = malloc(14336 * sizeof(float));
    int n_kernels = 0, bad = 0, rep = 0;
    for (size_t c = 0; c < sizeof(types) / sizeof(types[0]); c++) {
        enum le_type wt = types[c];
        const struct le_type_traits *rt = le_type_get_ref(wt);
        const struct le_type_traits *vt = le_type_get_ref(rt->vec_dot_type);
        struct le_pack_traits pt;
        T_CHECK(le_pack_traits_at(wt, LE_ISA_NONE, &pt));
        T_CHECK(le_gemv_at(wt, LE_ISA_NONE) != NULL);
        /* every level, each with both prefetch plans where they differ */
        for (int v = 2 * LE_ISA_NONE; v < 2 * (LE_ISA_AVX512 + 1); v++) {
            int isa = v / 2, l1 = v % 2;
            le_gemv_fn gv = le_gemv_at_pf(wt, (enum le_isa)isa, l1);
            if (!gv || (l1 && gv == le_gemv_at_pf(wt, (enum le_isa)isa, 0)))
                continue;

            T_CHECK(le_isa_supported((enum le_isa)isa));
            n_kernels++;
            for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
                int n = lens[li];
                if (n % rt->blck_size)
                    continue;
                rep++;
                int ng = 1 + rep % 3, nr_last = rep % 2 ? 16 : 1 + rep % 15;
                int rows = (ng - 1) * 16 + nr_last, ys = ng * 16 + 4;
                size_t wr = le_row_size(wt, n);
                size_t ar = le_row_size(rt->vec_dot_type, n);
                size_t pr = le_pack_prep_size(rt->vec_dot_type, n);
                size_t gb = le_pack_group_bytes(&pt, n);
                uint8_t *w = malloc(wr * (size_t)rows);
                uint8_t *packed = aligned_alloc(64, gb * (size_t)ng);
                uint8_t *aq = malloc(ar * 8);
                uint8_t *ap = malloc(pr * 8);
                float *out = malloc((size_t)8 * ys * sizeof(float));
                float *ref = malloc((size_t)8 * ys * sizeof(float));
                float *one = malloc((size_t)ys * sizeof(float));
                rand_weights(wt, w, rows, n, rep, d_offs[c], n_ds[c], x);
                for (int g = 0; g < ng; g++)
                    le_pack_rows(&pt, w + (size_t)g * 16 * wr, wr,
                                 g + 1 == ng ? nr_last : 16, n,
                                 packed + (size_t)g * gb);
                for (int t = 0; t < 8; t++) {
                    fill(x, n, t % 3 ? 1.0f : 30.0f);
                    vt->from_float(x, aq + (size_t)t * ar, n);
                    le_pack_prep(rt->vec_dot_type, aq + (size_t)t * ar, n,
                                 ap + (size_t)t * pr);
                }
                for (int nt = 1; nt <= 8; nt++) {
                    struct le_pack_act act = {aq, ar, ap, pr, NULL};
                    for (int i = 0; i < 8 * ys; i++)
                        out[i] = ref[i] = -12345.0f;
                    gv(n, packed, gb, ng, &act, nt, out, (size_t)ys, nr_last);
                    le_gemv_at(wt, LE_ISA_NONE)(n, packed, gb, ng, &act, nt,
                                                ref, (size_t)ys, nr_last);
                    for (int t = 0; t < nt; t++) {
                        struct le_pack_act a1 = {aq + (size_t)t * ar, ar,
                                                 ap + (size_t)t * pr, pr,
                                                 NULL};
                        for (int i = 0; i < ys; i++)
                            one[i] = -12345.0f;
                        gv(n, packed, gb, ng, &a1, 1, one, (size_t)ys,
                           nr_last);
                        for (int r = 0; r < ys; r++) {
                            float got = out[t * ys + r], want = -12345.0f;
                            if (r < rows)
                                rt->vec_dot(n, &want, w + (size_t)r * wr,
                                            aq + (size_t)t * ar);
                            if (memcmp(&got, &want, 4) != 0 ||
                                memcmp(&got, &ref[t * ys + r], 4) != 0 ||
                                memcmp(&got, &one[r], 4) != 0) {
                                if (bad < 5)
                                    fprintf(stderr,
                                            "%s %s n=%d ng=%d nr=%d N=%d "
                                            "tok %d row %d: %.9g twin %.9g "
                                            "alone %.9g vec_dot %.9g\n",
                                            rt->name,
                                            le_isa_name((enum le_isa)isa), n,
                                            ng, nr_last, nt, t, r, got,
                                            ref[t * ys + r], one[r], want);
                                bad++;
                            }
                        }
                    }
                    for (int i = nt * ys; i < 8 * ys; i++)
                        if (out[i] != -12345.0f)
                            bad++;
                }
                free(w);
                free(packed);
                free(aq);
                free(ap);
                free(out);
                free(ref);
                free(one);
            }
        }
    }
    T_EQ_INT(bad, 0);
    fprintf(stderr, "  (%d decode kernels on this CPU)\n", n_kernels);
    T_CHECK(n_kernels >= 5);
    /* AVX-512: the two prefetch plans of Q4_0, Q8_0, Q4_K, Q5_K and
     * MXFP4 at AVX-512 and at AVX2 and of Q6_K at AVX-512, AVX2's one
     * Q6_K, beside the 6 twins; with AVX-VNNI (Intel's since Alder Lake
     * and Sapphire Rapids, not Zen 4) its level serves AVX2's MXFP4 and
     * K-quant kernels again (7 more) */
    if (le_isa_supported(LE_ISA_AVX512))
        T_CHECK(n_kernels ==
                29 + (le_isa_supported(LE_ISA_AVXVNNI) ? 7 : 0));
    /* le_gemv_at serves the plan le_gemv_l1_prefetch names: l1, but l2
     * for the AVX-512 Q8_0 on AMD, unless LLMUX_DEC_PREFETCH names one
     * for all */
    for (int isa = LE_ISA_NONE; isa <= LE_ISA_AVX512; isa++)
        for (size_t c = 0; c < sizeof(types) / sizeof(types[0]); c++)
            T_CHECK(le_gemv_at(types[c], (enum le_isa)isa) ==
                    le_gemv_at_pf(types[c], (enum le_isa)isa,
                                  le_gemv_l1_prefetch(types[c],
                                                      (enum le_isa)isa)));
    const char *env = getenv("LLMUX_DEC_PREFETCH");
    int all = env && !strcmp(env, "l1") ? 1 : env && !strcmp(env, "l2") ? 0 : -1;
    if (all >= 0) {
        T_EQ_INT(le_gemv_l1_prefetch(LE_TYPE_Q4_0, LE_ISA_AVX512), all);
        T_EQ_INT(le_gemv_l1_prefetch(LE_TYPE_Q8_0, LE_ISA_AVX2), all);
    } else {
        T_EQ_INT(le_gemv_l1_prefetch(LE_TYPE_Q4_0, LE_ISA_AVX512), 1);
        T_EQ_INT(le_gemv_l1_prefetch(LE_TYPE_Q8_0, LE_ISA_AVX2), 1);
    }
    free(x);
}

/* The SIMD activation quantisers (Q8_0, Q8_K) at each level this CPU
 * runs write exactly the plain C ones' bytes: on random data at several
 * scales, on values that land exactly halfway between two integers (the
 * rounding rule: roundf away from zero for Q8_0, rintf to even for Q8_K),
 * with a NaN, infinities and zero blocks, and with +a and -a both the
 * largest magnitude (the first one sets Q8_K's sign). */
static void
test_quantize_simd(void)
{
    typedef void (*qfn)(const float *, void *, int64_t);
    struct {
        enum le_type t;
        qfn f;
        enum le_isa isa;
    } k[] = {
#if defined(__x86_64__)
        {LE_TYPE_Q8_0, le_quantize_q8_0_avx2, LE_ISA_AVX2},
        {LE_TYPE_Q8_K, le_quantize_q8_K_avx2, LE_ISA_AVX2},
        {LE_TYPE_Q8_0, le_quantize_q8_0_avx512, LE_ISA_AVX512},
        {LE_TYPE_Q8_K, le_quantize_q8_K_avx512, LE_ISA_AVX512},
#endif
        {LE_TYPE_Q8_0, NULL, LE_ISA_NONE},
    };
    enum { NQ = 2048 };
    float *x = malloc(NQ * sizeof(float));
    uint8_t *a = malloc(NQ * 2), *b = malloc(NQ * 2);
    int n_run = 0;
    for (size_t c = 0; c < sizeof(k) / sizeof(k[0]); c++) {
        if (!k[c].f || !le_isa_supported(k[c].isa))
            continue;
        n_run++;
        const struct le_type_traits *rt = le_type_get_ref(k[c].t);
        size_t row = le_row_size(k[c].t, NQ);
        int bad = 0;
        for (int rep = 0; rep < 24; rep++) {
            fill(x, NQ, rep % 3 == 0 ? 1e-3f : rep % 3 == 1 ? 1.0f : 3e4f);
            if (rep % 4 == 1) /* exact halves: the block max is 127 */
                for (int i = 0; i < NQ; i++)
                    x[i] = i % 32 == 0 ? (k[c].t == LE_TYPE_Q8_K ? -127.0f
                                                                 : 127.0f)
                                       : (float)((i * 7) % 200 - 100) + 0.5f;
            if (rep % 4 == 2) { /* NaN, +-inf, a zero block, +-a ties */
                x[3] = NAN;
                x[300] = INFINITY;
                x[700] = -INFINITY;
                for (int i = 1024; i < 1280; i++)
                    x[i] = 0;
                x[1300] = 2.5f;
                x[1301] = -2.5f;
                x[1600] = -2.5f;
                x[1601] = 2.5f;
            }
            memset(a, 0xaa, row);
            memset(b, 0x55, row);
            rt->from_float(x, a, NQ);
            k[c].f(x, b, NQ);
            if (memcmp(a, b, row) != 0) {
                if (bad < 3)
                    fprintf(stderr, "%s %s rep %d: bytes differ\n", rt->name,
                            le_isa_name(k[c].isa), rep);
                bad++;
            }
        }
        T_EQ_INT(bad, 0);
    }
    fprintf(stderr, "  (%d SIMD quantisers on this CPU)\n", n_run);
    free(x);
    free(a);
    free(b);
}

int
main(void)
{
    T_RUN(test_types_table);
    T_RUN(test_fp16);
    T_RUN(test_roundtrip_and_dot);
    T_RUN(test_simd_vs_ref);
    T_RUN(test_vec_dot_multi);
    T_RUN(test_packed);
    T_RUN(test_gemv);
    T_RUN(test_quantize_simd);
    T_RUN(test_nonfinite);
    T_RUN(test_layout_q4_0);
    T_RUN(test_layout_q8_0);
    T_RUN(test_layout_mxfp4);
    T_RUN(test_layout_q5_0);
    T_RUN(test_layout_q4_K);
    T_RUN(test_layout_q6_K);
    T_RUN(test_layout_q3_K);
    T_RUN(test_layout_q2_K);
    T_RUN(test_layout_q5_K);
    T_RUN(test_layout_q4_1_q5_1);
    return T_END();
}
