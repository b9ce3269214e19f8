/*
 * json_schema.c: a JSON Schema subset compiled to the local engine's
 * grammar text (the dialect drawn in local_engine/grammar.c), for
 * response_format json_schema / json_object and for tool arguments.
 *
 * Why here and not in local_engine: the schema arrives inside the request
 * JSON, which jansson has already parsed; local_engine depends on libc
 * only, so it gets the compiled grammar text and never reads JSON.
 *
 * The subset (anything else is refused, naming the keyword, so that a 200
 * never hides an ignored constraint):
 *   type (a name or a list of names), enum (<= 1000 values), const, anyOf,
 *   $ref to "#",
 *   "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed);
 *   object: properties, required, additionalProperties false or true;
 *   array: items, minItems, maxItems (<= 256);
 *   string: minLength, maxLength (<= 4096 characters);
 *   number, integer, boolean, null;
 *   annotations: title, description, default, examples, $schema, $id,
 *   $comment, $defs, definitions (read for $ref only).
 * The output rule for objects: every property listed in `properties`
 * appears, in the listed order (optional ones too: that is valid JSON for
 * the schema), then any `required` name missing from `properties` with
 * any JSON value; nothing else.  Numbers have at most 16 integer digits,
 * 16 fraction digits and a 2-digit exponent, so that a model cannot run
 * on forever inside one number (and the exponent has at most 2 digits,
 * so every number is a finite double).  Whitespace between tokens: none,
 * one space, or one newline and up to 20 spaces or tabs of indentation.  Strings are valid UTF-8 with the escapes
 * \" \\ \/ \b \f \n \r \t (no \u escapes: they could spell a lone
 * surrogate or NUL, which JSON parsers refuse).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers_int.h"

#define GS_MAX_DEPTH 48
#define GS_MAX_ITEMS 256
#define GS_MAX_LENGTH 4096
#define GS_MAX_ENUM 1000

/* The rules every compiled schema may use. */
static const char gs_common[] =
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n"
    "j-value ::= j-object | j-array | j-string | j-number | \"true\" | "
    "\"false\" | \"null\"\n"
    "j-object ::= \"{\" ws ( j-string ws \":\" ws j-value ws ( \",\" ws "
    "j-string ws \":\" ws j-value ws )* )? \"}\"\n"
    "j-array ::= \"[\" ws ( j-value ws ( \",\" ws j-value ws )* )? \"]\"\n"
    "j-string ::= \"\\\"\" j-char* \"\\\"\"\n"
    "j-char ::= [\\x20-\\x21\\x23-\\x5b\\x5d-\\x7e] | \"\\\\\" "
    "[\"\\\\/bfnrt] | j-u8\n"
    "j-u8 ::= [\\xc2-\\xdf] j-c | \"\\xe0\" [\\xa0-\\xbf] j-c | "
    "[\\xe1-\\xec\\xee-\\xef] j-c j-c | \"\\xed\" [\\x80-\\x9f] j-c | "
    "\"\\xf0\" [\\x90-\\xbf] j-c j-c | [\\xf1-\\xf3] j-c j-c j-c | "
    "\"\\xf4\" [\\x80-\\x8f] j-c j-c\n"
    "j-c ::= [\\x80-\\xbf]\n"
    "j-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "j-number ::= j-int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
    "j-bool ::= \"true\" | \"false\"\n";

static const char *const gs_known[] = {
    "type",     "enum",        "const",    "anyOf",      "$ref",
    "properties", "required",  "additionalProperties",   "items",
    "minItems", "maxItems",    "minLength", "maxLength", "title",
    "description", "default",  "examples", "$schema",    "$id",
    "$comment", "$defs",       "definitions", NULL};

/* A compiled rule per $ref target, so recursion terminates. */
struct gs_ref {
    const json_t *schema;
    char name[24];
};

struct gs {
    struct gx_buf out; /* grammar text */
    const json_t *doc; /* the schema document ($ref "#") */
    struct gs_ref refs[64];
    size_t n_refs;
    int n_rules;
    char *err;
    size_t errlen;
    int failed;
    char path[256]; /* where we are, for messages */
};

