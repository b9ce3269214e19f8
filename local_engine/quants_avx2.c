/*
 * quants_avx2.c: AVX2 dot products for the hottest weight types (Q4_0,
 * Q8_0 against Q8_0; Q4_K, Q5_K, Q6_K against Q8_K) and for F16 (the KV
 * cache and F16 weights: dot product and dequantisation).
 *
 * Built with -mavx2 -mfma -mf16c (Makefile: files named *_avx2.c, x86-64
 * only) and called only when le_isa_active() is LE_ISA_AVX2 or above
 * (quants.c reads cpuid and XCR0, then puts these into the type table;
 * repack.c serves the repacked-weight kernels at the end of this file).
 *
 * Each kernel computes, per block, the same integer sums as its plain C
 * twin in quants.c.  The K-quant kernels then do the same float
 * expression in the same order, so their results are bit-identical to the
 * plain C ones (test_quants.c checks that); Q4_0 and Q8_0 accumulate in 8
 * float lanes instead (see there) and F16's dot sums in another order, so
 * those agree within a stated tolerance.  The integer sums cannot overflow int16 in maddubs for
 * blocks made by our quantisers (|q8| <= 127); a Q8 block holding -128
 * from a hostile file may saturate, which only changes that dot product.
 *
 * The block structs repeat quants.c's (the same fields, pinned to the same
 * sizes by _Static_assert): only the layouts used here.
 */
#if defined(__x86_64__)

#include "le_int.h"

#include <immintrin.h>
#include <string.h>

/* Small fixed loops over tokens, chunks and halves must become straight
 * code with the vectors in registers (at -O2 GCC keeps them as arrays on
 * the stack: measured 3x slower). */
#define UNROLL _Pragma("GCC unroll 16")

struct le_block_q4_0 {
    uint16_t d;
    uint8_t qs[16];
};
_Static_assert(sizeof(struct le_block_q4_0) == 18, "as in quants.c");

struct le_block_q8_0 {
    uint16_t d;
    int8_t qs[32];
};
_Static_assert(sizeof(struct le_block_q8_0) == 34, "as in quants.c");

struct le_block_mxfp4 {
    uint8_t e;
    uint8_t qs[16];
};
_Static_assert(sizeof(struct le_block_mxfp4) == 17, "as in quants.c");

struct le_block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
};
_Static_assert(sizeof(struct le_block_q4_K) == 144, "as in quants.c");

struct le_block_q6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};
_Static_assert(sizeof(struct le_block_q6_K) == 210, "as in quants.c");

struct le_block_q8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
_Static_assert(sizeof(struct le_block_q8_K) == 292, "as in quants.c");

static inline float
h2f(uint16_t h)
{
    return _cvtsh_ss(h); /* exact, like le_fp16_to_fp32 */
}

static inline int32_t
hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v),
                              _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* 8 int32 sums of adjacent products of 32 signed bytes x and y. */
static inline __m256i
dot_i8(__m256i x, __m256i y)
{
    /* maddubs wants unsigned x signed: move x's sign onto y. */
    __m256i ax = _mm256_sign_epi8(x, x);
    __m256i sy = _mm256_sign_epi8(y, x);
    __m256i p16 = _mm256_maddubs_epi16(ax, sy);
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* Sum of the 8 float lanes. */
static inline float
hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
                          _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 signed bytes of a Q4_0 block: nibbles 0-15 then 16-31, minus 8. */
static inline __m256i
q4_0_unpack(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m128i m4 = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(b, m4);                    /* values 0-15 */
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m4); /* 16-31 */
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

/*
 * Q8_0 and Q4_0: the integer sum of each block is exact, as in the plain C
 * twins, but it is not reduced to a scalar per block: the 8 int32 lanes
 * are converted to float and accumulated with the block's scale
 * dx * dy in 8 lanes (two accumulators, two blocks an iteration), and the
 * lanes are added once at the end.  That removes a horizontal sum and a
 * serial float add per block (measured: the Q4_0 dot was 90% of a 1B-slice
 * prompt pass at ~8 cycles a block), at the cost of a different rounding
 * order: results agree with the plain C twins to about 1e-6 of the sum of
 * |products| (test_quants.c holds them to 1e-5), not bit for bit.
 */
void
le_vec_dot_q8_0_q8_0_avx2(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q8_0 *x = vx, *y = vy;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int nb = n / 32, i = 0;
    for (; i + 1 < nb; i += 2) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i x1 = _mm256_loadu_si256((const __m256i *)x[i + 1].qs);
        __m256i y1 = _mm256_loadu_si256((const __m256i *)y[i + 1].qs);
        __m256 d0 = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        __m256 d1 = _mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(dot_i8(x0, y0)), acc0);
        acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(dot_i8(x1, y1)), acc1);
    }
    if (i < nb) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256 d0 = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(dot_i8(x0, y0)), acc0);
    }
    *s = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* 32 signed bytes of an MXFP4 block: the codes of values 0-15 then
 * 16-31 looked up in le_mxfp4_values. */
static inline __m256i
mxfp4_unpack(const uint8_t *qs)
{
    const __m128i lut = _mm_loadu_si128((const __m128i *)le_mxfp4_values);
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m128i m4 = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(b, m4));
    __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), m4));
    return _mm256_set_m128i(hi, lo);
}

/* The Q4_0 and MXFP4 dots with Q8_0 (MX: the second; a constant, so each
 * caller is its own loop): two blocks a step in two accumulators. */
static inline __attribute__((always_inline)) void
dot4_q8_0(int n, float *s, const void *vx, const struct le_block_q8_0 *y,
          const int MX)
{
    const struct le_block_q4_0 *x4 = vx;
    const struct le_block_mxfp4 *xm = vx;
#define UNPACK(i) (MX ? mxfp4_unpack(xm[i].qs) : q4_0_unpack(x4[i].qs))
#define SCALE(i)                                                             \
    _mm256_set1_ps((MX ? le_e8m0_half(xm[i].e) : h2f(x4[i].d)) *            \
                   h2f(y[i].d))
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int nb = n / 32, i = 0;
    for (; i + 1 < nb; i += 2) {
        __m256i x0 = UNPACK(i);
        __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i x1 = UNPACK(i + 1);
        __m256i y1 = _mm256_loadu_si256((const __m256i *)y[i + 1].qs);
        acc0 = _mm256_fmadd_ps(SCALE(i), _mm256_cvtepi32_ps(dot_i8(x0, y0)),
                               acc0);
        acc1 = _mm256_fmadd_ps(SCALE(i + 1),
                               _mm256_cvtepi32_ps(dot_i8(x1, y1)), acc1);
    }
    if (i < nb) {
        __m256i x0 = UNPACK(i);
        __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc0 = _mm256_fmadd_ps(SCALE(i), _mm256_cvtepi32_ps(dot_i8(x0, y0)),
                               acc0);
    }
#undef UNPACK
#undef SCALE
    *s = hsum_ps(_mm256_add_ps(acc0, acc1));
}

void
le_vec_dot_q4_0_q8_0_avx2(int n, float *s, const void *vx, const void *vy)
{
    dot4_q8_0(n, s, vx, vy, 0);
}

void
le_vec_dot_mxfp4_q8_0_avx2(int n, float *s, const void *vx, const void *vy)
{
    dot4_q8_0(n, s, vx, vy, 1);
}

