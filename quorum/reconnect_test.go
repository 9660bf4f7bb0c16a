package quorum_test

import (
	"bytes"
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestRestartedNodeQuarantinedBeforeItVotes: X holds a lock on nodes 0
// and 1; node 0 restarts empty. Its connection reconnects at once, long before
// the monitor's next check (5s): the new connection itself must
// quarantine it, or Y wins nodes 0 and 2 while X holds the lock.
func TestRestartedNodeQuarantinedBeforeItVotes(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes)) // CheckInterval 5s
	ctx := t.Context()
	if r, err := b.Set(ctx, 0, "k", []byte("X"), acq(30*time.Second)); err != nil || !r.Written {
		t.Fatalf("X: %v %v", r, err)
	}
	c2 := redis.NewClient(&redis.Options{Addr: nodes[2].Addr})
	defer c2.Close()
	c2.Del(ctx, "k")   // node 2 never got X's key (it missed the SET): X holds on nodes 0,1
	nodes[0].Restart() // no persistence: forgets X's key
	// Y tries from the restart until node 0 is seen quarantined, and once
	// more after: before the monitor's check, only the new connection
	// quarantines it, and until then Y wins nodes 0 and 2.
	tryY := func() {
		r, err := b.Set(ctx, 0, "k", []byte("Y"), acq(30*time.Second))
		if err == nil && r.Written {
			t.Fatalf("Y acquired %q while X still holds it (restarted node voted before quarantine)", "k")
		}
	}
	wait.Until(t, "node 0 quarantined after its restart", func() (bool, any) {
		tryY()
		q := b.Quarantined()
		return slices.Contains(q, nodes[0].Addr), q
	})
	tryY()
}

type blockConn struct {
	net.Conn
	d *blockDialer
}

type blockDialer struct {
	armed   atomic.Bool
	blocked chan struct{}
	release chan struct{}
}

func (c *blockConn) SetDeadline(t time.Time) error {
	if t.IsZero() && c.d.armed.CompareAndSwap(true, false) {
		close(c.d.blocked)
		<-c.d.release
	}
	return c.Conn.SetDeadline(t)
}

// TestCloseWhileConnecting: Close runs while a loop's connection is
// between its setup and being stored where Close can reach it; Close must
// still return (the connection is closed by its set-up).
func TestCloseWhileConnecting(t *testing.T) {
	nodes := startNodes(t, 1)
	d := &blockDialer{blocked: make(chan struct{}), release: make(chan struct{})}
	b, err := quorum.New(quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout,
		Dialer: wrapDialer(func(c net.Conn, _ string) net.Conn { return &blockConn{Conn: c, d: d} })})
	if err != nil {
		t.Fatal(err) // not newBackendCfg: this test closes b itself, and must see Close return
	}
	d.armed.Store(true)
	go b.Set(context.Background(), 1, "k", []byte("t"), acq(time.Second)) // starts db 1's connections
	<-d.blocked
	closed := make(chan struct{})
	go func() { b.Close(context.Background()); close(closed) }()
	// No event says Close reached its wait for the loops; the pause gives
	// it the time to (releasing earlier only makes the test pass more
	// easily, never fail wrongly).
	time.Sleep(300 * time.Millisecond)
	close(d.release)
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("Backend.Close hangs: the new connection was never closed")
	}
}

type breakConn struct {
	net.Conn
	armed *atomic.Bool
}

var delIfEval = []byte("$4\r\neval\r\n$") // EVAL of the proxy's delete script (undo retry)

func (c *breakConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, delIfEval) && bytes.Contains(p, []byte("redis.call('del'")) && c.armed.CompareAndSwap(true, false) {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// TestUndoRetryKeepsItsRedo: an undo answered NOSCRIPT (the node's script
// cache was flushed) goes again by EVAL; when that connection breaks, the
// undo is still sent again on the next connection, so the node does not
// keep a partial acquisition.
func TestUndoRetryKeepsItsRedo(t *testing.T) {
	nodes := startNodes(t, 3)
	var armed atomic.Bool
	b := newBackendCfg(t, quorum.Config{Nodes: addrsOf(nodes), NodeTimeout: testTimeout,
		Dialer: wrapDialer(func(c net.Conn, addr string) net.Conn {
			if addr == nodes[0].Addr {
				return &breakConn{Conn: c, armed: &armed}
			}
			return c
		})})
	ctx := t.Context()
	var direct []*redis.Client
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		defer c.Close()
		direct = append(direct, c)
	}
	direct[1].Set(ctx, "k", "other", time.Minute)
	direct[2].Set(ctx, "k", "other", time.Minute)
	direct[0].ScriptFlush(ctx) // node 0 forgot the proxy's scripts
	armed.Store(true)
	r, err := b.Set(ctx, 0, "k", []byte("mine"), acq(time.Minute))
	if err != nil || r.Written {
		t.Fatalf("acquire: %v %v; want nil", r, err)
	}
	// The connection reconnects and sends its redo list: node 0 lets go.
	wait.For(t, "node 0 to let go of the undone acquisition (the undo's EVAL retry must carry its undo record)",
		func() bool {
			v, err := direct[0].Get(ctx, "k").Result()
			return err == redis.Nil || err == nil && v != "mine"
		})
}

// TestRefusalLeavesQuarantinedNodeAlone: a node quarantined after a
// restart holds the key with the acquirer's own value, put there by
// someone else (values are not always unique); the acquire is refused by
// the other two and sends the quarantined node nothing, so its key stays:
// an undo goes only where this acquire wrote (setOutcome's own test covers
// a write that landed just before the quarantine began).
func TestRefusalLeavesQuarantinedNodeAlone(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newMonitored(t, addrsOf(nodes))
	ctx := t.Context()
	if r, err := b.Set(ctx, 0, "granted", []byte("X"), acq(time.Minute)); err != nil || !r.Written {
		t.Fatalf("acquire: %v %v", r, err)
	}
	nodes[0].Restart()
	waitQuarantined(t, b, nodes[0].Addr)
	var direct []*redis.Client
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		defer c.Close()
		direct = append(direct, c)
	}
	direct[0].Set(ctx, "k", "mine", time.Minute)
	direct[1].Set(ctx, "k", "other", time.Minute)
	direct[2].Set(ctx, "k", "other", time.Minute)
	if r, err := b.Set(ctx, 0, "k", []byte("mine"), acq(time.Minute)); err != nil || r.Written {
		t.Fatalf("acquire of a key two nodes hold = %v, %v; want nil", r, err)
	}
	if v, _ := direct[0].Get(ctx, "k").Result(); v != "mine" {
		t.Fatalf("the quarantined node's key = %q; want it kept (\"mine\"): the refused acquire never wrote there", v)
	}
}
