/*
 * le_fixture: local-engine fixtures shared by the engine tests: the real
 * stories260K model, small random-weight models, and a generation whose
 * text is collected into a buffer.  Models are the caller's (le_model_free).
 */
#ifndef LLMUX_TESTS_LE_FIXTURE_H
#define LLMUX_TESTS_LE_FIXTURE_H

#include <stddef.h>

#include "../../local_engine/le_int.h"

/* $LLMUX_TEST_DATA/models/stories260K.gguf, or NULL (printed). */
struct le_model *le_fixture_stories(void);
/* A random llama (1 layer, 32 embd, 2 heads) with n_vocab tokens of type
 * written to a temp file, opened and unlinked; NULL on failure. */
struct le_model *le_fixture_random(int n_vocab, enum le_type type,
                                   uint64_t seed, int n_ctx);
/* The same with tokenizer.chat_template tmpl and the control tokens
 * controls (gguf_w_llama's; either may be NULL). */
struct le_model *le_fixture_random_tmpl(int n_vocab, enum le_type type,
                                        uint64_t seed, int n_ctx,
                                        const char *tmpl,
                                        const char *const *controls);
/* le_session_generate with the text collected NUL-terminated into
 * out[0..cap) (cut, never overrun, past cap - 1 bytes). */
enum le_status le_fixture_generate(struct le_session *s,
                                   const int32_t *prompt, size_t n_prompt,
                                   const struct le_sampling *sp, char *out,
                                   size_t cap, struct le_gen_result *r);

#endif
