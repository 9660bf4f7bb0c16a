package quorum_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
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
	var n int64
	if !testsrv.Settled(func() bool { n, _ = direct[2].Exists(ctx, "a", "b").Result(); return n == 0 }) {
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
		var n int64
		if !testsrv.Settled(func() bool { n, _ = direct[i].Exists(ctx, "c", "d").Result(); return n == 2 }) {
			t.Errorf("node %d lost keys of a granted acquire (%d of 2)", i, n)
		}
	}
}

// monitor watches what one node runs (MONITOR): stop returns how many
// times each command reached it from a client, not from inside a script,
// up to now.
func monitor(t *testing.T, node *testsrv.Redis) (stop func(want map[string]int64) map[string]int64) {
	t.Helper()
	conn, err := net.Dial("tcp", node.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := bufio.NewReader(conn)
	conn.Write([]byte("MONITOR\r\n"))
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	marker := fmt.Sprintf("end-of-test-%d", time.Now().UnixNano())
	// stop counts the commands seen. A call answers once a majority
	// agreed, so the last node may get its commands just after: stop reads
	// until it has seen want (2s at most), then sends a marker and counts
	// what comes before it too, so that extra commands still show.
	return func(want map[string]int64) map[string]int64 {
		out := map[string]int64{}
		count := func(line string) {
			// +1700000000.123456 [0 127.0.0.1:1234] "evalsha" "…" …; [0 lua] inside a script
			_, rest, ok := strings.Cut(line, "] \"")
			if !ok || strings.Contains(line, " lua] ") {
				return
			}
			name, _, _ := strings.Cut(rest, "\"")
			out[strings.ToLower(name)]++
		}
		seen := func() bool {
			for cmd, n := range want {
				if out[cmd] < n {
					return false
				}
			}
			return true
		}
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		for !seen() {
			line, err := r.ReadString('\n')
			if err != nil {
				break // not all seen: the comparison says what is missing
			}
			count(line)
		}
		c := redis.NewClient(&redis.Options{Addr: node.Addr})
		c.Echo(t.Context(), marker)
		c.Close()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("MONITOR: %v", err)
			}
			if strings.Contains(line, marker) {
				conn.Close()
				return out
			}
			count(line)
		}
	}
}

