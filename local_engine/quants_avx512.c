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
 * Generation steps take the decode kernel below (two groups per tile).
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
/* Generation: prefetch 8 blocks (2-4 KiB) ahead.  Measured on a 512 MB
 * stream: 4 blocks 9-11 GB/s, 8, 16 or 32 all ~12 GB/s (a plain read of
 * the same layout: 13-14). */
#define PF_BLOCKS 8

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

/* A decode kernel's share of the next group (le_pf_share) for block b,
 * into L2. */
ALWAYS_INLINE void
pf_block(struct le_pf pf, int b)
{
    for (size_t o = 0; pf.p && o < pf.step; o += 64)
        _mm_prefetch((const char *)(pf.p + (size_t)b * pf.step + o),
                     _MM_HINT_T1);
}

/* ---- Q4_0, Q8_0 and MXFP4 ----
 * One block of 16 rows becomes 8 unsigned byte vectors u[i], each to be
 * multiplied with the 4 activation quants at qoff[i]: for Q4_0 the low
 * and high nibbles of the 4 chunks (values 4c.. and 16+4c..), for Q8_0 the
 * 8 chunks xor 0x80, for MXFP4 the nibbles' values (le_mxfp4_values) plus
 * 128 by a byte shuffle.  Then sum u*a less bias * (sum of the activation
 * quants): bias 8 for Q4_0's offset, 128 for Q8_0's xor and MXFP4's +128.
 * The kind argument Q8 is 0 for Q4_0, 1 for Q8_0, 2 for MXFP4. */
#define K_MX 2

/* Block bytes of one 16-row group (Q4_0 and MXFP4 256, Q8_0 512). */
#define LEGACY_COL(Q8) ((size_t)((Q8) == 1 ? 512 : 256))

