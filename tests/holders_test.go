package tests

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/migrate"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// holderConfig is the proxy configuration of the holder tests: a named
// instance and two named users.
func holderConfig(backendName string) proxy.Config {
	return proxy.Config{BackendName: backendName, Instance: "inst-" + backendName, Users: []proxy.User{
		{Name: "app", PasswordSHA256: sha256.Sum256([]byte("app-pw"))},
		{Name: "ops", PasswordSHA256: sha256.Sum256([]byte("ops-pw")), Admin: true},
	}}
}

// holderTargets runs f on every backend, each served with holderConfig;
// nodes are the quorum's (nil elsewhere).
func holderTargets(t *testing.T, f func(t *testing.T, name, addr string, nodes []*testsrv.Redis)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		f(t, "memory", testsrv.StartLockproxy(t, holderConfig("memory"), memory.New(memory.Config{})), nil)
	})
	t.Run("migrating", func(t *testing.T) {
		legacy := testsrv.StartRedis(t)
		b, err := migrate.New(memory.New(memory.Config{}), migrate.Config{URL: "redis://" + legacy.Addr, Timeout: time.Second, StatusInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatalf("migrate: %v", err)
		}
		f(t, "migrating", testsrv.StartLockproxy(t, holderConfig("migrating"), b), nil)
	})
	t.Run("quorum3", func(t *testing.T) {
		nodes := make([]*testsrv.Redis, 3)
		addrs := make([]string, 3)
		for i := range nodes {
			nodes[i] = testsrv.StartRedis(t)
			addrs[i] = nodes[i].Addr
		}
		b, err := quorum.New(quorum.Config{Nodes: addrs, NodeTimeout: time.Second})
		if err != nil {
			t.Fatalf("quorum: %v", err)
		}
		f(t, "quorum3", testsrv.StartLockproxy(t, holderConfig("quorum3"), b), nodes)
	})
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run("pg-"+strategy, func(t *testing.T) {
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			b, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, Strategy: strategy, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
			if err != nil {
				t.Fatalf("pgbridge: %v", err)
			}
			f(t, "pg-"+strategy, testsrv.StartLockproxy(t, holderConfig("pg-"+strategy), b), nil)
		})
	}
}

// holderOf reads LOCKPROXY LOCK key's fourth element as a map, its nodes
// apart; nil when the key is free.
func holderOf(t *testing.T, c *redis.Client, key string) (fields map[string]any, nodes map[string]int64) {
	t.Helper()
	v, err := c.Do(t.Context(), "LOCKPROXY", "LOCK", key).Slice()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		t.Fatalf("LOCKPROXY LOCK %s: %v", key, err)
	}
	if len(v) != 4 {
		t.Fatalf("LOCKPROXY LOCK %s = %v; want 4 elements", key, v)
	}
	return holderFields(t, v[3])
}

// holderFields reads a holder map, as RESP2 (a flat array) or RESP3 (a
// map) brings it.
func holderFields(t *testing.T, v any) (map[string]any, map[string]int64) {
	t.Helper()
	fields := map[string]any{}
	switch m := v.(type) {
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			fields[fmt.Sprint(m[i])] = m[i+1]
		}
	case map[any]any:
		for k, x := range m {
			fields[fmt.Sprint(k)] = x
		}
	default:
		t.Fatalf("holder = %#v; want a map", v)
	}
	nodes := map[string]int64{}
	switch m := fields["nodes"].(type) {
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			nodes[fmt.Sprint(m[i])] = m[i+1].(int64)
		}
	case map[any]any:
		for k, x := range m {
			nodes[fmt.Sprint(k)] = x.(int64)
		}
	default:
		t.Fatalf("holder's nodes = %#v; want a map", fields["nodes"])
	}
	delete(fields, "nodes")
	return fields, nodes
}

// acquireScript is a lock library's acquire (bsm/redislock's shape).
const acquireScript = `return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`

