#!/bin/bash
# Measures quorum mode (N=3) beside its baselines in one run, with the CPU
# each party spends per lock cycle: the figures of README "Quorum mode".
#
#   tests/bench/quorum.sh [redsync|redis] [duration]
#
# CLIENT=redislock measures bsm/redislock (its own acquire and release
# scripts) instead of go-redis's SET NX PX + EVALSHA, through lockproxy and
# against one Redis (mode redis); CLIENT=lean (or lean-eval) the same
# cycle on lockbench's own RESP client, a load that costs little CPU.
#
# Starts its own redis-servers on BASE_PORT+1..+4 (default 17000) and
# lockproxy on BASE_PORT+100; stops only what it started. Not part of the
# test suite: figures on a shared machine are only worth their ratios.
# DATA_PATH (loops, goroutines; default loops, as lockproxy's) is its front
# end. BEFORE_REV=<git revision> also measures lockproxy built from that
# revision, same front end, same nodes, same run (on BASE_PORT+101): a
# before/after comparison that the machine's noise affects alike.
# PERF=<file> records a CPU profile of lockproxy (perf record -g, software
# clock) during its measurement into <file>: read it with perf report -i.
# LOCKPROXY_ENV="GOGC=400 ..." is the environment of the build under test
# only (with BEFORE_REV=HEAD, an A/B of a runtime setting alone).
# SYSCALLS=1 counts lockproxy's system calls during its first measurement
# (perf stat on the syscall tracepoints), to divide by its cycles.
set -euo pipefail
mode=${1:-redsync}
dur=${2:-10s}
base=${BASE_PORT:-17000}
. "$(dirname "$0")/common.sh" # root, dir, pids, cleanup at exit, cpu

data_path=${DATA_PATH:-loops}
(cd "$root" && go build -o "$dir/lockproxy" ./cmd/lockproxy && go build -o "$dir/lockbench" ./cmd/lockbench)
if [ -n "${BEFORE_REV:-}" ]; then
	mkdir "$dir/before"
	(cd "$root" && git archive "$BEFORE_REV" | tar -x -C "$dir/before")
	(cd "$dir/before" && go build -o "$dir/lockproxy-before" ./cmd/lockproxy)
fi
for i in 1 2 3 4; do
	redis-server --port $((base + i)) --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null &
	pids+=($!)
done
nodes=127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))
env ${LOCKPROXY_ENV:-} "$dir/lockproxy" --backend quorum --quorum-nodes "$nodes" --listen 127.0.0.1:$((base + 100)) --admin-listen '' --data-path "$data_path" >"$dir/lockproxy.log" 2>&1 &
lp=$!
pids+=($lp)
if [ -n "${BEFORE_REV:-}" ]; then
	# from $dir: a config.yaml here may have keys that build does not know
	(cd "$dir" && exec "$dir/lockproxy-before" --backend quorum --quorum-nodes "$nodes" --listen 127.0.0.1:$((base + 101)) --admin-listen '' --data-path "$data_path" >"$dir/lockproxy-before.log" 2>&1) &
	lp0=$!
	pids+=($lp0)
fi
sleep 1

case $mode in
redsync) baseline=redsync:$nodes ;;
redis) baseline=127.0.0.1:$((base + 4)) ;;
*) echo "usage: [CLIENT=go-redis|redislock|lean|lean-eval] $0 [redsync|redis] [duration]" >&2; exit 2 ;;
esac

# measure ADDR [PROXY_PID]: one lockbench run; prints its result and the
# CPU per cycle of the load tool, lockproxy (PROXY_PID, default the one
# under test), the three nodes and the single redis-server.
measure() {
	local before=() after=() i out cyc lb proxy=${2:-$lp}
	for p in "$proxy" "${pids[@]:0:4}"; do before+=($(cpu "$p")); done
	out=$(/usr/bin/time -f "LOADTOOL %U %S" "$dir/lockbench" -addr "$1" -client "${CLIENT:-go-redis}" -pipeline "${PIPELINE:-1}" -clients 50 -duration "$dur" 2>&1)
	for p in "$proxy" "${pids[@]:0:4}"; do after+=($(cpu "$p")); done
	echo "$out" | grep -v LOADTOOL
	cyc=$(echo "$out" | sed -n 's/.*(\([0-9]*\) cycles in.*/\1/p')
	lb=$(echo "$out" | awk '/LOADTOOL/ {printf "%d", ($2 + $3) * 1000000}')
	local d=()
	for i in 0 1 2 3 4; do d+=($(( (after[i] - before[i]) * 10000 / cyc ))); done
	echo "  CPU µs per cycle: load tool $((lb / cyc)), lockproxy ${d[0]}, nodes $((d[1] + d[2] + d[3])), single redis ${d[4]}"
}
# ROUNDS (default 1) repeats the lockproxy measurements, the build under
# test and BEFORE_REV's alternately (each round swaps which goes first),
# so that a load that comes and goes on the machine meets both alike.
rounds=${ROUNDS:-1}
for ((r = 1; r <= rounds; r++)); do
	[ "$rounds" -gt 1 ] && echo "round $r:"
	if [ -n "${BEFORE_REV:-}" ] && ((r % 2 == 0)); then
		echo "lockproxy at $BEFORE_REV ($data_path):"
		measure 127.0.0.1:$((base + 101)) "$lp0"
	fi
	echo "lockproxy ($data_path):"
	if [ -n "${PERF:-}" ] && [ "$r" -eq 1 ]; then
		perf record -e cpu-clock -g -o "$PERF" -p "$lp" -- sleep "${dur%s}" >/dev/null 2>&1 &
		perf_pid=$!
	fi
	if [ -n "${SYSCALLS:-}" ] && [ "$r" -eq 1 ]; then
		perf stat -e 'syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_futex' -p "$lp" -- sleep "${dur%s}" 2>"$dir/syscalls" &
		stat_pid=$!
	fi
	measure 127.0.0.1:$((base + 100))
	if [ -n "${PERF:-}" ] && [ "$r" -eq 1 ]; then wait "$perf_pid" || true; fi
	if [ -n "${SYSCALLS:-}" ] && [ "$r" -eq 1 ]; then
		wait "$stat_pid" || true
		grep syscalls: "$dir/syscalls"
	fi
	if [ -n "${BEFORE_REV:-}" ] && ((r % 2 == 1)); then
		echo "lockproxy at $BEFORE_REV ($data_path):"
		measure 127.0.0.1:$((base + 101)) "$lp0"
	fi
done
echo "baseline ($mode):"
measure "$baseline"
