/*
 * test_tool_args: providers/tool_args.c, a tool call's arguments read as
 * they are written.  GLM's XML pairs give the exact JSON expected (texts
 * JSON-quoted with their escapes, JSON values as they are, parameters the
 * keys do not list as text), a cut output gives what is known so far,
 * and every prefix of an output gives a prefix of the whole's answer (a
 * stream's deltas add up to the non-stream arguments); pv_json_end finds
 * where values end; pv_utf8_partial finds a cut character.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../providers/providers_int.h"
#include "harness.h"

static json_t *keys; /* s and t text, n and o JSON */
static const struct pv_xml_fmt *fmt = &pv_xml_glm;

/* The JSON pv_xml_args_json gives for x in fmt (static buffer); *closed
 * set */
static const char *
glm(const char *x, size_t n, int final, int *closed, size_t *end)
{
    static char out[4096];
    struct gx_buf b;
    gx_buf_init(&b, 0);
    size_t e = 0;
    int c = pv_xml_args_json(fmt, keys, x, n, final, &b, &e);
    snprintf(out, sizeof(out), "%.*s", (int)b.len, b.data ? b.data : "");
    gx_buf_cleanup(&b);
    if (closed)
        *closed = c;
    if (end)
        *end = e;
    return out;
}

static void
test_glm_whole(void)
{
    int closed;
    size_t end;
    static const char x[] =
        "<arg_key>s</arg_key><arg_value>a \"q\" \\ b\n\t\x01 \xc3\xa9<b> </a"
        "</arg_value><arg_key>n</arg_key><arg_value>-12.5e3</arg_value>"
        "<arg_key>o</arg_key><arg_value>{\"k\": [1, \"</arg_value>\"]}"
        "</arg_value><arg_key>z</arg_key><arg_value>7</arg_value>"
        "</tool_call><tool_call>next";
    const char *j = glm(x, strlen(x), 1, &closed, &end);
    T_EQ_STR(j, "{\"s\": \"a \\\"q\\\" \\\\ b\\n\\t\\u0001 \xc3\xa9<b> </a\", "
                "\"n\": -12.5e3, \"o\": {\"k\": [1, \"</arg_value>\"]}, "
                "\"z\": \"7\"}");
    T_EQ_INT(closed, 1);
    T_EQ_INT(end, strstr(x, "</tool_call>") - x);
    json_t *v = json_loads(j, 0, NULL);
    T_CHECK(json_is_object(v));
    T_EQ_STR(json_string_value(json_object_get(v, "s")),
             "a \"q\" \\ b\n\t\x01 \xc3\xa9<b> </a");
    json_decref(v);
    /* no arguments */
    T_EQ_STR(glm("</tool_call>", 12, 0, &closed, &end), "{}");
    T_EQ_INT(closed, 1);
    T_EQ_INT(end, 0);
    /* not arguments at all: nothing past the opening brace */
    T_EQ_STR(glm("<arg_kex>", 9, 1, &closed, NULL), "{");
    T_EQ_INT(closed, 0);
    T_EQ_STR(glm("", 0, 1, &closed, NULL), "{");
}

static void
test_glm_cut(void)
{
    int closed;
    /* a text cut inside its closing tag: held back unless final */
    static const char t[] = "<arg_key>t</arg_key><arg_value>ab</arg_va";
    T_EQ_STR(glm(t, strlen(t), 0, &closed, NULL), "{\"t\": \"ab");
    T_EQ_INT(closed, 0);
    T_EQ_STR(glm(t, strlen(t), 1, &closed, NULL), "{\"t\": \"ab</arg_va");
    /* "<" that turns out not to be the tag is text after all */
    static const char u[] = "<arg_key>t</arg_key><arg_value>a<b";
    T_EQ_STR(glm(u, strlen(u), 0, NULL, NULL), "{\"t\": \"a<b");
    static const char u2[] = "<arg_key>t</arg_key><arg_value>a<";
    T_EQ_STR(glm(u2, strlen(u2), 0, NULL, NULL), "{\"t\": \"a");
    /* a number cut: what there is of it */
    static const char n[] = "<arg_key>n</arg_key><arg_value>12";
    T_EQ_STR(glm(n, strlen(n), 0, NULL, NULL), "{\"n\": 12");
    T_EQ_STR(glm(n, strlen(n), 1, NULL, NULL), "{\"n\": 12");
    /* a key cut: not yet written */
    static const char k[] = "<arg_key>lon";
    T_EQ_STR(glm(k, strlen(k), 1, NULL, NULL), "{");
    static const char k2[] = "<arg_key>t</arg_key><arg_val";
    T_EQ_STR(glm(k2, strlen(k2), 0, NULL, NULL), "{");
    static const char k3[] = "<arg_key>t</arg_key><arg_value>";
    T_EQ_STR(glm(k3, strlen(k3), 0, NULL, NULL), "{\"t\": \"");
}

