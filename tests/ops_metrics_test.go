package tests

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/backend"
	"github.com/lockproxy/lockproxy/quorum"
)

// countingMemory is the memory backend with the optional counters the
// proxy exports: held locks (its DBSize over every database, fine at test
// sizes) and a fixed expiry count (the wiring, not the number, is tested).
type countingMemory struct{ *memory.Backend }

func (m countingMemory) HeldLocks() int64 {
	var n int64
	for db := range 16 {
		k, _ := m.DBSize(context.Background(), db)
		n += k
	}
	return n
}

func (m countingMemory) ExpiredLocks() uint64 { return 7 }

var (
	_ proxy.HeldLocksCounter = countingMemory{}
	_ proxy.ExpiryCounter    = countingMemory{}
	_ backend.Backend        = countingMemory{}
)

func opsScrape(t *testing.T, reg *prometheus.Registry, b backend.Backend) string {
	t.Helper()
	srv := httptest.NewServer(proxy.AdminHandler(reg, b))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// TestOpsLockMetrics drives real clients (go-redis, redsync) and checks
// the lock series: acquisitions by outcome (SET … NX and SETNX; plain SET
// and SET … NX GET are not acquisitions), held locks and expiries from a
// backend that can tell, and a failed acquisition when a quorum is lost.
func TestOpsLockMetrics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	b := countingMemory{memory.New(memory.Config{})}
	addr := testsrv.StartLockproxy(t, proxy.Config{Registerer: reg}, b)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()

	if ok, err := c.SetNX(ctx, "m:a", "1", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SetNX = %v, %v", ok, err)
	}
	if ok, _ := c.SetNX(ctx, "m:a", "2", time.Minute).Result(); ok {
		t.Fatal("second SetNX acquired a held lock")
	}
	c.Do(ctx, "SETNX", "m:b", "1")
	c.Do(ctx, "SETNX", "m:b", "2")
	c.Set(ctx, "m:plain", "x", 0)
	c.Do(ctx, "SET", "m:a", "3", "NX", "GET")
	rs := redsync.New(goredis.NewPool(c))
	mu := rs.NewMutex("m:redsync", redsync.WithExpiry(time.Minute), redsync.WithTries(1))
	if err := mu.LockContext(ctx); err != nil {
		t.Fatalf("redsync Lock: %v", err)
	}
	body := opsScrape(t, reg, b)
	for _, want := range []string{
		`lockproxy_lock_acquisitions_total{outcome="acquired"} 3`,
		`lockproxy_lock_acquisitions_total{outcome="contended"} 2`,
		`lockproxy_lock_acquisitions_total{outcome="failed"} 0`,
		"lockproxy_locks_held 4",
		"lockproxy_lock_expiries_total 7",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if _, err := mu.UnlockContext(ctx); err != nil {
		t.Fatalf("redsync Unlock: %v", err)
	}
	if body := opsScrape(t, reg, b); !strings.Contains(body, "lockproxy_locks_held 3\n") {
		t.Error("lockproxy_locks_held did not drop after a release")
	}

	// A backend that cannot count exports no gauge; a lost quorum is a failed acquisition.
	nodes := []*testsrv.Redis{testsrv.StartRedis(t), testsrv.StartRedis(t), testsrv.StartRedis(t)}
	qb, err := quorum.New(quorum.Config{Nodes: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr}, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	qreg := prometheus.NewRegistry()
	qaddr := testsrv.StartLockproxy(t, proxy.Config{Registerer: qreg, BackendName: "quorum"}, qb)
	nodes[0].Kill()
	nodes[1].Kill()
	q := redis.NewClient(&redis.Options{Addr: qaddr, MaxRetries: -1})
	defer q.Close()
	if err := q.SetNX(ctx, "m:q", "1", time.Minute).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("SetNX with one node of three = %v; want TRYAGAIN", err)
	}
	qbody := opsScrape(t, qreg, qb)
	if !strings.Contains(qbody, `lockproxy_lock_acquisitions_total{outcome="failed"} 1`+"\n") {
		t.Error(`quorum /metrics lacks lockproxy_lock_acquisitions_total{outcome="failed"} 1`)
	}
	if strings.Contains(qbody, "lockproxy_locks_held") {
		t.Error("quorum /metrics has lockproxy_locks_held; the backend cannot count held locks")
	}
}