/* The 8 vectors u of the block at wb; pf: prefetch PF_BLOCKS ahead. */
ALWAYS_INLINE void
legacy_unpack(const uint8_t *wb, __m512i *u, const int pf, const int Q8)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    /* MXFP4's values + 128, in each 128-bit lane for vpshufb */
    const __m512i lut = _mm512_set4_epi32(
        (int)0x74787a7c, (int)0x7d7e7f80, (int)0x8c888684, (int)0x83828180);
    const int nc = Q8 == 1 ? 8 : 4; /* 64-byte chunks */
    UNROLL
    for (int c = 0; c < nc; c++) {
        if (pf)
            _mm_prefetch((const char *)(wb + PF_BLOCKS * LEGACY_COL(Q8) +
                                        64 * c),
                         _MM_HINT_T0);
        __m512i v = _mm512_load_si512((const void *)(wb + 64 * c));
        if (Q8 == 1) {
            u[c] = _mm512_xor_si512(v, x80);
        } else if (Q8 == K_MX) {
            u[2 * c] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
            u[2 * c + 1] = _mm512_shuffle_epi8(
                lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        } else {
            u[2 * c] = _mm512_and_si512(v, m4);
            u[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
    }
}

/* G groups' int32 block sums (u[g * 8 ..]) against one token's block,
 * from *bias (the prep row's -bias * sum, broadcast): two chains of 4
 * each (enough in flight across the tokens), then their sum, or with ONE
 * a single chain of 8 (the decode kernel's passes of 3 or more tokens
 * have G * NT >= 6 chains in flight anyway; the integers are the same);
 * every broadcast of the activations serves the G groups. */
ALWAYS_INLINE void
legacy_isum(const __m512i *u, const int G, const struct q8_0_blk *x,
            const int32_t *bias, __m512i *si, const int Q8, const int ONE)
{
    static const int off4[8] = {0, 16, 4, 20, 8, 24, 12, 28};
    static const int off8[8] = {0, 4, 8, 12, 16, 20, 24, 28};
    const int *qoff = Q8 == 1 ? off8 : off4;
    __m512i b0 = bcast32(bias);
    __m512i s0[2], s1[2];
    UNROLL
    for (int g = 0; g < G; g++) {
        s0[g] = b0;
        s1[g] = _mm512_setzero_si512();
    }
    UNROLL
    for (int i = 0; i < 4; i++) {
        __m512i a0 = bcast32(x->qs + qoff[2 * i]);
        __m512i a1 = bcast32(x->qs + qoff[2 * i + 1]);
        UNROLL
        for (int g = 0; g < G; g++) {
            s0[g] = _mm512_dpbusd_epi32(s0[g], u[8 * g + 2 * i], a0);
            if (ONE)
                s0[g] = _mm512_dpbusd_epi32(s0[g], u[8 * g + 2 * i + 1], a1);
            else
                s1[g] = _mm512_dpbusd_epi32(s1[g], u[8 * g + 2 * i + 1], a1);
        }
    }
    UNROLL
    for (int g = 0; g < G; g++)
        si[g] = ONE ? s0[g] : _mm512_add_epi32(s0[g], s1[g]);
}

ALWAYS_INLINE void
legacy_tile(int nb, const uint8_t *qs, const uint16_t *dw,
            const struct le_pack_act *a, int t0, const int NT, float *y,
            size_t ys, int nr, const int Q8)
{
    const struct q8_0_blk *x[8];
    const struct le_prep_q8_0 *p[8];
    __m512 acc[8];
    UNROLL
    for (int t = 0; t < NT; t++) {
        x[t] = (const void *)(a->q + (size_t)(t0 + t) * a->q_row);
        p[t] = (const void *)(a->p + (size_t)(t0 + t) * a->p_row);
        acc[t] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        __m512i u[8];
        /* a batch re-reads the group from cache: no prefetch */
        legacy_unpack(qs + (size_t)b * LEGACY_COL(Q8), u, NT < 4, Q8);
        __m512 dv = _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)(dw + (size_t)b * 16)));
        UNROLL
        for (int t = 0; t < NT; t++) {
            __m512i si;
            legacy_isum(u, 1, &x[t][b],
                        Q8 ? &p[t][b].neg128 : &p[t][b].neg8, &si, Q8, 0);
            /* (Q8_0 and MXFP4 both carry the +128 bias) */
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
    const uint16_t *dw = (const uint16_t *)(qs + (size_t)nb * LEGACY_COL(Q8));
    int t = 0;
    for (; t + 8 <= ntok; t += 8)
        legacy_tile(nb, qs, dw, a, t, 8, y, ys, nr, Q8);
    if (ntok - t >= 4) {
        legacy_tile(nb, qs, dw, a, t, 4, y, ys, nr, Q8);
        t += 4;
    }
    if (ntok - t >= 2) {
        legacy_tile(nb, qs, dw, a, t, 2, y, ys, nr, Q8);
        t += 2;
    }
    if (t < ntok)
        legacy_tile(nb, qs, dw, a, t, 1, y, ys, nr, Q8);
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

void
le_gemm_mxfp4_avx512(int n, const void *w, const struct le_pack_act *a,
                     int ntok, float *y, size_t ys, int nr)
{
    legacy_gemm(n, w, a, ntok, y, ys, nr, K_MX);
}

/* ---- the decode kernel of Q4_0 and Q8_0 (le_gemv_at, gemv.c) ----
 * A run of groups against the few activation rows of a generation step
 * (one token per generating sequence).  TWO groups (32 weight rows) share
 * each register tile, against up to 4 tokens at a time: a token's 8
 * activation broadcasts of a block feed 16 vpdpbusd instead of 8, and a
 * group's nibbles are unpacked once for the 4 tokens.  Past 4 tokens the
 * pair is walked again for the next 4 (from L1/L2 then).  Measured on one
 * core, the block loop alone (weights in L2): 1 token 0.81-0.90x the
 * time of legacy_gemm, 4 tokens 0.79-0.89x; a whole decode step of the
 * 1B q4_0 slice (one thread, CPU time, tool_sched_bench): 1 token
 * 0.91-0.97x, 4 tokens 0.62-0.68x, 8 tokens 0.79-0.87x.
 *
 * Per (row, token) the results are legacy_tile's exactly (the block's
 * int32 sum, then ((float)isum * d_w) * d_act added block after block),
 * which is the plain C twin's: bit-identical whatever the number of
 * tokens or groups of the call, so a sequence's output does not depend on
 * its batch mates (tests/test_quants.c test_gemv: every N 1..8 against
 * the twin, the one-token call and vec_dot; test_sched.c).  Two
 * operations per token and block fewer than legacy_tile's, for the
 * compute-bound passes of 3 or more tokens: one vpdpbusd chain instead of
 * two and their add (legacy_isum's ONE), and (float)isum * d_w as one fma from a
 * magic-offset sum (dec_tile): 116 instead of 130 vector operations per
 * pair of groups and block at 4 tokens.  On a Zen 4 core (one thread,
 * weights in L2, interleaved, median of 400) 4 tokens took 0.977-0.986x
 * and 8 tokens 0.976-0.989x the time; the high nibbles by GFNI's
 * gf2p8affineqb (one operation instead of two) made 4 tokens 1.08x
 * slower there (it shares the multiply pipes with vpdpbusd): not used. */

/*
 * G (1 or 2) groups at w, w + gb, against tokens t0..t0+NT-1 (NT <= 4):
 * y[t * ys + 16 g + r] for r < nr[g].  Block layout as quants_avx512.c:
 * u[i] the unsigned bytes to multiply with the 4 activation quants at
 * qoff[i] (Q4_0: low and high nibbles of the 4 chunks; Q8_0: the 8 chunks
 * xor 0x80), bias 8 or 128 times the block's activation sum.
 *
 * The scaling (float)isum * d_w is one fma: the chains start from the
 * prep row's neg8m / neg128m (-bias * sum + LE_MAGIC_I), so they end at
 * the bits of the float M + isum (M = LE_MAGIC_F; |isum| <= 32 * 127 *
 * 255 < 2^22), and fma(M + isum, d_w, -M * d_w) is
 * isum * d_w rounded once, as the product of the exact (float)isum: -M *
 * d_w is exact (d_w a half, 11 significant bits, M 3 * 2^22) and so is
 * the sum before the rounding.  A zero isum gives +0 where the product
 * gave -0 for a negative d_w; the accumulator starts at +0 and +0 + -0 is
 * +0, so the sums do not change.  (Infinite scales would give NaN where
 * the product gave an infinity.)
 */
ALWAYS_INLINE void
dec_tile(int nb, const uint8_t *w, size_t gb, const int G, const int *nr,
         const struct le_pack_act *a, int t0, const int NT, float *y,
         size_t ys, const int Q8, size_t pf_off, size_t pf_len, const int L1)
{
    const struct q8_0_blk *x[4];
    const struct le_prep_q8_0 *p[4];
    const uint16_t *dw[2];
    __m512 acc[2][4];
    const __m512 negm = _mm512_set1_ps(-LE_MAGIC_F);
    UNROLL
    for (int g = 0; g < G; g++)
        dw[g] = (const uint16_t *)(w + (size_t)g * gb +
                                   (size_t)nb * LEGACY_COL(Q8));
    UNROLL
    for (int t = 0; t < NT; t++) {
        x[t] = (const void *)(a->q + (size_t)(t0 + t) * a->q_row);
        p[t] = (const void *)(a->p + (size_t)(t0 + t) * a->p_row);
        UNROLL
        for (int g = 0; g < G; g++)
            acc[g][t] = _mm512_setzero_ps();
    }
    /* bytes pf_off .. pf_off + pf_len of the next groups (G * gb on
     * from w) into L2, a block's share of them per block */
    const uint8_t *pf = w + (size_t)G * gb + pf_off;
    size_t pf_step = (pf_len / (size_t)nb + 63) & ~(size_t)63;
    for (int b = 0; b < nb; b++) {
        __m512i u[16];
        __m512 dv[2], mdv[2];
        UNROLL
        for (int g = 0; g < G; g++) {
            legacy_unpack(w + (size_t)g * gb + (size_t)b * LEGACY_COL(Q8),
                          u + 8 * g, L1, Q8);
            dv[g] = _mm512_cvtph_ps(
                _mm256_loadu_si256((const __m256i *)(dw[g] + (size_t)b * 16)));
            mdv[g] = _mm512_mul_ps(dv[g], negm);
        }
        for (size_t o = 0; o < pf_step; o += 64)
            _mm_prefetch((const char *)(pf + (size_t)b * pf_step + o),
                         _MM_HINT_T1);
        UNROLL
        for (int t = 0; t < NT; t++) {
            __m512i si[2];
            legacy_isum(u, G, &x[t][b],
                        Q8 ? &p[t][b].neg128m : &p[t][b].neg8m, si, Q8,
                        NT >= 3);
            __m512 da = _mm512_set1_ps(p[t][b].d);
            UNROLL
            for (int g = 0; g < G; g++) {
                __m512 f = _mm512_fmadd_ps(_mm512_castsi512_ps(si[g]),
                                           dv[g], mdv[g]);
                f = _mm512_mul_ps(f, da);
                acc[g][t] = _mm512_add_ps(acc[g][t], f);
            }
        }
    }
    UNROLL
    for (int t = 0; t < NT; t++)
        UNROLL
        for (int g = 0; g < G; g++)
            store_rows(y + (size_t)(t0 + t) * ys + 16 * g, acc[g][t], nr[g]);
}

/* G groups against every token, 4 at a time. */
ALWAYS_INLINE void
dec_groups(int nb, const uint8_t *w, size_t gb, const int G, const int *nr,
           const struct le_pack_act *a, int ntok, float *y, size_t ys,
           const int Q8, const int L1)
{
    int t = 0;
    /* The passes over the groups fetch the next ones into L2 while they
     * compute, each its tokens' share of the bytes (a pass of 4 tokens
     * is bound by the dot products, and the hardware prefetchers and the
     * 8-block lookahead above (into L1) did not keep the loads from the
     * last-level cache in flight meanwhile, so the next groups' misses
     * then stalled it).  Measured (2 threads, a 144 MB Q4_0 matrix of
     * 2048-value rows in 8-group runs, in-process A/B, minimum of 12),
     * the last pass fetching them all against none: 4 tokens 2.97-3.58
     * against 3.50-4.00 ms, 8 tokens 5.94-6.83 against 6.46-6.94, 1 token
     * 2.56-2.92 against 2.68-3.21.  With 5-8 tokens the last pass then
     * issued all of them in a quarter to half of the time: its prefetches
     * waited for free fill buffers (~10% of the kernel's samples on one
     * prefetcht1 in an 8-sequence step) while the first pass left the
     * memory idle.  Shared by tokens, a whole 8-sequence step (the 1B q4_0
     * slice, 2 threads, interleaved runs, median of 40 steps each) took
     * 10.67 against 13.28 ms and 9.90 against 11.14, 4 and 1 sequences
     * the same or slightly less.  Past the last group it prefetches
     * whatever follows, which cannot fault. */
    size_t tot = (size_t)G * gb;
#define PF_AT(t) (tot * (size_t)(t) / (size_t)ntok & ~(size_t)63)
#define PF_LEN(t, nt) (PF_AT((t) + (nt)) - PF_AT(t))
    for (; t + 4 <= ntok; t += 4)
        dec_tile(nb, w, gb, G, nr, a, t, 4, y, ys, Q8, PF_AT(t),
                 PF_LEN(t, 4), L1);
    switch (ntok - t) {
    case 3:
        dec_tile(nb, w, gb, G, nr, a, t, 3, y, ys, Q8, PF_AT(t),
                 PF_LEN(t, 3), L1);
        break;
    case 2:
        dec_tile(nb, w, gb, G, nr, a, t, 2, y, ys, Q8, PF_AT(t),
                 PF_LEN(t, 2), L1);
        break;
    case 1:
        dec_tile(nb, w, gb, G, nr, a, t, 1, y, ys, Q8, PF_AT(t),
                 PF_LEN(t, 1), L1);
        break;
    default: break;
    }
#undef PF_AT
#undef PF_LEN
}

ALWAYS_INLINE void
dec_run(int n, const void *w, size_t gb, int ng, const struct le_pack_act *a,
        int ntok, float *y, size_t ys, int nr_last, const int Q8,
        const int L1)
{
    int nb = n / 32;
    const uint8_t *wp = w;
    int g = 0;
    for (; g + 2 <= ng; g += 2) {
        int nr[2] = {16, g + 2 == ng ? nr_last : 16};
        dec_groups(nb, wp + (size_t)g * gb, gb, 2, nr, a, ntok,
                   y + (size_t)g * 16, ys, Q8, L1);
    }
    if (g < ng) {
        int nr[1] = {nr_last};
        dec_groups(nb, wp + (size_t)g * gb, gb, 1, nr, a, ntok,
                   y + (size_t)g * 16, ys, Q8, L1);
    }
}

/* Two prefetch plans, the same floats (gemv.c picks one per CPU): the
 * next groups into L2 always; the _l1 kernels also each block's bytes
 * PF_BLOCKS blocks ahead into L1. */
void
le_gemv_q4_0_avx512_l1(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last)
{
    dec_run(n, w, gb, ng, a, ntok, y, ys, nr_last, 0, 1);
}

void
le_gemv_q8_0_avx512_l1(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last)
{
    dec_run(n, w, gb, ng, a, ntok, y, ys, nr_last, 1, 1);
}

void
le_gemv_q4_0_avx512(int n, const void *w, size_t gb, int ng,
                    const struct le_pack_act *a, int ntok, float *y,
                    size_t ys, int nr_last)
{
    dec_run(n, w, gb, ng, a, ntok, y, ys, nr_last, 0, 0);
}

void
le_gemv_q8_0_avx512(int n, const void *w, size_t gb, int ng,
                    const struct le_pack_act *a, int ntok, float *y,
                    size_t ys, int nr_last)
{
    dec_run(n, w, gb, ng, a, ntok, y, ys, nr_last, 1, 0);
}

void
le_gemv_mxfp4_avx512(int n, const void *w, size_t gb, int ng,
                     const struct le_pack_act *a, int ntok, float *y,
                     size_t ys, int nr_last)
{
    dec_run(n, w, gb, ng, a, ntok, y, ys, nr_last, K_MX, 0);
}

void
le_gemv_mxfp4_avx512_l1(int n, const void *w, size_t gb, int ng,
                        const struct le_pack_act *a, int ntok, float *y,
                        size_t ys, int nr_last)
{
    dec_run(n, w, gb, ng, a, ntok, y, ys, nr_last, K_MX, 1);
}

/* ---- Q4_K and Q5_K ---- */

/* v shifted left by s bits (right by -s) in 16-bit lanes; s is a
 * constant once the loops are unrolled. */
ALWAYS_INLINE __m512i
shift16(__m512i v, const int s)
{
    return s > 0 ? _mm512_slli_epi16(v, (unsigned)s)
           : s < 0 ? _mm512_srli_epi16(v, (unsigned)-s)
                   : v;
}

/* vpdpbusd (nibbles x int8) into int32 lanes, with no int16 sums the
 * compiler could turn into a spilling tree of adds (it did: 693 stack
 * accesses); Q5 adds the 5th bits (repack.c: bit 2i / 2i+1 of the qh byte
 * for chunk 4cq+i). */
ALWAYS_INLINE void
k4_tile(int nsb, const uint8_t *qs, const uint8_t *meta, const uint8_t *qh,
        const struct le_pack_act *a, int t0, const int NT, float *y,
        size_t ys, int nr, const int Q5, const int L1, struct le_pf pf)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i b4 = _mm512_set1_epi8(0x10);
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
        /* the decode kernel's share of the next group, into L2 */
        pf_block(pf, b);
        UNROLL
        for (int t = 0; t < NT; t++)
            isum[t] = msum[t] = _mm512_setzero_si512();
        UNROLL
        for (int jj = 0; jj < 4; jj++) {
            __m512i plo[4], phi[4], h = _mm512_setzero_si512();
            /* the row scales as int32 = (scale, 0) int16 pairs */
            __m512i s0 = _mm512_cvtepu8_epi32(
                _mm_loadu_si128((const __m128i *)(mb + 64 + (2 * jj) * 16)));
            __m512i s1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(
                (const __m128i *)(mb + 64 + (2 * jj + 1) * 16)));
            const uint8_t *wj = qs + (size_t)b * 2048 + (size_t)jj * 512;
            UNROLL
            for (int c = 0; c < 8; c++) {
                if (NT < 4 && L1)
                    _mm_prefetch((const char *)(wj + 64 * c + 4096),
                                 _MM_HINT_T0);
                __m512i v = _mm512_load_si512((const void *)(wj + 64 * c));
                __m512i lo = _mm512_and_si512(v, m4);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                if (Q5) {
                    const int i = c & 3;
                    if (i == 0)
                        h = _mm512_load_si512(
                            (const void *)(qh + (size_t)b * 512 +
                                           (size_t)(jj * 2 + c / 4) * 64));
                    lo = _mm512_or_si512(
                        lo, _mm512_and_si512(shift16(h, 4 - 2 * i), b4));
                    hi = _mm512_or_si512(
                        hi, _mm512_and_si512(shift16(h, 3 - 2 * i), b4));
                }
                const int first = Q5 ? c % 2 == 0 : c % 4 == 0;
                UNROLL
                for (int t = 0; t < NT; t++) {
                    const int8_t *q = x[t][b].qs + 64 * jj + 4 * c;
                    if (first)
                        plo[t] = phi[t] = _mm512_setzero_si512();
                    plo[t] = _mm512_dpbusd_epi32(plo[t], lo, bcast32(q));
                    phi[t] = _mm512_dpbusd_epi32(phi[t], hi, bcast32(q + 32));
                }
                /* a lane's sum fits int16 after 4 chunks of nibbles (16 *
                 * 15 * 127) or 2 of 5-bit values (8 * 31 * 127): then it
                 * is multiplied by the scale with vpdpwssd */
                if (Q5 ? c % 2 == 1 : c % 4 == 3) {
                    UNROLL
                    for (int t = 0; t < NT; t++) {
                        isum[t] = _mm512_dpwssd_epi32(isum[t], plo[t], s0);
                        isum[t] = _mm512_dpwssd_epi32(isum[t], phi[t], s1);
                    }
                }
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

/* pf (the decode kernel): the passes fetch pf_len bytes from pf into L2
 * meanwhile, each its share (as dec_groups). */
ALWAYS_INLINE void
k4_gemm_pf(int n, const void *w, const struct le_pack_act *a, int ntok,
           float *y, size_t ys, int nr, const int Q5, const int L1,
           const uint8_t *pf, size_t pf_len)
{
    int nsb = n / 256;
    const uint8_t *qs = w;
    const uint8_t *meta = qs + (size_t)nsb * 2048;
    const uint8_t *qh = meta + (size_t)nsb * LE_PACK_Q4_K_META;
    int t = 0, i = 0, np = (ntok + 3) / 4;
    for (; t + 4 <= ntok; t += 4, i++)
        k4_tile(nsb, qs, meta, qh, a, t, 4, y, ys, nr, Q5, L1,
                le_pf_share(pf, pf_len, i, np, nsb));
    switch (ntok - t) {
    case 3:
        k4_tile(nsb, qs, meta, qh, a, t, 3, y, ys, nr, Q5, L1,
                le_pf_share(pf, pf_len, i, np, nsb));
        break;
    case 2:
        k4_tile(nsb, qs, meta, qh, a, t, 2, y, ys, nr, Q5, L1,
                le_pf_share(pf, pf_len, i, np, nsb));
        break;
    case 1:
        k4_tile(nsb, qs, meta, qh, a, t, 1, y, ys, nr, Q5, L1,
                le_pf_share(pf, pf_len, i, np, nsb));
        break;
    default: break;
    }
}

ALWAYS_INLINE void
k4_gemm(int n, const void *w, const struct le_pack_act *a, int ntok,
        float *y, size_t ys, int nr, const int Q5, const int L1)
{
    k4_gemm_pf(n, w, a, ntok, y, ys, nr, Q5, L1, NULL, 0);
}

/* The decode kernel of Q4_K and Q5_K: a run of groups, each as
 * le_gemm_q{4,5}_K_avx512[_l2] computes it (the same floats), fetching
 * the next group into L2 meanwhile. */
ALWAYS_INLINE void
k4_gemv(int n, const void *w, size_t gb, int ng, const struct le_pack_act *a,
        int ntok, float *y, size_t ys, int nr_last, const int Q5,
        const int L1)
{
    const uint8_t *wp = w;
    for (int g = 0; g < ng; g++)
        k4_gemm_pf(n, wp + (size_t)g * gb, a, ntok, y + 16 * g, ys,
                   g + 1 == ng ? nr_last : 16, Q5, L1,
                   wp + (size_t)(g + 1) * gb, gb);
}

void
le_gemv_q4_K_avx512(int n, const void *w, size_t gb, int ng,
                    const struct le_pack_act *a, int ntok, float *y,
                    size_t ys, int nr_last)
{
    k4_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 0, 0);
}

void
le_gemv_q4_K_avx512_l1(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last)
{
    k4_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 0, 1);
}

void
le_gemv_q5_K_avx512(int n, const void *w, size_t gb, int ng,
                    const struct le_pack_act *a, int ntok, float *y,
                    size_t ys, int nr_last)
{
    k4_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 1, 0);
}

