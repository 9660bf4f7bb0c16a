package quorum_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

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
	v, err := b.Eval(ctx, 0, script(string(src)),
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
	v, err = b.Eval(ctx, 0, script(string(src)),
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

// TestReleaseIsNotWatched: a catalogued release script (recognised by its
// whole text) reaches each node as the script alone, without the reads of
// its keys before and after that other scripts get; the release works, and
// a script that merely looks like one (another text) is still watched.
func TestReleaseIsNotWatched(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	ctx := t.Context()
	mgets := func() (n int64) {
		for _, node := range nodes {
			c := redis.NewClient(&redis.Options{Addr: node.Addr})
			info, _ := c.Info(ctx, "commandstats").Result()
			c.Close()
			_, rest, ok := strings.Cut(info, "cmdstat_mget:calls=")
			if ok {
				v, _, _ := strings.Cut(rest, ",")
				k, _ := strconv.ParseInt(v, 10, 64)
				n += k
			}
		}
		return n
	}
	acquire := acq(time.Minute)
	if res, err := b.Set(ctx, 0, "rel", []byte("tok"), acquire); err != nil || !res.Written {
		t.Fatalf("acquire: %v, %v", res, err)
	}
	release := script(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)
	if v, err := b.Eval(ctx, 0, release, []string{"rel"}, [][]byte{[]byte("tok")}, false); err != nil || v.Int != 1 {
		t.Fatalf("release = %v, %v; want :1", v, err)
	}
	if n := mgets(); n != 0 {
		t.Errorf("the nodes ran %d MGETs for a catalogued release; want none", n)
	}
	lookalike := script(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end -- mine`)
	if v, err := b.Eval(ctx, 0, lookalike, []string{"rel"}, [][]byte{[]byte("tok")}, false); err != nil || v.Int != 0 {
		t.Fatalf("second release = %v, %v; want :0", v, err)
	}
	if n := mgets(); n < 6 { // 12: the nodes did not know the script (NOSCRIPT, then EVAL, each watched)
		t.Errorf("the nodes ran %d MGETs for an uncatalogued script; want at least 6 (before and after, on 3 nodes)", n)
	}
}

// TestScriptAcquireValidity: an acquire by script gets Redlock's validity
// check like SET NX: node redlock 5's acquire script with a 2ms TTL (less
// than the 2ms drift allowance alone) reaches a majority too late, so the
// client gets TRYAGAIN and the keys are gone everywhere; with a minute it
// is granted, and that minute is the longest TTL granted, which a node
// restarting afterwards is quarantined for.
func TestScriptAcquireValidity(t *testing.T) {
	src, err := os.ReadFile("../tests/testdata/scripts/redlock5-acquire.lua")
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 3)
	b := newMonitored(t, addrsOf(nodes))
	ctx := t.Context()
	s := script(string(src))

	_, err = b.Eval(ctx, 0, s, []string{"v:a", "v:b"}, [][]byte{[]byte("mine"), []byte("2")}, false)
	var re *backend.ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(re.Reply, "TRYAGAIN quorum reached too late") {
		t.Fatalf("script acquire with a 2ms TTL = %v; want TRYAGAIN quorum reached too late", err)
	}
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		if got, _ := c.Exists(ctx, "v:a", "v:b").Result(); got != 0 {
			t.Errorf("node %s kept %d keys of a late acquire", n.Addr, got)
		}
		c.Close()
	}

	if v, err := b.Eval(ctx, 0, s, []string{"v:c"}, [][]byte{[]byte("mine"), []byte("60000")}, false); err != nil || v.Int != 1 {
		t.Fatalf("script acquire with a minute = %v, %v; want :1", v, err)
	}
	nodes[0].Restart() // after a script granted a one-minute lock
	waitQuarantined(t, b, nodes[0].Addr)
}

// TestLongScriptError: a script's error reply longer than the stream's
// read buffer (Redis sends it as one line) is the script's reply, not a
// broken node: the client gets it whole and the node connections serve on.
func TestLongScriptError(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	ctx := t.Context()
	_, err := b.Eval(ctx, 0, script(`return redis.error_reply(string.rep('x', 100000))`), nil, nil, false)
	var re *backend.ReplyError
	if !errors.As(err, &re) || len(re.Reply) < 100000 || strings.Trim(strings.TrimPrefix(re.Reply, "ERR "), "x") != "" { // Redis 7 adds ERR
		t.Fatalf("long error reply = %.80v…; want the script's 100000 x", err)
	}
	if res, err := b.Set(ctx, 0, "after", []byte("tok"), acq(time.Minute)); err != nil || !res.Written {
		t.Fatalf("acquire after the long reply = %v, %v; want OK (the node connections must not have broken)", res, err)
	}
}
