package faults

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy is a TCP proxy in front of one quorum node, for the
// availability tests: lockproxy is given its address instead of the node's,
// and the test slows the node's traffic down, black-holes it or refuses
// connections, without touching the node itself. It passes everything
// through until told otherwise. Its methods are safe for concurrent use.
type faultProxy struct {
	Addr   string // where lockproxy connects
	target string // the node

	ln        net.Listener
	delivered atomic.Int64 // bytes written to lockproxy (node → lockproxy)

	mu      sync.Mutex
	delay   time.Duration // added to every chunk, each direction
	hole    bool          // drop every chunk, each direction
	refused bool          // listener closed: connections are refused
	conns   map[*proxyConn]struct{}
}

// proxyConn is one proxied connection: lockproxy's side and the node's.
type proxyConn struct {
	client, node net.Conn
	once         sync.Once
}

func (pc *proxyConn) close() {
	pc.once.Do(func() {
		pc.client.Close()
		pc.node.Close()
	})
}

// startFaultProxy listens on a free loopback port and proxies to target
// until the test ends.
func startFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	p := &faultProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*proxyConn]struct{}{}}
	var wg sync.WaitGroup
	wg.Go(func() { p.accept(&wg) })
	t.Cleanup(func() {
		p.refuse()
		wg.Wait()
	})
	return p
}

func (p *faultProxy) accept(wg *sync.WaitGroup) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed by refuse
		}
		n, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			c.Close() // the node is down: lockproxy sees its connection end
			continue
		}
		pc := &proxyConn{client: c, node: n}
		p.mu.Lock()
		if p.refused {
			p.mu.Unlock()
			pc.close()
			return
		}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		wg.Go(func() { p.pipe(pc, c, n, nil) })
		wg.Go(func() { p.pipe(pc, n, c, &p.delivered) })
	}
}

// chunk is what one read returned, due for writing at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst through a queue, so that a delay holds each
// chunk back by the delay in force when it was read without limiting the
// throughput (a slow link, not a slow node); in a black hole chunks are
// dropped. counted, when set, adds up the bytes written.
func (p *faultProxy) pipe(pc *proxyConn, src, dst net.Conn, counted *atomic.Int64) {
	defer func() {
		pc.close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()
	q := make(chan chunk, 4096)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer pc.close()
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d) // the injected latency itself, not a synchronisation
			}
			if _, err := dst.Write(c.data); err != nil {
				pc.close() // ends the reader, which closes q
				for range q {
				}
				return
			}
			if counted != nil {
				counted.Add(int64(len(c.data)))
			}
		}
	})
	defer wg.Wait()
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay, hole := p.delay, p.hole
			p.mu.Unlock()
			if !hole {
				q <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
			}
		}
		if err != nil {
			return
		}
	}
}

// setDelay adds d to every chunk read from now on, each direction (the
// round trip grows by 2·d); 0 ends the delay.
func (p *faultProxy) setDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// blackhole drops everything either way from now on; connections stay
// open and new ones are accepted, as across a partition where packets are
// lost rather than refused.
func (p *faultProxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
}

// heal ends a black hole. The connections that lost data in it are cut
// (their byte streams have holes): lockproxy reconnects.
func (p *faultProxy) heal() {
	p.mu.Lock()
	p.hole = false
	conns := p.takeConns()
	p.mu.Unlock()
	for _, pc := range conns {
		pc.close()
	}
}

// refuse closes the listener and every connection: from now on lockproxy's
// dials are refused, as when the node's process is gone.
func (p *faultProxy) refuse() {
	p.mu.Lock()
	p.refused = true
	conns := p.takeConns()
	p.mu.Unlock()
	p.ln.Close()
	for _, pc := range conns {
		pc.close()
	}
}

// takeConns empties the connection set; p.mu is held.
func (p *faultProxy) takeConns() []*proxyConn {
	out := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		out = append(out, pc)
		delete(p.conns, pc)
	}
	return out
}

// waitFlowing polls until the node's replies reach lockproxy again: bytes
// delivered in each of 5 consecutive 20ms intervals (lockproxy is under
// load, so a node in use answers all the time). It fails the test after
// timeout.
func (p *faultProxy) waitFlowing(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	interval := time.NewTicker(20 * time.Millisecond)
	defer interval.Stop()
	last, streak := p.delivered.Load(), 0
	for streak < 5 {
		select {
		case <-deadline:
			t.Fatalf("node %s: no replies reach lockproxy %v after the fault ended", p.target, timeout)
		case <-interval.C:
		}
		if n := p.delivered.Load(); n > last {
			last, streak = n, streak+1
		} else {
			streak = 0
		}
	}
}