/* Int16 element j (0..7) of each 128-bit lane of v, in all of that lane's
 * elements (a byte shuffle with a constant mask instead of moving a scalar
 * scale into a vector register). */
static const uint8_t pick_mask[8][32] __attribute__((aligned(32))) = {
#define PM(j) {2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1,                \
               2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1,                \
               2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1,                \
               2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1, 2*j, 2*j+1}
    PM(0), PM(1), PM(2), PM(3), PM(4), PM(5), PM(6), PM(7),
#undef PM
};

static inline __m256i
pick16(__m256i v, int j)
{
    return _mm256_shuffle_epi8(
        v, _mm256_load_si256((const __m256i *)pick_mask[j]));
}

/* Q6_K: element 2k in the low lane, 2k+1 in the high lane. */
static const uint8_t q6_pick[4][32] __attribute__((aligned(32))) = {
#define QM(a, b) {2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1,             \
                  2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1, 2*a, 2*a+1,             \
                  2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1,             \
                  2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1, 2*b, 2*b+1}
    QM(0, 1), QM(2, 3), QM(4, 5), QM(6, 7),
#undef QM
};

/* dot_i8 with |x| already taken (shared by the rows of a multi call). */
static inline __m256i
dot_i8_abs(__m256i ax, __m256i x, __m256i y)
{
    __m256i p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/*
 * Several activation rows against one weight row (vec_dot_multi): the
 * weight block is loaded and unpacked once and used for up to 4 rows.
 * Each row keeps the single-row kernel's two accumulators (even and odd
 * blocks) and operation order, so every s[c * bs] is bit-identical to
 * what le_vec_dot_q4_0_q8_0_avx2 gives.  Measured on 256 rows x 128
 * tokens: Q4_0 1.2-1.5x faster than 128 single calls per row; the same
 * body for Q8_0 (a plain load in place of the unpack) was no faster, so
 * Q8_0 has none.
 */
void
le_vec_dot_q4_0_q8_0_multi_avx2(int n, float *s, size_t bs, const void *vx,
                                const void *vy, size_t by, int nc)
{
    const struct le_block_q4_0 *x = vx;
    int nb = n / 32;
    for (int c0 = 0; c0 < nc; c0 += 4) {
        int m = nc - c0 < 4 ? nc - c0 : 4;
        /* rows past nc repeat row c0 (computed, not stored) */
        const struct le_block_q8_0 *yc[4];
        for (int c = 0; c < 4; c++) {
            size_t row = (size_t)c0 + (size_t)(c < m ? c : 0);
            yc[c] = (const void *)((const uint8_t *)vy + row * by);
        }
        __m256 a0[4], a1[4];
        for (int c = 0; c < 4; c++)
            a0[c] = a1[c] = _mm256_setzero_ps();
        int i = 0;
        for (; i + 1 < nb; i += 2) {
            __m256i x0 = q4_0_unpack(x[i].qs), x1 = q4_0_unpack(x[i + 1].qs);
            __m256i ax0 = _mm256_sign_epi8(x0, x0);
            __m256i ax1 = _mm256_sign_epi8(x1, x1);
            float dx0 = h2f(x[i].d), dx1 = h2f(x[i + 1].d);
            for (int c = 0; c < 4; c++) {
                const struct le_block_q8_0 *y = yc[c];
                __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
                __m256i y1 =
                    _mm256_loadu_si256((const __m256i *)y[i + 1].qs);
                a0[c] = _mm256_fmadd_ps(
                    _mm256_set1_ps(dx0 * h2f(y[i].d)),
                    _mm256_cvtepi32_ps(dot_i8_abs(ax0, x0, y0)), a0[c]);
                a1[c] = _mm256_fmadd_ps(
                    _mm256_set1_ps(dx1 * h2f(y[i + 1].d)),
                    _mm256_cvtepi32_ps(dot_i8_abs(ax1, x1, y1)), a1[c]);
            }
        }
        if (i < nb) {
            __m256i x0 = q4_0_unpack(x[i].qs);
            __m256i ax0 = _mm256_sign_epi8(x0, x0);
            float dx0 = h2f(x[i].d);
            for (int c = 0; c < 4; c++) {
                const struct le_block_q8_0 *y = yc[c];
                __m256i y0 = _mm256_loadu_si256((const __m256i *)y[i].qs);
                a0[c] = _mm256_fmadd_ps(
                    _mm256_set1_ps(dx0 * h2f(y[i].d)),
                    _mm256_cvtepi32_ps(dot_i8_abs(ax0, x0, y0)), a0[c]);
            }
        }
        for (int c = 0; c < m; c++)
            s[(size_t)(c0 + c) * bs] = hsum_ps(_mm256_add_ps(a0[c], a1[c]));
    }
}

/*
 * Q4_K/Q5_K: the 12 scale bytes unpacked to 8 scales (sc) with word-wide
 * masks, the same values as quants.c's k4_scale_min (j < 4: low 6 bits of
 * bytes j and j+4; j >= 4: the nibbles of bytes 8..11 with the top 2 bits
 * of bytes j-4 and j above them).  Returns sum_j mn[j] * (bsums[2j] +
 * bsums[2j+1]), exact in int32 (|pair| <= 2*16*128 fits int16, as Q8_K
 * blocks from our quantiser hold |q| <= 127).
 */
static inline int32_t
k4_scales(const uint8_t *scales, const int16_t *bsums, uint8_t sc[8])
{
    uint32_t u[4];
    memcpy(u, scales, 12);
    const uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    u[3] = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4); /* mn 4-7 */
    uint32_t mn03 = u[1] & k6;
    u[1] = (u[2] & k4) | (((u[0] >> 6) & k2) << 4); /* sc 4-7 */
    u[2] = mn03;
    u[0] &= k6;
    memcpy(sc, u, 8);
    __m128i bs0 = _mm_loadu_si128((const __m128i *)bsums);
    __m128i bs1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    __m128i pairs = _mm_hadd_epi16(bs0, bs1);
    __m128i mnv = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(u + 2)));
    __m128i ms = _mm_madd_epi16(pairs, mnv);
    ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, 0x4e));
    ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, 0xb1));
    return _mm_cvtsi128_si32(ms);
}

void
le_vec_dot_q4_K_q8_K_avx2(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q4_K *x = vx;
    const struct le_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    float sumf = 0;
    for (int i = 0; i < n / 256; i++) {
        uint8_t sc[8];
        int32_t msum = k4_scales(x[i].scales, y[i].bsums, sc);
        __m256i scv = _mm256_broadcastsi128_si256(
            _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
        __m256i acc = _mm256_setzero_si256();
        for (int jj = 0; jj < 4; jj++) {
            __m256i b =
                _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * jj));
            __m256i lo = _mm256_and_si256(b, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
            __m256i y0 = _mm256_loadu_si256(
                (const __m256i *)(y[i].qs + 64 * jj));
            __m256i y1 = _mm256_loadu_si256(
                (const __m256i *)(y[i].qs + 64 * jj + 32));
            /* unsigned nibbles x signed q8: pairs fit int16 (2*15*128) */
            __m256i p0 = _mm256_maddubs_epi16(lo, y0);
            __m256i p1 = _mm256_maddubs_epi16(hi, y1);
            p0 = _mm256_madd_epi16(p0, pick16(scv, 2 * jj));
            p1 = _mm256_madd_epi16(p1, pick16(scv, 2 * jj + 1));
            acc = _mm256_add_epi32(acc, _mm256_add_epi32(p0, p1));
        }
        int32_t isum = hsum_i32(acc);
        float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        sumf += y[i].d * (d * (float)isum) - y[i].d * (dmin * (float)msum);
    }
    *s = sumf;
}

