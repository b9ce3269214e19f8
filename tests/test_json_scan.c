/*
 * test_json_scan: providers/json_scan.c against jansson.  Every input is
 * run through pv_json_scan_chat and through json_loadb(flags 0) +
 * pv_usage_parse (what oa_on_finish did before); the verdicts and the
 * usage must agree.  PV_JS_UNSURE (the caller then uses jansson) is only
 * allowed where the scanner documents it: nesting deeper than
 * PV_JS_MAX_DEPTH, an escaped key inside the top/usage/details objects,
 * a long real that might overflow.
 *
 * Known and intended difference: pv_usage_parse used to cast a count of
 * 2^63 or more with (int64_t), which is undefined; both sides now use
 * pv_usage_num, which saturates at INT64_MAX (tested below).
 */
#include "harness.h"

#include "../providers/providers.h"
#include "../providers/providers_int.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/members_check.h"

static long n_checked, n_unsure, n_object, n_invalid;
/* What the stream path (oa_event) reads besides: "choices" is [] and an
 * "error" member is present, as jansson sees them. */
static int old_choices_empty, old_has_error;

/* The old way: the verdict oa_on_finish gave and the usage it kept. */
static int
old_way(const char *p, size_t n, int *has_choices, struct pv_usage *u)
{
    memset(u, 0, sizeof(*u));
    *has_choices = 0;
    json_t *j = json_loadb(p, n, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return 0;
    }
    *has_choices = json_object_get(j, "choices") != NULL;
    const json_t *ch = json_object_get(j, "choices");
    old_choices_empty = json_is_array(ch) && json_array_size(ch) == 0;
    old_has_error = json_object_get(j, "error") != NULL;
    pv_usage_parse(j, u);
    json_decref(j);
    return 1;
}

/* Compares both ways on p[0..n); returns the scanner's verdict.  On a
 * mismatch prints the input (escaped, cut). */
static enum pv_js_verdict
cmp(const char *p, size_t n, int unsure_ok)
{
    struct pv_js_chat sc;
    enum pv_js_verdict v = pv_json_scan_chat(p, n, &sc);
    int hc;
    struct pv_usage u;
    int ok = old_way(p, n, &hc, &u);
    n_checked++;
    int good;
    if (v == PV_JS_UNSURE) {
        n_unsure++;
        good = unsure_ok;
    } else if (v == PV_JS_INVALID) {
        n_invalid++;
        good = !ok;
    } else {
        n_object++;
        good = ok && hc == sc.has_choices && u.have == sc.usage.have &&
               old_choices_empty == sc.choices_empty &&
               old_has_error == sc.has_error &&
               u.prompt_tokens == sc.usage.prompt_tokens &&
               u.completion_tokens == sc.usage.completion_tokens &&
               u.cached_tokens == sc.usage.cached_tokens;
    }
    if (!good) {
        fprintf(stderr, "mismatch: scan %d (choices %d usage %d %lld %lld "
                        "%lld) jansson %d (choices %d usage %d %lld %lld "
                        "%lld) on \"",
                (int)v, sc.has_choices, sc.usage.have,
                (long long)sc.usage.prompt_tokens,
                (long long)sc.usage.completion_tokens,
                (long long)sc.usage.cached_tokens, ok, hc, u.have,
                (long long)u.prompt_tokens, (long long)u.completion_tokens,
                (long long)u.cached_tokens);
        for (size_t i = 0; i < n && i < 300; i++) {
            unsigned char c = (unsigned char)p[i];
            if (c >= 0x20 && c < 0x7f && c != '\\')
                fputc(c, stderr);
            else
                fprintf(stderr, "\\x%02x", c);
        }
        fprintf(stderr, "\"%s\n", n > 300 ? "..." : "");
    }
    T_CHECK(good);
    /* The member scanner and the splice on the same input. */
    const char *mbad = members_check(p, n);
    if (mbad)
        fprintf(stderr, "%s (input of %zu bytes: %.120s)\n", mbad, n, p);
    T_CHECK(mbad == NULL);
    return v;
}

#define CMPL(lit) cmp(lit, sizeof(lit) - 1, 0)

