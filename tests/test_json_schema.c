/*
 * test_json_schema: the JSON Schema subset compiler (providers/
 * json_schema.c) with the grammar engine: documents accepted and rejected,
 * unsupported keywords refused by name, and constrained generation on
 * stories260K and random-weight models over many seeds whose every output
 * that the grammar ended parses with jansson and validates against the
 * schema (an independent validator below, not the grammar).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../local_engine/le_int.h"
#include "../providers/providers_int.h"
#include "harness.h"
#include "lib/le_fixture.h"
#include "lib/json_check.h"

static struct le_grammar *
compile_schema(const char *schema_text, char *err, size_t errlen)
{
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, NULL);
    if (!s) {
        snprintf(err, errlen, "test schema is not JSON");
        return NULL;
    }
    struct pv_gram pg;
    pv_gram_init(&pg);
    char name[24];
    struct le_grammar *g = NULL;
    if (pv_gram_schema(&pg, s, name, err, errlen) == 0) {
        gx_buf_printf(&pg.text, "root ::= %s\n", name);
        if (le_grammar_parse(pg.text.data, pg.text.len, NULL, &g, err,
                             errlen) != LE_OK)
            fprintf(stderr, "grammar text:\n%s\n", pg.text.data);
    }
    pv_gram_cleanup(&pg);
    json_decref(s);
    return g;
}

static int
accepts(const struct le_grammar *g, const char *doc)
{
    struct le_gstate *gs = NULL;
    if (le_gstate_new(g, &gs) != LE_OK)
        return -1;
    int ok = le_gstate_accept(gs, doc, strlen(doc)) && le_gstate_complete(gs);
    le_gstate_free(gs);
    return ok;
}

/* ---- documents ---------------------------------------------------------- */

static const char *person =
    "{\"type\":\"object\",\"additionalProperties\":false,"
    "\"required\":[\"name\",\"age\",\"role\"],\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",null,3]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
    "\"maxLength\":3},\"minItems\":1,\"maxItems\":2},"
    "\"ok\":{\"type\":[\"boolean\",\"null\"]},"
    "\"score\":{\"type\":\"number\"}}}";

