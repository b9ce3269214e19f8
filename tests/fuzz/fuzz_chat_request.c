/*
 * libFuzzer target for the chat request validator (providers/request.c):
 * the input is a request body; whatever jansson makes of it goes through
 * pv_chat_parse; when valid its completion_cap must stay within
 * [1, PV_MAX_COMPLETION_TOKENS x PV_MAX_N] and its estimate within the
 * bound.  pv_chat_parse takes a scanner's fast path (no tree) for most
 * valid bodies: every input is also read the jansson way
 * (json_loadb + pv_chat_from_json) and both must agree exactly: the same
 * verdict, the same facts, and the tree pv_chat_body builds equal to
 * jansson's.
 */
#include "../../providers/providers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
same_facts(const struct pv_chat *a, const struct pv_chat *b)
{
    return a->api == b->api && !strcmp(a->model, b->model) &&
           a->stream == b->stream && a->include_usage == b->include_usage &&
           a->n == b->n && a->max_tokens == b->max_tokens &&
           a->completion_cap == b->completion_cap &&
           a->n_messages == b->n_messages && a->text_bytes == b->text_bytes &&
           a->n_other_parts == b->n_other_parts &&
           a->est_prompt_tokens == b->est_prompt_tokens &&
           a->max_prompt_tokens == b->max_prompt_tokens;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char msg[512];
    const char *param = "unset";
    struct pv_chat c;
    enum pv_chat_err e = pv_chat_parse(&c, PV_API_CHAT, (const char *)data,
                                       size, msg, sizeof(msg), &param);
    /* The jansson way, for comparison. */
    char msg2[512];
    const char *param2 = NULL;
    struct pv_chat slow;
    json_t *tree = json_loadb((const char *)data, size,
                              JSON_REJECT_DUPLICATES, NULL);
    int slow_ok = tree && pv_chat_from_json(&slow, PV_API_CHAT, tree, msg2,
                                            sizeof(msg2), &param2) == 0;
    if ((e == PV_CHAT_OK) != slow_ok)
        abort(); /* the fast path took a body jansson refuses, or back */
    if (e == PV_CHAT_OK) {
        if (param != NULL || !c.model)
            abort(); /* a valid body names no parameter */
        if (!c.body && !c.text)
            abort(); /* a tree, or the bytes to build it from */
        if (!same_facts(&c, &slow))
            abort();
        json_t *built = pv_chat_body(&c);
        if (!built || !json_equal(built, tree))
            abort();
        int64_t cap = c.completion_cap;
        if (cap < 1 || cap > (int64_t)PV_MAX_COMPLETION_TOKENS * PV_MAX_N)
            abort();
        if (c.est_prompt_tokens < 0 ||
            c.est_prompt_tokens > c.max_prompt_tokens)
            abort();
        pv_chat_cleanup(&c);
        pv_chat_cleanup(&slow); /* borrowed tree: freed below */
    } else if (!memchr(msg, '\0', sizeof(msg)) || msg[0] == '\0' ||
               c.body || c.text) {
        abort(); /* every refusal says why, and holds nothing */
    }
    json_decref(tree);
    return 0;
}
