#!/bin/sh
# bench/engine.sh BUILD_DIR: the local engine against llama.cpp, side by
# side in one run on this machine, per CPU feature set, with the memory
# bandwidth and the roofline.  Writes bench/out/engine.md (bench/run.sh
# appends it to bench/BENCHMARKS.md).
#
# Models: $LLMUX_TEST_DATA/models/stories260K.gguf (real, F32, tiny),
# random-weight llama "slices" of a 1B model written by tool_gguf_gen into
# $ENGINE_BENCH_MODELS (default /tmp/llmux-bench-models, never the repo):
# n_embd 2048, n_head 32, n_head_kv 8, n_ff 5632, n_vocab 32000,
# ENGINE_BENCH_LAYERS layers (default 4), one file per type in
# ENGINE_BENCH_TYPES (default "q4_0 q8_0 q4_k"); and full-size models in
# the TinyLlama shape (22 layers, n_head_kv 4: 1.1 B parameters, 0.6 GiB
# in q4_0, far more than the last-level cache) for each type in
# ENGINE_BENCH_FULL (default "q4_0"; "" skips them); and a mixture of
# experts in Mixtral's layout for each type in ENGINE_BENCH_MOE (default
# "q4_0"; "" skips it): the slice's 4 layers with 8 experts of n_ff 2816,
# 2 used, so that a token reads the same bytes as the dense slice's;
# and a gpt-oss slice when ENGINE_BENCH_OSS is not "" (default "q8_0":
# gpt-oss-20b's shape, 2880 wide, 64 heads of 64 (8 kv), 4 layers of 32
# experts of 2880 with 4 used, the window 128 on the even layers, n_vocab
# 32000, every weight of that type but the experts, which are MXFP4 as in
# the published files), compared only with $LLAMA_BENCH_OSS (default
# /tmp/llama-new/build/bin/llama-bench: a llama.cpp recent enough to read
# gpt-oss, which the c392e50 of $LLAMA_BENCH is not; its column says n/a
# without one); and a DeepSeek-V2-Lite-like slice for each type in
# ENGINE_BENCH_DS (default "q4_0"; "" skips it): 2048 wide, 16 heads
# (nope 128, rope 64, value 128), latent 512, q LoRA 1536 (llama.cpp
# c392e50 reads a q LoRA only, or 27 layers), 4 layers of which the first
# dense (n_ff 10944) and the others 64 experts of 1408 with 6 used and 2
# shared, n_vocab 32000, in the attn_kv_b layout c392e50 reads.
# Files are made once and reused.
#
# CPU feature sets: llmux runs once per set this CPU and binary offer, each
# chosen by environment variables:
#   native   nothing set: AMX for prompt batches where usable, the best SIMD
#   no-amx   LLMUX_NO_AMX=1 (when the CPU has AMX-INT8)
#   avxvnni  LLMUX_NO_AMX=1 LLMUX_SIMD=avxvnni (AVX2 + AVX-VNNI, the
#            level of CPUs with AVX-VNNI but no AVX-512; when the CPU has
#            both and the binary knows LLMUX_SIMD)
#   avx2     LLMUX_NO_AMX=1 LLMUX_SIMD=avx2 (when the CPU has AVX-512 and
#            the binary knows LLMUX_SIMD)
# llama.cpp runs once per model and build: its native build ($LLAMA_BENCH)
# and, when they exist, builds restricted to one level
# ($LLAMA_BENCH_AVX2, $LLAMA_BENCH_AVXVNNI, $LLAMA_BENCH_NOAMX; defaults
# /tmp/llama.cpp/build-avx2, build-avxvnni, build-noamx /bin/llama-bench,
# made with GGML_NATIVE=OFF and only that level's GGML_* options on).
# Each llmux set is compared with the llama.cpp build of its own level
# when that build exists, else with the native one; the table names the
# build of each row (native rows always against the native build).
#
# Kernels: tests/tool_kernels, one core's GEMM and GEMV throughput per
# type and level (a table of its own under the main one).
#
# Memory bandwidth: tests/tool_bandwidth (streaming read over 4x the LLC,
# 1 and 2 threads, best of 5).  Roofline: a generated token streams every
# weight but the embedding table (tool_bandwidth --weights), so
#   roofline % = tg t/s x bytes per token / bandwidth (T threads)
# is how close generation is to the memory limit.
#
# Each model: `llmux bench -p P -n N --threads T --json`, then llama.cpp's
# llama-bench on the same file with the same -p/-n/-t, when $LLAMA_BENCH
# (default /tmp/llama.cpp/build/bin/llama-bench) exists; it is never
# downloaded or built here (its column says so when absent).
#   ENGINE_BENCH_P (128), ENGINE_BENCH_N (64), ENGINE_BENCH_N_FULL (32),
#   ENGINE_BENCH_BATCH (512: llmux --batch, prompt tokens per forward
#   pass, as llama-bench's default n_ubatch 512, so both engines take the
#   prompt in one pass; "" leaves llmux's default of 32),
#   ENGINE_BENCH_THREADS (2), ENGINE_BENCH_REPS (3: -r of each call; both
#   engines warm up once untimed and report the mean of the -r passes),
#   ENGINE_BENCH_ROUNDS (3: every model through every engine in turn this
#   many times; the table keeps each engine's best figure)
set -u
BUILD=${1:-build/release}
P=${ENGINE_BENCH_P:-128}
N=${ENGINE_BENCH_N:-64}
NF=${ENGINE_BENCH_N_FULL:-32}
B=${ENGINE_BENCH_BATCH-512}
T=${ENGINE_BENCH_THREADS:-2}
R=${ENGINE_BENCH_REPS:-3}
ROUNDS=${ENGINE_BENCH_ROUNDS:-3}
LAYERS=${ENGINE_BENCH_LAYERS:-4}
TYPES=${ENGINE_BENCH_TYPES:-q4_0 q8_0 q4_k}
FULL=${ENGINE_BENCH_FULL-q4_0}
MDIR=${ENGINE_BENCH_MODELS:-/tmp/llmux-bench-models}
LB=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
LB_AVX2=${LLAMA_BENCH_AVX2:-/tmp/llama.cpp/build-avx2/bin/llama-bench}
LB_AVXVNNI=${LLAMA_BENCH_AVXVNNI:-/tmp/llama.cpp/build-avxvnni/bin/llama-bench}
LB_NOAMX=${LLAMA_BENCH_NOAMX:-/tmp/llama.cpp/build-noamx/bin/llama-bench}
LB_OSS=${LLAMA_BENCH_OSS:-/tmp/llama-new/build/bin/llama-bench}
: "${LLMUX_TEST_DATA:=$(cd .. && pwd)/shared/data}"
OUT=bench/out/engine.md
LLMUX="$BUILD/llmux"
GEN="$BUILD/tests/tool_gguf_gen"
BW="$BUILD/tests/tool_bandwidth"
TMP=$(mktemp -d /tmp/llmux-engine-bench-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
mkdir -p bench/out "$MDIR"

if [ ! -x "$LLMUX" ]; then
    echo "engine bench: $LLMUX not built"; exit 1
fi

load() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD0=$(load)

# --- CPU ------------------------------------------------------------------
CPU=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)
CPUID=$(awk -F': ' '/^cpu family/ {f=$2} /^model[ \t]*:/ {m=$2} /^stepping/ {s=$2; exit} END {printf "family %s model %s stepping %s", f, m, s}' /proc/cpuinfo)
FLAGS=$(sed -n 's/^flags[^:]*: //p' /proc/cpuinfo | head -n 1)
has() { case " $FLAGS " in *" $1 "*) return 0 ;; esac; return 1; }
SIMDF=""
for f in sse4_2 avx f16c fma avx2 avx_vnni avx512f avx512bw avx512vl \
    avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_int8 amx_bf16; do
    has "$f" && SIMDF="$SIMDF $f"
