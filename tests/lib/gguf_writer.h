/*
 * gguf_writer.h: builds GGUF v3 files for tests (in memory or on disk).
 *
 * Not part of the engine: tests use it to make model files from known
 * float data (no downloaded model needed) and to make hostile files by
 * damaging a valid one.
 *
 * Usage:
 *
 *     struct gguf_w *w = gguf_w_new();
 *     gguf_w_add_str(w, "general.architecture", "llama");
 *     gguf_w_add_u32(w, "llama.block_count", 2);
 *     const char *toks[] = {"<unk>", "<s>"};
 *     gguf_w_add_str_arr(w, "tokenizer.ggml.tokens", toks, 2);
 *     int64_t ne[2] = {64, 32};           // ne[0] = row length
 *     gguf_w_add_tensor(w, "w", LE_TYPE_Q8_0, 2, ne, floats); // quantised
 *     uint8_t *buf; size_t len;
 *     if (gguf_w_write_mem(w, &buf, &len) == 0) { ...; free(buf); }
 *     gguf_w_free(w);
 *
 * Errors are sticky: an add that fails (out of memory, a type without
 * from_float, ne[0] not a multiple of the block size, a bad argument)
 * marks the writer failed and every later write returns -1, so a test can
 * chain adds and check once.  Keys and names are copied; float data is
 * quantised at add time, so the caller's buffers may be freed right after.
 * Duplicate keys / names are written as given (tests use that to make
 * bad files).
 */
#ifndef LLMUX_TESTS_GGUF_WRITER_H
#define LLMUX_TESTS_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "../../local_engine/le_int.h"

struct gguf_w;

struct gguf_w *gguf_w_new(void); /* NULL if out of memory */
void gguf_w_free(struct gguf_w *w);

/* Alignment of the data section and of each tensor (default 32).  When
 * not 32 it is also written as general.alignment (u32) at write time. */
void gguf_w_set_alignment(struct gguf_w *w, uint32_t alignment);

/* Scalars. */
void gguf_w_add_u8(struct gguf_w *w, const char *key, uint8_t v);
void gguf_w_add_i8(struct gguf_w *w, const char *key, int8_t v);
void gguf_w_add_u16(struct gguf_w *w, const char *key, uint16_t v);
void gguf_w_add_i16(struct gguf_w *w, const char *key, int16_t v);
void gguf_w_add_u32(struct gguf_w *w, const char *key, uint32_t v);
void gguf_w_add_i32(struct gguf_w *w, const char *key, int32_t v);
void gguf_w_add_f32(struct gguf_w *w, const char *key, float v);
void gguf_w_add_bool(struct gguf_w *w, const char *key, int v);
void gguf_w_add_str(struct gguf_w *w, const char *key, const char *v);
/* A string with explicit length (may hold NUL bytes). */
void gguf_w_add_strn(struct gguf_w *w, const char *key, const char *v,
                     size_t len);
void gguf_w_add_u64(struct gguf_w *w, const char *key, uint64_t v);
void gguf_w_add_i64(struct gguf_w *w, const char *key, int64_t v);
void gguf_w_add_f64(struct gguf_w *w, const char *key, double v);

/* Arrays.  gguf_w_add_arr: n elements of the scalar type elem_type
 * (LE_GGUF_UINT8 .. LE_GGUF_FLOAT64 but not STRING / ARRAY) stored in
 * host order in data (e.g. float[] for LE_GGUF_FLOAT32, uint8_t[] with 0/1
 * for BOOL). */
void gguf_w_add_arr(struct gguf_w *w, const char *key,
                    enum le_gguf_vtype elem_type, const void *data,
                    size_t n);
void gguf_w_add_str_arr(struct gguf_w *w, const char *key,
                        const char *const *strs, size_t n);

/* Tensors.  ne[0] is the row length (innermost), n_dims 1..4.
 * gguf_w_add_tensor quantises x (ne[0]*...*ne[n_dims-1] floats, row-major)
 * to type with the type's from_float; gguf_w_add_tensor_raw takes the
 * bytes as they are (nbytes must be the type's size for that shape). */
void gguf_w_add_tensor(struct gguf_w *w, const char *name, enum le_type type,
                       int n_dims, const int64_t *ne, const float *x);
void gguf_w_add_tensor_raw(struct gguf_w *w, const char *name,
                           enum le_type type, int n_dims, const int64_t *ne,
                           const void *bytes, size_t nbytes);