void
le_vec_dot_q6_K_q8_K_avx2(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q6_K *x = vx;
    const struct le_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m3 = _mm256_set1_epi8(0x03);
    float sumf = 0;
    for (int i = 0; i < n / 256; i++) {
        const int8_t *sc = x[i].scales;
        /* q is stored + 32: subtract 32 * sum(sc * q8) at the end. */
        __m128i scs = _mm_loadu_si128((const __m128i *)sc);
        __m256i sc16 = _mm256_cvtepi8_epi16(scs);
        __m256i offv = _mm256_madd_epi16(
            sc16, _mm256_loadu_si256((const __m256i *)y[i].bsums));
        int32_t off = hsum_i32(offv); /* |sc * bsum| <= 128 * 4096 */
        /* the 8 scales of each half as int16, in both 128-bit lanes */
        __m256i sc8[2] = {
            _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16)),
            _mm256_broadcastsi128_si256(_mm256_extracti128_si256(sc16, 1)),
        };
        __m256i acc = _mm256_setzero_si256();
        for (int nn = 0; nn < 2; nn++) {
            const uint8_t *ql = x[i].ql + 64 * nn, *qh = x[i].qh + 32 * nn;
            const int8_t *q8 = y[i].qs + 128 * nn;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i h = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(
                _mm256_and_si256(l0, m4),
                _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
            q[1] = _mm256_or_si256(
                _mm256_and_si256(l1, m4),
                _mm256_slli_epi16(
                    _mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
            q[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_slli_epi16(
                    _mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
            q[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                _mm256_slli_epi16(
                    _mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
            for (int k = 0; k < 4; k++) {
                __m256i yy =
                    _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
                /* q in 0..63 unsigned x q8: pairs fit int16 (2*63*128) */
                __m256i p = _mm256_maddubs_epi16(q[k], yy);
                /* scale 2k on the low 16 values, 2k+1 on the high 16 */
                __m256i scv = _mm256_shuffle_epi8(
                    sc8[nn], _mm256_load_si256((const __m256i *)q6_pick[k]));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scv));
            }
        }
        int32_t isum = hsum_i32(acc) - 32 * off;
        float d = h2f(x[i].d);
        sumf += y[i].d * (d * (float)isum) - y[i].d * (0.0f * (float)0);
    }
    *s = sumf;
}

struct le_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
_Static_assert(sizeof(struct le_block_q5_K) == 176, "as in quants.c");

void
le_vec_dot_q5_K_q8_K_avx2(int n, float *s, const void *vx, const void *vy)
{
    const struct le_block_q5_K *x = vx;
    const struct le_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i one = _mm256_set1_epi8(1);
    float sumf = 0;
    for (int i = 0; i < n / 256; i++) {
        uint8_t sc[8];
        int32_t msum = k4_scales(x[i].scales, y[i].bsums, sc);
        __m256i scv = _mm256_broadcastsi128_si256(
            _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
        __m256i h = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i acc = _mm256_setzero_si256();
        for (int jj = 0; jj < 4; jj++) {
            __m256i b =
                _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * jj));
            /* 5th bits: qh bit 2jj for the low nibbles, 2jj+1 for high;
             * each is 0/1 in its byte, so the <<4 stays in the byte. */
            __m256i h0 = _mm256_slli_epi16(
                _mm256_and_si256(_mm256_srli_epi16(h, 2 * jj), one), 4);
            __m256i h1 = _mm256_slli_epi16(
                _mm256_and_si256(_mm256_srli_epi16(h, 2 * jj + 1), one), 4);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(b, m4), h0);
            __m256i hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(b, 4), m4), h1);
            __m256i y0 = _mm256_loadu_si256(
                (const __m256i *)(y[i].qs + 64 * jj));
            __m256i y1 = _mm256_loadu_si256(
                (const __m256i *)(y[i].qs + 64 * jj + 32));
            /* 0..31 x q8: pairs fit int16 (2*31*128) */
            __m256i p0 = _mm256_maddubs_epi16(lo, y0);
            __m256i p1 = _mm256_maddubs_epi16(hi, y1);
            p0 = _mm256_madd_epi16(p0, pick16(scv, 2 * jj));
            p1 = _mm256_madd_epi16(p1, pick16(scv, 2 * jj + 1));
            acc = _mm256_add_epi32(acc, _mm256_add_epi32(p0, p1));
        }
        int32_t isum = hsum_i32(acc);
        float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        sumf += y[i].d * (d * (float)isum) - y[i].d * (dmin * (float)msum);
    }
    *s = sumf;
}

/* F16: products of two halves are exact in float and the plain C twin
 * sums them in double; so does this one (in another order: equal to the
 * last bit whenever the double sum is exact, i.e. for values of normal
 * magnitude; otherwise within a double rounding). */
void
le_vec_dot_f16_f16_avx2(int n, float *s, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xf = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        __m256 yf = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
        __m256 p = _mm256_mul_ps(xf, yf);
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
    }
    __m256d a = _mm256_add_pd(acc0, acc1);
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(a),
                           _mm256_extractf128_pd(a, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
    for (; i < n; i++)
        sum += (double)h2f(x[i]) * (double)h2f(y[i]);
    *s = (float)sum;
}

/*
 * F32 (F32 weights such as stories260K's, against F32 activations): as the
 * plain C twin, each product is formed exactly in double (24-bit
 * mantissas) and summed in double, but in 4 lanes x 4 accumulators rather
 * than one serial chain (which cost ~4 cycles an element); only the order
 * of the double additions differs, so the float result is the same but
 * for rare ties, and within 1e-6 of sum |x_i y_i| always.
 */
static inline __m256d
ps_lo_pd(__m256 v)
{
    return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}

static inline __m256d
ps_hi_pd(__m256 v)
{
    return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}

void
le_vec_dot_f32_f32_avx2(int n, float *s, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    __m256d a2 = _mm256_setzero_pd(), a3 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), y0 = _mm256_loadu_ps(y + i);
        __m256 x1 = _mm256_loadu_ps(x + i + 8);
        __m256 y1 = _mm256_loadu_ps(y + i + 8);
        a0 = _mm256_fmadd_pd(ps_lo_pd(x0), ps_lo_pd(y0), a0);
        a1 = _mm256_fmadd_pd(ps_hi_pd(x0), ps_hi_pd(y0), a1);
        a2 = _mm256_fmadd_pd(ps_lo_pd(x1), ps_lo_pd(y1), a2);
        a3 = _mm256_fmadd_pd(ps_hi_pd(x1), ps_hi_pd(y1), a3);
    }
    __m256d a = _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3));
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(a),
                           _mm256_extractf128_pd(a, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
    for (; i < n; i++)
        sum += (double)x[i] * (double)y[i];
    *s = (float)sum;
}

