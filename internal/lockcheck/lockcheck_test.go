package lockcheck

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/redis/go-redis/v9"
)

// TestSafeStore: one real redis-server is a correct lock store for every
// client; the checker must not report violations against it.
func TestSafeStore(t *testing.T) {
	r := testsrv.StartRedis(t)
	for _, client := range RedisClients { // the fenced one: TestFencesOnLockproxy
		t.Run(client, func(t *testing.T) {
			rep, err := Run(t.Context(), Config{
				Workers: 8, Keys: 2, TTL: 500 * time.Millisecond, Hold: 2 * time.Millisecond,
				Duration: time.Second, Prefix: "safe:" + client + ":",
				NewLocker: func(int) Locker { l, _ := NewLocker(client, r.Addr); return l },
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Log(rep)
			if len(rep.Violations) != 0 {
				t.Errorf("%d violations against one redis-server", len(rep.Violations))
			}
			if rep.Grants < 20 || rep.Contended == 0 {
				t.Errorf("grants %d, contended %d: no real contention", rep.Grants, rep.Contended)
			}
		})
	}
}

// TestFencesOnLockproxy: the fenced client against lockproxy's memory
// backend sees every grant fenced, each key's fences growing.
func TestFencesOnLockproxy(t *testing.T) {
	addr := testsrv.StartLockproxy(t, proxy.Config{}, memory.New(memory.Config{}))
	rep, err := Run(t.Context(), Config{
		Workers: 8, Keys: 2, TTL: 500 * time.Millisecond, Hold: 2 * time.Millisecond, Duration: time.Second,
		NewLocker: func(int) Locker { return NewFencedLocker(addr) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if !rep.Fenced || len(rep.Violations)+len(rep.FenceViolations) != 0 || rep.ErrorCount() != 0 {
		t.Errorf("fenced %v, %d violations, %d fence violations, %d errors; want fenced and none",
			rep.Fenced, len(rep.Violations), len(rep.FenceViolations), rep.ErrorCount())
	}
	if rep.Grants < 20 || rep.Contended == 0 {
		t.Errorf("grants %d, contended %d: no real contention", rep.Grants, rep.Contended)
	}
	for _, iv := range rep.Intervals {
		if iv.Fence == 0 {
			t.Fatalf("grant %+v without a fence", iv)
		}
	}
}

// TestSplitBrainIsCaught proves the checker can fail: half the workers lock
// on one redis-server, half on another, so both halves get the same keys at
// once. The checker must report violations.
func TestSplitBrainIsCaught(t *testing.T) {
	a, b := testsrv.StartRedis(t), testsrv.StartRedis(t)
	rep, err := Run(t.Context(), Config{
		Workers: 8, Keys: 2, TTL: 500 * time.Millisecond, Hold: 3 * time.Millisecond, Duration: time.Second,
		NewLocker: func(w int) Locker {
			if w%2 == 0 {
				return NewGoRedisLocker(a.Addr)
			}
			return NewGoRedisLocker(b.Addr)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if len(rep.Violations) == 0 {
		t.Fatalf("no violations over two independent servers: the checker cannot fail")
	}
	if rep.WorstOverlap <= 0 {
		t.Errorf("worst overlap %v with %d violations", rep.WorstOverlap, len(rep.Violations))
	}
}

// TestFlushAllIsCaught: a store that forgets its locks (FLUSHALL in a loop)
// lets a second client in while the first still holds; the checker must
// report it.
func TestFlushAllIsCaught(t *testing.T) {
	r := testsrv.StartRedis(t)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		c := redis.NewClient(ClientOptions(r.Addr))
		defer c.Close()
		for ctx.Err() == nil {
			c.FlushAll(ctx)
		}
	})
	rep, err := Run(t.Context(), Config{
		Workers: 8, Keys: 2, TTL: 500 * time.Millisecond, Hold: 5 * time.Millisecond, Duration: time.Second,
		NewLocker: func(int) Locker { return NewRedislockLocker(r.Addr) },
	})
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if len(rep.Violations) == 0 {
		t.Fatalf("no violations with FLUSHALL in a loop: the checker cannot fail")
	}
}

// TestMaxAttempts: a run bounded by attempts stops at exactly that many.
func TestMaxAttempts(t *testing.T) {
	r := testsrv.StartRedis(t)
	rep, err := Run(t.Context(), Config{
		Workers: 4, Keys: 1, MaxAttempts: 200, Hold: time.Millisecond,
		NewLocker: func(int) Locker { return NewGoRedisLocker(r.Addr) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Grants + rep.Contended + rep.ErrorCount(); rep.Attempts != 200 || got != 200 {
		t.Errorf("attempts %d, outcomes %d; want 200 each\n%v", rep.Attempts, got, rep)
	}
}

// TestHoldPastTTL: holders that keep a lock past its TTL on a correct store
// are cut at the TTL bound, so the store's handing the expired lock to the
// next worker is no violation, and no interval is longer than TTL − drift.
func TestHoldPastTTL(t *testing.T) {
	r := testsrv.StartRedis(t)
	ttl := 50 * time.Millisecond
	rep, err := Run(t.Context(), Config{
		Workers: 4, Keys: 1, TTL: ttl, Hold: 4 * ttl, Duration: time.Second,
		NewLocker: func(int) Locker { return NewGoRedisLocker(r.Addr) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if len(rep.Violations) != 0 || rep.Grants < 5 {
		t.Errorf("%d violations, %d grants; want 0 and several", len(rep.Violations), rep.Grants)
	}
	for _, iv := range rep.Intervals {
		if iv.End-iv.Start > ttl-Drift(ttl) {
			t.Errorf("interval %+v longer than ttl − drift", iv)
		}
	}
}
