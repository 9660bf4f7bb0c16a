package quorum_test

import (
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// markerKey and markerDB are where the horizon marker lives (marker.go).
const (
	markerKey = "lockproxy:quorum-horizon"
	markerDB  = backend.Databases - 1
)

func directClient(t *testing.T, addr string, db int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	t.Cleanup(func() { c.Close() })
	return c
}

func markerClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DB: markerDB})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHorizonSurvivesProxyRestart is issue 23's bug 4: a lock of 120s on
// all three nodes; lockproxy stops; two nodes are killed and come back
// empty; a new lockproxy must not grant the lock again while node 0 still
// holds it (before the marker, the new instance met two healthy-looking
// empty nodes, and they voted: two holders).
func TestHorizonSurvivesProxyRestart(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := t.Context()
	b1, err := quorum.New(quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := b1.Set(ctx, 0, "lock:long", []byte("held"), acq(120*time.Second)); err != nil || !res.Written {
		t.Fatalf("first SET NX PX 120000 = %+v, %v", res, err)
	}
	// The lock and the marker on all three nodes, as the issue has it.
	waitEveryNode(t, nodes, "lock:long", "held", "120000")
	b1.Close(ctx)
	nodes[1].Restart()
	nodes[2].Restart()

	b2 := newMonitored(t, addrsOf(nodes))
	for _, tok := range []string{"other", "again"} {
		res, err := b2.Set(ctx, 0, "lock:long", []byte(tok), acq(5*time.Second))
		if res.Written {
			t.Fatalf("SET NX PX 5000 after the restarts = OK while node 0 holds the lock: two holders")
		}
		var re *backend.ReplyError
		if !errors.As(err, &re) || !strings.HasPrefix(re.Reply, "TRYAGAIN") {
			t.Fatalf("SET NX PX 5000 after the restarts = %+v, %v; want TRYAGAIN", res, err)
		}
	}
	q := b2.Quarantined()
	slices.Sort(q)
	want := []string{nodes[1].Addr, nodes[2].Addr}
	slices.Sort(want)
	if !slices.Equal(q, want) {
		t.Errorf("quarantined %v; want %v", q, want)
	}
	// INFO says until when, about 120s from now.
	info := strings.Join(b2.InfoLines(), "\n")
	for _, i := range []int{1, 2} {
		line := infoLine(info, "lockproxy_quorum_node"+strconv.Itoa(i)+":")
		until, _ := strconv.ParseInt(infoValue(line, "quarantined_until_ms"), 10, 64)
		if left := time.Until(time.UnixMilli(until)); left < 100*time.Second || left > 121*time.Second {
			t.Errorf("node %d: quarantined_until_ms is %v from now; want about 120s (%s)", i, left, line)
		}
	}
	if !strings.Contains(info, "lockproxy_quorum_horizon_ms:120000") {
		t.Errorf("INFO lacks lockproxy_quorum_horizon_ms:120000:\n%s", info)
	}
}

// waitEveryNode waits until every node has key = token in database 0 and
// the marker's ttl_ms: a majority answered the write, and the others may
// be a moment behind (a Close right after the OK could drop their writes).
func waitEveryNode(t *testing.T, nodes []*testsrv.Redis, key, token, ttlMs string) {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range nodes {
		lock, marker := directClient(t, n.Addr, 0), markerClient(t, n.Addr)
		for lock.Get(ctx, key).Val() != token || marker.HGet(ctx, markerKey, "ttl_ms").Val() != ttlMs {
			if time.Now().After(deadline) {
				t.Fatalf("node %s: the lock or the marker never arrived", n.Addr)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestNodeFirstReachedLaterIsQuarantined: a node down when lockproxy
// starts, and back later with its data lost, is read before it votes.
func TestNodeFirstReachedLaterIsQuarantined(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := t.Context()
	b1, err := quorum.New(quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := b1.Set(ctx, 0, "res", []byte("held"), acq(time.Minute)); err != nil || !res.Written {
		t.Fatalf("first acquire = %+v, %v", res, err)
	}
	// Node 0 must be the one that kept the marker: wait until it has it.
	waitEveryNode(t, nodes, "res", "held", "60000")
	b1.Close(ctx)
	nodes[1].Restart() // lost its data while no lockproxy watched
	nodes[2].Kill()    // down when the next one starts
	// A long check interval: only a stream's first contact can vet node 2.
	b2 := newBackendCfg(t, quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout, CheckInterval: time.Hour})
	nodes[2].Restart() // back, empty
	for range 20 {
		res, err := b2.Set(ctx, 0, "res", []byte("other"), acq(time.Second))
		if res.Written {
			t.Fatal("acquired a lock node 0 holds: the two nodes that lost it voted")
		}
		if err == nil {
			t.Fatal("a refusal (nil) needs two nodes saying held; only node 0 holds it")
		}
	}
	waitQuarantinedN(t, b2, 2)
}

// waitQuarantinedN waits until n nodes are out of votes (read, and
// quarantined).
func waitQuarantinedN(t *testing.T, b *quorum.Backend, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info := strings.Join(b.InfoLines(), "\n")
		if strings.Contains(info, "lockproxy_quorum_nodes_quarantined:"+strconv.Itoa(n)) && !strings.Contains(info, "quarantined_until_ms=-1") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %d nodes quarantined within 10s:\n%s", n, info)
		}
		time.Sleep(10 * time.Millisecond) // polling the background read
	}
}

// TestNewClusterNotQuarantined: fresh nodes are a new cluster: nobody is
// kept out, and each node gets the marker (left out of DBSIZE and the held
// lock count). A second instance started while the cluster is younger than
// its longest TTL keeps every node voting too: the markers were created by
// the nodes' running processes, which forgot nothing.
func TestNewClusterNotQuarantined(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := t.Context()
	b := newBackend(t, addrsOf(nodes))
	if q := b.Quarantined(); len(q) != 0 {
		t.Fatalf("a new cluster has quarantined nodes: %v", q)
	}
	if res, err := b.Set(ctx, 0, "k", []byte("A"), acq(time.Minute)); err != nil || !res.Written {
		t.Fatalf("acquire = %+v, %v", res, err)
	}
	// Before the OK, the marker covers the TTL on a majority (the rule:
	// coverTTL); the third node's raise may still be on its way.
	covered := func() (n int) {
		for _, node := range nodes {
			if ttl, err := markerClient(t, node.Addr).HGet(ctx, markerKey, "ttl_ms").Int64(); err == nil && ttl >= 60000 {
				n++
			}
		}
		return n
	}
	if n := covered(); n < 2 {
		t.Errorf("the marker covers the acquire's TTL on %d nodes at its OK; want a majority", n)
	}
	for deadline := time.Now().Add(10 * time.Second); covered() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the marker never reached the third node")
		}
	}
	if n, err := b.DBSize(ctx, markerDB); n != 0 || err != nil {
		t.Errorf("DBSIZE of db %d = %d, %v; want 0: the marker is no client's key", markerDB, n, err)
	}
	b2 := newMonitored(t, addrsOf(nodes))
	if q := b2.Quarantined(); len(q) != 0 {
		t.Fatalf("a second instance on a young cluster quarantined %v", q)
	}
	if res, err := b2.Set(ctx, 0, "k2", []byte("B"), acq(time.Minute)); err != nil || !res.Written {
		t.Fatalf("second instance's acquire = %+v, %v", res, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for held := b2.HeldLocks(); held != 2; held = b2.HeldLocks() {
		if time.Now().After(deadline) {
			t.Fatalf("HeldLocks = %d; want 2 (the marker is no lock)", held)
		}
		time.Sleep(10 * time.Millisecond) // polling the monitor's count
	}
}

// TestUptimeBelowHorizonQuarantined: a node whose marker did not come from
// its running process (here: written as if restored from its disk) and
// whose uptime is below the horizon may have lost its last writes: out of
// votes until its uptime reaches the horizon (2s here), unless it
// persists every write.
func TestUptimeBelowHorizonQuarantined(t *testing.T) {
	nodes := []*testsrv.Redis{testsrv.StartRedis(t), testsrv.StartRedis(t), testsrv.StartRedis(t),
		testsrv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")}
	ctx := t.Context()
	const horizon = 2000
	for i, n := range nodes {
		c := markerClient(t, n.Addr)
		run := c.Info(ctx, "server").Val()
		run = run[strings.Index(run, "run_id:")+len("run_id:"):]
		run = strings.TrimSpace(run[:strings.Index(run, "\n")])
		if i == 0 || i == 3 {
			run = "restored-from-disk"
		}
		if err := c.HSet(ctx, markerKey, "ttl_ms", horizon, "run_id", run, "clean_ms", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := newMonitored(t, addrsOf(nodes))
	if q := b.Quarantined(); len(q) != 1 || q[0] != nodes[0].Addr {
		t.Fatalf("quarantined %v; want only %s (restored marker, young, no appendfsync always)", q, nodes[0].Addr)
	}
	direct := redis.NewClient(&redis.Options{Addr: nodes[0].Addr})
	defer direct.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(b.Quarantined()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the node was still quarantined 10s later")
		}
		time.Sleep(10 * time.Millisecond) // polling for the quarantine's end
	}
	up, _ := strconv.Atoi(infoValue(infoLine(direct.Info(ctx, "server").Val(), "uptime_in_seconds:"), ""))
	if up < horizon/1000 {
		t.Errorf("the quarantine ended at an uptime of %ds; want %ds or more", up, horizon/1000)
	}
}

// TestSameRedisTwiceRefused: two addresses that reach one Redis (a port
// forward) would let it cast two votes: New refuses, naming both.
func TestSameRedisTwiceRefused(t *testing.T) {
	nodes := startNodes(t, 2)
	fwd := forward(t, nodes[0].Addr, func(c, u net.Conn) {
		go func() { io.Copy(u, c); u.Close() }()
		go func() { io.Copy(c, u); c.Close() }()
	})
	_, err := quorum.New(quorum.Config{Nodes: []string{nodes[0].Addr, nodes[1].Addr, fwd}, NodeTimeout: testTimeout})
	if err == nil || !strings.Contains(err.Error(), nodes[0].Addr) || !strings.Contains(err.Error(), fwd) || !strings.Contains(err.Error(), "run_id") {
		t.Fatalf("New with one Redis twice = %v; want an error naming %s and %s", err, nodes[0].Addr, fwd)
	}
}

func TestNodeListValidated(t *testing.T) {
	for _, nodes := range [][]string{
		{"127.0.0.1:70003", "127.0.0.1:6379", "127.0.0.1:6380"},
		{"127.0.0.1:0", "127.0.0.1:6379", "127.0.0.1:6380"},
		{"a:1", "a:1", "b:1"},
		{"A:1", "a:01", "b:1"},
		{"redis://u:p@127.0.0.1:7000/2", "127.0.0.1:7000", "b:1"},
		{"[::1]:7000", "[0:0::1]:7000", "b:1"},
	} {
		if _, err := quorum.New(quorum.Config{Nodes: nodes}); err == nil {
			t.Errorf("New(%q) = nil error", nodes)
		} else if strings.Contains(err.Error(), ":p@") {
			t.Errorf("New(%q) = %v: the password is shown", nodes, err)
		}
	}
	for in, want := range map[string]string{
		"LocalHost:06379":         "localhost:6379",
		"redis://h:7000":          "h:7000",
		"redis://h":               "h:6379",
		"rediss://u:p@[::1]:7000": "[::1]:7000",
		"unix:///tmp/r.sock":      "unix:/tmp/r.sock",
	} {
		if got, err := quorum.NodeAddr(in); got != want || err != nil {
			t.Errorf("NodeAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// infoLine returns the line of info that starts with prefix.
func infoLine(info, prefix string) string {
	for _, l := range strings.Split(info, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// infoValue returns field's value in an INFO line of k=v pairs, or with
// field "" what follows the line's first colon.
func infoValue(line, field string) string {
	_, rest, _ := strings.Cut(line, ":")
	if field == "" {
		return rest
	}
	for _, kv := range strings.Split(rest, ",") {
		if v, ok := strings.CutPrefix(kv, field+"="); ok {
			return v
		}
	}
	return ""
}

// TestMarkerFirstWriteMissed is issue 43's item 3: on a new cluster the
// first marker write to a node can time out on a loaded machine; the node,
// whose process was there and empty at the cluster's birth, then lacks the
// marker the others have. It forgot nothing: it keeps its vote and gets the
// marker again. The same node losing the marker after it showed it (a
// FLUSHALL on it) is still kept out.
func TestMarkerFirstWriteMissed(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := t.Context()
	b := newBackendCfg(t, quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout, CheckInterval: time.Hour})
	mc := markerClient(t, nodes[2].Addr)
	if err := mc.Del(ctx, markerKey).Err(); err != nil { // the write that did not reach it
		t.Fatal(err)
	}
	// Locks granted meanwhile make the horizon a minute.
	if res, err := b.Set(ctx, 0, "k", []byte("A"), acq(time.Minute)); err != nil || !res.Written {
		t.Fatalf("acquire = %+v, %v", res, err)
	}
	b.CheckAll()
	if q := b.Quarantined(); len(q) != 0 {
		t.Fatalf("a node whose first marker write was missed is kept out: %v", q)
	}
	if n, err := mc.Exists(ctx, markerKey).Result(); err != nil || n != 1 {
		t.Fatalf("the marker was not written again: exists = %d, %v", n, err)
	}
	b.CheckAll() // the monitor's next round reads it with the marker
	// Now it has shown the marker: losing it is losing its data.
	if err := mc.Del(ctx, markerKey).Err(); err != nil {
		t.Fatal(err)
	}
	b.CheckAll()
	if q := b.Quarantined(); !slices.Equal(q, []string{nodes[2].Addr}) {
		t.Fatalf("quarantined %v after the node lost the marker it had shown; want %s", q, nodes[2].Addr)
	}
}

// TestMaxTTL: with quorum-max-ttl set, a write with a longer TTL is
// refused and leaves nothing on the nodes, by every path (the blocking
// acquire, the event loop's, a lock script the nodes run, an expiry on
// the model), and one within it is granted.
func TestMaxTTL(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := t.Context()
	b := newBackendCfg(t, quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout, MaxTTL: 10 * time.Second})
	over := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "longer than quorum-max-ttl (10000ms)") {
			t.Errorf("%s: err = %v; want the quorum-max-ttl refusal", what, err)
		}
	}
	absent := func(key string) { // on every node, once the late replies are in
		t.Helper()
		var on []string
		if !testsrv.Settled(func() bool {
			on = on[:0]
			for _, n := range nodes {
				if v, err := directClient(t, n.Addr, 0).Exists(ctx, key).Result(); err != nil || v != 0 {
					on = append(on, n.Addr)
				}
			}
			return len(on) == 0
		}) {
			t.Errorf("%s is left on %v; want it on no node", key, on)
		}
	}
	_, err := b.Set(ctx, 0, "blocking", []byte("A"), acq(time.Minute))
	over("blocking SET NX PX 60000", err)
	absent("blocking")
	_, err = b.Eval(ctx, 0, script(reentrantSrc), []string{"script"}, [][]byte{[]byte("A"), []byte("60000")}, false)
	over("acquire script", err)
	absent("script")
	if res, err := b.Set(ctx, 0, "ok", []byte("A"), acq(5*time.Second)); err != nil || !res.Written {
		t.Fatalf("SET NX PX 5000 = %+v, %v; want granted", res, err)
	}
	_, err = b.Do(ctx, 0, []string{"h"}, [][]byte{[]byte("hincrby"), []byte("h"), []byte("f"), []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Eval(ctx, 0, script(`return redis.call('pexpire', KEYS[1], ARGV[1])`), []string{"h"}, [][]byte{[]byte("60000")}, false)
	over("PEXPIRE on the model", err)
	for _, n := range nodes {
		if ttl, err := directClient(t, n.Addr, 0).PTTL(ctx, "h").Result(); err != nil || ttl != -1 {
			t.Errorf("node %s: PTTL h = %v, %v; want none", n.Addr, ttl, err)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: testsrv.StartLockproxy(t, proxy.Config{BackendName: "quorum"}, b), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	over("SET NX PX 60000 through lockproxy", c.SetArgs(ctx, "loop", "A", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err())
	absent("loop")
}
