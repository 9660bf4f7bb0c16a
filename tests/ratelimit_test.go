package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// The rate limiters' workload, the same in every driver (tests/node/
// ratelimit.js, tests/python/limits_rate.py): rlWorkers workers, each on
// a connection of its own, make rlAttempts attempts each against a limit
// of rlLimit in one window that the run never reaches the end of.
const (
	rlWorkers  = 8
	rlAttempts = 4
	rlLimit    = 10
	rlWindow   = 2 * time.Minute
)

// rlResult is what one run of a rate limiter saw: how many attempts it
// admitted and refused, the count the limiter reported for each admitted
// attempt (sorted; empty where the library reports none), and the errors
// attempts met.
type rlResult struct {
	Admitted int      `json:"admitted"`
	Counts   []int64  `json:"counts"`
	Refused  int      `json:"refused"`
	Errors   []string `json:"errors"`
}

// TestRateLimiters runs real rate-limiter libraries — rate-limiter-flexible
// (RateLimiterRedis on ioredis and on node-redis), express-rate-limit with
// rate-limit-redis, go-redis/redis_rate (GCRA), ulule/limiter's redis store
// and Python limits' RedisStorage (moving and fixed window) — against a
// redis-server (which proves the test) and lockproxy on every backend,
// quorum also with one of its three nodes killed and with one paused: 8
// workers against a limit of 10 must be admitted exactly 10 times, each
// count handed out once, without an error (issue 39, the limiters that
// admitted 15 to 20 or failed on quorum). GCRA admits by its own rule, a
// burst and then one per emission interval: with a burst of 10 and an
// interval of minutes it admits 10 in the run, and lockproxy must admit
// exactly what a redis-server admits to the same workload. MONITOR on
// quorum's nodes must never show a limiter's script text (it runs in
// lockproxy), and on the redis-server must show each (monitorScripts).
func TestRateLimiters(t *testing.T) {
	t.Parallel()
	ref := testsrv.StartRedis(t) // GCRA's reference
	for name, start := range rateLimitTargets() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr := start(t)
			// One process runs the node limiters, one the Python ones
			// (their start is most of their time), each at once.
			t.Run("node", func(t *testing.T) {
				t.Parallel()
				rlDriver(t, "node/ratelimit.js", addr, map[string]string{
					"rlf-ioredis": "rlf-ioredis", "rlf-node-redis": "rlf-node-redis", "express-rate-limit": "express",
				})
			})
			t.Run("python-limits", func(t *testing.T) {
				t.Parallel()
				rlDriver(t, "python/limits_rate.py", addr, map[string]string{
					"moving-window": "moving-window", "fixed-window": "fixed-window",
				})
			})
			t.Run("ulule-limiter", func(t *testing.T) {
				t.Parallel()
				checkRateLimit(t, ululeLimiter(t, addr, "rl:ulule"))
			})
			t.Run("redis_rate", func(t *testing.T) {
				t.Parallel()
				want := redisRateLimiter(t, ref.Addr, t.Name())
				got := redisRateLimiter(t, addr, "rl:redis_rate")
				if got.Admitted != want.Admitted || !slices.Equal(got.Counts, want.Counts) {
					t.Errorf("redis_rate admitted %d %v, a redis-server %d %v", got.Admitted, got.Counts, want.Admitted, want.Counts)
				}
				checkRateLimit(t, got)
			})
		})
	}
}

// rateLimitTargets are the servers TestRateLimiters runs the limiters
// against, each started by its function for the test given, which returns
// its address.
func rateLimitTargets() map[string]func(t *testing.T) string {
	targets := map[string]func(t *testing.T) string{
		"redis": func(t *testing.T) string {
			r := testsrv.StartRedis(t)
			monitorScripts(t, true, r)
			return r.Addr
		},
		"lockproxy": func(t *testing.T) string { return testsrv.StartMemoryProxy(t) },
		"quorum3": func(t *testing.T) string {
			addr, nodes := testsrv.StartQuorumProxy(t, 3)
			monitorScripts(t, false, nodes...)
			return addr
		},
		"quorum3-killed": func(t *testing.T) string {
			addr, nodes := testsrv.StartQuorumProxy(t, 3)
			nodes[2].Kill()
			monitorScripts(t, false, nodes[:2]...)
			return addr
		},
		"quorum3-paused": func(t *testing.T) string {
			addr, nodes := testsrv.StartQuorumProxy(t, 3)
			nodes[2].Stop()
			t.Cleanup(nodes[2].Cont) // before the proxy and the nodes stop
			// The node drivers take some 17 s here: ioredis sends INFO
			// before its first command, and INFO's Keyspace section asks
			// DBSIZE of the 16 databases in turn, each waiting a node
			// timeout (1 s) for the paused node (proxy/cmd_info.go).
			monitorScripts(t, false, nodes[:2]...)
			return addr
		},
	}
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		targets["pg-"+strategy] = func(t *testing.T) string {
			addr, _ := testsrv.StartPostgresProxy(t, strategy)
			return addr
		}
	}
	return targets
}

// rlScriptTexts are words of each limiter's script, as MONITOR shows them
// when the script's text reaches a server (EVAL, SCRIPT LOAD).
var rlScriptTexts = map[string]string{
	"rate-limiter-flexible": "local consumed",
	"rate-limit-redis":      "local windowMs",
	"redis_rate":            "local rate_limit_key",
	"ulule/limiter":         "local ret = redis.call(",
	"limits moving window":  "local entry = redis.call(",
	"limits fixed window":   "current = redis.call(",
}

