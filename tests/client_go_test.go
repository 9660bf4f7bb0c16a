package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// clientTargets runs f against a real redis-server (which proves the test
// itself), against lockproxy on the memory backend, and against lockproxy on
// the quorum backend over three real redis-servers, the postgres backend
// in each strategy, and lockproxy migrating from a legacy redis-server
// (memory backend, every lock taken in both: docs/migration.md).
func clientTargets(t *testing.T, f func(t *testing.T, addr string)) {
	t.Helper()
	t.Run("redis", func(t *testing.T) { f(t, testsrv.StartRedis(t).Addr) })
	lockproxyTargets(t, func(t *testing.T, _, addr string) { f(t, addr) })
}

// lockproxyTargets runs f against lockproxy on each backend
// (clientTargets without the redis-server, for what only lockproxy
// serves); name is the target's.
func lockproxyTargets(t *testing.T, f func(t *testing.T, name, addr string)) {
	t.Helper()
	t.Run("lockproxy", func(t *testing.T) { f(t, "lockproxy", testsrv.StartMemoryProxy(t)) })
	t.Run("migrating", func(t *testing.T) {
		addr, _, _ := testsrv.StartMigratingProxy(t, "memory", memory.New(memory.Config{}))
		f(t, "migrating", addr)
	})
	t.Run("quorum3", func(t *testing.T) {
		addr, _ := testsrv.StartQuorumProxy(t, 3)
		f(t, "quorum3", addr)
	})
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run("pg-"+strategy, func(t *testing.T) {
			addr, _ := testsrv.StartPostgresProxy(t, strategy)
			f(t, "pg-"+strategy, addr)
		})
	}
}

// clientCounter has workers increment a shared counter iter times each,
// each increment under lock/unlock; a read, a yield and a write make a
// broken lock lose increments, so the final count proves exclusion. The
// read and the write are separate atomic operations: the race detector
// cannot see the exclusion a Redis lock gives, and must not be what
// catches a broken one.
func clientCounter(t *testing.T, workers, iter int, lock func(w int) (unlock func() error, err error)) {
	t.Helper()
	var counter, cycles atomic.Int64 // cycles: increments made, whoever made them
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range iter {
				unlock, err := lock(w)
				if err != nil {
					errs <- fmt.Errorf("worker %d lock: %w", w, err)
					return
				}
				n := counter.Load()
				time.Sleep(50 * time.Microsecond) // a holder's work: widens the window a second holder would use
				counter.Store(n + 1)
				cycles.Add(1)
				if err := unlock(); err != nil {
					errs <- fmt.Errorf("worker %d unlock: %w", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("worker stopped early: %v", err)
	}
	if got, made := counter.Load(), cycles.Load(); got != made {
		t.Fatalf("counter = %d after %d increments: two workers held the lock at once", got, made)
	}
}

// TestGoRedis runs a plain lock cycle with go-redis v9 in RESP2 and RESP3.
func TestGoRedis(t *testing.T) {
	t.Parallel()
	release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	clientTargets(t, func(t *testing.T, addr string) {
		for _, proto := range []int{2, 3} {
			t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
				ctx := t.Context()
				rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, PoolSize: 16})
				defer rdb.Close()
				key := fmt.Sprintf("goredis:%d", proto)
				if ok, err := rdb.SetNX(ctx, key, "a", 10*time.Second).Result(); !ok || err != nil {
					t.Fatalf("SetNX free = %v, %v", ok, err)
				}
				if ok, err := rdb.SetNX(ctx, key, "b", 10*time.Second).Result(); ok || err != nil {
					t.Fatalf("SetNX held = %v, %v", ok, err)
				}
				if n, err := release.Run(ctx, rdb, []string{key}, "b").Int(); n != 0 || err != nil {
					t.Fatalf("release by another = %d, %v", n, err)
				}
				if n, err := release.Run(ctx, rdb, []string{key}, "a").Int(); n != 1 || err != nil {
					t.Fatalf("release by the owner = %d, %v", n, err)
				}
				if _, err := rdb.Get(ctx, key).Result(); !errors.Is(err, redis.Nil) {
					t.Fatalf("GET after release = %v; want redis.Nil", err)
				}
				clientCounter(t, 8, 30, func(w int) (func() error, error) {
					tok := fmt.Sprintf("w%d-%d", w, time.Now().UnixNano())
					for {
						ok, err := rdb.SetNX(ctx, key+":counter", tok, 10*time.Second).Result()
						if err != nil {
							return nil, err
						}
						if ok {
							return func() error { return release.Run(ctx, rdb, []string{key + ":counter"}, tok).Err() }, nil
						}
						time.Sleep(time.Millisecond) // the retry delay of a lock client
					}
				})
			})
		}
	})
}

