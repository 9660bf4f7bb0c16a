// Package redislock094 drives bsm/redislock v0.9.4, which shares its module
// path with v0.10.0 and so needs a module of its own. v0.9.4 has no
// ObtainMulti (v0.10.0 added it; the parent package tests that). The parent package's
// TestRedislock094 runs it with the address to test in LOCKPROXY_ADDR.
package redislock094

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

func TestRedislock(t *testing.T) {
	addr := os.Getenv("LOCKPROXY_ADDR")
	if addr == "" {
		const why = "LOCKPROXY_ADDR is not set: run this through go test ./tests (TestRedislock094)"
		if os.Getenv("CI") != "" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16})
	defer rdb.Close()
	locker := redislock.New(rdb)

	lock, err := locker.Obtain(ctx, "rl094:one", 5*time.Second, nil)
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	if _, err := locker.Obtain(ctx, "rl094:one", time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Obtain of a held lock = %v; want ErrNotObtained", err)
	}
	if err := lock.Refresh(ctx, 8*time.Second, nil); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if ttl, err := lock.TTL(ctx); err != nil || ttl <= 5*time.Second {
		t.Fatalf("TTL = %v, %v", ttl, err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := lock.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
		t.Fatalf("second Release = %v; want ErrLockNotHeld", err)
	}

	const workers, iter = 8, 30
	var counter atomic.Int64 // Load and Store apart: only the lock makes the increment safe
	var wg sync.WaitGroup
	retry := &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
	for w := range workers {
		wg.Go(func() {
			for range iter {
				l, err := locker.Obtain(ctx, "rl094:counter", 10*time.Second, retry)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				n := counter.Load()
				time.Sleep(50 * time.Microsecond) // a holder's work
				counter.Store(n + 1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("worker %d release: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := counter.Load(); got != workers*iter {
		t.Fatalf("counter = %d; want %d", got, workers*iter)
	}
}