/* Where the sections start in the written bytes (for tests that damage
 * files): the first key/value pair, the first tensor info, the data
 * section, and the total size. */
struct gguf_w_layout {
    size_t kv_start;
    size_t tensors_start;
    size_t data_start;
    size_t size;
};

/* Writes the file to a malloc'd buffer (*out, caller frees) and fills
 * layout if not NULL.  Returns 0, or -1 if the writer failed earlier or
 * memory ran out.  The writer stays usable (write again after more adds). */
int gguf_w_write_mem(struct gguf_w *w, uint8_t **out, size_t *len,
                     struct gguf_w_layout *layout);
/* Same to a file (created or truncated).  Returns 0 or -1. */
int gguf_w_write_file(struct gguf_w *w, const char *path);

/* ------------------------------------------------------------------ */
/* A small random-weight llama model.                                   */

struct gguf_w_llama {
    int n_vocab;   /* >= 259: <unk> <s> </s>, 256 byte tokens, then pieces */
    int n_embd;    /* hidden size */
    int n_layer;
    int n_head;    /* n_embd % n_head == 0 */
    int n_head_kv; /* n_head % n_head_kv == 0 (GQA) */
    int n_ff;      /* feed-forward size */
    int n_ctx;     /* llama.context_length; 0 means 512 */
    enum le_type type; /* type of every 2-D weight (norms are always F32) */
    uint64_t seed;     /* same seed, same float weights, whatever the type */
    int tied;          /* 1: no output.weight (token_embd is reused) */
    const char *chat_template; /* tokenizer.chat_template, or NULL: none */
    /* NULL, or a NULL-terminated list of control tokens (type 3) to take
     * the last ids of the vocabulary, e.g. mistral's "[TOOL_CALLS]" */
    const char *const *controls;
    /* NULL, or a NULL-terminated list of user-defined tokens (type 4,
     * always matched in text and written as text: Qwen3's "<think>"),
     * the ids just before the controls */
    const char *const *user_tokens;
    /* NULL or "llama"; "qwen3": its metadata prefix, NEOX rotation, and
     * per-head attn_q_norm / attn_k_norm [head_dim] (1 +- 0.1); "gemma3"
     * those and post_attention_norm / post_ffw_norm [n_embd], its
     * rope.freq_base 1e6 and attention.sliding_window n_swa (if > 0) */
    const char *arch;
    int n_swa;
    /* "gemma2": gemma3's layout without the q/k norms, rope.freq_base
     * 10000; these, when > 0, as its attn_logit_softcapping and
     * final_logit_softcapping */
    float attn_softcap, final_softcap;
    int head_dim; /* 0: n_embd / n_head; else attention.key_length and
                     .value_length, q is n_head * head_dim wide */
    /* > 0: a mixture of experts in every layer ("llama": Mixtral's
     * layout; "qwen3moe": qwen3's with them): expert_count and
     * expert_used_count, blk.N.ffn_gate_inp.weight [n_embd, n_expert] F32
     * and ffn_gate_exps / ffn_up_exps [n_embd, n_ff_x, n_expert],
     * ffn_down_exps [n_ff_x, n_embd, n_expert] in place of the dense FFN;
     * n_ff_x is n_ff_exp when > 0 (written as
     * expert_feed_forward_length), else n_ff */
    int n_expert, n_expert_used, n_ff_exp;
    /* exp_typed: the experts' three tensors are of exp_type, not type */
    enum le_type exp_type;
    int exp_typed;
    /* "qwen2moe" (experts required): qwen2's attention, its q/k/v biases
     * blk.N.attn_{q,k,v}.bias F32, expert_feed_forward_length always
     * written, and a shared expert: ffn_gate_inp_shexp [n_embd] F32,
     * ffn_gate_shexp / ffn_up_shexp [n_embd, n_ff_shexp], ffn_down_shexp
     * [n_ff_shexp, n_embd], n_ff_shexp as
     * expert_shared_feed_forward_length (0: n_ff, not written) */
    int n_ff_shexp;
    /* > 0: rope.scaling.type "yarn" with this rope.scaling.factor and
     * rope.scaling.original_context_length yarn_orig (if > 0) */
    float yarn_factor;
    int yarn_orig;
    /* "phi3": blk.N.attn_qkv.weight [n_embd, q + 2 kv] in place of q, k,
     * v, blk.N.ffn_up.weight [n_embd, 2 n_ff] (gate rows, then up rows)
     * in place of gate and up, attention.sliding_window n_swa; with
     * longrope_orig > 0 also rope_factors_short.weight and
     * rope_factors_long.weight [head_dim / 2] F32 (1 + i / 8 and 1 + i),
     * rope.scaling.original_context_length longrope_orig and
     * rope.scaling.attn_factor longrope_attn (if > 0) */
    int longrope_orig;
    float longrope_attn;
    /* arch "granite" (dense) and "granitemoe" (experts required): the
     * llama layout with embedding_scale 12, residual_scale 0.22,
     * attention.scale 0.0625 and logit_scale 8 */
    /* arch "gpt-oss" (experts required, n_swa > 0): the q, k, v and
     * output biases blk.N.attn_{q,k,v,output}.bias F32, attention sinks
     * blk.N.attn_sinks.weight [n_head] F32 (1 +- 0.1), the pre-FFN norm
     * named post_attention_norm.weight (no ffn_norm), the router's bias
     * ffn_gate_inp.bias [n_expert] and the experts' biases
     * ffn_{gate,up}_exps.bias [n_ff_x, n_expert], ffn_down_exps.bias
     * [n_embd, n_expert] F32, attention.sliding_window n_swa, and
     * expert_feed_forward_length always written */
    /* arch "deepseek2" (DeepSeek-V2 / V3, Multi-head Latent Attention;
     * experts and n_ff_exp required, n_head_kv ignored, head_dim must be
     * 0): tensors as gguf_w_llama_fill lists them; the layers from
     * n_dense_lead on have the experts (n_ff_exp wide) and n_shared
     * shared ones fused in ffn_{gate,up,down}_shexp of n_ff_exp *
     * n_shared.  ds_mla 0 is the
     * legacy layout, attn_kv_b, with attention.head_count_kv n_head,
     * key_length ds_nope + ds_rope and value_length ds_v; ds_mla 1 the
     * split one, attn_k_b and attn_v_b cut from the very same kv_b floats
     * (k_b each head's k_nope rows transposed, v_b its v rows as they
     * are), with head_count_kv 1, key_length kv_lora + ds_rope,
     * value_length kv_lora, key_length_mla ds_nope + ds_rope and
     * value_length_mla ds_v.  Both layouts from one seed are the same
     * network (exactly at F32; a quantised type may fall back to F32 in
     * one layout and not in the other, as ne[0] differs).  The fields
     * below must stay 0 for every other arch. */
    int kv_lora;      /* attention.kv_lora_rank (> 0) */
    int q_lora;       /* attention.q_lora_rank; 0: attn_q directly, no
                         attn_q_a / attn_q_b and the key not written */
    int ds_nope, ds_rope, ds_v; /* per-head sizes (> 0) of q/k's unrotated
                                   and rotated parts (ds_rope even, as
                                   rope.dimension_count) and of v */
    int n_dense_lead; /* leading_dense_block_count: layers 0 .. n - 1
                         have a dense FFN of n_ff (0 .. n_layer) */
    int n_shared;     /* expert_shared_count; 0 means 1 */
    float ds_wscale;  /* expert_weights_scale; 0 means 1.0 */
    int ds_wnorm;     /* expert_weights_norm (bool, always written) */
    int ds_gating;    /* expert_gating_func: 1 softmax, 2 sigmoid; 0: the
                         key not written */
    int ds_probs_b;   /* 1: blk.N.exp_probs_b.bias [n_expert] F32, +-0.05,
                         on the MoE layers */
    int ds_mla;       /* 1: the split layout (attn_k_b, attn_v_b) */
    float yarn_log_mul; /* rope.scaling.yarn_log_multiplier: deepseek2
                           always writes it (llama.cpp of early 2025 needs
                           it), mistral3 and llama (a Mistral-format
                           conversion) when not 0; >= 0, 0 elsewhere */
    /* arch "mistral3" (Ministral 3): the llama layout (and Mixtral's
     * experts) under mistral3's keys.  attn_temp, when not 0, is written
     * as attention.temperature_scale (mistral3 and deepseek2 only), and
     * attn_temp_len, when > 0, as attention.temperature_length
     * (deepseek2 only; mistral3's steps are its original context) */
    float attn_temp;
    int attn_temp_len;
};