static enum pv_js_verdict
cmps(const char *s)
{
    return cmp(s, strlen(s), 0);
}

static const char *real_bodies[] = {
    "{\"id\":\"chatcmpl-fake-1\",\"object\":\"chat.completion\",\"created\":"
    "1764400000,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"message\":"
    "{\"role\":\"assistant\",\"content\":\"Hello from fake provider\"},"
    "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,"
    "\"completion_tokens\":4,\"total_tokens\":13}}",
    "{\n  \"id\": \"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\n  \"object\": "
    "\"chat.completion\",\n  \"created\": 1741569952,\n  \"model\": "
    "\"gpt-4.1-2025-04-14\",\n  \"choices\": [\n    {\n      \"index\": 0,\n"
    "      \"message\": {\n        \"role\": \"assistant\",\n        "
    "\"content\": \"Hello! How can I assist you today? \\u00e9\\ud83d\\ude00 "
    "\\\"q\\\" \\/ \\\\ \\b\\f\\n\\r\\t \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\n"
    "        \"refusal\": null,\n        \"annotations\": []\n      },\n      "
    "\"logprobs\": null,\n      \"finish_reason\": \"stop\"\n    }\n  ],\n  "
    "\"usage\": {\n    \"prompt_tokens\": 19,\n    \"completion_tokens\": 10,"
    "\n    \"total_tokens\": 29,\n    \"prompt_tokens_details\": {\n      "
    "\"cached_tokens\": 7,\n      \"audio_tokens\": 0\n    },\n    "
    "\"completion_tokens_details\": {\n      \"reasoning_tokens\": 0,\n      "
    "\"audio_tokens\": 0,\n      \"accepted_prediction_tokens\": 0,\n      "
    "\"rejected_prediction_tokens\": 0\n    }\n  },\n  \"service_tier\": "
    "\"default\",\n  \"system_fingerprint\": \"fp_1\"\n}\n",
    "{\"choices\":[{\"logprobs\":{\"content\":[{\"token\":\"Hi\",\"logprob\":"
    "-0.31326166,\"bytes\":[72,105],\"top_logprobs\":[]}]},\"x\":[1.5e3,"
    "-2E-7,0.0,-0,true,false,null,{},[]]}],\"usage\":{\"prompt_tokens\":"
    "1.9e1,\"completion_tokens\":3.99,\"prompt_tokens_details\":{"
    "\"cached_tokens\":25}}}",
};

/* Messages shapes for the member scanner: an odd answer (model after
 * content, escapes, a duplicate model) and a message_start event. */
static const char *msgs_bodies[] = {
    "{ \"id\" : \"msg_1\",\n\t\"type\":\"message\",\"content\":[{\"type\":"
    "\"thinking\",\"thinking\":\"Caf\\u00e9 \\/\",\"signature\":\"Eq+/==\"},"
    "{\"type\":\"text\",\"text\":\"hi\",\"x\":{\"n\":1.0,\"m\":1e2}}],"
    "\"mod\\u0065l\" :  \"claude-up\" ,\"usage\":{\"output_tokens\":3,"
    "\"input_tokens\":9,\"cache_read_input_tokens\":2}}",
    "{\"type\": \"message_start\", \"message\": {\"id\":\"m\", \"model\":"
    "\"claude-up\",\"content\":[],\"usage\":{\"input_tokens\":5}},"
    "\"model\":{\"not\":\"this\"}}",
};

