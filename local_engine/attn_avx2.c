/*
 * attn_avx2.c: AVX2 twins of attn.c's attention loops (the contract is
 * there), the steps of attn_avx512.c in 4-double and 8-float vectors.
 * Built with the AVX2 flags (Makefile: *_avx2.c), called only when
 * le_isa_active() is LE_ISA_AVX2 or LE_ISA_AVXVNNI, for head sizes 64
 * and 128.
 *
 * scores: the query heads (8 at a time) converted to doubles once per
 * call, the key rows of a block of 4 positions once per block (on the
 * stack) for the g query heads; fma(q, k, acc) of fp16
 * values rounds once, as acc + (the exact float product) did, into two
 * double accumulators per head and position (elements 8c..8c+3 and
 * 8c+4..8c+7 of chunk c, c in order), then across lanes for the 4
 * positions at once (reduce4) in the tree of the one-head kernel (lanes
 * i and i + 2, then 0 and 1), so each score is its bits; the row maximum
 * per lane, then across lanes; K and V rows prefetched as in
 * attn_avx512.c.  values: 32
 * output values of up to 2 heads in 8 registers across all positions,
 * each V chunk converted once for the heads, each step out + a * v with
 * a separate multiply and add as the twin.  to_f16: vcvtps2ph, NaN lanes
 * redone by the twin.
 */
#if defined(__x86_64__)

#include "le_int.h"

#include <immintrin.h>
#include <math.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 32")
#define PB 4 /* positions per scores block: one reduce4 */
#define HD_MAX 128
#define QG 8       /* query heads converted to doubles at once */
#define PF_AHEAD 8 /* values: V rows prefetched this many positions ahead */

/* The cache lines of the nb bytes at p into L1: K and V rows come from
 * a cache the products between two layers have mostly evicted. */
ALWAYS_INLINE void
prefetch_row(const uint8_t *p, size_t nb)
{
    for (size_t o = 0; o < nb; o += 64)
        _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

ALWAYS_INLINE __m256d
h4d(const uint16_t *p) /* 4 halves as doubles (exact) */
{
    return _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p)));
}

ALWAYS_INLINE __m256
h8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* r[p] = (s[p][0] + s[p][2]) + (s[p][1] + s[p][3]), p < 4, as the
 * one-head kernel's 128-bit halves add and last add, transposed. */
ALWAYS_INLINE __m256d
reduce4(const __m256d s[PB])
{
    __m256d x02 = _mm256_add_pd(_mm256_permute2f128_pd(s[0], s[2], 0x20),
                                _mm256_permute2f128_pd(s[0], s[2], 0x31));
    __m256d x13 = _mm256_add_pd(_mm256_permute2f128_pd(s[1], s[3], 0x20),
                                _mm256_permute2f128_pd(s[1], s[3], 0x31));
    return _mm256_hadd_pd(x02, x13);
}

/* scores of the gq <= QG heads in qd (doubles) against positions 0..n,
 * a block of PB key rows converted into kd at a time; nv = hd / 4 double
 * vectors per row */
ALWAYS_INLINE void
scores_blocks(const int nv, int gq, int n, const double (*qd)[HD_MAX],
              double (*kd)[HD_MAX], const uint8_t *k, size_t ks, __m128 vscale,
              float *sc, size_t scs, __m128 *mxv, const uint8_t *pv)
{
    for (int p0 = 0; p0 < n; p0 += PB) {
        int r = n - p0 < PB ? n - p0 : PB;
        for (int p = 0; p < PB; p++) {
            const uint16_t *kr =
                (const uint16_t *)(k + (size_t)(p0 + (p < r ? p : 0)) * ks);
            UNROLL
            for (int m = 0; m < nv; m++)
                _mm256_store_pd(kd[p] + 4 * m, h4d(kr + 4 * m));
        }
        for (int p = p0 + PB; p < p0 + 2 * PB && p < n; p++) /* the next */
            prefetch_row(k + (size_t)p * ks, (size_t)nv * 8);
        for (int p = p0; pv && p < p0 + r; p++) /* for values */
            prefetch_row(pv + (size_t)p * ks, (size_t)nv * 8);
        for (int h = 0; h < gq; h++) {
            __m256d a0[PB], a1[PB], s[PB];
            UNROLL
            for (int p = 0; p < PB; p++)
                a0[p] = a1[p] = _mm256_setzero_pd();
            UNROLL
            for (int m = 0; m < nv; m += 2) {
                __m256d qa = _mm256_load_pd(qd[h] + 4 * m),
                        qb = _mm256_load_pd(qd[h] + 4 * m + 4);
                UNROLL
                for (int p = 0; p < PB; p++) {
                    a0[p] = _mm256_fmadd_pd(qa, _mm256_load_pd(kd[p] + 4 * m),
                                            a0[p]);
                    a1[p] = _mm256_fmadd_pd(
                        qb, _mm256_load_pd(kd[p] + 4 * m + 4), a1[p]);
                }
            }
            UNROLL
            for (int p = 0; p < PB; p++)
                s[p] = _mm256_add_pd(a0[p], a1[p]);
            __m128 f = _mm_mul_ps(_mm256_cvtpd_ps(reduce4(s)), vscale);
            float *dst = sc + (size_t)h * scs + p0;
            if (r == PB) {
                _mm_storeu_ps(dst, f);
                mxv[h] = _mm_max_ps(f, mxv[h]);
            } else {
                __m128 in = _mm_castsi128_ps(_mm_cmpgt_epi32(
                    _mm_set1_epi32(r), _mm_setr_epi32(0, 1, 2, 3)));
                mxv[h] = _mm_max_ps(
                    _mm_blendv_ps(_mm_set1_ps(-INFINITY), f, in), mxv[h]);
                float tmp[PB];
                _mm_storeu_ps(tmp, f);
                for (int p = 0; p < r; p++)
                    dst[p] = tmp[p];
            }
        }
    }
}

