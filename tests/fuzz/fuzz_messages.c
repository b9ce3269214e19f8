/*
 * libFuzzer target for the Anthropic Messages inbound (providers/
 * messages.c), which reads what a client sends and what any kind answers.
 * Byte 0 picks the mode, the rest is the input:
 *   0  a Messages request -> pv_msgs_parse (and as a count_tokens body):
 *      OK with an OpenAI chat body that passes the chat checks and the
 *      client's body kept, or a refusal with a message, nothing held and
 *      a param that outlives the body
 *   1  an OpenAI chat.completion -> pv_msgs_answer and, as a passthrough
 *      body, pv_msgs_pass_answer
 *   2  OpenAI stream chunks, one per line -> pv_msgs_stream_chunk, then
 *      pv_msgs_stream_end: every data line of the output is JSON
 *   3  native Messages events, one per line -> pv_msgs_stream_pass
 *   4  an error body -> pv_msgs_error_from (always Anthropic's shape)
 */
#include "../../providers/providers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every "data: " line of out parses as a JSON object. */
static void
check_events(const struct gx_buf *out)
{
    const char *p = out->data, *end = out->data + out->len;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (l > 6 && !memcmp(p, "data: ", 6)) {
            json_t *j = json_loadb(p + 6, l - 6, 0, NULL);
            if (!json_is_object(j))
                abort();
            json_decref(j);
        }
        p = nl ? nl + 1 : NULL;
    }
}

static void
lines(int mode, const char *p, size_t n)
{
    struct pv_msgs_stream s;
    pv_msgs_stream_init(&s, "m", "r");
    struct gx_buf out;
    gx_buf_init(&out, 1 << 22);
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t l = nl ? (size_t)(nl - p) : n;
        if (mode == 2)
            pv_msgs_stream_chunk(&s, p, l, &out);
        else
            pv_msgs_stream_pass(&s, p, l, &out);
        if (!nl)
            break;
        n -= l + 1;
        p = nl + 1;
    }
    struct pv_usage u = {1, 10, 3, 4, 2, 1};
    pv_msgs_stream_end(&s, mode == 3, &u, &out);
    check_events(&out);
    pv_msgs_stream_cleanup(&s);
    gx_buf_cleanup(&out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0] % 5;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    char msg[512];
    const char *param = NULL;
    size_t len = 0;
    struct pv_chat c;
    switch (mode) {
    case 0:
        for (int count = 0; count < 2; count++) {
            if (pv_msgs_parse(&c, p, n, count, msg, sizeof(msg), &param) ==
                PV_CHAT_OK) {
                struct pv_chat again;
                if (!json_is_object(c.native) ||
                    pv_chat_from_json(&again, PV_API_MESSAGES, c.body, msg,
                                      sizeof(msg), &param) != 0 ||
                    c.est_prompt_tokens < 0 || c.max_prompt_tokens <
                                                   c.est_prompt_tokens)
                    abort();
                pv_chat_cleanup(&c);
            } else if (c.body || c.native || !msg[0]) {
                abort();
            } else if (param) {
                /* a static string, alive after the refusal (ASan sees a
                 * name borrowed from the freed body) */
                volatile size_t pl = strlen(param);
                (void)pl;
            }
        }
        break;
    case 1: {
        struct pv_usage u = {1, 10, 3, 4, 2, 1};
        char *a = pv_msgs_answer(p, n, "m", "r", &u, &len);
        if (a) {
            json_t *j = json_loads(a, 0, NULL);
            if (!json_is_array(json_object_get(j, "content")))
                abort();
            json_decref(j);
        }
        free(a);
        free(pv_msgs_pass_answer(p, n, "m", &len));
        break;
    }
    case 2:
    case 3:
        lines(mode, p, n);
        break;
    default: {
        char *e = pv_msgs_error_from(p, n, 400 + (int)(n % 200), &len);
        json_t *j = e ? json_loads(e, 0, NULL) : NULL;
        if (!json_is_object(json_object_get(j, "error")))
            abort();
        json_decref(j);
        free(e);
        break;
    }
    }
    return 0;
}
