/*
 * pricing_int.h: shared inside pricing/ only (ledger.c, query.c, cli.c).
 * Never include from another folder.
 */
#ifndef LLMUX_PRICING_INT_H
#define LLMUX_PRICING_INT_H

#include <sqlite3.h>
#include <stdint.h>

#include "../common/common.h"
#include "pricing.h"

/* Latency histogram of the rollup table: bucket i counts latencies
 * < pr_lat_bounds[i] (and >= the previous bound); the last bucket is
 * open-ended.  Fixed forever for schema version 1: changing it needs a
 * migration that rebuilds usage_hourly. */
#define PR_LAT_NBUCKETS 18
extern const int64_t pr_lat_bounds[PR_LAT_NBUCKETS - 1];

/* Bucket index of a latency in ms. */
int pr_lat_bucket(int64_t latency_ms);

/* Approximate q-quantile (0..1) of a histogram: linear inside the bucket
 * that holds the rank.  -1 when n is 0. */
int64_t pr_lat_quantile(const int64_t *hist, double q);

/* Appends ", SUM(latency_ms < 50) AS h0, ..., SUM(latency_ms >= 60000)
 * AS h17": the histogram of raw usage rows, same buckets as the rollup. */
enum gx_status pr_sql_hist_sums(struct gx_buf *b);

/* A row counts as an error unless its status is 2xx. */
#define PR_IS_ERROR_SQL "(status < 200 OR status >= 300)"

/* Opens path (":memory:" or a file or a file: URI) with the pragmas every
 * connection needs (busy timeout).  readonly: SQLITE_OPEN_READONLY. */
int pr_db_open(const char *path, int readonly, sqlite3 **out, char *err,
               size_t errlen);

#endif
