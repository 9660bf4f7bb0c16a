#!/bin/bash
# Measures what 10,000 idle client connections cost in resident memory:
# redis-server, lockproxy on goroutines and lockproxy on event loops (the
# figures of README "Measured figures"), once connected only and once after
# one PING each (Redis then keeps a query buffer per client).
#
#   tests/bench/idle.sh [connections]
#
# Needs an open-files limit above the connection count (ulimit -n).
# Starts its own servers on BASE_PORT+1..+3 (default 17700) in fresh
# processes for each measurement; stops only what it started.
set -euo pipefail
n=${1:-10000}
base=${BASE_PORT:-17700}
. "$(dirname "$0")/common.sh" # root, dir, pids, cleanup at exit, cpu
(cd "$root" && go build -o "$dir/lockproxy" ./cmd/lockproxy && go build -o "$dir/idleconns" ./tests/bench/idleconns)
cd "$dir" # no config.yaml here
for ping in yes no; do
	redis-server --port $((base + 1)) --bind 127.0.0.1 --save '' --appendonly no --maxclients $((n + 100)) >/dev/null &
	r=$!
	"$dir/lockproxy" --listen 127.0.0.1:$((base + 2)) --admin-listen '' --max-clients $((n + 100)) --data-path goroutines >/dev/null 2>&1 &
	g=$!
	"$dir/lockproxy" --listen 127.0.0.1:$((base + 3)) --admin-listen '' --max-clients $((n + 100)) --data-path loops >/dev/null 2>&1 &
	l=$!
	pids+=($r $g $l)
	sleep 1
	echo "== one PING each: $ping (redis-server, lockproxy goroutines, lockproxy loops)"
	NOPING=$([ $ping = no ] && echo 1 || true) "$dir/idleconns" "$n" \
		127.0.0.1:$((base + 1))=$r 127.0.0.1:$((base + 2))=$g 127.0.0.1:$((base + 3))=$l
	kill $r $g $l
	wait $r $g $l 2>/dev/null || true
done
