/*
 * members_check: holds providers/json_scan.c's pv_json_scan_members and
 * pv_json_splice to jansson on one input, for tests/test_json_scan.c
 * (every input its exhaustive and mutation runs make) and
 * tests/fuzz/fuzz_json_scan.c.  Header-only (static) so the fuzz target
 * links json_scan.c alone.
 *
 * The claims checked, for the paths "model", "message.model", "type",
 * "usage":
 *   - PV_JS_INVALID only where json_loadb(flags 0) gives no object,
 *     PV_JS_OBJECT only where it gives one;
 *   - on PV_JS_OBJECT: spans lie in the input in ascending order, each one
 *     JSON value; a top-level path has spans exactly when jansson has the
 *     member, and its last span is jansson's value; for message.model,
 *     jansson's value is among the spans;
 *   - splicing a string into every span of "model" (then of
 *     "message.model") gives JSON that jansson reads as the input's tree
 *     with that member set to the string (unchanged when it had none).
 * Returns NULL, or a sentence saying which claim failed.
 */
#ifndef LLMUX_TESTS_MEMBERS_CHECK_H
#define LLMUX_TESTS_MEMBERS_CHECK_H

#include "../../providers/providers.h"
#include "../../providers/providers_int.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MC_MAX 64

/* The splice of s into spans of path k; checks the result against want
 * (the input's tree edited as jansson would see the splice). */
static const char *
mc_splice(const char *p, size_t n, const struct pv_js_member *m, size_t nm,
          int k, const json_t *want)
{
    struct pv_js_member sel[MC_MAX];
    size_t ns = 0;
    for (size_t i = 0; i < nm; i++)
        if (m[i].path == k)
            sel[ns++] = m[i];
    size_t ol = 0;
    char *o = pv_json_splice(p, n, sel, ns, "X\"\xc3\xa9\n", &ol);
    if (!o)
        return "splice: NULL for disjoint spans";
    json_t *j = json_loadb(o, ol, 0, NULL);
    int eq = json_equal(j, want);
    json_decref(j);
    free(o);
    return eq ? NULL : "splice: the result is not the tree with the member set";
}

static const char *
members_check(const char *p, size_t n)
{
    static const char *const paths[] = {"model", "message.model", "type",
                                        "usage"};
    struct pv_js_member m[MC_MAX];
    size_t nm = 0;
    enum pv_js_verdict v = pv_json_scan_members(p, n, paths, 4, m, MC_MAX,
                                                &nm);
    json_t *j = json_loadb(p, n, 0, NULL);
    int ok = json_is_object(j);
    const char *bad = NULL;
    if (v == PV_JS_INVALID && ok)
        bad = "members: rejects what jansson accepts";
    else if (v == PV_JS_OBJECT && !ok)
        bad = "members: accepts what jansson rejects";
    if (bad || v != PV_JS_OBJECT) {
        json_decref(j);
        return bad;
    }
    size_t prev = 0;
    const struct pv_js_member *last[4] = {0};
    int msg_model_seen = 0;
    const json_t *msg_model =
        json_object_get(json_object_get(j, "message"), "model");
    for (size_t i = 0; i < nm && !bad; i++) {
        if (m[i].at < prev || m[i].at > n || m[i].len > n - m[i].at ||
            m[i].len == 0 || m[i].path < 0 || m[i].path > 3) {
            bad = "members: a span out of order or out of bounds";
            break;
        }
        prev = m[i].at;
        json_t *val = json_loadb(p + m[i].at, m[i].len, JSON_DECODE_ANY, NULL);
        if (!val)
            bad = "members: a span is not one JSON value";
        if (m[i].path == 1 && msg_model && json_equal(val, msg_model))
            msg_model_seen = 1;
        json_decref(val);
        last[m[i].path] = &m[i];
    }
    for (int k = 0; k < 4 && !bad; k++) {
        if (k == 1) {
            if (msg_model && !msg_model_seen)
                bad = "members: message.model not among the spans";
            continue;
        }
        const json_t *jv = json_object_get(j, paths[k]);
        if (!jv != !last[k]) {
            bad = "members: a member found by one side only";
            continue;
        }
        if (!jv)
            continue;
        json_t *val = json_loadb(p + last[k]->at, last[k]->len,
                                 JSON_DECODE_ANY, NULL);
        if (!json_equal(val, jv))
            bad = "members: the last span is not jansson's value";
        json_decref(val);
    }
    if (!bad) {
        json_t *want = json_deep_copy(j);
        if (want && json_object_get(want, "model"))
            json_object_set_new(want, "model", json_string("X\"\xc3\xa9\n"));
        bad = want ? mc_splice(p, n, m, nm, 0, want) : NULL;
        json_decref(want);
    }
    if (!bad) {
        json_t *want = json_deep_copy(j);
        json_t *msg = json_object_get(want, "message");
        if (json_object_get(msg, "model"))
            json_object_set_new(msg, "model", json_string("X\"\xc3\xa9\n"));
        bad = want ? mc_splice(p, n, m, nm, 1, want) : NULL;
        json_decref(want);
    }
    json_decref(j);
    return bad;
}

#endif
