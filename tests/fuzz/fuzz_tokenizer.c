/*
 * libFuzzer target for the tokenizers: arbitrary bytes through le_tokenize
 * on the real vocabularies of $LLMUX_TEST_DATA/tokenizer (SentencePiece,
 * byte-level BPE with several pre-tokenizer rule sets, WordPiece).
 *
 * Input layout: byte 0 picks the vocabulary (mod the number loaded) and
 * the flags (bit 6: parse_special, bit 7: add_special); the rest is the
 * text.  Checks, beyond ASan/UBSan: the count does not depend on cap (a
 * short buffer then a full one give the same ids), every id is in the
 * vocabulary, the same call twice gives the same ids, and every piece
 * detokenizes within its stated length.
 */
#include "../../local_engine/le_int.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const vocab_names[] = {
    "llama-spm", "phi-3",    "gpt-2",   "falcon",
    "deepseek-coder", "starcoder", "bert-bge",
};
#define N_NAMES (sizeof(vocab_names) / sizeof(vocab_names[0]))

static struct le_vocab *vocabs[N_NAMES];
static size_t n_vocabs;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("LLMUX_TEST_DATA");
    if (!dir)
        dir = "../shared/data";
    for (size_t i = 0; i < N_NAMES; i++) {
        char path[1024], err[512];
        snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-%s.gguf", dir,
                 vocab_names[i]);
        struct le_gguf *g = NULL;
        struct le_vocab *v = NULL;
        if (le_gguf_open(path, LE_GGUF_READ, &g, err, sizeof(err)) ==
                LE_OK &&
            le_vocab_load(g, &v, err, sizeof(err)) == LE_OK)
            vocabs[n_vocabs++] = v;
        else
            fprintf(stderr, "fuzz_tokenizer: skipping %s: %s\n", path, err);
        le_gguf_free(g);
    }
    if (n_vocabs == 0) {
        fprintf(stderr, "fuzz_tokenizer: no vocabulary loaded (set "
                        "LLMUX_TEST_DATA)\n");
        abort();
    }
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size > 4096)
        return 0;
    const struct le_vocab *v = vocabs[(data[0] & 63) % n_vocabs];
    bool parse_special = data[0] & 64;
    bool add_special = data[0] & 128;
    /* A heap copy of exactly the text, so a read past it is caught. */
    size_t len = size - 1;
    char *text = malloc(len ? len : 1);
    if (!text)
        return 0;
    memcpy(text, data + 1, len);

    int32_t small[4];
    int64_t n = le_tokenize(v, text, len, add_special, parse_special, small,
                            4);
    if (n < 0) {
        free(text);
        return 0;
    }
    size_t cap = (size_t)n + 1;
    int32_t *ids = malloc(cap * sizeof(*ids));
    int32_t *ids2 = malloc(cap * sizeof(*ids2));
    if (!ids || !ids2)
        goto out;
    int64_t n1 = le_tokenize(v, text, len, add_special, parse_special, ids,
                             cap);
    int64_t n2 = le_tokenize(v, text, len, add_special, parse_special, ids2,
                             cap);
    if (n1 != n || n2 != n)
        abort();
    if (memcmp(ids, ids2, (size_t)n * sizeof(*ids)))
        abort();
    if (memcmp(ids, small, (size_t)(n < 4 ? n : 4) * sizeof(*ids)))
        abort();
    int32_t nv = le_vocab_n_tokens(v);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= nv)
            abort();
        char piece[8];
        size_t need = le_token_to_piece(v, ids[i], true, piece,
                                        sizeof(piece));
        if (need > sizeof(piece)) {
            char *big = malloc(need);
            if (!big)
                continue;
            if (le_token_to_piece(v, ids[i], true, big, need) != need)
                abort();
            free(big);
        }
    }
out:
    free(ids);
    free(ids2);
    free(text);
    return 0;
}
