/*
 * quants_amx.c: the AMX-INT8 GEMM for prompt batches (Q8_0 and Q4_0
 * weights against Q8_0 activations, Q4_K, Q5_K and Q6_K against Q8_K).
 *
 * Built with -mamx-tile -mamx-int8 -mavx512f/bw/vl/vnni (Makefile: files
 * named *_amx.c, x86-64 only) and called only when le_amx_usable() (amx.c)
 * says the CPU, the OS and the kernel's permission allow it.
 *
 * The tiles (one TDPBSSD: C[16][16] int32 += A[16][32 bytes] . B):
 *   A = 16 weight rows x one 32-value block (K = 32: the per-block scales
 *       forbid summing two blocks in the integer domain).  Q8_0 rows are
 *       loaded straight from the GGUF mapping (32 bytes after each block's
 *       scale, stride = bytes per row); Q4_0 and the K-quants are unpacked
 *       to int8 once per panel of 16 rows into a per-thread buffer and
 *       that panel serves every token tile.
 *   B = 16 tokens x the same block in the VNNI layout (row k/4 holds the 4
 *       values k..k+3 of each token), repacked with gathers from the Q8_0
 *       activation rows once per call (per thread: the caller splits the
 *       weight rows, every thread reads every token).
 *   C is stored after each block and scaled in AVX-512:
 *       acc[r][t] = fma((float)C[r][t], d_act[t] * d_w[r], acc[r][t])
 *   over the blocks in order; the twin in amx.c does exactly that, so the
 *   results agree bit for bit.  Two C tiles alternate so the tile unit
 *   runs a block ahead of the scaling.
 *
 * Memory: one per-thread scratch buffer (activations of up to TOK_CHUNK
 * tokens in B layout, their scales, one unpacked weight panel), grown on
 * demand and freed when the thread exits (a pthread key destructor).  Tile
 * state is configured at the start of each call and released at its end,
 * so a thread holds no tile state between calls.
 */
#include "le_int.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct amxk_q4_0 {
    uint16_t d;
    uint8_t qs[16];
};
_Static_assert(sizeof(struct amxk_q4_0) == 18, "as in quants.c");
struct amxk_q8_0 {
    uint16_t d;
    int8_t qs[32];
};
_Static_assert(sizeof(struct amxk_q8_0) == 34, "as in quants.c");
struct amxk_q4_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
};
_Static_assert(sizeof(struct amxk_q4_K) == 144, "as in quants.c");
struct amxk_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
_Static_assert(sizeof(struct amxk_q5_K) == 176, "as in quants.c");
struct amxk_q6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};
_Static_assert(sizeof(struct amxk_q6_K) == 210, "as in quants.c");
struct amxk_q8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
_Static_assert(sizeof(struct amxk_q8_K) == 292, "as in quants.c");

static inline int
is_kquant(enum le_type wt)
{
    return wt == LE_TYPE_Q4_K || wt == LE_TYPE_Q5_K || wt == LE_TYPE_Q6_K;
}

/* Tokens repacked per pass: 8 tiles.  Bounds the scratch (8 * 512 bytes
 * + 64 bytes of scales per block: 0.8 MiB for 5632-wide rows) while
 * leaving 8 token tiles to share each unpacked weight panel. */
#define TOK_CHUNK 128

/* ldtilecfg's 64-byte operand (palette 1). */
struct tilecfg {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
_Static_assert(sizeof(struct tilecfg) == 64, "ldtilecfg operand");

/* tmm0, tmm3: A (16 x 32 bytes); tmm1, tmm4: B (8 x 64 bytes);
 * tmm2, tmm5, tmm6, tmm7: C (16 x 16 int32). */
static void
tiles_config_rows(int rows)
{
    struct tilecfg c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    c.rows[0] = c.rows[3] = (uint8_t)rows;
    c.colsb[0] = c.colsb[3] = 32;
    c.rows[1] = c.rows[4] = 8;
    c.colsb[1] = c.colsb[4] = 64;
    c.rows[2] = c.rows[5] = c.rows[6] = c.rows[7] = (uint8_t)rows;
    c.colsb[2] = c.colsb[5] = c.colsb[6] = c.colsb[7] = 64;
    /* GCC 12 does not see ldtilecfg read the rows and colsb fields and
     * drops their stores as dead (ldtilecfg then faults): a compiler
     * barrier keeps them */
    __asm__ volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

static void
tiles_config(void)
{
    tiles_config_rows(16);
}

/* ------------------------------------------------------------------ */
/* Per-thread scratch.                                                  */

struct scratch {
    size_t cap;
    void *p; /* 64-byte aligned */
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void
scratch_free(void *v)
{
    struct scratch *s = v;
    if (s) {
        free(s->p);
        free(s);
    }
}

static void
scratch_init(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

static void *
scratch_get(size_t need)
{
    pthread_once(&scratch_once, scratch_init);
    if (!scratch_key_ok)
        return NULL;
    struct scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s || pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (s->cap < need) {
        size_t cap = (need + 65535) & ~(size_t)65535;
        void *p = aligned_alloc(64, cap);
        if (!p)
            return NULL;
        free(s->p);
        s->p = p;
        s->cap = cap;
    }
    return s->p;
}

/* ------------------------------------------------------------------ */
/* Packing.                                                             */

static inline __m512i
lane_offsets(size_t stride)
{
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                           11, 12, 13, 14, 15);
    return _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)stride));
}

