package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// multiForms are the two ways a client takes a lock inside MULTI/EXEC:
// the legacy SETNX + PEXPIRE, and SET NX PX. Each queues its commands on
// pipe and reports whether the transaction's replies say "acquired".
var multiForms = []struct {
	name    string
	queue   func(ctx context.Context, pipe redis.Pipeliner, key, tok string) []redis.Cmder
	granted func(t *testing.T, cmds []redis.Cmder) bool
}{
	{
		name: "SETNX+PEXPIRE",
		queue: func(ctx context.Context, pipe redis.Pipeliner, key, tok string) []redis.Cmder {
			return []redis.Cmder{pipe.SetNX(ctx, key, tok, 0), pipe.PExpire(ctx, key, 30*time.Second)}
		},
		granted: func(t *testing.T, cmds []redis.Cmder) bool {
			t.Helper()
			ok, err := cmds[0].(*redis.BoolCmd).Result()
			if err != nil {
				t.Fatalf("SETNX in EXEC: %v", err)
			}
			return ok
		},
	},
	{
		name: "SET NX PX",
		queue: func(ctx context.Context, pipe redis.Pipeliner, key, tok string) []redis.Cmder {
			return []redis.Cmder{pipe.SetArgs(ctx, key, tok, redis.SetArgs{Mode: "NX", TTL: 30 * time.Second})}
		},
		granted: func(t *testing.T, cmds []redis.Cmder) bool {
			t.Helper()
			err := cmds[0].Err()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatalf("SET NX PX in EXEC: %v", err)
			}
			return err == nil
		},
	},
}

// txAcquire runs one form's transaction on c and reports whether it
// acquired.
func txAcquire(t *testing.T, c *redis.Client, form int, key, tok string) bool {
	t.Helper()
	f := multiForms[form]
	var cmds []redis.Cmder
	_, err := c.TxPipelined(t.Context(), func(pipe redis.Pipeliner) error {
		cmds = f.queue(t.Context(), pipe, key, tok)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("%s: EXEC: %v", f.name, err)
	}
	return f.granted(t, cmds)
}

// TestMultiQuorumUndo: an acquisition inside MULTI/EXEC gets the quorum
// treatment a plain SET NX gets. With the key held by another owner on two
// of three nodes, the transaction answers "not acquired" and leaves nothing
// on the third node (it used to keep the lock there for the whole TTL);
// with the key held on one node only, the transaction acquires on the two
// others and keeps it there.
func TestMultiQuorumUndo(t *testing.T) {
	addr, nodes := testsrv.StartQuorumProxy(t, 3)
	ctx := t.Context()
	direct := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		direct[i] = redis.NewClient(&redis.Options{Addr: n.Addr, Protocol: 2})
		t.Cleanup(func() { direct[i].Close() })
	}
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	for form, f := range multiForms {
		t.Run(f.name, func(t *testing.T) {
			key := "multi:held:" + f.name
			for _, d := range direct[:2] {
				d.Set(ctx, key, "other", time.Minute)
			}
			if txAcquire(t, c, form, key, "mine") {
				t.Fatalf("EXEC acquired a key two of three nodes hold for another owner")
			}
			// Node 2 never holds "mine": it keeps nothing, or (the
			// transaction runs on the model and its commit brings a node
			// that missed the other owner's acquire up to date) "other".
			for i, d := range direct {
				var got string
				if !testsrv.Settled(func() bool {
					got, _ = d.Get(ctx, key).Result()
					return got == "other" || i == 2 && got == ""
				}) {
					t.Errorf("node %d: %s = %q after a refused EXEC; want other (or nothing on node 2)", i, key, got)
				}
			}

			key = "multi:minority:" + f.name
			direct[0].Set(ctx, key, "other", time.Minute)
			if !txAcquire(t, c, form, key, "mine") {
				t.Fatalf("EXEC did not acquire a key only one of three nodes holds")
			}
			for i, d := range direct[1:] {
				got, _ := d.Get(ctx, key).Result()
				ttl, _ := d.PTTL(ctx, key).Result()
				if got != "mine" || ttl <= 0 || ttl > 30*time.Second {
					t.Errorf("node %d: %s = %q, PTTL %v after a granted EXEC; want mine with at most 30s", i+1, key, got, ttl)
				}
			}
		})
	}

}