/* Exact conversion, as the plain C twin. */
void
le_f16_to_float_avx2(const void *vx, float *y, int64_t k)
{
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                    (const __m128i *)(x + i))));
    for (; i < k; i++)
        y[i] = h2f(x[i]);
}

/* ------------------------------------------------------------------ */
/* Repacked weights (repack.c draws the layouts): a group of 16 rows as
 * two halves of 8 rows, one row per 32-bit lane.  Same integer sums and
 * float steps as the plain C twins in repack.c (bit-identical results).
 *
 * Q4_0 and Q4_K: vpmaddubsw (nibble x int8, pairs <= 2*15*128 = 3840)
 * summed in int16 over the 8 products of a lane's chunks (<= 30720, so
 * the saturating vpaddsw used for them never saturates: unlike a plain
 * add GCC does not reassociate it into a tree of live terms, which
 * spilled), then vpmaddwd into int32 (with ones, or with the row's
 * scale in both halves of its lane for Q4_K).  Q8_0: the sign trick of
 * dot_i8 per chunk (pairs <= 2*128*127; our quantiser never writes -128
 * into an activation), one vpmaddwd per chunk.  Up to 2 tokens share the
 * unpacked weights (Q4_0, Q8_0; registers allow no more in 16 YMM), one
 * for Q4_K. */

static inline __m256i
bc32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline void
store8(float *y, __m256 v, int n)
{
    if (n >= 8) {
        _mm256_storeu_ps(y, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (int i = 0; i < n; i++)
        y[i] = tmp[i];
}

static inline void
store16(float *y, __m256 v0, __m256 v1, int nr)
{
    store8(y, v0, nr);
    if (nr > 8)
        store8(y + 8, v1, nr - 8);
}

/* A decode kernel's share of the next group (le_pf_share) for block b,
 * into L2. */
static inline __attribute__((always_inline)) void
pf_block(struct le_pf pf, int b)
{
    for (size_t o = 0; pf.p && o < pf.step; o += 64)
        _mm_prefetch((const char *)(pf.p + (size_t)b * pf.step + o),
                     _MM_HINT_T1);
}

struct pk_q8_0 {
    uint16_t d;
    int8_t qs[32];
};

/* Q4_0 (Q8 = 0), Q8_0 (Q8 = 1) and MXFP4 (Q8 = 2: its codes' values by a
 * byte shuffle, then Q8_0's sign trick: pairs <= 2*12*128, eight of them
 * <= 24576 in int16): the integer sums of a block per token and half,
 * then the plain C twin's float steps.  NH halves of 8
 * rows from half h0 (both: 16 rows) against NT tokens from t0, NT * NH <=
 * 4: 16 rows x 1-2 tokens stream the group once (generation), 8 rows x 4
 * tokens (prompt batches) make each weight load and unpack serve 4
 * tokens (16 x 4 would need 16 accumulators and 16 sums: more than the
 * 16 YMM registers).  The int16 sums of Q4_0 take vpaddw, a chain per
 * accumulator: exact below 30720 as said above, and on 3 ports where
 * vpaddsw has 2 beside vpmaddubsw's (Q4_0 2048 x 5632 x 128 tokens, one
 * core: 1.11-1.17x with 8 x 4 over 16 x 2 and vpaddsw). */
static inline __attribute__((always_inline)) void
plegacy_tile(int nb, const uint8_t *qs, const uint16_t *dw,
             const struct le_pack_act *a, int t0, const int NT, int h0,
             const int NH, float *y, size_t ys, int nr, const int Q8,
             struct le_pf pf, const int L1)
{
    const size_t col = Q8 == 1 ? 512 : 256;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i lut = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)le_mxfp4_values));
    const struct pk_q8_0 *x[4];
    const struct le_prep_q8_0 *p[4];
    __m256 acc[4][2];
    UNROLL
    for (int t = 0; t < NT; t++) {
        x[t] = (const void *)(a->q + (size_t)(t0 + t) * a->q_row);
        p[t] = (const void *)(a->p + (size_t)(t0 + t) * a->p_row);
        UNROLL
        for (int k = 0; k < NH; k++)
            acc[t][k] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const uint8_t *wb = qs + (size_t)b * col + 32 * h0;
        __m256i si[4][2];
        UNROLL
        for (int t = 0; t < NT; t++)
            UNROLL
            for (int k = 0; k < NH; k++)
                si[t][k] = _mm256_setzero_si256();
        /* the decode kernel's share of the next group, into L2 */
        pf_block(pf, b);
        UNROLL
        for (int c = 0; c < (int)col / 64; c++) {
            if (NH == 2 && L1)
                _mm_prefetch((const char *)(wb + 4 * col + 64 * c),
                             _MM_HINT_T0);
            UNROLL
            for (int k = 0; k < NH; k++) {
                __m256i v = _mm256_load_si256(
                    (const __m256i *)(wb + 64 * c + 32 * k));
                if (Q8 == 2) { /* int16 sums, widened after the block */
                    __m256i lo = _mm256_shuffle_epi8(
                        lut, _mm256_and_si256(v, m4));
                    __m256i hi = _mm256_shuffle_epi8(
                        lut,
                        _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                    __m256i alo = _mm256_sign_epi8(lo, lo),
                            ahi = _mm256_sign_epi8(hi, hi);
                    UNROLL
                    for (int t = 0; t < NT; t++) {
                        const int8_t *q = x[t][b].qs + 4 * c;
                        si[t][k] = _mm256_add_epi16(
                            si[t][k],
                            _mm256_maddubs_epi16(
                                alo, _mm256_sign_epi8(bc32(q), lo)));
                        __asm__("" : "+x"(si[t][k]));
                        si[t][k] = _mm256_add_epi16(
                            si[t][k],
                            _mm256_maddubs_epi16(
                                ahi, _mm256_sign_epi8(bc32(q + 16), hi)));
                        __asm__("" : "+x"(si[t][k]));
                    }
                } else if (Q8) {
                    __m256i av = _mm256_sign_epi8(v, v);
                    UNROLL
                    for (int t = 0; t < NT; t++) {
                        __m256i sy =
                            _mm256_sign_epi8(bc32(x[t][b].qs + 4 * c), v);
                        si[t][k] = _mm256_add_epi32(
                            si[t][k], _mm256_madd_epi16(
                                          _mm256_maddubs_epi16(av, sy), ones));
                        /* keep the adds a chain per accumulator (GCC
                         * otherwise reassociates them into a tree of
                         * live terms that spills) */
                        __asm__("" : "+x"(si[t][k]));
                    }
                } else { /* int16 sums, widened after the block */
                    __m256i lo = _mm256_and_si256(v, m4);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    UNROLL
                    for (int t = 0; t < NT; t++) {
                        const int8_t *q = x[t][b].qs + 4 * c;
                        si[t][k] = _mm256_add_epi16(
                            si[t][k], _mm256_maddubs_epi16(lo, bc32(q)));
                        __asm__("" : "+x"(si[t][k]));
                        si[t][k] = _mm256_add_epi16(
                            si[t][k], _mm256_maddubs_epi16(hi, bc32(q + 16)));
                        __asm__("" : "+x"(si[t][k]));
                    }
                }
            }
        }
        UNROLL
        for (int k = 0; k < NH; k++) {
            __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(
                (const __m128i *)(dw + (size_t)b * 16 + 8 * (h0 + k))));
            UNROLL
            for (int t = 0; t < NT; t++) {
                __m256i s = si[t][k];
                if (!Q8)
                    s = _mm256_add_epi32(_mm256_madd_epi16(s, ones),
                                         _mm256_set1_epi32(p[t][b].neg8));
                else if (Q8 == 2)
                    s = _mm256_madd_epi16(s, ones);
                __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s), dv);
                f = _mm256_mul_ps(f, _mm256_set1_ps(p[t][b].d));
                acc[t][k] = _mm256_add_ps(acc[t][k], f);
            }
        }
    }
    UNROLL
    for (int t = 0; t < NT; t++)
        UNROLL
        for (int k = 0; k < NH; k++)
            store8(y + (size_t)(t0 + t) * ys + 8 * (h0 + k), acc[t][k],
                   nr - 8 * (h0 + k));
}

