/*
 * libFuzzer target for config loading: any bytes (NUL-terminated copy) go
 * to cfg_load_string; on success the config is freed again (ASan checks
 * every pointer the loader built; LeakSanitizer what an error path drops).
 */
#include "../../config/config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    struct cfg *c = NULL;
    char err[512];
    err[0] = 0;
    if (cfg_load_string(text, "fuzz.json", &c, err, sizeof(err)) == GX_OK) {
        if (!c)
            abort();
        cfg_free(c);
    } else if (!memchr(err, 0, sizeof(err))) {
        abort();
    }
    free(text);
    return 0;
}
