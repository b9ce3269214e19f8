#!/bin/sh
# Where a request's CPU goes, llmux beside nginx proxy_pass, per request:
#  1. CPU time, user and kernel apart, per thread: llmux (1 worker, ledger
#     on a file) and nginx proxy_pass (1 worker, keepalive pool), each
#     under wrk -t1 -c16 for ACCOUNT_SECONDS to the fast upstream of
#     bench/run.sh, from /proc/PID/task/TID/stat (utime, stime) and
#     /proc/.../status (context switches) before and after, with the same
#     run's upstream and wrk CPU beside them.  The machine
#     has no hardware counters for perf (instructions:u/k "not
#     supported"), so the kernel side is CPU time, not instructions.
#  2. System calls per request (strace -c -f, wrk -c4, 3 s), both.
#  3. nginx's user instructions per request under callgrind (wrk -c1),
#     split by part like bench/cg_split.py does llmux's (bench/profile.sh).
# Non-stream and stream (ACCOUNT_MODES="ns st").  Bounded: about
# 4 x ACCOUNT_SECONDS + 4 x 4 s + 2 x ACCOUNT_CG_SECONDS.
set -u
BUILD=${1:-build/release}
SECS=${ACCOUNT_SECONDS:-5}
CGSECS=${ACCOUNT_CG_SECONDS:-5}
MODES=${ACCOUNT_MODES:-ns st}
TMP=$(mktemp -d /tmp/llmux-acct-XXXXXX)
PIDS=""
. bench/lib.sh # port_of, free_port, nginx_start, fast_upstream_start, proxy_conf, bench_cleanup
trap bench_cleanup EXIT

UP=$(free_port); fast_upstream_start up 2 "$UP"
NGX=$(free_port); nginx_start ngx 1 "$(proxy_conf "$NGX" "$UP")"
cat >"$TMP/c.json" <<JSON
{"listen":"127.0.0.1:0","workers":1,"database":"$TMP/ledger.db","require_keys":false,
 "providers":{"ns":{"kind":"openai","base_url":"http://127.0.0.1:$UP/ns/v1","api_key":"sk-bench","models":{"gpt-4.1":{}}},
              "st":{"kind":"openai","base_url":"http://127.0.0.1:$UP/st/v1","api_key":"sk-bench","models":{"gpt-4.1":{}}}}}
JSON
"$BUILD/llmux" serve --config "$TMP/c.json" >"$TMP/gw.out" 2>"$TMP/gw.err" &
GW=$!; PIDS="$PIDS $GW"
GWP=$(port_of "$TMP/gw.out" "listening on http:\/\/127.0.0.1:") || { echo "llmux did not start"; exit 1; }
sleep 0.3
NGXW=$(pgrep -P "$(cat "$TMP/ngx.pid")" | head -n 1)
UPW=$(pgrep -P "$(cat "$TMP/up.pid")")

snap() { # pid -> "tid utime stime vcsw ivcsw" per thread (ticks)
    for t in /proc/"$1"/task/*; do
        [ -r "$t/stat" ] || continue
        st=$(sed 's/.*) //' "$t/stat")
        vc=$(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")
        ic=$(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "$t/status")
        echo "${t##*/} $(echo "$st" | awk '{print $12, $13}') $vc $ic"
    done
}
url() { # who mode
    if [ "$1" = llmux ]; then echo "http://127.0.0.1:$GWP/v1/chat/completions"
    else echo "http://127.0.0.1:$NGX/$2/v1/chat/completions"; fi
}
model() { [ "$1" = llmux ] && echo "gpt-4.1@$2" || echo gpt-4.1; }
stream() { [ "$1" = st ] && echo 1 || echo 0; }
TCK=$(getconf CLK_TCK)