/* 4 tokens a weight load (in halves), the last 1-3 as 16 x 2 and 16 x 1
 * (the Q8_0 chains: 37 -> 44-47 GMAC/s on one core at 16 x 2 over 16 x
 * 1, 2048 x 2048 x 128 tokens).  pf (the decode kernel): the passes
 * fetch pf_len bytes from pf into L2 meanwhile, each its share. */
static inline __attribute__((always_inline)) void
plegacy_gemm_pf(int n, const void *w, const struct le_pack_act *a, int ntok,
                float *y, size_t ys, int nr, const int Q8, const uint8_t *pf,
                size_t pf_len, const int L1)
{
    int nb = n / 32;
    const uint8_t *qs = w;
    const uint16_t *dw =
        (const uint16_t *)(qs + (size_t)nb * (Q8 == 1 ? 512 : 256));
    int t4 = ntok & ~3, t, h, i = 0;
    int nh = nr > 8 ? 2 : 1;
    int np = nh * (t4 / 4) + (ntok - t4) / 2 + (ntok - t4) % 2;
    for (h = 0; h < nh && t4 > 0; h++)
        for (t = 0; t < t4; t += 4, i++)
            plegacy_tile(nb, qs, dw, a, t, 4, h, 1, y, ys, nr, Q8,
                         le_pf_share(pf, pf_len, i, np, nb), L1);
    for (t = t4; t + 2 <= ntok; t += 2, i++)
        plegacy_tile(nb, qs, dw, a, t, 2, 0, 2, y, ys, nr, Q8,
                     le_pf_share(pf, pf_len, i, np, nb), L1);
    for (; t < ntok; t++, i++)
        plegacy_tile(nb, qs, dw, a, t, 1, 0, 2, y, ys, nr, Q8,
                     le_pf_share(pf, pf_len, i, np, nb), L1);
}

static inline __attribute__((always_inline)) void
plegacy_gemm(int n, const void *w, const struct le_pack_act *a, int ntok,
             float *y, size_t ys, int nr, const int Q8)
{
    plegacy_gemm_pf(n, w, a, ntok, y, ys, nr, Q8, NULL, 0, 1);
}

void
le_gemm_q4_0_avx2(int n, const void *w, const struct le_pack_act *a,
                  int ntok, float *y, size_t ys, int nr)
{
    plegacy_gemm(n, w, a, ntok, y, ys, nr, 0);
}

void
le_gemm_q8_0_avx2(int n, const void *w, const struct le_pack_act *a,
                  int ntok, float *y, size_t ys, int nr)
{
    plegacy_gemm(n, w, a, ntok, y, ys, nr, 1);
}

void
le_gemm_mxfp4_avx2(int n, const void *w, const struct le_pack_act *a,
                   int ntok, float *y, size_t ys, int nr)
{
    plegacy_gemm(n, w, a, ntok, y, ys, nr, 2);
}

/* The decode kernel of Q4_0 and Q8_0 at this level (le_gemv_at): a run
 * of groups, each as le_gemm_* computes it (the same tiles, so the same
 * floats), fetching the next group into L2 while it computes one, as the
 * AVX-512 one does (quants_avx512.c dec_groups; past the last group it
 * fetches whatever follows, which cannot fault).  _l1 keeps the tiles'
 * lookahead of 4 blocks into L1, the others leave that to the hardware
 * (gemv.c picks the plan per CPU). */
static inline __attribute__((always_inline)) void
plegacy_gemv(int n, const void *w, size_t gb, int ng,
             const struct le_pack_act *a, int ntok, float *y, size_t ys,
             int nr_last, const int Q8, const int L1)
{
    const uint8_t *wp = w;
    for (int g = 0; g < ng; g++)
        plegacy_gemm_pf(n, wp + (size_t)g * gb, a, ntok, y + 16 * g, ys,
                        g + 1 == ng ? nr_last : 16, Q8,
                        wp + (size_t)(g + 1) * gb, gb, L1);
}

void
le_gemv_q4_0_avx2_l1(int n, const void *w, size_t gb, int ng,
                     const struct le_pack_act *a, int ntok, float *y,
                     size_t ys, int nr_last)
{
    plegacy_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 0, 1);
}

void
le_gemv_q8_0_avx2_l1(int n, const void *w, size_t gb, int ng,
                     const struct le_pack_act *a, int ntok, float *y,
                     size_t ys, int nr_last)
{
    plegacy_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 1, 1);
}

void
le_gemv_q4_0_avx2(int n, const void *w, size_t gb, int ng,
                  const struct le_pack_act *a, int ntok, float *y, size_t ys,
                  int nr_last)
{
    plegacy_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 0, 0);
}

void
le_gemv_q8_0_avx2(int n, const void *w, size_t gb, int ng,
                  const struct le_pack_act *a, int ntok, float *y, size_t ys,
                  int nr_last)
{
    plegacy_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 1, 0);
}

void
le_gemv_mxfp4_avx2(int n, const void *w, size_t gb, int ng,
                   const struct le_pack_act *a, int ntok, float *y,
                   size_t ys, int nr_last)
{
    plegacy_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 2, 0);
}

void
le_gemv_mxfp4_avx2_l1(int n, const void *w, size_t gb, int ng,
                      const struct le_pack_act *a, int ntok, float *y,
                      size_t ys, int nr_last)
{
    plegacy_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 2, 1);
}

/* 8 row scales (bytes) in both int16 halves of each lane. */
static inline __m256i
scale_pairs8(const uint8_t *sc)
{
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc));
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

static inline __m256i
shift16x(__m256i v, const int sh)
{
    return sh > 0 ? _mm256_slli_epi16(v, sh)
           : sh < 0 ? _mm256_srli_epi16(v, -sh)
                    : v;
}

/* Q4_K and Q5_K (Q5: the 5th bits as in quants_avx512.c, int16 sums over
 * 4 chunks): NH halves of 8 rows from h0 against NT tokens, NT * NH <= 4,
 * as plegacy_tile (16 x 1-2 for generation, 8 x 4 for prompt batches;
 * the int16 sums on vpaddw chains). */
