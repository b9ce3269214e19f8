/*
 * quants_avxvnni.c: AVX-VNNI (256-bit vpdpbusd, Alder Lake and later
 * Intel CPUs without AVX-512) kernels for repacked Q4_0 and Q8_0 weights
 * (repack.c draws the layout); the other types run quants_avx2.c's at
 * this level.
 *
 * Built with -mavx2 -mfma -mf16c -mavxvnni (Makefile: files named
 * *_avxvnni.c, x86-64 only), called when le_isa_active() is
 * LE_ISA_AVXVNNI.  The same integer sums and float steps as
 * quants_avx512.c's legacy tiles, on 2 halves of 8 rows: vpdpbusd of the
 * unsigned weight bytes (nibbles, or Q8_0 xor 0x80) with broadcast
 * activation bytes, the chain started from the prep row's -bias * sum;
 * results are bit-identical to the plain C twins (test_quants.c).
 */
#if defined(__x86_64__)

#include "le_int.h"

#include <immintrin.h>
#include <string.h>

#define UNROLL _Pragma("GCC unroll 16")
#define ALWAYS_INLINE static inline __attribute__((always_inline))

struct vq8_0_blk {
    uint16_t d;
    int8_t qs[32];
};
_Static_assert(sizeof(struct vq8_0_blk) == 34, "as in quants.c");

ALWAYS_INLINE __m256i
vbc32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

ALWAYS_INLINE void
vstore16(float *y, __m256 v0, __m256 v1, int nr)
{
    float tmp[16];
    if (nr == 16) {
        _mm256_storeu_ps(y, v0);
        _mm256_storeu_ps(y + 8, v1);
        return;
    }
    _mm256_storeu_ps(tmp, v0);
    _mm256_storeu_ps(tmp + 8, v1);
    memcpy(y, tmp, (size_t)nr * sizeof(float));
}

/* NH halves of 8 rows from h0 against NT tokens from t0, NT * NH <= 4:
 * 16 rows x 1-2 tokens stream the group once (generation), 8 rows x 4
 * tokens make each unpacked half serve 4 tokens (prompt batches). */
ALWAYS_INLINE void
vq_tile(int nb, const uint8_t *qs, const uint16_t *dw,
        const struct le_pack_act *a, int t0, const int NT, int h0,
        const int NH, float *y, size_t ys, int nr, const int Q8)
{
    static const int off4[8] = {0, 16, 4, 20, 8, 24, 12, 28};
    static const int off8[8] = {0, 4, 8, 12, 16, 20, 24, 28};
    const int *qoff = Q8 ? off8 : off4;
    const size_t col = Q8 ? 512 : 256;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
    const struct vq8_0_blk *x[4];
    const struct le_prep_q8_0 *p[4];
    __m256 acc[4][2];
    UNROLL
    for (int t = 0; t < NT; t++) {
        x[t] = (const void *)(a->q + (size_t)(t0 + t) * a->q_row);
        p[t] = (const void *)(a->p + (size_t)(t0 + t) * a->p_row);
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const uint8_t *wb = qs + (size_t)b * col;
        UNROLL
        for (int k = 0; k < NH; k++) {
            const int h = h0 + k;
            __m256i u[8];
            UNROLL
            for (int c = 0; c < (int)col / 64; c++) {
                if (k == 0 && NH == 2)
                    _mm_prefetch((const char *)(wb + 8 * col + 64 * c),
                                 _MM_HINT_T0);
                __m256i v = _mm256_load_si256(
                    (const __m256i *)(wb + 64 * c + 32 * h));
                if (Q8) {
                    u[c] = _mm256_xor_si256(v, x80);
                } else {
                    u[2 * c] = _mm256_and_si256(v, m4);
                    u[2 * c + 1] =
                        _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                }
            }
            __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(
                (const __m128i *)(dw + (size_t)b * 16 + 8 * h)));
            UNROLL
            for (int t = 0; t < NT; t++) {
                const int8_t *q = x[t][b].qs;
                __m256i s0 = _mm256_dpbusd_avx_epi32(
                    vbc32(Q8 ? &p[t][b].neg128 : &p[t][b].neg8), u[0],
                    vbc32(q + qoff[0]));
                __m256i s1 = _mm256_dpbusd_avx_epi32(
                    _mm256_setzero_si256(), u[1], vbc32(q + qoff[1]));
                UNROLL
                for (int i = 1; i < 4; i++) {
                    s0 = _mm256_dpbusd_avx_epi32(s0, u[2 * i],
                                                 vbc32(q + qoff[2 * i]));
                    s1 = _mm256_dpbusd_avx_epi32(s1, u[2 * i + 1],
                                                 vbc32(q + qoff[2 * i + 1]));
                }
                __m256 f = _mm256_mul_ps(
                    _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), dv);
                f = _mm256_mul_ps(f, _mm256_set1_ps(p[t][b].d));
                acc[t][k] = _mm256_add_ps(acc[t][k], f);
            }
        }
    }
    UNROLL
    for (int t = 0; t < NT; t++) {
        if (NH == 2) {
            vstore16(y + (size_t)(t0 + t) * ys, acc[t][0], acc[t][1], nr);
        } else {
            float tmp[8];
            int n8 = nr - 8 * h0 < 8 ? nr - 8 * h0 : 8;
            _mm256_storeu_ps(tmp, acc[t][0]);
            memcpy(y + (size_t)(t0 + t) * ys + 8 * h0, tmp,
                   (size_t)n8 * sizeof(float));
        }
    }
}

ALWAYS_INLINE void
vq_gemm(int n, const void *w, const struct le_pack_act *a, int ntok,
        float *y, size_t ys, int nr, const int Q8)
{
    int nb = n / 32;
    const uint8_t *qs = w;
    const uint16_t *dw =
        (const uint16_t *)(qs + (size_t)nb * (Q8 ? 512 : 256));
    int t4 = ntok & ~3, t;
    for (int h = 0; h < 2 && nr > 8 * h && t4 > 0; h++)
        for (t = 0; t < t4; t += 4)
            vq_tile(nb, qs, dw, a, t, 4, h, 1, y, ys, nr, Q8);
    for (t = t4; t + 2 <= ntok; t += 2)
        vq_tile(nb, qs, dw, a, t, 2, 0, 2, y, ys, nr, Q8);
    if (t < ntok)
        vq_tile(nb, qs, dw, a, t, 1, 0, 2, y, ys, nr, Q8);
}

void
le_gemm_q4_0_avxvnni(int n, const void *w, const struct le_pack_act *a,
                     int ntok, float *y, size_t ys, int nr)
{
    vq_gemm(n, w, a, ntok, y, ys, nr, 0);
}

void
le_gemm_q8_0_avxvnni(int n, const void *w, const struct le_pack_act *a,
                     int ntok, float *y, size_t ys, int nr)
{
    vq_gemm(n, w, a, ntok, y, ys, nr, 1);
}

#endif /* x86-64 */