static void
gs_fail(struct gs *g, const char *fmt, const char *a)
{
    if (g->failed)
        return;
    g->failed = 1;
    char what[256];
    snprintf(what, sizeof(what), fmt, a);
    gx_errf(g->err, g->errlen, "%s%s%s", what, g->path[0] ? " at " : "",
            g->path[0] ? g->path : "");
}

/* Appends a grammar literal for bytes s[0..n). */
static void
gs_lit(struct gx_buf *b, const char *s, size_t n)
{
    gx_buf_append(b, " \"", 2);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || strchr(" _-.,:{}[]", c)) {
            gx_buf_append(b, (const char *)&c, 1);
        } else {
            char e[8];
            snprintf(e, sizeof(e), "\\x%02x", c);
            gx_buf_append(b, e, 4);
        }
    }
    gx_buf_append(b, "\" ", 2);
}

/* A literal of v as compact JSON (enum, const). */
static void
gs_json_lit(struct gs *g, const json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) {
        gs_fail(g, "%s", "out of memory");
        return;
    }
    gs_lit(&g->out, t, strlen(t));
    free(t);
}

static void gs_schema(struct gs *g, const json_t *s, char *name, int depth);

/* Starts `NAME ::=`; the caller writes the body and a newline. */
static void
gs_rule(struct gs *g, char *name)
{
    snprintf(name, 24, "s%d", ++g->n_rules);
    gx_buf_printf(&g->out, "%s ::=", name);
}

static size_t
gs_path_push(struct gs *g, const char *seg)
{
    size_t l = strlen(g->path);
    snprintf(g->path + l, sizeof(g->path) - l, "%s%s", l ? "." : "", seg);
    return l;
}

static json_int_t
gs_count(struct gs *g, const json_t *s, const char *key, json_int_t dflt,
         json_int_t cap)
{
    const json_t *v = json_object_get(s, key);
    if (!v)
        return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        gs_fail(g, "'%s' must be a non-negative integer", key);
        return dflt;
    }
    if (json_integer_value(v) > cap) {
        char m[128];
        snprintf(m, sizeof(m), "'%s' above %lld is not supported by the "
                               "local engine", key, (long long)cap);
        gs_fail(g, "%s", m);
        return dflt;
    }
    return json_integer_value(v);
}

/* x{lo,hi} text (hi < 0: unbounded) */
static void
gs_repeat(struct gx_buf *b, json_int_t lo, json_int_t hi)
{
    if (hi < 0)
        gx_buf_printf(b, "{%lld,}", (long long)lo);
    else
        gx_buf_printf(b, "{%lld,%lld}", (long long)lo, (long long)hi);
}

static void
gs_object(struct gs *g, const json_t *s, char *name, int depth)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) {
        gs_fail(g, "%s", "'properties' must be an object");
        return;
    }
    if (req && !json_is_array(req)) {
        gs_fail(g, "%s", "'required' must be an array of names");
        return;
    }
    if (addl && !json_is_boolean(addl)) {
        gs_fail(g, "%s",
                "'additionalProperties' as a schema is not "
                "supported by the local engine (only true or false)");
        return;
    }
    size_t np = props ? json_object_size(props) : 0;
    size_t nr = 0;
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const json_t *k = json_array_get(req, i);
        if (!json_is_string(k)) {
            gs_fail(g, "%s", "'required' must be an array of names");
            return;
        }
        if (!props || !json_object_get(props, json_string_value(k)))
            nr++;
    }
    if (np == 0 && nr == 0) {
        if (json_is_false(addl)) {
            gs_rule(g, name);
            gx_buf_printf(&g->out, " \"{\" ws \"}\"\n");
        } else {
            snprintf(name, 24, "j-object");
        }
        return;
    }
    /* each property's value rule first (they emit rules of their own) */
    size_t n = np + nr;
    char(*vals)[24] = calloc(n, sizeof(*vals));
    const char **keys = calloc(n, sizeof(*keys));
    if (!vals || !keys) {
        free(vals);
        free(keys);
        gs_fail(g, "%s", "out of memory");
        return;
    }
    size_t k = 0;
    const char *key;
    const json_t *ps;
    json_object_foreach((json_t *)props, key, ps) {
        size_t mark = gs_path_push(g, "properties");
        gs_path_push(g, key);
        gs_schema(g, ps, vals[k], depth + 1);
        g->path[mark] = 0;
        keys[k++] = key;
    }
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *rk = json_string_value(json_array_get(req, i));
        if (!props || !json_object_get(props, rk)) {
            snprintf(vals[k], 24, "j-value");
            keys[k++] = rk;
        }
    }
    if (!g->failed) {
        gs_rule(g, name);
        gx_buf_printf(&g->out, " \"{\" ws");
        for (size_t i = 0; i < n; i++) {
            json_t *ks = json_string(keys[i]);
            char *kt = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
            json_decref(ks);
            if (!kt) {
                gs_fail(g, "%s", "out of memory");
                break;
            }
            if (i)
                gx_buf_printf(&g->out, " \",\" ws");
            gs_lit(&g->out, kt, strlen(kt));
            free(kt);
            gx_buf_printf(&g->out, "ws \":\" ws %s ws", vals[i]);
        }
        gx_buf_printf(&g->out, " \"}\"\n");
    }
    free(vals);
    free(keys);
}