static void
test_members(void)
{
    static const char *const paths[] = {"model", "message.model", "type",
                                        "usage"};
    struct pv_js_member m[16];
    size_t nm = 0;
    const char *a = msgs_bodies[0];
    T_EQ_INT(pv_json_scan_members(a, strlen(a), paths, 4, m, 16, &nm),
             PV_JS_OBJECT);
    /* type, the escaped model key, usage; nothing inside content */
    T_EQ_INT((long long)nm, 3);
    T_EQ_INT(m[0].path, 2);
    T_EQ_INT(m[1].path, 0);
    T_EQ_INT(m[2].path, 3);
    T_CHECK(!strncmp(a + m[1].at, "\"claude-up\"", m[1].len));
    T_EQ_INT((long long)m[1].len, 11);
    T_CHECK(a[m[2].at] == '{' && a[m[2].at + m[2].len - 1] == '}');
    size_t ol = 0;
    char *o = pv_json_splice(a, strlen(a), &m[1], 1, "pass", &ol);
    /* only the value changed: every other byte is the input's */
    size_t pre = m[1].at, post = strlen(a) - m[1].at - m[1].len;
    T_CHECK(o && ol == pre + 6 + post && !memcmp(o, a, pre) &&
            !memcmp(o + pre, "\"pass\"", 6) &&
            !memcmp(o + pre + 6, a + m[1].at + m[1].len, post));
    free(o);
    /* message_start: message.model, and the top-level model apart */
    const char *e = msgs_bodies[1];
    T_EQ_INT(pv_json_scan_members(e, strlen(e), paths, 4, m, 16, &nm),
             PV_JS_OBJECT);
    T_EQ_INT((long long)nm, 3);
    T_EQ_INT(m[1].path, 1);
    T_CHECK(!strncmp(e + m[1].at, "\"claude-up\"", m[1].len));
    T_EQ_INT(m[2].path, 0);
    T_CHECK(e[m[2].at] == '{');
    /* duplicates: every one, in order (jansson keeps the last) */
    const char *d = "{\"model\":\"a\",\"x\":1,\"model\":\"b\"}";
    T_EQ_INT(pv_json_scan_members(d, strlen(d), paths, 1, m, 16, &nm),
             PV_JS_OBJECT);
    T_EQ_INT((long long)nm, 2);
    T_CHECK(m[0].at < m[1].at && d[m[1].at + 1] == 'b');
    /* more than max occurrences: not decided here */
    T_EQ_INT(pv_json_scan_members(d, strlen(d), paths, 1, m, 1, &nm),
             PV_JS_UNSURE);
    /* a key that only looks like one, escapes that are not ASCII */
    const char *k = "{\"m\\u00f6del\":1,\"model2\":2,\"\\u006d\\u006fdel\":3}";
    T_EQ_INT(pv_json_scan_members(k, strlen(k), paths, 1, m, 16, &nm),
             PV_JS_OBJECT);
    T_EQ_INT((long long)nm, 1);
    T_CHECK(k[m[0].at] == '3');
    /* a number span ends before the NUL jansson skips */
    const char nul[] = "{\"model\":12\0}";
    T_EQ_INT(pv_json_scan_members(nul, sizeof(nul) - 1, paths, 1, m, 16, &nm),
             PV_JS_OBJECT);
    T_EQ_INT((long long)m[0].len, 2);
    /* not objects, broken input */
    T_EQ_INT(pv_json_scan_members("[1]", 3, paths, 1, m, 16, &nm),
             PV_JS_INVALID);
    T_EQ_INT(pv_json_scan_members("{\"model\":}", 10, paths, 1, m, 16, &nm),
             PV_JS_INVALID);
    /* splice refuses overlapping or out-of-order spans */
    struct pv_js_member bad[2] = {{0, 5, 4}, {0, 3, 1}};
    T_CHECK(pv_json_splice(d, strlen(d), bad, 2, "x", &ol) == NULL);
    for (size_t i = 0; i < sizeof(msgs_bodies) / sizeof(*msgs_bodies); i++)
        T_CHECK(members_check(msgs_bodies[i], strlen(msgs_bodies[i])) ==
                NULL);
}