static inline __attribute__((always_inline)) void
pk4_tile(int nsb, const uint8_t *qs, const uint8_t *meta, const uint8_t *qhs,
         const struct le_pack_act *a, int t0, const int NT, int h0,
         const int NH, float *y, size_t ys, int nr, const int Q5,
         const int L1, struct le_pf pf)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    const struct le_block_q8_K *x[4];
    const int32_t *p[4];
    __m256 acc[4][2];
    UNROLL
    for (int t = 0; t < NT; t++) {
        x[t] = (const void *)(a->q + (size_t)(t0 + t) * a->q_row);
        p[t] = (const void *)(a->p + (size_t)(t0 + t) * a->p_row);
        UNROLL
        for (int k = 0; k < NH; k++)
            acc[t][k] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nsb; b++) {
        const uint8_t *mb = meta + (size_t)b * LE_PACK_Q4_K_META;
        __m256i isum[4][2], msum[4][2];
        /* the decode kernel's share of the next group, into L2 */
        pf_block(pf, b);
        UNROLL
        for (int t = 0; t < NT; t++)
            UNROLL
            for (int k = 0; k < NH; k++)
                isum[t][k] = msum[t][k] = _mm256_setzero_si256();
        UNROLL
        for (int jj = 0; jj < 4; jj++) {
            const uint8_t *wj =
                qs + (size_t)b * 2048 + (size_t)jj * 512 + 32 * h0;
            __m256i plo[4][2], phi[4][2], hb[2];
            UNROLL
            for (int t = 0; t < NT; t++)
                UNROLL
                for (int k = 0; k < NH; k++)
                    plo[t][k] = phi[t][k] = _mm256_setzero_si256();
            hb[0] = hb[1] = _mm256_setzero_si256();
            UNROLL
            for (int c = 0; c < 8; c++) {
                if (NT == 1 && L1)
                    _mm_prefetch((const char *)(wj + 64 * c + 4096),
                                 _MM_HINT_T0);
                const int i = c & 3;
                UNROLL
                for (int k = 0; k < NH; k++) {
                    __m256i v = _mm256_load_si256(
                        (const __m256i *)(wj + 64 * c + 32 * k));
                    __m256i lo = _mm256_and_si256(v, m4);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    if (Q5) {
                        if (i == 0)
                            hb[k] = _mm256_load_si256(
                                (const __m256i *)(qhs + (size_t)b * 512 +
                                                  (size_t)(jj * 2 + c / 4) *
                                                      64 +
                                                  32 * (h0 + k)));
                        lo = _mm256_or_si256(
                            lo,
                            _mm256_and_si256(shift16x(hb[k], 4 - 2 * i), b4));
                        hi = _mm256_or_si256(
                            hi,
                            _mm256_and_si256(shift16x(hb[k], 3 - 2 * i), b4));
                    }
                    UNROLL
                    for (int t = 0; t < NT; t++) {
                        const int8_t *q = x[t][b].qs + 64 * jj + 4 * c;
                        plo[t][k] = _mm256_add_epi16(
                            plo[t][k], _mm256_maddubs_epi16(lo, bc32(q)));
                        __asm__("" : "+x"(plo[t][k]));
                        phi[t][k] = _mm256_add_epi16(
                            phi[t][k], _mm256_maddubs_epi16(hi, bc32(q + 32)));
                        __asm__("" : "+x"(phi[t][k]));
                    }
                }
                if (c == 7 || (Q5 && c == 3)) {
                    UNROLL
                    for (int k = 0; k < NH; k++) {
                        const uint8_t *sc = mb + 64 + 8 * (h0 + k);
                        __m256i s0 = scale_pairs8(sc + (2 * jj) * 16);
                        __m256i s1 = scale_pairs8(sc + (2 * jj + 1) * 16);
                        UNROLL
                        for (int t = 0; t < NT; t++) {
                            isum[t][k] = _mm256_add_epi32(
                                isum[t][k],
                                _mm256_add_epi32(
                                    _mm256_madd_epi16(plo[t][k], s0),
                                    _mm256_madd_epi16(phi[t][k], s1)));
                            plo[t][k] = phi[t][k] = _mm256_setzero_si256();
                        }
                    }
                }
            }
        }
        UNROLL
        for (int q = 0; q < 4; q++)
            UNROLL
            for (int k = 0; k < NH; k++) {
                __m256i mn = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                    (const __m128i *)(mb + 192 + 32 * q + 16 * (h0 + k))));
                UNROLL
                for (int t = 0; t < NT; t++)
                    msum[t][k] = _mm256_add_epi32(
                        msum[t][k],
                        _mm256_madd_epi16(mn,
                                          _mm256_set1_epi32(p[t][4 * b + q])));
            }
        UNROLL
        for (int k = 0; k < NH; k++) {
            __m256 dv = _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(mb + 16 * (h0 + k))));
            __m256 dm = _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(mb + 32 + 16 * (h0 + k))));
            UNROLL
            for (int t = 0; t < NT; t++) {
                __m256 yd = _mm256_set1_ps(x[t][b].d);
                __m256 f1 = _mm256_mul_ps(
                    yd, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(isum[t][k])));
                __m256 f2 = _mm256_mul_ps(
                    yd, _mm256_mul_ps(dm, _mm256_cvtepi32_ps(msum[t][k])));
                acc[t][k] = _mm256_add_ps(acc[t][k], _mm256_sub_ps(f1, f2));
            }
        }
    }
    UNROLL
    for (int t = 0; t < NT; t++)
        UNROLL
        for (int k = 0; k < NH; k++)
            store8(y + (size_t)(t0 + t) * ys + 8 * (h0 + k), acc[t][k],
                   nr - 8 * (h0 + k));
}

/* pf (the decode kernel): the passes fetch pf_len bytes from pf into L2
 * meanwhile, each its share (as plegacy_gemm_pf). */
static inline __attribute__((always_inline)) void
pk4_gemm_pf(int n, const void *w, const struct le_pack_act *a, int ntok,
            float *y, size_t ys, int nr, const int Q5, const int L1,
            const uint8_t *pf, size_t pf_len)
{
    int nsb = n / 256;
    const uint8_t *qs = w;
    const uint8_t *meta = qs + (size_t)nsb * 2048;
    const uint8_t *qhs = meta + (size_t)nsb * LE_PACK_Q4_K_META;
    int t4 = ntok & ~3, t, i = 0;
    int nh = nr > 8 ? 2 : 1;
    int np = nh * (t4 / 4) + (ntok - t4) / 2 + (ntok - t4) % 2;
    for (int h = 0; h < nh && t4 > 0; h++)
        for (t = 0; t < t4; t += 4, i++)
            pk4_tile(nsb, qs, meta, qhs, a, t, 4, h, 1, y, ys, nr, Q5, L1,
                     le_pf_share(pf, pf_len, i, np, nsb));
    for (t = t4; t + 2 <= ntok; t += 2, i++)
        pk4_tile(nsb, qs, meta, qhs, a, t, 2, 0, 2, y, ys, nr, Q5, L1,
                 le_pf_share(pf, pf_len, i, np, nsb));
    if (t < ntok)
        pk4_tile(nsb, qs, meta, qhs, a, t, 1, 0, 2, y, ys, nr, Q5, L1,
                 le_pf_share(pf, pf_len, i, np, nsb));
}

static inline __attribute__((always_inline)) void
pk4_gemm(int n, const void *w, const struct le_pack_act *a, int ntok,
         float *y, size_t ys, int nr, const int Q5, const int L1)
{
    pk4_gemm_pf(n, w, a, ntok, y, ys, nr, Q5, L1, NULL, 0);
}

