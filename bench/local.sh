#!/bin/sh
# bench/local.sh: the local engine as a server (local_engine/sched.c) on a
# random-weight q4_0 slice of a 1B llama (tests/tool_gguf_gen, as
# bench/engine.sh makes them; made once under $ENGINE_BENCH_MODELS, never
# committed), 2 threads, through tests/tool_sched_bench:
#   - aggregate generation tokens/s of 4 concurrent streams vs 1 (target
#     >= 2.5x),
#   - time to first token of a request sharing a 1500-token prefix with the
#     one before vs that first one (target <= 0.35x),
#   - the largest gap between two tokens of one stream with 8 concurrent
#     streams vs one stream alone (target <= 3x),
#   - beside those extremes (one descheduled step on a shared machine sets
#     them) the median and 99th-percentile inter-token gaps: the median
#     step of 1 and 4 streams gives the aggregate ratio without the noise,
#     the p99 of 8 streams vs the single stream's the fairness one,
#   - the gaps of 4 generating streams while 4 requests with 96-token
#     prompts join (max and p99, against the single stream's),
#   - the CPU time of one decode step of 1, 4 and 8 sequences (one thread,
#     median of 15): the steadiest figure when others share the cores,
#   - the steal time of each run's 1- and 8-stream parts: a pause of the
#     whole virtual machine stops every stream at once, and the fairness
#     target is also given over the runs without one.
# Then the same three targets on the whole 1B model (full-2048x22-q4_0, the
# TinyLlama shape, 620 MB, as bench/engine.sh makes it), LOCAL_BENCH_FULL_RUNS
# runs (default 3; 0: none): the slice's 176 MB can stay in a 300 MB
# last-level cache (the Xeons here), where one stream reads its weights from
# the cache and the batched steps are bound by the int8 dot products, which
# no real model's weights allow.
# Writes bench/out/local.md (bench/run.sh folds it into BENCHMARKS.md).
# Wall-clock figures on a shared machine: read them as noisy.
set -u
BUILD=${1:-build/release}
T=${LOCAL_BENCH_THREADS:-2}
LAYERS=${ENGINE_BENCH_LAYERS:-4}
MDIR=${ENGINE_BENCH_MODELS:-/tmp/llmux-bench-models}
GEN="$BUILD/tests/tool_gguf_gen"
TOOL="$BUILD/tests/tool_sched_bench"
OUT=bench/out/local.md
mkdir -p bench/out "$MDIR"
[ -x "$GEN" ] && [ -x "$TOOL" ] || { echo "local bench: build the tools first"; exit 1; }
# gen FILE LAYERS KV_HEADS: a random-weight q4_0 llama of the 1B's shape,
# once (the engine bench's files are the same).
gen() {
    [ -f "$1" ] && return 0
    echo "local bench: generating $1"
    "$GEN" --out "$1.part" --type q4_0 --n-embd 2048 --n-layer "$2" \
        --n-head 32 --n-head-kv "$3" --n-ff 5632 --n-vocab 32000 \
        --n-ctx 2048 --seed 1 && mv "$1.part" "$1" || { rm -f "$1.part"; exit 1; }
}
# runs FILE N: N tool_sched_bench JSON lines, one per run, back to back.
runs() {
    k=0
    while [ "$k" -lt "$2" ]; do
        "$TOOL" "$1" --threads "$T" --gen 64 --prefix 1500 || { echo "local bench: failed on $1" >&2; exit 1; }
        k=$((k + 1))
    done
}
f="$MDIR/slice-2048x${LAYERS}-q4_0.gguf"
gen "$f" "$LAYERS" 8
FULL_RUNS=${LOCAL_BENCH_FULL_RUNS:-3}
ff="$MDIR/full-2048x22-q4_0.gguf"
[ "$FULL_RUNS" -gt 0 ] && gen "$ff" 22 4
load=$(cut -d' ' -f1-3 /proc/loadavg)
# LOCAL_BENCH_RUNS runs (default 5) back to back: one stream's own rate
# moves by up to 1.5x between identical runs (the host's memory speed
# changes from minute to minute), so the table shows the run whose
# 4-stream ratio is the median, a second table every run's ratios, and in
# how many runs each target held.
RUNS=${LOCAL_BENCH_RUNS:-5}
ALL=$(runs "$f" "$RUNS") || exit 1
FALL=""
[ "$FULL_RUNS" -gt 0 ] && { FALL=$(runs "$ff" "$FULL_RUNS") || exit 1; }
j=$(printf '%s' "$ALL" | python3 -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
runs.sort(key=lambda d: d["agg4"] / d["agg1"] if d["agg1"] > 0 else 0)
print(json.dumps(runs[len(runs) // 2]))')
RUNS_PY='

import json, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
r = lambda a, b: a / b if b > 0 else 0
ttft = len(sys.argv) > 1
print("| run | tg 1 stream (t/s) | 4 streams vs 1 | by median steps | max gap 8 vs 1 | p99 gap 8 vs 1 | median gap 8 vs 1 |%s steal in the 1 / 8-stream runs (ms) |" % (" prefix TTFT 2nd vs 1st |" if ttft else ""))
print("|---|---|---|---|---|---|---|---|%s" % ("---|" if ttft else ""))
rows = []
for i, d in enumerate(runs):
    v = (r(d["agg4"], d["agg1"]), r(4 * d["med1"], d["med4"]), r(d["gap8"], d["gap1"]),
         r(d["p99_8"], d["p99_1"]), r(d["med8"], d["med1"]))
    rows.append(v)
    st = "%s / %s" % tuple("-" if d.get(k, -1) < 0 else "%.0f" % d[k]
                           for k in ("steal1", "steal8"))
    tt = " %.2fx |" % r(d["ttft_second"], d["ttft_first"]) if ttft else ""
    print("| %d | %.1f | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx |%s %s |" % ((i + 1, d["agg1"]) + v + (tt, st)))
med = [sorted(c)[len(c) // 2] for c in zip(*rows)]
print("| median | | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx |%s |" % (tuple(med) + (" |" if ttft else "",)))
n = len(rows)
print()
print("Targets held in: 4 streams >= 2.5x one stream %d of %d runs (by median steps %d); "
      "8 streams max gap <= 3x %d of %d (p99 %d, median %d)." % (
          sum(v[0] >= 2.5 for v in rows), n, sum(v[1] >= 2.5 for v in rows),
          sum(v[2] <= 3 for v in rows), n, sum(v[3] <= 3 for v in rows),
          sum(v[4] <= 3 for v in rows)) + (
          " Prefix TTFT <= 0.35x in %d of %d." % (sum(r(d["ttft_second"], d["ttft_first"]) <= 0.35 for d in runs), n) if ttft else ""))
# A pause of the whole virtual machine (the hypervisor running something
# else: steal time) stops all 8 streams at once, and one such step sets
# the max gap; the runs without any count for the scheduler.
calm = [v for v, d in zip(rows, runs) if d.get("steal1", -1) == 0 and d.get("steal8", -1) == 0]
if any(d.get("steal8", -1) < 0 for d in runs):
    print("The kernel reports no steal time here: every run counts as is.")
else:
    print("Runs in which the hypervisor took no time from this machine during the 1- and 8-stream runs "
          "(steal in /proc/stat, 10 ms resolution): %d of %d; in those the 8-stream max gap held <= 3x in %d, "
          "the p99 in %d." % (len(calm), n, sum(v[2] <= 3 for v in calm), sum(v[3] <= 3 for v in calm)))

'
num() { echo "$j" | sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
{
echo "## Local engine as a server: continuous batching, prefix cache, fairness (bench/local.sh)"
echo
echo "slice-2048x${LAYERS}-q4_0 (random weights), $T threads, tests/tool_sched_bench; load before: $load"
echo
echo "| figure | value | ratio | target |"
echo "|---|---|---|---|"
echo "| aggregate tg, 1 stream | $(num agg1) t/s | | |"
echo "| aggregate tg, 4 streams | $(num agg4) t/s | $(ratio "$(num agg4)" "$(num agg1)")x | >= 2.5x |"
echo "| TTFT, 1500-token prompt | $(num ttft_first) ms | | |"
echo "| TTFT, 2nd request sharing its 1500-token prefix | $(num ttft_second) ms | $(ratio "$(num ttft_second)" "$(num ttft_first)")x | <= 0.35x |"
echo "| max inter-token gap, 1 stream | $(num gap1) ms | | |"
echo "| max inter-token gap, 8 streams | $(num gap8) ms | $(ratio "$(num gap8)" "$(num gap1)")x | <= 3x |"
echo "| median gap (one step), 1 / 4 / 8 streams | $(num med1) / $(num med4) / $(num med8) ms | 4 streams: $(awk -v a="$(num med1)" -v b="$(num med4)" 'BEGIN { if (b > 0) printf "%.2f", 4 * a / b; else print "-" }')x tg | >= 2.5x |"
echo "| p99 gap, 1 stream / 8 streams | $(num p99_1) / $(num p99_8) ms | $(ratio "$(num p99_8)" "$(num p99_1)")x | <= 3x |"
echo "| median gap, 1 stream / 8 streams | $(num med1) / $(num med8) ms | $(ratio "$(num med8)" "$(num med1)")x | |"
echo "| max / p99 gap of 4 streams while 4 96-token prompts join | $(num gapj) / $(num p99_j) ms | $(ratio "$(num gapj)" "$(num gap1)")x / $(ratio "$(num p99_j)" "$(num p99_1)")x of 1 stream's | |"
echo "| CPU time of a decode step, 1 / 4 / 8 sequences (1 thread) | $(num cpu1) / $(num cpu4) / $(num cpu8) ms | 4: $(awk -v a="$(num cpu1)" -v b="$(num cpu4)" 'BEGIN { if (b > 0) printf "%.2f", 4 * a / b; else print "-" }')x tg, 8: $(ratio "$(num cpu8)" "$(num cpu1)")x step | |"
echo
echo "Every run ($RUNS, back to back; the table above is the median one by the 4-stream ratio):"
echo
printf '%s' "$ALL" | python3 -c "$RUNS_PY"

echo
echo "Raw (the median run): \`$j\`"
if [ -n "$FALL" ]; then
    echo
    echo "### The same targets on the whole 1B model"
    echo
    echo "full-2048x22-q4_0 (random weights, the TinyLlama shape: 22 layers, 4 kv heads, 620 MB), $T threads, the same tool and figures; unlike the slice, its weights do not fit in the last-level cache, as no real model's do. Every run ($FULL_RUNS, back to back, after the slice's):"
    echo
    printf '%s' "$FALL" | python3 -c "$RUNS_PY" ttft
fi
} > "$OUT"
cat "$OUT"
