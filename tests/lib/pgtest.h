/*
 * pgtest: a private PostgreSQL cluster for the tests, started by the test
 * itself: initdb into a fresh temp dir (as the user "postgres", else
 * "nobody", via runuser when we are root, as CI runs), a free port on
 * 127.0.0.1, fsync off, trust authentication on that port only; stopped
 * and removed by pgt_stop (also at exit).  Needs the Debian server
 * binaries (/usr/lib/postgresql/N/bin); without them pgt_start returns
 * -1 and says why.  Every command is bounded (pg_ctl -t).
 */
#ifndef LLMUX_TEST_PGTEST_H
#define LLMUX_TEST_PGTEST_H

#include <stddef.h>

/* Starts the cluster; 0 on success. */
int pgt_start(void);
/* Creates database name; writes its URI ("postgres://llmux@127.0.0.1:PORT/
 * name") into uri.  0 on success. */
int pgt_createdb(const char *name, char *uri, size_t urilen);
/* Runs one SQL statement with psql on database name; 0 on success.  With
 * out, the first line of its unaligned output goes there. */
int pgt_sql(const char *name, const char *sql, char *out, size_t outlen);
/* Runs one query with psql on database name and hands each result row
 * to cb (ncols values, NULL for SQL NULL; valid for the call only).
 * Returns the number of rows, or -1 (psql failed: its message on stderr).
 * Values may not contain the bytes 0x1e/0x1f. */
int pgt_query(const char *name, const char *sql,
              void (*cb)(void *ud, int ncols, char **vals), void *ud);
/* pg_dump of database name (data and schema, plain SQL) into path; 0 on
 * success. */
int pgt_dump(const char *name, const char *path);
/* pg_ctl stop -m fast / start (same port and data), for outage tests. */
int pgt_server_stop(void);
int pgt_server_start(void);
/* Stops the cluster and removes its directory (idempotent). */
void pgt_stop(void);

#endif
