package faults

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// quorumRun starts three nodes and lockproxy (the binary) over them.
func quorumRun(t *testing.T) ([]*testsrv.Redis, *testsrv.Binary) {
	t.Helper()
	nodes := quorumNodes(t, 3)
	return nodes, startQuorumBinary(t, addrs(nodes))
}

// TestKillOneNode: one node at a time is killed with SIGKILL and comes back
// at once with an empty memory (nothing persisted), over and over. Without
// the restart quarantine a lock held on {A, B} is then held on {B} alone and
// a second client can take it on {A, C}.
func TestKillOneNode(t *testing.T) {
	nodes, lp := quorumRun(t)
	runNemesis(t, nemesis{Name: "kill -9 one node, restart empty", Backend: "quorum", Client: "goredis", Addrs: []string{lp.Addr}},
		func(ctx context.Context) {
			for i := 0; pause(ctx, 400*time.Millisecond); i++ {
				nodes[i%3].Restart()
			}
		})
}

// TestKillMajority: two nodes are killed together, stay down for a while,
// and come back empty one after the other. While two are down nothing can
// be granted; once back, the restarted nodes must not vote until every lock
// they may have forgotten has expired.
func TestKillMajority(t *testing.T) {
	nodes, lp := quorumRun(t)
	runNemesis(t, nemesis{Name: "kill -9 two nodes, restart empty", Backend: "quorum", Client: "redislock", Addrs: []string{lp.Addr}},
		func(ctx context.Context) {
			for i := 0; pause(ctx, 700*time.Millisecond); i++ {
				a, b := nodes[i%3], nodes[(i+1)%3]
				a.Kill()
				b.Kill()
				pause(ctx, 150*time.Millisecond)
				a.Restart()
				pause(ctx, 50*time.Millisecond)
				b.Restart()
			}
		})
}

// TestPauseOneNode: one node at a time is frozen with SIGSTOP for longer
// than the node timeout and the TTL, then continued: what it had queued
// runs late, after lockproxy gave up on it.
func TestPauseOneNode(t *testing.T) {
	nodes, lp := quorumRun(t)
	runNemesis(t, nemesis{Name: "SIGSTOP one node (700ms), SIGCONT", Backend: "quorum", Client: "goredis", Addrs: []string{lp.Addr}},
		func(ctx context.Context) {
			for i := 0; pause(ctx, 300*time.Millisecond); i++ {
				n := nodes[i%3]
				n.Stop()
				pause(ctx, 700*time.Millisecond)
				n.Cont()
			}
		})
}

// TestPauseTwoNodes: two nodes are frozen together (no majority), then
// continued one after the other; their queued SETs and undos run late.
func TestPauseTwoNodes(t *testing.T) {
	nodes, lp := quorumRun(t)
	runNemesis(t, nemesis{Name: "SIGSTOP two nodes (300ms), SIGCONT", Backend: "quorum", Client: "redsync", Addrs: []string{lp.Addr}},
		func(ctx context.Context) {
			for i := 0; pause(ctx, 500*time.Millisecond); i++ {
				a, b := nodes[i%3], nodes[(i+1)%3]
				a.Stop()
				b.Stop()
				pause(ctx, 300*time.Millisecond)
				a.Cont()
				pause(ctx, 30*time.Millisecond)
				b.Cont()
			}
		})
}