void
le_gemv_q5_K_avx512_l1(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last)
{
    k4_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 1, 1);
}

/* Generation (fewer than 4 tokens) fetches each sub-block's bytes 4 KiB
 * ahead into L1; the _l2 kernels leave that to the hardware (the same
 * floats; repack.c picks by le_gemv_l1_prefetch). */
void
le_gemm_q4_K_avx512(int n, const void *w, const struct le_pack_act *a,
                    int ntok, float *y, size_t ys, int nr)
{
    k4_gemm(n, w, a, ntok, y, ys, nr, 0, 1);
}

void
le_gemm_q5_K_avx512(int n, const void *w, const struct le_pack_act *a,
                    int ntok, float *y, size_t ys, int nr)
{
    k4_gemm(n, w, a, ntok, y, ys, nr, 1, 1);
}

void
le_gemm_q4_K_avx512_l2(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr)
{
    k4_gemm(n, w, a, ntok, y, ys, nr, 0, 0);
}

void
le_gemm_q5_K_avx512_l2(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr)
{
    k4_gemm(n, w, a, ntok, y, ys, nr, 1, 0);
}

/* ---- Q6_K ----
 * 6-bit values (0..63, repack.c's low nibble + 2 high bits) x int8 with
 * vpmaddubsw, 2 chunks summed in int16 (2 * 2*63*128 = 32256), vpdpwssd
 * with the int8 scale of the 16-value sub-block in both halves of the
 * lane; the -32 of the stored values is 32 * sum sc * bsum, also with
 * vpdpwssd over (sc, sc') pairs and the Q8_K block's bsum pairs. */

