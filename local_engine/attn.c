/*
 * attn.c: the two inner loops of attention over an F16 KV cache, for the
 * g query heads that share one KV head against n cached positions
 * (model.c attention_heads), and the fp32 -> fp16 rounding of the query
 * heads and the K/V rows, as plain C twins of attn_avx512.c's and
 * attn_avx2.c's kernels, and the choice between them.
 *
 *   scores: sc[h][p] = scale * (float)dot(q_h, k_p), the dot of the fp16
 *           query head h and the fp16 key row p: products exact in float,
 *           summed in double (as the F16 vec_dot of quants.c);
 *   values: out_h = sum over p in order of (w_h[p] * inv_h) * v_p, each
 *           step out[i] = out[i] + a * v_p[i] rounded twice (no fused
 *           multiply-add), out zeroed first;
 *   to_f16: le_fp32_to_fp16 of each value (round to nearest even);
 *   mx:     each head's largest score, for the softmax, as its scalar loop
 *           m = s > m ? s : m finds it (the SIMD kernels keep one such
 *           maximum per lane, vmaxps being that expression, and take the
 *           lanes' at the end: the same value, up to the sign of a zero).
 *
 * A head's results do not depend on g: the kernels walk the positions
 * once for the g heads (each K or V chunk converted once, used g times;
 * 4 query heads share a KV head in Llama 3.2 1B) but keep each head's own
 * sums in the order a one-head call keeps them, bit for bit.
 *
 * The SIMD scores form the same exact products and double sums in another
 * order than this twin (equal to the last bit whenever the double sum is
 * exact, i.e. for values of normal magnitude): per position two double
 * accumulators over the head's chunks, then across lanes in a fixed tree.
 * The tree is applied to 8 (AVX-512) or 4 (AVX2) positions at once by a
 * transpose-add, which pairs the same lanes in the same order as the
 * per-position horizontal add it replaced, so every score is the bits the
 * per-position reduce gave (not merely within the contract).  The values
 * are in exactly this twin's order (bit for bit); to_f16 is vcvtps2ph
 * with the NaN lanes redone here (the instruction keeps a NaN's payload,
 * le_fp32_to_fp16 makes it the quiet NaN 0x7e00), bit for bit for every
 * input.  tests/test_amx.c holds them together.  Before the fused kernels
 * the attention called the F16 vec_dot and to_float once per position
 * and summed the values through memory: 20% of a 128-token prompt (perf)
 * against 0.6% of its multiply-adds.
 */
#include "le_int.h"

#include <math.h>

float
le_attn_row_max(int n, const float *x)
{
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

void
le_attn_scores_f16_ref(int hd, int g, int n, const uint16_t *q,
                       const uint8_t *k, size_t ks, float scale, float *sc,
                       size_t scs, float *mx, const uint8_t *pv)
{
    (void)pv; /* a hint for the SIMD kernels */
    const struct le_type_traits *ft = le_type_get_ref(LE_TYPE_F16);
    for (int h = 0; h < g; h++) {
        float *row = sc + (size_t)h * scs;
        for (int p = 0; p < n; p++) {
            float d;
            ft->vec_dot(hd, &d, k + (size_t)p * ks, q + (size_t)h * hd);
            row[p] = d * scale;
        }
        mx[h] = le_attn_row_max(n, row);
    }
}

void
le_attn_values_f16_ref(int hd, int g, int n, const float *w, size_t wst,
                       const float *inv, const uint8_t *v, size_t vs,
                       float *out)
{
    for (int h = 0; h < g; h++) {
        float *o = out + (size_t)h * hd;
        const float *wh = w + (size_t)h * wst;
        for (int i = 0; i < hd; i++)
            o[i] = 0;
        for (int p = 0; p < n; p++) {
            const uint16_t *vr = (const uint16_t *)(v + (size_t)p * vs);
            float a = wh[p] * inv[h];
            for (int i = 0; i < hd; i++)
                o[i] += a * le_fp16_to_fp32(vr[i]);
        }
    }
}

void
le_attn_to_f16_ref(int n, const float *x, uint16_t *y)
{
    for (int i = 0; i < n; i++)
        y[i] = le_fp32_to_fp16(x[i]);
}

int
le_attn_f16_get(int hd, struct le_attn_f16 *out)
{
    *out = (struct le_attn_f16){le_attn_scores_f16_ref, le_attn_values_f16_ref,
                                le_attn_to_f16_ref};
#if defined(__x86_64__)
    static const struct { /* highest level first */
        enum le_isa isa;
        struct le_attn_f16 k;
    } level[] = {
        {LE_ISA_AVX512,
         {le_attn_scores_f16_avx512, le_attn_values_f16_avx512,
          le_attn_to_f16_avx512}},
        {LE_ISA_AVX2,
         {le_attn_scores_f16_avx2, le_attn_values_f16_avx2,
          le_attn_to_f16_avx2}},
    };
    for (size_t i = 0; i < sizeof(level) / sizeof(level[0]); i++) {
        if (le_isa_active() < level[i].isa)
            continue;
        /* the values kernels take any multiple of their block (64 / 32
         * values; the ref otherwise), the scores ones 64 and 128 only */
        out->to_f16 = level[i].k.to_f16;
        out->values = level[i].k.values;
        if (hd != 64 && hd != 128)
            return 0;
        *out = level[i].k;
        return 1;
    }
#endif
    (void)hd;
    return 0;
}
