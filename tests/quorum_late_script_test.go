package tests

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/proxy"
)

// TestQuorumLateAcquireLeavesNothing is issue 39 item 8: two nodes of
// three paused (SIGSTOP) for 150ms, beyond the 50ms node timeout, while an
// acquire of new keys runs; the client is told TRYAGAIN (1 of 3 nodes
// answered). The paused nodes run the acquire when they resume, and their
// replies come late: what it created there must be removed again, so that
// the key is free — on the nodes, through lockproxy's GET, and for the
// next acquire of another client. Before, a plain SET NX was undone but
// node redlock's acquiring script (sent by EVALSHA) left tok-s on both
// late nodes for its whole TTL: a majority holding the lock of a client
// that was never granted it. Single-key and multi-key acquires, both
// front ends.
func TestQuorumLateAcquireLeavesNothing(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("testdata/scripts/redlock5-acquire.lua")
	if err != nil {
		t.Fatal(err)
	}
	acquire := redis.NewScript(string(src))
	cases := []struct {
		name string
		keys []string
		run  acquireFunc
	}{
		{"SET NX PX", []string{"late:set"}, func(ctx context.Context, c *redis.Client, keys []string, tok string) error {
			err := c.SetArgs(ctx, keys[0], tok, redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err()
			if errors.Is(err, redis.Nil) {
				return errRefused
			}
			return err
		}},
		{"redlock script", []string{"late:s"}, scriptAcquire(acquire)},
		{"redlock multi-key script", []string{"late:m1", "late:m2"}, scriptAcquire(acquire)},
		{"MULTI SET NX PX", []string{"late:x"}, func(ctx context.Context, c *redis.Client, keys []string, tok string) error {
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				return p.SetArgs(ctx, keys[0], tok, redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err()
			})
			if errors.Is(err, redis.Nil) {
				return errRefused
			}
			return err
		}},
	}
	for _, path := range []string{proxy.DataPathLoops, proxy.DataPathGoroutines} {
		for _, tc := range cases {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				lateAcquire(t, path, tc.keys, tc.run)
			})
		}
	}
}

// acquireFunc takes keys for tok through c: nil when granted, errRefused
// when held, else the error.
type acquireFunc func(ctx context.Context, c *redis.Client, keys []string, tok string) error

var errRefused = errors.New("refused: held")

// scriptAcquire is node redlock's acquire (its reply the number of keys
// taken, 0 when one is held) as an acquireFunc; go-redis sends it by
// EVALSHA.
func scriptAcquire(s *redis.Script) acquireFunc {
	return func(ctx context.Context, c *redis.Client, keys []string, tok string) error {
		n, err := s.Run(ctx, c, keys, tok, 30000).Int()
		if err == nil && n != len(keys) {
			return errRefused
		}
		return err
	}
}

// lateAcquire runs one case of TestQuorumLateAcquireLeavesNothing on front
// end path.
func lateAcquire(t *testing.T, path string, keys []string, run acquireFunc) {
	addr, nodes := testsrv.StartQuorumProxyWith(t, 3, 50*time.Millisecond, proxy.Config{BackendName: "quorum", DataPath: path})
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	direct := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		direct[i] = redis.NewClient(&redis.Options{Addr: n.Addr})
		defer direct[i].Close()
	}
	// Warm-up on other keys, all nodes up: the script is classified and
	// loaded on every node's connections, as a client's second call finds
	// it. A TRYAGAIN under a loaded machine is tried again.
	warm := make([]string, len(keys))
	for i, k := range keys {
		warm[i] = k + ":warm"
	}
	if !testsrv.Settled(func() bool { return run(ctx, c, warm, "tok-w") == nil }) {
		t.Fatal("warm-up acquire never granted")
	}

	resumed := pauseTwo(t, nodes)
	err := run(ctx, c, keys, "tok-s")
	if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("acquire with two nodes of three paused = %v; want TRYAGAIN", err)
	}
	<-resumed

	for i, d := range direct {
		var n int64
		if !testsrv.Settled(func() bool { n, _ = d.Exists(ctx, keys...).Result(); return n == 0 }) {
			t.Errorf("node %d still holds %d of %q after the acquire was told TRYAGAIN", i, n, keys)
		}
	}
	for _, k := range keys {
		if v, err := c.Get(ctx, k).Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("GET %s through lockproxy = %q, %v; want nil (nobody was granted it)", k, v, err)
		}
	}
	other := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer other.Close()
	if err := run(ctx, other, keys, "tok-o"); err != nil {
		t.Errorf("another client's acquire of %q = %v; want it granted", keys, err)
	}
}

