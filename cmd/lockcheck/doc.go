// Command lockcheck runs a contended lock workload against a RESP lock
// service (lockproxy, or any Redis) and checks the history for two clients
// holding one lock at once (see internal/lockcheck). With -client fenced it
// acquires with a script that also reads the grant's fence (LOCKPROXY
// FENCE, lockproxy only), with fence-read it reads the fence after SET NX
// PX (for quorum, whose nodes run scripts), and checks that each key's
// fences grow.
//
//	lockcheck -addr 127.0.0.1:6380 -workers 16 -keys 4 -ttl 500ms -hold 5ms -duration 30s -client goredis
//
// It prints the report and exits 0 when no violation was seen, 1 on a
// violation (two holders, or a fence that did not grow), 2 on a usage
// error.
package main