static void
gs_array(struct gs *g, const json_t *s, char *name, int depth)
{
    const json_t *items = json_object_get(s, "items");
    char item[24] = "j-value";
    if (items) {
        if (!json_is_object(items) && !json_is_boolean(items)) {
            gs_fail(g, "%s", "'items' must be a schema");
            return;
        }
        size_t mark = gs_path_push(g, "items");
        gs_schema(g, items, item, depth + 1);
        g->path[mark] = 0;
    }
    json_int_t lo = gs_count(g, s, "minItems", 0, GS_MAX_ITEMS);
    json_int_t hi = gs_count(g, s, "maxItems", -1, GS_MAX_ITEMS);
    if (g->failed)
        return;
    if (hi >= 0 && hi < lo) {
        gs_fail(g, "%s", "'maxItems' is below 'minItems'");
        return;
    }
    gs_rule(g, name);
    if (hi == 0) {
        gx_buf_printf(&g->out, " \"[\" ws \"]\"\n");
        return;
    }
    gx_buf_printf(&g->out, " \"[\" ws ");
    if (lo == 0)
        gx_buf_printf(&g->out, "( ");
    gx_buf_printf(&g->out, "%s ( ws \",\" ws %s )", item, item);
    gs_repeat(&g->out, lo ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
    if (lo == 0)
        gx_buf_printf(&g->out, " )?");
    gx_buf_printf(&g->out, " ws \"]\"\n");
}

static void
gs_string(struct gs *g, const json_t *s, char *name)
{
    json_int_t lo = gs_count(g, s, "minLength", 0, GS_MAX_LENGTH);
    json_int_t hi = gs_count(g, s, "maxLength", -1, GS_MAX_LENGTH);
    if (g->failed)
        return;
    if (hi >= 0 && hi < lo) {
        gs_fail(g, "%s", "'maxLength' is below 'minLength'");
        return;
    }
    if (lo == 0 && hi < 0) {
        snprintf(name, 24, "j-string");
        return;
    }
    gs_rule(g, name);
    gx_buf_printf(&g->out, " \"\\\"\" j-char");
    gs_repeat(&g->out, lo, hi);
    gx_buf_printf(&g->out, " \"\\\"\"\n");
}

/* The rule for one type name. */
static void
gs_type(struct gs *g, const json_t *s, const char *t, char *name, int depth)
{
    if (!strcmp(t, "object"))
        gs_object(g, s, name, depth);
    else if (!strcmp(t, "array"))
        gs_array(g, s, name, depth);
    else if (!strcmp(t, "string"))
        gs_string(g, s, name);
    else if (!strcmp(t, "number"))
        snprintf(name, 24, "j-number");
    else if (!strcmp(t, "integer"))
        snprintf(name, 24, "j-int");
    else if (!strcmp(t, "boolean"))
        snprintf(name, 24, "j-bool");
    else if (!strcmp(t, "null")) {
        gs_rule(g, name);
        gx_buf_printf(&g->out, " \"null\"\n");
    } else {
        gs_fail(g, "unknown type '%s'", t);
    }
}

/* NAME ::= alts[0] | alts[1] ... (nothing once failed) */
static void
gs_alts_rule(struct gs *g, char *name, char (*alts)[24], size_t n)
{
    if (g->failed)
        return;
    gs_rule(g, name);
    for (size_t i = 0; i < n; i++)
        gx_buf_printf(&g->out, "%s %s", i ? " |" : "", alts[i]);
    gx_buf_printf(&g->out, "\n");
}

static const json_t *
gs_resolve(struct gs *g, const char *ref)
{
    if (!strcmp(ref, "#"))
        return g->doc;
    const char *pfx[] = {"#/$defs/", "#/definitions/"};
    const char *key[] = {"$defs", "definitions"};
    for (int i = 0; i < 2; i++) {
        size_t l = strlen(pfx[i]);
        if (!strncmp(ref, pfx[i], l)) {
            const json_t *defs = json_object_get(g->doc, key[i]);
            const json_t *d = json_object_get(defs, ref + l);
            if (d)
                return d;
            gs_fail(g, "'$ref' %s names no definition", ref);
            return NULL;
        }
    }
    gs_fail(g, "'$ref' %s is not supported (only #, #/$defs/NAME and "
               "#/definitions/NAME)", ref);
    return NULL;
}

static void
gs_ref(struct gs *g, const char *ref, char *name, int depth)
{
    const json_t *t = gs_resolve(g, ref);
    if (!t)
        return;
    for (size_t i = 0; i < g->n_refs; i++)
        if (g->refs[i].schema == t) {
            snprintf(name, 24, "%s", g->refs[i].name);
            return;
        }
    if (g->n_refs == sizeof(g->refs) / sizeof(g->refs[0])) {
        gs_fail(g, "%s", "too many '$ref' targets");
        return;
    }
    /* name the rule first, so a reference inside resolves to it */
    struct gs_ref *r = &g->refs[g->n_refs++];
    r->schema = t;
    snprintf(r->name, sizeof(r->name), "s%d", ++g->n_rules);
    char inner[24];
    gs_schema(g, t, inner, depth + 1);
    gx_buf_printf(&g->out, "%s ::= %s\n", r->name, inner);
    snprintf(name, 24, "%s", r->name);
}

static void
gs_schema(struct gs *g, const json_t *s, char *name, int depth)
{
    snprintf(name, 24, "j-value");
    if (g->failed)
        return;
    if (depth > GS_MAX_DEPTH) {
        gs_fail(g, "%s", "the schema is nested too deeply");
        return;
    }
    if (json_is_true(s))
        return;
    if (json_is_false(s)) {
        gs_fail(g, "%s", "a 'false' schema matches nothing");
        return;
    }
    if (!json_is_object(s)) {
        gs_fail(g, "%s", "a schema must be an object");
        return;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        int known = 0;
        for (size_t i = 0; gs_known[i] && !known; i++)
            known = !strcmp(key, gs_known[i]);
        if (!known) {
            gs_fail(g,
                    "the JSON Schema keyword '%s' is not supported "
                    "by the local engine",
                    key);
            return;
        }
    }
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) {
            gs_fail(g, "%s", "'$ref' must be a string");
            return;
        }
        if (json_object_size(s) > 1 &&
            (json_object_get(s, "type") || json_object_get(s, "enum") ||
             json_object_get(s, "anyOf") || json_object_get(s, "const"))) {
            gs_fail(g, "%s",
                    "'$ref' beside other constraints is not "
                    "supported by the local engine");
            return;
        }
        gs_ref(g, json_string_value(ref), name, depth);
        return;
    }
    const json_t *cst = json_object_get(s, "const");
    const json_t *en = json_object_get(s, "enum");
    if (cst) {
        gs_rule(g, name);
        gs_json_lit(g, cst);
        gx_buf_printf(&g->out, "\n");
        return;
    }
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0) {
            gs_fail(g, "%s", "'enum' must be a non-empty array");
            return;
        }
        if (json_array_size(en) > GS_MAX_ENUM) {
            /* values with a common prefix are all alive at once in the
             * recognizer, which bounds its state set */
            gs_fail(g, "%s",
                    "'enum' with more than 1000 values is not supported by "
                    "the local engine");
            return;
        }
        /* members first: they may not be emitted inside the rule line */
        gs_rule(g, name);
        for (size_t i = 0; i < json_array_size(en); i++) {
            if (i)
                gx_buf_printf(&g->out, " |");
            gs_json_lit(g, json_array_get(en, i));
        }
        gx_buf_printf(&g->out, "\n");
        return;
    }
    const json_t *any = json_object_get(s, "anyOf");
    if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0) {
            gs_fail(g, "%s", "'anyOf' must be a non-empty array");
            return;
        }
        if (json_object_get(s, "type")) {
            gs_fail(g, "%s",
                    "'anyOf' beside 'type' is not supported by the "
                    "local engine");
            return;
        }
        size_t n = json_array_size(any);
        char(*alts)[24] = calloc(n, sizeof(*alts));
        if (!alts) {
            gs_fail(g, "%s", "out of memory");
            return;
        }
        for (size_t i = 0; i < n; i++) {
            char seg[32];
            snprintf(seg, sizeof(seg), "anyOf[%zu]", i);
            size_t mark = gs_path_push(g, seg);
            gs_schema(g, json_array_get(any, i), alts[i], depth + 1);
            g->path[mark] = 0;
        }
        gs_alts_rule(g, name, alts, n);
        free(alts);
        return;
    }
    const json_t *type = json_object_get(s, "type");
    if (!type) {
        if (json_object_get(s, "properties")) {
            gs_type(g, s, "object", name, depth);
            return;
        }
        if (json_object_get(s, "items")) {
            gs_type(g, s, "array", name, depth);
            return;
        }
        return; /* any JSON value */
    }
    if (json_is_string(type)) {
        gs_type(g, s, json_string_value(type), name, depth);
        return;
    }
    if (!json_is_array(type) || json_array_size(type) == 0) {
        gs_fail(g, "%s", "'type' must be a name or a list of names");
        return;
    }
    size_t n = json_array_size(type);
    char(*alts)[24] = calloc(n, sizeof(*alts));
    if (!alts) {
        gs_fail(g, "%s", "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(type, i);
        if (!json_is_string(t)) {
            gs_fail(g, "%s", "'type' must be a name or a list of names");
            break;
        }
        gs_type(g, s, json_string_value(t), alts[i], depth + 1);
    }
    gs_alts_rule(g, name, alts, n);
    free(alts);
}

