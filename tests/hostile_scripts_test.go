package tests

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
)

// Hostile scripts (issue 40) against the real binary: each is stopped
// with an error, leaves the process alive and its memory near where it
// was, and never delays a canary client that takes and releases a lock
// beside it by more than the script time limit and a second.

// These tests measure delays: they do not run in parallel with each
// other.

// scriptLimit is the --script-time-limit of these tests.
const scriptLimit = 500 * time.Millisecond

// canary takes and releases a lock in a loop on its own connection until
// stop is called, which returns the longest operation it saw and the
// first error it got; ops counts the operations done.
func canary(t *testing.T, addr string, ops *atomic.Int64) (stop func() (time.Duration, error)) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	var (
		worst time.Duration
		first error
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			tok := strconv.Itoa(i)
			for _, op := range []func() error{
				func() error {
					ok, err := c.SetNX(ctx, "canary:lock", tok, 10*time.Second).Result()
					if err == nil && !ok {
						err = fmt.Errorf("SET NX of a released lock answered nil")
					}
					return err
				},
				func() error {
					n, err := c.Eval(ctx, `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, []string{"canary:lock"}, tok).Int()
					if err == nil && n != 1 {
						err = fmt.Errorf("release answered %d", n)
					}
					return err
				},
			} {
				start := time.Now()
				err := op()
				if ctx.Err() != nil {
					return
				}
				worst = max(worst, time.Since(start))
				if err != nil && first == nil {
					first = err
				}
				ops.Add(1)
			}
		}
	}()
	return func() (time.Duration, error) {
		cancel()
		<-done
		c.Close()
		return worst, first
	}
}

// rss is the resident memory of process pid, in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// hostile is one attack: a script, its keys, and the start of the error
// (or the reply) it must end with.
type hostile struct {
	name, src string
	keys      []string
	want      string
}

// attack runs each of attacks against lp beside a canary: the canary is
// never delayed beyond the time limit and a second nor gets an error
// (issue 40's promise), and each attack ends with its error within the
// time limit and four seconds, a stall detector with room for the suite's
// load on two cores (a memory stop's check comes later there: 1.52 s
// seen). With checkRSS, the process's resident memory comes back within
// 64 MiB of where it was before the attacks within 10 s.
func attack(t *testing.T, lp *testsrv.Binary, limit time.Duration, attacks []hostile, checkRSS bool) {
	t.Helper()
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: lp.Addr, PoolSize: 1, MaxRetries: -1, ReadTimeout: 60 * time.Second})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	base := rss(t, lp.Pid())
	var ops atomic.Int64
	stop := canary(t, lp.Addr, &ops)
	bound, canaryBound := limit+4*time.Second, limit+time.Second
	for _, a := range attacks {
		start := time.Now()
		res, err := c.Eval(ctx, a.src, a.keys).Result()
		took := time.Since(start)
		got := fmt.Sprint(res)
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, a.want) {
			t.Errorf("%s: %.200s; want %q…", a.name, got, a.want)
		}
		if took > bound {
			t.Errorf("%s: answered after %v; want within %v", a.name, took, bound)
		}
		t.Logf("%s: %.100s after %v, RSS %d MiB", a.name, got, took.Round(time.Millisecond), rss(t, lp.Pid())>>20)
		// The next attack waits for the canary to take and release the
		// lock once: each of its operations faces one attack at most.
		n := ops.Load() + 2
		wait.Poll(10*time.Second, func() bool { return ops.Load() >= n })
	}
	worst, err := stop()
	if err != nil {
		t.Errorf("the canary got an error: %v", err)
	}
	if worst > canaryBound {
		t.Errorf("the canary waited %v; want at most %v", worst, canaryBound)
	}
	var now int64
	switch {
	case !checkRSS:
	case wait.Poll(10*time.Second, func() bool { now = rss(t, lp.Pid()); return now <= base+64<<20 }):
		t.Logf("RSS %d MiB before the attacks, %d MiB after; canary's worst %v", base>>20, now>>20, worst.Round(time.Millisecond))
	default:
		t.Errorf("RSS %d MiB 10 s after the attacks; it was %d MiB before", now>>20, base>>20)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("after the attacks: %v", err)
	}
}

const errMemory = "ERR Script killed by lockproxy: it used more memory than the script memory limit (64 MiB)"

// memoryAttacks build more than a script's memory budget.
var memoryAttacks = []hostile{
	{"doubling", "local s='x' for i=1,40 do s=s..s end return #s", nil, errMemory},
	{"doubling again", "local s='x' for i=1,40 do s=s..s end return #s", nil, errMemory},
	{"table", "local t={} for i=1,1e9 do t[i]={i} end return #t", nil, errMemory},
	{"string.rep", "return #string.rep('x', 2^30)", nil, errMemory},
	{"SET of a huge value", "return redis.call('SET', KEYS[1], string.rep('x', 2^28))", []string{"hostile:big"}, errMemory},
	{"doubling a third time", "local s='x' for i=1,40 do s=s..s end return #s", nil, errMemory},
}

// TestHostileScriptMemory is issue 40's item 1 on the memory backend.
func TestHostileScriptMemory(t *testing.T) {
	// A longer time limit: on a busy machine the time limit must not
	// come first.
	const limit = 3 * time.Second
	lp := testsrv.StartBinary(t, testsrv.BuildLockproxy(t), "--script-time-limit", limit.String())
	attack(t, lp, limit, memoryAttacks, true)
}

// timeAttacks take long in a single step, or stall everyone else.
var timeAttacks = []hostile{
	{"recursion under pcall", "local function f(n) return 1+f(n+1) end local ok,e=pcall(f,1) return tostring(e)", nil, "user_script:1: stack overflow"},
	{"recursion", "local function f(n) return 1+f(n+1) end return f(1)", nil, "ERR user_script:1: stack overflow script: "},
	{"recursion of pcalls", "local function f(n) local ok, e = pcall(f, n+1) return e end return f(1)", nil, "C stack overflow"},
	{"loop", "while true do end", nil, "ERR Script killed by lockproxy: it ran longer than the script time limit (500ms)"},
	{"loop of pcalls", "while true do pcall(function() while true do end end) end", nil, "ERR Script killed by lockproxy: it ran longer than the script time limit (500ms)"},
	{"writes in a loop", "local i = 0 while true do i = i + 1 redis.call('SET', KEYS[1], i) end", []string{"hostile:count"}, "ERR Script killed by lockproxy: it ran longer than the script time limit (500ms)"},
	{"large argument", "return redis.call('SET', KEYS[1], string.rep('x', 2^25))", []string{"hostile:large"}, "OK"},
	{"large reply", "local t = {} for i = 1, 1e5 do t[i] = i end return #t", nil, "100000"},
	{"backtracking pattern", "return string.find(string.rep('a', 300), string.rep('a*', 8) .. 'b')", nil, "ERR Script killed by lockproxy: it ran longer than the script time limit (500ms)"},
	{"gsub of every position", "return #string.gsub(string.rep('a', 1e5), '', '-')", nil, "200001"},
}

// TestHostileScriptTime is issue 40's item 5 on the memory backend.
func TestHostileScriptTime(t *testing.T) {
	lp := testsrv.StartBinary(t, testsrv.BuildLockproxy(t), "--script-time-limit", scriptLimit.String())
	// Its memory is not checked: it stores a 32 MiB value, and a large
	// value's memory coming back is another matter (issue 40, item 6).
	attack(t, lp, scriptLimit, timeAttacks, false)
}

// halfAttacks write, then run until lockproxy stops them.
var halfAttacks = []hostile{
	{"write then loop", "redis.call('SET', KEYS[1], 'partial') while true do end", []string{"hw:key"}, "ERR Script killed by lockproxy: it ran longer than the script time limit (500ms)"},
	{"write loop", "local i = 0 while true do i = i + 1 redis.call('SET', KEYS[1], i) end", []string{"hw:key"}, "ERR Script killed by lockproxy: it ran longer than the script time limit (500ms)"},
	{"write then build", "redis.call('SET', KEYS[1], 'partial') local s = 'x' for i = 1, 40 do s = s .. s end", []string{"hw:key"}, "ERR Script killed by lockproxy: "}, // memory, or time on a busy machine
}

// TestHostileScriptAtomic is issue 40's item 2, on the memory and the
// postgres backends: a script stopped by lockproxy leaves no write.
func TestHostileScriptAtomic(t *testing.T) {
	bin := testsrv.BuildLockproxy(t)
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"memory", func(*testing.T) []string { return nil }},
		{"postgres", func(t *testing.T) []string {
			return []string{"--backend", "postgres", "--postgres-dsn", testsrv.SharedPostgres(t).NewDatabase(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lp := testsrv.StartBinary(t, bin, append(tc.args(t), "--script-time-limit", scriptLimit.String())...)
			attack(t, lp, scriptLimit, halfAttacks, false)
			c := redis.NewClient(&redis.Options{Addr: lp.Addr, MaxRetries: -1})
			defer c.Close()
			if got, err := c.Get(t.Context(), "hw:key").Result(); err != redis.Nil {
				t.Errorf("GET hw:key = %q, %v; want nil: the stopped scripts' writes are gone", got, err)
			}
		})
	}
}
