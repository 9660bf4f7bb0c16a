#!/bin/bash
# Measures postgres mode beside its raw pgx baseline in one run, with the
# CPU each party spends per lock cycle: the figures of README "Postgres mode".
#
#   tests/bench/postgres.sh DSN [advisory|lease] [duration]
#
# DSN names a database this script may create lockproxy's table in. For
# PostgreSQL's CPU the cluster must run on this machine: PGDATA names its
# data directory (its postmaster.pid); without it PostgreSQL's share is not
# printed. lockproxy listens on BASE_PORT+100 (default 17100). ROW_DELAYS
# lists the postgres-lease-row-delay values to measure one after another in
# the same run (default: "200ms", lockproxy's default; e.g. "0s 200ms 0s
# 200ms" alternates a row at once with deferred rows; "before" runs the
# binary BEFORE_BIN, built from an earlier tree, "before:200ms" runs it
# with that delay). PPROF_DIR, if set, gets
# lockproxy's CPU profile over the run (cpu-DELAY.pb.gz) and its
# allocations (allocs-DELAY.pb.gz) from the opt-in pprof listener on
# BASE_PORT+101; profiling costs lockproxy a few per cent. CLIENT=lean (or
# lean-eval) drives lockproxy with lockbench's own RESP client instead of
# go-redis. PERF=<prefix> records a CPU profile of lockproxy (perf record
# -g, software clock) during the first measurement of each delay into
# <prefix>.DELAY (read it with perf report -i, or tests/bench/perfshares.sh).
# Not part of the
# test suite: figures on a shared machine are only worth their ratios.
set -euo pipefail
dsn=${1:?usage: $0 DSN [advisory|lease] [duration]}
strategy=${2:-advisory}
dur=${3:-10s}
base=${BASE_PORT:-17000}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
lp=
cleanup() {
	[ -n "$lp" ] && kill "$lp" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

(cd "$root" && go build -o "$dir/lockproxy" ./cmd/lockproxy && go build -o "$dir/lockbench" ./cmd/lockbench)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; } # user+system ticks (1/100 s)
# pgcpu: the cluster's CPU ticks: the postmaster's children alive now, and
# those it has reaped (the baseline's backends end with the run).
pgcpu() {
	[ -n "${PGDATA:-}" ] || { echo 0; return; }
	local pm t p
	pm=$(head -1 "$PGDATA/postmaster.pid")
	t=$(awk '{print $14+$15+$16+$17}' "/proc/$pm/stat")
	for p in $(pgrep -P "$pm"); do t=$((t + $(cpu "$p"))); done
	echo "$t"
}

addr=127.0.0.1:$((base + 100))
paddr=127.0.0.1:$((base + 101))

measure() {
	local p0 p1 l0 l1 out cyc lb
	local prof= perf_pid=
	if [ -n "${PERF:-}" ] && [ -n "$lp" ] && [ ! -e "$PERF.$2" ]; then
		perf record -e cpu-clock -g -o "$PERF.$2" -p "$lp" -- sleep "${dur%s}" >/dev/null 2>&1 &
		perf_pid=$!
	fi
	if [ -n "${PPROF_DIR:-}" ] && [ -n "$lp" ]; then # the CPU profile over all but the run's last second
		curl -s -o "$PPROF_DIR/cpu-$2.pb.gz" "http://$paddr/debug/pprof/profile?seconds=$(( ${dur%s} - 1 ))" &
		prof=$!
	fi
	p0=$(pgcpu); l0=0; [ -n "$lp" ] && l0=$(cpu "$lp")
	out=$(/usr/bin/time -f "LOADTOOL %U %S" "$dir/lockbench" -addr "$1" -client "${CLIENT:-go-redis}" -pipeline "${PIPELINE:-1}" -clients 50 -duration "$dur" 2>&1)
	p1=$(pgcpu); l1=0; [ -n "$lp" ] && l1=$(cpu "$lp")
	if [ -n "$perf_pid" ]; then wait "$perf_pid" || true; fi
	if [ -n "$prof" ]; then
		wait "$prof" || true
		curl -s -o "$PPROF_DIR/allocs-$2.pb.gz" "http://$paddr/debug/pprof/allocs" || true # a BEFORE_BIN may have no listener
	fi
	echo "$out" | grep -v LOADTOOL | sed 's/postgres:\/\/[^ ]*/DSN/'
	cyc=$(echo "$out" | sed -n 's/.*(\([0-9]*\) cycles in.*/\1/p')
	lb=$(echo "$out" | awk '/LOADTOOL/ {printf "%d", ($2 + $3) * 1000000}')
	echo "  CPU µs per cycle: load tool $((lb / cyc)), lockproxy $(( (l1 - l0) * 10000 / cyc )), postgres $(( (p1 - p0) * 10000 / cyc ))"
}
for delay in ${ROW_DELAYS:-200ms}; do
	echo "lockproxy, postgres-lease-row-delay $delay:"
	bin=$dir/lockproxy flags=(--postgres-lease-row-delay "$delay")
	case $delay in # BEFORE_BIN: an earlier build, for comparison
	before) # from before the option
		bin=${BEFORE_BIN:?ROW_DELAYS has "before": set BEFORE_BIN to a lockproxy binary} flags=() ;;
	before:*) # with the option: before:200ms
		bin=${BEFORE_BIN:?ROW_DELAYS has "before": set BEFORE_BIN to a lockproxy binary}
		flags=(--postgres-lease-row-delay "${delay#before:}") ;;
	esac
	LOCKPROXY_TEST_PPROF_LISTEN=${PPROF_DIR:+$paddr} "$bin" --backend postgres --postgres-dsn "$dsn" --postgres-strategy "$strategy" \
		"${flags[@]}" --listen "$addr" --admin-listen '' >"$dir/lockproxy.log" 2>&1 &
	lp=$!
	sleep 1.5
	kill -0 "$lp" || { cat "$dir/lockproxy.log"; exit 1; }
	measure "$addr" "$delay"
	kill "$lp"
	wait "$lp" 2>/dev/null || true
	lp=
done
echo "raw loop:"
raw=pgx
[ "$strategy" = lease ] && raw=pgx-lease
measure "$raw:$dsn"