/* A compiler writing on pg's text (its rules numbered after pg's), for
 * the schema document doc; NULL out of memory (err set). */
static struct gs *
gs_begin(struct pv_gram *pg, const json_t *doc, char *err, size_t errlen)
{
    struct gs *g = calloc(1, sizeof(*g));
    if (!g) {
        gx_errf(err, errlen, "out of memory");
        return NULL;
    }
    g->out = pg->text;
    g->doc = doc;
    g->n_rules = pg->n_rules;
    g->err = err;
    g->errlen = errlen;
    return g;
}

/* Hands g's text back to pg and frees g: 0, or -1 (err set) when it
 * failed or ran out of memory. */
static int
gs_end(struct pv_gram *pg, struct gs *g, char *err, size_t errlen)
{
    pg->text = g->out;
    pg->n_rules = g->n_rules;
    int failed = g->failed;
    free(g);
    if (!failed && !pg->text.data) {
        gx_errf(err, errlen, "out of memory");
        return -1;
    }
    return failed ? -1 : 0;
}

int
pv_schema_is_text(const json_t *s)
{
    const json_t *t = json_object_get(s, "type");
    const json_t *en = json_object_get(s, "enum");
    const json_t *cst = json_object_get(s, "const");
    if (cst)
        return json_is_string(cst);
    if (en) {
        size_t i;
        const json_t *v;
        json_array_foreach(en, i, v) if (!json_is_string(v)) return 0;
        return json_is_array(en) && json_array_size(en) > 0;
    }
    if (json_object_get(s, "anyOf") || json_object_get(s, "$ref"))
        return 0;
    if (json_is_array(t) && json_array_size(t) == 1)
        t = json_array_get(t, 0);
    return json_is_string(t) && !strcmp(json_string_value(t), "string");
}