// monitorScripts watches servers with MONITOR until t's end and then fails
// t unless commands on the limiters' keys reached them and each limiter's
// script text did too (want, on a redis-server: which proves the words) or
// none did (on quorum's nodes: a client's script runs in lockproxy, issue
// 39). A server that dies or pauses just stops the watch.
func monitorScripts(t *testing.T, want bool, servers ...*testsrv.Redis) {
	t.Helper()
	var seen testsrv.SyncBuffer
	var wg sync.WaitGroup
	var conns []net.Conn
	for _, r := range servers {
		c, err := net.Dial("tcp", r.Addr)
		if err != nil {
			t.Fatalf("monitor %s: %v", r.Addr, err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
			t.Fatalf("monitor %s: %v", r.Addr, err)
		}
		wg.Go(func() { io.Copy(&seen, c) }) // until the connection closes
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
		out := seen.String()
		if !strings.Contains(out, "rl:") {
			t.Errorf("MONITOR saw no command on the limiters' keys: %.300q", out)
		}
		for lib, text := range rlScriptTexts {
			if got := strings.Contains(out, text); got != want {
				t.Errorf("%s's script text (%q) reached a server: %v, want %v", lib, text, got, want)
			}
		}
	})
}

// checkRateLimit fails t unless r is what a limit of rlLimit gives the
// workload: exactly rlLimit admitted, the rest refused, no error, and the
// counts reported (where the library reports them) 1 to rlLimit, each once.
func checkRateLimit(t *testing.T, r rlResult) {
	t.Helper()
	t.Logf("admitted %d, refused %d, counts %v", r.Admitted, r.Refused, r.Counts)
	if len(r.Errors) > 0 {
		t.Errorf("%d attempts failed: %q", len(r.Errors), r.Errors)
	}
	if r.Admitted != rlLimit || r.Admitted+r.Refused+len(r.Errors) != rlWorkers*rlAttempts {
		t.Errorf("admitted %d and refused %d of %d attempts, want %d admitted", r.Admitted, r.Refused, rlWorkers*rlAttempts, rlLimit)
	}
	if len(r.Counts) == 0 {
		return
	}
	want := make([]int64, rlLimit)
	for i := range want {
		want[i] = int64(i + 1)
	}
	if !slices.Equal(r.Counts, want) {
		t.Errorf("counts handed out %v, want each of 1..%d once", r.Counts, rlLimit)
	}
}

// rlDriver runs a driver program (tests/node/ratelimit.js with node,
// tests/python/limits_rate.py with Debian's python3) against addr for the
// limiters named (each subtest's name to the driver's), and checks each
// limiter's result in its subtest.
func rlDriver(t *testing.T, prog, addr string, limiters map[string]string) {
	var bin string
	if strings.HasSuffix(prog, ".py") {
		bin = testsrv.Need(t, "/usr/bin/python3")
		if exec.Command(bin, "-c", "import redis, limits").Run() != nil {
			testsrv.Need(t, "python3-limits and python3-redis (apt-get install them)")
		}
	} else {
		bin = testsrv.Need(t, "node")
		needNodeModules(t)
	}
	args := []string{prog, addr, "rl:"}
	for _, name := range limiters {
		args = append(args, name)
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%v: %v\n%s%s", cmd.Args, err, out, stderr)
	}
	var results map[string]rlResult
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("%v printed %q: %v", cmd.Args, out, err)
	}
	for sub, name := range limiters {
		t.Run(sub, func(t *testing.T) {
			r, ok := results[name]
			if !ok {
				t.Fatalf("%s printed no result for %s: %s", prog, name, out)
			}
			checkRateLimit(t, r)
		})
	}
}

// rlRun runs the workload in process: each of rlWorkers workers gets a
// go-redis client of its own and makes rlAttempts attempts by attempt,
// which answers whether it was admitted and the count the library
// reported.
func rlRun(t *testing.T, addr string, newAttempt func(c *redis.Client) func() (bool, int64, error)) rlResult {
	t.Helper()
	var mu sync.Mutex
	var r rlResult
	var wg sync.WaitGroup
	for range rlWorkers {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		attempt := newAttempt(c)
		wg.Go(func() {
			for range rlAttempts {
				ok, n, err := attempt()
				mu.Lock()
				switch {
				case err != nil:
					r.Errors = append(r.Errors, err.Error())
				case ok:
					r.Admitted++
					r.Counts = append(r.Counts, n)
				default:
					r.Refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(r.Counts)
	return r
}

// ululeLimiter runs ulule/limiter v3 with its redis store (a store per
// worker, as each process of a service has): its count is the limit less
// what remains.
func ululeLimiter(t *testing.T, addr, key string) rlResult {
	rate := limiter.Rate{Period: rlWindow, Limit: rlLimit}
	return rlRun(t, addr, func(c *redis.Client) func() (bool, int64, error) {
		store, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule"})
		if err != nil {
			return func() (bool, int64, error) { return false, 0, fmt.Errorf("store: %w", err) }
		}
		l := limiter.New(store, rate)
		return func() (bool, int64, error) {
			lc, err := l.Get(t.Context(), key)
			return err == nil && !lc.Reached, lc.Limit - lc.Remaining, err
		}
	})
}

// redisRateLimiter runs go-redis/redis_rate v10 (GCRA, reading TIME in its
// script) with a burst of rlLimit and one admission per six minutes after
// it; its count is the burst less what remains.
func redisRateLimiter(t *testing.T, addr, key string) rlResult {
	limit := redis_rate.Limit{Rate: rlLimit, Burst: rlLimit, Period: time.Hour}
	return rlRun(t, addr, func(c *redis.Client) func() (bool, int64, error) {
		l := redis_rate.NewLimiter(c)
		return func() (bool, int64, error) {
			res, err := l.Allow(t.Context(), key, limit)
			if err != nil {
				return false, 0, err
			}
			return res.Allowed > 0, int64(rlLimit - res.Remaining), nil
		}
	})
}