/* 16 fp16 halves at base + lane * stride (lanes in mask; others 0) as
 * floats. */
static inline __m512
gather_halves(const uint8_t *base, __m512i off, __mmask16 mask)
{
    __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, off,
                                            base, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* Activations of nt tokens (rows x_row apart; Q8_0, or Q8_K when kq) ->
 * per token tile and 32-value sub-block g (ng of them): 8 x 64 bytes in B
 * layout at bq + (tt * ng + g) * 512.  Scales: Q8_0 one float per token
 * and sub-block at bd + (tt * ng + g) * 16; Q8_K one per 256-value block
 * at bd + (tt * nsb + sb) * 16, and the sums of each pair of 32-value
 * sub-blocks (2j, 2j + 1) as two int16 in one int32 at
 * bs + ((tt * nsb + sb) * 4 + j) * 16, for VPDPWSSD against the mins.
 * Tokens past nt are zero. */
static void
pack_acts(int kq, const uint8_t *xq, size_t x_row, int nt, int ng, int8_t *bq,
          float *bd, int32_t *bs)
{
    __m512i off = lane_offsets(x_row);
    int nsb = ng / 8;
    for (int tt = 0; tt * 16 < nt; tt++) {
        int left = nt - tt * 16;
        __mmask16 mask = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        const uint8_t *base = xq + (size_t)tt * 16 * x_row;
        for (int g = 0; g < ng; g++) {
            const uint8_t *q = kq ? base + (size_t)(g / 8) * 292 + 4 +
                                        (size_t)(g % 8) * 32
                                  : base + (size_t)g * 34 + 2;
            int8_t *dst = bq + ((size_t)tt * ng + g) * 512;
            for (int kr = 0; kr < 8; kr++) {
                __m512i v = _mm512_mask_i32gather_epi32(
                    _mm512_setzero_si512(), mask, off, q + 4 * kr, 1);
                _mm512_store_si512((void *)(dst + kr * 64), v);
            }
            if (!kq)
                _mm512_store_ps(bd + ((size_t)tt * ng + g) * 16,
                                gather_halves(q - 2, off, mask));
        }
        for (int sb = 0; kq && sb < nsb; sb++) {
            _mm512_store_ps(bd + ((size_t)tt * nsb + sb) * 16,
                            _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask,
                                                     off,
                                                     base + (size_t)sb * 292,
                                                     1));
            int32_t *d = bs + ((size_t)tt * nsb + sb) * 64;
            for (int n = 0; n < 16; n++) {
                const struct amxk_q8_K *y =
                    (const void *)(base + (size_t)n * x_row +
                                   (size_t)sb * 292);
                for (int j = 0; j < 4; j++) {
                    int s0 = n < left ? y->bsums[4 * j] + y->bsums[4 * j + 1]
                                      : 0;
                    int s1 = n < left
                                 ? y->bsums[4 * j + 2] + y->bsums[4 * j + 3]
                                 : 0;
                    d[j * 16 + n] = (int32_t)((uint32_t)(uint16_t)s0 |
                                              (uint32_t)(uint16_t)s1 << 16);
                }
            }
        }
    }
}

/* Scales of nr weight rows (from row pointer w) per block: ad[b * 16 + m];
 * rows past nr get 0. */
static void
pack_wscales(enum le_type wt, const uint8_t *w, size_t w_row, int nr, int nb,
             float *ad)
{
    __m512i off = lane_offsets(w_row);
    __mmask16 mask = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    size_t bs = wt == LE_TYPE_Q8_0 ? 34 : 18;
    for (int b = 0; b < nb; b++)
        _mm512_store_ps(ad + (size_t)b * 16,
                        gather_halves(w + (size_t)b * bs, off, mask));
}

