#!/bin/sh
# Ledger benchmark fragment for bench/BENCHMARKS.md: writer rows/s, lone-row
# commit latency, and grouped usage queries over a generated ledger of
# LEDGER_ROWS rows (default 10,000,000, about a month of a busy deployment;
# generating it takes a few minutes and ~1.3 GB under /tmp, removed after).
set -u
BUILD=${1:-build/release}
ROWS=${LEDGER_ROWS:-10000000}
DB=$(mktemp -u /tmp/llmux-ledger-bench-XXXXXX.db)
OUT=bench/out/ledger.md
mkdir -p bench/out
echo "ledger benchmark: $ROWS rows (LEDGER_ROWS to change)"
"$BUILD/tests/tool_ledger_bench" --rows "$ROWS" --writer-rows 200000 --threads 4 --db "$DB" >"$DB.txt" 2>&1
rc=$?
{
echo "## Usage ledger (tests/tool_ledger_bench)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); command: \`$BUILD/tests/tool_ledger_bench --rows $ROWS --writer-rows 200000 --threads 4\` (exit $rc)"
echo
echo '```'
cat "$DB.txt"
echo '```'
} >"$OUT"
rm -f "$DB" "$DB-wal" "$DB-shm" "$DB.txt"
# PostgreSQL next to SQLite at the same row count (LEDGER_PG_ROWS, default
# 1,000,000: copying 10M rows in and building their rollups takes long on a
# small machine), on a private cluster the tool starts (needs postgresql).
PG_ROWS=${LEDGER_PG_ROWS:-1000000}
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "ledger benchmark on PostgreSQL: $PG_ROWS rows (LEDGER_PG_ROWS to change)"
    "$BUILD/tests/tool_ledger_bench" --rows "$PG_ROWS" --writer-rows 50000 --threads 4 --db "$DB" --pg >"$DB.txt" 2>/dev/null
    rc=$?
    {
    echo
    echo "## Usage ledger: PostgreSQL next to SQLite ($PG_ROWS rows)"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); command: \`$BUILD/tests/tool_ledger_bench --rows $PG_ROWS --writer-rows 50000 --threads 4 --pg\` (exit $rc); the PostgreSQL lines come after the SQLite ones"
    echo
    echo '```'
    cat "$DB.txt"
    echo '```'
    } >>"$OUT"
    rm -f "$DB" "$DB-wal" "$DB-shm" "$DB.txt" "$DB.writer"*
fi
echo "wrote $OUT"