static void
test_known(void)
{
    /* Valid objects and what they give. */
    T_EQ_INT(cmps(real_bodies[0]), PV_JS_OBJECT);
    T_EQ_INT(cmps(real_bodies[1]), PV_JS_OBJECT);
    T_EQ_INT(cmps(real_bodies[2]), PV_JS_OBJECT);
    struct pv_js_chat sc;
    T_EQ_INT(pv_json_scan_chat(real_bodies[1], strlen(real_bodies[1]), &sc),
             PV_JS_OBJECT);
    T_EQ_INT(sc.has_choices, 1);
    T_EQ_INT(sc.usage.have, 1);
    T_EQ_INT(sc.usage.prompt_tokens, 19);
    T_EQ_INT(sc.usage.completion_tokens, 10);
    T_EQ_INT(sc.usage.cached_tokens, 7);
    /* reals are truncated, cached clamped to prompt */
    pv_json_scan_chat(real_bodies[2], strlen(real_bodies[2]), &sc);
    T_EQ_INT(sc.usage.prompt_tokens, 19);
    T_EQ_INT(sc.usage.completion_tokens, 3);
    T_EQ_INT(sc.usage.cached_tokens, 19);

    static const char *objects[] = {
        "{}", " {} ", "\t\r\n{\"a\":1}\n", "{\"choices\":null}",
        "{\"choices\":7,\"usage\":5}", "{\"usage\":{}}",
        "{\"usage\":[1,2]}", "{\"usage\":{\"prompt_tokens\":-5}}",
        "{\"usage\":{\"prompt_tokens\":\"12\",\"completion_tokens\":true}}",
        /* duplicates: the last wins */
        "{\"usage\":{\"prompt_tokens\":5},\"usage\":{\"completion_tokens\":2}}",
        "{\"usage\":{\"prompt_tokens\":5},\"usage\":null}",
        "{\"usage\":null,\"usage\":{\"prompt_tokens\":5}}",
        "{\"usage\":{\"prompt_tokens\":5,\"prompt_tokens\":6}}",
        "{\"usage\":{\"prompt_tokens\":5,\"prompt_tokens\":\"x\"}}",
        "{\"usage\":{\"prompt_tokens\":50,\"prompt_tokens_details\":"
        "{\"cached_tokens\":5},\"prompt_tokens_details\":[]}}",
        "{\"usage\":{\"prompt_tokens\":50,\"prompt_tokens_details\":"
        "{\"cached_tokens\":5,\"cached_tokens\":6}}}",
        "{\"usage\":{\"prompt_tokens\":50,\"cached_tokens\":5,"
        "\"prompt_tokens_details\":{\"x\":{\"cached_tokens\":5}}}}",
        "{\"a\":{\"usage\":{\"prompt_tokens\":5}},\"choices\":[]}",
        "{\"choices\":[{\"usage\":{\"prompt_tokens\":5}}]}",
        /* numbers */
        "{\"usage\":{\"prompt_tokens\":9223372036854775807}}",
        "{\"usage\":{\"prompt_tokens\":-9223372036854775808}}",
        "{\"usage\":{\"prompt_tokens\":9007199254740993}}",
        "{\"usage\":{\"prompt_tokens\":1e300,\"completion_tokens\":1e-400}}",
        "{\"usage\":{\"prompt_tokens\":1.7976931348623157e308}}",
        "{\"usage\":{\"prompt_tokens\":-0.5,\"completion_tokens\":0.999}}",
        "{\"x\":1e308,\"y\":-1E+308,\"z\":0e99999999999999,\"w\":1e-99999}",
        "{\"x\":0.0000000000000000000000000000001e330}",
        "{\"x\":-0,\"y\":0.0,\"z\":0E0}",
        /* strings */
        "{\"x\":{\"\":\"\",\"\\u00e9\":\"\\uD834\\uDD1E\",\"\x7f\":\"\xf4\x8f\xbf\xbf\"}}",
        "{\"a\":\"\\u0001 \\uFFFF \\uDBFF\\uDFFF\"}",
        "{\"x\":[[[[[[[[[[[]]]]]]]]]]],\"choices\":[]}",
    };
    for (size_t i = 0; i < sizeof(objects) / sizeof(objects[0]); i++)
        T_EQ_INT(cmps(objects[i]), PV_JS_OBJECT);

    static const char *invalid[] = {
        "", " ", "[]", "[{\"choices\":[]}]", "\"x\"", "1", "true", "null",
        "{", "}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{,}", "{\"a\":1 \"b\":2}",
        "{a:1}", "{'a':1}", "{\"a\":[1,]}", "{\"a\":[,1]}", "{\"a\":[1 2]}",
        "{} {}", "{}x", "{\"a\":1}]", "{\"a\":tru}",
        "{\"a\":truex}", "{\"a\":True}", "{\"a\":nul}", "{\"a\":NaN}",
        "{\"a\":Infinity}", "{\"a\":+1}", "{\"a\":01}", "{\"a\":-01}",
        "{\"a\":1.}", "{\"a\":.5}", "{\"a\":1e}", "{\"a\":1e+}", "{\"a\":-}",
        "{\"a\":0x10}", "{\"a\":1.5.5}", "{\"a\":--1}",
        "{\"a\":9223372036854775808}", "{\"a\":-9223372036854775809}",
        "{\"a\":99999999999999999999999}", "{\"a\":1e309}", "{\"a\":-1e309}",
        "{\"a\":1.8e308}", "{\"a\":\"x}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
        "{\"a\":\"\\u12g4\"}", "{\"a\":\"\\u0000\"}", "{\"a\":\"\\uD800\"}",
        "{\"a\":\"\\uD800x\"}", "{\"a\":\"\\uD800\\n\"}",
        "{\"a\":\"\\uD800\\u0041\"}", "{\"a\":\"\\uDC00\"}",
        "{\"a\":\"\\uDFFF\\uDC00\"}", "{\"a\":\"tab\there\"}",
        "{\"a\":\"nl\nhere\"}", 
        "{\"a\":\"\x80\"}", "{\"a\":\"\xc0\x80\"}", "{\"a\":\"\xc1\xbf\"}",
        "{\"a\":\"\xe0\x80\x80\"}", "{\"a\":\"\xe0\x9f\xbf\"}",
        "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xed\xbf\xbf\"}",
        "{\"a\":\"\xf0\x80\x80\x80\"}", "{\"a\":\"\xf0\x8f\xbf\xbf\"}",
        "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\xf5\x80\x80\x80\"}",
        "{\"a\":\"\xf8\x88\x80\x80\x80\"}", "{\"a\":\"\xff\"}",
        "{\"a\":\"\xc3\"}", "{\"a\":\"\xe2\x82\"}", "{\"a\":\"\xc3\x28\"}",
        "\xef\xbb\xbf{}", "{\"a\":1}\xc3\xa9", "{\xc3\xa9:1}", "{\"a\":/*c*/1}",
        "{\"a\"::1}", "{\"a\":1:2}", "{\"a\":[}", "{\"a\":{]}", "{\"a\":[}]",
    };
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++)
        T_EQ_INT(cmps(invalid[i]), PV_JS_INVALID);
    /* with embedded NULs (strlen would stop there) */
    T_EQ_INT(CMPL("{}\0"), PV_JS_INVALID);
    T_EQ_INT(CMPL("{\"a\":\"\0\"}"), PV_JS_INVALID);
    T_EQ_INT(CMPL("{\"a\":\"x\"\0}"), PV_JS_INVALID);
    T_EQ_INT(CMPL("{\"a\":1\0\0}"), PV_JS_INVALID);
    T_EQ_INT(CMPL("{\"a\":{}\0}"), PV_JS_INVALID);
    /* jansson's quirk, matched: one NUL right after a number or a
     * literal is skipped */
    T_EQ_INT(CMPL("{\"a\":1\0}"), PV_JS_OBJECT);
    T_EQ_INT(CMPL("{\"a\":[1.5e3\0,true\0,null\0]}"), PV_JS_OBJECT);
    T_EQ_INT(CMPL("{\"a\":false\0 }"), PV_JS_OBJECT);
    T_EQ_INT(CMPL("{\"a\":-0\0\n}"), PV_JS_OBJECT);
    T_EQ_INT(CMPL("{\"a\":1\0 2}"), PV_JS_INVALID);
}

