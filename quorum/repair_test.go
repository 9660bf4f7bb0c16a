package quorum_test

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestRepairAfterLostReply: node 0's connection hangs (its replies never
// come) while lock operations on two keys run; once it is treated as
// broken, those keys are repaired on node 0. There "k" holds a value no
// other node holds (a write whose reply was lost, a release that never
// arrived): it is deleted, so the node votes for the key again. "shared"
// holds the same value on node 0 and node 1, which may be a lock a
// majority holds: it is kept.
func TestRepairAfterLostReply(t *testing.T) {
	nodes := startNodes(t, 3)
	f := startFreezer(t, nodes[0].Addr)
	b := newBackendCfg(t, quorum.Config{Nodes: []string{f.addr, nodes[1].Addr, nodes[2].Addr}, NodeTimeout: 50 * time.Millisecond})
	ctx := t.Context()
	direct := directClients(t, nodes)
	direct[0].Set(ctx, "k", "stale", time.Minute)
	direct[0].Set(ctx, "shared", "v", time.Minute)
	direct[1].Set(ctx, "shared", "v", time.Minute)
	if _, _, err := b.Get(ctx, 0, "warm"); err != nil { // node 0's stream is connected
		t.Fatal(err)
	}
	f.freeze(f.count())
	if r, err := b.Set(ctx, 0, "k", []byte("mine"), acq(time.Minute)); err != nil || !r.Written {
		t.Fatalf("SET k mine NX with node 0 hanging = %v, %v; want OK from nodes 1 and 2", r, err)
	}
	b.Set(ctx, 0, "shared", []byte("other"), acq(time.Minute)) // one held, one free, one hanging: TRYAGAIN
	var v string
	if !testsrv.Settled(func() bool { v, _ = direct[0].Get(ctx, "k").Result(); return v == "" }) {
		t.Fatalf("node 0 still holds k = %q, which no other node holds, after its connection broke", v)
	}
	if v, _ := direct[0].Get(ctx, "shared").Result(); v != "v" {
		t.Errorf("node 0: shared = %q after the repair; want %q kept (node 1 holds it too)", v, "v")
	}
}
