package quorum_test

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// TestFailedScriptAcquireIsUndone runs node redlock 5's real acquire script
// (multi-resource) where two nodes each hold one of its keys for someone
// else: the majority answers 0 (not acquired), and the third node, where the
// script did set both keys, must be cleaned up — nothing recognises the
// script by its SHA1; the keys it created are seen on the node.
func TestFailedScriptAcquireIsUndone(t *testing.T) {
	src, err := os.ReadFile("../tests/testdata/scripts/redlock5-acquire.lua")
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 3)
	direct := make([]*redis.Client, 3)
	for i, n := range nodes {
		direct[i] = redis.NewClient(&redis.Options{Addr: n.Addr})
		defer direct[i].Close()
	}
	ctx := t.Context()
	direct[0].Set(ctx, "a", "other", 0)
	direct[1].Set(ctx, "b", "other", 0)

	b := newBackend(t, addrsOf(nodes))
	sum := sha1.Sum(src)
	v, err := b.Eval(ctx, 0, backend.Script{SHA1: hex.EncodeToString(sum[:]), Src: string(src)},
		[]string{"a", "b"}, [][]byte{[]byte("mine"), []byte("10000")}, false)
	if err != nil || v.Kind != backend.KindInt || v.Int != 0 {
		t.Fatalf("acquire over two held keys = %v, %v; want :0", v, err)
	}
	if n, _ := direct[2].Exists(ctx, "a", "b").Result(); n != 0 {
		t.Fatalf("node 2 kept %d keys of an acquire the majority refused", n)
	}
	for i, key := range []string{"a", "b"} {
		if got, _ := direct[i].Get(ctx, key).Result(); got != "other" {
			t.Errorf("node %d: %s = %q; the other owner's lock was touched", i, key, got)
		}
	}

	// A successful acquire keeps its keys on every node.
	v, err = b.Eval(ctx, 0, backend.Script{SHA1: hex.EncodeToString(sum[:]), Src: string(src)},
		[]string{"c", "d"}, [][]byte{[]byte("mine"), []byte("10000")}, false)
	if err != nil || v.Int != 2 {
		t.Fatalf("acquire over free keys = %v, %v; want :2", v, err)
	}
	for i := range direct {
		if n, _ := direct[i].Exists(ctx, "c", "d").Result(); n != 2 {
			t.Errorf("node %d lost keys of a granted acquire (%d of 2)", i, n)
		}
	}
}
