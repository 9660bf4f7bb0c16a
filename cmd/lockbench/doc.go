// Command lockbench measures lock throughput and latency against any
// Redis-protocol address: C clients each loop SET key token NX PX ttl and,
// on OK, the owner-checked release script (EVALSHA, falling back to EVAL),
// for D seconds. It prints cycles/s and acquire/release p50/p99/p99.9.
//
// With -compare ADDR2 it measures ADDR2 right after with the same load and
// prints the ratio, so figures are compared within one run:
//
//	lockbench -addr 127.0.0.1:6380 -compare 127.0.0.1:6379 -clients 50 -duration 10s
//
// -client lean (or lean-eval, releasing by EVAL) drives the same cycle
// with lockbench's own RESP client, one connection per client and
// -pipeline acquires in flight each: a load that costs the machine little
// CPU per cycle, so that the servers, not the load, set the pace.
//
// An address "redsync:HOST:PORT,HOST:PORT,…" measures client-side Redlock
// (go-redsync/redsync v4, one try per acquire) over those nodes instead,
// the baseline of the quorum backend.
package main