ALWAYS_INLINE void
q6_K_tile(int nsb, const uint8_t *ql, const uint8_t *qh, const uint8_t *meta,
          const struct le_pack_act *a, int t0, const int NT, float *y,
          size_t ys, int nr, const int L1, struct le_pf pf)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    const __m512i pick_even = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13));
    const __m512i pick_odd = _mm512_broadcast_i32x4(_mm_setr_epi8(
        2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15));
    const struct q8_K_blk *x[4];
    __m512 acc[4];
    UNROLL
    for (int t = 0; t < NT; t++) {
        x[t] = (const void *)(a->q + (size_t)(t0 + t) * a->q_row);
        acc[t] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nsb; b++) {
        const uint8_t *mb = meta + (size_t)b * LE_PACK_Q6_K_META;
        __m512i isum[4], off[4];
        /* the decode kernel's share of the next group, into L2 */
        pf_block(pf, b);
        UNROLL
        for (int t = 0; t < NT; t++)
            isum[t] = off[t] = _mm512_setzero_si512();
        UNROLL
        for (int jj = 0; jj < 4; jj++) {
            /* scale pairs of sub-blocks 4jj, 4jj+1 and 4jj+2, 4jj+3 */
            __m512i pl = _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                (const __m256i *)(mb + 32 * (2 * jj))));
            __m512i ph = _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                (const __m256i *)(mb + 32 * (2 * jj + 1))));
            UNROLL
            for (int t = 0; t < NT; t++) {
                off[t] = _mm512_dpwssd_epi32(
                    off[t], pl, bcast32(x[t][b].bsums + 4 * jj));
                off[t] = _mm512_dpwssd_epi32(
                    off[t], ph, bcast32(x[t][b].bsums + 4 * jj + 2));
            }
            UNROLL
            for (int cp = 0; cp < 4; cp++) {
                __m512i h = _mm512_load_si512((
                    const void *)(qh + (size_t)b * 1024 +
                                  (size_t)(jj * 4 + cp) * 64));
                __m512i plo[4], phi[4];
                UNROLL
                for (int t = 0; t < NT; t++)
                    plo[t] = phi[t] = _mm512_setzero_si512();
                UNROLL
                for (int i = 0; i < 2; i++) {
                    int c = 2 * cp + i;
                    const uint8_t *wc =
                        ql + (size_t)b * 2048 + (size_t)(jj * 8 + c) * 64;
                    if (NT >= 4 || L1)
                        _mm_prefetch((const char *)(wc + 4096), _MM_HINT_T0);
                    __m512i v = _mm512_load_si512((const void *)wc);
                    __m512i ha = _mm512_and_si512(shift16(h, 4 - 4 * i), m30);
                    __m512i hb = _mm512_and_si512(shift16(h, 2 - 4 * i), m30);
                    __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), ha);
                    __m512i hi = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), hb);
                    UNROLL
                    for (int t = 0; t < NT; t++) {
                        const int8_t *q = x[t][b].qs + 64 * jj + 4 * c;
                        plo[t] = _mm512_add_epi16(
                            plo[t], _mm512_maddubs_epi16(lo, bcast32(q)));
                        phi[t] = _mm512_add_epi16(
                            phi[t], _mm512_maddubs_epi16(hi, bcast32(q + 32)));
                    }
                }
                __m512i slo = _mm512_shuffle_epi8(pl, cp < 2 ? pick_even
                                                             : pick_odd);
                __m512i shi = _mm512_shuffle_epi8(ph, cp < 2 ? pick_even
                                                             : pick_odd);
                UNROLL
                for (int t = 0; t < NT; t++) {
                    isum[t] = _mm512_dpwssd_epi32(isum[t], plo[t], slo);
                    isum[t] = _mm512_dpwssd_epi32(isum[t], phi[t], shi);
                }
            }
        }
        __m512 dv = _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)(mb + 256)));
        UNROLL
        for (int t = 0; t < NT; t++) {
            __m512i si = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(off[t], 5));
            __m512 yd = _mm512_set1_ps(x[t][b].d);
            __m512 f1 =
                _mm512_mul_ps(yd, _mm512_mul_ps(dv, _mm512_cvtepi32_ps(si)));
            /* the plain C twin's "- d * (dmin * msum)" with zeros (its
             * sign can matter for a -0 sum) */
            __m512 f2 = _mm512_mul_ps(yd, _mm512_setzero_ps());
            acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(f1, f2));
        }
    }
    UNROLL
    for (int t = 0; t < NT; t++)
        store_rows(y + (size_t)(t0 + t) * ys, acc[t], nr);
}

