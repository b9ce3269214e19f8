/*
 * act_avx512.c: the AVX-512 twins of act.c's h = silu(h) * h2 and
 * x = e^(x - m) (the contract, e^x included, is there): 16 floats at a time, e^-x evaluated
 * as two vectors of 8 doubles with the twin's operations in its order
 * (separate multiplies and adds, no fused multiply-add), then the same
 * float divide and multiply.  Built with the AVX-512 flags (Makefile:
 * *_avx512.c), called only when le_isa_active() is LE_ISA_AVX512;
 * tests/test_act.c holds it against the twin bit for bit.
 */
#if defined(__x86_64__)

#include "le_int.h"

#include <immintrin.h>

static inline __m512d
expd8(__m512d x)
{
    const __m512d shift = _mm512_set1_pd(6755399441055744.0);
    x = _mm512_max_pd(_mm512_set1_pd(-110.0), x);
    x = _mm512_min_pd(_mm512_set1_pd(100.0), x);
    __m512d kd = _mm512_add_pd(_mm512_mul_pd(x, _mm512_set1_pd(1.4426950408889634)), shift);
    kd = _mm512_sub_pd(kd, shift);
    __m512d r = _mm512_sub_pd(x, _mm512_mul_pd(kd, _mm512_set1_pd(0.6931471805599453)));
    __m512d p = _mm512_set1_pd(1.0 / 40320);
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0 / 5040));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0 / 720));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0 / 120));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0 / 24));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0 / 6));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(0.5));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0));
    __m512i k = _mm512_cvtpd_epi64(kd); /* integral already: exact */
    __m512i e = _mm512_slli_epi64(_mm512_add_epi64(k, _mm512_set1_epi64(1023)), 52);
    return _mm512_mul_pd(p, _mm512_castsi512_pd(e));
}

/* le_act_expf of 16 lanes (a NaN lane gives back that NaN, as the twin
 * does). */
static inline __m512
exp16(__m512 x)
{
    __m256 lo = _mm512_cvtpd_ps(expd8(_mm512_cvtps_pd(_mm512_castps512_ps256(x))));
    __m256 hi = _mm512_cvtpd_ps(expd8(_mm512_cvtps_pd(
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))));
    __m512 e = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(e, nan, x);
}

/* 16 lanes of silu(x) * y */
static inline __m512
silu16(__m512 x, __m512 y)
{
    __m512 e = exp16(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f))); /* C's -x */
    __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
    return _mm512_mul_ps(_mm512_div_ps(x, d), y);
}

void
le_silu_mul_avx512(float *h, const float *h2, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(h + i, silu16(_mm512_loadu_ps(h + i),
                                       _mm512_loadu_ps(h2 + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 r = silu16(_mm512_maskz_loadu_ps(m, h + i),
                          _mm512_maskz_loadu_ps(m, h2 + i));
        _mm512_mask_storeu_ps(h + i, m, r);
    }
}

void
le_exp_sub_avx512(float *x, int n, float m)
{
    __m512 mv = _mm512_set1_ps(m);
    int i = 0;
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff
                                  : (__mmask16)((1u << (n - i)) - 1);
        __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv);
        _mm512_mask_storeu_ps(x + i, k, exp16(d));
    }
}

#endif