ALWAYS_INLINE void
scores_n(const int nv, int g, int n, const uint16_t *q, const uint8_t *k,
         size_t ks, float scale, float *sc, size_t scs, float *mx,
         const uint8_t *pv)
{
    _Alignas(32) double kd[PB][HD_MAX], qd[QG][HD_MAX];
    __m128 vscale = _mm_set1_ps(scale), mxv[QG];
    for (int p = 0; p < PB && p < n; p++) /* the first block's */
        prefetch_row(k + (size_t)p * ks, (size_t)nv * 8);
    for (int h0 = 0; h0 < g; h0 += QG) {
        int gq = g - h0 < QG ? g - h0 : QG;
        for (int h = 0; h < gq; h++)
            mxv[h] = _mm_set1_ps(-INFINITY);
        for (int h = 0; h < gq; h++) {
            const uint16_t *qh = q + (size_t)(h0 + h) * 4 * nv;
            UNROLL
            for (int m = 0; m < nv; m++)
                _mm256_store_pd(qd[h] + 4 * m, h4d(qh + 4 * m));
        }
        scores_blocks(nv, gq, n, qd, kd, k, ks, vscale, sc + (size_t)h0 * scs,
                      scs, mxv, pv);
        for (int h = 0; h < gq; h++) { /* the lanes' maxima */
            float l[4];
            _mm_storeu_ps(l, mxv[h]);
            mx[h0 + h] = le_attn_row_max(4, l);
        }
    }
}

void
le_attn_scores_f16_avx2(int hd, int g, int n, const uint16_t *q,
                        const uint8_t *k, size_t ks, float scale, float *sc,
                        size_t scs, float *mx, const uint8_t *pv)
{
    if (hd == 64)
        scores_n(16, g, n, q, k, ks, scale, sc, scs, mx, pv);
    else if (hd == 128)
        scores_n(32, g, n, q, k, ks, scale, sc, scs, mx, pv);
    else /* le_attn_f16_get hands out 64 and 128 only */
        le_attn_scores_f16_ref(hd, g, n, q, k, ks, scale, sc, scs, mx, pv);
}

/* out[h * hd + i0 + i], i < 32, of the gb (constant, <= 2) heads from w */
ALWAYS_INLINE void
values_blk(const int gb, int hd, int n, const float *w, size_t wst,
           const float *inv, const uint8_t *v, size_t vs, int i0, float *out)
{
    __m256 o[2][4];
    UNROLL
    for (int h = 0; h < gb; h++) {
        UNROLL
        for (int c = 0; c < 4; c++)
            o[h][c] = _mm256_setzero_ps();
    }
    for (int p = 0; p < n; p++) {
        if (p + PF_AHEAD < n)
            prefetch_row(v + (size_t)(p + PF_AHEAD) * vs + (size_t)i0 * 2, 64);
        const uint16_t *vr = (const uint16_t *)(v + (size_t)p * vs) + i0;
        __m256 vc[4];
        UNROLL
        for (int c = 0; c < 4; c++)
            vc[c] = h8(vr + 8 * c);
        UNROLL
        for (int h = 0; h < gb; h++) {
            __m256 a = _mm256_set1_ps(w[(size_t)h * wst + p] * inv[h]);
            UNROLL
            for (int c = 0; c < 4; c++)
                o[h][c] = _mm256_add_ps(o[h][c], _mm256_mul_ps(a, vc[c]));
        }
    }
    UNROLL
    for (int h = 0; h < gb; h++) {
        UNROLL
        for (int c = 0; c < 4; c++)
            _mm256_storeu_ps(out + (size_t)h * hd + i0 + 8 * c, o[h][c]);
    }
}

void
le_attn_values_f16_avx2(int hd, int g, int n, const float *w, size_t wst,
                        const float *inv, const uint8_t *v, size_t vs,
                        float *out)
{
    if (hd % 32 != 0) { /* 32 values a block */
        le_attn_values_f16_ref(hd, g, n, w, wst, inv, v, vs, out);
        return;
    }
    for (int h = 0; h < g; h += 2) {
        const float *wh = w + (size_t)h * wst;
        float *oh = out + (size_t)h * hd;
        for (int i0 = 0; i0 < hd; i0 += 32) {
            if (g - h == 1)
                values_blk(1, hd, n, wh, wst, inv + h, v, vs, i0, oh);
            else
                values_blk(2, hd, n, wh, wst, inv + h, v, vs, i0, oh);
        }
    }
}

void
le_attn_to_f16_avx2(int n, const float *x, uint16_t *y)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_loadu_ps(x + i);
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
        if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)))
            le_attn_to_f16_ref(8, x + i, y + i); /* a NaN: the twin's */
    }
    le_attn_to_f16_ref(n - i, x + i, y + i);
}

#endif
