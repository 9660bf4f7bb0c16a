package quorum_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// counterScript is an INCR-style counter with an expiry, as rate limiters
// keep theirs.
const counterScript = `local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return n`

// delayProxy forwards connections to target, each byte towards the node
// delay after it came (in order), the replies at once: a link a little
// longer than the others.
func delayProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	return forward(t, target, func(c, u net.Conn) {
		type chunk struct {
			b  []byte
			at time.Time
		}
		q := make(chan chunk, 1024)
		go func() { // to the node, delayed
			defer u.Close()
			for ch := range q {
				time.Sleep(time.Until(ch.at)) // the fault itself, not a synchronisation
				if _, err := u.Write(ch.b); err != nil {
					return
				}
			}
		}()
		go func() {
			defer close(q)
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					q <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(delay)}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // from the node
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 {
					c.Write(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
	})
}

// TestTwoInstancesCounters: two lockproxy instances on the same three
// nodes, eight workers split between them, each running a counting write
// 30 times and retrying TRYAGAIN (which must mean no effect): every count
// from 1 to 240 is handed out exactly once, and the key ends at 240 on
// every node. Each instance's link to one node is 3ms longer (a different
// node for each), so the nodes see the instances' calls in different
// orders. Before issue 39 every node ran the scripts in the order they
// came, votes split, and a TRYAGAIN'd increment stayed applied; INCR,
// HINCRBY and RPUSH, run on each node as sent, the same.
func TestTwoInstancesCounters(t *testing.T) {
	cases := []struct {
		name, want string
		write      func(ctx context.Context, c *redis.Client, key string) (int64, error)
	}{
		{"script", "string 240 ttl", func(ctx context.Context, c *redis.Client, key string) (int64, error) {
			return c.Eval(ctx, counterScript, []string{key}, 600000).Int64()
		}},
		{"incr", "string 240", func(ctx context.Context, c *redis.Client, key string) (int64, error) {
			return c.Incr(ctx, key).Result()
		}},
		{"hincrby", "hash f=240", func(ctx context.Context, c *redis.Client, key string) (int64, error) {
			return c.HIncrBy(ctx, key, "f", 1).Result()
		}},
		{"rpush", "list " + strings.Repeat("x,", 239) + "x", func(ctx context.Context, c *redis.Client, key string) (int64, error) {
			return c.RPush(ctx, key, "x").Result()
		}},
	}
	nodes := startNodes(t, 3)
	clients := make([]*redis.Client, 2)
	for i := range clients {
		addrs := addrsOf(nodes)
		slow := 2 * i // instance 0's link to node 0, instance 1's to node 2
		addrs[slow] = delayProxy(t, addrs[slow], 3*time.Millisecond)
		// A generous node timeout: a commit answered after it counts as
		// not applied (TRYAGAIN) though it may have reached the node,
		// which two loaded cores under -race must not turn into a gap.
		b := newBackendCfg(t, quorum.Config{Nodes: addrs, NodeTimeout: time.Second})
		addr := testsrv.StartLockproxy(t, proxy.Config{BackendName: "quorum"}, b)
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 8})
		t.Cleanup(func() { clients[i].Close() })
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "counter:" + tc.name
			countOnce(t, clients, func(ctx context.Context, c *redis.Client) (int64, error) { return tc.write(ctx, c, key) })
			settledOn(t, direct(t, addrsOf(nodes)), key, tc.want)
		})
	}
}

// countOnce has eight workers, split between clients, each call write 30
// times, retrying TRYAGAIN: the counts answered must be 1 to 240, each
// once.
func countOnce(t *testing.T, clients []*redis.Client, write func(context.Context, *redis.Client) (int64, error)) {
	ctx := t.Context()
	const workers, each = 8, 30
	var mu sync.Mutex
	var got []int64
	tries := 0
	why := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		c := clients[w%len(clients)]
		wg.Go(func() {
			for range each {
				for attempt := 0; ; attempt++ {
					n, err := write(ctx, c)
					mu.Lock()
					tries++
					if err == nil {
						got = append(got, n)
					} else {
						why[strings.SplitN(err.Error(), ":", 2)[0]]++
					}
					mu.Unlock()
					if err == nil {
						break
					}
					if !isTryAgain(err) || attempt > 200 {
						t.Errorf("write: %v (attempt %d)", err, attempt)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	for i, n := range got {
		if n != int64(i+1) {
			t.Fatalf("counts handed out: %v; want each of 1..%d once (%d tries; TRYAGAINs: %v)", got, workers*each, tries, why)
		}
	}
	if len(got) != workers*each {
		t.Fatalf("%d counts handed out; want %d", len(got), workers*each)
	}
	t.Logf("%d writes, %d tries (TRYAGAINs: %v)", len(got), tries, why)
}
