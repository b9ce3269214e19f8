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
 *   MXFP4 as Q4_0, the nibbles E2M1 codes, d the power of two 2^(e-128)
 *         as fp16 (exact: le_pack_accepts takes a tensor only when all
 *         its scales are 2^-24 .. 2^15)
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
struct blk_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
_Static_assert(sizeof(struct blk_q5_K) == 176, "as in quants.c");
struct blk_q6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};
_Static_assert(sizeof(struct blk_q6_K) == 210, "as in quants.c");
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

/* MXFP4: a scale byte and 16 bytes of codes a block */
static void
pack_mxfp4(const void *src, size_t row_bytes, int nr, int n, void *vdst)
{
    int nb = n / 32;
    uint8_t *qs = vdst;
    uint16_t *d = (uint16_t *)(qs + (size_t)nb * 256);
    for (int r = 0; r < nr; r++) {
        const uint8_t *x = src_row(src, row_bytes, r);
        for (int b = 0; b < nb; b++) {
            d[b * R + r] = le_fp32_to_fp16(le_e8m0_half(x[b * 17]));
            for (int c = 0; c < 4; c++)
                memcpy(qs + (size_t)b * 256 + c * 64 + r * 4,
                       x + b * 17 + 1 + 4 * c, 4);
        }
    }
}

int
le_pack_accepts(enum le_type t, const void *data, size_t nbytes)
{
    if (t != LE_TYPE_MXFP4)
        return 1;
    const uint8_t *x = data;
    for (size_t b = 0; b + 17 <= nbytes; b += 17)
        if (x[b] < 128 - 24 || x[b] > 128 + 15)
            return 0;
    return 1;
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

/* d, dmin, scales and mins of row r of a Q4_K / Q5_K super-block. */
static void
pack_k4_meta(uint8_t *mb, int r, const uint16_t *d, const uint16_t *dmin,
             const uint8_t *scales)
{
    memcpy(mb + 2 * r, d, 2);
    memcpy(mb + 32 + 2 * r, dmin, 2);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        k4_sm(scales, j, &sc, &mn);
        mb[64 + j * R + r] = sc;
        mb[192 + (j / 2) * 32 + r * 2 + (j & 1)] = mn;
    }
}

/* The 4-bit chunks of row r of a Q4_K / Q5_K super-block. */
static void
pack_k4_qs(uint8_t *qsb, int r, const uint8_t *qs)
{
    for (int jj = 0; jj < 4; jj++)
        for (int c = 0; c < 8; c++)
            memcpy(qsb + (jj * 8 + c) * 64 + r * 4, qs + 32 * jj + 4 * c, 4);
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
            pack_k4_meta(meta + (size_t)b * LE_PACK_Q4_K_META, r, &x[b].d,
                         &x[b].dmin, x[b].scales);
            pack_k4_qs(qs + (size_t)b * 2048, r, x[b].qs);
        }
    }
}

/* Q5_K: Q4_K's sections, then the 5th bits: qh[nsb][4 jj][2 cq][16][4];
 * byte k of row r for chunks c = 4cq + i holds in bit 2i the 5th bit of
 * value 64jj+4c+k and in bit 2i+1 that of value 64jj+32+4c+k (the GGUF
 * block keeps value 64jj+l's in bit 2jj of qh[l], 64jj+32+l's in bit
 * 2jj+1). */
static void
pack_q5_K(const void *src, size_t row_bytes, int nr, int n, void *vdst)
{
    int nsb = n / 256;
    uint8_t *qs = vdst;
    uint8_t *meta = qs + (size_t)nsb * 2048;
    uint8_t *qh = meta + (size_t)nsb * LE_PACK_Q4_K_META;
    for (int r = 0; r < nr; r++) {
        const struct blk_q5_K *x = (const void *)src_row(src, row_bytes, r);
        for (int b = 0; b < nsb; b++) {
            pack_k4_meta(meta + (size_t)b * LE_PACK_Q4_K_META, r, &x[b].d,
                         &x[b].dmin, x[b].scales);
            pack_k4_qs(qs + (size_t)b * 2048, r, x[b].qs);
            for (int jj = 0; jj < 4; jj++)
                for (int cq = 0; cq < 2; cq++)
                    for (int k = 0; k < 4; k++) {
                        uint8_t v = 0;
                        for (int i = 0; i < 4; i++) {
                            int l = 4 * (4 * cq + i) + k;
                            v |= (uint8_t)(((x[b].qh[l] >> (2 * jj)) & 1)
                                           << (2 * i));
                            v |= (uint8_t)(((x[b].qh[l] >> (2 * jj + 1)) & 1)
                                           << (2 * i + 1));
                        }
                        qh[(size_t)b * 512 + (jj * 2 + cq) * 64 + r * 4 + k] =
                            v;
                    }
        }
    }
}