done

variants="native"
has amx_int8 && variants="$variants no-amx"
if has avx512f && grep -q LLMUX_SIMD "$LLMUX" 2>/dev/null; then
    has avx_vnni && variants="$variants avxvnni"
    variants="$variants avx2"
fi
venv() { # variant -> environment assignments
    case "$1" in
    native) echo "" ;;
    no-amx) echo "LLMUX_NO_AMX=1" ;;
    avxvnni) echo "LLMUX_NO_AMX=1 LLMUX_SIMD=avxvnni" ;;
    avx2) echo "LLMUX_NO_AMX=1 LLMUX_SIMD=avx2" ;;
    esac
}

# --- memory bandwidth ------------------------------------------------------
bw1="-"; bw2="-"; bwmib="-"
if [ -x "$BW" ]; then
    echo "engine bench: memory bandwidth"
    if "$BW" --threads "1,$T" --json >"$TMP/bw.json" 2>"$TMP/bw.err"; then
        bw1=$(sed -n 's/.*"gbs_1":\([0-9.]*\).*/\1/p' "$TMP/bw.json")
        bw2=$(sed -n "s/.*\"gbs_$T\":\([0-9.]*\).*/\1/p" "$TMP/bw.json")
        bwmib=$(sed -n 's/.*"mib":\([0-9]*\).*/\1/p' "$TMP/bw.json")
    fi
fi

# --- one core's kernels -----------------------------------------------------
KT="$BUILD/tests/tool_kernels"
: >"$TMP/kern.md"
if [ -x "$KT" ]; then
    echo "engine bench: kernels"
    "$KT" >"$TMP/kern.md" 2>"$TMP/kern.err" ||
        echo "(tool_kernels failed: $(head -n 1 "$TMP/kern.err"))" >"$TMP/kern.md"
fi