/* Generation (fewer than 4 tokens) with (L1) or without the 4 KiB
 * lookahead into L1, as Q4_K's; prompt tiles always have it. */
/* pf (the decode kernel): as k4_gemm_pf. */
ALWAYS_INLINE void
q6_K_gemm_pf(int n, const void *w, const struct le_pack_act *a, int ntok,
             float *y, size_t ys, int nr, const int L1, const uint8_t *pf,
             size_t pf_len)
{
    int nsb = n / 256;
    const uint8_t *ql = w;
    const uint8_t *qh = ql + (size_t)nsb * 2048;
    const uint8_t *meta = qh + (size_t)nsb * 1024;
    int t = 0, i = 0, np = (ntok + 3) / 4;
    for (; t + 4 <= ntok; t += 4, i++)
        q6_K_tile(nsb, ql, qh, meta, a, t, 4, y, ys, nr, L1,
                  le_pf_share(pf, pf_len, i, np, nsb));
    switch (ntok - t) {
    case 3:
        q6_K_tile(nsb, ql, qh, meta, a, t, 3, y, ys, nr, L1,
                  le_pf_share(pf, pf_len, i, np, nsb));
        break;
    case 2:
        q6_K_tile(nsb, ql, qh, meta, a, t, 2, y, ys, nr, L1,
                  le_pf_share(pf, pf_len, i, np, nsb));
        break;
    case 1:
        q6_K_tile(nsb, ql, qh, meta, a, t, 1, y, ys, nr, L1,
                  le_pf_share(pf, pf_len, i, np, nsb));
        break;
    default: break;
    }
}

