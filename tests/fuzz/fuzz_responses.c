/*
 * libFuzzer target for the Responses API adapter (gateway/responses.c)
 * and the embeddings / completions parsers (gateway/embeddings.c).  Byte
 * 0 picks what the rest is:
 *   0  a Responses request body: gw_resp_parse; a valid one is a chat
 *      body the chat validator accepts, with no parameter named, and its
 *      echo an object; a refusal says why and holds nothing
 *   1  an upstream chat completion body: gw_resp_body writes a JSON
 *      object or refuses with a sentence
 *   2  upstream chat chunks, one per line: the stream writer, then its
 *      end (completed, or failed when byte 1 is odd); every event it
 *      writes is "event: T\ndata: {JSON with type T}\n\n"
 *   3, 4  an embeddings / completions body
 */
#include "../../gateway/gw_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every record of out is an event whose data is JSON of that type. */
static void
check_events(const struct gx_buf *out)
{
    const char *p = out->data ? out->data : "";
    while (*p) {
        const char *end = strstr(p, "\n\n");
        const char *d = strstr(p, "\ndata: ");
        if (!end || strncmp(p, "event: ", 7) || !d || d > end)
            abort();
        json_t *j = json_loadb(d + 7, (size_t)(end - d - 7), 0, NULL);
        const char *t = json_string_value(json_object_get(j, "type"));
        if (!t || strlen(t) != (size_t)(d - p - 7) || strncmp(t, p + 7,
                                                             strlen(t)))
            abort();
        json_decref(j);
        p = end + 2;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    char msg[512] = "";
    const char *param = "unset";
    struct pv_chat c;
    json_t *echo = NULL;
    memset(&c, 0, sizeof(c));
    struct gw_api_ctx x = {"fuzz", &c, NULL, NULL, 1, 4096};
    struct pv_usage u = {1, 5, 3, 1, 0, 1};
    switch (data[0] % 5) {
    case 0: {
        enum pv_chat_err e =
            gw_resp_parse(&c, text, n, &echo, msg, sizeof(msg), &param);
        if (e == PV_CHAT_OK) {
            struct pv_chat again;
            char m2[512];
            const char *p2;
            if (param || !json_is_object(echo) || c.api != PV_API_RESPONSES ||
                pv_chat_from_json(&again, PV_API_CHAT, c.body, m2,
                                  sizeof(m2), &p2) != 0)
                abort();
            pv_chat_cleanup(&again);
            pv_chat_cleanup(&c);
        } else if (msg[0] == '\0' || c.body || echo) {
            abort();
        }
        json_decref(echo);
        break;
    }
    case 1: {
        size_t len = 0;
        x.usage = &u;
        char *s = gw_resp_body(&x, text, n, &len, msg, sizeof(msg));
        if (s) {
            json_t *o = json_loadb(s, len, 0, NULL);
            if (!json_is_object(o))
                abort();
            json_decref(o);
        } else if (msg[0] == '\0') {
            abort();
        }
        free(s);
        break;
    }
    case 2: {
        struct gw_resp_stream *s = gw_resp_stream_new(&x);
        if (!s)
            return 0;
        struct gx_buf out;
        gx_buf_init(&out, 0);
        while (n > 0) {
            const char *nl = memchr(text, '\n', n);
            size_t l = nl ? (size_t)(nl - text) : n;
            gw_resp_stream_chunk(s, text, l, &out);
            text += l + (nl ? 1 : 0);
            n -= l + (nl ? 1 : 0);
        }
        gw_resp_stream_end(s, &u, data[1] & 1 ? "cut" : NULL, &out);
        check_events(&out);
        gx_buf_cleanup(&out);
        gw_resp_stream_free(s);
        break;
    }
    default: {
        enum pv_chat_err e =
            data[0] % 5 == 3
                ? gw_embeddings_parse(&c, text, n, &echo, msg, sizeof(msg),
                                      &param)
                : gw_completions_parse(&c, text, n, &echo, msg, sizeof(msg),
                                       &param);
        if (e == PV_CHAT_OK) {
            /* the tree, or the kept bytes it is rebuilt from */
            if (param || !pv_chat_body(&c) || c.est_prompt_tokens < 0 ||
                c.est_prompt_tokens > c.max_prompt_tokens ||
                c.completion_cap < 0)
                abort();
            pv_chat_cleanup(&c);
        } else if (msg[0] == '\0' || c.body) {
            abort();
        }
        break;
    }
    }
    return 0;
}