# --- models ---------------------------------------------------------------
gen() { # file type layers n_head_kv [n_ff [tool_gguf_gen options]]
    [ -s "$1" ] && return 0
    if [ ! -x "$GEN" ]; then
        echo "engine bench: $GEN not built; skipping $(basename "$1")"
        return 1
    fi
    echo "engine bench: generating $1"
    gf="$1"; gt="$2"; gl="$3"; gkv="$4"; gff=${5:-5632}
    shift 4; [ $# -gt 0 ] && shift
    "$GEN" --out "$gf.part" --type "$gt" --n-embd 2048 --n-layer "$gl" \
        --n-head 32 --n-head-kv "$gkv" --n-ff "$gff" --n-vocab 32000 \
        --n-ctx 2048 --seed 1 "$@" && mv "$gf.part" "$gf" || { rm -f "$gf.part"; return 1; }
}
models=""
S="$LLMUX_TEST_DATA/models/stories260K.gguf"
[ -f "$S" ] && models="$S"
for t in $TYPES; do
    f="$MDIR/slice-2048x${LAYERS}-$t.gguf"
    gen "$f" "$t" "$LAYERS" 8 && models="$models $f"
done
for t in $FULL; do
    f="$MDIR/full-2048x22-$t.gguf"
    gen "$f" "$t" 22 4 && models="$models $f"
done
for t in ${ENGINE_BENCH_MOE-q4_0}; do
    f="$MDIR/moe-2048x4x8-$t.gguf"
    gen "$f" "$t" 4 8 2816 --experts 8,2 && models="$models $f"
done
for t in ${ENGINE_BENCH_DS-q4_0}; do
    f="$MDIR/ds2-2048x4x64-$t.gguf"
    if [ ! -s "$f" ] && [ -x "$GEN" ]; then
        echo "engine bench: generating $f"
        "$GEN" --out "$f.part" --type "$t" --arch deepseek2 --n-embd 2048 \
            --n-layer 4 --n-head 16 --n-head-kv 16 --n-ff 10944 \
            --n-vocab 32000 --n-ctx 2048 --experts 64,6 --n-ff-exp 1408 \
            --kv-lora 512 --q-lora 1536 --ds-heads 128,64,128 \
            --dense-lead 1 --n-shared 2 --seed 1 && mv "$f.part" "$f" ||
            rm -f "$f.part"
    fi
    [ -s "$f" ] && models="$models $f"
done
OSS=""
for t in ${ENGINE_BENCH_OSS-q8_0}; do
    f="$MDIR/oss-2880x4x32-$t-mxfp4.gguf"
    if [ ! -s "$f" ] && [ -x "$GEN" ]; then
        echo "engine bench: generating $f"
        "$GEN" --out "$f.part" --type "$t" --exp-type mxfp4 --arch gpt-oss \
            --n-embd 2880 --n-layer 4 --n-head 64 --n-head-kv 8 --head-dim 64 \
            --n-ff 2880 --n-ff-exp 2880 --experts 32,4 --sliding-window 128 \
            --n-vocab 32000 --n-ctx 2048 --seed 1 && mv "$f.part" "$f" ||
            rm -f "$f.part"
    fi
    [ -s "$f" ] && models="$models $f" && OSS="$OSS $f"
done
is_oss() { case " $OSS " in *" $1 "*) return 0 ;; esac; return 1; }
[ -n "$models" ] || { echo "engine bench: no model"; exit 1; }

# --- runs -----------------------------------------------------------------
# num FIELD FILE: the number after "FIELD": in a one-line JSON object
jnum() { sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" "$2" | head -n 1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
# roof TPS BYTES GBS: percent of the bandwidth roofline
roof() { awk -v t="$1" -v b="$2" -v g="$3" 'BEGIN { if (t + 0 > 0 && b + 0 > 0 && g + 0 > 0) printf "%.0f%%", 100 * t * b / (g * 1e9); else print "-" }'; }

fmt() { case "$1" in [0-9]*) printf '%.2f' "$1" ;; *) printf '%s' "$1" ;; esac; }
# best OLD NEW: the larger of two tokens/s figures ("" / words lose)
best() {
    case "$2" in [0-9]*) ;; *) echo "$1"; return ;; esac
    case "$1" in [0-9]*) ;; *) echo "$2"; return ;; esac
    awk -v a="$1" -v b="$2" 'BEGIN { print (b + 0 > a + 0) ? b : a }'
}
have_lb=0
[ -x "$LB" ] && have_lb=1
lbc=""
lbc_oss=""
# llama.cpp builds: native, and each level build that exists for a set
# this run measures
lbpath() { # build -> its llama-bench
    case "$1" in
    native) echo "$LB" ;;
    avx2) echo "$LB_AVX2" ;;
    avxvnni) echo "$LB_AVXVNNI" ;;
    no-amx) echo "$LB_NOAMX" ;;
    esac
}
lbuilds=""
if [ $have_lb = 1 ]; then
    lbuilds="native"
    for v in $variants; do
        [ "$v" = native ] && continue
        [ -x "$(lbpath "$v")" ] && lbuilds="$lbuilds $v"
    done
fi
lbfor() { # llmux set -> the llama.cpp build it is compared with
    case " $lbuilds " in *" $1 "*) echo "$1" ;; *) echo native ;; esac
}
# What a build was made with: GGML_NATIVE and the GGML_ ISA options on,
# from the CMakeCache.txt beside its bin/ (BUILD/bin/llama-bench).
lbflags() {
    c="$(dirname "$(dirname "$1")")/CMakeCache.txt"
    [ -f "$c" ] || { echo "options unknown"; return; }
    nat=$(sed -n 's/^GGML_NATIVE:BOOL=//p' "$c")
    on=$(sed -n 's/^GGML_\(AVX[A-Z0-9_]*\|FMA\|F16C\|AMX[A-Z0-9_]*\):BOOL=ON$/\1/p' "$c" | tr '\n' ' ' | sed 's/ $//')
    if [ "$nat" = ON ]; then
        echo "GGML_NATIVE=ON (every extension of this CPU)"
    else
        echo "GGML_NATIVE=OFF, on: ${on:-none}"
    fi
}
ntok() { case "$1" in */full-*) echo "$NF" ;; *) echo "$N" ;; esac; }

