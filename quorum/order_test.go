package quorum_test

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/quorum"
)

// gate forwards connections to a node; hold keeps what the proxy sends on
// some of them from the node (kept in order, replies pass), as a node
// that has not read those sockets yet would; open delivers it and lets
// the rest through.
type gate struct {
	addr  string
	mu    sync.Mutex
	conns []*gatedConn
}

type gatedConn struct {
	mu      sync.Mutex
	held    bool
	buf     []byte
	up      net.Conn
	replied atomic.Int64 // bytes the node sent back: it read what came before
}

func startGate(t *testing.T, target string) *gate {
	g := &gate{}
	g.addr = forward(t, target, func(c, u net.Conn) {
		gc := &gatedConn{up: u}
		g.mu.Lock()
		g.conns = append(g.conns, gc)
		g.mu.Unlock()
		go func() { // proxy → node, held or not
			defer u.Close()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				gc.mu.Lock()
				if gc.held {
					gc.buf = append(gc.buf, buf[:n]...)
				} else if n > 0 {
					u.Write(buf[:n])
				}
				gc.mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		go func() { // node → proxy
			defer c.Close()
			defer u.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 {
					c.Write(buf[:n])
					gc.replied.Add(int64(n))
				}
				if err != nil {
					return
				}
			}
		}()
	})
	return g
}

func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

// holding reports whether a held connection from..to-1 keeps back bytes
// containing s.
func (g *gate) holding(from, to int, s string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gc := range g.conns[from:to] {
		gc.mu.Lock()
		found := gc.held && strings.Contains(string(gc.buf), s)
		gc.mu.Unlock()
		if found {
			return true
		}
	}
	return false
}

// replied is how many bytes the node sent back on connections from..to-1.
func (g *gate) replied(from, to int) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n int64
	for _, gc := range g.conns[from:to] {
		n += gc.replied.Load()
	}
	return n
}

// set holds (or opens) the connections from..to-1 (to < 0: every one).
func (g *gate) set(from, to int, held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if to < 0 {
		to = len(g.conns)
	}
	for _, gc := range g.conns[from:to] {
		gc.mu.Lock()
		gc.held = held
		if !held && len(gc.buf) > 0 {
			gc.up.Write(gc.buf)
			gc.buf = nil
		}
		gc.mu.Unlock()
	}
}