/* Unsigned 6-bit value i (0..255) of a Q6_K block (value + 32). */
static int
q6_val(const struct blk_q6_K *x, int i)
{
    int n = i / 128, j = i % 128, l = j % 32, part = j / 32;
    const uint8_t *ql = x->ql + 64 * n, *qh = x->qh + 32 * n;
    int lo = part & 1 ? ql[l + 32] : ql[l];
    lo = part >= 2 ? lo >> 4 : lo & 15;
    return lo | (((qh[l] >> (2 * part)) & 3) << 4);
}

/* Q6_K: low nibbles as Q4_K's qs; then qh[nsb][4 jj][4 cp][16][4]: byte
 * k of row r for chunks c = 2cp + i holds in bits 4i..4i+1 the top 2 bits
 * of value 64jj+4c+k and in bits 4i+2..4i+3 those of 64jj+32+4c+k; then
 * per super-block sc[8][16][2] (int8 scale pairs 2m, 2m+1) and d[16].
 * 3360 bytes = 16 x 210, the file's size. */
static void
pack_q6_K(const void *src, size_t row_bytes, int nr, int n, void *vdst)
{
    int nsb = n / 256;
    uint8_t *ql = vdst;
    uint8_t *qh = ql + (size_t)nsb * 2048;
    uint8_t *meta = qh + (size_t)nsb * 1024;
    for (int r = 0; r < nr; r++) {
        const struct blk_q6_K *x = (const void *)src_row(src, row_bytes, r);
        for (int b = 0; b < nsb; b++) {
            for (int jj = 0; jj < 4; jj++)
                for (int c = 0; c < 8; c++)
                    for (int k = 0; k < 4; k++) {
                        int va = q6_val(&x[b], 64 * jj + 4 * c + k);
                        int vb = q6_val(&x[b], 64 * jj + 32 + 4 * c + k);
                        ql[(size_t)b * 2048 + (jj * 8 + c) * 64 + r * 4 + k] =
                            (uint8_t)((va & 15) | ((vb & 15) << 4));
                        uint8_t *h = &qh[(size_t)b * 1024 +
                                         (jj * 4 + c / 2) * 64 + r * 4 + k];
                        *h |= (uint8_t)(((va >> 4) | ((vb >> 4) << 2))
                                        << (4 * (c & 1)));
                    }
            uint8_t *mb = meta + (size_t)b * LE_PACK_Q6_K_META;
            for (int s2 = 0; s2 < 16; s2++)
                mb[(s2 / 2) * 32 + r * 2 + (s2 & 1)] = (uint8_t)x[b].scales[s2];
            memcpy(mb + 256 + 2 * r, &x[b].d, 2);
        }
    }
}

/* F16 / BF16: element j of the 16 rows side by side, 32 bytes. */
static void
pack_half(const void *src, size_t row_bytes, int nr, int n, void *vdst)
{
    uint16_t *d = vdst;
    for (int r = 0; r < nr; r++) {
        const uint16_t *x = (const void *)src_row(src, row_bytes, r);
        for (int j = 0; j < n; j++)
            d[(size_t)j * R + r] = x[j];
    }
}

/* ------------------------------------------------------------------ */
/* Activation prep.                                                     */