/* nr weight rows -> int8 panel aq[b][16][32] (rows past nr zero). */
static void
unpack_panel(enum le_type wt, const uint8_t *w, size_t w_row, int nr, int nb,
             int8_t *aq)
{
    const __m256i lo4 = _mm256_set1_epi8(0x0f), eight = _mm256_set1_epi8(8);
    for (int m = 0; m < 16; m++) {
        const uint8_t *row = w + (size_t)m * w_row;
        for (int b = 0; b < nb; b++) {
            int8_t *dst = aq + ((size_t)b * 16 + m) * 32;
            if (m >= nr) {
                _mm256_store_si256((__m256i *)dst, _mm256_setzero_si256());
            } else if (wt == LE_TYPE_Q8_0) {
                const struct amxk_q8_0 *x = (const void *)row;
                _mm256_store_si256(
                    (__m256i *)dst,
                    _mm256_loadu_si256((const __m256i *)x[b].qs));
            } else {
                const struct amxk_q4_0 *x = (const void *)row;
                __m128i q = _mm_loadu_si128((const __m128i *)x[b].qs);
                __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
                v = _mm256_sub_epi8(_mm256_and_si256(v, lo4), eight);
                _mm256_store_si256((__m256i *)dst, v);
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* One 16 x 16 output tile over all blocks.                             */

/* tilestored of a 16 x 64-byte C tile at cb (rows 64 bytes apart).  GCC
 * 12's _tile_stored clobbers all memory, which kept the 16 float
 * accumulators of tile_gemm in memory (a load and a store each per row
 * and block); this one names the 1 KiB it writes instead. */
#define TILE_STORE_C(tc, cb)                                                 \
    __asm__ volatile("tilestored %%tmm" #tc ", (%1,%2,1)"                  \
                     : "=m"(*(int32_t(*)[256])(cb))                          \
                     : "r"((void *)(cb)), "r"(64L))

/* GCC's tileloadd names no memory it reads: before the tile loads of a
 * product, every store into its A and B buffers (unpacked panels,
 * repacked activations) is made to happen. */
#define TILE_INPUTS_WRITTEN() __asm__ volatile("" : : : "memory")

/* One block: A from tile ta, B from tb, C into tc, stored at cb. */
#define TILE_BLOCK(ta, tb, tc, b, cb)                                        \
    do {                                                                     \
        _tile_loadd(ta, a + (size_t)(b) * a_blk, a_stride);                  \
        _tile_loadd(tb, bq + ((size_t)(b) >> bsh) * 512, 64);                \
        _tile_zero(tc);                                                      \
        _tile_dpbssd(tc, ta, tb);                                            \
        TILE_STORE_C(tc, cb);                                                \
    } while (0)

/* Blocks b0..b1 of one output tile through the tile unit: the int32 C of
 * block b at cb + (b - b0) * 256; block b's B tile is bq + (b >> bsh) *
 * 512 (bsh 1: two A tiles per B tile, Q6_K's 16-value sub-blocks).  Four
 * consecutive blocks use four C registers and two A/B pairs, so no tile
 * register is rewritten right after the instruction that reads it (as
 * fast as two C registers in the measurements, never slower). */
static inline void
tile_blocks(const int8_t *a, size_t a_stride, size_t a_blk, const int8_t *bq,
            int bsh, int b0, int b1, int32_t *cb)
{
    int b = b0;
    for (; b + 4 <= b1; b += 4, cb += 1024) {
        TILE_BLOCK(0, 1, 2, b, cb);
        TILE_BLOCK(3, 4, 5, b + 1, cb + 256);
        TILE_BLOCK(0, 1, 6, b + 2, cb + 512);
        TILE_BLOCK(3, 4, 7, b + 3, cb + 768);
    }
    for (; b < b1; b++, cb += 256)
        TILE_BLOCK(0, 1, 2, b, cb);
}

/* K-quants: the A tiles hold the unsigned 4/5-bit values of one 32-value
 * sub-block (Q4_K, Q5_K), or Q6_K's signed values of one 16-value
 * sub-block with the other half of the 32 zero (two A tiles per B tile:
 * half the rate, but the per-16 scales allow nothing longer); the
 * sub-blocks of a 256-value block form one group, whose C tiles are
 * combined with the integer sub-block scales (as float, fma), the mins
 * (VPDPWSSD against the activation pair sums; none for Q6_K) and d, dmin
 * as the plain C vec_dot does (tile_gemm_k).
 *
 * The tile unit runs GROUP blocks ahead of the AVX-512 scaling (C slots
 * in a ring of 2 * GROUP), and the two are interleaved block by block:
 * reading a tile store back at once stalls for it (measured: 3x slower
 * with one block in flight), and a burst of a whole group's tile work
 * ahead of its scaling fills the reorder window (interleaving measured
 * 10-20% faster than bursts of 8). */
#define GROUP 8
/* Sub-block tiles per 256-value block, at most (Q6_K). */
#define KSUB_MAX 16

/* Block b's tile dot into C slot b % (2 * GROUP); consecutive blocks use
 * alternate tile registers. */
static inline void
tile_one(const int8_t *a, size_t a_stride, size_t a_blk, const int8_t *bq,
         int bsh, int b, int32_t *cbuf)
{
    int32_t *cb = cbuf + (size_t)(b % (2 * GROUP)) * 256;
    if (b & 1)
        TILE_BLOCK(3, 4, 5, b, cb);
    else
        TILE_BLOCK(0, 1, 2, b, cb);
}

/* Software prefetch of the next weight panel, spread over the work on
 * this one (struct pf): the weight rows are short streams (1-6 KiB) that
 * the hardware prefetcher picks up late, and the first touch of them in
 * the unpack was 15-20% of the GEMM's time inside a prompt.  A burst of
 * prefetches per panel was measured to cost more than it saved (fill
 * buffers full); a few per block of tile work do not.  p == NULL: none. */
struct pf {
    const char *p;  /* next panel's first row */
    size_t row;     /* bytes per row */
    size_t blk;     /* bytes per weight block (per 32 or 256 values) */
    int nr;         /* rows in the next panel */
};

static inline void
pf_block(const struct pf *pf, int b)
{
    if (!pf->p)
        return;
    for (int m = 0; m < pf->nr; m++)
        _mm_prefetch(pf->p + (size_t)m * pf->row + (size_t)b * pf->blk,
                     _MM_HINT_T1);
}

/* One output tile over nb blocks: A (16 x 32 bytes) of block b at a + b *
 * a_blk (rows a_stride apart), B at bq + b * 512; the scale of C[m][n] is
 * bd[b * 16 + n] * ad[b * ad_blk + m * ad_m]. */
static void
tile_gemm(const int8_t *a, size_t a_stride, size_t a_blk, const int8_t *bq,
          const float *bd, const float *ad, size_t ad_blk, size_t ad_m,
          int nb, int32_t *cbuf, const struct pf *pf, const __m512 *in,
          __m512 *out)
{
    /* sixteen named accumulators: as arrays (one of 16, or two of 8)
     * GCC 12 kept a copy of each in memory and stored all 16 after every
     * block (16 stores a block beside the tile store's 16; seen in the
     * object code); in (or zeros): where they start */
    __m512 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14,
        a15;
#define ACC_ALL(X)                                                           \
    X(0, a0) X(1, a1) X(2, a2) X(3, a3) X(4, a4) X(5, a5) X(6, a6)          \
    X(7, a7) X(8, a8) X(9, a9) X(10, a10) X(11, a11) X(12, a12)             \
    X(13, a13) X(14, a14) X(15, a15)
#define ACC_INIT(m, v) v = in ? in[m] : _mm512_setzero_ps();
#define ACC_SCALE(m, v)                                                      \
    v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb + 16 * (m))), \
                        _mm512_mul_ps(dv, _mm512_set1_ps(ap[(m) * ad_m])),  \
                        v);
#define ACC_OUT(m, v) out[m] = v;
    ACC_ALL(ACC_INIT)
    TILE_INPUTS_WRITTEN();
    const int bsh = 0;
    for (int b = 0; b < GROUP && b < nb; b++)
        tile_one(a, a_stride, a_blk, bq, bsh, b, cbuf);
    for (int b = 0; b < nb; b++) {
        if (b + GROUP < nb)
            tile_one(a, a_stride, a_blk, bq, bsh, b + GROUP, cbuf);
        if ((b & 1) == 0)
            pf_block(pf, b);
        const int32_t *cb = cbuf + (size_t)(b % (2 * GROUP)) * 256;
        const float *ap = ad + (size_t)b * ad_blk;
        __m512 dv = _mm512_load_ps(bd + (size_t)b * 16);
        ACC_ALL(ACC_SCALE)
    }
    ACC_ALL(ACC_OUT)
#undef ACC_ALL
#undef ACC_INIT
#undef ACC_SCALE
#undef ACC_OUT
}

/* Q6_K block -> 16 sub-block tiles of 32 bytes at dst + s * 512: the 16
 * values (-32..31) of sub-block s in the half (s & 1) of the 32 that its
 * B tile (32-value group s / 2) has them, the other half zero. */
static void
unpack_q6_K(const struct amxk_q6_K *x, int8_t *dst)
{
    const __m256i lo4 = _mm256_set1_epi8(0x0f), three = _mm256_set1_epi8(3);
    const __m256i k32 = _mm256_set1_epi8(32);
    const __m256i first = _mm256_setr_epi64x(-1, -1, 0, 0);
    for (int n = 0; n < 2; n++) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + n * 64));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + n * 64 + 32));
        __m256i h = _mm256_loadu_si256((const __m256i *)(x->qh + n * 32));
        __m256i v[4];
        v[0] = _mm256_or_si256(_mm256_and_si256(l0, lo4),
                               _mm256_slli_epi16(_mm256_and_si256(h, three), 4));
        v[1] = _mm256_or_si256(
            _mm256_and_si256(l1, lo4),
            _mm256_slli_epi16(
                _mm256_and_si256(_mm256_srli_epi16(h, 2), three), 4));
        v[2] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4),
            _mm256_slli_epi16(
                _mm256_and_si256(_mm256_srli_epi16(h, 4), three), 4));
        v[3] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4),
            _mm256_slli_epi16(
                _mm256_and_si256(_mm256_srli_epi16(h, 6), three), 4));
        for (int k = 0; k < 4; k++) {
            __m256i q = _mm256_sub_epi8(v[k], k32);
            int s = n * 8 + 2 * k; /* values n*128 + 32k.. = sub-blocks s, s+1 */
            _mm256_store_si256((__m256i *)(dst + (size_t)s * 512),
                               _mm256_and_si256(q, first));
            _mm256_store_si256((__m256i *)(dst + (size_t)(s + 1) * 512),
                               _mm256_andnot_si256(first, q));
        }
    }
}

