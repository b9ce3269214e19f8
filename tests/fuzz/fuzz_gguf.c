/*
 * libFuzzer target for the GGUF reader: any bytes go to le_gguf_open_mem;
 * on success every byte the reader vouched for (keys, string-array
 * entries, tensor data) is read so ASan sees a bad pointer or length, and
 * the lookups run on what was found.
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
    struct le_gguf *g = NULL;
    char err[256];
    if (le_gguf_open_mem(data, size, &g, err, sizeof(err)) != LE_OK)
        return 0;
    volatile uint8_t sink = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct le_gguf_kv *kv = &g->kv[i];
        for (uint64_t j = 0; j < kv->key.len; j++)
            sink ^= (uint8_t)kv->key.ptr[j];
        if (kv->type == LE_GGUF_ARRAY && kv->v.arr.strs)
            for (uint64_t k = 0; k < kv->v.arr.n; k++)
                for (uint64_t j = 0; j < kv->v.arr.strs[k].len; j++)
                    sink ^= (uint8_t)kv->v.arr.strs[k].ptr[j];
        /* Lookup by the key's own bytes must find a pair. */
        if (kv->key.len < 128 && !memchr(kv->key.ptr, 0, kv->key.len)) {
            char k[128];
            memcpy(k, kv->key.ptr, kv->key.len);
            k[kv->key.len] = 0;
            if (!le_gguf_find(g, k))
                abort();
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct le_gguf_tensor *t = &g->tensors[i];
        const uint8_t *d = t->data;
        for (size_t j = 0; j < t->nbytes; j++)
            sink ^= d[j];
        /* Dequantise the first row: exercises the type table on file
         * bytes. */
        const struct le_type_traits *tt = le_type_get(t->type);
        if (tt && t->ne[0] <= 4096) {
            float row[4096];
            tt->to_float(t->data, row, t->ne[0]);
            sink ^= (uint8_t)(row[0] != row[0]);
        }
    }
    (void)sink;
    le_gguf_free(g);
    return 0;
}