void
le_quant_rows(void *arg, int ith, int nth)
{
    const struct le_quant_job *j = arg;
    const struct le_type_traits *vt = le_type_get(j->vdt);
    int per = (j->n_rows + nth - 1) / nth;
    int t0 = ith * per, t1 = t0 + per < j->n_rows ? t0 + per : j->n_rows;
    for (int t = t0; t < t1; t++) {
        vt->from_float(j->x + (size_t)t * j->n, j->q + (size_t)t * j->q_row,
                       j->n);
        if (j->p)
            le_pack_prep(j->vdt, j->q + (size_t)t * j->q_row, j->n,
                         j->p + (size_t)t * j->p_row);
        if (j->t && t >= j->t_from && j->vdt == LE_TYPE_Q8_0) {
            const struct blk_q8_0 *x =
                (const void *)(j->q + (size_t)t * j->q_row);
            int r = t - j->t_from, nb = j->n / 32;
            uint8_t *dst = j->t + (size_t)(r / 16) * nb * 512 +
                           (size_t)(r % 16) * 32;
            for (int b = 0; b < nb; b++)
                memcpy(dst + (size_t)b * 512, x[b].qs, 32);
        }
    }
}

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
            p[b].neg8 = -8 * s;
            p[b].neg128 = -128 * s;
            p[b].neg8m = p[b].neg8 + LE_MAGIC_I;
            p[b].neg128m = p[b].neg128 + LE_MAGIC_I;
        }
    } else if (vdt == LE_TYPE_F16 || vdt == LE_TYPE_BF16) {
        const uint16_t *h = q;
        float *f = vprep;
        for (int j = 0; j < n; j++)
            f[j] = vdt == LE_TYPE_F16 ? le_fp16_to_fp32(h[j])
                                      : le_bf16_to_fp32(h[j]);
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
    if (vdt == LE_TYPE_F16 || vdt == LE_TYPE_BF16)
        return (size_t)n * sizeof(float);
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

/* Q4_0 (q8 = 0: nibbles less 8), Q8_0 (1: signed bytes) and MXFP4 (2:
 * codes of le_mxfp4_values). */
static void
gemm_legacy_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                float *y, size_t ys, int nr, int q8)
{
    int mx = q8 == 2;
    q8 = q8 == 1;
    int nb = n / 32;
    size_t col = q8 ? 512 : 256;
    const uint8_t *qs = w;
    const uint16_t *d = (const uint16_t *)(qs + (size_t)nb * col);
    for (int t = 0; t < ntok; t++) {
        const struct blk_q8_0 *x = (const void *)act_q(a, t);
        const struct le_prep_q8_0 *p = act_p(a, t);
        for (int r = 0; r < nr; r++) {
            float sumf = 0;
            for (int b = 0; b < nb; b++) {
                int32_t s = 0;
                for (int c = 0; c < (int)col / 64; c++)
                    for (int k = 0; k < 4; k++) {
                        uint8_t v = qs[(size_t)b * col + c * 64 + r * 4 + k];
                        if (q8)
                            s += (int8_t)v * x[b].qs[4 * c + k];
                        else if (mx)
                            s += le_mxfp4_values[v & 15] * x[b].qs[4 * c + k] +
                                 le_mxfp4_values[v >> 4] *
                                     x[b].qs[16 + 4 * c + k];
                        else
                            s += (v & 15) * x[b].qs[4 * c + k] +
                                 (v >> 4) * x[b].qs[16 + 4 * c + k];
                    }
                if (!q8 && !mx)
                    s -= 8 * p[b].sum;
                sumf += (float)s * le_fp16_to_fp32(d[b * R + r]) * p[b].d;
            }
            y[(size_t)t * ys + r] = sumf;
        }
    }
}

void
le_gemm_q4_0_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    gemm_legacy_ref(n, w, a, ntok, y, ys, nr, 0);
}

void
le_gemm_q8_0_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    gemm_legacy_ref(n, w, a, ntok, y, ys, nr, 1);
}

void
le_gemm_mxfp4_ref(int n, const void *w, const struct le_pack_act *a,
                  int ntok, float *y, size_t ys, int nr)
{
    gemm_legacy_ref(n, w, a, ntok, y, ys, nr, 2);
}