/* A byte as a grammar set member */
static void
gs_set_byte(struct gx_buf *b, unsigned char c)
{
    gx_buf_printf(b, "\\x%02x", c);
}

/* The XML values of format f (pv_gram_xml_args), T its tag letter: T-v-0
 * any text up to and with f's close (T-v-k: k of its bytes seen, a
 * mismatch going back to 0, or to 1 on its first byte), T-c one
 * character that is not the close's first byte (a bounded string's);
 * never a NUL, which the JSON the text becomes could only spell \u0000
 * (jansson refuses it) */
static void
gs_xml_common(struct pv_gram *pg, const struct pv_xml_fmt *f)
{
    const char *close = f->close;
    size_t L = strlen(close);
    int bit = f->tag[0] == 'x' ? 1 : 2;
    unsigned char c0 = (unsigned char)close[0];
    struct gx_buf *b = &pg->text;
    if (pg->xml & bit)
        return;
    pg->xml |= bit;
    gx_buf_printf(b, "%sc ::= [^", f->tag);
    gs_set_byte(b, c0);
    gx_buf_printf(b, "\\x00\\x80-\\xff] | j-u8\n%sv-0 ::= [^", f->tag);
    gs_set_byte(b, c0);
    gx_buf_printf(b, "\\x00] %sv-0 |", f->tag);
    gs_lit(b, close, 1);
    gx_buf_printf(b, "%sv-1\n", f->tag);
    for (size_t k = 1; k < L; k++) {
        unsigned char c = (unsigned char)close[k];
        gx_buf_printf(b, "%sv-%zu ::=", f->tag, k);
        gs_lit(b, close + k, 1);
        if (k + 1 < L)
            gx_buf_printf(b, "%sv-%zu", f->tag, k + 1);
        if (c != c0) {
            gx_buf_printf(b, " |");
            gs_lit(b, close, 1);
            gx_buf_printf(b, "%sv-1", f->tag);
        }
        gx_buf_printf(b, " | [^");
        gs_set_byte(b, c);
        gs_set_byte(b, c0);
        gx_buf_printf(b, "\\x00] %sv-0\n", f->tag);
    }
}

