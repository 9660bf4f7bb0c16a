#!/bin/bash
# Divides a CPU profile recorded by a bench script's PERF= into causes, in
# microseconds per lock cycle: the shares of the samples, times the CPU per
# cycle the same script measured (perf's own overhead inflates the samples
# but does not reorder them).
#
#   tests/bench/perfshares.sh PERF-FILE CPU-µs-PER-CYCLE
#
# A sample goes to the first cause its stack shows, leaf first: the system
# call it is in (write, read, epoll, futex), other kernel work, garbage
# collection and allocation, then the package of the Go function it was
# sampled in (lockproxy's packages, gnet, pgx, go-redis, the runtime), or
# the binary for a process that is not Go (redis-server); clock reads and
# the metrics' own work apart. Not part of the
# test suite.
set -euo pipefail
file=$1
us=$2
perf script -i "$file" -F ip,sym,dso 2>/dev/null | awk -v us="$us" '
# peer: whose connection a write or read is on, where the stack tells
# (pgx: PostgreSQL; go-redis); event-loop traffic is left unnamed.
function peer(   i) {
	for (i = 1; i <= n; i++) {
		if (fr[i] ~ /pgconn|jackc\/pgx/) return " (to PostgreSQL)"
		if (fr[i] ~ /go-redis/) return " (go-redis)"
	}
	return ""
}
function cause(   i, f) {
	for (i = 1; i <= n; i++) {
		f = fr[i]
		if (f ~ /^(ksys_write|__x64_sys_write|__x64_sys_sendto|__x64_sys_writev)/) return "write system calls" peer()
		if (f ~ /^(ksys_read|__x64_sys_read|__x64_sys_recvfrom|__x64_sys_readv)/) return "read system calls" peer()
		if (f ~ /^(do_epoll_wait|__x64_sys_epoll_wait|__x64_sys_epoll_pwait)/) return "epoll_wait"
		if (f ~ /^__x64_sys_futex/) return "futex (thread wake-ups)"
	}
	if (dso[1] ~ /kernel/) return "other kernel work (scheduler, interrupts, other calls)"
	for (i = 1; i <= n; i++) {
		f = fr[i]
		if (f ~ /^runtime\.(mallocgc|gcBgMarkWorker|gcDrain|scanobject|bgsweep|bgscavenge|gcAssist|newobject|makeslice|growslice|memclrNoHeapPointers)/) return "garbage collection and allocation"
	}
	f = fr[1]
	if (f ~ /lockproxy\/memory/) return "memory engine (memory)"
	if (f ~ /lockproxy\/quorum/) return "quorum engine (quorum)"
	if (f ~ /lockproxy\/pgbridge/) return "pgbridge"
	if (f ~ /lockproxy\/(proxy|keycmd|resp|backend|luascripts)/) return "command code and codec (proxy, keycmd, resp, backend)"
	if (f ~ /gnet/) return "gnet"
	if (f ~ /jackc\/pgx|pgconn|pgproto3/) return "pgx"
	if (f ~ /go-redis/) return "go-redis"
	if (f ~ /^(syscall|internal\/runtime\/syscall|golang.org\/x\/sys)/) return "Go system-call wrappers"
	if (f ~ /^(runtime|internal\/)/) return "Go scheduler and the rest of the runtime"
	if (f ~ /clock_gettime|^time\.|prometheus/) return "clock reads and metrics"
	if (dso[1] ~ /redis/) return "redis-server user space" # Debian: redis-check-rdb
	if (dso[1] ~ /libc/) return "libc"
	return "other user space (map hashing, contexts, reflection, sync)"
}
/^$/ { if (n) { c[cause()]++; total++ }; n = 0; next }
{
	sym = $2
	d = $NF
	n++
	fr[n] = sym
	dso[n] = d
}
END {
	if (n) { c[cause()]++; total++ }
	for (k in c) printf "%6.1f  %4.1f%%  %s\n", us * c[k] / total, 100 * c[k] / total, k
}' | sort -rn