// A node runs its connections' commands in the order it reads them, so a
// write sent on one loop's connection can run before an earlier one still
// waiting on another loop's: a state nobody was told of, on which that
// node and a lagging one can agree. Here node 2 has not yet read loop A's
// refused `SET k 1 NX`, nor node 0 loop B's release: before order.go, node
// 2 ran the release (on loop B's connection) before the refused acquire,
// which then wrote "1" there, and `SET k 1 XX` got OK from node 2 and from
// node 0 (which still had "a") after the release was told 1: the key was
// free, XX must not write it.
func TestLateWritesAreNotVotes(t *testing.T) {
	nodes := startNodes(t, 3)
	g0, g2 := startGate(t, nodes[0].Addr), startGate(t, nodes[2].Addr)
	b, err := quorum.New(quorum.Config{Nodes: []string{g0.addr, nodes[1].Addr, g2.addr}, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	own := g2.count() // the Backend's own loops' connections: the blocking path's
	ctx := t.Context()
	_, cA, cB, onA := twoLoops(t, b, g2.count)
	if g0.count() <= onA || onA <= own {
		t.Fatalf("connections to a node: %d own, then %d with loop A, %d with loop B: want more each time", own, onA, g0.count())
	}
	cB.Eval(ctx, releaseSrc, []string{"warm"}, "x") // classified: it runs on loop B from now on
	for _, d := range directClients(t, nodes) {
		d.Set(ctx, "k", "a", 30*time.Second)
	}

	g2.set(0, onA, true) // node 2 reads neither the own loops' nor loop A's connection
	if ok, err := cA.SetNX(ctx, "k", "1", 30*time.Second).Result(); ok || err != nil {
		t.Fatalf("SET k 1 NX on a key held by a = %v, %v; want nil (nodes 0 and 1 refuse)", ok, err)
	}
	g0.set(onA, -1, true) // node 0 does not read loop B's
	rel, relErr := cB.Eval(ctx, releaseSrc, []string{"k"}, "a").Result()
	t.Logf("release of a: %v, %v", rel, relErr)

	xx := make(chan error, 1)
	go func() { xx <- cA.Do(ctx, "set", "k", "1", "xx", "px", "30000").Err() }() // the blocking path: the own loops' connections
	wait.For(t, "the XX held back from node 2", func() bool { return g2.holding(0, own, "xx") })
	before := g2.replied(own, onA)
	g2.set(own, onA, false) // node 2 reads loop A's refused acquire
	wait.For(t, "node 2's reply to loop A's refused acquire", func() bool { return g2.replied(own, onA) > before })
	g2.set(0, own, false) // and then the XX
	xxErr := <-xx
	g0.set(0, -1, false)
	t.Logf("SET k 1 XX: %v", xxErr)
	if rel == int64(1) && relErr == nil && xxErr == nil {
		t.Fatal("the release of a was told 1, then SET k 1 XX answered OK: XX wrote a free key")
	}
}

// rwSrc is a reader-writer lock's step on two keys, as Redisson's
// RReadWriteLock keeps them: the mode in a hash, the holder beside it.
const rwSrc = `local m = redis.call("hget", KEYS[1], "mode")
if m == false then
  redis.call("hset", KEYS[1], "mode", ARGV[1])
  redis.call("set", KEYS[2], ARGV[1], "px", 30000)
  redis.call("pexpire", KEYS[1], 30000)
  return 1
end
if m == "write" then
  redis.call("hset", KEYS[1], "mode", "read")
  redis.call("set", KEYS[2], ARGV[1], "px", 30000)
  return 2
end
return 0`

// A write of several keys waits its turn on a node as a write of one key
// does. Node 2 has not read loop A's script (mode write) when loop B's
// (write → read) comes: before order.go queued writes of several
// stripes, node 2 was left out of B's and ran only A's once it read it,
// a state of its own; with another node a step behind in the other
// direction, no two of three agreed on the lock's state (the flake of
// Redisson's reader-writer scripts in TestDifferentialQuorum).
func TestSeveralKeysWaitTheirTurn(t *testing.T) {
	nodes := startNodes(t, 3)
	g2 := startGate(t, nodes[2].Addr)
	b, err := quorum.New(quorum.Config{Nodes: []string{nodes[0].Addr, nodes[1].Addr, g2.addr}, NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	own := g2.count()
	_, cA, cB, onA := twoLoops(t, b, g2.count)
	keys := []string{"rw", "rw:holder"}
	if quorum.Stripe(keys[0]) == quorum.Stripe(keys[1]) {
		t.Fatal("the two keys share a stripe: pick others")
	}
	for _, c := range []*redis.Client{cA, cB} { // classified: they run on their loops from now on
		if err := c.Eval(ctx, rwSrc, []string{"warm", "warm:holder"}, "write").Err(); err != nil {
			t.Fatal(err)
		}
	}

	g2.set(own, onA, true) // node 2 does not read loop A's connection
	if v, err := cA.Eval(ctx, rwSrc, keys, "write").Result(); v != int64(1) || err != nil {
		t.Fatalf("A's step = %v, %v; want 1 (nodes 0 and 1)", v, err)
	}
	if v, err := cB.Eval(ctx, rwSrc, keys, "r1").Result(); v != int64(2) || err != nil {
		t.Fatalf("B's step = %v, %v; want 2 (nodes 0 and 1)", v, err)
	}
	g2.set(own, onA, false)

	want := fmt.Sprint(map[string]string{"mode": "read"}, " r1")
	direct := directClients(t, nodes)
	wait.Until(t, fmt.Sprintf("%q on each node, no repair pending (every node runs both steps, in order)", want), func() (bool, any) {
		var got []string
		for _, d := range direct {
			h, _ := d.HGetAll(ctx, keys[0]).Result()
			v, _ := d.Get(ctx, keys[1]).Result()
			got = append(got, fmt.Sprint(h, " ", v))
		}
		return got[0] == want && got[1] == want && got[2] == want && b.RepairsPending() == 0, got
	})
}
