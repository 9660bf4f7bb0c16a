package pgbridge_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
)

// docsRelease is the release script of the Redis docs, as catalogued
// (luascripts): the one the fast path knows.
const docsRelease = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

// loopProxy serves b on the event-loop front end and returns a client
// factory.
func loopProxy(t *testing.T, b *pgbridge.Backend) func() *redis.Client {
	t.Helper()
	addr := testsrv.StartLockproxy(t, proxy.Config{DataPath: proxy.DataPathLoops, Loops: 2, BackendName: "postgres"}, b)
	return func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// onLoop runs f and fails the test unless it started n commands on the
// event loops (want true) or none (want false).
func onLoop(t *testing.T, b *pgbridge.Backend, want bool, what string, f func()) {
	t.Helper()
	before := pgbridge.LoopOps(b)
	f()
	if got := pgbridge.LoopOps(b) - before; (got > 0) != want {
		t.Fatalf("%s: %d commands started on the event loops; want them there: %v", what, got, want)
	}
}

// The advisory strategy's acquire and release start on the event loops
// and answer as the ordinary path does; what they cannot decide at once
// (a key held here, another token, a stripe busy) runs the ordinary way.
func TestLoopAcquireRelease(t *testing.T) {
	t.Parallel()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	b := newBackend(t, pgbridge.Advisory, dsn)
	client := loopProxy(t, b)
	c1, c2 := client(), client()
	ctx := t.Context()
	// The first lease with a deadline records the horizon: the ordinary way.
	if err := c1.Set(ctx, "warm", "w", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}

	onLoop(t, b, true, "SET k a NX PX", func() {
		if ok, err := c1.SetNX(ctx, "k", "a", 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET k a NX = %v, %v; want OK", ok, err)
		}
	})
	onLoop(t, b, true, "SET k b NX on a key held here", func() {
		if ok, err := c2.SetNX(ctx, "k", "b", 30*time.Second).Result(); ok || err != nil {
			t.Fatalf("SET k b NX = %v, %v; want nil", ok, err)
		}
	})
	// Values repeat across clients (npm redis-lock's deadline, a bare
	// "1"): the holder's own value from another client is refused too.
	onLoop(t, b, true, "SET k a NX from another client, the holder's value", func() {
		if ok, err := c2.SetNX(ctx, "k", "a", 30*time.Second).Result(); ok || err != nil {
			t.Fatalf("SET k a NX by another client = %v, %v; want nil", ok, err)
		}
	})
	if v, err := c1.Get(ctx, "k").Result(); v != "a" || err != nil {
		t.Fatalf("GET k after the refused SET NX of its own value = %q, %v; want a", v, err)
	}
	onLoop(t, b, false, "release with another token", func() {
		if v, err := c2.Eval(ctx, docsRelease, []string{"k"}, "b").Result(); v != int64(0) || err != nil {
			t.Fatalf("release of b = %v, %v; want 0", v, err)
		}
	})
	onLoop(t, b, true, "release with the holder's token", func() {
		if v, err := c1.Eval(ctx, docsRelease, []string{"k"}, "a").Result(); v != int64(1) || err != nil {
			t.Fatalf("release of a = %v, %v; want 1", v, err)
		}
	})
	if v, err := c1.Get(ctx, "k").Result(); err != redis.Nil {
		t.Fatalf("GET k after the release = %q, %v; want nil", v, err)
	}

	// A busy stripe: the acquire waits for it the ordinary way.
	unlock := pgbridge.HoldStripe(b, 0, "s")
	got := make(chan error, 1)
	onLoop(t, b, false, "SET s NX on a busy stripe", func() {
		go func() {
			ok, err := c2.SetNX(ctx, "s", "x", 30*time.Second).Result()
			if err == nil && !ok {
				err = fmt.Errorf("SET s x NX = nil; want OK")
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond)
		select {
		case err := <-got:
			t.Fatalf("SET s NX answered (%v) while its stripe was held", err)
		default:
		}
		unlock()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	})
}

// Eight clients on the loops take turns on three keys, each cycle
// acquire, a read-modify-write of a counter only the holder may touch,
// release: no two hold a key at once (the counters add up), and the
// cycles ran on the loops.
func TestLoopContention(t *testing.T) {
	t.Parallel()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	b := newBackend(t, pgbridge.Advisory, dsn)
	client := loopProxy(t, b)
	ctx := t.Context()
	const workers, cycles = 8, 40
	var mu sync.Mutex
	counters := map[string]int{}
	inside := map[string]int{}
	var wg sync.WaitGroup
	if err := client().Set(ctx, "warm", "w", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	before := pgbridge.LoopOps(b)
	for w := range workers {
		c := client()
		wg.Go(func() {
			for i := 0; i < cycles; {
				key := fmt.Sprintf("c%d", (w+i)%3)
				tok := fmt.Sprintf("w%d-%d", w, i)
				ok, err := c.SetNX(ctx, key, tok, 10*time.Second).Result()
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					continue
				}
				mu.Lock()
				inside[key]++
				if inside[key] > 1 {
					t.Errorf("%s has %d holders", key, inside[key])
				}
				n := counters[key]
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				counters[key] = n + 1
				inside[key]--
				mu.Unlock()
				if v, err := c.Eval(ctx, docsRelease, []string{key}, tok).Result(); v != int64(1) || err != nil {
					t.Errorf("release of %s by %s = %v, %v; want 1", key, tok, v, err)
					return
				}
				i++
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range counters {
		total += n
	}
	if total != workers*cycles {
		t.Fatalf("counters add up to %d; want %d", total, workers*cycles)
	}
	if got := pgbridge.LoopOps(b) - before; got < workers*cycles {
		t.Fatalf("%d commands started on the loops; want at least %d (the grants' releases)", got, workers*cycles)
	}
}