// TestClientScriptsWatch runs every lock client's real scripts
// (tests/testdata/scripts) through the quorum and counts, with INFO
// commandstats, what each node ran: a release is the script alone (one
// command per node), an extend the script and a PTTL per key, and an
// acquire keeps its reads before and after. Nothing knows these texts:
// a reworded release no library sends takes the one-command path too.
// Scripts that are not a lock's by their shape (bsm/redislock's PTTL read,
// node redlock 4's two-key extend) run on the model: each node sees only
// lockproxy's read, commit and release, never the script.
func TestClientScriptsWatch(t *testing.T) {
	const (
		alone     = iota // EVALSHA only
		ttls             // EVALSHA + PTTL per key
		full             // MGET, EVALSHA, MGET, PTTL per key
		model            // on the model: lockproxy's read, its commit, its release (EVALSHA each)
		modelRead        // on the model, changing nothing: the read and the release
	)
	cases := []struct {
		file string
		keys []string
		args []string
		want int
	}{
		{"redis-py-release", []string{"k"}, []string{"tok"}, alone},
		{"redis-py-extend", []string{"k"}, []string{"tok", "60000", "0"}, ttls},
		{"redis-py-reacquire", []string{"k"}, []string{"tok", "60000"}, ttls},
		{"redis-semaphore-mutex-release", []string{"k"}, []string{"tok"}, alone},
		{"redis-semaphore-mutex-refresh", []string{"k"}, []string{"tok", "60000"}, ttls},
		{"redislock-obtain", []string{"k", "l"}, []string{"tok", "3", "60000"}, full},
		{"redislock-refresh", []string{"k", "l"}, []string{"tok", "60000"}, ttls},
		{"redislock-pttl", []string{"k", "l"}, []string{"tok"}, modelRead}, // a read: a majority's, by meaning
		{"redislock-release", []string{"k", "l"}, []string{"tok"}, alone},
		{"redislock094-obtain", []string{"k"}, []string{"tok", "3", "60000"}, full},
		{"redislock094-refresh", []string{"k"}, []string{"tok", "60000"}, ttls},
		{"redislock094-release", []string{"k"}, []string{"tok"}, alone},
		{"redlock4-acquire", []string{"k", "l"}, []string{"tok", "60000"}, full},
		{"redlock4-extend", []string{"k", "l"}, []string{"tok", "60000"}, model}, // SET … PX over two keys: not a lock's shape the classifier vouches for
		{"redlock5-extend", []string{"k"}, []string{"tok", "60000"}, ttls},       // over one key: checked on the model
		{"redlock4-release", []string{"k", "l"}, []string{"tok"}, alone},
		{"redlock5-acquire", []string{"k"}, []string{"tok", "60000"}, full},
		{"redlock5-release", []string{"k"}, []string{"tok"}, alone},
		{"redsync-touch-setnx", []string{"k"}, []string{"tok", "60000"}, full},
		{"redsync-touch", []string{"k"}, []string{"tok", "60000"}, ttls},
		{"redsync-release", []string{"k"}, []string{"tok"}, alone},
		{"", []string{"k"}, []string{"tok"}, alone}, // a release no library sends
	}
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	ctx := t.Context()
	// The horizon markers cover a day from the start: raising them when a
	// script leaves a longer TTL (marker.go) is not the script's traffic.
	if _, err := b.Set(ctx, 0, "horizon", []byte("x"), acq(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		src := `local v = redis.call('GET', KEYS[1]) if v and v == ARGV[1] then redis.call('UNLINK', KEYS[1]) return 'gone' end return nil`
		if c.file != "" {
			b, err := os.ReadFile("../tests/testdata/scripts/" + c.file + ".lua")
			if err != nil {
				t.Fatal(err)
			}
			src = string(b)
		}
		s := script(src)
		// The lock is held: acquire it through the proxy first (the
		// acquiring scripts run on free keys).
		free := strings.Contains(c.file, "obtain") || strings.Contains(c.file, "acquire") || strings.Contains(c.file, "setnx")
		for _, k := range c.keys {
			// A key an earlier case left held is freed first, so that
			// the acquire writes on every node (the settling below).
			if _, err := b.Del(ctx, 0, []string{k}); err != nil {
				t.Fatal(err)
			}
			if free {
				continue
			}
			if res, err := b.Set(ctx, 0, k, []byte("tok"), acq(time.Minute)); err != nil || !res.Written {
				t.Fatalf("%s: acquire %s: %v, %v", c.file, k, res, err)
			}
		}
		// Every node has run the set-up (a third node may answer after
		// the majority) before the monitors start counting.
		for _, n := range nodes {
			rc := redis.NewClient(&redis.Options{Addr: n.Addr})
			for _, k := range c.keys {
				if !testsrv.Settled(func() bool {
					v, err := rc.Get(ctx, k).Result()
					return (err == redis.Nil) == free && (free || v == "tok")
				}) {
					t.Fatalf("%s: node %s never settled on %s", c.file, n.Addr, k)
				}
			}
			rc.Close()
		}
		stops := make([]func(map[string]int64) map[string]int64, len(nodes))
		for i, n := range nodes {
			stops[i] = monitor(t, n)
		}
		if _, err := b.Eval(ctx, 0, s, c.keys, bytesOf(c.args), false); err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		// Each script is new to the connection: loaded ahead of its EVALSHA.
		want := map[string]int64{"script": 1, "evalsha": 1}
		switch c.want {
		case ttls:
			want["pttl"] = int64(len(c.keys))
		case full:
			want["mget"], want["pttl"] = 2, int64(len(c.keys))
		case model: // the read, the commit, the leases' release
			want = map[string]int64{"evalsha": 3}
		case modelRead: // the read, the leases' release
			want = map[string]int64{"evalsha": 2}
		}
		for i := range nodes {
			got := stops[i](want)
			delete(got, "hello") // the marker's client connecting
			delete(got, "client")
			if c.want >= model {
				delete(got, "script") // lockproxy's own, loaded on a connection's first use
			}
			if c.want == model && got["evalsha"] == 2 {
				// A node whose read came after the commit was sent gets
				// its write and its release in one call.
				got["evalsha"] = 3
			}
			for cmd, n := range got {
				if n != want[cmd] {
					t.Errorf("%s: node %d ran %s %d times; want %d (all: %v)", c.file, i, cmd, n, want[cmd], got)
				}
			}
			for cmd, n := range want {
				if got[cmd] != n {
					t.Errorf("%s: node %d ran %s %d times; want %d", c.file, i, cmd, got[cmd], n)
				}
			}
		}
		if _, err := b.Del(ctx, 0, c.keys); err != nil {
			t.Fatal(err)
		}
	}
}

func bytesOf(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// TestScriptAcquireValidity: a script's grant of a minute is the longest
// TTL granted, which a node restarting afterwards is quarantined for
// (the validity check itself: TestScriptValidity).
func TestScriptAcquireValidity(t *testing.T) {
	src, err := os.ReadFile("../tests/testdata/scripts/redlock5-acquire.lua")
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 3)
	b := newMonitored(t, addrsOf(nodes))
	ctx := t.Context()
	s := script(string(src))

	if v, err := b.Eval(ctx, 0, s, []string{"v:c"}, [][]byte{[]byte("mine"), []byte("60000")}, false); err != nil || v.Int != 1 {
		t.Fatalf("script acquire with a minute = %v, %v; want :1", v, err)
	}
	nodes[0].Restart() // after a script granted a one-minute lock
	waitQuarantined(t, b, nodes[0].Addr)
}

// TestLongScriptError: a script's error reply longer than a
// connection's read buffer (Redis sends it as one line) is the script's reply, not a
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

// TestScriptExtendQuarantine: an extend by script goes unwatched (no reads
// of its keys before and after), but the TTL it leaves still bounds the
// restart quarantine. The lock is taken on the nodes directly, so that
// the proxy has granted no TTL at all; after redsync's touch script
// extends it to two minutes through the proxy, a restarted node is kept
// out of votes (for that long: still after 300ms).
func TestScriptExtendQuarantine(t *testing.T) {
	src, err := os.ReadFile("../tests/testdata/scripts/redsync-touch.lua")
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, 3)
	b := newMonitored(t, addrsOf(nodes))
	ctx := t.Context()
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		err := c.Set(ctx, "x", "tok", time.Minute).Err()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	v, err := b.Eval(ctx, 0, script(string(src)), []string{"x"}, bytesOf([]string{"tok", "120000"}), false)
	if err != nil || v.Int != 1 {
		t.Fatalf("extend = %v, %v; want :1", v, err)
	}
	nodes[0].Restart()
	waitQuarantined(t, b, nodes[0].Addr)
	time.Sleep(300 * time.Millisecond) // not a synchronisation: the quarantine must outlast it
	if q := b.Quarantined(); len(q) != 1 {
		t.Errorf("quarantine ended within 300ms; the extend's two minutes were not noted (quarantined: %v)", q)
	}
}