// TestRedsync drives redsync v4 over go-redis v9: Lock, Extend (also with
// WithSetNXOnExtend), Valid, Unlock, and the shared counter.
func TestRedsync(t *testing.T) {
	t.Parallel()
	clientTargets(t, func(t *testing.T, addr string) {
		ctx := t.Context()
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16})
		defer rdb.Close()
		rs := redsync.New(goredis.NewPool(rdb))
		m := rs.NewMutex("redsync:lock", redsync.WithExpiry(5*time.Second), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			t.Fatalf("Lock: %v", err)
		}
		other := rs.NewMutex("redsync:lock", redsync.WithTries(1))
		if err := other.LockContext(ctx); err == nil {
			t.Fatal("a second mutex locked a held lock")
		}
		if ok, err := m.ExtendContext(ctx); !ok || err != nil {
			t.Fatalf("Extend = %v, %v", ok, err)
		}
		if ok, err := m.ValidContext(ctx); !ok || err != nil {
			t.Fatalf("Valid = %v, %v", ok, err)
		}
		if ok, err := m.UnlockContext(ctx); !ok || err != nil {
			t.Fatalf("Unlock = %v, %v", ok, err)
		}
		if ok, _ := m.UnlockContext(ctx); ok {
			t.Fatal("a second Unlock succeeded")
		}

		// WithSetNXOnExtend: an extend of a lock that is gone takes it again.
		nx := rs.NewMutex("redsync:setnx", redsync.WithExpiry(5*time.Second), redsync.WithTries(1), redsync.WithSetNXOnExtend())
		if err := nx.LockContext(ctx); err != nil {
			t.Fatalf("Lock (setnx): %v", err)
		}
		if err := rdb.Del(ctx, "redsync:setnx").Err(); err != nil { // as if it had expired
			t.Fatal(err)
		}
		if ok, err := nx.ExtendContext(ctx); !ok || err != nil {
			t.Fatalf("Extend of an expired lock with WithSetNXOnExtend = %v, %v", ok, err)
		}
		if v, err := rdb.Get(ctx, "redsync:setnx").Result(); v != nx.Value() || err != nil {
			t.Fatalf("GET after the setnx extend = %q, %v; want %q", v, err, nx.Value())
		}
		if ok, err := nx.UnlockContext(ctx); !ok || err != nil {
			t.Fatalf("Unlock (setnx) = %v, %v", ok, err)
		}
		clientCounter(t, 8, 30, func(int) (func() error, error) {
			mu := rs.NewMutex("redsync:counter", redsync.WithExpiry(10*time.Second), redsync.WithTries(10000),
				redsync.WithRetryDelay(time.Millisecond))
			if err := mu.LockContext(ctx); err != nil {
				return nil, err
			}
			return func() error {
				if ok, err := mu.UnlockContext(ctx); !ok {
					return fmt.Errorf("unlock not confirmed: %v", err)
				}
				return nil
			}, nil
		})
	})
}

// TestRedislock drives bsm/redislock v0.10.0: Obtain, Refresh, TTL,
// Release, ObtainMulti, and the shared counter over one- and two-key locks.
func TestRedislock(t *testing.T) {
	t.Parallel()
	clientTargets(t, func(t *testing.T, addr string) {
		ctx := t.Context()
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16})
		defer rdb.Close()
		locker := redislock.New(rdb)
		lock, err := locker.Obtain(ctx, "redislock:one", 5*time.Second, nil)
		if err != nil {
			t.Fatalf("Obtain: %v", err)
		}
		if _, err := locker.Obtain(ctx, "redislock:one", time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("Obtain of a held lock = %v; want ErrNotObtained", err)
		}
		if err := lock.Refresh(ctx, 8*time.Second, nil); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		if ttl, err := lock.TTL(ctx); err != nil || ttl <= 5*time.Second || ttl > 8*time.Second {
			t.Fatalf("TTL after Refresh = %v, %v", ttl, err)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if err := lock.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
			t.Fatalf("second Release = %v; want ErrLockNotHeld", err)
		}

		multi, err := locker.ObtainMulti(ctx, []string{"redislock:a", "redislock:b", "redislock:c"}, 5*time.Second, nil)
		if err != nil {
			t.Fatalf("ObtainMulti: %v", err)
		}
		if _, err := locker.ObtainMulti(ctx, []string{"redislock:c", "redislock:d"}, time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("ObtainMulti overlapping a held key = %v; want ErrNotObtained", err)
		}
		if n, _ := rdb.Exists(ctx, "redislock:d").Result(); n != 0 {
			t.Fatal("a failed ObtainMulti left a key behind")
		}
		if err := multi.Refresh(ctx, 6*time.Second, nil); err != nil {
			t.Fatalf("Refresh multi: %v", err)
		}
		if err := multi.Release(ctx); err != nil {
			t.Fatalf("Release multi: %v", err)
		}
		if n, _ := rdb.Exists(ctx, "redislock:a", "redislock:b", "redislock:c").Result(); n != 0 {
			t.Fatalf("%d keys left after releasing a multi-lock", n)
		}

		retry := &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
		clientCounter(t, 8, 30, func(w int) (func() error, error) {
			keys := []string{"redislock:counter"}
			if w%2 == 1 { // half the workers take the lock together with a key of their own
				keys = append(keys, fmt.Sprintf("redislock:own:%d", w))
			}
			l, err := locker.ObtainMulti(ctx, keys, 10*time.Second, retry)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(context.WithoutCancel(ctx)) }, nil
		})
	})
}
