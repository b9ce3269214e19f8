/*
 * quants_avx512.c: AVX-512 (F/BW/VL/DQ + VNNI) kernels over repacked
 * weights (repack.c draws the layouts): 16 rows in the 16 int32 lanes of
 * a ZMM register, against 1..4 activation rows at a time.
 *
 * Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
 * -mfma -mf16c (Makefile: files named *_avx512.c, x86-64 only) and called
 * only when le_isa_active() is LE_ISA_AVX512.
 *
 * Per block each kernel forms exactly the integer sums of the plain C
 * twin in repack.c and then the same float expression in the same order
 * (no fused multiply-add), so results are bit-identical to it and to
 * quants.c's vec_dot (test_quants.c checks all three).
 *
 *   Q4_0: vpdpbusd(nibbles (unsigned), broadcast 4 activation bytes)
 *         gives sum q*a; the -8 offset is 8 * (sum of the block's
 *         activation quants), from the prep row.
 *   Q8_0: the weights xor 0x80 are q + 128 (unsigned), so vpdpbusd gives
 *         sum q*a + 128 * sum a, less the prep row's sum.  Exact: int32
 *         lanes, at most 8 * 4 * 255 * 128 per block.
 *   Q4_K: vpmaddubsw (nibble x int8, pairs <= 3810) summed over the 8
 *         chunks of a sub-block in int16 (<= 30480, no saturation), then
 *         vpdpwssd with the row's 6-bit scale in both halves of its lane;
 *         the mins likewise with vpdpwssd over (mn, mn') pairs and the
 *         prep row's bsum pairs.
 *
 * Several tokens per weight load (the GEMM of a prompt batch): the
 * unpacked nibbles stay in registers for NT <= 4 activation rows, each
 * with its own accumulators, so the weight unpacking is paid once per 4
 * tokens.  For one token (generation) the loop is bound by the weight
 * stream.
 */
#if defined(__x86_64__)

#include "le_int.h"

#include <immintrin.h>
#include <string.h>

/* Small fixed loops over tokens, chunks and halves must become straight
 * code with the vectors in registers (at -O2 GCC keeps them as arrays on
 * the stack: measured 3x slower). */
#define UNROLL _Pragma("GCC unroll 16")

#define ALWAYS_INLINE static inline __attribute__((always_inline))

