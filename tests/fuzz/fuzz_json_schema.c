/*
 * libFuzzer target for the JSON Schema compiler (providers/json_schema.c)
 * with the grammar engine behind it: arbitrary bytes as a schema.
 *
 * Checks, beyond ASan/UBSan: a schema the compiler accepts always gives
 * grammar text that le_grammar_parse accepts (or refuses only for size),
 * and the grammar's start state can be built; a refused schema always
 * comes with a sentence.  The same for the schema compiled as GLM's XML
 * tool arguments (pv_gram_xml_args).
 */
#include "../../local_engine/local_engine.h"
#include "../../providers/providers_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *s = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!s)
        return 0;
    struct pv_gram pg;
    pv_gram_init(&pg);
    char name[24], err[256] = "";
    if (pv_gram_schema(&pg, s, name, err, sizeof(err)) != 0) {
        if (!err[0])
            abort();
    } else {
        gx_buf_printf(&pg.text, "root ::= %s\n", name);
        struct le_grammar *g = NULL;
        char gerr[256] = "";
        if (le_grammar_parse(pg.text.data, pg.text.len, NULL, &g, gerr,
                             sizeof(gerr)) != LE_OK) {
            if (!strstr(gerr, "too large"))
                abort(); /* the compiler wrote a bad grammar */
        } else {
            struct le_gstate *gs = NULL;
            if (le_gstate_new(g, &gs) == LE_OK) {
                le_gstate_accepts(gs, "{\"a\": [1, \"x\"]}", 15);
                le_gstate_free(gs);
            }
            le_grammar_free(g);
        }
    }
    pv_gram_cleanup(&pg);
    /* the same schema as GLM's XML arguments */
    pv_gram_init(&pg);
    err[0] = 0;
    if (pv_gram_xml_args(&pg, s, name, err, sizeof(err)) != 0) {
        if (!err[0])
            abort();
    } else {
        gx_buf_printf(&pg.text, "root ::= %s \"</tool_call>\"\n", name);
        struct le_grammar *g = NULL;
        char gerr[256] = "";
        if (le_grammar_parse(pg.text.data, pg.text.len, NULL, &g, gerr,
                             sizeof(gerr)) != LE_OK) {
            if (!strstr(gerr, "too large"))
                abort();
        } else {
            struct le_gstate *gs = NULL;
            if (le_gstate_new(g, &gs) == LE_OK) {
                le_gstate_accepts(gs, "<arg_key>a</arg_key><arg_value>x<",
                                  33);
                le_gstate_free(gs);
            }
            le_grammar_free(g);
        }
    }
    pv_gram_cleanup(&pg);
    json_decref(s);
    return 0;
}
