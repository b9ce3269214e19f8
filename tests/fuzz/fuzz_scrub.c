/*
 * libFuzzer target for secret scrubbing (providers/scrub.c): the input is
 * an upstream's text; the provider has an api_key, credential and plain
 * headers, a Bearer and a Basic value and URL userinfo.  Scrubbing keeps
 * the length, leaves no match behind, and a second pass finds nothing;
 * cut into two stream events (pv_scrub_event), each is masked at least as
 * pv_scrub masks it, the first exactly so, and nothing but '*' is ever
 * written.
 */
#include "../../providers/providers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct cfg_header fz_hdrs[] = {
    {"api-key", "hdr-tok-0123456789abcdef"},
    {"X-Org", "organisation-long-name"},
    {"Authorization", "Bearer tok-bearer-0123456789"},
    {"Proxy-Authorization", "Basic dXNlcjpzM2NyZXQtcGFzc3dvcmQ="},
};

static struct cfg_provider fz_prov = {
    .name = "p",
    .base_url = "https://bob:p%40ss-word-123456@relay.example/v1",
    .api_key = "sk-proj-ABCdef0123456789xyzXYZ",
    .headers = fz_hdrs,
    .n_headers = sizeof(fz_hdrs) / sizeof(fz_hdrs[0]),
};

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct pv_scrub *s;
    if (!s)
        s = pv_scrub_new(&fz_prov); /* kept for the process: read-only */
    if (!s)
        return 0;
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    size_t hits = pv_scrub(s, buf, size);
    if (pv_scrub_has(s, buf, size) || pv_scrub(s, buf, size) != 0)
        abort(); /* something was left behind */
    if (hits == 0 && size && memcmp(buf, data, size) != 0)
        abort(); /* changed without a match */
    /* As a stream: the input cut in two events.  The first is masked as
     * pv_scrub masks it; the second at least as much as pv_scrub would
     * (the carry only adds masks). */
    size_t cut = size ? data[0] % (size + 1) : 0;
    struct pv_scrub_carry cy;
    memset(&cy, 0, sizeof(cy));
    const char *ev[2] = {(const char *)data, (const char *)data + cut};
    size_t evn[2] = {cut, size - cut};
    for (int e = 0; e < 2; e++) {
        char *m = NULL;
        int h = pv_scrub_event(s, &cy, ev[e], evn[e], &m);
        if (h < 0 || (h > 0) != (m != NULL))
            abort();
        char *plain = malloc(evn[e] ? evn[e] : 1);
        if (!plain)
            abort();
        memcpy(plain, ev[e], evn[e]);
        pv_scrub(s, plain, evn[e]);
        const char *got = m ? m : ev[e];
        for (size_t i = 0; i < evn[e]; i++)
            if ((plain[i] == '*' && got[i] != '*' && ev[e][i] != '*') ||
                (e == 0 && got[i] != plain[i]) ||
                (got[i] != ev[e][i] && got[i] != '*'))
                abort();
        free(plain);
        free(m);
    }
    free(buf);
    return 0;
}
