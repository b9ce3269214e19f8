/*
 * attn_avx512.c: AVX-512 twins of attn.c's attention loops (the contract
 * is there).  Built with the AVX-512 flags (Makefile: *_avx512.c), called
 * only when le_isa_active() is LE_ISA_AVX512, for head sizes 64 and 128.
 *
 * scores: the query heads (8 at a time) are converted to doubles once per
 * call and the key rows of a block of 8 positions once per block (on the
 * stack), each block used by each of the g query heads.  A fp16
 * by fp16 product has at most 22 significant bits, so it is exact in
 * float and in double, and fma(q, k, acc) rounds once, as acc + (the
 * float product) did: per head and position the two double accumulators
 * (elements 16c..16c+7 and 16c+8..16c+15 of chunk c, c in order) hold
 * the bits the one-head kernel's convert-multiply-add held.  Their sum is
 * reduced across lanes for the 8 positions at once (reduce8) in the tree
 * of _mm512_reduce_add_pd, so each score is that kernel's bits.  The row
 * maximum is kept per lane (vmaxps is m = s > m ? s : m) and taken across
 * lanes at the end.  K rows are prefetched a block ahead and the block's
 * V rows for the values (the products between two layers have evicted
 * them from L1 and L2: perf showed the kernels waiting).  values: 64 output
 * values of up to 4 heads in 16 registers across all positions (a 128-value
 * head in two passes), each V chunk converted once for the heads, V rows
 * prefetched 8 positions ahead, each step out + a * v with a separate multiply
 * and add as the twin.  to_f16: vcvtps2ph, NaN lanes redone by the twin.
 */
#if defined(__x86_64__)

#include "le_int.h"

#include <immintrin.h>
#include <math.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define PB 8 /* positions per scores block: one reduce8 */
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

