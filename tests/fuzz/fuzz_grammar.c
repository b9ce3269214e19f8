/*
 * libFuzzer target for the grammar engine (local_engine/grammar.c):
 * arbitrary grammar text and arbitrary input bytes.
 *
 * Input layout: the grammar text up to the first NUL byte, then the bytes
 * fed to the recognizer.  Checks, beyond ASan/UBSan and the fuzzer's
 * timeout (no hang on left recursion or ambiguity): accepting the input
 * byte by byte and in one call agree; a rejected byte leaves the state
 * unchanged; a finished state is complete and accepts no byte; the token
 * mask over a small fixed vocabulary equals a token-by-token check.
 */
#include "../../local_engine/le_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const pieces[] = {
    "", "", "{", "}", "\"", ":", ",", " ", "\n", "a", "b", "0", "1", "-",
    "[", "]", "ab", "\"a\"", "{\"", "\":", "true", "null", "\xc3\xa9",
    "\\", "\\n", " \"", "12", "aaaa", "x", "\x00", "\xff"};
#define N_PIECES (sizeof(pieces) / sizeof(pieces[0]))

static struct le_token_trie *trie;

static void
check_mask(struct le_gstate *gs)
{
    static size_t lens[N_PIECES];
    static uint8_t eog[N_PIECES];
    if (!trie) {
        for (size_t i = 0; i < N_PIECES; i++)
            lens[i] = i == 29 ? 1 : strlen(pieces[i]);
        eog[1] = 1;
        if (le_token_trie_build(pieces, lens, eog, (int32_t)N_PIECES,
                                &trie) != LE_OK)
            abort();
    }
    uint64_t mask[1];
    if (le_gstate_mask(gs, trie, mask, NULL) != LE_OK)
        return; /* bounds passed: reported, fine */
    for (size_t id = 0; id < N_PIECES; id++) {
        int bit = (int)((mask[0] >> id) & 1);
        int want = eog[id] ? le_gstate_complete(gs)
                           : lens[id] > 0 &&
                                 le_gstate_accepts(gs, pieces[id], lens[id]);
        if (bit != want)
            abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const char *in = nul ? (const char *)nul + 1 : "";
    size_t in_len = nul ? size - glen - 1 : 0;
    if (in_len > 256)
        in_len = 256;
    struct le_grammar *g = NULL;
    char err[256];
    if (le_grammar_parse((const char *)data, glen, NULL, &g, err,
                         sizeof(err)) != LE_OK) {
        if (g || !err[0])
            abort();
        return 0;
    }
    struct le_gstate *a = NULL, *b = NULL;
    if (le_gstate_new(g, &a) != LE_OK || le_gstate_new(g, &b) != LE_OK) {
        le_gstate_free(a);
        le_grammar_free(g);
        return 0;
    }
    int whole = le_gstate_accepts(b, in, in_len);
    size_t i = 0;
    for (; i < in_len; i++) {
        if (i % 16 == 0)
            check_mask(a);
        int was_complete = le_gstate_complete(a);
        if (!le_gstate_accept(a, in + i, 1)) {
            if (le_gstate_complete(a) != was_complete)
                abort(); /* a rejected byte changed the state */
            break;
        }
        if (le_gstate_finished(a)) {
            if (!le_gstate_complete(a))
                abort();
            for (int c = 0; c < 256; c++) {
                char ch = (char)c;
                if (le_gstate_accepts(a, &ch, 1))
                    abort();
            }
        }
    }
    if ((i == in_len) != (whole != 0))
        abort(); /* byte by byte and all at once disagree */
    le_gstate_free(a);
    le_gstate_free(b);
    le_grammar_free(g);
    return 0;
}
