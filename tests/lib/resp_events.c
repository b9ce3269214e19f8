#include "resp_events.h"

#include <stdio.h>
#include <string.h>

json_t *
resp_events_parse(const char *sse)
{
    json_t *a = json_array();
    const char *p = sse;
    while (p && *p) {
        const char *end = strstr(p, "\n\n");
        if (!end)
            break;
        const char *d = strstr(p, "\ndata: ");
        if (strncmp(p, "event: ", 7) == 0 && d && d < end) {
            json_t *rec = json_object();
            json_object_set_new(rec, "event",
                                json_stringn(p + 7, (size_t)(d - p - 7)));
            json_t *data = json_loadb(d + 7, (size_t)(end - d - 7), 0, NULL);
            if (data)
                json_object_set_new(rec, "data", data);
            json_array_append_new(a, rec);
        } else {
            json_array_append_new(a, json_pack("{s:s}", "event", "BAD"));
        }
        p = end + 2;
    }
    return a;
}

long
resp_events_bad(const json_t *events)
{
    size_t i;
    const json_t *e;
    json_array_foreach(events, i, e) {
        const json_t *d = json_object_get(e, "data");
        const char *ev = json_string_value(json_object_get(e, "event"));
        const char *ty = json_string_value(json_object_get(d, "type"));
        const json_t *sq = json_object_get(d, "sequence_number");
        if (!ev || !ty || strcmp(ev, ty) || !json_is_integer(sq) ||
            json_integer_value(sq) != (json_int_t)i)
            return (long)i;
    }
    return -1;
}

void
resp_events_text(const json_t *events, char *buf, size_t len, char *args,
                 size_t args_len)
{
    if (len)
        buf[0] = '\0';
    if (args_len)
        args[0] = '\0';
    size_t i;
    const json_t *e;
    json_array_foreach(events, i, e) {
        const char *ev = json_string_value(json_object_get(e, "event"));
        const char *delta = json_string_value(
            json_object_get(json_object_get(e, "data"), "delta"));
        if (!ev || !delta)
            continue;
        if (!strcmp(ev, "response.output_text.delta") && len)
            strncat(buf, delta, len - strlen(buf) - 1);
        else if (!strcmp(ev, "response.function_call_arguments.delta") &&
                 args_len)
            strncat(args, delta, args_len - strlen(args) - 1);
    }
}