ALWAYS_INLINE __m512d
h8d(const uint16_t *p) /* 8 halves as doubles (exact) */
{
    return _mm512_cvtps_pd(
        _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
}

/* r[p] = _mm512_reduce_add_pd(s[p]), p < 8: its tree (lanes i and i + 4,
 * then i and i + 2, then i and i + 1) with the 8 vectors transposed
 * between the steps instead of one horizontal reduce each. */
ALWAYS_INLINE __m512d
reduce8(const __m512d s[PB])
{
    /* [s_a lanes i + (i + 4) | s_b lanes i + (i + 4)], i < 4 */
#define HALVES(a, b)                                                           \
    _mm512_add_pd(_mm512_shuffle_f64x2(s[a], s[b], 0x44),                      \
                  _mm512_shuffle_f64x2(s[a], s[b], 0xee))
    __m512d u02 = HALVES(0, 2), u46 = HALVES(4, 6);
    __m512d u13 = HALVES(1, 3), u57 = HALVES(5, 7);
#undef HALVES
    /* [s0 | s2 | s4 | s6] lanes j + (j + 2), j < 2; odd positions alike */
    __m512d x = _mm512_add_pd(_mm512_shuffle_f64x2(u02, u46, 0x88),
                              _mm512_shuffle_f64x2(u02, u46, 0xdd));
    __m512d y = _mm512_add_pd(_mm512_shuffle_f64x2(u13, u57, 0x88),
                              _mm512_shuffle_f64x2(u13, u57, 0xdd));
    /* lane p: position p's lanes 0 + 1 */
    return _mm512_add_pd(_mm512_unpacklo_pd(x, y), _mm512_unpackhi_pd(x, y));
}

/* scores of the gq <= QG heads in qd (doubles) against positions 0..n,
 * a block of PB key rows converted into kd at a time; nv = hd / 8 double
 * vectors per row */
ALWAYS_INLINE void
scores_blocks(const int nv, int gq, int n, const double (*qd)[HD_MAX],
              double (*kd)[HD_MAX], const uint8_t *k, size_t ks, __m256 vscale,
              float *sc, size_t scs, __m256 *mxv, const uint8_t *pv)
{
    for (int p0 = 0; p0 < n; p0 += PB) {
        int r = n - p0 < PB ? n - p0 : PB;
        for (int p = 0; p < PB; p++) {
            const uint16_t *kr =
                (const uint16_t *)(k + (size_t)(p0 + (p < r ? p : 0)) * ks);
            UNROLL
            for (int m = 0; m < nv; m++)
                _mm512_store_pd(kd[p] + 8 * m, h8d(kr + 8 * m));
        }
        for (int p = p0 + PB; p < p0 + 2 * PB && p < n; p++) /* the next */
            prefetch_row(k + (size_t)p * ks, (size_t)nv * 16);
        for (int p = p0; pv && p < p0 + r; p++) /* for values */
            prefetch_row(pv + (size_t)p * ks, (size_t)nv * 16);
        for (int h = 0; h < gq; h++) {
            __m512d a0[PB], a1[PB], s[PB];
            UNROLL
            for (int p = 0; p < PB; p++)
                a0[p] = a1[p] = _mm512_setzero_pd();
            UNROLL
            for (int m = 0; m < nv; m += 2) {
                __m512d qa = _mm512_load_pd(qd[h] + 8 * m),
                        qb = _mm512_load_pd(qd[h] + 8 * m + 8);
                UNROLL
                for (int p = 0; p < PB; p++) {
                    a0[p] = _mm512_fmadd_pd(qa, _mm512_load_pd(kd[p] + 8 * m),
                                            a0[p]);
                    a1[p] = _mm512_fmadd_pd(
                        qb, _mm512_load_pd(kd[p] + 8 * m + 8), a1[p]);
                }
            }
            UNROLL
            for (int p = 0; p < PB; p++)
                s[p] = _mm512_add_pd(a0[p], a1[p]);
            __m256 f = _mm256_mul_ps(_mm512_cvtpd_ps(reduce8(s)), vscale);
            __mmask8 in = (__mmask8)((1u << r) - 1);
            _mm256_mask_storeu_ps(sc + (size_t)h * scs + p0, in, f);
            mxv[h] = _mm256_mask_max_ps(mxv[h], in, f, mxv[h]);
        }
    }
}

ALWAYS_INLINE void
scores_n(const int nv, int g, int n, const uint16_t *q, const uint8_t *k,
         size_t ks, float scale, float *sc, size_t scs, float *mx,
         const uint8_t *pv)
{
    _Alignas(64) double kd[PB][HD_MAX], qd[QG][HD_MAX];
    __m256 vscale = _mm256_set1_ps(scale), mxv[QG];
    for (int p = 0; p < PB && p < n; p++) /* the first block's */
        prefetch_row(k + (size_t)p * ks, (size_t)nv * 16);
    for (int h0 = 0; h0 < g; h0 += QG) {
        int gq = g - h0 < QG ? g - h0 : QG;
        for (int h = 0; h < gq; h++)
            mxv[h] = _mm256_set1_ps(-INFINITY);
        for (int h = 0; h < gq; h++) {
            const uint16_t *qh = q + (size_t)(h0 + h) * 8 * nv;
            UNROLL
            for (int m = 0; m < nv; m++)
                _mm512_store_pd(qd[h] + 8 * m, h8d(qh + 8 * m));
        }
        scores_blocks(nv, gq, n, qd, kd, k, ks, vscale, sc + (size_t)h0 * scs,
                      scs, mxv, pv);
        for (int h = 0; h < gq; h++) { /* the lanes' maxima */
            float l[8];
            _mm256_storeu_ps(l, mxv[h]);
            mx[h0 + h] = le_attn_row_max(8, l);
        }
    }
}

void
le_attn_scores_f16_avx512(int hd, int g, int n, const uint16_t *q,
                          const uint8_t *k, size_t ks, float scale, float *sc,
                          size_t scs, float *mx, const uint8_t *pv)
{
    switch (hd) { /* constant vector counts */
    case 64:
        scores_n(8, g, n, q, k, ks, scale, sc, scs, mx, pv);
        break;
    case 128:
        scores_n(16, g, n, q, k, ks, scale, sc, scs, mx, pv);
        break;
    default: /* le_attn_f16_get hands out 64 and 128 only */
        le_attn_scores_f16_ref(hd, g, n, q, k, ks, scale, sc, scs, mx, pv);
        break;
    }
}

/* out[h * hd + i0 + i], i < 64, of the gb (constant, <= 4) heads from w */
ALWAYS_INLINE void
values_blk(const int gb, int hd, int n, const float *w, size_t wst,
           const float *inv, const uint8_t *v, size_t vs, int i0, float *out)
{
    __m512 o[4][4];
    UNROLL
    for (int h = 0; h < gb; h++) {
        UNROLL
        for (int c = 0; c < 4; c++)
            o[h][c] = _mm512_setzero_ps();
    }
    for (int p = 0; p < n; p++) {
        if (p + PF_AHEAD < n)
            prefetch_row(v + (size_t)(p + PF_AHEAD) * vs + (size_t)i0 * 2, 128);
        const uint16_t *vr = (const uint16_t *)(v + (size_t)p * vs) + i0;
        __m512 vc[4], a[4];
        UNROLL
        for (int c = 0; c < 4; c++)
            vc[c] = _mm512_cvtph_ps(
                _mm256_loadu_si256((const __m256i *)(vr + 16 * c)));
        UNROLL
        for (int h = 0; h < gb; h++)
            a[h] = _mm512_set1_ps(w[(size_t)h * wst + p] * inv[h]);
        UNROLL
        for (int h = 0; h < gb; h++) {
            UNROLL
            for (int c = 0; c < 4; c++)
                o[h][c] = _mm512_add_ps(o[h][c], _mm512_mul_ps(a[h], vc[c]));
        }
    }
    UNROLL
    for (int h = 0; h < gb; h++) {
        UNROLL
        for (int c = 0; c < 4; c++)
            _mm512_storeu_ps(out + (size_t)h * hd + i0 + 16 * c, o[h][c]);
    }
}

void
le_attn_values_f16_avx512(int hd, int g, int n, const float *w, size_t wst,
                          const float *inv, const uint8_t *v, size_t vs,
                          float *out)
{
    if (hd % 64 != 0) { /* 64 values a block: 64, 128, deepseek2's 576 */
        le_attn_values_f16_ref(hd, g, n, w, wst, inv, v, vs, out);
        return;
    }
    for (int h = 0; h < g; h += 4) {
        const float *wh = w + (size_t)h * wst;
        float *oh = out + (size_t)h * hd;
        for (int i0 = 0; i0 < hd; i0 += 64)
            switch (g - h < 4 ? g - h : 4) {
            case 1:
                values_blk(1, hd, n, wh, wst, inv + h, v, vs, i0, oh);
                break;
            case 2:
                values_blk(2, hd, n, wh, wst, inv + h, v, vs, i0, oh);
                break;
            case 3:
                values_blk(3, hd, n, wh, wst, inv + h, v, vs, i0, oh);
                break;
            default:
                values_blk(4, hd, n, wh, wst, inv + h, v, vs, i0, oh);
                break;
            }
    }
}

void
le_attn_to_f16_avx512(int n, const float *x, uint16_t *y)
{
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 f = _mm512_loadu_ps(x + i);
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
        if (_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q)) /* a NaN: the twin's */
            le_attn_to_f16_ref(16, x + i, y + i);
    }
    le_attn_to_f16_ref(n - i, x + i, y + i);
}

#endif