// TestMultiQuorumValidity: an acquisition inside MULTI/EXEC gets Redlock's
// validity check. With a drift allowance of a minute, a 30s lock is spent
// before any vote ends: EXEC answers TRYAGAIN and the lock is gone from
// every node (it used to answer OK).
func TestMultiQuorumValidity(t *testing.T) {
	nodes := []*testsrv.Redis{testsrv.StartRedis(t), testsrv.StartRedis(t), testsrv.StartRedis(t)}
	b, err := quorum.New(quorum.Config{Nodes: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr},
		NodeTimeout: time.Second, DriftConst: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := dialRESP(t, testsrv.StartLockproxy(t, proxy.Config{BackendName: "quorum"}, b))
	for _, cmd := range [][]string{{"MULTI"}, {"SET", "multi:late", "mine", "NX", "PX", "30000"}} {
		if _, err := c.do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := c.do("EXEC"); err != nil || !strings.HasPrefix(got, "-TRYAGAIN quorum reached too late") {
		t.Fatalf("EXEC of SET NX PX 30000 = %q, %v; want TRYAGAIN quorum reached too late", got, err)
	}
	// The node that answers after the other two is repaired moments later.
	for i, n := range nodes {
		d := redis.NewClient(&redis.Options{Addr: n.Addr, Protocol: 2})
		if !testsrv.Settled(func() bool { n, _ := d.Exists(t.Context(), "multi:late").Result(); return n == 0 }) {
			t.Errorf("node %d kept the lock of a late EXEC", i)
		}
		d.Close()
	}
}

// TestMultiQuorumQuarantine: a lock taken inside MULTI/EXEC counts toward
// the longest TTL granted, so a node that restarts afterwards (and may have
// forgotten the lock) is kept out of votes, as after a plain SET NX PX.
func TestMultiQuorumQuarantine(t *testing.T) {
	nodes := []*testsrv.Redis{testsrv.StartRedis(t), testsrv.StartRedis(t), testsrv.StartRedis(t)}
	b, err := quorum.New(quorum.Config{Nodes: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr},
		NodeTimeout: time.Second, CheckInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: testsrv.StartLockproxy(t, proxy.Config{BackendName: "quorum"}, b),
		Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	if !txAcquire(t, c, 0, "multi:q", "mine") { // SETNX + PEXPIRE 30s
		t.Fatal("EXEC did not acquire a free key")
	}
	nodes[0].Restart()
	deadline := time.Now().Add(10 * time.Second)
	for q := b.Quarantined(); len(q) != 1 || q[0] != nodes[0].Addr; q = b.Quarantined() {
		if time.Now().After(deadline) {
			t.Fatalf("a node restarted after a lock taken in EXEC was not quarantined within 10s (quarantined: %v)", q)
		}
		time.Sleep(10 * time.Millisecond) // polling the monitor
	}
}

// TestMultiQuorumSelect: a transaction that SELECTs another database
// before it acquires gets the same treatment in that database: refused
// and undone where two of three nodes hold the key there, and the
// connection ends up in the selected database, as in Redis.
func TestMultiQuorumSelect(t *testing.T) {
	addr, nodes := testsrv.StartQuorumProxy(t, 3)
	ctx := t.Context()
	direct := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		direct[i] = redis.NewClient(&redis.Options{Addr: n.Addr, Protocol: 2, DB: 1})
		t.Cleanup(func() { direct[i].Close() })
		if i < 2 {
			direct[i].Set(ctx, "m", "other", time.Minute)
		}
	}
	c := dialRESP(t, addr)
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"SET", "free", "mine", "PX", "30000"}, "+QUEUED\r\n"},
		{[]string{"SELECT", "1"}, "+QUEUED\r\n"},
		{[]string{"SETNX", "m", "mine"}, "+QUEUED\r\n"},
		{[]string{"PEXPIRE", "m", "30000"}, "+QUEUED\r\n"},
		{[]string{"EXEC"}, "*4\r\n+OK\r\n+OK\r\n:0\r\n:1\r\n"},
		{[]string{"GET", "m"}, "$5\r\nother\r\n"},
	}
	for _, s := range steps {
		got, err := c.do(s.args...)
		if err != nil || got != s.want {
			t.Fatalf("%q = %q, %v; want %q", s.args, got, err, s.want)
		}
	}
	for i, d := range direct {
		want := "other"
		if i == 2 {
			want = ""
		}
		if got, _ := d.Get(ctx, "m").Result(); got != want {
			t.Errorf("node %d: db 1 m = %q after a refused EXEC; want %q", i, got, want)
		}
		if n, _ := d.Exists(ctx, "free").Result(); n != 0 {
			t.Errorf("node %d: db 1 holds free, which EXEC set in db 0", i)
		}
		d0 := redis.NewClient(&redis.Options{Addr: nodes[i].Addr, Protocol: 2})
		if got, _ := d0.Get(ctx, "free").Result(); got != "mine" {
			t.Errorf("node %d: db 0 free = %q; want mine", i, got)
		}
		d0.Close()
	}
}