/* Every prefix of x, not final, gives a prefix of the whole's final
 * answer, and longer prefixes longer or equal ones. */
static void
check_prefixes(const char *x)
{
    size_t n = strlen(x);
    char whole[4096], prev[4096] = "";
    snprintf(whole, sizeof(whole), "%s", glm(x, n, 1, NULL, NULL));
    int ok = 1;
    /* read as it arrives (pv_xml_args_read going on): the same texts */
    struct pv_xml_read st = {0};
    struct gx_buf inc;
    gx_buf_init(&inc, 0);
    for (size_t k = 0; k <= n && ok; k++) {
        const char *p = glm(x, k, 0, NULL, NULL);
        pv_xml_args_read(fmt, keys, x, k, 0, &inc, &st);
        ok = !strncmp(whole, p, strlen(p)) &&
             !strncmp(p, prev, strlen(prev)) && inc.len == strlen(p) &&
             !memcmp(inc.data ? inc.data : "", p, inc.len);
        if (!ok)
            fprintf(stderr, "prefix %zu of '%s': '%s' (whole '%s', before "
                            "'%s', read on '%.*s')\n",
                    k, x, p, whole, prev, (int)inc.len,
                    inc.data ? inc.data : "");
        snprintf(prev, sizeof(prev), "%s", p);
    }
    /* the end of the output: what was held back, as the whole's */
    pv_xml_args_read(fmt, keys, x, n, 1, &inc, &st);
    ok = ok && inc.len == strlen(whole) && !memcmp(inc.data, whole, inc.len);
    T_CHECK(ok);
    gx_buf_cleanup(&inc);
}

static void
test_glm_prefixes(void)
{
    check_prefixes("<arg_key>s</arg_key><arg_value>x</arg_valu y <</ <"
                   "/arg_value</arg_value><arg_key>n</arg_key><arg_value>"
                   "[1, {\"a\": \"b\\\"]\"}]</arg_value></tool_call>");
    check_prefixes("<arg_key>o</arg_key><arg_value>true</arg_value>"
                   "<arg_key>q</arg_key><arg_value></arg_value></tool_call>");
    check_prefixes("<arg_key>t</arg_key><arg_value>\xe2\x82\xac</a");
}

/* Qwen3-Coder's pairs: <parameter=K>\nV\n</parameter>\n, </function>
 * after them; a text's own newlines kept, its last one before the close
 * not part of it */
static void
test_qwen3_coder(void)
{
    int closed;
    size_t end;
    fmt = &pv_xml_qwen3_coder;
    static const char x[] =
        "<parameter=s>\nline 1\n\nline \"2\"\n\n</parameter>\n"
        "<parameter=n>\n[1, 2]\n</parameter>\n<parameter=o>\n-3\n"
        "</parameter>\n</function>\n</tool_call>";
    T_EQ_STR(glm(x, strlen(x), 1, &closed, &end),
             "{\"s\": \"line 1\\n\\nline \\\"2\\\"\\n\", \"n\": [1, 2], "
             "\"o\": -3}");
    T_EQ_INT(closed, 1);
    T_EQ_INT(end, strstr(x, "</function>") - x);
    T_EQ_STR(glm("</function>", 11, 0, &closed, NULL), "{}");
    T_EQ_INT(closed, 1);
    /* a text cut at a newline: held back (it may start the close) */
    static const char c[] = "<parameter=s>\nab\n";
    T_EQ_STR(glm(c, strlen(c), 0, NULL, NULL), "{\"s\": \"ab");
    T_EQ_STR(glm(c, strlen(c), 1, NULL, NULL), "{\"s\": \"ab\\n");
    check_prefixes(x);
    check_prefixes("<parameter=t>\n\n</param\n</parameter>\n</functio");
    fmt = &pv_xml_glm;
}

