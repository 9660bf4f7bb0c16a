package tests

import (
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// TestScriptsBeyondLockModelAlike: a script that calls a command
// lockproxy does not serve (streams, SORT, APPEND, SETRANGE) gets the same
// reply on every backend, and writes nothing anywhere. Memory and postgres
// run scripts on the lock model, which refuses the call when it is
// reached; quorum runs them on its nodes, which would serve it, so it
// refuses such a script before sending it (luascripts/refuse.go). Before
// that, quorum answered ZADD's 1 where the others answered an error.
func TestScriptsBeyondLockModelAlike(t *testing.T) {
	quorumAddr, nodes := testsrv.StartQuorumProxy(t, 3)
	pgAddr, _ := testsrv.StartPostgresProxy(t, "advisory")
	backends := []struct{ name, addr string }{
		{"memory", testsrv.StartMemoryProxy(t)},
		{"quorum", quorumAddr},
		{"postgres", pgAddr},
	}
	refusing := "local n = 0\n" +
		"redis.call('set', KEYS[1], ARGV[1], 'PX', 10000)\n" +
		"return redis.call('append', KEYS[1] .. ':h', 'x')"
	scripts := [][]string{
		{"EVAL", "return redis.call('xadd', KEYS[1], '*', 'a', 1)", "1", "z"},
		{"EVAL", refusing, "1", "lock:h", "tok"},
		{"EVAL", "return redis.call('setrange', 'counter', 0, 'x')", "0"},
		{"EVAL", "return redis.call('sort', KEYS[1])", "1", "lock:h"},
		{"EVALSHA", luascripts.SHA1(refusing), "1", "lock:h", "tok"},
		// A script that only reads and writes strings is served alike too.
		{"EVAL", "return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', 10000)", "1", "lock:s", "tok"},
	}
	after := [][]string{{"EXISTS", "z", "lock:h", "lock:h:h", "counter"}, {"GET", "lock:s"}}
	replies := map[string][]string{}
	for _, be := range backends {
		c := dialRESP(t, be.addr)
		if r, err := c.do("SCRIPT", "LOAD", refusing); err != nil || r != "$40\r\n"+luascripts.SHA1(refusing)+"\r\n" {
			t.Fatalf("%s: SCRIPT LOAD = %q, %v", be.name, r, err)
		}
		for _, cmd := range append(scripts, after...) {
			r, err := c.do(cmd...)
			if err != nil {
				t.Fatalf("%s: %v: %v", be.name, cmd[:2], err)
			}
			replies[be.name] = append(replies[be.name], r)
		}
	}
	for i, cmd := range append(scripts, after...) {
		want := replies["memory"][i]
		for _, be := range backends[1:] {
			if got := replies[be.name][i]; got != want {
				t.Errorf("%v: %s answered %q, memory %q", cmd[:2], be.name, got, want)
			}
		}
	}
	if got := replies["memory"][0]; got[0] != '-' {
		t.Errorf("memory served XADD in a script (%q): the test no longer tests a refusal", got)
	}
	// Nothing reached the quorum nodes but the plain string lock.
	for i, n := range nodes {
		d := redis.NewClient(&redis.Options{Addr: n.Addr})
		if k, err := d.Keys(t.Context(), "*").Result(); err != nil || len(k) > 1 {
			t.Errorf("node %d holds %v (%v); want lock:s at most", i, k, err)
		}
		d.Close()
	}
}

// TestScriptsTypedAlike: a script over a sorted set (redis-semaphore's
// shape) is served alike by memory, quorum and postgres (both
// strategies) and a migrating proxy, whose legacy Redis holds the same
// sorted set afterwards.
func TestScriptsTypedAlike(t *testing.T) {
	quorumAddr, _ := testsrv.StartQuorumProxy(t, 3)
	advAddr, _ := testsrv.StartPostgresProxy(t, pgbridge.Advisory)
	leaseAddr, _ := testsrv.StartPostgresProxy(t, pgbridge.Lease)
	migAddr, legacy, _ := testsrv.StartMigratingProxy(t, "memory", memory.New(memory.Config{}))
	src := "redis.call('zremrangebyscore', KEYS[1], '-inf', 0)\n" +
		"if redis.call('zcard', KEYS[1]) < 2 then\n" +
		"  redis.call('zadd', KEYS[1], ARGV[2], ARGV[1])\n" +
		"  redis.call('pexpire', KEYS[1], 10000)\n" +
		"  return 1\n" +
		"end\n" +
		"return 0"
	run := func(addr string) []string {
		c := dialRESP(t, addr)
		var out []string
		for _, cmd := range [][]string{
			{"EVAL", src, "1", "sem", "a", "1"}, {"EVAL", src, "1", "sem", "b", "2"},
			{"EVAL", src, "1", "sem", "c", "3"}, {"ZRANGE", "sem", "0", "-1", "WITHSCORES"}, {"TYPE", "sem"},
		} {
			r, err := c.do(cmd...)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	want := []string{":1\r\n", ":1\r\n", ":0\r\n", "*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n", "+zset\r\n"}
	for _, target := range []struct{ name, addr string }{
		{"memory", testsrv.StartMemoryProxy(t)}, {"quorum", quorumAddr}, {"postgres advisory", advAddr}, {"postgres lease", leaseAddr},
		{"migrating", migAddr},
	} {
		if got := run(target.addr); !slices.Equal(got, want) {
			t.Errorf("%s: %q; want %q", target.name, got, want)
		}
	}
	if got, err := dialRESP(t, legacy.Addr).do("ZRANGE", "sem", "0", "-1", "WITHSCORES"); err != nil || got != want[3] {
		t.Errorf("migrating: the legacy Redis holds %q, %v; want %q", got, err, want[3])
	}
}
