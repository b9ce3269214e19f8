/*
 * attn_avx2.c: AVX2 twins of attn.c's attention loops (the contract is
 * there), the same steps as attn_avx512.c's in 8-value chunks.  Built
 * with the AVX2 flags (Makefile: *_avx2.c), called only when
 * le_isa_active() is LE_ISA_AVX2 or LE_ISA_AVXVNNI, for head sizes 64
 * and 128.
 *
 * scores: per position the head's chunks are converted, multiplied by
 * the query (exact in float) and summed in two double vectors, then
 * across lanes; the query of a 64-value head stays in 8 registers (a
 * 128-value one is read from the stack).  values: 64 output values in 8
 * registers across all positions (a 128-value head in two passes), each
 * chunk out + a * v with a separate multiply and add as the twin.
 */
#if defined(__x86_64__)

#include "le_int.h"

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

ALWAYS_INLINE __m256
h8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

ALWAYS_INLINE void
scores_n(const int nch, int n, const uint16_t *q, const uint8_t *k,
         size_t ks, float scale, float *sc)
{
    __m256 qf[16];
    UNROLL
    for (int c = 0; c < nch; c++)
        qf[c] = h8(q + 8 * c);
    for (int p = 0; p < n; p++) {
        const uint16_t *kr = (const uint16_t *)(k + (size_t)p * ks);
        __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
        UNROLL
        for (int c = 0; c < nch; c++) {
            __m256 pr = _mm256_mul_ps(qf[c], h8(kr + 8 * c));
            a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(pr)));
            a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(pr, 1)));
        }
        __m256d s = _mm256_add_pd(a0, a1);
        __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s),
                               _mm256_extractf128_pd(s, 1));
        double d = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
        sc[p] = (float)d * scale;
    }
}

void
le_attn_scores_f16_avx2(int hd, int n, const uint16_t *q, const uint8_t *k,
                        size_t ks, float scale, float *sc)
{
    if (hd == 64)
        scores_n(8, n, q, k, ks, scale, sc);
    else if (hd == 128)
        scores_n(16, n, q, k, ks, scale, sc);
    else /* le_attn_f16_get hands out 64 and 128 only */
        le_attn_scores_f16_ref(hd, n, q, k, ks, scale, sc);
}

/* 64 output values from i0 */
static void
values_64(int n, const float *w, float inv, const uint8_t *v, size_t vs,
          int i0, float *out)
{
    __m256 o[8];
    UNROLL
    for (int c = 0; c < 8; c++)
        o[c] = _mm256_setzero_ps();
    for (int p = 0; p < n; p++) {
        const uint16_t *vr = (const uint16_t *)(v + (size_t)p * vs) + i0;
        __m256 a = _mm256_set1_ps(w[p] * inv);
        UNROLL
        for (int c = 0; c < 8; c++)
            o[c] = _mm256_add_ps(o[c], _mm256_mul_ps(a, h8(vr + 8 * c)));
    }
    UNROLL
    for (int c = 0; c < 8; c++)
        _mm256_storeu_ps(out + i0 + 8 * c, o[c]);
}

void
le_attn_values_f16_avx2(int hd, int n, const float *w, float inv,
                        const uint8_t *v, size_t vs, float *out)
{
    if (hd != 64 && hd != 128) {
        le_attn_values_f16_ref(hd, n, w, inv, v, vs, out);
        return;
    }
    for (int i0 = 0; i0 < hd; i0 += 64)
        values_64(n, w, inv, v, vs, i0, out);
}

#endif
