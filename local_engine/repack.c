/*
 * repack.c: weights repacked at load into row-interleaved groups, and the
 * plain C twins of the kernels that stream them (quants_avx2.c and
 * quants_avx512.c hold the SIMD ones; tests/test_quants.c holds them all
 * to each other and to the per-row vec_dot of quants.c, bit for bit).
 *
 * Why: a matrix product over the GGUF layout reads one row at a time, so
 * a SIMD kernel reduces each block to one row's scalar and converts one
 * fp16 scale at a time (the scale conversions formed a dependency chain
 * in the AVX2 Q4_0 kernel).  Interleaving LE_PACK_ROWS = 16 rows in
 * 4-byte chunks puts one row in each 32-bit lane of a 512-bit register:
 * one load feeds vpdpbusd for 16 rows against one broadcast 4-byte piece
 * of the activation, the 16 row scales of a block convert with one
 * vcvtph2ps, and the per-row sums never need a horizontal add.  The same
 * layout serves AVX2 as two 8-row halves.
 *
 * A group (16 rows; rows past the matrix's end are zero and never stored)
 * is, for a row of n values in nb blocks:
 *
 *   Q4_0  qs[nb][4][16][4] then d[nb][16]     (288 bytes a block column)
 *         chunk c of row r holds the row's qs[4c..4c+3]: low nibbles are
 *         values 4c..4c+3, high nibbles 16+4c..16+4c+3
 *   Q8_0  qs[nb][8][16][4] then d[nb][16]     (544 bytes)
 *         chunk c of row r holds values 4c..4c+3
 *   Q4_K  qs[nsb][4][8][16][4] then per super-block
 *         d[16] dmin[16] sc[8][16] mn[4][16][2]   (2368 bytes = 16 x 148)
 *         chunk (jj, c) of row r holds qs[32jj+4c..+3]: low nibbles are
 *         values 64jj+4c.. (sub-block 2jj), high nibbles 64jj+32+4c..
 *         (sub-block 2jj+1); scales and mins unpacked to bytes, mins in
 *         pairs (sub-blocks 2k, 2k+1) so one widening load gives int16
 *         pairs for vpmaddwd / vpdpwssd
 *
 * The quants sections come first so that every vector load is aligned (a
 * group starts 64-byte aligned; groups are padded to 64 bytes).  Memory:
 * Q4_0 and Q8_0 the same bytes as the file, Q4_K 148/144 (+2.8%).
 *
 * Activations: besides the vec_dot_type row, the kernels read a "prep"
 * row made once per product: for Q8_0 per block {float d, int32 sum of
 * quants} (the nibble kernels compute sum (q)*a - 8 sum a; VNNI's
 * unsigned x signed product needs the sum for Q8_0's +128 bias), for
 * Q8_K per super-block 4 int32 words, each two int16 sums of 32 quants
 * (the bsums of sub-blocks 2k and 2k+1 for the mins).
 *
 * Every kernel computes per row exactly the integer sums and then the
 * float expression, in the same order, of quants.c's vec_dot for that
 * type, so results are bit-identical to the unpacked path (and hence do
 * not depend on the ISA level or the thread count).
 */
#include "le_int.h"

#include <string.h>

#define R LE_PACK_ROWS

/* The raw blocks (as quants.c; sizes pinned there and here). */
struct blk_q4_0 {
    uint16_t d;
    uint8_t qs[16];
};
_Static_assert(sizeof(struct blk_q4_0) == 18, "as in quants.c");
struct blk_q8_0 {
    uint16_t d;
    int8_t qs[32];
};
_Static_assert(sizeof(struct blk_q8_0) == 34, "as in quants.c");
struct blk_q4_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
};
_Static_assert(sizeof(struct blk_q4_K) == 144, "as in quants.c");
struct blk_q8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
_Static_assert(sizeof(struct blk_q8_K) == 292, "as in quants.c");

/* ------------------------------------------------------------------ */
/* Packing.                                                             */

static const uint8_t *
src_row(const void *src, size_t row_bytes, int r)
{
    return (const uint8_t *)src + (size_t)r * row_bytes;
}

/* Q4_0 and Q8_0: blocks of an fp16 scale and qbytes of quants, cut into
 * 4-byte chunks (4 for Q4_0, 8 for Q8_0). */
static void
pack_legacy(const void *src, size_t row_bytes, int nr, int n, void *vdst,
            int qbytes)
{
    int nb = n / 32;
    size_t col = (size_t)qbytes * R, blk = 2 + (size_t)qbytes;
    uint8_t *qs = vdst;
    uint16_t *d = (uint16_t *)(qs + (size_t)nb * col);
    for (int r = 0; r < nr; r++) {
        const uint8_t *x = src_row(src, row_bytes, r);
        for (int b = 0; b < nb; b++) {
            memcpy(&d[b * R + r], x + b * blk, 2);
            for (int c = 0; c < qbytes / 4; c++)
                memcpy(qs + (size_t)b * col + c * 64 + r * 4,
                       x + b * blk + 2 + 4 * c, 4);
        }
    }
}