static void
test_documents(void)
{
    char err[256] = "";
    struct le_grammar *g = compile_schema(person, err, sizeof(err));
    T_CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    T_EQ_INT(accepts(g, "{\"name\":\"Ann\",\"age\":41,\"role\":\"admin\","
                        "\"tags\":[\"a\"],\"ok\":true,\"score\":-1.5e3}"),
             1);
    T_EQ_INT(accepts(g, "{ \"name\" : \"caf\xc3\xa9\", \"age\": 0, \"role\": "
                        "null,\n  \"tags\": [\"ab\", \"\\n\"], \"ok\": null, "
                        "\"score\": 2 }"),
             1);
    /* order is the listed one; every listed property present */
    T_EQ_INT(accepts(g, "{\"age\":41,\"name\":\"Ann\",\"role\":3,"
                        "\"tags\":[\"a\"],\"ok\":true,\"score\":1}"),
             0);
    T_EQ_INT(accepts(g, "{\"name\":\"Ann\",\"age\":41,\"role\":\"root\","
                        "\"tags\":[\"a\"],\"ok\":true,\"score\":1}"),
             0); /* not in the enum */
    T_EQ_INT(accepts(g, "{\"name\":\"toolongname\",\"age\":41,\"role\":3,"
                        "\"tags\":[\"a\"],\"ok\":true,\"score\":1}"),
             0); /* maxLength 8 */
    T_EQ_INT(accepts(g, "{\"name\":\"\",\"age\":41,\"role\":3,"
                        "\"tags\":[\"a\"],\"ok\":true,\"score\":1}"),
             0); /* minLength 1 */
    T_EQ_INT(accepts(g, "{\"name\":\"A\",\"age\":4.5,\"role\":3,"
                        "\"tags\":[\"a\"],\"ok\":true,\"score\":1}"),
             0); /* integer */
    T_EQ_INT(accepts(g, "{\"name\":\"A\",\"age\":4,\"role\":3,"
                        "\"tags\":[],\"ok\":true,\"score\":1}"),
             0); /* minItems 1 */
    T_EQ_INT(accepts(g, "{\"name\":\"A\",\"age\":4,\"role\":3,"
                        "\"tags\":[\"a\",\"b\",\"c\"],\"ok\":true,"
                        "\"score\":1}"),
             0); /* maxItems 2 */
    T_EQ_INT(accepts(g, "{\"name\":\"A\\u0041\",\"age\":4,\"role\":3,"
                        "\"tags\":[\"a\"],\"ok\":true,\"score\":1}"),
             0); /* no \u escapes */
    le_grammar_free(g);

    /* $defs + recursion, anyOf, const */
    g = compile_schema(
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
        "\"v\":{\"const\":\"x\"},\"kids\":{\"type\":\"array\",\"maxItems\":2,"
        "\"items\":{\"$ref\":\"#/$defs/node\"}}}}},"
        "\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}",
        err, sizeof(err));
    T_CHECK(g != NULL);
    if (g) {
        T_EQ_INT(accepts(g, "null"), 1);
        T_EQ_INT(accepts(g, "{\"v\":\"x\",\"kids\":[{\"v\":\"x\",\"kids\":[]}"
                            ",{\"v\":\"x\",\"kids\":[]}]}"),
                 1);
        T_EQ_INT(accepts(g, "{\"v\":\"y\",\"kids\":[]}"), 0);
        le_grammar_free(g);
    } else {
        fprintf(stderr, "%s\n", err);
    }
    /* no constraints: any JSON value; an empty strict object */
    g = compile_schema("{}", err, sizeof(err));
    T_CHECK(g && accepts(g, "[1, {\"a\": [true, null, \"s\"]}, -0.5]") == 1);
    le_grammar_free(g);
    g = compile_schema("{\"type\":\"object\",\"additionalProperties\":false}",
                       err, sizeof(err));
    T_CHECK(g && accepts(g, "{}") == 1 && accepts(g, "{\"a\":1}") == 0);
    le_grammar_free(g);
}

static void
test_refusals(void)
{
    struct {
        const char *schema, *word;
    } bad[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern'"},
        {"{\"type\":\"string\",\"format\":\"email\"}", "'format'"},
        {"{\"type\":\"integer\",\"minimum\":1}", "'minimum'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\","
         "\"multipleOf\":2}}}",
         "'multipleOf' is not supported by the local engine at "
         "properties.a"},
        {"{\"oneOf\":[{\"type\":\"string\"}]}", "'oneOf'"},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":"
         "\"string\"}}",
         "additionalProperties"},
        {"{\"type\":\"array\",\"maxItems\":100000}", "'maxItems' above"},
        {"{\"type\":\"potato\"}", "unknown type 'potato'"},
        {"{\"$ref\":\"http://x/y\"}", "not supported"},
        {"{\"$ref\":\"#/$defs/none\"}", "names no definition"},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}",
         "below"},
        {"false", "matches nothing"},
        {"{\"$defs\":{\"a\":{}},\"$ref\":\"#/$defs/a\",\"type\":"
         "\"string\"}",
         "beside other constraints"},
    };
    /* an enum past 1000 values */
    struct gx_buf big;
    gx_buf_init(&big, 0);
    gx_buf_printf(&big, "{\"enum\":[0");
    for (int i = 1; i <= 1000; i++)
        gx_buf_printf(&big, ",%d", i);
    gx_buf_printf(&big, "]}");
    char berr[256] = "";
    T_CHECK(compile_schema(big.data, berr, sizeof(berr)) == NULL);
    T_CHECK(strstr(berr, "more than 1000") != NULL);
    gx_buf_cleanup(&big);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[256] = "";
        struct le_grammar *g = compile_schema(bad[i].schema, err, sizeof(err));
        T_CHECK(g == NULL);
        if (!strstr(err, bad[i].word)) {
            fprintf(stderr, "refusal %zu: \"%s\" lacks \"%s\"\n", i, err,
                    bad[i].word);
            T_CHECK(0);
        }
        le_grammar_free(g);
    }
}

/* ---- generation ------------------------------------------------------- */

