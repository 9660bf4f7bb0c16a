package tests

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
)

// blockingTargets starts one lockproxy of each backend on the front end
// dataPath: blocking pops are served on both front ends by different
// code (a goroutine per connection reads nothing while its command runs;
// the event loops read on), so each scenario runs on both.
func blockingTargets(t *testing.T, dataPath string) []pubsubTarget {
	one := func(name, addr string) pubsubTarget { return pubsubTarget{name: name, addrs: [2]string{addr, addr}} }
	cfg := func(backend string) proxy.Config { return proxy.Config{BackendName: backend, DataPath: dataPath} }
	targets := []pubsubTarget{one("memory", testsrv.StartLockproxy(t, cfg("memory"), memory.New(memory.Config{})))}
	q, _ := testsrv.StartQuorumProxyWith(t, 3, time.Second, cfg("quorum"))
	targets = append(targets, one("quorum", q))
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		dsn := testsrv.SharedPostgres(t).NewDatabase(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, Strategy: strategy, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
		cancel()
		if err != nil {
			t.Fatalf("pgbridge %s: %v", strategy, err)
		}
		targets = append(targets, one("pg-"+strategy, testsrv.StartLockproxy(t, cfg("postgres"), b)))
	}
	return targets
}

// TestBlockingPops runs the scenarios of blocking pops over several
// connections on a real redis-server and on lockproxy, every backend on
// both front ends, and requires the same frames. The scenarios run one
// after the other: INFO's blocked_clients counts the server's every
// blocked client.
func TestBlockingPops(t *testing.T) {
	t.Parallel()
	redis := testsrv.StartRedis(t)
	for _, dataPath := range []string{proxy.DataPathLoops, proxy.DataPathGoroutines} {
		t.Run(dataPath, func(t *testing.T) {
			for _, target := range blockingTargets(t, dataPath) {
				t.Run(target.name, func(t *testing.T) {
					for _, sc := range bpScenarios {
						if sc.only != nil && !slices.Contains(sc.only, target.name) {
							continue
						}
						protos := sc.protos
						if protos == nil {
							protos = []int{2, 3}
						}
						for _, proto := range protos {
							t.Run(fmt.Sprintf("resp%d/%s", proto, sc.name), func(t *testing.T) {
								psRun(t, redis.Addr, target, proto, sc)
							})
						}
					}
				})
			}
		})
	}
}

// bpClean deletes the keys a scenario uses, on connection conn, with the
// same reply whatever was there (the reference redis-server serves every
// target in turn).
func bpClean(conn string, keys ...string) psStep {
	return psSend(conn, 1, append([]string{"EVAL", "redis.call('del', unpack(KEYS))", strconv.Itoa(len(keys))}, keys...)...)
}