/* K-quant panel: nr rows -> per 256-value block sb, nsub (8, or 16 for
 * Q6_K) sub-block tiles aq[sb * nsub + s][16][32] (Q4_K/Q5_K: the
 * unsigned values 0..15 / 0..31 of 32-value sub-block s; Q6_K: see
 * unpack_q6_K), scf[(sb * nsub + s) * 16 + m] the sub-block's scale as
 * float, mnp[(sb * 4 + j) * 16 + m] the mins of sub-blocks 2j and 2j + 1
 * as two int16 (0 for Q6_K), kd / kdm[sb * 16 + m] the block's d and dmin.
 * Rows past nr are zero. */
static void
unpack_panel_k(enum le_type wt, const uint8_t *w, size_t w_row, int nr,
               int nsb, int8_t *aq, float *scf, int32_t *mnp, float *kd,
               float *kdm)
{
    const __m256i lo4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    size_t bsz = wt == LE_TYPE_Q4_K ? 144 : wt == LE_TYPE_Q5_K ? 176 : 210;
    int nsub = wt == LE_TYPE_Q6_K ? 16 : 8;
    for (int m = 0; m < 16; m++) {
        for (int sb = 0; sb < nsb; sb++) {
            int8_t *dst = aq + ((size_t)sb * nsub * 16 + m) * 32;
            if (m >= nr) {
                for (int s = 0; s < nsub; s++) {
                    _mm256_store_si256((__m256i *)(dst + s * 512),
                                       _mm256_setzero_si256());
                    scf[((size_t)sb * nsub + s) * 16 + m] = 0;
                }
                for (int j = 0; j < 4; j++)
                    mnp[((size_t)sb * 4 + j) * 16 + m] = 0;
                kd[(size_t)sb * 16 + m] = kdm[(size_t)sb * 16 + m] = 0;
                continue;
            }
            const uint8_t *blk = w + (size_t)m * w_row + (size_t)sb * bsz;
            if (wt == LE_TYPE_Q6_K) {
                const struct amxk_q6_K *x6 = (const void *)blk;
                unpack_q6_K(x6, dst);
                for (int s = 0; s < 16; s++)
                    scf[((size_t)sb * 16 + s) * 16 + m] = (float)x6->scales[s];
                for (int j = 0; j < 4; j++)
                    mnp[((size_t)sb * 4 + j) * 16 + m] = 0;
                kd[(size_t)sb * 16 + m] = _cvtsh_ss(x6->d);
                kdm[(size_t)sb * 16 + m] = 0;
                continue;
            }
            const struct amxk_q4_K *x4 = (const void *)blk;
            const struct amxk_q5_K *x5 = (const void *)blk;
            const uint8_t *qs = wt == LE_TYPE_Q4_K ? x4->qs : x5->qs;
            kd[(size_t)sb * 16 + m] = _cvtsh_ss(x4->d);
            kdm[(size_t)sb * 16 + m] = _cvtsh_ss(x4->dmin);
            /* pairs straight into their slots: a min array read back as
             * a vector right after its scalar stores stalled on store
             * forwarding (a quarter of this function's time) */
            for (int j = 0; j < 4; j++) {
                int sc0, mn0, sc1, mn1;
                le_k4_scale_min(x4->scales, 2 * j, &sc0, &mn0);
                le_k4_scale_min(x4->scales, 2 * j + 1, &sc1, &mn1);
                scf[((size_t)sb * 8 + 2 * j) * 16 + m] = (float)sc0;
                scf[((size_t)sb * 8 + 2 * j + 1) * 16 + m] = (float)sc1;
                mnp[((size_t)sb * 4 + j) * 16 + m] =
                    (int32_t)((uint32_t)mn0 | (uint32_t)mn1 << 16);
            }
            __m256i qh = wt == LE_TYPE_Q5_K
                             ? _mm256_loadu_si256((const __m256i *)x5->qh)
                             : _mm256_setzero_si256();
            for (int jj = 0; jj < 4; jj++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * jj));
                __m256i lo = _mm256_and_si256(v, lo4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
                /* Q5_K: bit 2jj of qh[l] is the 5th bit of sub-block 2jj */
                __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * jj), one);
                __m256i h1 =
                    _mm256_and_si256(_mm256_srli_epi16(qh, 2 * jj + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
                _mm256_store_si256((__m256i *)(dst + (2 * jj) * 512), lo);
                _mm256_store_si256((__m256i *)(dst + (2 * jj + 1) * 512), hi);
            }
        }
    }
}