/* Q4_K and Q5_K (qh != NULL: the 5th bits). */
static void
gemm_k4_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
            float *y, size_t ys, int nr, int q5)
{
    int nsb = n / 256;
    const uint8_t *qs = w;
    const uint8_t *meta = qs + (size_t)nsb * 2048;
    const uint8_t *qh = meta + (size_t)nsb * LE_PACK_Q4_K_META;
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
                            int lo = v & 15, hi = v >> 4;
                            if (q5) {
                                uint8_t h = qh[(size_t)b * 512 +
                                               (jj * 2 + c / 4) * 64 + r * 4 +
                                               k];
                                lo |= ((h >> (2 * (c & 3))) & 1) << 4;
                                hi |= ((h >> (2 * (c & 3) + 1)) & 1) << 4;
                            }
                            s0 += lo * x[b].qs[64 * jj + 4 * c + k];
                            s1 += hi * x[b].qs[64 * jj + 32 + 4 * c + k];
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

void
le_gemm_q4_K_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    gemm_k4_ref(n, w, a, ntok, y, ys, nr, 0);
}

void
le_gemm_q5_K_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    gemm_k4_ref(n, w, a, ntok, y, ys, nr, 1);
}

void
le_gemm_q6_K_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    int nsb = n / 256;
    const uint8_t *ql = w;
    const uint8_t *qh = ql + (size_t)nsb * 2048;
    const uint8_t *meta = qh + (size_t)nsb * 1024;
    for (int t = 0; t < ntok; t++) {
        const struct blk_q8_K *x = (const void *)act_q(a, t);
        for (int r = 0; r < nr; r++) {
            float sumf = 0;
            for (int b = 0; b < nsb; b++) {
                const uint8_t *mb = meta + (size_t)b * LE_PACK_Q6_K_META;
                int32_t isum = 0;
                for (int s2 = 0; s2 < 16; s2++) {
                    int sc = (int8_t)mb[(s2 / 2) * 32 + r * 2 + (s2 & 1)];
                    int jj = s2 / 4, hi = (s2 / 2) & 1, c0 = 4 * (s2 & 1);
                    int32_t si = 0;
                    for (int c = c0; c < c0 + 4; c++)
                        for (int k = 0; k < 4; k++) {
                            uint8_t v = ql[(size_t)b * 2048 +
                                           (jj * 8 + c) * 64 + r * 4 + k];
                            uint8_t h = qh[(size_t)b * 1024 +
                                           (jj * 4 + c / 2) * 64 + r * 4 + k];
                            int sh = 4 * (c & 1) + 2 * hi;
                            int q = (hi ? v >> 4 : v & 15) |
                                    (((h >> sh) & 3) << 4);
                            si += (q - 32) *
                                  x[b].qs[64 * jj + 32 * hi + 4 * c + k];
                        }
                    isum += sc * si;
                }
                uint16_t hd;
                memcpy(&hd, mb + 256 + 2 * r, 2);
                float dd = le_fp16_to_fp32(hd);
                sumf += x[b].d * (dd * (float)isum) -
                        x[b].d * (0.0f * (float)0);
            }
            y[(size_t)t * ys + r] = sumf;
        }
    }
}

/* F16 / BF16 against the prep row (the activation as floats): products
 * exact in double, summed in double in element order, as quants.c. */
static void
gemm_half_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
              float *y, size_t ys, int nr, int bf)
{
    const uint16_t *h = w;
    for (int t = 0; t < ntok; t++) {
        const float *x = act_p(a, t);
        for (int r = 0; r < nr; r++) {
            double sum = 0;
            for (int j = 0; j < n; j++) {
                uint16_t v = h[(size_t)j * R + r];
                float f = bf ? le_bf16_to_fp32(v) : le_fp16_to_fp32(v);
                sum += (double)f * (double)x[j];
            }
            y[(size_t)t * ys + r] = (float)sum;
        }
    }
}

void
le_gemm_f16_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                float *y, size_t ys, int nr)
{
    gemm_half_ref(n, w, a, ntok, y, ys, nr, 0);
}

void
le_gemm_bf16_ref(int n, const void *w, const struct le_pack_act *a, int ntok,
                 float *y, size_t ys, int nr)
{
    gemm_half_ref(n, w, a, ntok, y, ys, nr, 1);
}

/* ------------------------------------------------------------------ */
/* The table.                                                           */