/* The decode kernel of Q4_K and Q5_K at this level: a run of groups, each
 * as le_gemm_q{4,5}_K_avx2[_l2] computes it, fetching the next group
 * into L2 meanwhile (as plegacy_gemv). */
static inline __attribute__((always_inline)) void
pk4_gemv(int n, const void *w, size_t gb, int ng, const struct le_pack_act *a,
         int ntok, float *y, size_t ys, int nr_last, const int Q5,
         const int L1)
{
    const uint8_t *wp = w;
    for (int g = 0; g < ng; g++)
        pk4_gemm_pf(n, wp + (size_t)g * gb, a, ntok, y + 16 * g, ys,
                    g + 1 == ng ? nr_last : 16, Q5, L1,
                    wp + (size_t)(g + 1) * gb, gb);
}

void
le_gemv_q4_K_avx2(int n, const void *w, size_t gb, int ng,
                  const struct le_pack_act *a, int ntok, float *y, size_t ys,
                  int nr_last)
{
    pk4_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 0, 0);
}

void
le_gemv_q4_K_avx2_l1(int n, const void *w, size_t gb, int ng,
                     const struct le_pack_act *a, int ntok, float *y,
                     size_t ys, int nr_last)
{
    pk4_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 0, 1);
}

void
le_gemv_q5_K_avx2(int n, const void *w, size_t gb, int ng,
                  const struct le_pack_act *a, int ntok, float *y, size_t ys,
                  int nr_last)
{
    pk4_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 1, 0);
}

void
le_gemv_q5_K_avx2_l1(int n, const void *w, size_t gb, int ng,
                     const struct le_pack_act *a, int ntok, float *y,
                     size_t ys, int nr_last)
{
    pk4_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 1, 1);
}

/* One-token passes fetch 4 KiB ahead into L1; the _l2 kernels leave that
 * to the hardware (the same floats; repack.c picks by
 * le_gemv_l1_prefetch: on a Zen 4 at this level the q4_k slice generated
 * 1.27-1.30x faster without it). */
void
le_gemm_q4_K_avx2(int n, const void *w, const struct le_pack_act *a,
                  int ntok, float *y, size_t ys, int nr)
{
    pk4_gemm(n, w, a, ntok, y, ys, nr, 0, 1);
}

void
le_gemm_q5_K_avx2(int n, const void *w, const struct le_pack_act *a,
                  int ntok, float *y, size_t ys, int nr)
{
    pk4_gemm(n, w, a, ntok, y, ys, nr, 1, 1);
}

void
le_gemm_q4_K_avx2_l2(int n, const void *w, const struct le_pack_act *a,
                     int ntok, float *y, size_t ys, int nr)
{
    pk4_gemm(n, w, a, ntok, y, ys, nr, 0, 0);
}

void
le_gemm_q5_K_avx2_l2(int n, const void *w, const struct le_pack_act *a,
                     int ntok, float *y, size_t ys, int nr)
{
    pk4_gemm(n, w, a, ntok, y, ys, nr, 1, 0);
}

/* Q6_K as quants_avx512.c, 8 rows a half: vpmaddwd in place of
 * vpdpwssd. */
static inline __attribute__((always_inline)) void
q6k_gemm_pf(int n, const void *w, const struct le_pack_act *a, int ntok,
            float *y, size_t ys, int nr, const uint8_t *pf, size_t pf_len)
{
    int nsb = n / 256;
    const uint8_t *ql = w;
    const uint8_t *qh = ql + (size_t)nsb * 2048;
    const uint8_t *meta = qh + (size_t)nsb * 1024;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i pick_even = _mm256_setr_epi8(
        0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5,
        4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i pick_odd = _mm256_setr_epi8(
        2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2, 3, 2, 3,
        6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
    for (int t = 0; t < ntok; t++) {
        const struct le_block_q8_K *x =
            (const void *)(a->q + (size_t)t * a->q_row);
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        /* the decode kernel: this token's share of the next group */
        struct le_pf ps = le_pf_share(pf, pf_len, t, ntok, nsb);
        for (int b = 0; b < nsb; b++) {
            const uint8_t *mb = meta + (size_t)b * LE_PACK_Q6_K_META;
            __m256i isum[2], off[2];
            pf_block(ps, b);
            isum[0] = isum[1] = off[0] = off[1] = _mm256_setzero_si256();
            UNROLL
            for (int jj = 0; jj < 4; jj++) {
                __m256i yl = bc32(x[b].bsums + 4 * jj);
                __m256i yh = bc32(x[b].bsums + 4 * jj + 2);
                UNROLL
                for (int h = 0; h < 2; h++) {
                    __m256i pl = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                        (const __m128i *)(mb + 32 * (2 * jj) + 16 * h)));
                    __m256i ph = _mm256_cvtepi8_epi16(_mm_loadu_si128(
                        (const __m128i *)(mb + 32 * (2 * jj + 1) + 16 * h)));
                    off[h] = _mm256_add_epi32(
                        off[h], _mm256_add_epi32(_mm256_madd_epi16(pl, yl),
                                                 _mm256_madd_epi16(ph, yh)));
                    UNROLL
                    for (int cp = 0; cp < 4; cp++) {
                        __m256i hv = _mm256_load_si256(
                            (const __m256i *)(qh + (size_t)b * 1024 +
                                              (size_t)(jj * 4 + cp) * 64 +
                                              32 * h));
                        __m256i plo = _mm256_setzero_si256();
                        __m256i phi = _mm256_setzero_si256();
                        UNROLL
                        for (int i = 0; i < 2; i++) {
                            int c = 2 * cp + i;
                            const uint8_t *wc = ql + (size_t)b * 2048 +
                                                (size_t)(jj * 8 + c) * 64 +
                                                32 * h;
                            _mm_prefetch((const char *)(wc + 4096),
                                         _MM_HINT_T0);
                            __m256i v = _mm256_load_si256((const __m256i *)wc);
                            __m256i lo = _mm256_or_si256(
                                _mm256_and_si256(v, m4),
                                _mm256_and_si256(shift16x(hv, 4 - 4 * i),
                                                 m30));
                            __m256i hi = _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                _mm256_and_si256(shift16x(hv, 2 - 4 * i),
                                                 m30));
                            const int8_t *q = x[b].qs + 64 * jj + 4 * c;
                            plo = _mm256_adds_epi16(
                                plo, _mm256_maddubs_epi16(lo, bc32(q)));
                            phi = _mm256_adds_epi16(
                                phi, _mm256_maddubs_epi16(hi, bc32(q + 32)));
                        }
                        __m256i slo = _mm256_shuffle_epi8(
                            pl, cp < 2 ? pick_even : pick_odd);
                        __m256i shi = _mm256_shuffle_epi8(
                            ph, cp < 2 ? pick_even : pick_odd);
                        isum[h] = _mm256_add_epi32(
                            isum[h],
                            _mm256_add_epi32(_mm256_madd_epi16(plo, slo),
                                             _mm256_madd_epi16(phi, shi)));
                    }
                }
            }
            __m256 yd = _mm256_set1_ps(x[b].d);
            UNROLL
            for (int h = 0; h < 2; h++) {
                __m256i si = _mm256_sub_epi32(isum[h],
                                              _mm256_slli_epi32(off[h], 5));
                __m256 dv = _mm256_cvtph_ps(
                    _mm_loadu_si128((const __m128i *)(mb + 256 + 16 * h)));
                __m256 f1 = _mm256_mul_ps(
                    yd, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(si)));
                __m256 f2 = _mm256_mul_ps(yd, _mm256_setzero_ps());
                acc[h] = _mm256_add_ps(acc[h], _mm256_sub_ps(f1, f2));
            }
        }
        store16(y + (size_t)t * ys, acc[0], acc[1], nr);
    }
}