// reentrantSrc is a reentrant acquire: it refreshes the key when it holds
// ARGV[1] already, and takes it when it is absent.
const reentrantSrc = `if redis.call("get",KEYS[1]) == ARGV[1] then redis.call("pexpire",KEYS[1],ARGV[2]) return 1 end if redis.call("set",KEYS[1],ARGV[1],"NX","PX",ARGV[2]) then return 1 end return 0`

// TestScriptAgreedKeepsAgreeingNodes: a node that gave the agreed reply
// keeps what the script did there. The reentrant acquire finds its own
// token on node 0 (refreshed, not created), creates the key on node 1 and
// finds another's on node 2: the nodes agree on 1, and the key must stay
// the caller's on nodes 0 and 1. Before, a key created on fewer than Q
// nodes was undone even where the node voted for the agreed 1: the client
// was told 1 while holding one node of three (found by review). And a key
// that held another client's token when it was read before the script,
// and the caller's after it, counts as created: the other's lock ended in
// between (released or expired), and the script took the key.
func TestScriptAgreedKeepsAgreeingNodes(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	direct := directClients(t, nodes)
	ctx := t.Context()
	s := script(reentrantSrc)
	args := [][]byte{[]byte("mine"), []byte("10000")}
	direct[0].Set(ctx, "k", "mine", 0)
	direct[2].Set(ctx, "k", "other", 0)
	v, err := b.Eval(ctx, 0, s, []string{"k"}, args, false)
	if err != nil || v.Int != 1 {
		t.Fatalf("reentrant acquire = %+v, %v; want 1", v, err)
	}
	for i, want := range []string{"mine", "mine", "other"} {
		if got, _ := direct[i].Get(ctx, "k").Result(); got != want {
			t.Errorf("node %d holds %q; want %q (the agreed 1 must leave the caller two nodes)", i, got, want)
		}
	}
}

// extendSrc is the owner-checked extend of every lock library.
const extendSrc = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`

// TestSplitReleaseIsNoTimeVote: nodes left apart by writes whose outcome
// was unknown (node 0 holds "1", node 1 "a", node 2 paused: as
// TestModelFaults found them, its third node quarantined after a restart)
// agree on nothing about the key's token. A release or an extend that
// finds its token on one of them and not on the other did something there
// and nothing here: its 1 and 0 are no "same reply a little later", and
// the answer is TRYAGAIN, never the 0 that tells the caller its token is
// not there. Before, the time vote settled 1 and 0 as 0: the releases of
// "a" and of "1" both answered 0, each deleting its token on one node.
func TestSplitReleaseIsNoTimeVote(t *testing.T) {
	nodes := startNodes(t, 3)
	direct := directClients(t, nodes)
	ctx := t.Context()
	b := newBackend(t, addrsOf(nodes))
	nodes[2].Stop()
	t.Cleanup(nodes[2].Cont)
	for _, c := range []struct {
		name, src string
		args      []string
	}{
		{"extend", extendSrc, []string{"60000"}},
		{"release", releaseSrc, nil},
	} {
		for _, tok := range []string{"a", "1"} {
			direct[0].Set(ctx, "k", "1", 0)
			direct[1].Set(ctx, "k", "a", 0)
			args := bytesOf(append([]string{tok}, c.args...))
			v, err := b.Eval(ctx, 0, script(c.src), []string{"k"}, args, false)
			if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
				t.Errorf("%s %q with node 0 holding \"1\", node 1 \"a\", node 2 paused = %+v, %v; want TRYAGAIN", c.name, tok, v, err)
			}
		}
	}
}