# One llmux run: sets lpp ltg desc (or "error").
run_llmux() { # model tag env
    if env $3 "$LLMUX" bench --model "$1" -p "$P" -n "$(ntok "$1")" -r "$R" \
        --threads "$T" ${B:+--batch "$B"} --json >"$TMP/$2.json" \
        2>"$TMP/$2.err"; then
        # "pp":{..."tokens_per_s":X}, "tg":{..."tokens_per_s":Y}
        lpp=$(sed -n 's/.*"pp":{[^}]*"tokens_per_s":\([0-9.]*\).*/\1/p' "$TMP/$2.json")
        ltg=$(sed -n 's/.*"tg":{[^}]*"tokens_per_s":\([0-9.]*\).*/\1/p' "$TMP/$2.json")
        desc=$(sed -n 's/.*"desc":"\([^"]*\)".*/\1/p' "$TMP/$2.json")
    else
        lpp="error"; ltg="error"
        desc="llmux: $(head -n 1 "$TMP/$2.err")"
    fi
}
# One llama-bench run: sets cpp ctg (jsonl: one object per test; its own
# warm-up run is not counted by it).
run_lb() { # model tag llama-bench
    if "$3" -m "$1" -p "$P" -n "$(ntok "$1")" -t "$T" -r "$R" -o jsonl \
        >"$TMP/$2.jsonl" 2>"$TMP/$2.err"; then
        grep '"n_gen": *0[,}]' "$TMP/$2.jsonl" >"$TMP/$2.pp"
        grep '"n_prompt": *0[,}]' "$TMP/$2.jsonl" >"$TMP/$2.tg"
        cpp=$(jnum avg_ts "$TMP/$2.pp"); ctg=$(jnum avg_ts "$TMP/$2.tg")
        [ -n "$cpp" ] || cpp="?"; [ -n "$ctg" ] || ctg="?"
        lbc=$(sed -n 's/.*"build_commit": *"\([^"]*\)".*/\1/p' "$TMP/$2.jsonl" | head -n 1)
    else
        cpp="error"; ctg="error"
        tail -n 3 "$TMP/$2.err"
    fi
}

# Rounds: every model through every llmux feature set and llama.cpp in
# turn, ROUNDS times; the best figure of each is kept (on a shared machine
# the best run is the one least disturbed, and interleaving gives all the
# same chances).
rnd=1
while [ "$rnd" -le "$ROUNDS" ]; do
    i=0
    for m in $models; do
        i=$((i + 1))
        for v in $variants; do
            [ "$v" != native ] && [ "$m" = "$S" ] && continue
            echo "engine bench: round $rnd/$ROUNDS: $(basename "$m") [$v]"
            run_llmux "$m" "llmux$i.$v.$rnd" "$(venv "$v")"
            k="${i}_$(echo "$v" | tr -c 'a-z0-9\n' '_')"
            eval "bpp$k=\$(best \"\${bpp$k:-}\" \"\$lpp\")"
            eval "btg$k=\$(best \"\${btg$k:-}\" \"\$ltg\")"
            eval "desc$i=\$desc"
        done
        if is_oss "$m" && [ -x "$LB_OSS" ]; then
            # gpt-oss: the newer llama.cpp's native build (the header's
            # build commit stays c392e50's)
            lbc_keep=$lbc
            echo "engine bench: round $rnd/$ROUNDS: $(basename "$m") [llama.cpp (gpt-oss) native]"
            k="${i}_native"
            run_lb "$m" "lb$k.$rnd" "$LB_OSS"
            lbc_oss=$lbc
            lbc=$lbc_keep
            eval "cbpp$k=\$(best \"\${cbpp$k:-}\" \"\$cpp\")"
            eval "cbtg$k=\$(best \"\${cbtg$k:-}\" \"\$ctg\")"
        fi
        for lbb in $lbuilds; do
            [ "$lbb" != native ] && [ "$m" = "$S" ] && continue
            is_oss "$m" && continue
            echo "engine bench: round $rnd/$ROUNDS: $(basename "$m") [llama.cpp $lbb]"
            k="${i}_$(echo "$lbb" | tr -c 'a-z0-9\n' '_')"
            run_lb "$m" "lb$k.$rnd" "$(lbpath "$lbb")"
            eval "cbpp$k=\$(best \"\${cbpp$k:-}\" \"\$cpp\")"
            eval "cbtg$k=\$(best \"\${cbtg$k:-}\" \"\$ctg\")"
        done
    done
    rnd=$((rnd + 1))
done

rows=""
descs=""
i=0
for m in $models; do
    i=$((i + 1))
    name=$(basename "$m")
    size=$(stat -c %s "$m" | awk '{ printf "%.1f", $1 / 1048576 }')
    wbytes=""
    if [ -x "$BW" ] && "$BW" --weights "$m" >"$TMP/w$i.json" 2>/dev/null; then
        wbytes=$(jnum weights_per_token_bytes "$TMP/w$i.json")
    fi
    for v in $variants; do
        [ "$v" != native ] && [ "$m" = "$S" ] && continue
        k="${i}_$(echo "$v" | tr -c 'a-z0-9\n' '_')"
        eval "lpp=\${bpp$k:-} ltg=\${btg$k:-}"
        cpp="n/a"; ctg="n/a"; lbb="-"
        if is_oss "$m"; then
            # against the gpt-oss-capable build's native run, every set
            if [ -x "$LB_OSS" ]; then
                lbb="native (gpt-oss: ${lbc_oss:-?})"
                eval "cpp=\${cbpp${i}_native:-} ctg=\${cbtg${i}_native:-}"
            fi
        elif [ $have_lb = 1 ]; then
            lbb=$(lbfor "$v")
            kb="${i}_$(echo "$lbb" | tr -c 'a-z0-9\n' '_')"
            eval "cpp=\${cbpp$kb:-} ctg=\${cbtg$kb:-}"
        fi
        rows="$rows
