package tests

import (
	"context"
	"errors"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// TestRueidis drives rueidis (valkey-go) with its default options —
// client-side caching on, so CLIENT TRACKING ON OPTIN on every connection
// — and rueidislock in its default mode, whose waiters sleep until the lock
// key's invalidation instead of polling (docs/pubsub.md).
func TestRueidis(t *testing.T) {
	t.Parallel()
	clientTargets(t, func(t *testing.T, addr string) {
		ctx := t.Context()
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			t.Fatalf("connecting with the default options: %v", err)
		}
		defer c.Close()
		w, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()

		// A cached read, a write through another connection: the cache
		// hears of it and the next read sees the new value.
		key := "rueidis:cached"
		if err := c.DoCache(ctx, c.B().Get().Key(key).Cache(), time.Minute).Error(); !rueidis.IsRedisNil(err) {
			t.Fatalf("cached GET of a missing key = %v; want nil", err)
		}
		if err := w.Do(ctx, w.B().Set().Key(key).Value("v1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		waitCached(t, c, key, "v1")
		if err := w.Do(ctx, w.B().Set().Key(key).Value("v2").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		waitCached(t, c, key, "v2")

		rueidisLock(t, addr, addr)
	})
}

// waitCached reads key through the cache until it answers want: at once,
// or within a second once the invalidation came (a cache that was not told
// would answer the old value for its minute).
func waitCached(t *testing.T, c rueidis.Client, key, want string) {
	t.Helper()
	var got string
	var err error
	if !wait.Poll(2*time.Second, func() bool {
		got, err = c.DoCache(t.Context(), c.B().Get().Key(key).Cache(), time.Minute).ToString()
		return err == nil && got == want
	}) {
		t.Fatalf("cached GET %s = %q, %v; want %q: the invalidation never came", key, got, err, want)
	}
}

// rueidisLock: a second WithContext (on addrB) waits while the lock is
// held (through addrA) and gets it soon after the holder's cancel (woken
// by the invalidation: its keys' validity is 5 s); then 8 workers
// increment a counter under the lock, half through each address.
func rueidisLock(t *testing.T, addrA, addrB string) {
	newLocker := func(addr string) rueidislock.Locker {
		l, err := rueidislock.NewLocker(rueidislock.LockerOption{ClientOption: rueidis.ClientOption{InitAddress: []string{addr}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		return l
	}
	a, b := newLocker(addrA), newLocker(addrB)
	ctx := t.Context()
	_, release, err := a.WithContext(ctx, "rueidis:lock")
	if err != nil {
		t.Fatalf("WithContext = %v", err)
	}
	// rueidislock gives each key's attempt 20 ms (TryNextAfter). On a
	// loaded machine a postgres attempt (a transaction; through a second
	// instance, advisory routes it to the holder's by NOTIFY) can take
	// longer (seen in a full run on pg-lease, one instance): a deadline
	// then stands for the refusal, never a grant.
	_, _, err = b.TryWithContext(ctx, "rueidis:lock")
	if !errors.Is(err, rueidislock.ErrNotLocked) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryWithContext of a held lock = %v; want ErrNotLocked", err)
	}
	got := make(chan time.Time, 1)
	go func() {
		_, rel, err := b.WithContext(ctx, "rueidis:lock")
		if err == nil {
			got <- time.Now()
			rel()
		}
		close(got)
	}()
	time.Sleep(200 * time.Millisecond) // the waiter is asleep: rueidislock shows no event of it
	released := time.Now()
	release()
	select {
	case at, ok := <-got:
		if !ok {
			t.Fatal("the waiter's WithContext failed")
		}
		if d := at.Sub(released); d > 2*time.Second {
			t.Fatalf("the waiter got the lock %v after its release: it was not woken", d)
		}
		t.Logf("the waiter got the lock %v after its release", at.Sub(released).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the lock")
	}

	count := 0
	var wg sync.WaitGroup
	for w := range 8 {
		l := a
		if w%2 == 1 {
			l = b
		}
		wg.Go(func() {
			for range 10 {
				lctx, rel, err := l.WithContext(ctx, "rueidis:counter")
				if err != nil {
					t.Error(err)
					return
				}
				n := count
				time.Sleep(time.Millisecond) // a holder's work
				if lctx.Err() == nil {
					count = n + 1
				}
				rel()
			}
		})
	}
	wg.Wait()
	if count != 80 {
		t.Fatalf("counter %d; want 80: two workers held the lock at once", count)
	}
}
