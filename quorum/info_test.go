package quorum_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestInfoWithNodePaused: INFO asks the 16 databases' DBSIZE at once, so a
// paused node costs it one node timeout, not sixteen (ioredis sends INFO
// before every new connection's first command: 16 s of a 1 s timeout each
// time, before).
func TestInfoWithNodePaused(t *testing.T) {
	nodes := startNodes(t, 3)
	const timeout = time.Second
	b := newBackendCfg(t, quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: timeout})
	c := redis.NewClient(&redis.Options{Addr: testsrv.StartLockproxy(t, proxy.Config{BackendName: "quorum"}, b), ReadTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	nodes[0].Stop()
	t.Cleanup(nodes[0].Cont)
	start := time.Now()
	if err := c.Info(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	// Sixteen timeouts one after another would take 16 s; all at once,
	// one (and the machine's delays: a loaded one is given 7 more).
	if took := time.Since(start); took > 8*timeout {
		t.Fatalf("INFO took %v with one node paused; want about one node timeout (%v)", took.Round(time.Millisecond), timeout)
	}
}
