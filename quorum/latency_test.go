package quorum_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/quorum"
)

// slowConn delays every byte read from one node by delay: one-way network
// latency injected through Config.Dialer, the way a fault proxy would. (A
// delay before each Read would not do: a reader already blocked in Read
// when the reply arrives would get it at once.)
type slowConn struct {
	net.Conn
	delay time.Duration
	in    chan chunk
	buf   []byte
	err   error
}

type chunk struct {
	data []byte
	at   time.Time
	err  error
}

func newSlowConn(c net.Conn, delay time.Duration) *slowConn {
	s := &slowConn{Conn: c, delay: delay, in: make(chan chunk, 1024)}
	go func() {
		for {
			b := make([]byte, 32<<10)
			n, err := c.Read(b)
			s.in <- chunk{data: b[:n], at: time.Now().Add(delay), err: err}
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (c *slowConn) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		ch := <-c.in
		time.Sleep(time.Until(ch.at)) // injected latency, not synchronisation
		c.buf, c.err = ch.data, ch.err
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// TestSlowNodeBeyondValidity: two nodes answer 150ms late, the TTL is
// 100ms. The majority needs one of them, so the acquire took longer than
// the lock can be valid: it must be refused and undone on every node, the
// slow ones included. (One slow node alone costs nothing: the two fast ones
// decide.)
func TestSlowNodeBeyondValidity(t *testing.T) {
	nodes := startNodes(t, 3)
	slow := map[string]bool{nodes[1].Addr: true, nodes[2].Addr: true}
	var d net.Dialer
	b, err := quorum.New(quorum.Config{
		Nodes:       addrsOf(nodes),
		NodeTimeout: time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil && slow[addr] {
				c = newSlowConn(c, 150*time.Millisecond)
			}
			return c, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	res, err := b.Set(t.Context(), 0, "lat", []byte("mine"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: 100 * time.Millisecond}})
	var re *backend.ReplyError
	if res.Written || !errors.As(err, &re) || !strings.HasPrefix(re.Reply, "TRYAGAIN quorum reached too late") {
		t.Fatalf("an acquire that took longer than its TTL = %v, %v; want TRYAGAIN", res, err)
	}
	for i, nd := range nodes {
		c := redis.NewClient(&redis.Options{Addr: nd.Addr})
		// The slowest write may come after the answer: its undo follows it.
		if !testsrv.Settled(func() bool { v, _ := c.Get(t.Context(), "lat").Result(); return v != "mine" }) {
			t.Errorf("node %d kept the refused acquisition", i)
		}
		c.Close()
	}
	// With a TTL well above the latency the same nodes grant the lock.
	res, err = b.Set(t.Context(), 0, "lat2", []byte("mine"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: 10 * time.Second}})
	if err != nil || !res.Written {
		t.Fatalf("acquire with a 10s TTL over a slow node = %v, %v", res, err)
	}
}
