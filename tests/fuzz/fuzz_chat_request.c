/*
 * libFuzzer target for the chat request validator (providers/request.c):
 * the input is a request body; whatever jansson makes of it goes through
 * pv_chat_parse; when valid its completion_cap must stay within
 * [1, PV_MAX_COMPLETION_TOKENS x PV_MAX_N] and its estimate within the
 * bound.
 */
#include "../../providers/providers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char msg[512];
    const char *param = "unset";
    struct pv_chat c;
    enum pv_chat_err e = pv_chat_parse(&c, PV_API_CHAT, (const char *)data,
                                       size, msg, sizeof(msg), &param);
    if (e == PV_CHAT_OK) {
        if (param != NULL || !c.body || !c.model)
            abort(); /* a valid body names no parameter */
        int64_t cap = c.completion_cap;
        if (cap < 1 || cap > (int64_t)PV_MAX_COMPLETION_TOKENS * PV_MAX_N)
            abort();
        if (c.est_prompt_tokens < 0 ||
            c.est_prompt_tokens > c.max_prompt_tokens)
            abort();
        pv_chat_cleanup(&c);
    } else if (!memchr(msg, '\0', sizeof(msg)) || msg[0] == '\0' ||
               c.body) {
        abort(); /* every refusal says why, and holds nothing */
    }
    return 0;
}