| $name | $size MiB | $v | $lbb | $(fmt "$lpp") | $(fmt "$cpp") | $(ratio "$lpp" "$cpp") | $(fmt "$ltg") | $(fmt "$ctg") | $(ratio "$ltg" "$ctg") | $(roof "$ltg" "$wbytes" "$bw2") | $(roof "$ctg" "$wbytes" "$bw2") |"
    done
    eval "desc=\$desc$i"
    descs="$descs
- \`$name\`: $desc; $(awk -v b="${wbytes:-0}" 'BEGIN { printf "%.1f MiB", b / 1048576 }') of weights read per generated token"
done
LOAD1=$(load)

# Notes measured by hand; kept here so each run reprints them.
notes() {
    cat <<'NOTES'
### Notes (2026-12-01, issue 11: AMX prefill, pool, bandwidth probe)

Measured by hand on the machine above (the CPU reports itself only as
"Intel Xeon Processor"; family 6 model 207 is Emerald Rapids, Sapphire
Rapids' successor with the same AMX-INT8/BF16 and AVX-512 VNNI/BF16/FP16).
Other sessions shared its 2 cores (load 1.5-4 throughout), so single
runs varied by 2x or more; figures below are best-of-N, and shares of
perf samples (which do not depend on the load) were used to choose
between variants.

- Prompt batches of 32 or more tokens with Q8_0 or Q4_0 (64 for Q4_K, Q5_K, Q6_K;
  le_amx_min_tok, measured crossovers in local_engine/le_int.h)
  weights run as an AMX-INT8 GEMM (local_engine/quants_amx.c, bit-exact
  to its plain C twin in amx.c, tests/test_amx.c): 16 weight rows x 16
  tokens per tile, one TDPBSSD per 32-value block (16 for Q6_K), the
  int32 tile stored and scaled into float accumulators in AVX-512.  One
  core, 2048x2048: Q8_0/Q4_0 190-260 GMAC/s at 128 tokens and 120-190 at
  32, Q4_K/Q5_K 150-205, Q6_K 56-63, against 9-17 GMAC/s for the vec_dot
  path.  Each tile dot costs a 1 KiB tile store and reload (the per-block
  scales allow no longer integer sums), which with the tile loads is
  most of the tile unit's time; the scaling overlaps it only in part.
- LLMUX_NO_AMX=1 (the no-amx rows) is the path every machine without AMX
  takes: there the prompt runs the repacked AVX-512 (or AVX2) GEMM
  (repack.c's layout, 16 rows x up to 8 tokens per kernel call).
- Where a 128-token prompt's time goes now (perf, q4_k / q4_0 slices, 2
  threads, default --batch 32): the AMX GEMM 52% / 46%; the second thread
  waiting while the first runs serial work 14% (the activation quantiser
  q8_K/q8_0_from_float, scalar and single-threaded before each product,
  6-9% by itself; rmsnorm, rope, silu, residual adds); the output matrix
  (2048 x 32000, one token per batch: a GEMV) 6-9%, four times per prompt
  with batches of 32; attention 8-10%.
- Best of 7 interleaved runs per cell (pp128 t/s, 2 threads, load
  1.5-5, slices): llmux with the default --batch 32 / with the prompt in
  one pass (--batch 128) / LLMUX_NO_AMX=1 with --batch 32 / llama.cpp:
  q4_0 549 / 740 / 162 / 924; q8_0 587 / 804 / 134 / 1118; q4_k 657 /
  794 / 167 / 917.  So in one pass 0.80, 0.72 and 0.87 of llama.cpp, and
  3.4-4.4x the no-AMX path.  One pass is faster because the output matrix
  (a GEMV for the last token) runs once instead of four times and each
  unpacked weight panel serves 8 token tiles instead of 2; the engine's
  default stays 32 (model.c), raising it is one line at ~86 KiB of
  scratch per batch token for these widths.  The table above uses one
  pass (ENGINE_BENCH_BATCH).
- Still behind llama.cpp in prompt speed, and why: the serial activation
  quantiser and the output GEMV above (neither is in the AMX GEMM), and
  the GEMM's per-block tile store.  Generation is the GEMV kernels' work
  (a separate change); the roofline column says how far each is from the
  memory limit on the full-size model.
- Pool (pool.c): between the steps of a forward pass workers and the
  caller spin (pause, then sched_yield) instead of sleeping, and sleep
  after 3 ms without work.  Micro-benchmark (2 threads, 100 us of work per
  step): with 100 us of serial work between steps the overhead per step
  fell from 7-9 us to 1-2 us, with 500 us from 22-25 us to 2 us.

### Notes (2026-12-01, issue 11: one copy of the weights, AMX scaling, threaded quantiser)

Same machine; 7 sessions shared its 2 cores while this was done (load
average 2-9), so wall-clock A/B runs of whole benchmarks swung by 2-5x
between rounds (llama.cpp's tg fell to 1.5-7 t/s at load 7-9) and none
is quoted as a result.  Kernel figures below are per-thread CPU time,
best of 5-9 calls, from a scratch driver linked against libllmux.a;
single runs of those still varied by up to 1.5x between minutes, so
only ratios taken within one run are compared.

- The last-level cache is 300 MiB.  The q8_0 slice reads 249 MiB of
  weights per generated token, so it lives at the cache's edge: in the
  table before this change its tg was 85 t/s with AMX prefill and 100
  t/s without (the same GEMV kernels), because the AMX GEMM read the GGUF
  mapping and the GEMV the repacked copy, 2 x 316 MiB through the cache.
  Now the repacked layout is the AMX B operand as it is (the 16-row x
  4-byte interleave is TDPBSSD's B layout): Q8_0 and Q4_0 prompt batches
  read only the repacked copy (quants_amx.c packed_gemm), so the GGUF
  mapping of those matrices is read once, at load.  Bit-identical to the
  AMX twin (tests/test_amx.c test_gemm_packed).  Q4_K/Q5_K/Q6_K batches
  still read the mapping (their AMX panels are unpacked from it).
- Single-thread GEMV from the L3 (70 MB of repacked weights, n_embd
  2048): Q8_0 21-24 GB/s, 99-100% of a plain AVX-512 read of the same
  bytes in the same run; Q4_0 93-101%, Q4_K 84-97%; the AVX2 Q8_0 kernel
  94-101%.  At 279 MB (beyond what the cache keeps) both fall to 12-14
  GB/s.  So generation is at the memory limit per thread; the q8_0 slice
  figure depends on how much of it the cache holds.
- AMX GEMM: GCC 12's _tile_stored clobbers all memory, which kept the 16
  float accumulators of each output tile in memory (a load and a store
  per row and block beside the 1 KiB tile store); a tilestored naming the
  bytes it writes keeps them in registers.  One core, against the AVX-512
  VNNI GEMM in the same run: 2048x5632 Q8_0 at 128 tokens 1.2x -> 1.45x
  (~175 vs ~122 GMAC/s), Q4_0 1.4x; 2048x2048 at 32 tokens 1.3x.  What
  bounds it now (perf, cpu-clock samples inside the tile loop): the tile
  unit itself, tilestored/tilezero of the C tiles and the tile loads (~70%
  of the samples); the per-block scales allow no longer integer sums.
  Inside the model the gain did not show: perf samples of a q8_0 prompt
  (pp128 x 10, 2 threads), GEMM over attention, were 3.1-3.7 with this
  and the packed-layout change and 3.4-3.5 before (a 15% cheaper GEMM
  would give ~2.9); that ratio itself moved by 10% between runs of one
  binary.  A prefetch of the next group during the first token tile was
  tried and left out (no difference that this measure could see).
- Expected, not yet measured on a quiet machine: q8_0 tg with AMX prefill
  at the no-amx row's figure (the same GEMV, now after a prefill that
  touched the same copy); wall-clock A/B runs here (interleaved,
  llmux before / after / llama-bench, 3-5 rounds) swung 2-5x per round.
- The activation quantiser (from_float and the prep rows) runs across the
  pool for batches of 4+ rows (repack.c le_quant_rows); it was serial
  before each product (6-9% of a prompt in the perf profile above).
- AVX2 Q8_0 GEMM: 2 tokens per weight load (the int32 sums kept as one
  chain per accumulator; GCC's reassociated tree spilled): one core
  2048x2048x128 37 -> 44-47 GMAC/s (AVX-512 138-151 in the same runs).
  AVX2 stays ALU-bound: 4 instructions per 32 multiply-adds for Q8_0 (no
  vpdpbusd), 2 for the nibble types.
- Where a 128-token q8_0 prompt goes now (perf, 2 threads, one pass):
  the AMX tile loop 43% of all samples (load and repacking included),
  attention 13-16% (one f16 dot per query and key, exp), the pool's
  waits 7%.
- Feature set avxvnni added to the table (AVX2 + AVX-VNNI, no AMX): the
  level of CPUs with AVX-VNNI but no AVX-512.  Q4_0 and Q8_0 have VNNI
  kernels there; Q4_K runs the AVX2 one.

### Notes (2026-12-01, issue 11: where a 128-token prompt went, and what changed)

Same machine.  Five other sessions shared its 2 cores throughout (load
average 2-10), so no wall-clock figure below is final; the table above
is the lead's quiet rerun's business.  Time shares come from perf
cpu-clock samples of `llmux bench -p 128 -n 0 -r 6..10 --threads 2
--batch 512` (shares within one run barely depend on the load), and the
choices were made on ratios taken inside one run.

- Where a q4_0 slice's prompt went before (perf, 10 passes, load
  included): the AMX tile loop 50% and packed_gemm (the Q4_0 unpack,
  scales) 6%; attention 20% (attention_heads 6.6%, one F16 vec_dot call
  per position 5.8%, one to_float per position 3.6%, expf ~3%) against
  0.6% of the multiply-adds; the serial per-token steps on the caller
  (rmsnorm, rope and the KV store, silu, residual adds) ~9% while the
  other thread spun (spin_step 3-8%); clearing pages on first touch 6%.
- Attention (attn.c, attn_avx512.c; head sizes 64 and 128, F16 cache):
  the query in registers against every key, the output head in
  registers across every value row.  Same values bit for bit, scores
  the same exact products summed in double in another order
  (tests/test_amx.c test_attn_f16; the greedy text at every ISA level in
  test_model test_levels_same_text).  Samples of attention_heads and
  its kernels over those of tile_gemm + packed_gemm in one run: 0.29
  before, 0.15 after.
- The per-token steps run as pool jobs over token shares (model.c
  tok_steps; bit-identical).  spin_step 3-8% -> 2-4% of the samples.
- `llmux bench` runs one untimed warm-up pass first, as llama-bench
  does.  The first pass of a process faults in the scratch of --batch
  512 (perf stat: 5372 minor faults for load + one pp128 pass, 2103 for
  load + a 1-token pass, 9 more for a second pass): with -r 1 every
  timed llmux figure carried that, llama.cpp's none.  That and the load
  are the two causes of the 540-870 t/s swings I could find.
- AMX Q8_0/Q4_0 GEMM: the quantiser also writes the Q8_0 activations
  as contiguous 16 x 32-byte A tiles (s->qtile, n_batch x widest row
  bytes: 2.9 MiB at --batch 512, 180 KiB at the default 32), and the
  packed GEMM walks K in chunks of 32 blocks over every token tile with
  the float accumulators parked in between (same order of the sums:
  bit-identical to the twin), each chunk's Q4_0 nibbles unpacked just
  before use, so a chunk's A and B stay in L1.  GCC 12 kept the 16
  accumulators of tile_gemm as stack arrays and stored all 16 after
  every block (visible in the object code); named variables removed
  those stores.  Threads take 4 groups at a time from a counter instead
  of a fixed half each, so one thread slowed by another process no
  longer holds the step.  tool_kernels, one core, 2048x5632x128, load
  3-7, CPU time best of 7: q4_0 amx 132-184 GMAC/s with A tiles,
  126-149 reading the strided rows (runs minutes apart: a hint, not a
  figure).
- A microbenchmark of one 16x16x32 tile block on one core (data in L1,
  best of 6 at load ~3): TDPBSSD alone 11 ns (chained); with its two
  tile loads, tilezero and tilestored 16.5 ns; the AVX-512 scaling of a
  stored C tile (16 x cvt, mul, fma) 13 ns; both together 26.6 ns with
  A tiles (31 ns with the strided rows): the two add up rather than
  overlap, and still do when the scaling reads a buffer the tiles never
  write (no dependency at all; load 6: tiles 32 ns, scaling 25, both 54,
  both without the dependency 69), so the tile instructions and the
  AVX-512 scaling compete for the same issue resources; dropping the
  tile store leaves 45.  So what bounds the AMX GEMM is still the
  32-value block:
  each TDPBSSD's C is stored and scaled because the per-block scales
  allow no longer integer sums.  Tried and left out (no difference
  this machine could show): C slots spaced so that the store 8 blocks
  ahead and the loads do not alias at 4 KiB (micro: 27.0 vs 27.9 ns);
  prefetching the next K chunk and the next group's weights during a
  chunk's token tiles, to L2 or L1 (the Q4_0 unpack's first load still
  takes ~60% of packed_gemm's own samples, ~4% of a prompt).
- Interleaved A/B, pp128 t/s, q4_0 slice, `-r 3`, load 5.7-6.2, 8
  rounds: the tree before this work mean 287 / best 422, with the
  changes up to the group counter mean 341 / best 459 (6 rounds of 8
  faster).  At loads of 6-8 llama.cpp's pp128 fell to 22-130 t/s in the
  same rounds (its threads spin in its barrier and lose the cores)
  while llmux held 170-460; no ratio is quoted from those rounds.
  The same A/B on the q4_k slice (6 rounds, load 5.8-6.6): mean 235 ->
  253, 4 rounds of 6 faster; tg32 of the q4_0 slice (5 rounds): 21-33
  -> 21-33 t/s, never slower by more than 1%.
- Native against no-amx, the same binary interleaved (q4_0 slice, 6
  rounds, load 5.8-6.2): 212-290 vs 156-193 t/s, native 1.3-1.5x ahead
  in every round; perf gives the AMX GEMM ~1.4x fewer samples than the
  AVX-512 one inside a run.  In the last quiet table above no-amx's q4_0
  pp (838) was above native's (667): best of 2 single passes with no
  warm-up, which the warm-up and ENGINE_BENCH_REPS 3 (now the default)
  address.
- Not measured on a quiet machine: the pp ratios against llama.cpp
  after these changes (the lead's rerun).
NOTES
}

# --- report ---------------------------------------------------------------
{
echo "## Local engine vs llama.cpp (bench/engine.sh)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); llmux commit $(git rev-parse --short HEAD 2>/dev/null)"
echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $CPU ($CPUID); load average before/after: $LOAD0 / $LOAD1 (a shared machine: a load above the core count means other work ran beside the benchmark and every column is low)"
echo "- CPU flags that matter here:$SIMDF"
echo "- memory bandwidth (tool_bandwidth, streaming read of $bwmib MiB, best of 5): $bw1 GB/s with 1 thread, $bw2 GB/s with $T"
echo "- llmux feature sets: $variants (native: nothing set; no-amx: LLMUX_NO_AMX=1; avxvnni: LLMUX_NO_AMX=1 LLMUX_SIMD=avxvnni; avx2: LLMUX_NO_AMX=1 LLMUX_SIMD=avx2)"
echo "- method: $ROUNDS rounds; each round runs every model through each llmux feature set and then each llama.cpp build; the table has each one's best figure over the rounds"
echo "- llmux: \`llmux bench --model M -p $P -n $N -r $R --threads $T ${B:+--batch $B }--json\` (pp: $P prompt tokens in batches of ${B:-128 (the default)}; tg: $N tokens one at a time, $NF on the full-size models)"
if [ $have_lb = 1 ]; then
    src=""
    [ -f "$(dirname "$(dirname "$(dirname "$LB")")")/SOURCE" ] && src=" ($(cat "$(dirname "$(dirname "$(dirname "$LB")")")/SOURCE"))"
    echo "- llama.cpp: \`llama-bench -m M -p $P -n $N -t $T -r $R -o jsonl\`, build ${lbc:-?}$src, built on this machine; the builds (column llama.cpp build: each llmux set against the build of its level when there is one, else native):"
    for lbb in $lbuilds; do
        echo "  - $lbb: $(lbpath "$lbb"), $(lbflags "$(lbpath "$lbb")")"
    done
else
    echo "- llama.cpp: not measured in this run (no llama-bench at $LB; set LLAMA_BENCH to one built on this machine to get the column)"
fi
echo "- slices: random weights (tool_gguf_gen --seed 1), n_embd 2048, $LAYERS layers, 32 heads (8 kv), n_ff 5632, n_vocab 32000: a $LAYERS-layer slice of a 1B llama with its full embedding and output matrices; full-2048x22: the TinyLlama shape (22 layers, 4 kv heads); moe-2048x4x8: the 4-layer slice with a mixture of 8 experts of n_ff 2816 in each layer, 2 used a token (Mixtral's layout: a token reads the dense slice's bytes); every 2-D weight in the named type, norms F32; ds2-2048x4x64: a DeepSeek-V2-Lite-like deepseek2 slice (2048 wide, 16 heads with latent attention of 512, q LoRA 1536, the first of 4 layers dense, the others 64 experts of 1408 with 6 used and 2 shared, n_vocab 32000, the attn_kv_b layout)"
if [ -n "$OSS" ]; then
    if [ -x "$LB_OSS" ]; then
        osrc="$(dirname "$(dirname "$(dirname "$LB_OSS")")")/SOURCE"
        [ -f "$osrc" ] && lbc_oss="${lbc_oss:-?}, $(cat "$osrc")"
        echo "- oss-2880x4x32: gpt-oss-20b's shape in 4 layers (2880 wide, 64 heads of 64, 8 kv, 32 experts of 2880 with 4 used, window 128 on the even layers, n_vocab 32000), its experts MXFP4 and every other weight the named type; llama.cpp c392e50 cannot read gpt-oss, so this row's llama.cpp is $LB_OSS (build ${lbc_oss:-?}, $(lbflags "$LB_OSS")), native only, and every llmux set is compared with it"
    else
        echo "- oss-2880x4x32: gpt-oss-20b's shape in 4 layers (see bench/engine.sh); no gpt-oss-capable llama-bench at $LB_OSS (LLAMA_BENCH_OSS), so its llama.cpp column is n/a"
    fi
fi
echo "- roofline: tg t/s x bytes of weights read per token / the $T-thread bandwidth (100% = generation at the memory limit; on a slice the weights partly stay in the last-level cache, so only the full-size rows mean much)"
echo
echo "| model | size | llmux set | llama.cpp build | llmux pp$P t/s | llama.cpp pp$P t/s | pp ratio | llmux tg t/s | llama.cpp tg t/s | tg ratio | llmux roofline | llama.cpp roofline |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|$rows"
echo
echo "Ratios are llmux / llama.cpp (1.00 = as fast).$descs"
echo
if [ -s "$TMP/kern.md" ]; then
    echo "One core's repacked kernels (\`tests/tool_kernels\`, run before the table): gemm in GMAC/s of the thread's CPU time, best of 5; gemv in GB/s of wall time over 64 MiB of repacked groups (in this CPU's last-level cache when it is large), beside a plain read of the same bytes with 16-byte loads as tool_bandwidth does (the kernels load 32 or 64 bytes, so over 100% is possible); amx is the prompt kernel only."
    echo
    cat "$TMP/kern.md"
    echo
fi
notes
} >"$OUT"
echo "wrote $OUT"

# Standalone runs also put the section into bench/BENCHMARKS.md in place
# of the previous one (from its "## Local engine" heading to the next "## "
# heading), or at its end, followed by bench/notes/engine.md as bench/run.sh
# writes it; bench/run.sh rewrites the whole file anyway.
BM=bench/BENCHMARKS.md
if [ "${ENGINE_BENCH_SPLICE:-1}" = 1 ] && [ -f "$BM" ]; then
    { cat "$OUT"; echo; [ -f bench/notes/engine.md ] && { cat bench/notes/engine.md; echo; }; } >"$TMP/frag.md"
    awk -v frag="$TMP/frag.md" '
        /^## Local engine vs llama.cpp/ { skip = 1; done = 1
            while ((getline l < frag) > 0) print l
            next }
        skip && /^## / { skip = 0 }
        !skip { print }
        END { if (!done) { print ""; while ((getline l < frag) > 0) print l } }
    ' "$BM" >"$TMP/bm.md" && cp "$TMP/bm.md" "$BM" && echo "updated $BM"
fi
