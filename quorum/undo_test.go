package quorum_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// freezer forwards connections to a node; freeze stops forwarding on the
// connections made so far (both ways, for good), as a connection stuck in
// a network would, while later connections pass.
type freezer struct {
	addr  string
	mu    sync.Mutex
	conns []*atomic.Bool
}

// forward listens on a loopback port and, for each connection accepted,
// dials target and hands both to handle (on the accepting goroutine: it
// starts its own). It returns the address to dial.
func forward(t *testing.T, target string, handle func(c, u net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			handle(c, u)
		}
	}()
	return ln.Addr().String()
}

// twoLoops serves b on two event loops of the front end and returns a
// maker of clients (one connection each) and clients A and B on different
// loops — gnet hands connections to its loops in turn, and each loop has
// its own connection to every node — with what count (connections made to
// a watched node) said once A was ready.
func twoLoops(t *testing.T, b *quorum.Backend, count func() int) (client func() *redis.Client, cA, cB *redis.Client, onA int) {
	t.Helper()
	addr := testsrv.StartLockproxy(t, proxy.Config{DataPath: proxy.DataPathLoops, Loops: 2, BackendName: "quorum"}, b)
	client = func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, Protocol: 2, PoolSize: 1})
		t.Cleanup(func() { c.Close() })
		return c
	}
	cA = client()
	waitLoopReady(t, cA, b)
	onA = count()
	cB = client()
	waitLoopReady(t, cB, b)
	return client, cA, cB, onA
}

func startFreezer(t *testing.T, target string) *freezer {
	f := &freezer{}
	f.addr = forward(t, target, func(c, u net.Conn) {
		frozen := &atomic.Bool{}
		f.mu.Lock()
		f.conns = append(f.conns, frozen)
		f.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer dst.Close()
			defer src.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 && !frozen.Load() {
					dst.Write(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}
		go pipe(u, c)
		go pipe(c, u)
	})
	return f
}

func (f *freezer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

func (f *freezer) freeze(first int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns[:first] {
		c.Store(true)
	}
}

// An undo that waits on one connection to a node (here loop A's, stuck)
// must not delete the same token's later acquire that reached the node on
// another connection (loop B's): clients retry with the same token. Loop B
// may not write that key to that node while the undo is unanswered
// (order.go), so the retry's OK rests on the other nodes, and no third
// client gets the lock while the retry holds it (before, the undo ran when
// loop A's connection came back and client C got OK).
func TestStaleUndoAcrossLoops(t *testing.T) {
	nodes := startNodes(t, 3)
	fz := startFreezer(t, nodes[1].Addr)
	b, err := quorum.New(quorum.Config{Nodes: []string{nodes[0].Addr, fz.addr, nodes[2].Addr}, NodeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	direct := directClients(t, nodes)
	client, cA, cB, onA := twoLoops(t, b, fz.count)
	if fz.count() <= onA {
		t.Fatalf("client B's loop made no connection of its own to node 1 (%d, then %d)", onA, fz.count())
	}
	fz.freeze(onA) // loop A's connection (and quorum's own loop's) to node 1 stop

	direct[2].Set(ctx, "k", "X", 30*time.Second) // X holds k on node 2 only
	if ok, err := cA.SetNX(ctx, "k", "T", 10*time.Second).Result(); ok {
		t.Fatalf("A's acquire = OK with one node frozen and one held (%v)", err)
	}
	start := time.Now()
	ok, err := cB.SetNX(ctx, "k", "T", 10*time.Second).Result()
	if !ok {
		// Node 1's write was held back and node 2 is X's: no majority.
		// That is the safe answer; the rest checks nothing can go wrong.
		t.Logf("retry with the same token via loop B: %v, %v", ok, err)
	}
	time.Sleep(2 * time.Second) // loop A's stuck connection is overdue, reconnects and sends its undo again
	direct[2].Del(ctx, "k")     // X releases
	okC, errC := client().SetNX(ctx, "k", "C", 10*time.Second).Result()
	if ok && okC && time.Since(start) < 9*time.Second {
		t.Fatalf("two holders: T (OK via loop B, 10s TTL) and C (%v)", errC)
	}
}