static const char *gen_schemas[] = {
    "{\"type\":\"object\",\"additionalProperties\":false,"
    "\"required\":[\"city\",\"unit\"],\"properties\":{"
    "\"city\":{\"type\":\"string\",\"maxLength\":10},"
    "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"days\":{\"type\":\"integer\"}}}",
    "{\"type\":\"array\",\"minItems\":1,\"maxItems\":3,\"items\":{"
    "\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},"
    "\"ok\":{\"type\":\"boolean\"},\"s\":{\"type\":\"string\","
    "\"maxLength\":4}},\"required\":[\"k\",\"ok\",\"s\"],"
    "\"additionalProperties\":false}}",
    "{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"object\",\"properties\":{"
    "\"n\":{\"type\":\"number\"},\"t\":{\"type\":[\"string\",\"null\"],"
    "\"maxLength\":6}},\"required\":[\"n\"]}]}",
};

static void
generate(struct le_model *m, int seeds, float temp, int *done, int *total)
{
    struct le_token_trie *t = NULL;
    T_EQ_INT(le_token_trie_new(m, &t), LE_OK);
    struct le_session *s = NULL;
    char err[256];
    T_EQ_INT(le_session_new(m, &s, err, sizeof(err)), LE_OK);
    int32_t prompt[32];
    int64_t np = le_model_tokenize(m, "The weather", 11, 1, 0, prompt, 32);
    for (size_t k = 0; k < sizeof(gen_schemas) / sizeof(gen_schemas[0]);
         k++) {
        struct le_grammar *g = compile_schema(gen_schemas[k], err,
                                              sizeof(err));
        json_t *schema = json_loads(gen_schemas[k], 0, NULL);
        T_CHECK(g && schema);
        for (int seed = 0; seed < seeds && g && s && t; seed++) {
            struct le_sampling sp;
            le_sampling_default(&sp);
            sp.seed = (uint64_t)(seed * 7919 + (int)k);
            sp.temperature = temp;
            sp.max_tokens = 240;
            sp.grammar = g;
            sp.trie = t;
            char out[8192];
            struct le_gen_result r;
            T_EQ_INT(le_fixture_generate(s, prompt, (size_t)np, &sp, out,
                                         sizeof(out), &r),
                     LE_OK);
            (*total)++;
            if (r.finish != LE_FINISH_STOP)
                continue; /* max_tokens: unfinished, nothing to check */
            (*done)++;
            json_error_t je;
            json_t *v = json_loads(out, JSON_DECODE_ANY, &je);
            if (!v || !json_check_schema(v, schema)) {
                fprintf(stderr, "schema %zu seed %d: invalid output: %s\n",
                        k, seed, out);
                T_CHECK(0);
            }
            json_decref(v);
        }
        json_decref(schema);
        le_grammar_free(g);
    }
    le_session_free(s);
    le_token_trie_free(t);
}

static void
test_generate_stories(void)
{
    struct le_model *m = le_fixture_stories();
    T_CHECK(m != NULL);
    if (!m)
        return;
    int done = 0, total = 0;
    generate(m, 25, 1.0f, &done, &total);
    generate(m, 1, 0.0f, &done, &total);
    fprintf(stderr, "  stories260K: %d of %d ended by the grammar\n", done,
            total);
    T_CHECK(done * 2 >= total);
    le_model_free(m);
}

static void
test_generate_random_models(void)
{
    int done = 0, total = 0;
    for (int k = 0; k < 2; k++) {
        struct le_model *m = le_fixture_random(
            400 + 200 * k, k ? LE_TYPE_Q4_0 : LE_TYPE_F32, 77 + (uint64_t)k,
            512);
        T_CHECK(m != NULL);
        if (!m)
            continue;
        generate(m, 20, 1.2f, &done, &total);
        le_model_free(m);
    }
    fprintf(stderr, "  random models: %d of %d ended by the grammar\n", done,
            total);
    T_CHECK(done * 2 >= total);
}

int
main(void)
{
    T_RUN(test_documents);
    T_RUN(test_refusals);
    T_RUN(test_generate_stories);
    T_RUN(test_generate_random_models);
    return T_END();
}