static void
test_json_end(void)
{
    static const struct {
        const char *s;
        int final, closed;
        size_t end;
    } cases[] = {
        {"{\"a\": \"}\"} tail", 0, 1, 10},
        {"[1, [2]]x", 0, 1, 8},
        {"\"a\\\"b\"", 0, 1, 6},
        {"123<", 0, 1, 3},
        {"123", 0, 0, 0},
        {"123", 1, 1, 3},
        {"  true ", 0, 1, 6},
        {"{\"a\": ", 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pv_jend js = {0};
        int c = pv_json_end(&js, cases[i].s, strlen(cases[i].s),
                            cases[i].final);
        T_EQ_INT(c, cases[i].closed);
        if (c)
            T_EQ_INT(js.end, cases[i].end);
    }
    /* fed in two pieces: the same end */
    struct pv_jend js = {0};
    const char *s = "{\"k\": [1, 2]} after";
    T_EQ_INT(pv_json_end(&js, s, 7, 0), 0);
    T_EQ_INT(pv_json_end(&js, s, strlen(s), 0), 1);
    T_EQ_INT(js.end, 13);
}

static void
test_utf8_partial(void)
{
    T_EQ_INT(pv_utf8_partial("ab", 2), 0);
    T_EQ_INT(pv_utf8_partial("a\xe2\x82", 3), 2);
    T_EQ_INT(pv_utf8_partial("a\xe2\x82\xac", 4), 0);
    T_EQ_INT(pv_utf8_partial("\xf0\x9f", 2), 2);
    T_EQ_INT(pv_utf8_partial("\xc3", 1), 1);
    T_EQ_INT(pv_utf8_partial("", 0), 0);
}

/* Mistral's 9-character call ids: a Small 3.2 answer's own (returned as
 * "call_" + it) back as it was, any other id the same 9 for the same id */
static void
test_mistral_id(void)
{
    char a[10], b[10];
    pv_mistral_id("call_AbCdEfGh9", a);
    T_EQ_STR(a, "AbCdEfGh9");
    pv_mistral_id("call_1", a);
    pv_mistral_id("call_1", b);
    T_EQ_STR(a, b);
    T_EQ_INT((int)strlen(a), 9);
    T_EQ_INT((int)strspn(a, "0123456789abcdefghijklmnopqrstuvwxyz"
                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
             9);
    /* not of that form: hashed (a bare 9, a longer tail, another char) */
    static const char *const other[] = {"AbCdEfGh9", "call_AbCdEfGh9x",
                                        "call_AbCd-fGh9", NULL};
    for (int i = 0; other[i]; i++) {
        pv_mistral_id(other[i], a);
        T_CHECK(strlen(a) == 9 && strcmp(a, "AbCdEfGh9") != 0);
    }
    pv_mistral_id(NULL, a);
    T_EQ_INT((int)strlen(a), 9);
}

int
main(void)
{
    keys = json_pack("{s:b,s:b,s:b,s:b}", "s", 1, "t", 1, "n", 0, "o", 0);
    T_RUN(test_glm_whole);
    T_RUN(test_glm_cut);
    T_RUN(test_glm_prefixes);
    T_RUN(test_qwen3_coder);
    T_RUN(test_json_end);
    T_RUN(test_utf8_partial);
    T_RUN(test_mistral_id);
    json_decref(keys);
    return T_END();
}
