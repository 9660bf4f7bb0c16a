package tests

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/lockcheck"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/quorum"
)

// migratingBackends runs f against lockproxy migrating from a legacy
// redis-server to each backend: memory, quorum over three real
// redis-servers, and postgres in each strategy. f gets the proxy's
// address, the legacy Redis and the inner backend (to hold a lock in the
// backend only).
func migratingBackends(t *testing.T, f func(t *testing.T, addr string, legacy *testsrv.Redis, inner backend.Backend)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		inner := memory.New(memory.Config{})
		addr, legacy, _ := testsrv.StartMigratingProxy(t, "memory", inner)
		f(t, addr, legacy, inner)
	})
	t.Run("quorum3", func(t *testing.T) {
		var nodes []string
		for range 3 {
			nodes = append(nodes, testsrv.StartRedis(t).Addr)
		}
		inner, err := quorum.New(quorum.Config{Nodes: nodes, NodeTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		addr, legacy, _ := testsrv.StartMigratingProxy(t, "quorum", inner)
		f(t, addr, legacy, inner)
	})
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run("pg-"+strategy, func(t *testing.T) {
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			inner, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, Strategy: strategy})
			if err != nil {
				t.Fatal(err)
			}
			addr, legacy, _ := testsrv.StartMigratingProxy(t, "postgres", inner)
			f(t, addr, legacy, inner)
		})
	}
}

// migrateAcquirer is one way to acquire and release a lock, as a client
// library does it: with SET NX PX, or with a library's own scripts.
type migrateAcquirer struct {
	name             string
	acquire, release func(ctx context.Context, c *redis.Client, key, tok string) (bool, error)
}

func migrateAcquirers(t *testing.T) []migrateAcquirer {
	t.Helper()
	load := func(name string) *redis.Script {
		b, err := os.ReadFile(filepath.Join("testdata", "scripts", name))
		if err != nil {
			t.Fatal(err)
		}
		return redis.NewScript(string(b))
	}
	granted := func(v any, err error, want any) (bool, error) {
		if errors.Is(err, redis.Nil) {
			return false, nil
		}
		return v == want, err
	}
	redlockAcq, redlockRel := load("redlock4-acquire.lua"), load("redlock4-release.lua")
	obtain, release := load("redislock-obtain.lua"), load("redislock-release.lua")
	return []migrateAcquirer{
		{"set-nx-px",
			func(ctx context.Context, c *redis.Client, key, tok string) (bool, error) {
				return c.SetNX(ctx, key, tok, time.Minute).Result()
			},
			func(ctx context.Context, c *redis.Client, key, tok string) (bool, error) {
				n, err := c.Do(ctx, "eval", "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end", 1, key, tok).Int64()
				return n == 1, err
			}},
		{"redlock",
			func(ctx context.Context, c *redis.Client, key, tok string) (bool, error) {
				v, err := redlockAcq.Run(ctx, c, []string{key}, tok, 60000).Result()
				return granted(v, err, int64(1))
			},
			func(ctx context.Context, c *redis.Client, key, tok string) (bool, error) {
				v, err := redlockRel.Run(ctx, c, []string{key}, tok).Result()
				return granted(v, err, int64(1))
			}},
		{"redislock",
			func(ctx context.Context, c *redis.Client, key, tok string) (bool, error) {
				v, err := obtain.Run(ctx, c, []string{key}, tok, len(tok), 60000).Result()
				return granted(v, err, "OK")
			},
			func(ctx context.Context, c *redis.Client, key, tok string) (bool, error) {
				v, err := release.Run(ctx, c, []string{key}, tok).Result()
				return granted(v, err, "OK")
			}},
	}
}