static void
test_usage_saturates(void)
{
    /* 2^63 and more as a count: INT64_MAX on both sides (a plain cast is
     * undefined there). */
    static const char *big[] = {
        "{\"usage\":{\"prompt_tokens\":9223372036854775807,"
        "\"completion_tokens\":9223372036854775807}}",
        "{\"usage\":{\"prompt_tokens\":1e300,\"completion_tokens\":1e19}}",
    };
    for (int i = 0; i < 2; i++) {
        struct pv_js_chat sc;
        T_EQ_INT(cmps(big[i]), PV_JS_OBJECT);
        pv_json_scan_chat(big[i], strlen(big[i]), &sc);
        T_CHECK(sc.usage.prompt_tokens == INT64_MAX);
        T_CHECK(sc.usage.completion_tokens == INT64_MAX);
    }
    T_CHECK(pv_usage_num(9223372036854775807.0) == INT64_MAX);
    T_CHECK(pv_usage_num(9223372036854774784.0) == 9223372036854774784LL);
    T_CHECK(pv_usage_num(-3.5) == 0);
    T_CHECK(pv_usage_num(0.0 / 0.0) == 0);
    T_CHECK(pv_usage_num(41.9) == 41);
}

/* {"choices":[],"x": + depth '[' + depth ']' + } */
static void
deep(int depth, int obj, int expect)
{
    size_t n = (size_t)depth * 6 + 64;
    char *b = malloc(n);
    size_t k = (size_t)sprintf(b, "{\"choices\":[],\"x\":");
    for (int i = 0; i < depth; i++) {
        if (obj)
            k += (size_t)sprintf(b + k, "{\"a\":");
        else
            b[k++] = '[';
    }
    if (obj)
        b[k++] = '1';
    for (int i = 0; i < depth; i++)
        b[k++] = obj ? '}' : ']';
    b[k++] = '}';
    enum pv_js_verdict v = cmp(b, k, depth + 1 > PV_JS_MAX_DEPTH);
    if (expect >= 0)
        T_EQ_INT(v, expect);
    /* cut short: invalid, whatever the depth */
    v = cmp(b, k - 1, depth + 1 > PV_JS_MAX_DEPTH);
    T_CHECK(v != PV_JS_OBJECT);
    free(b);
}

