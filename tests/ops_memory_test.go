package tests

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
)

// TestOpsMemoryComesBack runs the real binary (memory backend) and checks
// that its resident memory returns near where it started within seconds
// after a large value is deleted and after a FLUSHALL of many keys, as
// redis-server's does, instead of staying at its peak until the runtime
// gets round to it.
func TestOpsMemoryComesBack(t *testing.T) {
	t.Parallel()
	bin := testsrv.BuildLockproxy(t)
	lp := testsrv.StartBinary(t, bin, "--max-request-bytes", "100000000")
	c := redis.NewClient(&redis.Options{Addr: lp.Addr, Protocol: 2})
	defer c.Close()
	ctx := t.Context()
	base := rssMiB(t, lp.Pid())

	backNear := func(what string) {
		t.Helper()
		var rss int
		if !wait.Poll(10*time.Second, func() bool { rss = rssMiB(t, lp.Pid()); return rss <= base+32 }) {
			t.Errorf("%s: resident %d MiB 10s later; started at %d MiB, want at most 32 MiB more", what, rss, base)
		}
	}
	// The value comes on a connection of its own, closed once it is
	// stored: on the goroutine front end redcon keeps a connection's read
	// buffer at its largest for the connection's life (the loops let it
	// go), and this test is about the value's memory.
	big := redis.NewClient(&redis.Options{Addr: lp.Addr, Protocol: 2, PoolSize: 1})
	if err := big.Set(ctx, "big", strings.Repeat("x", 64<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	big.Close()
	if rss := rssMiB(t, lp.Pid()); rss < base+64 {
		t.Fatalf("resident %d MiB with a 64 MiB value held (from %d): the test measures nothing", rss, base)
	}
	c.Del(ctx, "big")
	backNear("DEL of a 64 MiB value")

	pipe := c.Pipeline()
	for i := range 300_000 {
		pipe.Set(ctx, fmt.Sprintf("key:%d", i), "value", 0)
		if i%10_000 == 9_999 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rss := rssMiB(t, lp.Pid()); rss < base+32 {
		t.Fatalf("resident %d MiB with 300,000 keys (from %d): the test measures nothing", rss, base)
	}
	c.FlushAll(context.Background())
	backNear("FLUSHALL of 300,000 keys")
}

// rssMiB is a process's resident set in MiB.
func rssMiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb >> 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
