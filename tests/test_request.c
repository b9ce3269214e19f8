/*
 * Unit tests for the chat request validator and the billable cap
 * (providers/request.c); the fuzz target runs here too on the seed bodies
 * and on every truncation of them, so CI exercises it without libFuzzer.
 */
#include "../providers/providers.h"
#include "harness.h"

#include "fuzz/fuzz_chat_request.c"

#include <stdlib.h>
#include <string.h>

static int
check(const char *text, const char **param_out)
{
    json_t *b = json_loads(text, 0, NULL);
    char msg[256] = "";
    const char *param = NULL;
    struct pv_chat c;
    int rc = pv_chat_from_json(&c, PV_API_CHAT, b, msg, sizeof(msg), &param);
    pv_chat_cleanup(&c); /* borrowed body: not freed here */
    if (param_out)
        *param_out = param;
    json_decref(b);
    return rc;
}

#define BODY(extra)                                                          \
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]" \
    extra "}"

static void
test_validate(void)
{
    const char *param;
    T_EQ_INT(check(BODY(""), &param), 0);
    T_CHECK(param == NULL);
    T_EQ_INT(check(BODY(",\"max_tokens\":0"), &param), -1);
    T_EQ_STR(param, "max_tokens");
    T_EQ_INT(check(BODY(",\"max_tokens\":1000001"), &param), -1);
    T_EQ_INT(check(BODY(",\"max_tokens\":1000000"), &param), 0);
    T_EQ_INT(check(BODY(",\"max_completion_tokens\":-5"), &param), -1);
    T_EQ_STR(param, "max_completion_tokens");
    T_EQ_INT(check(BODY(",\"max_completion_tokens\":2.0"), &param), -1);
    T_EQ_INT(check(BODY(",\"n\":0"), &param), -1);
    T_EQ_STR(param, "n");
    T_EQ_INT(check(BODY(",\"n\":128"), &param), 0);
    T_EQ_INT(check(BODY(",\"n\":129"), &param), -1);
    T_EQ_INT(check(BODY(",\"stream_options\":{\"include_usage\":\"yes\"}"),
                   &param),
             -1);
    T_EQ_STR(param, "stream_options.include_usage");
    T_EQ_INT(check(BODY(",\"stream_options\":{\"include_usage\":null}"),
                   &param),
             0);
    T_EQ_INT(check(BODY(",\"stream_options\":7"), &param), -1);
    T_EQ_STR(param, "stream_options");
    T_EQ_INT(check("[]", &param), -1);
    T_CHECK(param == NULL);
    T_EQ_INT(check("{\"messages\":[{\"role\":\"user\"}]}", &param), -1);
    T_EQ_STR(param, "model");
}

static int64_t
cap(const char *text)
{
    char msg[256];
    const char *param;
    struct pv_chat c;
    if (pv_chat_parse(&c, PV_API_CHAT, text, strlen(text), msg, sizeof(msg),
                      &param) != PV_CHAT_OK)
        return -1;
    int64_t v = c.completion_cap;
    pv_chat_cleanup(&c);
    return v;
}

static void
test_cap(void)
{
    /* The larger cap bounds the bill, whichever the upstream honours. */
    T_EQ_INT(cap(BODY(",\"max_completion_tokens\":1,\"max_tokens\":1000")),
             1000);
    T_EQ_INT(cap(BODY(",\"max_completion_tokens\":50,\"max_tokens\":5")),
             50);
    T_EQ_INT(cap(BODY("")), PV_DEFAULT_COMPLETION_TOKENS);
    /* n choices, each up to the cap. */
    T_EQ_INT(cap(BODY(",\"n\":3,\"max_tokens\":1000")), 3000);
    T_EQ_INT(cap(BODY(",\"n\":4")), 4 * PV_DEFAULT_COMPLETION_TOKENS);
    T_EQ_INT(cap("{\"model\":\"m\",\"model\":\"m\",\"messages\":[]}"),
             -1); /* duplicate keys: not parsed */
}

/* The one prompt estimate and its bound, from the same walk. */
static void
test_estimate(void)
{
    const char *t =
        "{\"model\":\"m\",\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"messages\":["
        "{\"role\":\"system\",\"content\":\"0123456789ab\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"abcdefghijkl\"},{\"type\":\"image_url\"}]},"
        "{\"role\":\"assistant\",\"content\":null}]}";
    char msg[256];
    const char *param;
    struct pv_chat c;
    T_EQ_INT(pv_chat_parse(&c, PV_API_CHAT, t, strlen(t), msg, sizeof(msg),
                           &param),
             PV_CHAT_OK);
    T_EQ_STR(c.model, "m");
    T_EQ_INT(c.stream, 1);
    T_EQ_INT(c.include_usage, 1);
    T_EQ_INT(c.n, 1);
    T_EQ_INT(c.n_messages, 3);
    T_EQ_INT(c.text_bytes, 24);
    T_EQ_INT(c.n_other_parts, 1);
    T_EQ_INT(c.est_prompt_tokens, 24 / 4 + 3 * 4);
    T_EQ_INT(c.max_prompt_tokens, 24 + PV_PART_BOUND_BYTES + 3 * 8 + 8);
    T_EQ_INT(c.max_tokens, 0);
    pv_chat_cleanup(&c);
    T_EQ_INT(pv_chat_parse(&c, PV_API_CHAT, "{\"model\"", 9, msg,
                           sizeof(msg), &param),
             PV_CHAT_BAD_JSON);
    T_CHECK(strstr(msg, "could not parse") != NULL);
    T_CHECK(c.body == NULL);
}

static void
test_fuzz_entry(void)
{
    static const char *const seeds[] = {
        BODY(",\"max_tokens\":16,\"n\":2,\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true}"),
        BODY(",\"max_tokens\":0,\"stream_options\":{\"include_usage\":1}"),
        "{\"model\":\"\",\"messages\":[]}",
        "{\"model\":\"m\",\"messages\":[7]}",
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
        for (size_t n = 0; n <= strlen(seeds[i]); n++)
            T_EQ_INT(LLVMFuzzerTestOneInput((const uint8_t *)seeds[i], n),
                     0);
}

int
main(void)
{
    T_RUN(test_validate);
    T_RUN(test_cap);
    T_RUN(test_estimate);
    T_RUN(test_fuzz_entry);
    return T_END();
}
