#!/bin/sh
# Runs every test binary in BUILD/tests, each bounded in time, and sums
# their "N passed, M failed" lines into one closing line.
BUILD=${1:-build/release}
export LLMUX_BIN="$(pwd)/$BUILD/llmux"
export FAKE_PROVIDER="$(pwd)/$BUILD/tests/fake_provider"
export LLMUX_BUILD="$(pwd)/$BUILD"
: "${LLMUX_TEST_DATA:=$(cd .. && pwd)/shared/data}"
export LLMUX_TEST_DATA
pass=0; fail=0; broken=""
# run_one NAME BINARY [VAR=VALUE...]: one test binary, its environment
# extended by the assignments
run_one() {
    name=$1; t=$2; shift 2
    out=$(mktemp)
    env "$@" timeout 600 "$t" >"$out" 2>"$out.err"
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "== $name: no result line (exit $rc)"; cat "$out.err" | tail -n 30
        fail=$((fail + 1)); broken="$broken $name"
    else
        p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
        pass=$((pass + p)); fail=$((fail + f))
        if [ "$f" != 0 ] || [ "$rc" != 0 ]; then
            echo "== $name: $line (exit $rc)"; grep -E 'FAIL|ERROR|Sanitizer|runtime error' "$out.err" | head -n 40
            [ "$f" = 0 ] && fail=$((fail + 1))
            broken="$broken $name"
        else
            echo "== $name: $line"
        fi
    fi
    rm -f "$out" "$out.err"
}
for t in "$BUILD"/tests/test_*; do
    case "$t" in *.o|*.d) continue ;; esac
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
# The scheduler's batched = alone checks again at the AVX2 level, whose
# decode kernel an AVX-512 machine would not run otherwise (a level the
# CPU lacks falls back to the best one below).
[ -x "$BUILD/tests/test_sched" ] &&
    run_one "test_sched (LLMUX_SIMD=avx2)" "$BUILD/tests/test_sched" \
        LLMUX_SIMD=avx2 LLMUX_NO_AMX=1
[ -n "$broken" ] && echo "failing:$broken"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
