/*
 * libFuzzer target for the chat request validator (providers/request.c):
 * the input is a request body; whatever jansson makes of it goes through
 * pv_request_validate and, when valid, pv_request_completion_cap, which
 * must stay within [1, PV_MAX_COMPLETION_TOKENS x PV_MAX_N].
 */
#include "../../providers/providers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *body = json_loadb((const char *)data, size,
                              JSON_REJECT_DUPLICATES, NULL);
    if (!body)
        return 0;
    char msg[512];
    const char *param = "unset";
    if (pv_request_validate(body, msg, sizeof(msg), &param) == 0) {
        if (param != NULL)
            abort(); /* a valid body names no parameter */
        int64_t cap = pv_request_completion_cap(body, 1024);
        if (cap < 1 || cap > (int64_t)PV_MAX_COMPLETION_TOKENS * PV_MAX_N)
            abort();
    } else if (!memchr(msg, '\0', sizeof(msg)) || msg[0] == '\0') {
        abort(); /* every refusal says why */
    }
    json_decref(body);
    return 0;
}
