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

/* The fast path (json_scan.c's request scanner, no tree) against the
 * jansson way on bodies that probe each of its rules: LLVMFuzzerTestOneInput
 * compares the two on every prefix of every seed; here also that the fast
 * path is taken for the plain cases, so the comparison means something. */
static void
test_fast_path(void)
{
    static const char *const fast[] = {
        BODY(""),
        BODY(",\"max_tokens\":16,\"stream\":false"),
        " {\"model\" : \"gpt-4.1\" , \"messages\" : [ {\"role\":\"user\","
        "\"content\":\"a\\n\\u00e9\\ud83d\\ude00\\\"\"} ] }\n",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
        "[{\"type\":\"text\",\"text\":\"\u00e9t\u00e9\"},7,{\"text\":3}]}],"
        "\"temperature\":0.5e1,\"seed\":-9223372036854775808,\"x\":{\"a\":"
        "[1,{\"a\":2}],\"b\":null}}",
    };
    char msg[256];
    const char *param;
    for (size_t i = 0; i < sizeof(fast) / sizeof(fast[0]); i++) {
        struct pv_chat c;
        T_EQ_INT(pv_chat_parse(&c, PV_API_CHAT, fast[i], strlen(fast[i]), msg,
                               sizeof(msg), &param),
                 PV_CHAT_OK);
        T_CHECK(c.text != NULL && c.body == NULL);
        T_CHECK(pv_chat_body(&c) != NULL);
        pv_chat_cleanup(&c);
    }
    /* Decoded lengths: "a\n" 2, \u00e9 2 bytes, the pair 4, \" 1. */
    struct pv_chat c;
    T_EQ_INT(pv_chat_parse(&c, PV_API_CHAT, fast[2], strlen(fast[2]), msg,
                           sizeof(msg), &param),
             PV_CHAT_OK);
    T_EQ_STR(c.model, "gpt-4.1");
    T_EQ_INT(c.text_bytes, 9);
    pv_chat_cleanup(&c);
    T_EQ_INT(pv_chat_parse(&c, PV_API_CHAT, fast[3], strlen(fast[3]), msg,
                           sizeof(msg), &param),
             PV_CHAT_OK);
    T_EQ_INT(c.text_bytes, 5); /* "été" as UTF-8 (C escapes) */
    T_EQ_INT(c.n_other_parts, 2);
    pv_chat_cleanup(&c);
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
        /* duplicates at each level, escaped keys, NULs, numbers */
        BODY(",\"x\":{\"a\":1,\"a\":2}"),
        BODY(",\"x\":[{\"a\":1},{\"a\":2}]"),
        BODY(",\"\\u006dodel\":\"m\""),
        BODY(",\"stre\\u0061m\":true"),
        "{\"model\":\"m\\u0000\",\"messages\":[{\"role\":\"u\"}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"role\":\"v\"}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":{}}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":7}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"u\",\"content\":"
        "[{\"text\":\"ab\",\"text\":\"c\"}]}]}",
        BODY(",\"max_tokens\":1e2,\"n\":1.0"),
        BODY(",\"max_tokens\":-0,\"n\":128,\"seed\":99999999999999999999"),
        BODY(",\"temperature\":1e400,\"top_p\":\"x\""),
        BODY(",\"max_completion_tokens\":1000000,\"max_tokens\":1000001"),
        BODY(",\"stream_options\":{\"include_usage\":null,\"x\":[]}"),
        BODY(",\"stream\":null,\"stream_options\":null"),
        BODY(",\"stream\":1"),
        "{\"model\":\"m\",\"messages\":[{\"role\":\"u\"}]}\0",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"u\"}],\"n\":1}  x",
        "{\"model\":\"\xc3\xa9\",\"messages\":[{\"role\":\"\xed\xa0\x80\"}]}",
        "{\"model\":\"\\ud800\",\"messages\":[{\"role\":\"u\"}]}",
        "\xef\xbb\xbf{\"model\":\"m\",\"messages\":[{\"role\":\"u\"}]}",
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
    T_RUN(test_fast_path);
    T_RUN(test_fuzz_entry);
    return T_END();
}
