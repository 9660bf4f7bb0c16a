package quorum_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/quorum"
)

func TestPersistenceWarnings(t *testing.T) {
	volatile := testsrv.StartRedis(t)
	safe := testsrv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	evicting := testsrv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "volatile-lru")
	b := newBackend(t, []string{volatile.Addr, safe.Addr, evicting.Addr})
	w := strings.Join(b.Warnings(), "\n")
	for _, want := range []string{volatile.Addr + ": appendonly no", evicting.Addr + ": maxmemory-policy volatile-lru"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
	if strings.Contains(w, safe.Addr) {
		t.Errorf("a node with appendfsync always was warned about: %q", w)
	}
	if err := b.Check(t.Context()); err != nil {
		t.Errorf("Check with three nodes up = %v", err)
	}
}

// TestRestartedNodeIsQuarantined is Redlock's delayed restart: A holds a
// lock on nodes 0 and 1 (node 2 missed it); node 0 restarts empty. Were
// node 0 to vote, B would win nodes 0 and 2 and two clients would hold the
// lock. Node 0 must stay out of votes for the longest TTL granted.
func TestRestartedNodeIsQuarantined(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newMonitored(t, addrsOf(nodes))
	ctx := t.Context()
	acquire := func(tok string) (backend.SetResult, error) {
		return b.Set(ctx, 0, "res", []byte(tok), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}})
	}
	if res, err := acquire("A"); err != nil || !res.Written {
		t.Fatalf("A's acquire: %v %v", res, err)
	}
	n2 := redis.NewClient(&redis.Options{Addr: nodes[2].Addr})
	defer n2.Close()
	n2.Del(ctx, "res") // node 2 missed A's acquire

	nodes[0].Restart()
	waitQuarantined(t, b, nodes[0].Addr)
	res, err := acquire("B")
	if res.Written {
		t.Fatalf("B acquired a lock A holds (err %v): the restarted node voted", err)
	}
	// Node 0 answers but may not vote: the reply says so rather than
	// "answered", which would read as if three nodes had answered.
	const want = "TRYAGAIN quorum not reached: 2 of 3 nodes usable, 1 quarantined after a restart"
	if re := (*backend.ReplyError)(nil); !errors.As(err, &re) || re.Reply != want {
		t.Errorf("B's acquire = %v; want %q", err, want)
	}
}

func TestCheckFailsWithoutMajority(t *testing.T) {
	nodes := startNodes(t, 1)
	b := newBackend(t, []string{nodes[0].Addr, testsrv.DeadAddr(t), testsrv.DeadAddr(t)})
	if err := b.Check(t.Context()); err == nil {
		t.Fatal("Check with one node of three = nil")
	}
}

// TestRestartLoggedOnce: a restart is seen by the node's new connection
// connection and by the monitor, and logged once; the end of its
// quarantine is logged too.
func TestRestartLoggedOnce(t *testing.T) {
	nodes := startNodes(t, 3)
	var logs testsrv.SyncBuffer
	b := newBackendCfg(t, quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout, CheckInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := t.Context()
	if _, err := b.Set(ctx, 0, "k", []byte("A"), acq(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	nodes[0].Restart()
	waitQuarantined(t, b, nodes[0].Addr)
	b.Get(ctx, 0, "k") // the connection reconnects to node 0 and sees the new run_id too
	wait.Until(t, "the end of quarantine logged", func() (bool, any) {
		return strings.Contains(logs.String(), "quarantine ended"), "log:\n" + logs.String()
	})
	if n := strings.Count(logs.String(), "quorum node restarted"); n != 1 {
		t.Errorf("the restart was logged %d times; want once:\n%s", n, logs.String())
	}
}

// TestUnreachableAndBackLogged: a node that stops answering is logged
// unreachable once, and reachable again once it answers (an operator
// reading the log must see the recovery, not only the failure).
func TestUnreachableAndBackLogged(t *testing.T) {
	nodes := startNodes(t, 3)
	var logs testsrv.SyncBuffer
	newBackendCfg(t, quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout, CheckInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	await := func(what string) {
		t.Helper()
		wait.Until(t, fmt.Sprintf("%q logged", what), func() (bool, any) {
			return strings.Contains(logs.String(), what), "log:\n" + logs.String()
		})
	}
	nodes[1].Stop()
	await("quorum node unreachable")
	nodes[1].Cont()
	await("quorum node reachable again")
	if n := strings.Count(logs.String(), "quorum node unreachable"); n != 1 {
		t.Errorf("unreachable logged %d times; want once:\n%s", n, logs.String())
	}
}