// TestMultiPostgresTwoInstances: instance A holds m (SET NX PX); instance
// B's MULTI; SETNX; PEXPIRE; EXEC is refused and m stays A's, read from
// both instances, in both strategies. A transaction on a free key
// acquires, and the lock it takes excludes the other instance.
func TestMultiPostgresTwoInstances(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			addrA, dsn := testsrv.StartPostgresProxy(t, strategy)
			a, b := pgClient(t, addrA), pgClient(t, startPostgresProxyOn(t, dsn, strategy))
			if err := a.SetArgs(ctx, "m", "a", redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err(); err != nil {
				t.Fatal(err)
			}
			for form, f := range multiForms {
				if txAcquire(t, b, form, "m", "b") {
					t.Fatalf("B: %s in EXEC acquired A's lock", f.name)
				}
				for name, c := range map[string]*redis.Client{"A": a, "B": b} {
					if v, err := c.Get(ctx, "m").Result(); v != "a" || err != nil {
						t.Fatalf("%s: GET m after B's %s = %q, %v; want a", name, f.name, v, err)
					}
				}
			}

			for form, f := range multiForms {
				key := "free:" + f.name
				if !txAcquire(t, b, form, key, "b") {
					t.Fatalf("B: %s in EXEC on a free key did not acquire", f.name)
				}
				if err := a.SetArgs(ctx, key, "a", redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err(); !errors.Is(err, redis.Nil) {
					t.Fatalf("A: SET NX of the lock B took in EXEC = %v; want nil", err)
				}
				if ms, err := a.PTTL(ctx, key).Result(); err != nil || ms <= 0 || ms > 30*time.Second {
					t.Fatalf("A: PTTL of B's lock = %v, %v; want at most 30s", ms, err)
				}
			}
			sql := pgConn(t, dsn)
			if strategy == pgbridge.Lease {
				// The lease row is the lock: B's token, with the TTL set in EXEC.
				var tok []byte
				var left int64
				if err := sql.QueryRow(ctx, `SELECT token, (extract(epoch from expires_at - now()) * 1000)::bigint
					FROM lockproxy.leases WHERE db = 0 AND key = 'free:SETNX+PEXPIRE'`).Scan(&tok, &left); err != nil ||
					string(tok) != "b" || left <= 0 || left > 30000 {
					t.Fatalf("lease row of a lock taken in EXEC = %q, %d ms left, %v; want b, at most 30s", tok, left, err)
				}
				return
			}
			// B holds the advisory lock of what it took in EXEC: SQL sees it.
			var got bool
			if err := sql.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('free:SET NX PX', 0))`).Scan(&got); err != nil || got {
				t.Fatalf("pg_try_advisory_lock of a lock taken in EXEC = %v, %v; want false", got, err)
			}
		})
	}
}
