#!/bin/sh
# Ledger benchmark fragment for bench/BENCHMARKS.md (bench/out/ledger.md):
# writer rows/s, lone-row commit latency, and grouped usage queries over a
# generated ledger of LEDGER_ROWS rows (default 10,000,000, about a month
# of a busy deployment), on SQLite and, when the postgresql server package
# is installed, on PostgreSQL next to it over the very same rows:
#   - writer: rows submitted from 4 threads through pr_ledger_submit (the
#     real path: queue, writer thread, group commit), to a file, to
#     :memory: and to PostgreSQL (a private cluster the tool starts:
#     initdb in a temp dir, 127.0.0.1, fsync off);
#   - rows for the queries: generated in C into SQLite in one bulk
#     transaction (a fixed LCG: models, keys, errors, latencies), rollups
#     rebuilt; then the same rows COPYed into PostgreSQL (indexes dropped
#     for the copy and rebuilt), the rollups built there in SQL (hourly
#     cells in one GROUPING SETS scan, daily cells from the hourly ones);
#   - queries: every group_by over 30 days, hour-aligned and not, with and
#     without a key filter, best of 3.
# 10M rows take ~5 min and ~1.3 GB (SQLite) + ~2 GB (PostgreSQL) under
# /tmp, removed after.  LEDGER_PG=0 skips PostgreSQL.
#   sh bench/ledger.sh [BUILD]      (make bench runs it too)
set -u
BUILD=${1:-build/release}
ROWS=${LEDGER_ROWS:-10000000}
WROWS=${LEDGER_WRITER_ROWS:-200000}
DB=$(mktemp -u /tmp/llmux-ledger-bench-XXXXXX.db)
OUT=bench/out/ledger.md
mkdir -p bench/out
PG=""
if [ "${LEDGER_PG:-1}" != 0 ] && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    PG="--pg"
fi
CMD="$BUILD/tests/tool_ledger_bench --rows $ROWS --writer-rows $WROWS --threads 4 $PG"
echo "ledger benchmark: $ROWS rows (LEDGER_ROWS to change)${PG:+, SQLite and PostgreSQL}"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date +%s)
$CMD --db "$DB" >"$DB.txt" 2>"$DB.err"
rc=$?
T1=$(date +%s)
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
[ $rc = 0 ] || tail -n 5 "$DB.err"
{
echo "## Usage ledger: SQLite${PG:+ and PostgreSQL} (bench/ledger.sh, tests/tool_ledger_bench)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); command: \`$CMD\` (exit $rc, $((T1 - T0)) s); load average before $LOAD_BEFORE, after $LOAD_AFTER"
echo "- rows for the queries: generated in C into SQLite (one bulk transaction, a fixed LCG), rollups rebuilt${PG:+; the same rows COPYed into PostgreSQL (indexes dropped for the copy, rebuilt), rollups built in SQL there}. Writer rows go through pr_ledger_submit (group commit)."
[ -n "$PG" ] && echo "- PostgreSQL: $(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1 | sed 's|/usr/lib/postgresql/||; s|/bin||') on a private cluster (fsync off, 127.0.0.1) on the same machine; its lines come after the SQLite ones (\`postgres:\`, and the second writer/latency/query block)"
echo
echo '```'
cat "$DB.txt"
echo '```'
} >"$OUT"
rm -f "$DB" "$DB-wal" "$DB-shm" "$DB.txt" "$DB.err" "$DB.writer"*
echo "wrote $OUT"