static void
pack_q4_0(const void *src, size_t row_bytes, int nr, int n, void *dst)
{
    pack_legacy(src, row_bytes, nr, n, dst, 16);
}

static void
pack_q8_0(const void *src, size_t row_bytes, int nr, int n, void *dst)
{
    pack_legacy(src, row_bytes, nr, n, dst, 32);
}

/* Scale and min j of a Q4_K block (quants.c's k4_scale_min). */
static void
k4_sm(const uint8_t *q, int j, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void
pack_q4_K(const void *src, size_t row_bytes, int nr, int n, void *vdst)
{
    int nsb = n / 256;
    uint8_t *qs = vdst;
    uint8_t *meta = qs + (size_t)nsb * 2048;
    for (int r = 0; r < nr; r++) {
        const struct blk_q4_K *x = (const void *)src_row(src, row_bytes, r);
        for (int b = 0; b < nsb; b++) {
            uint8_t *mb = meta + (size_t)b * LE_PACK_Q4_K_META;
            memcpy(mb + 2 * r, &x[b].d, 2);
            memcpy(mb + 32 + 2 * r, &x[b].dmin, 2);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, mn;
                k4_sm(x[b].scales, j, &sc, &mn);
                mb[64 + j * R + r] = sc;
                mb[192 + (j / 2) * 32 + r * 2 + (j & 1)] = mn;
            }
            for (int jj = 0; jj < 4; jj++)
                for (int c = 0; c < 8; c++)
                    memcpy(qs + (size_t)b * 2048 + (jj * 8 + c) * 64 + r * 4,
                           x[b].qs + 32 * jj + 4 * c, 4);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Activation prep.                                                     */

void
le_pack_prep(enum le_type vdt, const void *q, int n, void *vprep)
{
    if (vdt == LE_TYPE_Q8_0) {
        const struct blk_q8_0 *x = q;
        struct le_prep_q8_0 *p = vprep;
        for (int b = 0; b < n / 32; b++) {
            int32_t s = 0;
            for (int j = 0; j < 32; j++)
                s += x[b].qs[j];
            p[b].d = le_fp16_to_fp32(x[b].d);
            p[b].sum = s;
        }
    } else if (vdt == LE_TYPE_Q8_K) {
        const struct blk_q8_K *x = q;
        int32_t *p = vprep;
        for (int b = 0; b < n / 256; b++)
            for (int k = 0; k < 4; k++) {
                const int16_t *bs = x[b].bsums + 4 * k;
                uint16_t lo = (uint16_t)(int16_t)(bs[0] + bs[1]);
                uint16_t hi = (uint16_t)(int16_t)(bs[2] + bs[3]);
                p[4 * b + k] = (int32_t)((uint32_t)lo | ((uint32_t)hi << 16));
            }
    }
}

size_t
le_pack_prep_size(enum le_type vdt, int n)
{
    if (vdt == LE_TYPE_Q8_0)
        return (size_t)(n / 32) * sizeof(struct le_prep_q8_0);
    if (vdt == LE_TYPE_Q8_K)
        return (size_t)(n / 256) * 4 * sizeof(int32_t);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Plain C kernels (the twins).                                         */

static const uint8_t *
act_q(const struct le_pack_act *a, int t)
{
    return a->q + (size_t)t * a->q_row;
}

static const void *
act_p(const struct le_pack_act *a, int t)
{
    return a->p + (size_t)t * a->p_row;
}

void
le_gemm_q4_0_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    int nb = n / 32;
    const uint8_t *qs = w;
    const uint16_t *d = (const uint16_t *)(qs + (size_t)nb * 256);
    for (int t = 0; t < ntok; t++) {
        const struct blk_q8_0 *x = (const void *)act_q(a, t);
        const struct le_prep_q8_0 *p = act_p(a, t);
        for (int r = 0; r < nr; r++) {
            float sumf = 0;
            for (int b = 0; b < nb; b++) {
                int32_t s = 0;
                for (int c = 0; c < 4; c++)
                    for (int k = 0; k < 4; k++) {
                        uint8_t v = qs[(size_t)b * 256 + c * 64 + r * 4 + k];
                        s += (v & 15) * x[b].qs[4 * c + k] +
                             (v >> 4) * x[b].qs[16 + 4 * c + k];
                    }
                s -= 8 * p[b].sum;
                sumf += (float)s * le_fp16_to_fp32(d[b * R + r]) * p[b].d;
            }
            y[(size_t)t * ys + r] = sumf;
        }
    }
}

void
le_gemm_q8_0_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    int nb = n / 32;
    const uint8_t *qs = w;
    const uint16_t *d = (const uint16_t *)(qs + (size_t)nb * 512);
    for (int t = 0; t < ntok; t++) {
        const struct blk_q8_0 *x = (const void *)act_q(a, t);
        const struct le_prep_q8_0 *p = act_p(a, t);
        for (int r = 0; r < nr; r++) {
            float sumf = 0;
            for (int b = 0; b < nb; b++) {
                int32_t s = 0;
                for (int c = 0; c < 8; c++)
                    for (int k = 0; k < 4; k++)
                        s += (int8_t)qs[(size_t)b * 512 + c * 64 + r * 4 + k] *
                             x[b].qs[4 * c + k];
                sumf += (float)s * le_fp16_to_fp32(d[b * R + r]) * p[b].d;
            }
            y[(size_t)t * ys + r] = sumf;
        }
    }
}

void
le_gemm_q4_K_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    int nsb = n / 256;
    const uint8_t *qs = w;
    const uint8_t *meta = qs + (size_t)nsb * 2048;
    for (int t = 0; t < ntok; t++) {
        const struct blk_q8_K *x = (const void *)act_q(a, t);
        const int32_t *p = act_p(a, t);
        for (int r = 0; r < nr; r++) {
            float sumf = 0;
            for (int b = 0; b < nsb; b++) {
                const uint8_t *mb = meta + (size_t)b * LE_PACK_Q4_K_META;
                int32_t isum = 0, msum = 0;
                for (int jj = 0; jj < 4; jj++) {
                    int32_t s0 = 0, s1 = 0;
                    for (int c = 0; c < 8; c++)
                        for (int k = 0; k < 4; k++) {
                            uint8_t v = qs[(size_t)b * 2048 +
                                           (jj * 8 + c) * 64 + r * 4 + k];
                            s0 += (v & 15) * x[b].qs[64 * jj + 4 * c + k];
                            s1 += (v >> 4) * x[b].qs[64 * jj + 32 + 4 * c + k];
                        }
                    isum += mb[64 + (2 * jj) * R + r] * s0 +
                            mb[64 + (2 * jj + 1) * R + r] * s1;
                }
                for (int k = 0; k < 4; k++) {
                    uint32_t u = (uint32_t)p[4 * b + k];
                    msum += mb[192 + k * 32 + r * 2] * (int16_t)(u & 0xffff) +
                            mb[192 + k * 32 + r * 2 + 1] * (int16_t)(u >> 16);
                }
                uint16_t hd, hm;
                memcpy(&hd, mb + 2 * r, 2);
                memcpy(&hm, mb + 32 + 2 * r, 2);
                float dd = le_fp16_to_fp32(hd), dm = le_fp16_to_fp32(hm);
                sumf += x[b].d * (dd * (float)isum) -
                        x[b].d * (dm * (float)msum);
            }
            y[(size_t)t * ys + r] = sumf;
        }
    }
}

/* ------------------------------------------------------------------ */
/* The table.                                                           */

static const struct le_pack_traits pack_ref[] = {
    {LE_TYPE_Q4_0, LE_TYPE_Q8_0, 32, 288, pack_q4_0, le_gemm_q4_0_ref},
    {LE_TYPE_Q8_0, LE_TYPE_Q8_0, 32, 544, pack_q8_0, le_gemm_q8_0_ref},
    {LE_TYPE_Q4_K, LE_TYPE_Q8_K, 256, 2048 + LE_PACK_Q4_K_META, pack_q4_K,
     le_gemm_q4_K_ref},
};
#define N_PACK (sizeof(pack_ref) / sizeof(pack_ref[0]))

static le_gemm_fn
gemm_at(enum le_type t, enum le_isa isa)
{
#if defined(__x86_64__)
    if (isa == LE_ISA_AVX512)
        switch (t) {
        case LE_TYPE_Q4_0: return le_gemm_q4_0_avx512;
        case LE_TYPE_Q8_0: return le_gemm_q8_0_avx512;
        case LE_TYPE_Q4_K: return le_gemm_q4_K_avx512;
        default: return NULL;
        }
    if (isa == LE_ISA_AVX2)
        switch (t) {
        case LE_TYPE_Q4_0: return le_gemm_q4_0_avx2;
        case LE_TYPE_Q8_0: return le_gemm_q8_0_avx2;
        case LE_TYPE_Q4_K: return le_gemm_q4_K_avx2;
        default: return NULL;
        }
#endif
    if (isa == LE_ISA_NONE)
        for (size_t i = 0; i < N_PACK; i++)
            if (pack_ref[i].type == t)
                return pack_ref[i].gemm;
    return NULL;
}

int
le_pack_traits_at(enum le_type t, enum le_isa isa, struct le_pack_traits *out)
{
    if (isa > le_isa_detected())
        return 0;
    for (size_t i = 0; i < N_PACK; i++)
        if (pack_ref[i].type == t) {
            le_gemm_fn g = gemm_at(t, isa);
            if (!g)
                return 0;
            *out = pack_ref[i];
            out->gemm = g;
            return 1;
        }
    return 0;
}

size_t
le_pack_group_bytes(const struct le_pack_traits *pt, int n)
{
    size_t b = (size_t)(n / pt->blck) * pt->col_bytes;
    return (b + 63) & ~(size_t)63;
}

void
le_pack_rows(const struct le_pack_traits *pt, const void *src,
             size_t row_bytes, int nr, int n, void *dst)
{
    memset(dst, 0, le_pack_group_bytes(pt, n));
    pt->pack(src, row_bytes, nr, n, dst);
}