struct q8_0_blk {
    uint16_t d;
    int8_t qs[32];
};
_Static_assert(sizeof(struct q8_0_blk) == 34, "as in quants.c");
struct q8_K_blk {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
_Static_assert(sizeof(struct q8_K_blk) == 292, "as in quants.c");

ALWAYS_INLINE __m512i
bcast32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Stores 16 row results (nr of them) of one token. */
ALWAYS_INLINE void
store_rows(float *y, __m512 v, int nr)
{
    if (nr == 16)
        _mm512_storeu_ps(y, v);
    else
        _mm512_mask_storeu_ps(y, (__mmask16)((1u << nr) - 1), v);
}

/* ---- Q4_0 and Q8_0 ----
 * One block of 16 rows becomes 8 unsigned byte vectors u[i], each to be
 * multiplied with the 4 activation quants at qoff[i]: for Q4_0 the low
 * and high nibbles of the 4 chunks (values 4c.. and 16+4c..), for Q8_0 the
 * 8 chunks xor 0x80.  Then sum u*a less bias * (sum of the activation
 * quants): bias 8 for Q4_0's offset, 128 for Q8_0's xor. */

ALWAYS_INLINE void
legacy_tile(int nb, const uint8_t *qs, const uint16_t *dw,
            const struct le_pack_act *a, int t0, const int NT, float *y,
            size_t ys, int nr, const int Q8)
{
    static const int off4[8] = {0, 16, 4, 20, 8, 24, 12, 28};
    static const int off8[8] = {0, 4, 8, 12, 16, 20, 24, 28};
    const int *qoff = Q8 ? off8 : off4;
    const size_t col = Q8 ? 512 : 256;
    const int32_t bias = Q8 ? 128 : 8;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    const struct q8_0_blk *x[4];
    const struct le_prep_q8_0 *p[4];
    __m512 acc[4];
    UNROLL
    for (int t = 0; t < NT; t++) {
        x[t] = (const void *)(a->q + (size_t)(t0 + t) * a->q_row);
        p[t] = (const void *)(a->p + (size_t)(t0 + t) * a->p_row);
        acc[t] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const uint8_t *wb = qs + (size_t)b * col;
        __m512i u[8];
        UNROLL
        for (int c = 0; c < (int)col / 64; c++) {
            _mm_prefetch((const char *)(wb + 4 * col + 64 * c), _MM_HINT_T0);
            __m512i v = _mm512_load_si512((const void *)(wb + 64 * c));
            if (Q8) {
                u[c] = _mm512_xor_si512(v, x80);
            } else {
                u[2 * c] = _mm512_and_si512(v, m4);
                u[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
        }
        __m512 dv = _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)(dw + (size_t)b * 16)));
        UNROLL
        for (int t = 0; t < NT; t++) {
            const int8_t *q = x[t][b].qs;
            __m512i s[4];
            UNROLL
            for (int i = 0; i < 4; i++)
                s[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[i],
                                           bcast32(q + qoff[i]));
            UNROLL
            for (int i = 0; i < 4; i++)
                s[i] = _mm512_dpbusd_epi32(s[i], u[4 + i],
                                           bcast32(q + qoff[4 + i]));
            __m512i si = _mm512_add_epi32(_mm512_add_epi32(s[0], s[1]),
                                          _mm512_add_epi32(s[2], s[3]));
            si = _mm512_sub_epi32(si, _mm512_set1_epi32(bias * p[t][b].sum));
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(si), dv);
            f = _mm512_mul_ps(f, _mm512_set1_ps(p[t][b].d));
            acc[t] = _mm512_add_ps(acc[t], f);
        }
    }
    UNROLL
    for (int t = 0; t < NT; t++)
        store_rows(y + (size_t)(t0 + t) * ys, acc[t], nr);
}

ALWAYS_INLINE void
legacy_gemm(int n, const void *w, const struct le_pack_act *a, int ntok,
            float *y, size_t ys, int nr, const int Q8)
{
    int nb = n / 32;
    const uint8_t *qs = w;
    const uint16_t *dw =
        (const uint16_t *)(qs + (size_t)nb * (Q8 ? 512 : 256));
    int t = 0;
    for (; t + 4 <= ntok; t += 4)
        legacy_tile(nb, qs, dw, a, t, 4, y, ys, nr, Q8);
    switch (ntok - t) {
    case 3: legacy_tile(nb, qs, dw, a, t, 3, y, ys, nr, Q8); break;
    case 2: legacy_tile(nb, qs, dw, a, t, 2, y, ys, nr, Q8); break;
    case 1: legacy_tile(nb, qs, dw, a, t, 1, y, ys, nr, Q8); break;
    default: break;
    }
}

void
le_gemm_q4_0_avx512(int n, const void *w, const struct le_pack_act *a,
                    int ntok, float *y, size_t ys, int nr)
{
    legacy_gemm(n, w, a, ntok, y, ys, nr, 0);
}

void
le_gemm_q8_0_avx512(int n, const void *w, const struct le_pack_act *a,
                    int ntok, float *y, size_t ys, int nr)
{
    legacy_gemm(n, w, a, ntok, y, ys, nr, 1);
}

/* ---- Q4_K ---- */

/* Row scales (16 bytes, one per row) in both int16 halves of each lane. */
ALWAYS_INLINE __m512i
scale_pairs(const uint8_t *sc)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sc));
    return _mm512_or_si512(v, _mm512_slli_epi32(v, 16));
}

