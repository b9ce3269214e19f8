/*
 * fake_stats: what tests/fake_provider saw (GET /fake/stats) and the
 * ledger row of a request, for end-to-end tests.  Bounded waits.
 */
#ifndef LLMUX_TESTS_FAKE_STATS_H
#define LLMUX_TESTS_FAKE_STATS_H

#include <jansson.h>

/* The fake's /fake/stats object (new reference), NULL if unreachable;
 * fake_url is "http://127.0.0.1:PORT". */
json_t *fake_stats(const char *fake_url);
/* Its "requests" count, -1 if unreachable. */
long long fake_stats_requests(const char *fake_url);
/* SELECT col FROM usage WHERE request_id = rid on the SQLite ledger db
 * (e2e_db_int: -1 when the query fails). */
long long e2e_row_int(const char *db, const char *rid, const char *col);

#endif