// TestMigratingCrossHolders: a lock held directly on the legacy Redis is
// refused through lockproxy and released through it; a lock held through
// lockproxy is refused directly on the legacy Redis; a lock held in the
// backend only is refused, and the legacy Redis keeps no leftover of the
// partial grant — for every backend, with SET NX PX and with node
// redlock's and bsm/redislock's scripts.
func TestMigratingCrossHolders(t *testing.T) {
	acquirers := migrateAcquirers(t)
	migratingBackends(t, func(t *testing.T, addr string, lr *testsrv.Redis, inner backend.Backend) {
		ctx := t.Context()
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		legacy := redis.NewClient(&redis.Options{Addr: lr.Addr, MaxRetries: -1})
		t.Cleanup(func() { c.Close(); legacy.Close() })
		legacyHas := func(key string) bool {
			n, err := legacy.Exists(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		innerHas := func(key string) bool {
			_, ok, err := inner.Get(ctx, 0, key)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		for _, a := range acquirers {
			t.Run(a.name, func(t *testing.T) {
				must := func(ok bool, err error) bool {
					t.Helper()
					if err != nil {
						t.Fatalf("%s: %v", a.name, err)
					}
					return ok
				}
				direct, proxied, backendOnly := a.name+":direct", a.name+":proxied", a.name+":backend-only"
				const mine, theirs = "token-of-a-proxied-client", "token-of-a-direct-client"
				if !must(a.acquire(ctx, legacy, direct, theirs)) {
					t.Fatal("direct acquire on the legacy Redis refused")
				}
				if must(a.acquire(ctx, c, direct, mine)) {
					t.Errorf("acquire through lockproxy of a lock held on the legacy Redis: granted")
				}
				if innerHas(direct) {
					t.Errorf("the backend holds %s after a refused acquire", direct)
				}
				if !must(a.acquire(ctx, c, proxied, mine)) {
					t.Fatal("acquire of a free lock through lockproxy refused")
				}
				if must(a.acquire(ctx, legacy, proxied, theirs)) {
					t.Errorf("direct acquire on the legacy Redis of a lock held through lockproxy: granted")
				}
				if _, err := inner.Set(ctx, 0, backendOnly, []byte("token-held-in-the-backend"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}}); err != nil {
					t.Fatal(err)
				}
				if must(a.acquire(ctx, c, backendOnly, mine)) {
					t.Errorf("acquire through lockproxy of a lock held in the backend: granted")
				}
				if legacyHas(backendOnly) {
					t.Errorf("the legacy Redis keeps %s after the backend refused: the partial grant was not undone", backendOnly)
				}
				// Releases through lockproxy: the direct lock (legacy only)
				// and the proxied one (both sides).
				if !must(a.release(ctx, c, direct, theirs)) {
					t.Errorf("release through lockproxy of a lock taken on the legacy Redis: refused")
				}
				if !must(a.release(ctx, c, proxied, mine)) {
					t.Errorf("release through lockproxy of a lock taken through it: refused")
				}
				for _, k := range []string{direct, proxied} {
					if legacyHas(k) || innerHas(k) {
						t.Errorf("%s is still held after its release (legacy %v, backend %v)", k, legacyHas(k), innerHas(k))
					}
				}
			})
		}
		// An extend through lockproxy (PEXPIRE and redis-py's script) of a
		// lock taken directly on the legacy Redis.
		legacy.Set(ctx, "ext", "tok", 10*time.Second)
		if ok, err := c.PExpire(ctx, "ext", time.Minute).Result(); err != nil || !ok {
			t.Errorf("PEXPIRE through lockproxy of a legacy lock = %v, %v; want true", ok, err)
		}
		if ttl := legacy.PTTL(ctx, "ext").Val(); ttl <= 10*time.Second {
			t.Errorf("legacy PTTL after the extend = %v; want about a minute", ttl)
		}
	})
}

// TestMigratingLegacyKilledMidRun kills the legacy Redis under load
// through a migrating lockproxy: every acquire sent after the kill answers
// an error (TRYAGAIN), never OK or nil; once it is back, acquires are
// granted again.
func TestMigratingLegacyKilledMidRun(t *testing.T) {
	addr, lr, _ := testsrv.StartMigratingProxy(t, "memory", memory.New(memory.Config{}))
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 8})
	defer c.Close()
	var killed atomic.Bool
	var grants, refusals, tryagain, bad atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				after := killed.Load() // the kill finished before this acquire was sent
				key := "k" + strconv.Itoa(i%8)
				ok, err := c.SetNX(ctx, key, "w"+strconv.Itoa(w)+"-"+strconv.Itoa(i), 50*time.Millisecond).Result()
				switch {
				case err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN"):
					tryagain.Add(1)
				case err != nil:
					bad.Add(1)
					t.Errorf("SET NX = %v", err)
				case after:
					bad.Add(1)
					t.Errorf("SET NX sent after the legacy Redis was killed = %v, nil; want TRYAGAIN", ok)
				case ok:
					grants.Add(1)
				default:
					refusals.Add(1)
				}
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond) // polling the workers' counters
		}
	}
	waitFor("grants before the kill", func() bool { return grants.Load() >= 20 })
	lr.Kill()
	killed.Store(true)
	base := tryagain.Load()
	waitFor("TRYAGAIN after the kill", func() bool { return tryagain.Load() >= base+20 })
	close(stop)
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d false answers while the legacy Redis was down", bad.Load())
	}
	lr.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := c.SetNX(ctx, "after-restart", "t", time.Minute).Result()
		if err == nil && ok {
			break
		}
		if (err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN")) || time.Now().After(deadline) {
			t.Fatalf("SET NX after the legacy Redis came back = %v, %v; want OK (TRYAGAIN meanwhile)", ok, err)
		}
	}
	t.Logf("grants %d, refusals %d, TRYAGAIN %d", grants.Load(), refusals.Load(), tryagain.Load())
}

