package quorum_test

import (
	"os"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestLateMajorityUndone: N=5, three nodes (a majority) paused beyond the
// node timeout while an acquire runs — a SET NX by the blocking call, then
// node redlock's two-key acquiring script. Each is told TRYAGAIN; the
// paused nodes run it when they resume, and what they wrote is removed
// from each of them (latehold.go). A GET of the key sent right after the
// TRYAGAIN, while the nodes are still paused, waits for those undos and
// answers nil: it never meets the late majority of a lock nobody was
// granted. Before, the late writes were left to the repair, which keeps a
// value a majority holds: the token stayed on three nodes of five.
func TestLateMajorityUndone(t *testing.T) {
	src, err := os.ReadFile("../tests/testdata/scripts/redlock5-acquire.lua")
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 5)
	b := newBackend(t, addrsOf(nodes))
	direct := directClients(t, nodes)
	ctx := t.Context()
	acquire := func(keys []string) error {
		if len(keys) == 1 {
			_, err := b.Set(ctx, 0, keys[0], []byte("mine"), acq(testTimeout*100))
			return err
		}
		_, err := b.Eval(ctx, 0, script(string(src)), keys, bytesOf([]string{"mine", "20000"}), false)
		return err
	}
	// Classified and loaded first, all nodes up: the paused call must not
	// be the one that classifies.
	if err := acquire([]string{"warm:a", "warm:b"}); err != nil {
		t.Fatalf("warm-up acquire: %v", err)
	}

	for _, keys := range [][]string{{"late:k"}, {"late:a", "late:b"}} {
		wait := pauseFor(t, 3*testTimeout, nodes[2], nodes[3], nodes[4])
		if err := acquire(keys); !isTryAgainErr(err) {
			t.Fatalf("acquire of %q with three nodes of five paused = %v; want TRYAGAIN", keys, err)
		}
		type got struct {
			v     []byte
			found bool
			err   error
		}
		read := make(chan got, 1)
		go func() {
			v, found, err := b.Get(ctx, 0, keys[0])
			read <- got{v, found, err}
		}()
		wait()
		if g := <-read; g.err != nil || g.found {
			t.Errorf("GET %s sent after the TRYAGAIN = %q, %v, %v; want nil once the late writes are undone", keys[0], g.v, g.found, g.err)
		}
		for i, d := range direct {
			var n int64
			if !testsrv.Settled(func() bool { n, _ = d.Exists(ctx, keys...).Result(); return n == 0 }) {
				t.Errorf("node %d still holds %d of %q, an acquire told TRYAGAIN", i, n, keys)
			}
		}
	}
}
