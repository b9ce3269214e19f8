/*
 * libFuzzer target for providers/json_scan.c: every input goes through
 * pv_json_scan_chat and through json_loadb(flags 0) + pv_usage_parse (what
 * oa_on_finish used before the scanner); a different verdict or usage
 * aborts.  PV_JS_UNSURE makes no claim (the caller then uses jansson).
 * Each object jansson accepts is also dumped with pv_json_dump_compact,
 * which must give json_dumps(JSON_COMPACT)'s bytes (or NULL).  The
 * passthrough's member scanner and splice (pv_json_scan_members,
 * pv_json_splice) are held to jansson on every input too
 * (tests/lib/members_check.h says what is claimed).
 */
#include "../../providers/providers.h"
#include "../../providers/providers_int.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/members_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    struct pv_js_chat sc;
    enum pv_js_verdict v = pv_json_scan_chat(p, size, &sc);
    json_t *j = json_loadb(p, size, 0, NULL);
    int ok = json_is_object(j);
    if (v == PV_JS_INVALID && ok) {
        fprintf(stderr, "scanner rejects what jansson accepts\n");
        abort();
    }
    if (v == PV_JS_OBJECT) {
        if (!ok) {
            fprintf(stderr, "scanner accepts what jansson rejects\n");
            abort();
        }
        struct pv_usage u;
        memset(&u, 0, sizeof(u));
        pv_usage_parse(j, &u);
        int hc = json_object_get(j, "choices") != NULL;
        if (hc != sc.has_choices || u.have != sc.usage.have ||
            u.prompt_tokens != sc.usage.prompt_tokens ||
            u.completion_tokens != sc.usage.completion_tokens ||
            u.cached_tokens != sc.usage.cached_tokens) {
            fprintf(stderr, "choices/usage differ: %d %d %lld %lld %lld vs "
                            "%d %d %lld %lld %lld\n",
                    sc.has_choices, sc.usage.have,
                    (long long)sc.usage.prompt_tokens,
                    (long long)sc.usage.completion_tokens,
                    (long long)sc.usage.cached_tokens, hc, u.have,
                    (long long)u.prompt_tokens, (long long)u.completion_tokens,
                    (long long)u.cached_tokens);
            abort();
        }
    }
    if (ok) {
        /* the compact writer oa_start uses: json_dumps' bytes or NULL */
        char *mine = pv_json_dump_compact(j, NULL);
        char *ref = json_dumps(j, JSON_COMPACT);
        if (mine && (!ref || strcmp(mine, ref) != 0)) {
            fprintf(stderr, "dump differs\n");
            abort();
        }
        free(mine);
        free(ref);
    }
    json_decref(j);
    const char *mbad = members_check(p, size);
    if (mbad) {
        fprintf(stderr, "%s\n", mbad);
        abort();
    }
    return 0;
}