/* A text value of format f (s a string schema: pv_schema_is_text): its
 * enum or const values, or its characters (none the close's first byte
 * when bounded), then f's close */
static void
gs_xml_text(struct gs *g, const struct pv_xml_fmt *f, const json_t *s,
            char *name)
{
    const json_t *cst = json_object_get(s, "const");
    const json_t *en = json_object_get(s, "enum");
    json_int_t lo = gs_count(g, s, "minLength", 0, GS_MAX_LENGTH);
    json_int_t hi = gs_count(g, s, "maxLength", -1, GS_MAX_LENGTH);
    if (g->failed)
        return;
    if (!cst && !en && lo == 0 && hi < 0) {
        snprintf(name, 24, "%sv-0", f->tag);
        return;
    }
    gs_rule(g, name);
    if (cst || en) {
        size_t n = cst ? 1 : json_array_size(en);
        if (n > GS_MAX_ENUM) {
            gs_fail(g, "%s",
                    "'enum' with more than 1000 values is not supported by "
                    "the local engine");
            return;
        }
        gx_buf_printf(&g->out, " (");
        for (size_t i = 0; i < n; i++) {
            const json_t *v = cst ? cst : json_array_get(en, i);
            if (i)
                gx_buf_printf(&g->out, " |");
            gs_lit(&g->out, json_string_value(v), json_string_length(v));
        }
        gx_buf_printf(&g->out, ")");
    } else if (hi >= 0 && hi < lo) {
        gs_fail(g, "%s", "'maxLength' is below 'minLength'");
        return;
    } else {
        gx_buf_printf(&g->out, " %sc", f->tag);
        gs_repeat(&g->out, lo, hi);
    }
    gs_lit(&g->out, f->close, strlen(f->close));
    gx_buf_printf(&g->out, "\n");
}