/* One 16 x 16 output tile of a K-quant product: per 256-value block, the
 * eight sub-block tiles (one group) are combined as the plain C twin does:
 *   fi   = sum over s of fma((float)C_s, (float)sc_s)   (in order)
 *   mi   = sum over s of mn_s * bsum_s                   (exact, VPDPWSSD)
 *   acc += d_act * (d * fi) - d_act * (dmin * (float)mi)
 */
static void
tile_gemm_k(int nsub, const int8_t *a, const int8_t *bq, const float *bd,
            const int32_t *bs, const float *scf, const int32_t *mnp,
            const float *kd, const float *kdm, int nsb, int32_t *cbuf,
            const struct pf *pf, __m512 *out)
{
    __m512 acc[16];
    for (int m = 0; m < 16; m++)
        acc[m] = _mm512_setzero_ps();
    int bsh = nsub == 16;
    TILE_INPUTS_WRITTEN();
    tile_blocks(a, 32, 512, bq, bsh, 0, nsub, cbuf);
    for (int sb = 0; sb < nsb; sb++) {
        int32_t *cur = cbuf + (size_t)(sb & 1) * KSUB_MAX * 256;
        int32_t *nxt = cbuf + (size_t)((sb + 1) & 1) * KSUB_MAX * 256;
        /* the next block's tiles as one burst: spreading them over the
         * rows below, as tile_gemm does, measured 0-10% slower here */
        if (sb + 1 < nsb)
            tile_blocks(a, 32, 512, bq, bsh, (sb + 1) * nsub, (sb + 2) * nsub,
                        nxt);
        if (pf->p) { /* this block of the next panel: 144-210 bytes a row */
            struct pf p64 = *pf;
            for (size_t o = 0; o < pf->blk; o += 64) {
                p64.p = pf->p + o;
                pf_block(&p64, sb);
            }
        }
        __m512 dv = _mm512_load_ps(bd + (size_t)sb * 16);
        const int32_t *bsb = bs + (size_t)sb * 64;
        __m512i b0 = _mm512_load_si512(bsb), b1 = _mm512_load_si512(bsb + 16);
        __m512i b2 = _mm512_load_si512(bsb + 32), b3 = _mm512_load_si512(bsb + 48);
        const float *sc = scf + (size_t)sb * nsub * 16;
        const int32_t *mp = mnp + (size_t)sb * 64;
        _Pragma("GCC unroll 16") for (int m = 0; m < 16; m++)
        {
            __m512 fi = _mm512_setzero_ps();
            for (int s = 0; s < nsub; s++)
                fi = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(
                        _mm512_load_si512(cur + s * 256 + 16 * m)),
                    _mm512_set1_ps(sc[s * 16 + m]), fi);
            __m512i mi = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                             _mm512_set1_epi32(mp[m]), b0);
            mi = _mm512_dpwssd_epi32(mi, _mm512_set1_epi32(mp[16 + m]), b1);
            mi = _mm512_dpwssd_epi32(mi, _mm512_set1_epi32(mp[32 + m]), b2);
            mi = _mm512_dpwssd_epi32(mi, _mm512_set1_epi32(mp[48 + m]), b3);
            __m512 t1 = _mm512_mul_ps(
                dv, _mm512_mul_ps(_mm512_set1_ps(kd[sb * 16 + m]), fi));
            __m512 t2 = _mm512_mul_ps(
                dv, _mm512_mul_ps(_mm512_set1_ps(kdm[sb * 16 + m]),
                                  _mm512_cvtepi32_ps(mi)));
            acc[m] = _mm512_add_ps(acc[m], _mm512_sub_ps(t1, t2));
        }
    }
    for (int m = 0; m < 16; m++)
        out[m] = acc[m];
}

