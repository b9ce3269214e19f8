/*
 * libFuzzer target for model loading: any bytes go through the GGUF reader
 * and, when they parse, through le_model_load (hyperparameters, tensor
 * shapes and types against them, vocabulary, chat template).  A model that
 * loads then runs a short forward pass (a prompt of 3 tokens, then one
 * more) on one thread with a 16-token context, so a shape the loader let
 * through but the forward pass cannot handle shows up under ASan/UBSan.
 * Every logit is read (their values are not checked: fuzzed weights may
 * well overflow) and the argmax must be a token id.
 */
#include "../../local_engine/le_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (4u << 20))
        return 0;
    /* le_gguf_open_mem borrows the bytes for the model's life; malloc
     * gives the alignment it wants. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    struct le_gguf *g = NULL;
    struct le_model *m = NULL;
    struct le_session *s = NULL;
    char err[256];
    if (le_gguf_open_mem(buf, size, &g, err, sizeof(err)) != LE_OK)
        goto out;
    struct le_model_params p;
    le_model_params_default(&p);
    p.n_threads = 1;
    p.n_ctx = 16;
    p.n_batch = 2;
    if (le_model_load(g, &p, &m, err, sizeof(err)) != LE_OK) {
        m = NULL; /* g was taken over and freed */
        goto out;
    }
    if (m->vocab_only || le_session_new(m, &s, err, sizeof(err)) != LE_OK)
        goto out;
    int32_t nv = le_model_n_vocab(m);
    if (nv <= 0)
        goto out;
    int32_t ids[3] = {0, 1 % nv, 2 % nv};
    if (le_session_decode(s, ids, 3, err, sizeof(err)) != LE_OK)
        goto out;
    const float *lg = le_session_logits(s);
    volatile float sink = 0;
    for (int32_t i = 0; i < nv; i++)
        sink += lg[i];
    int32_t next = le_samp_argmax(lg, nv);
    if (next < 0 || next >= nv)
        abort();
    (void)le_session_decode(s, &next, 1, err, sizeof(err));
    (void)sink;
out:
    le_session_free(s);
    le_model_free(m);
    free(buf);
    return 0;
}