ALWAYS_INLINE void
q6_K_gemm(int n, const void *w, const struct le_pack_act *a, int ntok,
          float *y, size_t ys, int nr, const int L1)
{
    q6_K_gemm_pf(n, w, a, ntok, y, ys, nr, L1, NULL, 0);
}

/* The decode kernel of Q6_K: as k4_gemv. */
ALWAYS_INLINE void
q6_K_gemv(int n, const void *w, size_t gb, int ng,
          const struct le_pack_act *a, int ntok, float *y, size_t ys,
          int nr_last, const int L1)
{
    const uint8_t *wp = w;
    for (int g = 0; g < ng; g++)
        q6_K_gemm_pf(n, wp + (size_t)g * gb, a, ntok, y + 16 * g, ys,
                     g + 1 == ng ? nr_last : 16, L1,
                     wp + (size_t)(g + 1) * gb, gb);
}

void
le_gemv_q6_K_avx512(int n, const void *w, size_t gb, int ng,
                    const struct le_pack_act *a, int ntok, float *y,
                    size_t ys, int nr_last)
{
    q6_K_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 0);
}

void
le_gemv_q6_K_avx512_l1(int n, const void *w, size_t gb, int ng,
                       const struct le_pack_act *a, int ntok, float *y,
                       size_t ys, int nr_last)
{
    q6_K_gemv(n, w, gb, ng, a, ntok, y, ys, nr_last, 1);
}

