/*
 * resp_events: a test client's reading of a Responses API event stream
 * ("event: TYPE\ndata: JSON\n\n" records), for the unit and end-to-end
 * tests of gateway/responses.c.
 */
#ifndef LLMUX_TEST_RESP_EVENTS_H
#define LLMUX_TEST_RESP_EVENTS_H

#include <jansson.h>

/* The records of sse in order, as a JSON array of {"event": TYPE, "data":
 * the parsed data (absent when it is not JSON)}; a record without both
 * fields is {"event": "BAD"}.  The caller owns the result. */
json_t *resp_events_parse(const char *sse);

/* Checks what every client relies on: each data's "type" equals its
 * event name and sequence_number counts from 0 without a gap.  Returns
 * the index of the first record that breaks it, or -1. */
long resp_events_bad(const json_t *events);

/* The text a client assembles from response.output_text.delta events
 * (into buf, cut at len) and the arguments from
 * response.function_call_arguments.delta events (into args). */
void resp_events_text(const json_t *events, char *buf, size_t len,
                      char *args, size_t args_len);

#endif