/* acc[m] holds row m's 16 tokens; y is laid out [token][row], so the tile
 * is transposed through tmp (stores, then gathers from L1) into one
 * 64-byte row segment per token (a scatter per row was 20% of the time:
 * 16 cache lines touched by each). */
static void
store_tile(const __m512 *acc, float *tmp, float *y, size_t n_out, int ntok,
           int nr)
{
    for (int m = 0; m < 16; m++)
        _mm512_store_ps(tmp + 16 * m, acc[m]);
    const __m512i col = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                          15),
        _mm512_set1_epi32(16));
    __mmask16 rows = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    for (int n = 0; n < ntok; n++)
        _mm512_mask_storeu_ps(y + (size_t)n * n_out, rows,
                              _mm512_i32gather_ps(col, tmp + n, 4));
}

int
le_gemm_amx(enum le_type wt, int n_in, const void *w, size_t w_row, int r0,
            int r1, const void *xq, size_t x_row, int n_tok, float *y,
            int n_out)
{
    int kq = is_kquant(wt);
    if (!le_gemm_amx_type(wt) || n_in % (kq ? 256 : 32))
        return -1;
    if (r1 <= r0 || n_tok <= 0)
        return 0;
    int ng = n_in / 32, nsb = n_in / 256;
    int nsub = wt == LE_TYPE_Q6_K ? 16 : 8; /* K-quant A tiles per block */
    int chunk_tiles = (n_tok < TOK_CHUNK ? n_tok + 15 : TOK_CHUNK) / 16;
    /* scratch: activations (B tiles, scales, K-quant pair sums), one weight
     * panel (A tiles and its scales), two C groups, one output tile */
    size_t bq_size = (size_t)chunk_tiles * ng * 512;
    size_t bd_size = (size_t)chunk_tiles * ng * 16 * sizeof(float);
    size_t bs_size = kq ? (size_t)chunk_tiles * nsb * 64 * sizeof(int32_t) : 0;
    size_t aq_size = (size_t)(kq ? nsb * nsub : ng) * 512;
    size_t ad_size = (size_t)(kq ? nsb * nsub : ng) * 16 * sizeof(float);
    size_t ak_size = kq ? (size_t)nsb * 96 * sizeof(float) : 0; /* mnp kd kdm */
    size_t c_size = 2 * KSUB_MAX * 1024;
    uint8_t *buf = scratch_get(bq_size + bd_size + bs_size + aq_size +
                               ad_size + ak_size + c_size + 1024);
    if (!buf)
        return -1;
    int8_t *bq = (int8_t *)buf;
    float *bd = (float *)(buf + bq_size);
    int32_t *bs = (int32_t *)(buf + bq_size + bd_size);
    uint8_t *pa = buf + bq_size + bd_size + bs_size;
    int8_t *aq = (int8_t *)pa;
    float *ad = (float *)(pa + aq_size);
    int32_t *mnp = (int32_t *)(pa + aq_size + ad_size);
    float *kd = (float *)(mnp + (size_t)nsb * 64);
    float *kdm = kd + (size_t)nsb * 16;
    int32_t *cbuf = (int32_t *)(pa + aq_size + ad_size + ak_size);
    float *tmp = (float *)(cbuf + 2 * KSUB_MAX * 256);
    const uint8_t *wb = w;

    tiles_config();
    __m512 acc[16];
    for (int t0 = 0; t0 < n_tok; t0 += TOK_CHUNK) {
        int nt = n_tok - t0 < TOK_CHUNK ? n_tok - t0 : TOK_CHUNK;
        pack_acts(kq, (const uint8_t *)xq + (size_t)t0 * x_row, x_row, nt, ng,
                  bq, bd, bs);
        for (int r = r0; r < r1; r += 16) {
            int nr = r1 - r < 16 ? r1 - r : 16;
            const uint8_t *wr = wb + (size_t)r * w_row;
            int direct = wt == LE_TYPE_Q8_0 && nr == 16;
            if (kq) {
                unpack_panel_k(wt, wr, w_row, nr, nsb, aq, ad, mnp, kd, kdm);
            } else {
                /* Q8_0: full panels' A tiles straight from the file (the
                 * copy cost 20-30% at 32 tokens with weights out of cache) */
                if (!direct)
                    unpack_panel(wt, wr, w_row, nr, ng, aq);
                pack_wscales(wt, wr, w_row, nr, ng, ad);
            }
            /* prefetch the next panel during the first token tile */
            struct pf pf = {NULL, w_row, 0, 0};
            size_t wblk = kq ? (wt == LE_TYPE_Q4_K   ? 144
                                : wt == LE_TYPE_Q5_K ? 176
                                                     : 210)
                             : (wt == LE_TYPE_Q8_0 ? 34 : 18);
            for (int tt = 0; tt * 16 < nt; tt++) {
                pf.p = tt == 0 && r + 16 < r1
                           ? (const char *)(wr + 16 * w_row)
                           : NULL;
                pf.blk = wblk;
                pf.nr = r1 - r - 16 < 16 ? r1 - r - 16 : 16;
                if (kq)
                    tile_gemm_k(nsub, aq, bq + (size_t)tt * ng * 512,
                                bd + (size_t)tt * nsb * 16,
                                bs + (size_t)tt * nsb * 64, ad, mnp, kd, kdm,
                                nsb, cbuf, &pf, acc);
                else
                    tile_gemm(direct ? (const int8_t *)wr + 2 : aq,
                              direct ? w_row : 32, direct ? 34 : 512,
                              bq + (size_t)tt * ng * 512,
                              bd + (size_t)tt * ng * 16, ad, 16, 1, ng, cbuf,
                              &pf, NULL, acc);
                int left = nt - tt * 16;
                store_tile(acc, tmp, y + (size_t)(t0 + tt * 16) * n_out + r,
                           (size_t)n_out, left < 16 ? left : 16, nr);
            }
        }
    }
    _tile_release();
    return 0;
}

