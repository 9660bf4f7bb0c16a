package quorum_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/quorum"
)

// BenchmarkLoopCycle runs lock cycles (SET NX PX, then the release by
// EVALSHA) from 50 clients through a proxy on one event loop over three
// nodes, as tests/bench/quorum.sh does: with -memprofile it shows where
// the loop path allocates (the client's allocations are in the same
// profile, under go-redis).
func BenchmarkLoopCycle(b *testing.B) {
	nodes := startNodes(b, 3)
	cfg := quorum.Config{NodeTimeout: 2 * time.Second} // generous: a memory profile slows everything
	c, qb := startLoopProxy(b, nodes, 1, cfg)
	ctx := b.Context()
	release := redis.NewScript(releaseSrc)
	release.Load(ctx, c)
	// Warm up until both commands run on the loop.
	wait.Poll(5*time.Second, func() bool {
		c.SetNX(ctx, "warm", "x", 10*time.Second)
		release.Run(ctx, c, []string{"warm"}, "x")
		return qb.LoopOps() >= 10
	})
	var next atomic.Int64
	n := int64(b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range 50 {
		wg.Go(func() {
			key := fmt.Sprintf("lock%d", w)
			for next.Add(1) <= n {
				if ok, err := c.SetNX(ctx, key, "tok", 10*time.Second).Result(); !ok || err != nil {
					b.Errorf("SET NX: %v %v", ok, err)
					return
				}
				if err := release.Run(ctx, c, []string{key}, "tok").Err(); err != nil {
					b.Errorf("release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkLoopScriptCycle is BenchmarkLoopCycle with the acquire made by
// a string acquiring script (EVALSHA of acquireSrc: EXISTS, SET PX), the
// watched script path (MGET before and after, PTTL), as hand-written locks
// acquire.
func BenchmarkLoopScriptCycle(b *testing.B) {
	nodes := startNodes(b, 3)
	cfg := quorum.Config{NodeTimeout: 2 * time.Second}
	c, qb := startLoopProxy(b, nodes, 1, cfg)
	ctx := b.Context()
	acq := redis.NewScript(acquireSrc)
	release := redis.NewScript(releaseSrc)
	acq.Load(ctx, c)
	release.Load(ctx, c)
	wait.Poll(5*time.Second, func() bool {
		acq.Run(ctx, c, []string{"warm"}, "x", 10000)
		release.Run(ctx, c, []string{"warm"}, "x")
		return qb.LoopOps() >= 10
	})
	var next atomic.Int64
	n := int64(b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range 50 {
		wg.Go(func() {
			key := fmt.Sprintf("lock%d", w)
			for next.Add(1) <= n {
				if got, err := acq.Run(ctx, c, []string{key}, "tok", 10000).Int(); got != 1 || err != nil {
					b.Errorf("acquire script: %v %v", got, err)
					return
				}
				if err := release.Run(ctx, c, []string{key}, "tok").Err(); err != nil {
					b.Errorf("release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}
