/*
 * attn.c: the two inner loops of attention over an F16 KV cache, for one
 * query head against n cached positions (model.c attention_heads), as
 * plain C twins of attn_avx512.c's and attn_avx2.c's kernels, and the
 * choice between them.
 *
 *   scores: sc[p] = scale * (float)dot(q, k_p), the dot of the fp16 query
 *           and the fp16 key row p: products exact in float, summed in
 *           double (as the F16 vec_dot of quants.c);
 *   values: out = sum over p in order of (w[p] * inv) * v_p, each step
 *           out[i] = out[i] + a * v_p[i] rounded twice (no fused
 *           multiply-add), out zeroed first.
 *
 * The SIMD twin forms the same exact products and double sums in another
 * order (equal to the last bit whenever the double sum is exact, i.e. for
 * values of normal magnitude) and the values in exactly this order (bit
 * for bit); tests/test_amx.c holds them together.  Before these, the
 * attention called the F16 vec_dot and to_float once per position and
 * summed the values through memory: 20% of a 128-token prompt (perf)
 * against 0.6% of its multiply-adds.
 */
#include "le_int.h"

void
le_attn_scores_f16_ref(int hd, int n, const uint16_t *q, const uint8_t *k,
                       size_t ks, float scale, float *sc)
{
    const struct le_type_traits *ft = le_type_get_ref(LE_TYPE_F16);
    for (int p = 0; p < n; p++) {
        float d;
        ft->vec_dot(hd, &d, k + (size_t)p * ks, q);
        sc[p] = d * scale;
    }
}

void
le_attn_values_f16_ref(int hd, int n, const float *w, float inv,
                       const uint8_t *v, size_t vs, float *out)
{
    for (int i = 0; i < hd; i++)
        out[i] = 0;
    for (int p = 0; p < n; p++) {
        const uint16_t *vr = (const uint16_t *)(v + (size_t)p * vs);
        float a = w[p] * inv;
        for (int i = 0; i < hd; i++)
            out[i] += a * le_fp16_to_fp32(vr[i]);
    }
}

int
le_attn_f16_get(int hd, struct le_attn_f16 *out)
{
#if defined(__x86_64__)
    if ((hd == 64 || hd == 128) &&
        le_isa_active() >= LE_ISA_AVX512) {
        out->scores = le_attn_scores_f16_avx512;
        out->values = le_attn_values_f16_avx512;
        return 1;
    }
    if ((hd == 64 || hd == 128) && le_isa_active() >= LE_ISA_AVX2) {
        out->scores = le_attn_scores_f16_avx2;
        out->values = le_attn_values_f16_avx2;
        return 1;
    }
#endif
    (void)hd;
    out->scores = le_attn_scores_f16_ref;
    out->values = le_attn_values_f16_ref;
    return 0;
}
