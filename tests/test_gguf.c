/*
 * test_gguf.c: the GGUF reader against the real models in
 * $LLMUX_TEST_DATA/models and against hostile files made with the test
 * writer (tests/lib/gguf_writer.h) and then damaged.
 */
#include <stdlib.h>

#include "../local_engine/le_int.h"
#include "harness.h"

static const char *
data_dir(void)
{
    const char *d = getenv("LLMUX_TEST_DATA");
    return d && *d ? d : "../shared/data";
}

static void
test_stories(void)
{
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", data_dir());
    for (int mode = 0; mode < 2; mode++) {
        struct le_gguf *g = NULL;
        enum le_status st = le_gguf_open(
            path, mode ? LE_GGUF_READ | LE_GGUF_MLOCK : LE_GGUF_MMAP, &g, err,
            sizeof(err));
        T_EQ_INT(st, LE_OK);
        if (st != LE_OK) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        T_EQ_INT(g->version, 3);
        T_EQ_INT(g->n_tensors, 48);
        T_EQ_INT(g->alignment, 32);
        struct le_gguf_str s;
        T_CHECK(le_gguf_get_str(g, "general.architecture", &s) &&
                le_gguf_str_eq(s, "llama"));
        T_CHECK(le_gguf_get_str(g, "tokenizer.ggml.model", &s) &&
                le_gguf_str_eq(s, "llama"));
        uint32_t u = 0;
        T_CHECK(le_gguf_get_u32(g, "llama.embedding_length", &u) && u == 64);
        T_CHECK(le_gguf_get_u32(g, "llama.block_count", &u) && u == 5);
        T_CHECK(le_gguf_get_u32(g, "llama.feed_forward_length", &u) &&
                u == 172);
        T_CHECK(le_gguf_get_u32(g, "llama.attention.head_count_kv", &u) &&
                u == 4);
        T_CHECK(le_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u) &&
                u == 2);
        T_CHECK(le_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u) &&
                u == 4294967295u);
        float f = 0;
        T_CHECK(le_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon",
                                &f) &&
                fabsf(f - 1e-5f) < 1e-9f);
        T_CHECK(!le_gguf_find(g, "llama.rope.freq_base"));
        const struct le_gguf_kv *kv = le_gguf_find(g, "tokenizer.ggml.tokens");
        T_CHECK(kv && kv->type == LE_GGUF_ARRAY &&
                kv->v.arr.type == LE_GGUF_STRING && kv->v.arr.n == 512);
        if (kv && kv->v.arr.strs) {
            T_CHECK(le_gguf_str_eq(kv->v.arr.strs[0], "<unk>"));
            T_CHECK(le_gguf_str_eq(kv->v.arr.strs[1], "<s>"));
            T_CHECK(le_gguf_str_eq(kv->v.arr.strs[2], "</s>"));
        }
        kv = le_gguf_find(g, "tokenizer.ggml.scores");
        T_CHECK(kv && kv->v.arr.type == LE_GGUF_FLOAT32 && kv->v.arr.n == 512);
        const struct le_gguf_tensor *t = le_gguf_tensor(g, "blk.0.attn_k.weight");
        T_CHECK(t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 32 &&
                t->type == LE_TYPE_F32 && t->nbytes == 64 * 32 * 4);
        t = le_gguf_tensor(g, "blk.4.ffn_down.weight");
        T_CHECK(t && t->ne[0] == 172 && t->ne[1] == 64);
        t = le_gguf_tensor(g, "output_norm.weight");
        T_CHECK(t && t->n_dims == 1 && t->ne[0] == 64 && t->ne[1] == 1);
        T_CHECK(le_gguf_tensor(g, "nope") == NULL);
        int64_t params = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const struct le_gguf_tensor *x = &g->tensors[i];
            params += x->ne[0] * x->ne[1] * x->ne[2] * x->ne[3];
            T_CHECK((uintptr_t)x->data % 32 == 0);
        }
        T_EQ_INT(params, 292800);
        le_gguf_free(g);
    }
}

static void
test_tiny_random(void)
{
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/models/llama-2-tiny-random.gguf",
             data_dir());
    struct le_gguf *g = NULL;
    enum le_status st = le_gguf_open(path, LE_GGUF_MMAP, &g, err, sizeof(err));
    T_EQ_INT(st, LE_OK);
    if (st != LE_OK) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    T_EQ_INT(g->n_tensors, 12);
    uint32_t u = 0;
    T_CHECK(le_gguf_get_u32(g, "general.file_type", &u) && u == 1);
    struct le_gguf_str s;
    T_CHECK(le_gguf_get_str(g, "general.name", &s) &&
            le_gguf_str_eq(s, "LLaMA v2"));
    const struct le_gguf_kv *kv = le_gguf_find(g, "tokenizer.ggml.tokens");
    T_CHECK(kv && kv->v.arr.n == 32000);
    const struct le_gguf_tensor *t = le_gguf_tensor(g, "token_embd.weight");
    T_CHECK(t && t->type == LE_TYPE_F16 && t->ne[0] == 8 && t->ne[1] == 32000);
    int n_f16 = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        n_f16 += g->tensors[i].type == LE_TYPE_F16;
    T_EQ_INT(n_f16, 9);
    le_gguf_free(g);
}

int
main(void)
{
    T_RUN(test_stories);
    T_RUN(test_tiny_random);
    return T_END();
}
