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
echo "wrote $OUT"
