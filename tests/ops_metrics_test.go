package tests

import (
	"fmt"
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

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
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

// opsWait polls /metrics until it holds every line of want (the health
// checks and the reaper run on their own schedule), and fails after 10s.
func opsWait(t *testing.T, reg *prometheus.Registry, b backend.Backend, want ...string) string {
	t.Helper()
	var body string
	wait.Until(t, fmt.Sprintf("/metrics to show %q", want), func() (bool, any) {
		body = opsScrape(t, reg, b)
		var missing []string
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%q missing from:\n%s", missing, body)
	})
	return body
}

// opsInfo returns the lockproxy section of INFO as name → value.
func opsInfo(t *testing.T, c *redis.Client) map[string]string {
	t.Helper()
	info, err := c.Info(t.Context(), "lockproxy").Result()
	if err != nil {
		t.Fatalf("INFO lockproxy: %v", err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// TestOpsLockMetrics drives real clients (go-redis, redsync) against the
// memory backend and checks the lock series and INFO's lockproxy section:
// acquisitions by outcome (SET … NX and SETNX; plain SET and SET … NX GET
// are not acquisitions), held locks that follow acquires, releases and
// expiries, and the expiry count.
func TestOpsLockMetrics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	b := memory.New(memory.Config{ReapInterval: 10 * time.Millisecond})
	addr := testsrv.StartLockproxy(t, proxy.Config{Registerer: reg, BackendName: "memory"}, b)
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
	opsWait(t, reg, b,
		`lockproxy_lock_acquisitions_total{outcome="acquired"} 3`,
		`lockproxy_lock_acquisitions_total{outcome="contended"} 2`,
		`lockproxy_lock_acquisitions_total{outcome="failed"} 0`,
		"lockproxy_locks_held 4",
		"lockproxy_lock_expiries_total 0")
	info := opsInfo(t, c)
	for k, want := range map[string]string{"lockproxy_backend": "memory", "lockproxy_ready": "1", "lockproxy_locks_held": "4",
		"lockproxy_lock_acquired": "3", "lockproxy_lock_contended": "2", "lockproxy_lock_failed": "0", "lockproxy_lock_expiries": "0"} {
		if info[k] != want {
			t.Errorf("INFO lockproxy: %s = %q; want %q", k, info[k], want)
		}
	}
	if _, err := mu.UnlockContext(ctx); err != nil {
		t.Fatalf("redsync Unlock: %v", err)
	}
	opsWait(t, reg, b, "lockproxy_locks_held 3", "lockproxy_lock_expiries_total 0") // a release is no expiry

	// Two locks of 50ms that nobody releases: the reaper ends them.
	c.SetNX(ctx, "m:short1", "1", 50*time.Millisecond)
	c.SetNX(ctx, "m:short2", "1", 50*time.Millisecond)
	opsWait(t, reg, b, "lockproxy_locks_held 3", "lockproxy_lock_expiries_total 2",
		`lockproxy_lock_acquisitions_total{outcome="acquired"} 5`)
}

// TestOpsQuorumMetrics: the per-node series of the quorum backend (health,
// reply times, failures, quarantine, keys) and INFO's quorum lines follow
// real nodes as they serve, die and restart; a lost quorum is a failed
// acquisition and INFO says the proxy is not ready.
func TestOpsQuorumMetrics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	nodes := []*testsrv.Redis{testsrv.StartRedis(t), testsrv.StartRedis(t), testsrv.StartRedis(t)}
	qb, err := quorum.New(quorum.Config{Nodes: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr},
		NodeTimeout: time.Second, CheckInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(qb) // as cmd/lockproxy registers a backend's collector
	addr := testsrv.StartLockproxy(t, proxy.Config{Registerer: reg, BackendName: "quorum"}, qb)
	q := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer q.Close()

	for _, k := range []string{"q:a", "q:b"} {
		if ok, err := q.SetNX(ctx, k, "1", time.Minute).Result(); !ok || err != nil {
			t.Fatalf("SetNX %s = %v, %v", k, ok, err)
		}
	}
	var want []string
	for _, n := range nodes {
		want = append(want,
			`lockproxy_quorum_node_up{node="`+n.Addr+`"} 1`,
			`lockproxy_quorum_node_quarantined{node="`+n.Addr+`"} 0`,
			`lockproxy_quorum_node_keys{node="`+n.Addr+`"} 2`,
			`lockproxy_quorum_node_failures_total{node="`+n.Addr+`"} 0`,
			`lockproxy_quorum_node_reply_seconds_count{node="`+n.Addr+`"} 2`)
	}
	opsWait(t, reg, qb, append(want, "lockproxy_quorum_majority 2", "lockproxy_locks_held 2",
		`lockproxy_quorum_node_safety_warnings{node="`+nodes[0].Addr+`"} 1`)...) // test nodes run without appendonly
	info := opsInfo(t, q)
	for k, want := range map[string]string{"lockproxy_ready": "1", "lockproxy_quorum_nodes": "3", "lockproxy_quorum_majority": "2",
		"lockproxy_quorum_nodes_up": "3", "lockproxy_quorum_nodes_quarantined": "0", "lockproxy_locks_held": "2"} {
		if info[k] != want {
			t.Errorf("INFO lockproxy: %s = %q; want %q", k, info[k], want)
		}
	}
	if !strings.HasPrefix(info["lockproxy_quorum_node0"], "addr="+nodes[0].Addr+",up=1,quarantined=0,") {
		t.Errorf("INFO lockproxy_quorum_node0 = %q", info["lockproxy_quorum_node0"])
	}

	// A restart (empty: no persistence) quarantines the node: the lock it forgot was granted for a minute.
	nodes[2].Restart()
	opsWait(t, reg, qb, `lockproxy_quorum_node_quarantined{node="`+nodes[2].Addr+`"} 1`,
		`lockproxy_quorum_node_keys{node="`+nodes[2].Addr+`"} 0`,
		"lockproxy_locks_held 2") // a majority still holds both
	if got := opsInfo(t, q)["lockproxy_quorum_nodes_quarantined"]; got != "1" {
		t.Errorf("INFO lockproxy_quorum_nodes_quarantined = %q after a restart; want 1", got)
	}

	nodes[0].Kill()
	if err := q.SetNX(ctx, "q:c", "1", time.Minute).Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("SetNX with one usable node of three = %v; want TRYAGAIN", err)
	}
	opsWait(t, reg, qb, `lockproxy_lock_acquisitions_total{outcome="failed"} 1`,
		`lockproxy_quorum_node_up{node="`+nodes[0].Addr+`"} 0`,
		`lockproxy_quorum_node_failures_total{node="`+nodes[0].Addr+`"} 1`, // the acquire (its undo goes only to node 1, which wrote)
		`lockproxy_quorum_node_failures_total{node="`+nodes[1].Addr+`"} 0`)
	info = opsInfo(t, q)
	if info["lockproxy_ready"] != "0" || !strings.Contains(info["lockproxy_not_ready_reason"], "1 of 3 nodes usable") {
		t.Errorf("INFO with one usable node: lockproxy_ready = %q, reason %q; want 0 and the count", info["lockproxy_ready"], info["lockproxy_not_ready_reason"])
	}
}