// TestMigratingHistory is the history checker over a rolling switch:
// workers split between the legacy Redis directly and the migrating
// lockproxy (go-redis, redsync and bsm/redislock in turn: the legacy Redis
// has no fences) contend on two
// keys, for every backend. No two of them may hold a key at once, and
// both populations must get grants.
func TestMigratingHistory(t *testing.T) {
	t.Parallel()
	migratingBackends(t, func(t *testing.T, addr string, lr *testsrv.Redis, _ backend.Backend) {
		const workers = 8
		rep, err := lockcheck.Run(t.Context(), lockcheck.Config{
			Workers: workers, Keys: 2, TTL: 2 * time.Second, Hold: 2 * time.Millisecond,
			Duration: 3 * time.Second,
			NewLocker: func(w int) lockcheck.Locker {
				target := addr // odd workers: through lockproxy
				if w%2 == 0 {
					target = lr.Addr // even workers: the legacy Redis directly
				}
				l, err := lockcheck.NewLocker(lockcheck.RedisClients[(w/2)%len(lockcheck.RedisClients)], target)
				if err != nil {
					t.Fatal(err)
				}
				return l
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(rep)
		if len(rep.Violations) > 0 {
			t.Fatalf("%d violations: two holders of one lock at once, e.g. %+v", len(rep.Violations), rep.Violations[0])
		}
		var direct, proxied int
		for _, iv := range rep.Intervals {
			if iv.Worker%2 == 0 {
				direct++
			} else {
				proxied++
			}
		}
		t.Logf("grants directly on the legacy Redis %d, through lockproxy %d", direct, proxied)
		// 100: a loaded machine grants about 200 in the 3 s (seen beside
		// the rest of the suite), a quiet one several hundred.
		if rep.Grants < 100 || direct == 0 || proxied == 0 {
			t.Errorf("grants %d (direct %d, through lockproxy %d); want 100 or more, from both", rep.Grants, direct, proxied)
		}
	})
}

// TestMigratingHistoryControl proves TestMigratingHistory able to fail: the
// same split workload against a plain lockproxy beside a separate Redis
// (the flag day this package avoids) must show two holders at once.
func TestMigratingHistoryControl(t *testing.T) {
	addr, legacy := testsrv.StartMemoryProxy(t), testsrv.StartRedis(t)
	rep, err := lockcheck.Run(t.Context(), lockcheck.Config{
		Workers: 4, Keys: 1, TTL: 2 * time.Second, Hold: 2 * time.Millisecond, Duration: time.Second,
		NewLocker: func(w int) lockcheck.Locker {
			target := addr
			if w%2 == 0 {
				target = legacy.Addr
			}
			return lockcheck.NewGoRedisLocker(target)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) == 0 {
		t.Fatalf("no violations without migration: the checker cannot see two populations on two stores\n%s", rep)
	}
}

// TestMigratingBinaryMetrics runs the real binary with
// LOCKPROXY_MIGRATE_FROM: /metrics reports the legacy Redis up and its
// direct clients, 0 at first (lockproxy's own connections do not count),
// 1 while a client is connected to it directly, 0 after it leaves.
func TestMigratingBinaryMetrics(t *testing.T) {
	t.Parallel()
	legacy := testsrv.StartRedis(t)
	bin := testsrv.BuildLockproxy(t)
	lp := testsrv.StartBinaryEnv(t, bin, []string{"LOCKPROXY_MIGRATE_FROM=redis://" + legacy.Addr}, "--migrate-timeout", "1s")
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: lp.Addr, MaxRetries: -1})
	defer c.Close()
	if ok, err := c.SetNX(ctx, "k", "tok", time.Minute).Result(); err != nil || !ok {
		t.Fatalf("SET NX = %v, %v\n%s", ok, err, lp.Logs())
	}
	awaitMetrics(t, lp.Admin, "lockproxy_migration_legacy_up 1", "lockproxy_migration_legacy_clients 0")
	direct := redis.NewClient(&redis.Options{Addr: legacy.Addr})
	if err := direct.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	awaitMetrics(t, lp.Admin, "lockproxy_migration_legacy_clients 1")
	direct.Close()
	awaitMetrics(t, lp.Admin, "lockproxy_migration_legacy_clients 0")
}