// TestQuorumLateExtendKeepsOwnersLock checks node redlock's extend under
// the same fault: two nodes of three paused beyond the node timeout while
// the holder extends its lock, which is told TRYAGAIN. The late nodes run
// the extend when they resume; it changes no key but the holder's own and
// creates none, so nothing is undone: every node still holds the holder's
// token, and the holder's release through lockproxy frees the key on all
// of them. Both front ends.
func TestQuorumLateExtendKeepsOwnersLock(t *testing.T) {
	t.Parallel()
	load := func(name string) *redis.Script {
		src, err := os.ReadFile("testdata/scripts/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return redis.NewScript(string(src))
	}
	acquire, extend, release := load("redlock5-acquire.lua"), load("redlock5-extend.lua"), load("redlock5-release.lua")
	for _, path := range []string{proxy.DataPathLoops, proxy.DataPathGoroutines} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			addr, nodes := testsrv.StartQuorumProxyWith(t, 3, 50*time.Millisecond, proxy.Config{BackendName: "quorum", DataPath: path})
			ctx := t.Context()
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer c.Close()
			for _, k := range []string{"ext:warm", "ext:k"} {
				if !testsrv.Settled(func() bool {
					n, err := acquire.Run(ctx, c, []string{k}, "tok-e", 30000).Int()
					return err == nil && n == 1
				}) {
					t.Fatalf("acquire of %s never granted", k)
				}
			}
			if !testsrv.Settled(func() bool {
				n, err := extend.Run(ctx, c, []string{"ext:warm"}, "tok-e", 30000).Int()
				return err == nil && n == 1
			}) {
				t.Fatal("warm-up extend never answered 1")
			}

			resumed := pauseTwo(t, nodes)
			if err := extend.Run(ctx, c, []string{"ext:k"}, "tok-e", 60000).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
				t.Fatalf("extend with two nodes of three paused = %v; want TRYAGAIN", err)
			}
			<-resumed

			for i, n := range nodes {
				d := redis.NewClient(&redis.Options{Addr: n.Addr})
				if v, err := d.Get(ctx, "ext:k").Result(); err != nil || v != "tok-e" {
					t.Errorf("node %d: GET ext:k = %q, %v; want the holder's tok-e", i, v, err)
				}
				d.Close()
			}
			if !testsrv.Settled(func() bool {
				n, err := release.Run(ctx, c, []string{"ext:k"}, "tok-e").Int()
				return err == nil && n == 1
			}) {
				t.Fatal("the holder's release never answered 1")
			}
			for i, n := range nodes {
				d := redis.NewClient(&redis.Options{Addr: n.Addr})
				var got int64
				if !testsrv.Settled(func() bool { got, _ = d.Exists(ctx, "ext:k").Result(); return got == 0 }) {
					t.Errorf("node %d still holds ext:k after the holder's release", i)
				}
				d.Close()
			}
		})
	}
}

// pauseTwo stops nodes 1 and 2 for 150 ms, three node timeouts, and
// returns what closes once they run again.
func pauseTwo(t *testing.T, nodes []*testsrv.Redis) <-chan struct{} {
	nodes[1].Stop()
	nodes[2].Stop()
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(150 * time.Millisecond) // the fault's length, not a synchronisation
		nodes[1].Cont()
		nodes[2].Cont()
	}()
	t.Cleanup(func() { <-resumed })
	return resumed
}