ALWAYS_INLINE void
q4_K_tile(int nsb, const uint8_t *qs, const uint8_t *meta,
          const struct le_pack_act *a, int t0, const int NT, float *y,
          size_t ys, int nr)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const struct q8_K_blk *x[4];
    const int32_t *p[4];
    __m512 acc[4];
    UNROLL
    for (int t = 0; t < NT; t++) {
        x[t] = (const void *)(a->q + (size_t)(t0 + t) * a->q_row);
        p[t] = (const void *)(a->p + (size_t)(t0 + t) * a->p_row);
        acc[t] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nsb; b++) {
        const uint8_t *mb = meta + (size_t)b * LE_PACK_Q4_K_META;
        __m512i isum[4], msum[4];
        UNROLL
        for (int t = 0; t < NT; t++)
            isum[t] = msum[t] = _mm512_setzero_si512();
        UNROLL
        for (int jj = 0; jj < 4; jj++) {
            __m512i plo[4], phi[4];
            UNROLL
            for (int t = 0; t < NT; t++)
                plo[t] = phi[t] = _mm512_setzero_si512();
            const uint8_t *wj = qs + (size_t)b * 2048 + (size_t)jj * 512;
            UNROLL
            for (int c = 0; c < 8; c++) {
                _mm_prefetch((const char *)(wj + 64 * c + 4096), _MM_HINT_T0);
                __m512i v = _mm512_load_si512((const void *)(wj + 64 * c));
                __m512i lo = _mm512_and_si512(v, m4);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                UNROLL
                for (int t = 0; t < NT; t++) {
                    const int8_t *q = x[t][b].qs + 64 * jj + 4 * c;
                    plo[t] = _mm512_add_epi16(
                        plo[t], _mm512_maddubs_epi16(lo, bcast32(q)));
                    phi[t] = _mm512_add_epi16(
                        phi[t], _mm512_maddubs_epi16(hi, bcast32(q + 32)));
                }
            }
            __m512i s0 = scale_pairs(mb + 64 + (2 * jj) * 16);
            __m512i s1 = scale_pairs(mb + 64 + (2 * jj + 1) * 16);
            UNROLL
            for (int t = 0; t < NT; t++) {
                isum[t] = _mm512_dpwssd_epi32(isum[t], plo[t], s0);
                isum[t] = _mm512_dpwssd_epi32(isum[t], phi[t], s1);
            }
        }
        UNROLL
        for (int k = 0; k < 4; k++) {
            __m512i mn = _mm512_cvtepu8_epi16(
                _mm256_loadu_si256((const __m256i *)(mb + 192 + 32 * k)));
            UNROLL
            for (int t = 0; t < NT; t++)
                msum[t] = _mm512_dpwssd_epi32(
                    msum[t], mn, _mm512_set1_epi32(p[t][4 * b + k]));
        }
        __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)mb));
        __m512 dm =
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(mb + 32)));
        UNROLL
        for (int t = 0; t < NT; t++) {
            __m512 yd = _mm512_set1_ps(x[t][b].d);
            __m512 f1 = _mm512_mul_ps(
                yd, _mm512_mul_ps(dv, _mm512_cvtepi32_ps(isum[t])));
            __m512 f2 = _mm512_mul_ps(
                yd, _mm512_mul_ps(dm, _mm512_cvtepi32_ps(msum[t])));
            acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(f1, f2));
        }
    }
    UNROLL
    for (int t = 0; t < NT; t++)
        store_rows(y + (size_t)(t0 + t) * ys, acc[t], nr);
}

void
le_gemm_q4_K_avx512(int n, const void *w, const struct le_pack_act *a,
                    int ntok, float *y, size_t ys, int nr)
{
    int nsb = n / 256;
    const uint8_t *qs = w;
    const uint8_t *meta = qs + (size_t)nsb * 2048;
    int t = 0;
    for (; t + 4 <= ntok; t += 4)
        q4_K_tile(nsb, qs, meta, a, t, 4, y, ys, nr);
    switch (ntok - t) {
    case 3: q4_K_tile(nsb, qs, meta, a, t, 3, y, ys, nr); break;
    case 2: q4_K_tile(nsb, qs, meta, a, t, 2, y, ys, nr); break;
    case 1: q4_K_tile(nsb, qs, meta, a, t, 1, y, ys, nr); break;
    default: break;
    }
}

#endif /* x86-64 */
