package quorum_test

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
)

// TestKeySpaceMajority: KEYS and SCAN list the keys Q nodes hold, not a
// key left on one node; FLUSHALL empties every database but keeps the
// horizon marker, which the value-type commands refuse to touch.
func TestKeySpaceMajority(t *testing.T) {
	nodes := startNodes(t, 3)
	addrs := []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr}
	b := newBackend(t, addrs)
	ctx := context.Background()
	do := func(db int, args ...string) (backend.Value, error) {
		t.Helper()
		a := make([][]byte, len(args))
		for i, s := range args {
			a[i] = []byte(s)
		}
		var keys []string
		if len(args) > 1 && args[0] != "keys" && args[0] != "scan" && !slices.Contains([]string{"flushall", "flushdb"}, args[0]) {
			keys = []string{args[1]}
		}
		return b.Do(ctx, db, keys, a)
	}
	if _, err := do(0, "hset", "h", "f", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Set(ctx, 0, "lock", []byte("tok"), backend.SetOptions{Cond: backend.IfAbsent}); err != nil {
		t.Fatal(err)
	}
	lone := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer lone.Close()
	lone.Set(ctx, "minority", "x", 0) // a lost acquire's leftover on one node
	got, err := do(0, "keys", "*")
	if err != nil {
		t.Fatal(err)
	}
	if want := `["h" "lock"]`; got.String() != want {
		t.Errorf("KEYS * = %v; want %s", got, want)
	}
	if got, _ := do(0, "scan", "0", "TYPE", "hash"); got.String() != `["0" ["h"]]` {
		t.Errorf("SCAN 0 TYPE hash = %v", got)
	}
	if _, err := do(15, "hset", "lockproxy:quorum-horizon", "ttl_ms", "0"); err == nil {
		t.Error("HSET of the horizon marker was served")
	}
	if got, _ := do(15, "keys", "*"); len(got.Elems) != 0 {
		t.Errorf("KEYS * in database 15 = %v; the marker is listed", got)
	}
	if got, err := do(0, "flushall"); err != nil || got.String() != "+OK" {
		t.Fatalf("FLUSHALL = %v, %v", got, err)
	}
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, DB: 15})
		n, _ := c.Exists(ctx, "lockproxy:quorum-horizon").Result()
		c.Close()
		if n != 1 {
			t.Errorf("node %d lost the horizon marker to FLUSHALL", i)
		}
	}
	if n, _ := lone.DBSize(ctx).Result(); n != 0 {
		t.Errorf("node 0 holds %d keys after FLUSHALL", n)
	}
}
