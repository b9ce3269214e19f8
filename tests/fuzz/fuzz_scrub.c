/*
 * libFuzzer target for secret scrubbing (providers/scrub.c): the input is
 * an upstream's text; the provider has an api_key, credential and plain
 * headers, a Bearer and a Basic value and URL userinfo.  Scrubbing keeps
 * the length, leaves no match behind, and a second pass finds nothing.
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
    free(buf);
    return 0;
}
