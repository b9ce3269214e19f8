/*
 * json_check: see json_check.h.
 */
#include "json_check.h"

#include <string.h>

static int validate(const json_t *v, const json_t *s, const json_t *doc);

static size_t
utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int
type_ok(const json_t *v, const char *t)
{
    if (!strcmp(t, "object"))
        return json_is_object(v);
    if (!strcmp(t, "array"))
        return json_is_array(v);
    if (!strcmp(t, "string"))
        return json_is_string(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v);
    if (!strcmp(t, "number"))
        return json_is_number(v);
    if (!strcmp(t, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(t, "null"))
        return json_is_null(v);
    return 0;
}

static int
validate(const json_t *v, const json_t *s, const json_t *doc)
{
    const json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        const char *r = json_string_value(x);
        if (!strcmp(r, "#"))
            return validate(v, doc, doc);
        return validate(v, json_object_get(json_object_get(doc, "$defs"),
                                           r + 8),
                        doc);
    }
    if ((x = json_object_get(s, "const")) && !json_equal(v, x))
        return 0;
    if ((x = json_object_get(s, "enum"))) {
        int any = 0;
        for (size_t i = 0; i < json_array_size(x); i++)
            any |= json_equal(v, json_array_get(x, i));
        if (!any)
            return 0;
    }
    if ((x = json_object_get(s, "anyOf"))) {
        int any = 0;
        for (size_t i = 0; i < json_array_size(x); i++)
            any |= validate(v, json_array_get(x, i), doc);
        if (!any)
            return 0;
    }
    if ((x = json_object_get(s, "type"))) {
        int any = 0;
        if (json_is_string(x))
            any = type_ok(v, json_string_value(x));
        for (size_t i = 0; json_is_array(x) && i < json_array_size(x); i++)
            any |= type_ok(v, json_string_value(json_array_get(x, i)));
        if (!any)
            return 0;
    }
    if (json_is_string(v)) {
        size_t n = utf8_chars(json_string_value(v));
        if ((x = json_object_get(s, "maxLength")) &&
            n > (size_t)json_integer_value(x))
            return 0;
        if ((x = json_object_get(s, "minLength")) &&
            n < (size_t)json_integer_value(x))
            return 0;
    }
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if ((x = json_object_get(s, "maxItems")) &&
            n > (size_t)json_integer_value(x))
            return 0;
        if ((x = json_object_get(s, "minItems")) &&
            n < (size_t)json_integer_value(x))
            return 0;
        if ((x = json_object_get(s, "items")))
            for (size_t i = 0; i < n; i++)
                if (!validate(json_array_get(v, i), x, doc))
                    return 0;
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(s, "properties");
        const json_t *req = json_object_get(s, "required");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_object_get(v, json_string_value(json_array_get(req, i))))
                return 0;
        const char *k;
        const json_t *m;
        json_object_foreach((json_t *)v, k, m) {
            const json_t *ps = json_object_get(props, k);
            if (ps && !validate(m, ps, doc))
                return 0;
            if (!ps && json_is_false(json_object_get(s,
                                                     "additionalProperties")))
                return 0;
        }
    }
    return 1;
}

int
json_check_schema(const json_t *v, const json_t *schema)
{
    return validate(v, schema, schema);
}