/* ------------------------------------------------------------------ */
/* Repacked Q8_0 / Q4_0 groups (repack.c's layout) through the tiles.   */

/*
 * The repacked layout is already the B operand: chunk c of a block holds 4
 * consecutive values of each of the 16 rows, 64 bytes, which is one B row
 * (K/4 = c, N = the 16 weight rows).  So here the weights are B (Q8_0: the
 * block's 512 bytes loaded as they are; Q4_0: the group's nibbles unpacked
 * to int8 once per call, rows 0-3 the low nibbles of chunks 0-3, rows 4-7
 * the high ones, less 8) and A is 16 activation rows, 32 bytes after each
 * Q8_0 block's scale, loaded straight from the activation rows.  C[t][r] =
 * token t x weight row r, so each accumulator is one token's 16 outputs
 * (no transpose) and the scale d_w[r] * d_act[t] takes the weights' 16
 * fp16 scales as one vector and the token's from its prep row.  The
 * products are those of le_gemm_amx (the operands swapped; the scale
 * product commutes), so the result is le_gemm_amx_ref's bit for bit.
 * A batch that ran this reads only the packed copy: the GGUF mapping of
 * these types is never touched after load (one copy of the weights in the
 * cache, not two).
 */
/* Blocks per K chunk of packed_gemm with tiled activations: the chunk's
 * B (16 KiB) and one token tile's A (16 KiB) stay in L1 while every token
 * tile of the batch passes over them; over whole rows (up to 90 KiB of
 * B, as much A) every tile load came from L2. */
#define KC 32

