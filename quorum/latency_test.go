package quorum_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/proxy/backend"
	"github.com/lockproxy/lockproxy/quorum"
)

// slowConn delays every read from one node: network latency injected
// through Config.Dialer, the way a fault proxy would.
type slowConn struct {
	net.Conn
	delay time.Duration
}

func (c *slowConn) Read(p []byte) (int, error) {
	time.Sleep(c.delay) // injected latency, not synchronisation
	return c.Conn.Read(p)
}

// TestSlowNodeBeyondValidity: one node answers 150ms late, the TTL is 100ms.
// The two fast nodes would make a majority, but the acquire took longer than
// the lock can be valid: it must be refused and undone on every node, the
// slow one included.
func TestSlowNodeBeyondValidity(t *testing.T) {
	nodes := startNodes(t, 3)
	slow := nodes[2].Addr
	var d net.Dialer
	b, err := quorum.New(quorum.Config{
		Nodes:       addrsOf(nodes),
		NodeTimeout: time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil && addr == slow {
				c = &slowConn{Conn: c, delay: 150 * time.Millisecond}
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
		if v, _ := c.Get(t.Context(), "lat").Result(); v == "mine" {
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
