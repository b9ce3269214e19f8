/*
 * act_avx2.c: the AVX2 twins of act.c's h = silu(h) * h2 and
 * x = e^(x - m) (the contract, e^x included, is there): 8 floats at a
 * time, e^x evaluated as two vectors of 4 doubles with the twin's
 * operations in its order (separate multiplies and adds).  AVX2 has no
 * double to int64 conversion, so k comes from the bits of x log2(e) +
 * 1.5 * 2^52 less those of 1.5 * 2^52, the same integer the twin's cast
 * gives.  Built with the AVX2 flags (Makefile: *_avx2.c), called only
 * when le_isa_active() is LE_ISA_AVX2; tests/test_act.c holds it against
 * the twin bit for bit.
 */
#if defined(__x86_64__)

#include "le_int.h"

#include <immintrin.h>

static inline __m256d
expd4(__m256d x)
{
    const __m256d shift = _mm256_set1_pd(6755399441055744.0);
    x = _mm256_max_pd(_mm256_set1_pd(-110.0), x);
    x = _mm256_min_pd(_mm256_set1_pd(100.0), x);
    __m256d ks = _mm256_add_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)), shift);
    __m256d kd = _mm256_sub_pd(ks, shift);
    __m256d r = _mm256_sub_pd(x, _mm256_mul_pd(kd, _mm256_set1_pd(0.6931471805599453)));
    __m256d p = _mm256_set1_pd(1.0 / 40320);
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(1.0 / 5040));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(1.0 / 720));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(1.0 / 120));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(1.0 / 24));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(1.0 / 6));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0.5));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(1.0));
    p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(1.0));
    __m256i k = _mm256_sub_epi64(_mm256_castpd_si256(ks), _mm256_castpd_si256(shift));
    __m256i e = _mm256_slli_epi64(_mm256_add_epi64(k, _mm256_set1_epi64x(1023)), 52);
    return _mm256_mul_pd(p, _mm256_castsi256_pd(e));
}

/* le_act_expf of 8 lanes (a NaN lane gives back that NaN). */
static inline __m256
exp8(__m256 x)
{
    __m128 lo = _mm256_cvtpd_ps(expd4(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
    __m128 hi = _mm256_cvtpd_ps(expd4(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
    __m256 e = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_blendv_ps(e, x, nan);
}

static inline __m256
silu8(__m256 x, __m256 y)
{
    __m256 e = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f))); /* C's -x */
    __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), e);
    return _mm256_mul_ps(_mm256_div_ps(x, d), y);
}

/* Lanes [0, n) of a tail, n < 8 (the others 0 on load, not stored). */
static inline __m256i
tail_mask(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void
le_silu_mul_avx2(float *h, const float *h2, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(h + i, silu8(_mm256_loadu_ps(h + i),
                                      _mm256_loadu_ps(h2 + i)));
    if (i < n) {
        __m256i m = tail_mask(n - i);
        __m256 r = silu8(_mm256_maskload_ps(h + i, m),
                         _mm256_maskload_ps(h2 + i, m));
        _mm256_maskstore_ps(h + i, m, r);
    }
}

void
le_exp_sub_avx2(float *x, int n, float m)
{
    __m256 mv = _mm256_set1_ps(m);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv)));
    if (i < n) {
        __m256i k = tail_mask(n - i);
        __m256 d = _mm256_sub_ps(_mm256_maskload_ps(x + i, k), mv);
        _mm256_maskstore_ps(x + i, k, exp8(d));
    }
}

#endif