// TestHolders: LOCKPROXY LOCK and LOCKS tell who took a lock, by SET NX
// and by an acquire script, with CLIENT SETNAME and a named user, on
// every backend; a re-entrant write by another client keeps the grant's
// holder, and a new grant gets its own.
func TestHolders(t *testing.T) {
	t.Parallel()
	holderTargets(t, func(t *testing.T, name, addr string, nodes []*testsrv.Redis) {
		for _, proto := range []int{2, 3} {
			ctx := t.Context()
			app := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1, Username: "app", Password: "app-pw", ClientName: "worker-1"})
			defer app.Close()
			ops := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1, Username: "ops", Password: "ops-pw"})
			defer ops.Close()
			p := fmt.Sprintf("h%d:", proto)
			before := time.Now().UnixMilli()
			if ok, err := app.SetNX(ctx, p+"nx", "tok-nx", time.Minute).Result(); err != nil || !ok {
				t.Fatalf("SET NX = %v, %v", ok, err)
			}
			if err := app.Eval(ctx, acquireScript, []string{p + "script"}, "tok-script", 60000).Err(); err != nil {
				t.Fatalf("acquire script: %v", err)
			}
			after := time.Now().UnixMilli()
			local := app.Do(ctx, "CLIENT", "INFO").String()
			for _, key := range []string{p + "nx", p + "script"} {
				f, nodeHolds := holderOf(t, ops, key)
				if f == nil {
					t.Fatalf("%s: LOCKPROXY LOCK = nil; want the lock", key)
				}
				at, _ := f["granted_ms"].(int64)
				if at < before-1 || at > after+1 {
					t.Errorf("%s: granted_ms = %v; want within [%d, %d]", key, f["granted_ms"], before, after)
				}
				want := map[string]any{"client_name": "worker-1", "client_user": "app", "instance": "inst-" + name}
				for k, w := range want {
					if f[k] != w {
						t.Errorf("%s: %s = %v; want %v", key, k, f[k], w)
					}
				}
				if a, _ := f["client_addr"].(string); a == "" || !strings.Contains(local, "addr="+a) {
					t.Errorf("%s: client_addr = %v; want the client's address (%s)", key, f["client_addr"], strings.TrimSpace(local))
				}
				checkNodes(t, key, nodes, nodeHolds, 3)
			}
			// An extend by the holder, even under another name, keeps the
			// grant; a new grant after a release is the new client's.
			if err := app.Do(ctx, "CLIENT", "SETNAME", "worker-renamed").Err(); err != nil {
				t.Fatal(err)
			}
			if err := app.PExpire(ctx, p+"nx", 2*time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if f, _ := holderOf(t, ops, p+"nx"); f["client_name"] != "worker-1" {
				t.Errorf("after an extend: client_name = %v; want worker-1 kept", f["client_name"])
			}
			if err := app.Del(ctx, p+"nx").Err(); err != nil {
				t.Fatal(err)
			}
			if ok, err := ops.SetNX(ctx, p+"nx", "tok-ops", time.Minute).Result(); err != nil || !ok {
				t.Fatalf("SET NX after the release = %v, %v", ok, err)
			}
			if f, _ := holderOf(t, ops, p+"nx"); f["client_user"] != "ops" || f["client_name"] != "" {
				t.Errorf("a new grant by ops: %v; want client_user ops, no name", f)
			}
			if nodes != nil {
				// On which nodes: one node loses the key.
				n0 := redis.NewClient(&redis.Options{Addr: nodes[0].Addr, MaxRetries: -1})
				if err := n0.Del(ctx, p+"script").Err(); err != nil {
					t.Fatal(err)
				}
				n0.Close()
				_, got := holderOf(t, ops, p+"script")
				checkNodes(t, p+"script", nodes, got, 2)
				if got[nodes[0].Addr] != 0 {
					t.Errorf("nodes = %v; want %s at 0", got, nodes[0].Addr)
				}
			}
			// LOCKS carries the same holder after the key.
			res, err := ops.Do(ctx, "LOCKPROXY", "LOCKS", "0", "MATCH", p+"script", "COUNT", "1000").Slice()
			if err != nil {
				t.Fatalf("LOCKPROXY LOCKS: %v", err)
			}
			entries, _ := res[1].([]any)
			if len(entries) != 1 {
				t.Fatalf("LOCKPROXY LOCKS MATCH %s = %v; want one entry", p+"script", res)
			}
			e := entries[0].([]any)
			if len(e) != 5 || e[0] != p+"script" || e[1] != "tok-script" {
				t.Fatalf("LOCKS entry = %v; want [key, token, fence, PTTL, holder]", e)
			}
			if f, _ := holderFields(t, e[4]); f["client_name"] != "worker-1" {
				t.Errorf("LOCKS entry's holder = %v; want client_name worker-1", f)
			}
		}
	})
}

// checkNodes checks a quorum lock's nodes: each node's address, held on
// want of them; elsewhere no nodes.
func checkNodes(t *testing.T, key string, nodes []*testsrv.Redis, got map[string]int64, want int) {
	t.Helper()
	if nodes == nil {
		if len(got) != 0 {
			t.Errorf("%s: nodes = %v; want none", key, got)
		}
		return
	}
	held := 0
	for _, n := range nodes {
		v, ok := got[n.Addr]
		if !ok {
			t.Errorf("%s: nodes = %v; want node %s", key, got, n.Addr)
		}
		held += int(v)
	}
	if held != want {
		t.Errorf("%s: nodes = %v; want held on %d", key, got, want)
	}
}