var bpScenarios = []psScenario{
	// A waiter whose client went away takes nothing: the element stays
	// for the next reader, and INFO stops counting the waiter at once.
	{name: "gone-waiter-blpop", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:q1"),
			psSend("a", 0, "BLPOP", "bp:q1", "0"),
			psState("b", "blocked_clients:1"),
			psHangup("a"),
			psState("b", "blocked_clients:0"),
			psSend("b", 1, "LPUSH", "bp:q1", "job"),
			psSend("b", 1, "LRANGE", "bp:q1", "0", "-1"),
		}},
	// The same with a second waiter, blocked after the one that goes:
	// the element is the second's.
	{name: "gone-waiter-then-live", conns: []psConn{{"a", instA}, {"c", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:q2"),
			psSend("a", 0, "BRPOP", "bp:q2", "0"),
			psState("b", "blocked_clients:1"),
			psSend("c", 0, "BRPOP", "bp:q2", "0"),
			psState("b", "blocked_clients:2"),
			psHangup("a"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:q2", "job"),
			psRecv("c", 1),
			psSend("b", 1, "LLEN", "bp:q2"),
		}},
	// BLMOVE and BZPOPMIN: nothing moved or popped for a client gone.
	{name: "gone-waiter-blmove", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:src", "bp:dst"),
			psSend("a", 0, "BLMOVE", "bp:src", "bp:dst", "LEFT", "RIGHT", "0"),
			psState("b", "blocked_clients:1"),
			psHangup("a"),
			psState("b", "blocked_clients:0"),
			psSend("b", 1, "RPUSH", "bp:src", "job"),
			psSend("b", 1, "LRANGE", "bp:src", "0", "-1"),
			psSend("b", 1, "EXISTS", "bp:dst"),
		}},
	{name: "gone-waiter-bzpopmin", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:z"),
			psSend("a", 0, "BZPOPMIN", "bp:z", "0"),
			psState("b", "blocked_clients:1"),
			psHangup("a"),
			psState("b", "blocked_clients:0"),
			psSend("b", 1, "ZADD", "bp:z", "1", "m"),
			psSend("b", 1, "ZRANGE", "bp:z", "0", "-1", "WITHSCORES"),
		}},
	// A transaction or a script wakes the waiters with the state it
	// leaves: a push it undoes wakes nobody, a push it turns into another
	// type answers no WRONGTYPE (Redis 7.0 serves a blocked client only
	// from a key of its type), and of several pushes the waiter gets the
	// last.
	{name: "multi-push-del", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:l"),
			psSend("a", 0, "BLPOP", "bp:l", "0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "MULTI"),
			psSend("b", 1, "LPUSH", "bp:l", "a"),
			psSend("b", 1, "DEL", "bp:l"),
			psSend("b", 1, "EXEC"),
			psNone("a"),
			psSend("b", 1, "LPUSH", "bp:l", "b"),
			psRecv("a", 1),
		}},
	{name: "multi-push-del-set", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:l"),
			psSend("a", 0, "BLPOP", "bp:l", "0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "MULTI"),
			psSend("b", 1, "LPUSH", "bp:l", "a"),
			psSend("b", 1, "DEL", "bp:l"),
			psSend("b", 1, "SET", "bp:l", "foo"),
			psSend("b", 1, "EXEC"),
			psNone("a"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "DEL", "bp:l"),
			psSend("b", 1, "LPUSH", "bp:l", "b"),
			psRecv("a", 1),
		}},
	{name: "multi-one-by-one", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:l"),
			psSend("a", 0, "BLPOP", "bp:l", "0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "MULTI"),
			psSend("b", 1, "LPUSH", "bp:l", "a"),
			psSend("b", 1, "CLIENT", "SETNAME", "one-by-one"), // lockproxy runs such a transaction command by command
			psSend("b", 1, "DEL", "bp:l"),
			psSend("b", 1, "SET", "bp:l", "foo"),
			psSend("b", 1, "EXEC"),
			psNone("a"),
			psSend("b", 1, "DEL", "bp:l"),
			psSend("b", 1, "LPUSH", "bp:l", "b"),
			psRecv("a", 1),
		}},
	{name: "multi-zadd-del-set", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:zl"),
			psSend("a", 0, "BZPOPMIN", "bp:zl", "0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "MULTI"),
			psSend("b", 1, "ZADD", "bp:zl", "1", "a"),
			psSend("b", 1, "DEL", "bp:zl"),
			psSend("b", 1, "SET", "bp:zl", "foo"),
			psSend("b", 1, "EXEC"),
			psNone("a"),
			psSend("b", 1, "DEL", "bp:zl"),
			psSend("b", 1, "ZADD", "bp:zl", "2", "b"),
			psRecv("a", 1),
		}},
	{name: "script-push-del-set", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:l"),
			psSend("a", 0, "BRPOP", "bp:l", "0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "EVAL", "redis.call('rpush', KEYS[1], 'a'); redis.call('del', KEYS[1]); return redis.call('set', KEYS[1], 'foo')", "1", "bp:l"),
			psNone("a"),
			psSend("b", 1, "DEL", "bp:l"),
			psSend("b", 1, "RPUSH", "bp:l", "b"),
			psRecv("a", 1),
		}},
	{name: "multi-isolated", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:l"),
			psSend("a", 0, "BLPOP", "bp:l", "0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "MULTI"),
			psSend("b", 1, "LPUSH", "bp:l", "a"),
			psSend("b", 1, "LPUSH", "bp:l", "b"),
			psSend("b", 1, "LPUSH", "bp:l", "c"),
			psSend("b", 1, "EXEC"),
			psRecv("a", 1),
			psSend("b", 1, "LRANGE", "bp:l", "0", "-1"),
		}},
	// Short timeouts answer nil on time; the waiter is counted blocked,
	// then not.
	{name: "short-timeouts", protos: []int{2}, conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:t", "bp:t2"),
			psSend("a", 0, "BLPOP", "bp:t", "0.001"),
			psState("b", "blocked_clients:0"),
			psRecv("a", 1),
			psSend("a", 0, "BRPOP", "bp:t", "bp:t2", "0.001"),
			psState("b", "blocked_clients:0"),
			psRecv("a", 1),
			psSend("a", 0, "BZPOPMAX", "bp:t", "0.001"),
			psState("b", "blocked_clients:0"),
			psRecv("a", 1),
			psSend("a", 0, "BRPOPLPUSH", "bp:t", "bp:t2", "0.5"),
			psState("b", "blocked_clients:1"),
			psState("b", "blocked_clients:0"),
			psRecv("a", 1),
			psSend("a", 0, "BLMOVE", "bp:t", "bp:t2", "LEFT", "LEFT", "0.2"),
			psState("b", "blocked_clients:1"),
			psState("b", "blocked_clients:0"),
			psRecv("a", 1),
			psSend("a", 1, "BLPOP", "bp:t", "-1"),
			// Redis rounds the timeout up to a millisecond: a tiny
			// negative one is zero, for ever; a tiny positive one, 1 ms.
			psSend("a", 0, "BLPOP", "bp:t", "-0.0001"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:t", "x"),
			psRecv("a", 1),
			psSend("a", 1, "BLPOP", "bp:t", "0.0001"),
		}},
	// BRPOPLPUSH and BLMOVE into a key of another type: WRONGTYPE, at
	// once or when woken, and the element stays in the source.
	{name: "brpoplpush-wrong-types", conns: []psConn{{"a", instA}, {"c", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:src", "bp:dst", "bp:dst2"),
			psSend("b", 1, "SET", "bp:src", "nolist"),
			psSend("a", 1, "BRPOPLPUSH", "bp:src", "bp:dst", "1"),
			psSend("b", 1, "DEL", "bp:src"),
			psSend("b", 1, "SET", "bp:dst", "nolist"),
			psSend("b", 1, "LPUSH", "bp:src", "foo"),
			psSend("a", 1, "BRPOPLPUSH", "bp:src", "bp:dst", "1"),
			psSend("b", 1, "DEL", "bp:src"),
			psSend("a", 0, "BRPOPLPUSH", "bp:src", "bp:dst", "0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:src", "foo"),
			psRecv("a", 1),
			psSend("b", 1, "LRANGE", "bp:src", "0", "-1"),
			psSend("b", 1, "DEL", "bp:src"),
			psSend("a", 0, "BLMOVE", "bp:src", "bp:dst", "RIGHT", "LEFT", "0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:src", "a", "b", "c"),
			psRecv("a", 1),
			psSend("b", 1, "LRANGE", "bp:src", "0", "-1"),
		}},
	// Several waiters: the first blocked is served first, and one whose
	// destination is of another type gets WRONGTYPE and leaves the element
	// for the next.
	{name: "brpoplpush-multiple-waiters", conns: []psConn{{"a", instA}, {"c", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:src", "bp:dst", "bp:dst2"),
			psSend("b", 1, "SET", "bp:dst", "nolist"),
			psSend("a", 0, "BRPOPLPUSH", "bp:src", "bp:dst", "0"),
			psState("b", "blocked_clients:1"),
			psSend("c", 0, "BRPOPLPUSH", "bp:src", "bp:dst2", "0"),
			psState("b", "blocked_clients:2"),
			psSend("b", 1, "LPUSH", "bp:src", "foo"),
			psSend("b", 1, "LRANGE", "bp:dst2", "0", "-1"),
			psRecv("a", 1),
			psRecv("c", 1),
		}},
	// Chained and circular moves: a value moved into a list another
	// client waits on goes on to it.
	{name: "linked-blmove", conns: []psConn{{"a", instA}, {"c", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:l1", "bp:l2", "bp:l3"),
			psSend("a", 0, "BLMOVE", "bp:l1", "bp:l2", "RIGHT", "LEFT", "0"),
			psState("b", "blocked_clients:1"),
			psSend("c", 0, "BLMOVE", "bp:l2", "bp:l3", "LEFT", "RIGHT", "0"),
			psState("b", "blocked_clients:2"),
			psSend("b", 1, "RPUSH", "bp:l1", "foo"),
			psSend("b", 1, "LRANGE", "bp:l1", "0", "-1"),
			psSend("b", 1, "LRANGE", "bp:l2", "0", "-1"),
			psSend("b", 1, "LRANGE", "bp:l3", "0", "-1"),
			psRecv("a", 1),
			psRecv("c", 1),
		}},
	{name: "circular-brpoplpush", conns: []psConn{{"a", instA}, {"c", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:l1", "bp:l2"),
			psSend("a", 0, "BRPOPLPUSH", "bp:l1", "bp:l2", "0"),
			psState("b", "blocked_clients:1"),
			psSend("c", 0, "BRPOPLPUSH", "bp:l2", "bp:l1", "0"),
			psState("b", "blocked_clients:2"),
			psSend("b", 1, "RPUSH", "bp:l1", "foo"),
			psSend("b", 1, "LRANGE", "bp:l1", "0", "-1"),
			psSend("b", 1, "LRANGE", "bp:l2", "0", "-1"),
			psRecv("a", 1),
			psRecv("c", 1),
		}},
	{name: "self-brpoplpush", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:l1"),
			psSend("a", 0, "BRPOPLPUSH", "bp:l1", "bp:l1", "0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:l1", "foo"),
			psRecv("a", 1),
			psSend("b", 1, "LRANGE", "bp:l1", "0", "-1"),
		}},
	{name: "blmove-to-waiting-blpop", conns: []psConn{{"a", instA}, {"c", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:src", "bp:dst"),
			psSend("c", 0, "BLPOP", "bp:dst", "0"),
			psState("b", "blocked_clients:1"),
			psSend("a", 0, "BLMOVE", "bp:src", "bp:dst", "LEFT", "RIGHT", "0"),
			psState("b", "blocked_clients:2"),
			psSend("b", 1, "RPUSH", "bp:src", "foo"),
			psSend("b", 1, "EXISTS", "bp:dst"),
			psRecv("a", 1),
			psRecv("c", 1),
		}},
	// FIFO: of clients blocked on one key, the first blocked is served
	// first.
	{name: "fifo", conns: []psConn{{"a", instA}, {"c", instA}, {"d", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:f"),
			psSend("a", 0, "BLPOP", "bp:f", "0"),
			psState("b", "blocked_clients:1"),
			psSend("c", 0, "BLPOP", "bp:f", "0"),
			psState("b", "blocked_clients:2"),
			psSend("d", 0, "BLPOP", "bp:f", "0"),
			psState("b", "blocked_clients:3"),
			psSend("b", 1, "RPUSH", "bp:f", "1"),
			psStateNow("b", "blocked_clients:2"),
			psRecv("a", 1),
			psSend("b", 1, "RPUSH", "bp:f", "2", "3"),
			psSend("b", 1, "LLEN", "bp:f"),
			psRecv("c", 1),
			psRecv("d", 1),
		}},
	// Timeouts as Redis reads them (strtold, then milliseconds rounded up):
	// errors, short ones, and ones that mean for ever.
	{name: "timeout-forms", protos: []int{2}, conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:t"),
			psSend("a", 1, "BLPOP", "bp:t", "1e20"),
			psSend("a", 1, "BLPOP", "bp:t", "9.3e15"),
			psSend("a", 1, "BLPOP", "bp:t", "-0.0011"),
			psSend("a", 1, "BLPOP", "bp:t", "-1"),
			psSend("a", 1, "BLPOP", "bp:t", "+inf"),
			psSend("a", 1, "BLPOP", "bp:t", "-inf"),
			psSend("a", 1, "BLPOP", "bp:t", "INF"),
			psSend("a", 1, "BLPOP", "bp:t", "Infinity"),
			psSend("a", 1, "BLPOP", "bp:t", "nan"),
			psSend("a", 1, "BLPOP", "bp:t", "-nan"),
			psSend("a", 1, "BLPOP", "bp:t", " 1"),
			psSend("a", 1, "BLPOP", "bp:t", "1 "),
			psSend("a", 1, "BLPOP", "bp:t", "1p3"),
			psSend("a", 1, "BLPOP", "bp:t", "1e"),
			psSend("a", 1, "BLPOP", "bp:t", "1_0"),
			psSend("a", 1, "BLPOP", "bp:t", "0x"),
			psSend("a", 1, "BLPOP", "bp:t", "--1"),
			psSend("a", 1, "BLPOP", "bp:t", "+-1"),
			psSend("a", 1, "BLPOP", "bp:t", "abc"),
			psSend("a", 1, "BLPOP", "bp:t", ""),
			psSend("a", 1, "BLPOP", "bp:t", "1e5000"),
			psSend("a", 1, "BLPOP", "bp:t", "1e-5000"),
			psSend("a", 1, "BLPOP", "bp:t", "0x1p99999"),
			psSend("a", 1, "BLPOP", "bp:t", "1e-5000000000"),
			psSend("a", 1, "BRPOP", "bp:t", "0.0001"),
			psSend("a", 1, "BRPOP", "bp:t", "1e-400"),
			psSend("a", 1, "BRPOP", "bp:t", "0x1p-12"),
			psSend("a", 1, "BRPOP", "bp:t", ".05"),
			psSend("a", 1, "BRPOP", "bp:t", "5e-2"),
			psSend("a", 1, "BRPOP", "bp:t", "+0.01"),
			psSend("a", 1, "BRPOP", "bp:t", "0X0.01"),
			psSend("a", 0, "BLPOP", "bp:t", "-0.001"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:t", "x"),
			psRecv("a", 1),
			psSend("a", 0, "BLPOP", "bp:t", "-0.0009"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:t", "x"),
			psRecv("a", 1),
			psSend("a", 0, "BLPOP", "bp:t", "9.2e15"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:t", "x"),
			psRecv("a", 1),
			psSend("a", 0, "BLPOP", "bp:t", "0x10"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:t", "x"),
			psRecv("a", 1),
			psSend("a", 0, "BLPOP", "bp:t", "1e3"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:t", "x"),
			psRecv("a", 1),
			psSend("a", 0, "BLPOP", "bp:t", "-0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:t", "x"),
			psRecv("a", 1),
			psSend("a", 0, "BLPOP", "bp:t", "0e0"),
			psState("b", "blocked_clients:1"),
			psSend("b", 1, "RPUSH", "bp:t", "x"),
			psRecv("a", 1),
		}},
	// What a blocked client sends meanwhile waits, in order, behind the
	// blocked command (the goroutine front end reads it while it watches
	// for the client's end).
	{name: "input-while-blocked", conns: []psConn{{"a", instA}, {"b", instA}},
		steps: []psStep{
			bpClean("b", "bp:in"),
			psSend("a", 0, "BLPOP", "bp:in", "0"),
			psState("b", "blocked_clients:1"),
			psSend("a", 0, "PING", "after"),
			psSend("a", 0, "LLEN", "bp:in"),
			psNone("a"),
			psSend("b", 1, "RPUSH", "bp:in", "x", "y"),
			psRecv("a", 3),
			psState("b", "blocked_clients:0"),
			psSend("a", 1, "BLPOP", "bp:in", "0"),
		}},
}

// TestBlockingPopsTLS: over TLS (the goroutine front end reads a blocked
// client's connection through crypto/tls), a blocked client's pipelined
// command waits behind it, and a client that goes takes nothing.
func TestBlockingPopsTLS(t *testing.T) {
	t.Parallel()
	f := testsrv.NewTLSFiles(t)
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := proxy.New(proxy.Config{BackendName: "memory", DataPath: proxy.DataPathGoroutines}, memory.New(memory.Config{}))
	go srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	addr := ln.Addr().String()
	dial := func(t testing.TB, addr string) *respConn {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, f.ClientConfig(t, false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &respConn{c: c, rd: bufio.NewReader(c)}
	}
	target := pubsubTarget{name: "memory-tls", addrs: [2]string{addr, addr}, dial: dial}
	redis := testsrv.StartRedis(t)
	for _, sc := range bpScenarios {
		t.Run(sc.name, func(t *testing.T) {
			psRun(t, redis.Addr, target, 2, sc)
		})
	}
}

// TestBlockingPopsAcrossInstances: clients blocked on instance A are
// served, in the order they blocked, by pushes through instance B sharing
// the backend (the Bus carries the write; A serves after B's reply), and
// one that went away takes nothing.
func TestBlockingPopsAcrossInstances(t *testing.T) {
	t.Parallel()
	redis := testsrv.StartRedis(t)
	scenarios := []psScenario{
		{name: "fifo", conns: []psConn{{"a", instA}, {"c", instA}, {"d", instA}, {"b", instB}, {"i", instA}},
			steps: []psStep{
				bpClean("b", "bp:x"),
				psSend("a", 0, "BLPOP", "bp:x", "0"),
				psState("i", "blocked_clients:1"),
				psSend("c", 0, "BLPOP", "bp:x", "0"),
				psState("i", "blocked_clients:2"),
				psSend("d", 0, "BLPOP", "bp:x", "0"),
				psState("i", "blocked_clients:3"),
				psSend("b", 1, "RPUSH", "bp:x", "1"),
				psRecv("a", 1),
				psSend("b", 1, "RPUSH", "bp:x", "2", "3"),
				psRecv("c", 1),
				psRecv("d", 1),
			}},
		{name: "gone-waiter", conns: []psConn{{"a", instA}, {"c", instA}, {"b", instB}, {"i", instA}},
			steps: []psStep{
				bpClean("b", "bp:y"),
				psSend("a", 0, "BRPOP", "bp:y", "0"),
				psState("i", "blocked_clients:1"),
				psSend("c", 0, "BRPOP", "bp:y", "0"),
				psState("i", "blocked_clients:2"),
				psHangup("a"),
				psState("i", "blocked_clients:1"),
				psSend("b", 1, "RPUSH", "bp:y", "job"),
				psRecv("c", 1),
				psSend("b", 1, "LLEN", "bp:y"),
			}},
	}
	for _, kind := range sharedKinds {
		t.Run(kind, func(t *testing.T) {
			a, b := twoInstances(t, kind)
			target := pubsubTarget{name: kind, addrs: [2]string{a, b}}
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) { psRun(t, redis.Addr, target, 2, sc) })
			}
		})
	}
}