static void
test_depth(void)
{
    deep(1, 0, PV_JS_OBJECT);
    deep(PV_JS_MAX_DEPTH - 2, 0, PV_JS_OBJECT);
    deep(PV_JS_MAX_DEPTH - 1, 0, PV_JS_OBJECT);
    deep(PV_JS_MAX_DEPTH - 1, 1, PV_JS_OBJECT);
    deep(PV_JS_MAX_DEPTH, 0, PV_JS_UNSURE);
    deep(PV_JS_MAX_DEPTH + 1, 1, PV_JS_UNSURE);
    /* around jansson's own limit (2048): unsure here, so jansson decides */
    for (int d = 2040; d <= 2052; d++)
        deep(d, 0, PV_JS_UNSURE);
    deep(5000, 0, PV_JS_UNSURE);
}

static void
test_unsure(void)
{
    /* An escaped key where keys matter: jansson decides. */
    const char *a = "{\"us\\u0061ge\":{\"prompt_tokens\":3},\"choices\":[]}";
    T_EQ_INT(cmp(a, strlen(a), 1), PV_JS_UNSURE);
    const char *b2 = "{\"usage\":{\"prompt\\u005ftokens\":3},\"choices\":[]}";
    T_EQ_INT(cmp(b2, strlen(b2), 1), PV_JS_UNSURE);
    /* elsewhere an escaped key is fine */
    const char *c = "{\"x\":{\"us\\u0061ge\":1},\"choices\":[]}";
    T_EQ_INT(cmps(c), PV_JS_OBJECT);
    /* a long real that might overflow */
    char buf[200];
    snprintf(buf, sizeof(buf), "{\"x\":0.%090de400}", 1);
    T_EQ_INT(cmp(buf, strlen(buf), 1), PV_JS_UNSURE);
    snprintf(buf, sizeof(buf), "{\"x\":0.%090de300}", 1);
    T_EQ_INT(cmps(buf), PV_JS_OBJECT);
}

