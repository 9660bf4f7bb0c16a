package quorum_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestSplitVoteSentAgain: an acquire that saw the key free on a minority
// of the nodes, held on the others, is sent again (maxSplits times, on
// both paths) before it answers nil, and leaves nothing behind: a split
// among contenders leaves the key held by nobody, and a waiter woken only
// by releases would wait for ever on a nil.
func TestSplitVoteSentAgain(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := t.Context()
	direct := directClients(t, nodes)
	// Two other clients each hold the key on one node: a split, which no
	// attempt can end.
	direct[0].Set(ctx, "k", "x", time.Minute)
	direct[1].Set(ctx, "k", "y", time.Minute)
	b := newBackend(t, addrsOf(nodes))
	addr := testsrv.StartLockproxy(t, proxy.Config{BackendName: "quorum"}, b)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for _, path := range []struct {
		name    string
		acquire func() (bool, error)
	}{
		{"blocking", func() (bool, error) {
			res, err := b.Set(ctx, 0, "k", []byte("me"), acq(time.Minute))
			return res.Written, err
		}},
		{"loop", func() (bool, error) { return c.SetNX(ctx, "k", "me", time.Minute).Result() }},
	} {
		t.Run(path.name, func(t *testing.T) {
			// A failing acquire waits 2 ms (splitGrace) for the free node's
			// reply, the one that makes it a split. Under -race on a loaded
			// machine that reply can come later, and the acquire answers nil
			// at once (its late write undone afterwards): a few tries, one of
			// which must show every attempt.
			var sets int64
			for try := 0; try < 5 && sets != 1+quorum.MaxSplits; try++ {
				before := cmdCalls(t, direct[2], "set")
				if ok, err := path.acquire(); ok || err != nil {
					t.Fatalf("acquire against a split = %v, %v; want nil", ok, err)
				}
				sets = cmdCalls(t, direct[2], "set") - before
				for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
					if n, _ := direct[2].Exists(ctx, "k").Result(); n == 0 {
						break
					}
				}
				if n, _ := direct[2].Exists(ctx, "k").Result(); n != 0 {
					t.Fatalf("the acquire's write stayed on the free node")
				}
			}
			if sets != 1+quorum.MaxSplits {
				t.Errorf("the free node saw %d SETs; want %d (the first, and one more after each split vote)", sets, 1+quorum.MaxSplits)
			}
			// One holder on a majority, its write not yet on the third
			// node: no split, nil after one attempt.
			direct[1].Set(ctx, "k", "x", time.Minute)
			defer direct[1].Set(ctx, "k", "y", time.Minute)
			before := cmdCalls(t, direct[2], "set")
			if ok, err := path.acquire(); ok || err != nil {
				t.Fatalf("acquire of a key held on a majority = %v, %v; want nil", ok, err)
			}
			if n := cmdCalls(t, direct[2], "set") - before; n != 1 {
				t.Errorf("the free node saw %d SETs; want 1: a key held on a majority is no split", n)
			}
		})
	}
}