static const struct le_pack_traits pack_ref[] = {
    {LE_TYPE_Q4_0, LE_TYPE_Q8_0, 32, 288, pack_q4_0, le_gemm_q4_0_ref, NULL},
    {LE_TYPE_Q8_0, LE_TYPE_Q8_0, 32, 544, pack_q8_0, le_gemm_q8_0_ref, NULL},
    {LE_TYPE_MXFP4, LE_TYPE_Q8_0, 32, 288, pack_mxfp4, le_gemm_mxfp4_ref,
     NULL},
    {LE_TYPE_Q4_K, LE_TYPE_Q8_K, 256, 2048 + LE_PACK_Q4_K_META, pack_q4_K,
     le_gemm_q4_K_ref, NULL},
    {LE_TYPE_Q5_K, LE_TYPE_Q8_K, 256, 2048 + LE_PACK_Q4_K_META + 512,
     pack_q5_K, le_gemm_q5_K_ref, NULL},
    {LE_TYPE_Q6_K, LE_TYPE_Q8_K, 256, 2048 + 1024 + LE_PACK_Q6_K_META,
     pack_q6_K, le_gemm_q6_K_ref, NULL},
    {LE_TYPE_F16, LE_TYPE_F16, 1, 32, pack_half, le_gemm_f16_ref, NULL},
    {LE_TYPE_BF16, LE_TYPE_BF16, 1, 32, pack_half, le_gemm_bf16_ref, NULL},
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
        case LE_TYPE_MXFP4: return le_gemm_mxfp4_avx512;
        /* prefetch plans as the decode kernels' (gemv.c) */
        case LE_TYPE_Q4_K:
            return le_gemv_l1_prefetch(t, LE_ISA_AVX512) ? le_gemm_q4_K_avx512
                                          : le_gemm_q4_K_avx512_l2;
        case LE_TYPE_Q5_K:
            return le_gemv_l1_prefetch(t, LE_ISA_AVX512) ? le_gemm_q5_K_avx512
                                          : le_gemm_q5_K_avx512_l2;
        case LE_TYPE_Q6_K:
            return le_gemv_l1_prefetch(t, LE_ISA_AVX512) ? le_gemm_q6_K_avx512
                                          : le_gemm_q6_K_avx512_l2;
        case LE_TYPE_F16: return le_gemm_f16_avx512;
        case LE_TYPE_BF16: return le_gemm_bf16_avx512;
        default: return NULL;
        }
    if (isa == LE_ISA_AVXVNNI && t == LE_TYPE_Q4_0)
        return le_gemm_q4_0_avxvnni;
    if (isa == LE_ISA_AVXVNNI && t == LE_TYPE_Q8_0)
        return le_gemm_q8_0_avxvnni;
    if (isa == LE_ISA_AVX2 || isa == LE_ISA_AVXVNNI)
        switch (t) {
        case LE_TYPE_Q4_0: return le_gemm_q4_0_avx2;
        case LE_TYPE_Q8_0: return le_gemm_q8_0_avx2;
        case LE_TYPE_MXFP4: return le_gemm_mxfp4_avx2;
        case LE_TYPE_Q4_K:
            return le_gemv_l1_prefetch(t, LE_ISA_AVX2) ? le_gemm_q4_K_avx2
                                          : le_gemm_q4_K_avx2_l2;
        case LE_TYPE_Q5_K:
            return le_gemv_l1_prefetch(t, LE_ISA_AVX2) ? le_gemm_q5_K_avx2
                                          : le_gemm_q5_K_avx2_l2;
        case LE_TYPE_Q6_K: return le_gemm_q6_K_avx2;
        case LE_TYPE_F16: return le_gemm_f16_avx2;
        case LE_TYPE_BF16: return le_gemm_bf16_avx2;
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
    if (!le_isa_supported(isa))
        return 0;
    for (size_t i = 0; i < N_PACK; i++)
        if (pack_ref[i].type == t) {
            le_gemm_fn g = gemm_at(t, isa);
            if (!g)
                return 0;
            *out = pack_ref[i];
            out->gemm = g;
            out->gemm_amx = NULL;
            if (isa == LE_ISA_AVX512 && le_amx_usable())
                out->gemm_amx = t == LE_TYPE_Q8_0   ? le_gemm_q8_0_amx
                                : t == LE_TYPE_Q4_0 ? le_gemm_q4_0_amx
                                                    : NULL;
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
