/*
 * attn_avx512.c: AVX-512 twins of attn.c's attention loops (the contract
 * is there).  Built with the AVX-512 flags (Makefile: *_avx512.c), called
 * only when le_isa_active() is LE_ISA_AVX512, for head sizes 64 and 128
 * (the query or output head in 4 or 8 registers).
 *
 * scores: per position the head's 16-value chunks are converted, multiplied
 * by the query (exact in float) and summed in two double vectors, then
 * across lanes; values: the output head stays in registers across all
 * positions (the plain loop read and wrote it through memory per
 * position), each chunk out + a * v with a separate multiply and add as
 * the twin.
 */
#if defined(__x86_64__)

#include "le_int.h"

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define NCH_MAX 8

ALWAYS_INLINE void
scores_n(int nch, int n, const uint16_t *q, const uint8_t *k, size_t ks,
         float scale, float *sc)
{
    __m512 qf[NCH_MAX];
    _Pragma("GCC unroll 16") for (int c = 0; c < nch; c++)
        qf[c] = _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)(q + 16 * c)));
    for (int p = 0; p < n; p++) {
        const uint16_t *kr = (const uint16_t *)(k + (size_t)p * ks);
        __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
        _Pragma("GCC unroll 16") for (int c = 0; c < nch; c++) {
            __m512 pr = _mm512_mul_ps(
                qf[c], _mm512_cvtph_ps(_mm256_loadu_si256(
                           (const __m256i *)(kr + 16 * c))));
            a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(pr)));
            a1 = _mm512_add_pd(
                a1, _mm512_cvtps_pd(_mm256_castpd_ps(
                        _mm512_extractf64x4_pd(_mm512_castps_pd(pr), 1))));
        }
        double d = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
        sc[p] = (float)d * scale;
    }
}

void
le_attn_scores_f16_avx512(int hd, int n, const uint16_t *q, const uint8_t *k,
                          size_t ks, float scale, float *sc)
{
    switch (hd / 16) { /* constant chunk counts: the query in registers */
    case 4:
        scores_n(4, n, q, k, ks, scale, sc);
        break;
    case 8:
        scores_n(8, n, q, k, ks, scale, sc);
        break;
    default: /* le_attn_f16_get hands out 64 and 128 only */
        le_attn_scores_f16_ref(hd, n, q, k, ks, scale, sc);
        break;
    }
}

ALWAYS_INLINE void
values_n(int nch, int n, const float *w, float inv, const uint8_t *v,
         size_t vs, float *out)
{
    __m512 o[NCH_MAX];
    _Pragma("GCC unroll 16") for (int c = 0; c < nch; c++)
        o[c] = _mm512_setzero_ps();
    for (int p = 0; p < n; p++) {
        const uint16_t *vr = (const uint16_t *)(v + (size_t)p * vs);
        __m512 a = _mm512_set1_ps(w[p] * inv);
        _Pragma("GCC unroll 16") for (int c = 0; c < nch; c++)
            o[c] = _mm512_add_ps(
                o[c], _mm512_mul_ps(a, _mm512_cvtph_ps(_mm256_loadu_si256(
                                           (const __m256i *)(vr + 16 * c)))));
    }
    _Pragma("GCC unroll 16") for (int c = 0; c < nch; c++)
        _mm512_storeu_ps(out + 16 * c, o[c]);
}

void
le_attn_values_f16_avx512(int hd, int n, const float *w, float inv,
                          const uint8_t *v, size_t vs, float *out)
{
    switch (hd / 16) {
    case 4:
        values_n(4, n, w, inv, v, vs, out);
        break;
    case 8:
        values_n(8, n, w, inv, v, vs, out);
        break;
    default:
        le_attn_values_f16_ref(hd, n, w, inv, v, vs, out);
        break;
    }
}

#endif
