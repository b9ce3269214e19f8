/*
 * json_check: a small JSON Schema validator for tests, written apart from
 * the schema-to-grammar compiler so that it checks the compiler's outputs
 * independently.  It knows the subset the local engine accepts: type
 * (name or list), enum, const, anyOf, $ref ("#" and "#/$defs/NAME"),
 * properties, required, additionalProperties false, items, minItems,
 * maxItems, minLength, maxLength (in code points).
 */
#ifndef LLMUX_TESTS_JSON_CHECK_H
#define LLMUX_TESTS_JSON_CHECK_H

#include <jansson.h>

/* 1 if v is valid against schema (the document root for $ref). */
int json_check_schema(const json_t *v, const json_t *schema);

#endif
