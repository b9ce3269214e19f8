/*
 * libFuzzer target for local_engine/chat.c's reading of a GGUF's
 * tokenizer.chat_template: arbitrary bytes as the template text.  Every
 * function that reads a template runs on it (le_chat_detect,
 * le_chat_tools_detect, le_chat_tools_first, le_chat_default_eval with a
 * fixed date and with today), and a small conversation (system, user,
 * assistant, tool results and calls, the tools' own turn) is rendered
 * with the template found, with and without a generation prompt and with
 * the reasoning opened and closed.
 *
 * Checks, beyond ASan/UBSan: each function returns (a template once sent
 * le_chat_detect and le_chat_default_eval round each other without end);
 * the names of what was found are among the known ones; a default text is
 * never empty; a rendering is as long as it says and holds every
 * message's text.
 */
#include "../../local_engine/le_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct le_chat_msg conv[] = {
    {"system", "S1"},     {"tools", "T2"},      {"user", "U3"},
    {"assistant", "A4"},  {"tool_calls", "C5"}, {"tool", "R6"},
    {"user", "U7"},
};
#define N_CONV (sizeof(conv) / sizeof(conv[0]))

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    const char *t = (const char *)data;
    enum le_chat_template ct = le_chat_detect(t, size);
    enum le_chat_tools tf = le_chat_tools_detect(t, size);
    if (le_chat_template_from_name(le_chat_template_name(ct)) != (int)ct)
        abort();
    if (!le_chat_tools_name(tf))
        abort();
    int first = le_chat_tools_first(t, size);
    if (first != 0 && first != 1)
        abort();
    for (int k = 0; k < 2; k++) {
        char *d = le_chat_default_eval(t, size, k ? NULL : "2026-03-07");
        if (d && !*d)
            abort();
        free(d);
    }
    (void)le_chat_tools_markers(tf);
    for (int r = -1; r <= 1; r++)
        for (int gen = 0; gen < 2; gen++) {
            struct le_chat_opts o = {r > 0 ? "high" : NULL, "2026-03-07",
                                     r ? "T" : NULL, r};
            char *out = NULL;
            size_t len = 0;
            if (le_chat_apply_opts(ct, conv, N_CONV, gen, &o, &out, &len) !=
                LE_OK) {
                free(out);
                continue;
            }
            if (!out || strlen(out) != len)
                abort();
            /* the users' texts are written whatever the template */
            if (!strstr(out, "U3") || !strstr(out, "U7"))
                abort();
            free(out);
        }
    return 0;
}