echo "## CPU per request, user and kernel (wrk -t1 -c16, ${SECS}s each; load average at start: $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| path | req/s | thread | user us/req | kernel us/req | vol. / invol. switches per req |"
echo "|---|---|---|---|---|---|"
for m in $MODES; do
    for who in llmux nginx; do
        [ "$who" = llmux ] && P=$GW || P=$NGXW
        snap "$P" >"$TMP/a"
        for u in $UPW; do snap "$u"; done >"$TMP/ua"
        BENCH_MODEL=$(model $who $m) BENCH_STREAM=$(stream $m) perf stat -e task-clock -o "$TMP/perf.txt" \
            wrk -t1 -c16 -d"${SECS}s" -s bench/chat.lua "$(url $who $m)" >"$TMP/w.txt" 2>&1
        snap "$P" >"$TMP/b"
        for u in $UPW; do snap "$u"; done >"$TMP/ub"
        N=$(awk '/requests in/ {print $1}' "$TMP/w.txt")
        RPS=$(awk '/Requests\/sec/ {print $2}' "$TMP/w.txt")
        awk -v n="$N" -v hz="$TCK" -v name="$who $m" -v rps="$RPS" '
            NR == FNR { u[$1] = $2; s[$1] = $3; v[$1] = $4; i[$1] = $5; next }
            ($1 in u) { du = $2 - u[$1]; ds = $3 - s[$1]
                if (du + ds == 0) next
                printf "%d %s %.2f %.2f %.3f %.3f\n", du + ds, $1, du / hz * 1e6 / n, ds / hz * 1e6 / n, ($4 - v[$1]) / n, ($5 - i[$1]) / n }' \
            "$TMP/a" "$TMP/b" | sort -n -r | awk -v name="$who $m" -v rps="$RPS" '
            { printf "| %s | %s | %s | %s | %s | %s / %s |\n", name, rps, (NR == 1 ? "busiest (" : "tid ") $2 (NR == 1 ? ")" : ""), $3, $4, $5, $6 }' | tee "$TMP/cpu.txt"
        [ "$who" = llmux ] && WTID=$(sed -n '1s/.*busiest (\([0-9]*\)).*/\1/p' "$TMP/cpu.txt")
        # The same run's other CPU: the fast upstream's workers (summed)
        # and wrk itself (perf stat's user and sys seconds).
        awk -v n="$N" -v hz="$TCK" -v name="$who $m" -v rps="$RPS" '
            NR == FNR { u[$1] = $2; s[$1] = $3; next }
            ($1 in u) { du += $2 - u[$1]; ds += $3 - s[$1] }
            END { printf "| %s | %s | upstream nginx (all workers) | %.2f | %.2f | |\n", name, rps, du / hz * 1e6 / n, ds / hz * 1e6 / n }' \
            "$TMP/ua" "$TMP/ub"
        awk -v n="$N" -v name="$who $m" -v rps="$RPS" '
            $2 == "seconds" && $3 == "user" { u = $1 } $2 == "seconds" && $3 == "sys" { s = $1 }
            END { printf "| %s | %s | wrk | %.2f | %.2f | |\n", name, rps, u * 1e6 / n, s * 1e6 / n }' "$TMP/perf.txt"
    done
done
echo
echo "## System calls per request (strace -c -f, wrk -c4, 3 s; llmux-worker: its busiest thread alone)"
for m in $MODES; do
    for who in llmux llmux-worker nginx; do
        case $who in llmux) P=$GW; F=-f ;; llmux-worker) P=$WTID; F= ;; *) P=$NGXW; F=-f ;; esac
        [ -n "$P" ] || continue
        strace -c $F -p "$P" -o "$TMP/st.txt" 2>/dev/null &
        ST=$!
        sleep 1
        BENCH_MODEL=$(model ${who%-worker} $m) BENCH_STREAM=$(stream $m) wrk -t1 -c4 -d3s -s bench/chat.lua "$(url ${who%-worker} $m)" >"$TMP/w.txt" 2>&1
        sleep 0.5
        kill -INT "$ST"; wait "$ST" 2>/dev/null
        N=$(awk '/requests in/ {print $1}' "$TMP/w.txt")
        echo
        echo "$who $m ($N requests): $(awk -v n="$N" '$1 ~ /^[0-9.]+$/ && NF >= 5 { if ($NF != "total" && $4 / n >= 0.005) printf "%s %.2f, ", $NF, $4 / n }
            $NF == "total" { t = $4 } END { printf "total %.2f", t / n }' "$TMP/st.txt")"
    done
done
echo
# nginx under callgrind: a second proxy, in the foreground process (no
# master), counting from just before the load.
command -v valgrind >/dev/null || exit 0
NGC=$(free_port)
mkdir -p "$TMP/ngc"
sed "s|^worker_processes 1;|daemon off; master_process off; worker_processes 1;|; s|$TMP/ngx|$TMP/ngc|g; s|127.0.0.1:$NGX |127.0.0.1:$NGC |" "$TMP/ngx.conf" >"$TMP/ngc.conf"
echo "## nginx proxy_pass under callgrind (wrk -c1, ${CGSECS}s): self instructions per request"
echo
for m in $MODES; do
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$TMP/ngc.cg" /usr/sbin/nginx -c "$TMP/ngc.conf" -p "$TMP/ngc" >/dev/null 2>"$TMP/ngc.err" &
    VG=$!
    i=0; while [ $i -lt 100 ] && ! curl -s -o /dev/null "http://127.0.0.1:$NGC/"; do sleep 0.1; i=$((i+1)); done
    BENCH_STREAM=$(stream $m) wrk -t1 -c1 -d1s -s bench/chat.lua "http://127.0.0.1:$NGC/$m/v1/chat/completions" >/dev/null 2>&1
    callgrind_control -i on "$VG" >/dev/null
    BENCH_STREAM=$(stream $m) wrk -t1 -c1 -d"${CGSECS}s" -s bench/chat.lua "http://127.0.0.1:$NGC/$m/v1/chat/completions" >"$TMP/w.txt" 2>&1
    callgrind_control -i off "$VG" >/dev/null
    kill -QUIT "$VG"; wait "$VG" 2>/dev/null
    N=$(awk '/requests in/ {print $1}' "$TMP/w.txt")
    echo "nginx $m, $N requests:"
    echo
    python3 bench/cg_split.py "$N" "$TMP/ngc.cg"
    echo
    rm -f "$TMP/ngc.cg"
done
