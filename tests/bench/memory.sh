#!/bin/bash
# Measures memory mode on both front ends beside one redis-server serving
# the same load, in one run, with the CPU each party spends per lock cycle
# (issue #14's memory targets: CPU per cycle <= 1.0x redis-server's,
# cycles/s >= 1.0x).
#
#   tests/bench/memory.sh [duration] [rounds]
#
# Starts its own redis-server on BASE_PORT+4 (default 17000) and lockproxy
# (memory) with --data-path goroutines on BASE_PORT+100 and loops on
# BASE_PORT+101; stops only what it started. Each round measures the three
# one after the other with cmd/lockbench -clients 50; CLIENT=lean (or
# lean-eval, go-redis by default) is its load (lockbench -client), PIPELINE its
# -pipeline. BEFORE_REV=<git revision> also measures lockproxy built from
# that revision (loops, on BASE_PORT+102) each round, right after or right
# before the tree's loops, alternately: a before/after comparison in the
# same run. PERF=<prefix> records a CPU profile (perf record -g, software
# clock) of each server during its first round's measurement, into
# <prefix>.redis-server, <prefix>.goroutines and <prefix>.loops: read them
# with perf report -i. Not part of the test suite:
# figures on a shared machine are only worth their ratios.
set -euo pipefail
dur=${1:-10s}
rounds=${2:-1}
base=${BASE_PORT:-17000}
. "$(dirname "$0")/common.sh" # root, dir, pids, cleanup at exit, cpu

(cd "$root" && go build -o "$dir/lockproxy" ./cmd/lockproxy && go build -o "$dir/lockbench" ./cmd/lockbench)
if [ -n "${BEFORE_REV:-}" ]; then
	mkdir "$dir/before"
	(cd "$root" && git archive "$BEFORE_REV" | tar -x -C "$dir/before")
	(cd "$dir/before" && go build -o "$dir/lockproxy-before" ./cmd/lockproxy)
	# from $dir: a config.yaml here may have keys that build does not know
	(cd "$dir" && exec "$dir/lockproxy-before" --backend memory --data-path loops --listen 127.0.0.1:$((base + 102)) --admin-listen '' >"$dir/before.log" 2>&1) &
	lb0=$!
	pids+=($lb0)
fi
redis-server --port $((base + 4)) --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
rs=$!
pids+=($rs)
"$dir/lockproxy" --backend memory --data-path goroutines --listen 127.0.0.1:$((base + 100)) --admin-listen '' >"$dir/goroutines.log" 2>&1 &
lg=$!
pids+=($lg)
"$dir/lockproxy" --backend memory --data-path loops --listen 127.0.0.1:$((base + 101)) --admin-listen '' >"$dir/loops.log" 2>&1 &
ll=$!
pids+=($ll)
sleep 1

# measure NAME ADDR PID: one lockbench run against ADDR served by process
# PID; prints its result and the CPU per cycle of the server and the load
# tool, and leaves "cycles/s cpu-µs" in last.
last=
measure() {
	local before after out cyc secs lb us rate perf_pid=
	if [ -n "${PERF:-}" ] && [ "$r" -eq 1 ]; then
		perf record -e cpu-clock -g -o "$PERF.${1// /-}" -p "$3" -- sleep "${dur%s}" >/dev/null 2>&1 &
		perf_pid=$!
	fi
	before=$(cpu "$3")
	out=$(/usr/bin/time -f "LOADTOOL %U %S" "$dir/lockbench" -addr "$2" -client "${CLIENT:-go-redis}" -pipeline "${PIPELINE:-1}" -clients 50 -duration "$dur" 2>&1)
	after=$(cpu "$3")
	if [ -n "$perf_pid" ]; then wait "$perf_pid" || true; fi
	cyc=$(echo "$out" | sed -n 's/.*(\([0-9]*\) cycles in.*/\1/p')
	secs=$(echo "$out" | sed -n 's/.* cycles in \([0-9.]*\)s).*/\1/p')
	lb=$(echo "$out" | awk '/LOADTOOL/ {printf "%d", ($2 + $3) * 1000000}')
	us=$(awk -v a="$after" -v b="$before" -v c="$cyc" 'BEGIN {printf "%.1f", (a - b) * 10000 / c}')
	rate=$(awk -v c="$cyc" -v s="$secs" 'BEGIN {printf "%.0f", c / s}')
	echo "$1: $(echo "$out" | grep -v LOADTOOL | head -2 | paste -sd' ' | sed 's/  */ /g')"
	echo "  CPU µs per cycle: $1 $us, load tool $((lb / cyc))"
	last="$rate $us"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}'; }

for ((r = 1; r <= rounds; r++)); do
	echo "== round $r"
	measure redis-server 127.0.0.1:$((base + 4)) "$rs"
	read -r rr ru <<<"$last"
	measure goroutines 127.0.0.1:$((base + 100)) "$lg"
	read -r gr gu <<<"$last"
	if [ -n "${BEFORE_REV:-}" ] && ((r % 2 == 0)); then
		measure "loops at $BEFORE_REV" 127.0.0.1:$((base + 102)) "$lb0"
		read -r br bu <<<"$last"
	fi
	measure loops 127.0.0.1:$((base + 101)) "$ll"
	read -r lr lu <<<"$last"
	echo "  vs redis-server: goroutines cycles/s $(ratio "$gr" "$rr"), CPU/cycle $(ratio "$gu" "$ru");" \
		"loops cycles/s $(ratio "$lr" "$rr"), CPU/cycle $(ratio "$lu" "$ru")"
	if [ -n "${BEFORE_REV:-}" ]; then
		if ((r % 2 == 1)); then
			measure "loops at $BEFORE_REV" 127.0.0.1:$((base + 102)) "$lb0"
			read -r br bu <<<"$last"
		fi
		echo "  loops now vs at $BEFORE_REV: cycles/s $(ratio "$lr" "$br"), CPU/cycle $(ratio "$lu" "$bu")"
	fi
done
