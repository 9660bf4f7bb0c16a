#!/bin/bash
# Measures quorum mode (N=3) beside its baselines in one run, with the CPU
# each party spends per lock cycle: the figures of README "Quorum mode".
#
#   tests/bench/quorum.sh [redsync|redis] [duration]
#
# Starts its own redis-servers on BASE_PORT+1..+4 (default 17000) and
# lockproxy on BASE_PORT+100; stops only what it started. Not part of the
# test suite: figures on a shared machine are only worth their ratios.
set -euo pipefail
mode=${1:-redsync}
dur=${2:-10s}
base=${BASE_PORT:-17000}
. "$(dirname "$0")/common.sh" # root, dir, pids, cleanup at exit, cpu

(cd "$root" && go build -o "$dir/lockproxy" ./cmd/lockproxy && go build -o "$dir/lockbench" ./cmd/lockbench)
for i in 1 2 3 4; do
	redis-server --port $((base + i)) --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
	pids+=($!)
done
nodes=127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))
"$dir/lockproxy" --backend quorum --quorum-nodes "$nodes" --listen 127.0.0.1:$((base + 100)) --admin-listen '' >"$dir/lockproxy.log" 2>&1 &
lp=$!
pids+=($lp)
sleep 1

case $mode in
redsync) baseline=redsync:$nodes ;;
redis) baseline=127.0.0.1:$((base + 4)) ;;
*) echo "usage: $0 [redsync|redis] [duration]" >&2; exit 2 ;;
esac

# measure ADDR: one lockbench run; prints its result and the CPU per cycle
# of the load tool, lockproxy, the three nodes and the single redis-server.
measure() {
	local before=() after=() i out cyc lb
	for p in "$lp" "${pids[@]:0:4}"; do before+=($(cpu "$p")); done
	out=$(/usr/bin/time -f "LOADTOOL %U %S" "$dir/lockbench" -addr "$1" -clients 50 -duration "$dur" 2>&1)
	for p in "$lp" "${pids[@]:0:4}"; do after+=($(cpu "$p")); done
	echo "$out" | grep -v LOADTOOL
	cyc=$(echo "$out" | sed -n 's/.*(\([0-9]*\) cycles in.*/\1/p')
	lb=$(echo "$out" | awk '/LOADTOOL/ {printf "%d", ($2 + $3) * 1000000}')
	local d=()
	for i in 0 1 2 3 4; do d+=($(( (after[i] - before[i]) * 10000 / cyc ))); done
	echo "  CPU µs per cycle: load tool $((lb / cyc)), lockproxy ${d[0]}, nodes $((d[1] + d[2] + d[3])), single redis ${d[4]}"
}
measure 127.0.0.1:$((base + 100))
measure "$baseline"
