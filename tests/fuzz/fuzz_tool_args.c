/*
 * libFuzzer target for providers/tool_args.c: arbitrary bytes as GLM's or
 * Qwen3-Coder's XML arguments (the first byte picks which) and as a JSON
 * value for pv_json_end.
 *
 * Checks, beyond ASan/UBSan: every prefix of the input, read as an output
 * still growing, gives a prefix of what the whole gives once final (what
 * a stream sends adds up to the non-stream arguments), and longer
 * prefixes never give less; reading on from the last prefix's state
 * (pv_xml_args_read, as a stream does) gives what reading anew gives;
 * pv_json_end fed in two pieces ends where it ends fed at once.
 */
#include "../../providers/providers_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static json_t *keys;

static const struct pv_xml_fmt *fmt;

/* x[0, n)'s JSON into b (reset first) */
static void
run(struct gx_buf *b, const char *x, size_t n, int final)
{
    size_t end = 0;
    gx_buf_reset(b);
    pv_xml_args_json(fmt, keys, x, n, final, b, &end);
    if (end > n)
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!keys)
        keys = json_pack("{s:b,s:b,s:b}", "s", 1, "n", 0, "o", 0);
    if (size < 1 || size > 4096)
        return 0;
    /* the first byte picks the format */
    fmt = data[0] & 1 ? &pv_xml_qwen3_coder : &pv_xml_glm;
    const char *x = (const char *)data + 1;
    size--;
    struct gx_buf whole, part, prev, inc;
    gx_buf_init(&whole, 0);
    gx_buf_init(&part, 0);
    gx_buf_init(&prev, 0);
    gx_buf_init(&inc, 0);
    struct pv_xml_read st = {0};
    run(&whole, x, size, 1);
    size_t step = size > 512 ? size / 128 : 1;
    for (size_t k = 0; k <= size; k += step) {
        run(&part, x, k, 0);
        if (part.len > whole.len ||
            (part.len && memcmp(part.data, whole.data, part.len)))
            abort(); /* a stream would have sent something else */
        if (prev.len > part.len ||
            (prev.len && memcmp(prev.data, part.data, prev.len)))
            abort(); /* a longer output gave less */
        pv_xml_args_read(fmt, keys, x, k, 0, &inc, &st);
        if (inc.len != part.len ||
            (inc.len && memcmp(inc.data, part.data, inc.len)))
            abort(); /* read on, it says something else than read anew */
        gx_buf_reset(&prev);
        if (part.len)
            gx_buf_append(&prev, part.data, part.len);
    }
    pv_xml_args_read(fmt, keys, x, size, 1, &inc, &st);
    if (inc.len != whole.len || (inc.len && memcmp(inc.data, whole.data,
                                                   inc.len)))
        abort(); /* its end is not the whole's */
    gx_buf_cleanup(&whole);
    gx_buf_cleanup(&part);
    gx_buf_cleanup(&prev);
    gx_buf_cleanup(&inc);
    /* pv_json_end: at once and in two pieces */
    struct pv_jend a = {0}, b = {0};
    int ca = pv_json_end(&a, x, size, 0);
    int cb = pv_json_end(&b, x, size / 2, 0) || pv_json_end(&b, x, size, 0);
    if (ca != cb || (ca && a.end != b.end) || (ca && a.end > size))
        abort();
    (void)pv_utf8_partial(x, size);
    return 0;
}