int
pv_gram_xml_args(struct pv_gram *pg, const json_t *schema,
                 const struct pv_xml_fmt *f, char name[24], char *err,
                 size_t errlen)
{
    name[0] = '\0';
    if (!schema || json_is_true(schema) ||
        (json_is_object(schema) && json_object_size(schema) == 0))
        schema = NULL; /* any object: any pairs, as text */
    const json_t *t = json_object_get(schema, "type");
    if (schema && (!json_is_object(schema) ||
                   (t && !(json_is_string(t) &&
                           !strcmp(json_string_value(t), "object"))) ||
                   json_object_get(schema, "anyOf") ||
                   json_object_get(schema, "$ref") ||
                   json_object_get(schema, "enum") ||
                   json_object_get(schema, "const"))) {
        gx_errf(err, errlen, "%s's tool calls take an object of named "
                             "parameters (type object with properties)",
                f->who);
        return -1;
    }
    /* the JSON grammar of the whole schema: every keyword checked, and
     * the rules of the values that are not text */
    char whole[24];
    if (schema && pv_gram_schema(pg, schema, whole, err, errlen) != 0)
        return -1;
    gs_xml_common(pg, f);
    struct gs *g = gs_begin(pg, schema, err, errlen);
    if (!g)
        return -1;
    const json_t *props = json_object_get(schema, "properties");
    const json_t *req = json_object_get(schema, "required");
    const json_t *addl = json_object_get(schema, "additionalProperties");
    size_t np = json_object_size(props), n = 0;
    const char *key;
    const json_t *ps;
    char(*vals)[24] = calloc(np + json_array_size(req) + 1, sizeof(*vals));
    const char **keys = calloc(np + json_array_size(req) + 1, sizeof(*keys));
    if (!vals || !keys)
        gs_fail(g, "%s", "out of memory");
    json_object_foreach((json_t *)props, key, ps) {
        if (g->failed)
            break;
        size_t mark = gs_path_push(g, "properties");
        gs_path_push(g, key);
        if (strchr(key, f->key_mid[0]) || strchr(key, '<')) {
            char m[128];
            snprintf(m, sizeof(m), "a parameter name with '%c' or '<' "
                                   "cannot be written in %s's XML calls",
                     f->key_mid[0], f->who);
            gs_fail(g, "%s", m);
        } else if (pv_schema_is_text(ps)) {
            gs_xml_text(g, f, ps, vals[n]);
        } else { /* its JSON, then the closing tag */
            char v[24];
            gs_schema(g, ps, v, 1);
            gs_rule(g, vals[n]);
            gx_buf_printf(&g->out, " %s", v);
            gs_lit(&g->out, f->close, strlen(f->close));
            gx_buf_printf(&g->out, "\n");
        }
        g->path[mark] = 0;
        keys[n++] = key;
    }
    for (size_t i = 0; !g->failed && i < json_array_size(req); i++) {
        const char *rk = json_string_value(json_array_get(req, i));
        if (rk && !json_object_get(props, rk) &&
            !strchr(rk, f->key_mid[0]) && !strchr(rk, '<')) {
            snprintf(vals[n], 24, "%sv-0", f->tag); /* not listed: text */
            keys[n++] = rk;
        }
    }
    if (!g->failed) {
        gs_rule(g, name);
        for (size_t i = 0; i < n; i++) {
            gs_lit(&g->out, f->key_open, strlen(f->key_open));
            gs_lit(&g->out, keys[i], strlen(keys[i]));
            gs_lit(&g->out, f->key_mid, strlen(f->key_mid));
            gx_buf_printf(&g->out, "%s", vals[i]);
        }
        if (!np && !json_is_false(addl)) { /* any pairs, their values text */
            gx_buf_printf(&g->out, " (");
            gs_lit(&g->out, f->key_open, strlen(f->key_open));
            gx_buf_printf(&g->out, "[^<");
            gs_set_byte(&g->out, (unsigned char)f->key_mid[0]);
            gx_buf_printf(&g->out, "\\x00]+");
            gs_lit(&g->out, f->key_mid, strlen(f->key_mid));
            gx_buf_printf(&g->out, "%sv-0 )*", f->tag);
        }
        gx_buf_printf(&g->out, "\n");
    }
    free(vals);
    free(keys);
    return gs_end(pg, g, err, errlen);
}

void
pv_gram_init(struct pv_gram *pg)
{
    memset(pg, 0, sizeof(*pg));
    gx_buf_init(&pg->text, 0);
    gx_buf_append(&pg->text, gs_common, sizeof(gs_common) - 1);
}

void
pv_gram_cleanup(struct pv_gram *pg)
{
    gx_buf_cleanup(&pg->text);
}

int
pv_gram_schema(struct pv_gram *pg, const json_t *schema, char name[24],
               char *err, size_t errlen)
{
    struct gs *g = gs_begin(pg, schema, err, errlen);
    if (!g)
        return -1;
    gs_schema(g, schema, name, 0);
    return gs_end(pg, g, err, errlen);
}

void
pv_gram_literal(struct pv_gram *pg, const char *s, size_t n)
{
    gs_lit(&pg->text, s, n);
}
