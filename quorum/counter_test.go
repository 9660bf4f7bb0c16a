package quorum_test

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/quorum"
)

func incr(t *testing.T, b *quorum.Backend, key string) (int64, error) {
	t.Helper()
	v, err := b.Do(context.Background(), 0, []string{key}, [][]byte{[]byte("incr"), []byte(key)})
	return v.Int, err
}

// TestCounterMinorityBehind: a node that missed increments does not stall
// a counter: it goes on from the value a majority holds, and the node
// behind is brought to the value answered. (Nodes that hold three
// different values give no snapshot: TRYAGAIN, as for a script.)
func TestCounterMinorityBehind(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr})
	ctx := context.Background()
	for i, v := range []string{"7", "5", "7"} { // node 1 missed two
		c := redis.NewClient(&redis.Options{Addr: nodes[i].Addr})
		c.Set(ctx, "fence", v, 0)
		c.Close()
	}
	if n, err := incr(t, b, "fence"); err != nil || n != 8 {
		t.Fatalf("INCR over 7, 5, 7 = %d, %v; want 8", n, err)
	}
	settledOn(t, direct(t, addrsOf(nodes)), "fence", "string 8")
}

// TestCounterNeverRepeats: two instances in front of the same nodes
// increment one counter at once; no value is answered twice, and each
// instance's values grow.
func TestCounterNeverRepeats(t *testing.T) {
	nodes := startNodes(t, 3)
	addrs := []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr}
	bs := []*quorum.Backend{newBackend(t, addrs), newBackend(t, addrs)}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for w, b := range bs {
		wg.Go(func() {
			last := int64(0)
			for range 150 {
				n, err := incr(t, b, "fence")
				if err != nil {
					continue // TRYAGAIN: the other instance won every round
				}
				if n <= last {
					t.Errorf("instance %d: INCR answered %d after %d", w, n, last)
				}
				last = n
				mu.Lock()
				seen[n]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for n, times := range seen {
		if times > 1 {
			t.Errorf("value %d answered %d times", n, times)
		}
	}
	if len(seen) < 150 {
		t.Errorf("only %d of 300 INCRs succeeded", len(seen))
	}
}