void
le_gemm_q6_K_avx512(int n, const void *w, const struct le_pack_act *a,
                    int ntok, float *y, size_t ys, int nr)
{
    q6_K_gemm(n, w, a, ntok, y, ys, nr, 1);
}

void
le_gemm_q6_K_avx512_l2(int n, const void *w, const struct le_pack_act *a,
                       int ntok, float *y, size_t ys, int nr)
{
    q6_K_gemm(n, w, a, ntok, y, ys, nr, 0);
}

/* ---- F16 and BF16 ----
 * As the plain C twins: every product exact in double (F16 x F16 is
 * already exact in float; BF16 products may not be, so those multiply in
 * double), summed in double in element order per row: two 8-lane double
 * accumulators per token hold the 16 rows. */

ALWAYS_INLINE void
half_tile(int n, const uint16_t *h, const struct le_pack_act *a, int t0,
          const int NT, float *y, size_t ys, int nr, const int BF)
{
    const float *x[4];
    __m512d lo[4], hi[4];
    UNROLL
    for (int t = 0; t < NT; t++) {
        x[t] = (const void *)(a->p + (size_t)(t0 + t) * a->p_row);
        lo[t] = hi[t] = _mm512_setzero_pd();
    }
    for (int j = 0; j < n; j++) {
        __m256i raw = _mm256_load_si256((const __m256i *)(h + (size_t)j * 16));
        _mm_prefetch((const char *)(h + (size_t)j * 16 + 1024), _MM_HINT_T0);
        __m512 wf = BF ? _mm512_castsi512_ps(_mm512_slli_epi32(
                             _mm512_cvtepu16_epi32(raw), 16))
                       : _mm512_cvtph_ps(raw);
        __m512d wl = _mm512_cvtps_pd(_mm512_castps512_ps256(wf));
        __m512d wh = _mm512_cvtps_pd(_mm512_extractf32x8_ps(wf, 1));
        UNROLL
        for (int t = 0; t < NT; t++) {
            if (BF) {
                __m512d xv = _mm512_set1_pd((double)x[t][j]);
                lo[t] = _mm512_add_pd(lo[t], _mm512_mul_pd(wl, xv));
                hi[t] = _mm512_add_pd(hi[t], _mm512_mul_pd(wh, xv));
            } else {
                __m512 p = _mm512_mul_ps(wf, _mm512_set1_ps(x[t][j]));
                lo[t] = _mm512_add_pd(
                    lo[t], _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
                hi[t] = _mm512_add_pd(
                    hi[t], _mm512_cvtps_pd(_mm512_extractf32x8_ps(p, 1)));
            }
        }
    }
    UNROLL
    for (int t = 0; t < NT; t++) {
        __m512 r = _mm512_insertf32x8(
            _mm512_castps256_ps512(_mm512_cvtpd_ps(lo[t])),
            _mm512_cvtpd_ps(hi[t]), 1);
        store_rows(y + (size_t)(t0 + t) * ys, r, nr);
    }
}

ALWAYS_INLINE void
half_gemm(int n, const void *w, const struct le_pack_act *a, int ntok,
          float *y, size_t ys, int nr, const int BF)
{
    int t = 0;
    for (; t + 4 <= ntok; t += 4)
        half_tile(n, w, a, t, 4, y, ys, nr, BF);
    switch (ntok - t) {
    case 3: half_tile(n, w, a, t, 3, y, ys, nr, BF); break;
    case 2: half_tile(n, w, a, t, 2, y, ys, nr, BF); break;
    case 1: half_tile(n, w, a, t, 1, y, ys, nr, BF); break;
    default: break;
    }
}

void
le_gemm_f16_avx512(int n, const void *w, const struct le_pack_act *a,
                   int ntok, float *y, size_t ys, int nr)
{
    half_gemm(n, w, a, ntok, y, ys, nr, 0);
}

void
le_gemm_bf16_avx512(int n, const void *w, const struct le_pack_act *a,
                    int ntok, float *y, size_t ys, int nr)
{
    half_gemm(n, w, a, ntok, y, ys, nr, 1);
}

/* ---- activation quantisers ----
 * Bit-identical to quants.c's q8_0_from_float / q8_K_from_float (they
 * were 5-7% of a prompt pass, serial on the calling thread):
 *   roundf (half away from zero) is trunc(v + copysign(0.49999997f, v)),
 *   checked for every finite float; rintf is vrndscaleps to nearest even;
 *   NaN becomes 0 and the result is clamped to +-127 as trunc_clamp does;
 *   the block maximum ignores NaN as the scalar "fabsf(x) > amax" does
 *   (vmaxps returns its second operand when the first is NaN), and Q8_K's
 *   signed maximum is the first value of that magnitude. */

ALWAYS_INLINE __m512
clamp127(__m512 v)
{
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
    return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.0f)),
                         _mm512_set1_ps(127.0f));
}

