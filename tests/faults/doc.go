// Package faults runs the lockcheck history checker (internal/lockcheck)
// against lockproxy while faults happen: nemeses that kill, pause, restart,
// slow down and partition the quorum nodes and lockproxy itself. Each test is
// one nemesis; it asserts that no two clients held one lock at once (errors,
// such as TRYAGAIN, are allowed; violations are not) and that the run had
// real contention.
//
// The short form runs in the suite (a few seconds per nemesis). The long
// form, tests/faults/soak.sh [duration], runs each nemesis for that long
// (LOCKPROXY_SOAK) and prints one table row per nemesis
// (LOCKPROXY_FAULTS_TABLE names the file the rows are appended to).
//
// The availability suite (avail_test.go) measures grants rather than
// violations: every acquire pattern (SET NX PX, an acquiring script,
// bsm/redislock, redsync, node redlock and redis-semaphore), contended and
// not, must keep at least half its all-up grant rate with one of three nodes
// killed, paused, slow or partitioned (faultproxy_test.go puts a TCP proxy
// in front of each node for the last two), with no error and no refusal of
// a free key, and give errors only with two of three down.
//
// New nemeses (for another backend) go beside these files and use
// runNemesis from harness_test.go.
package faults