/* Every byte and every pair of bytes, alone and inside a string. */
static void
test_exhaustive_small(void)
{
    char b[32];
    for (int x = 0; x < 256; x++) {
        b[0] = (char)x;
        cmp(b, 1, 0);
        for (int y = 0; y < 256; y++) {
            b[1] = (char)y;
            cmp(b, 2, 0);
            int k = sprintf(b, "{\"a\":\"");
            b[k++] = (char)x;
            b[k++] = (char)y;
            b[k++] = '"';
            b[k++] = '}';
            cmp(b, (size_t)k, 0);
            k = sprintf(b, "{\"a\":[");
            b[k++] = (char)x;
            b[k++] = (char)y;
            b[k++] = ']';
            b[k++] = '}';
            cmp(b, (size_t)k, 0);
            b[0] = (char)x; /* restore for the pair alone */
        }
    }
    /* 3- and 4-byte UTF-8 around every boundary */
    static const unsigned char firsts[] = {0xe0, 0xe1, 0xec, 0xed, 0xee,
                                           0xef, 0xf0, 0xf1, 0xf3, 0xf4,
                                           0xf5};
    for (size_t f = 0; f < sizeof(firsts); f++)
        for (int y = 0x70; y < 0xd0; y++)
            for (int z = 0x70; z < 0xd0; z += 3) {
                int k = sprintf(b, "{\"a\":\"");
                b[k++] = (char)firsts[f];
                b[k++] = (char)y;
                b[k++] = (char)z;
                b[k++] = (char)0xbf;
                b[k++] = '"';
                b[k++] = '}';
                cmp(b, (size_t)k, 0);
                cmp(b, (size_t)k - 3, 0);
            }
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* Random mutations of real responses: flips, inserts of JSON-ish bytes,
 * deletions, cuts, duplications of a span. */
static void
test_mutations(void)
{
    static const char interesting[] = "{}[],:\"\\-+.eE0123456789tfnu \x00\xc3"
                                      "\xa9\xed\xa0\xf4\x90\x7f\x1f";
    char *b = malloc(8192);
    int objects = 0;
    for (int it = 0; it < 60000; it++) {
        const char *src = it % 4 == 3 ? msgs_bodies[rnd() % 2]
                                      : real_bodies[rnd() % 3];
        size_t n = strlen(src);
        memcpy(b, src, n);
        int nmut = 1 + (int)(rnd() % 3);
        for (int m = 0; m < nmut && n > 0; m++) {
            size_t at = rnd() % n;
            switch (rnd() % 6) {
            case 0:
                b[at] = (char)(rnd() & 0xff);
                break;
            case 1:
                b[at] = interesting[rnd() % (sizeof(interesting) - 1)];
                break;
            case 2:
                if (n < 8000) {
                    memmove(b + at + 1, b + at, n - at);
                    b[at] = interesting[rnd() % (sizeof(interesting) - 1)];
                    n++;
                }
                break;
            case 3:
                memmove(b + at, b + at + 1, n - at - 1);
                n--;
                break;
            case 4:
                n = at;
                break;
            default: {
                size_t len = 1 + rnd() % 16;
                if (at + len <= n && n + len < 8000) {
                    memmove(b + at + len, b + at, n - at);
                    n += len;
                }
                break;
            }
            }
        }
        /* unsure is allowed: a mutation may escape a key */
        if (cmp(b, n, 1) == PV_JS_OBJECT)
            objects++;
    }
    /* both kinds of outcome were exercised */
    T_CHECK(objects > 1000);
    T_CHECK(objects < 59000);
    free(b);
}

/* pv_json_dump_compact must give json_dumps(JSON_COMPACT)'s bytes, or
 * NULL (the caller then uses json_dumps). */
static long n_dumped;
static void
cmp_dump(const json_t *j, int null_ok)
{
    size_t len = 0;
    char *mine = pv_json_dump_compact(j, &len);
    char *ref = json_dumps(j, JSON_COMPACT);
    n_dumped++;
    if (!mine) {
        T_CHECK(null_ok);
    } else {
        int same = ref && strcmp(mine, ref) == 0 && len == strlen(ref);
        if (!same)
            fprintf(stderr, "dump differs:\n mine %.300s\n ref  %.300s\n",
                    mine, ref ? ref : "(null)");
        T_CHECK(same);
    }
    free(mine);
    free(ref);
}

static void
test_dump(void)
{
    for (int i = 0; i < 3; i++) {
        json_t *j = json_loads(real_bodies[i], 0, NULL);
        T_CHECK(j != NULL);
        cmp_dump(j, 0);
        json_decref(j);
    }
    /* every byte below 0x80 and some UTF-8 in strings and keys */
    json_t *o = json_object();
    char s[200];
    for (int c = 0; c < 0x80; c++) {
        s[0] = 'a';
        s[1] = (char)c;
        s[2] = 'z';
        json_object_set_new(o, s[1] ? s : "nul", json_stringn(s, 3));
    }
    json_object_set_new(o, "k\x01\"\\/\xc3\xa9\xf0\x9f\x98\x80",
                        json_string("\xe2\x82\xac \xf4\x8f\xbf\xbf \x7f /"));
    json_object_set_new(o, "empty", json_object());
    json_object_set_new(o, "emptya", json_array());
    json_object_set_new(o, "ea", json_pack("[[],{},[[{}]],\"\"]"));
    static const double reals[] = {0.0, -0.0, 0.1, 0.5, 1.0, -1.5, 1e300,
                                   -1e-300, 1e-7, 5e-324, 1.7976931348623157e308,
                                   123456789012345678.0, 1e16, 1e17, 3.14159,
                                   2.5e-5, 100.0, 0.7, 1.0 / 3.0};
    json_t *ra = json_array();
    for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++)
        json_array_append_new(ra, json_real(reals[i]));
    json_object_set_new(o, "reals", ra);
    json_object_set_new(o, "ints", json_pack("[I,I,I,I,I]", (json_int_t)0,
                                             (json_int_t)-1,
                                             (json_int_t)INT64_MAX,
                                             (json_int_t)INT64_MIN,
                                             (json_int_t)1234567890123LL));
    json_object_set_new(o, "lits", json_pack("[b,b,n]", 1, 0));
    cmp_dump(o, 0);
    cmp_dump(json_object_get(o, "reals"), 0);
    json_decref(o);
    /* invalid UTF-8 (only possible with _nocheck): both refuse */
    o = json_pack("{s:o}", "a", json_stringn_nocheck("\xc3(", 2));
    size_t len;
    char *mine = pv_json_dump_compact(o, &len);
    char *ref = json_dumps(o, JSON_COMPACT);
    T_CHECK(mine == NULL);
    T_CHECK(ref == NULL);
    free(mine);
    free(ref);
    json_decref(o);
    /* not a container: NULL, like json_dumps without ENCODE_ANY */
    json_t *sc = json_integer(3);
    T_CHECK(pv_json_dump_compact(sc, &len) == NULL);
    json_decref(sc);
    /* deep: fine, and past the cap NULL */
    json_t *deepj = json_object();
    json_t *cur = deepj;
    for (int d = 0; d < 5000; d++) {
        json_t *nx = json_array();
        json_object_set_new(cur, "x", json_pack("[o]", nx));
        cur = json_object();
        json_array_append_new(nx, cur);
    }
    cmp_dump(deepj, 1);
    json_decref(deepj);
    /* every valid object the mutations of test_mutations produce */
    rng = 12345;
    char *b = malloc(8192);
    int dumped = 0;
    for (int it = 0; it < 20000; it++) {
        const char *src = it % 4 == 3 ? msgs_bodies[rnd() % 2]
                                      : real_bodies[rnd() % 3];
        size_t n = strlen(src);
        memcpy(b, src, n);
        size_t at = rnd() % n;
        b[at] = (char)(rnd() & 0xff);
        json_t *j = json_loadb(b, n, 0, NULL);
        if (j) {
            cmp_dump(j, 0);
            dumped++;
        }
        json_decref(j);
    }
    T_CHECK(dumped > 1000);
    free(b);
}

int
main(void)
{
    T_RUN(test_known);
    T_RUN(test_members);
    T_RUN(test_usage_saturates);
    T_RUN(test_depth);
    T_RUN(test_unsure);
    T_RUN(test_exhaustive_small);
    T_RUN(test_mutations);
    T_RUN(test_dump);
    fprintf(stderr, "checked %ld inputs: %ld objects, %ld invalid, %ld unsure\n",
            n_checked, n_object, n_invalid, n_unsure);
    return T_END();
}