ALWAYS_INLINE __m512
absmax0(__m512 v, __m512 m)
{
    return _mm512_max_ps(_mm512_max_ps(_mm512_abs_ps(v), _mm512_setzero_ps()),
                         m);
}

void
le_quantize_q8_0_avx512(const float *x, void *vy, int64_t k)
{
    struct q8_0_blk *y = vy;
    const __m512 half = _mm512_set1_ps(0.49999997f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < k / 32; i++) {
        __m512 a = _mm512_loadu_ps(x + 32 * i);
        __m512 b = _mm512_loadu_ps(x + 32 * i + 16);
        float amax = _mm512_reduce_max_ps(
            absmax0(a, absmax0(b, _mm512_setzero_ps())));
        float d = amax / 127;
        float id = d ? 1.0f / d : 0.0f;
        y[i].d = le_fp32_to_fp16(d);
        __m512 idv = _mm512_set1_ps(id);
        UNROLL
        for (int h = 0; h < 2; h++) {
            __m512 v = _mm512_mul_ps(h ? b : a, idv);
            __m512 c = _mm512_or_ps(
                half, _mm512_castsi512_ps(_mm512_and_si512(
                          _mm512_castps_si512(v), sign)));
            __m512 r = clamp127(_mm512_add_ps(v, c));
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * h),
                             _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
        }
    }
}

void
le_quantize_q8_K_avx512(const float *x, void *vy, int64_t k)
{
    struct q8_K_blk *y = vy;
    for (int64_t i = 0; i < k / 256; i++) {
        const float *xb = x + 256 * i;
        __m512 m = _mm512_setzero_ps();
        UNROLL
        for (int j = 0; j < 16; j++)
            m = absmax0(_mm512_loadu_ps(xb + 16 * j), m);
        float amax = _mm512_reduce_max_ps(m);
        if (amax == 0) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float max = 0;
        for (int j = 0; j < 16; j++) {
            __mmask16 e = _mm512_cmp_ps_mask(
                _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * j)),
                _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (e) {
                max = xb[16 * j + __builtin_ctz(e)];
                break;
            }
        }
        float iscale = -127.f / max;
        __m512 is = _mm512_set1_ps(iscale);
        UNROLL
        for (int j = 0; j < 16; j++) {
            __m512 v = _mm512_roundscale_ps(
                _mm512_mul_ps(is, _mm512_loadu_ps(xb + 16 * j)),
                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m512i q = _mm512_cvttps_epi32(clamp127(v));
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * j),
                             _mm512_cvtepi32_epi8(q));
            y[i].bsums[j] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1 / iscale;
    }
}

#endif /* x86-64 */