static void
packed_gemm(int q4, int n, const void *w, const struct le_pack_act *a,
            int ntok, float *y, size_t ys, int nr)
{
    int nb = n / 32, ntt = (ntok + 15) / 16;
    const uint8_t *qs = w;
    const uint16_t *dw =
        (const uint16_t *)(qs + (size_t)nb * (q4 ? 256 : 512));
    size_t c_size = 2 * GROUP * 1024, wd_size = (size_t)nb * 64;
    size_t ad_size = (size_t)nb * 64, bq_size = q4 ? (size_t)nb * 512 : 0;
    size_t acc_size = a->t ? (size_t)ntt * 1024 : 0;
    uint8_t *buf =
        scratch_get(c_size + wd_size + ad_size + bq_size + acc_size);
    if (!buf) { /* same sums, the VNNI kernel's rounding order */
        (q4 ? le_gemm_q4_0_avx512 : le_gemm_q8_0_avx512)(n, w, a, ntok, y,
                                                          ys, nr);
        return;
    }
    int32_t *cbuf = (int32_t *)buf;
    float *wd = (float *)(buf + c_size);
    float *tail_ad = (float *)(buf + c_size + wd_size);
    int8_t *bq = q4 ? (int8_t *)(buf + c_size + wd_size + ad_size)
                    : (int8_t *)qs;
    __m512 *accb = (__m512 *)(buf + c_size + wd_size + ad_size + bq_size);
    for (int b = 0; b < nb; b++)
        _mm512_store_ps(wd + (size_t)b * 16,
                        _mm512_cvtph_ps(_mm256_load_si256(
                            (const __m256i *)(dw + (size_t)b * 16))));
    /* the last token tile's scales: tokens past the batch scale by 0
     * (their prep rows do not exist) and are not stored */
    int left_last = ntok - (ntt - 1) * 16;
    size_t ad_blk = sizeof(struct le_prep_q8_0) / sizeof(float);
    size_t ad_m = a->p_row / sizeof(float);
    if (left_last < 16) {
        const float *ad =
            (const float *)(a->p + (size_t)(ntt - 1) * 16 * a->p_row);
        for (int b = 0; b < nb; b++)
            for (int m = 0; m < 16; m++)
                tail_ad[(size_t)b * 16 + m] =
                    m < left_last ? ad[(size_t)b * ad_blk + (size_t)m * ad_m]
                                  : 0.0f;
    }
    const struct pf nopf = {NULL, 0, 0, 0};
    __mmask16 rows = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    tiles_config();
    /* Without A tiles: one token tile at a time over the whole row, A
     * from the 34-byte-strided activation rows.  With them: K chunks,
     * every token tile per chunk, the accumulators kept in accb between
     * chunks (a float store and load: the sums' order is unchanged). */
    int kc_n = a->t ? KC : nb;
    for (int kc = 0; kc < nb; kc += kc_n) {
        int kn = nb - kc < kc_n ? nb - kc : kc_n;
        /* Q4_0: this chunk's nibbles to int8 B tiles (rows 0-3 the low
         * nibbles of chunks 0-3, rows 4-7 the high ones, less 8), just
         * before the token tiles read them: from L1 then, where unpacking
         * whole rows first (up to 90 KiB) left them in L2 */
        const __m512i m4 = _mm512_set1_epi8(0x0f), k8 = _mm512_set1_epi8(8);
        for (int b = kc; q4 && b < kc + kn; b++)
            for (int c = 0; c < 4; c++) {
                __m512i v = _mm512_load_si512(
                    (const void *)(qs + (size_t)b * 256 + 64 * c));
                __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, m4), k8);
                __m512i hi = _mm512_sub_epi8(
                    _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), k8);
                _mm512_store_si512((void *)(bq + (size_t)b * 512 + 64 * c),
                                   lo);
                _mm512_store_si512(
                    (void *)(bq + (size_t)b * 512 + 256 + 64 * c), hi);
            }
        for (int tt = 0; tt < ntt; tt++) {
            int t0 = tt * 16, left = ntok - t0 < 16 ? ntok - t0 : 16;
            const float *ad = (const float *)(a->p + (size_t)t0 * a->p_row);
            size_t tb = ad_blk, tm = ad_m;
            if (left < 16) {
                /* A and C of left rows (C zeroed: the scaling reads all
                 * 16 rows) */
                tiles_config_rows(left);
                memset(cbuf, 0, c_size);
                ad = tail_ad;
                tb = 16;
                tm = 1;
            }
            const int8_t *at =
                a->t ? (const int8_t *)a->t + ((size_t)tt * nb + kc) * 512
                     : (const int8_t *)a->q + (size_t)t0 * a->q_row + 2 +
                           (size_t)kc * 34;
            __m512 acc[16];
            tile_gemm(at, a->t ? 32 : a->q_row, a->t ? 512 : 34,
                      bq + (size_t)kc * 512, wd + (size_t)kc * 16,
                      ad + (size_t)kc * tb, tb, tm, kn, cbuf, &nopf,
                      kc > 0 ? accb + (size_t)tt * 16 : NULL,
                      kc + kn < nb ? accb + (size_t)tt * 16 : acc);
            if (left < 16)
                tiles_config();
            if (kc + kn < nb)
                continue;
            for (int m = 0; m < left; m++)
                _mm512_mask_storeu_ps(y + (size_t)(t0 + m) * ys, rows,
                                      acc[m]);
        }
    }
    _tile_release();
}

void
le_gemm_q8_0_amx(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    packed_gemm(0, n, w, a, ntok, y, ys, nr);
}

void
le_gemm_q4_0_amx(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    packed_gemm(1, n, w, a, ntok, y, ys, nr);
}

#else /* not x86-64: le_amx_usable() is 0, so this is never called */

void
le_gemm_q8_0_amx(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    le_gemm_q8_0_ref(n, w, a, ntok, y, ys, nr);
}

void
le_gemm_q4_0_amx(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    le_gemm_q4_0_ref(n, w, a, ntok, y, ys, nr);
}


int
le_gemm_amx(enum le_type wt, int n_in, const void *w, size_t w_row, int r0,
            int r1, const void *xq, size_t x_row, int n_tok, float *y,
            int n_out)
{
    (void)wt, (void)n_in, (void)w, (void)w_row, (void)r0, (void)r1;
    (void)xq, (void)x_row, (void)n_tok, (void)y, (void)n_out;
    return -1;
}

#endif
