/*
 * libFuzzer target for the native kinds' translations (providers/
 * anthropic.c, gemini.c, native.c), which read what a client and an
 * upstream send.  Byte 0 picks the mode, the rest is the input:
 *   0  an OpenAI chat request -> pv_anth_request and pv_gem_request: OK
 *      with an object, or a refusal with a message and no body
 *   1  an Anthropic answer -> pv_anth_answer
 *   2  a Gemini answer -> pv_gem_answer
 *   3  Anthropic stream events, one JSON per line ("TYPE JSON" or JSON)
 *   4  Gemini stream events, one JSON per line
 *   5  an error body -> pv_x_error_body (always an OpenAI error object)
 * Every result must hold: usage counts >= 0, cached + cache writes <=
 * prompt, reasoning <= completion; every chunk an object with "choices".
 * The passthrough's readers (pv_anth_pass_answer, pv_anth_pass_event,
 * which scan the bytes) must read what the translation reads from the
 * tree: the same usage, the same end and the same in-band errors.
 */
#include "../../providers/providers.h"
#include "../../providers/providers_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_usage(const struct pv_usage *u)
{
    if (u->prompt_tokens < 0 || u->completion_tokens < 0 ||
        u->cached_tokens < 0 || u->cache_write_tokens < 0 ||
        u->reasoning_tokens < 0 || u->cached_tokens > u->prompt_tokens ||
        u->reasoning_tokens > u->completion_tokens)
        abort();
}

static int
emit(void *ud, json_t *chunk)
{
    (void)ud;
    if (!json_is_object(chunk) ||
        !json_is_array(json_object_get(chunk, "choices")))
        abort();
    json_decref(chunk);
    return 0;
}

static void
same_usage(const struct pv_usage *a, const struct pv_usage *b)
{
    if (a->have != b->have || a->prompt_tokens != b->prompt_tokens ||
        a->completion_tokens != b->completion_tokens ||
        a->cached_tokens != b->cached_tokens ||
        a->cache_write_tokens != b->cache_write_tokens)
        abort();
}

static void
stream(int anth, const char *p, size_t n)
{
    struct pv_xstream xs, xp;
    memset(&xs, 0, sizeof(xs));
    memset(&xp, 0, sizeof(xp));
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t l = nl ? (size_t)(nl - p) : n;
        char type[PV_SSE_EVENT_MAX + 1] = "";
        const char *j = p;
        size_t jl = l;
        const char *sp = memchr(p, ' ', l);
        if (sp && (size_t)(sp - p) <= PV_SSE_EVENT_MAX && *p != '{') {
            memcpy(type, p, (size_t)(sp - p));
            type[sp - p] = '\0';
            j = sp + 1;
            jl = l - (size_t)(sp - p) - 1;
        }
        json_t *ev = json_loadb(j, jl, 0, NULL);
        if (json_is_object(ev)) {
            char why[200];
            int r = anth ? pv_anth_event(&xs, type, ev, emit, NULL, why,
                                         sizeof(why))
                         : pv_gem_event(&xs, type, ev, emit, NULL, why,
                                        sizeof(why));
            check_usage(&xs.usage);
            if (r < 0 && !memchr(why, '\0', sizeof(why)))
                abort();
            const char *t = json_string_value(json_object_get(ev, "type"));
            if (!t || !*t)
                t = type;
            if (anth && *t) {
                char pt[32], pwhy[200];
                int pr = pv_anth_pass_event(&xp, type, j, jl, pt, sizeof(pt),
                                            pwhy, sizeof(pwhy));
                if ((r == PV_XS_DONE) != (pr == PV_XS_DONE) ||
                    (r == PV_XS_UPSTREAM_ERROR) !=
                        (pr == PV_XS_UPSTREAM_ERROR) ||
                    (r == PV_XS_UPSTREAM_ERROR && strcmp(why, pwhy)) ||
                    (strlen(t) < sizeof(pt) && strcmp(pt, t)))
                    abort();
                same_usage(&xs.usage, &xp.usage);
            }
            if (r == PV_XS_DONE || r < 0) {
                json_decref(ev);
                break;
            }
        }
        json_decref(ev);
        if (!nl)
            break;
        n -= l + 1;
        p = nl + 1;
    }
    json_t *uc = pv_x_usage_chunk(&xs);
    if (uc && !json_is_array(json_object_get(uc, "choices")))
        abort();
    json_decref(uc);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0] % 6;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    if (mode == 3 || mode == 4) {
        stream(mode == 3, p, n);
        return 0;
    }
    if (mode == 5) {
        size_t len = 0;
        char *s = pv_x_error_body(p, n, 400, &len);
        json_t *j = s ? json_loadb(s, len, 0, NULL) : NULL;
        if (s && !json_is_string(json_object_get(json_object_get(j, "error"),
                                                 "message")))
            abort();
        json_decref(j);
        free(s);
        return 0;
    }
    json_t *in = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(in)) {
        json_decref(in);
        return 0;
    }
    char msg[700];
    if (mode == 0) {
        char why[512];
        /* The gateway validates before a provider sees a request. */
        const char *param = NULL;
        struct pv_chat chat;
        if (pv_chat_from_json(&chat, PV_API_CHAT, in, why, sizeof(why),
                              &param) == 0) {
            for (int k = 0; k < 2; k++) {
                json_t *out = NULL;
                msg[0] = '\0';
                int r = k ? pv_gem_request(in, 1, &out, msg, sizeof(msg))
                          : pv_anth_request(in, "m", 1, &out, msg,
                                            sizeof(msg));
                if (r == PV_X_OK && !json_is_object(out))
                    abort();
                if (r == PV_X_REFUSE && (out || !msg[0]))
                    abort();
                json_decref(out);
            }
        }
    } else {
        struct pv_usage u;
        char why[160];
        json_t *oa = mode == 1 ? pv_anth_answer(in, &u, why, sizeof(why))
                               : pv_gem_answer(in, &u, why, sizeof(why));
        if (oa) {
            check_usage(&u);
            if (!json_is_array(json_object_get(oa, "choices")))
                abort();
        }
        if (oa && mode == 1) {
            struct pv_usage pu;
            if (pv_anth_pass_answer(p, n, &pu, why, sizeof(why)) != 0)
                abort();
            same_usage(&u, &pu);
        }
        json_decref(oa);
    }
    json_decref(in);
    return 0;
}
