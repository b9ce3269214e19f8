/*
 * libFuzzer target for the SSE parser: the input is split into two feeds at
 * a position taken from its first byte, so line ends across feeds (a CR at
 * the end of one, LF at the start of the next) are exercised too.
 */
#include "../../providers/providers.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_cb(void *ud, const char *d, size_t len)
{
    size_t *total = ud;
    /* Touch every byte so ASan sees a bad pointer or length. */
    for (size_t i = 0; i < len; i++)
        *total += (unsigned char)d[i];
    *total += len;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t cut = data[0] % size;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (cut > n)
        cut = n;
    struct pv_sse p;
    size_t total = 0;
    pv_sse_init(&p, 256);
    if (pv_sse_feed(&p, s, cut, fuzz_cb, &total) == GX_OK)
        (void)pv_sse_feed(&p, s + cut, n - cut, fuzz_cb, &total);
    pv_sse_cleanup(&p);
    return 0;
}