void
le_gemm_q6_K_avx2(int n, const void *w, const struct le_pack_act *a,
                  int ntok, float *y, size_t ys, int nr)
{
    q6k_gemm_pf(n, w, a, ntok, y, ys, nr, NULL, 0);
}

/* The decode kernel of Q6_K at this level: as pk4_gemv (the one-token
 * pass's own 4 KiB lookahead into L1 stays: no _l1 twin). */
void
le_gemv_q6_K_avx2(int n, const void *w, size_t gb, int ng,
                  const struct le_pack_act *a, int ntok, float *y, size_t ys,
                  int nr_last)
{
    const uint8_t *wp = w;
    for (int g = 0; g < ng; g++)
        q6k_gemm_pf(n, wp + (size_t)g * gb, a, ntok, y + 16 * g, ys,
                    g + 1 == ng ? nr_last : 16, wp + (size_t)(g + 1) * gb,
                    gb);
}

/* F16 / BF16 as quants_avx512.c: 16 rows in 4 double lanes x 4. */
static inline __attribute__((always_inline)) void
phalf_gemm(int n, const void *w, const struct le_pack_act *a, int ntok,
           float *y, size_t ys, int nr, const int BF)
{
    const uint16_t *hw = w;
    for (int t = 0; t < ntok; t++) {
        const float *x = (const void *)(a->p + (size_t)t * a->p_row);
        __m256d d[4];
        UNROLL
        for (int i = 0; i < 4; i++)
            d[i] = _mm256_setzero_pd();
        for (int j = 0; j < n; j++) {
            _mm_prefetch((const char *)(hw + (size_t)j * 16 + 1024),
                         _MM_HINT_T0);
            UNROLL
            for (int h = 0; h < 2; h++) {
                __m128i raw = _mm_load_si128(
                    (const __m128i *)(hw + (size_t)j * 16 + 8 * h));
                __m256 wf = BF ? _mm256_castsi256_ps(_mm256_slli_epi32(
                                     _mm256_cvtepu16_epi32(raw), 16))
                               : _mm256_cvtph_ps(raw);
                __m256d wl = _mm256_cvtps_pd(_mm256_castps256_ps128(wf));
                __m256d wh = _mm256_cvtps_pd(_mm256_extractf128_ps(wf, 1));
                if (BF) {
                    __m256d xv = _mm256_set1_pd((double)x[j]);
                    d[2 * h] = _mm256_add_pd(d[2 * h], _mm256_mul_pd(wl, xv));
                    d[2 * h + 1] =
                        _mm256_add_pd(d[2 * h + 1], _mm256_mul_pd(wh, xv));
                } else {
                    __m256 p = _mm256_mul_ps(wf, _mm256_set1_ps(x[j]));
                    d[2 * h] = _mm256_add_pd(d[2 * h], ps_lo_pd(p));
                    d[2 * h + 1] = _mm256_add_pd(d[2 * h + 1], ps_hi_pd(p));
                }
            }
        }
        __m256 r0 = _mm256_set_m128(_mm256_cvtpd_ps(d[1]),
                                    _mm256_cvtpd_ps(d[0]));
        __m256 r1 = _mm256_set_m128(_mm256_cvtpd_ps(d[3]),
                                    _mm256_cvtpd_ps(d[2]));
        store16(y + (size_t)t * ys, r0, r1, nr);
    }
}

void
le_gemm_f16_avx2(int n, const void *w, const struct le_pack_act *a,
                 int ntok, float *y, size_t ys, int nr)
{
    phalf_gemm(n, w, a, ntok, y, ys, nr, 0);
}

void
le_gemm_bf16_avx2(int n, const void *w, const struct le_pack_act *a,
                  int ntok, float *y, size_t ys, int nr)
{
    phalf_gemm(n, w, a, ntok, y, ys, nr, 1);
}

/* Activation quantisers, bit-identical to quants.c's (the reasoning is in
 * quants_avx512.c). */

static inline __m256
clamp127x(__m256 v)
{
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)),
                         _mm256_set1_ps(127.0f));
}

static inline __m256
absmax0x(__m256 v, __m256 m)
{
    __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    return _mm256_max_ps(_mm256_max_ps(a, _mm256_setzero_ps()), m);
}

static inline float
hmax_ps(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v),
                          _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 int32 (in -127..127) to 8 bytes. */
static inline void
store_i8x8(int8_t *dst, __m256i q)
{
    __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(q),
                                _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64((__m128i *)dst, _mm_packs_epi16(p, p));
}

void
le_quantize_q8_0_avx2(const float *x, void *vy, int64_t k)
{
    struct le_block_q8_0 *y = vy;
    const __m256 half = _mm256_set1_ps(0.49999997f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < k / 32; i++) {
        __m256 v[4], m = _mm256_setzero_ps();
        UNROLL
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(x + 32 * i + 8 * j);
            m = absmax0x(v[j], m);
        }
        float amax = hmax_ps(m);
        float d = amax / 127;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = le_fp32_to_fp16(d);
        __m256 idv = _mm256_set1_ps(id);
        UNROLL
        for (int j = 0; j < 4; j++) {
            __m256 s = _mm256_mul_ps(v[j], idv);
            __m256 c = _mm256_or_ps(half, _mm256_and_ps(s, sign));
            __m256 r = clamp127x(_mm256_add_ps(s, c));
            store_i8x8(y[i].qs + 8 * j, _mm256_cvttps_epi32(r));
        }
    }
}

void
le_quantize_q8_K_avx2(const float *x, void *vy, int64_t k)
{
    struct le_block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < k / 256; i++) {
        const float *xb = x + 256 * i;
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < 32; j++)
            m = absmax0x(_mm256_loadu_ps(xb + 8 * j), m);
        float amax = hmax_ps(m);
        if (amax == 0) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float max = 0;
        __m256 av = _mm256_set1_ps(amax);
        for (int j = 0; j < 32; j++) {
            int e = _mm256_movemask_ps(_mm256_cmp_ps(
                _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * j)), av,
                _CMP_EQ_OQ));
            if (e) {
                max = xb[8 * j + __builtin_ctz((unsigned)e)];
                break;
            }
        }
        float iscale = -127.f / max;
        __m256 is = _mm256_set1_ps(iscale);
        for (int j = 0; j < 16; j++) {
            __m256i q[2];
            UNROLL
            for (int h = 0; h < 2; h++) {
                __m256 v = _mm256_round_ps(
                    _mm256_mul_ps(is, _mm256_loadu_ps(xb + 16 * j + 8 * h)),
                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[h] = _mm256_cvttps_epi32(clamp127x(v));
                store_i8x8(y[i].qs + 16 * j + 8 * h, q[h]);
            }
            y[i].bsums[j] = (int16_t)hsum_i32(_mm256_add_epi32(q[0], q[1]));
        }
        y[i].d = 1 / iscale;
    }
}

#endif /* x86-64 */
