/*
 * le_fixture: see le_fixture.h.
 */
#include "le_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf_writer.h"

struct le_model *
le_fixture_stories(void)
{
    char path[1024], err[256];
    const char *dir = getenv("LLMUX_TEST_DATA");
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf",
             dir ? dir : "../shared/data");
    struct le_model *m = NULL;
    if (le_model_open(path, NULL, &m, err, sizeof(err)) != LE_OK)
        fprintf(stderr, "%s: %s\n", path, err);
    return m;
}

struct le_model *
le_fixture_random(int n_vocab, enum le_type type, uint64_t seed, int n_ctx)
{
    return le_fixture_random_tmpl(n_vocab, type, seed, n_ctx, NULL, NULL);
}

struct le_model *
le_fixture_random_tmpl(int n_vocab, enum le_type type, uint64_t seed,
                       int n_ctx, const char *tmpl,
                       const char *const *controls)
{
    struct gguf_w_llama lp = {0};
    lp.n_vocab = n_vocab;
    lp.n_embd = 32;
    lp.n_layer = 1;
    lp.n_head = 2;
    lp.n_head_kv = 1;
    lp.n_ff = 64;
    lp.n_ctx = n_ctx;
    lp.type = type;
    lp.seed = seed;
    lp.chat_template = tmpl;
    lp.controls = controls;
    char path[256], err[256];
    snprintf(path, sizeof(path), "/tmp/llmux_fixture_%d_%llu.gguf",
             (int)getpid(), (unsigned long long)seed);
    struct le_model *m = NULL;
    if (gguf_w_llama_write(&lp, path) != 0 ||
        le_model_open(path, NULL, &m, err, sizeof(err)) != LE_OK)
        m = NULL;
    unlink(path);
    return m;
}

struct collect {
    char *buf;
    size_t len, cap;
};

static int
on_tok(void *ud, int32_t id, const char *text, size_t len)
{
    (void)id;
    struct collect *c = ud;
    if (c->len + len < c->cap) {
        memcpy(c->buf + c->len, text, len);
        c->len += len;
        c->buf[c->len] = 0;
    }
    return 0;
}

enum le_status
le_fixture_generate(struct le_session *s, const int32_t *prompt,
                    size_t n_prompt, const struct le_sampling *sp, char *out,
                    size_t cap, struct le_gen_result *r)
{
    struct collect c = {out, 0, cap};
    if (cap)
        out[0] = 0;
    char err[256];
    return le_session_generate(s, prompt, n_prompt, sp, on_tok, &c, r, err,
                               sizeof(err));
}