/*
 * Fills w with a llama model as llama.cpp names it:
 *
 *   general.architecture "llama" (or arch), general.name "llmux-test",
 *   llama.context_length (arch's prefix), .embedding_length, .block_count,
 *   .feed_forward_length, .attention.head_count, .attention.head_count_kv,
 *   .rope.dimension_count (= n_embd / n_head), .rope.freq_base 10000,
 *   .attention.layer_norm_rms_epsilon 1e-5,
 *   tokenizer.ggml.model "llama" (SentencePiece), .tokens, .scores,
 *   .token_type, .bos_token_id 1, .eos_token_id 2, .unknown_token_id 0,
 *   .add_bos_token true, .add_eos_token false; tokenizer.chat_template
 *   when chat_template is set.
 *
 *   Tokens: 0 <unk> (type 2 unknown), 1 <s>, 2 </s> (type 3 control),
 *   3..258 <0x00>..<0xFF> (type 6 byte), then normal pieces (type 1):
 *   "▁", "▁a".."▁z", "a".."z", "e"+"a".."z" style pairs ... until n_vocab
 *   less the controls, which come last; scores decrease with the id.
 *
 *   Tensors (shapes in GGUF order, ne[0] first):
 *     token_embd.weight     [n_embd, n_vocab]     type
 *     output_norm.weight    [n_embd]              F32
 *     output.weight         [n_embd, n_vocab]     type (absent if tied)
 *     blk.N.attn_norm.weight [n_embd]             F32
 *     blk.N.attn_q.weight   [n_embd, n_head*head_dim]  type
 *     blk.N.attn_q_norm.weight, attn_k_norm.weight [head_dim] F32 (qwen3,
 *       gemma3)
 *     blk.N.post_attention_norm.weight, post_ffw_norm.weight [n_embd] F32
 *       (gemma3)
 *     blk.N.attn_k.weight   [n_embd, n_embd_kv]   type
 *     blk.N.attn_v.weight   [n_embd, n_embd_kv]   type
 *     blk.N.attn_output.weight [n_head*head_dim, n_embd] type
 *     blk.N.ffn_norm.weight [n_embd]              F32
 *     blk.N.ffn_gate.weight [n_embd, n_ff]        type
 *     blk.N.ffn_up.weight   [n_embd, n_ff]        type
 *     blk.N.ffn_down.weight [n_ff, n_embd]        type
 *   with n_embd_kv = head_dim * n_head_kv.  deepseek2 in place of
 *   attn_q, k, v (H = n_head, L = kv_lora):
 *     blk.N.attn_q_a.weight [n_embd, q_lora], attn_q_a_norm.weight
 *       [q_lora] F32, attn_q_b.weight [q_lora, H*(ds_nope+ds_rope)]
 *       (q_lora > 0), else attn_q.weight [n_embd, H*(ds_nope+ds_rope)]
 *     blk.N.attn_kv_a_mqa.weight [n_embd, L + ds_rope]
 *     blk.N.attn_kv_a_norm.weight [L] F32
 *     blk.N.attn_kv_b.weight [L, H*(ds_nope+ds_v)] (row h*(ds_nope+ds_v)
 *       + i: head h's k_nope row i < ds_nope, then its ds_v v rows), or
 *       attn_k_b.weight [ds_nope, L, H] and attn_v_b.weight [L, ds_v, H]
 *     blk.N.attn_output.weight [H*ds_v, n_embd]
 *     and on the MoE layers (N >= n_dense_lead) also
 *     blk.N.exp_probs_b.bias [n_expert] F32 (ds_probs_b),
 *     blk.N.ffn_{gate,up}_shexp.weight [n_embd, n_ff_exp*n_shared],
 *     blk.N.ffn_down_shexp.weight [n_ff_exp*n_shared, n_embd].
 *   A weight whose ne[0] is
 *   not a multiple of type's block size is stored F32 instead (as
 *   llama.cpp's quantiser falls back).
 *
 * Weights are uniform in +-1/sqrt(ne[0]) from a xorshift stream seeded by
 * seed; norms are 1 +- 0.1.  The float values depend only on the seed and
 * the shapes, not on type: writing the same parameters as F32 and as Q8_0
 * gives the "same" model at two precisions.
 * Returns 0, or -1 on a bad parameter (the writer is then failed).
 */
int gguf_w_llama_fill(struct gguf_w *w, const struct gguf_w_llama *p);

/* Convenience: a new writer, filled, written to path, freed.  0 or -1. */
int gguf_w_llama_write(const struct gguf_w_llama *p, const char *path);

#endif
