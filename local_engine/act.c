/*
 * act.c: the SwiGLU activation of the feed-forward block, h = silu(h) * h2
 * with silu(x) = x / (1 + e^-x), and the softmax's x = e^(x - m) of the
 * attention, as plain C twins and the choice of their SIMD kernels
 * (act_avx512.c, act_avx2.c).
 *
 * e^x is our own (le_act_expf), not libm's expf, so that one definition
 * can be evaluated the same way a lane at a time and 8 lanes at a time:
 * x clamped to [-110, 100] (e^x rounds to 0 in float below -103.98 and to
 * infinity above 88.73, so the clamp changes no result), then in double
 *   k = round(x * log2(e)) (by adding and subtracting 1.5 * 2^52),
 *   r = x - k * ln2,  |r| <= 0.35,
 *   e^r by Horner's rule over the Taylor terms up to r^8 / 8!
 *       (truncation below 2.3e-10 relative, 0.004 of a float ulp),
 *   e^x = e^r * 2^k (2^k built from its exponent bits; k in [-159, 145]
 *       stays a normal double), rounded once to float;
 * separate multiplies and adds only (C11 without contraction here, plain
 * intrinsics there), so both give the same bits; a NaN is returned as is.
 * Against glibc's expf (correctly rounded but in rare cases) it differs by
 * at most one ulp, where the double result lies within 2^-30 of a float
 * midpoint.  Per token and layer the loop was 5632 libm calls, ~0.2 ms a
 * token of one thread on the 1B q4_0 slice (perf: tok_steps' silu), a
 * twentieth of a decode step.
 */
#include "le_int.h"

#include <string.h>

#define ACT_LOG2E 1.4426950408889634
#define ACT_LN2 0.6931471805599453
#define ACT_SHIFT 6755399441055744.0 /* 1.5 * 2^52 */

float
le_act_expf(float x)
{
    if (x != x)
        return x;
    double xd = x < -110.0f ? -110.0 : x > 100.0f ? 100.0 : (double)x;
    double kd = xd * ACT_LOG2E + ACT_SHIFT;
    kd = kd - ACT_SHIFT;
    double r = xd - kd * ACT_LN2;
    double p = 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t bits = (uint64_t)((int64_t)kd + 1023) << 52;
    double s;
    memcpy(&s, &bits, sizeof(s));
    return (float)(p * s);
}

void
le_silu_mul_ref(float *h, const float *h2, int n)
{
    for (int i = 0; i < n; i++) {
        float x = h[i];
        h[i] = x / (1.0f + le_act_expf(-x)) * h2[i];
    }
}

void
le_exp_sub_ref(float *x, int n, float m)
{
    for (int i = 0; i < n; i++)
        x[i] = le_act_expf(x[i] - m);
}

le_silu_mul_fn
le_silu_mul_get(void)
{
#if defined(__x86_64__)
    if (le_isa_active() >= LE_ISA_AVX512)
        return le_silu_mul_avx512;
    if (le_isa_active() >= LE_ISA_AVX2)
        return le_silu_mul_avx2;
#endif
    return le_silu_mul_ref;
}

le_exp_sub_fn
le_exp_sub_get(void)
{
#if defined(__x86_64__)
    if (le_isa_active() >= LE_ISA_AVX512)
        return le_exp_sub_avx512;
    if (le_isa_active() >= LE_ISA_AVX2)
        return le_exp_sub_avx2;
#endif
    return le_exp_sub_ref;
}
