package memory

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// TestExactlyOneWinner: a single store always has exactly one winner (the
// conformance suite allows none, for quorums).
func TestExactlyOneWinner(t *testing.T) {
	b := New(Config{})
	defer b.Close(t.Context())
	for round := range 20 {
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				res, _ := b.Set(t.Context(), 0, fmt.Sprint("k", round), []byte(fmt.Sprint(i)),
					backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}})
				if res.Written {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d winners; want exactly 1", round, n)
		}
	}
}
