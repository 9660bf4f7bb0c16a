package quorum

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"

	"github.com/lockproxy/lockproxy/backend"
)

// ownLoop is an event loop of the Backend's own, for the callers that are
// not on one of the front end's (the blocking methods: the goroutine front
// end, MULTI/EXEC, a script's first call, the repairs, migrate, tests).
// Their operations run on it exactly as the front end's loops run theirs —
// the same lnode connections, the same lop — so there is one engine: the
// caller starts the operation here and waits for its outcome on a channel
// (fanoutUntil).
//
// Unlike the front end's loops it takes any net.Conn (TLS, a test's
// Dialer): each connection has a reader goroutine, which hands what it
// read to the loop, and a writer goroutine, which writes what the loop
// wrote, so that the loop itself never blocks on a socket.
type ownLoop struct {
	mu       sync.Mutex
	queue    []func()
	spare    []func()
	stopping bool // stop was called: the loop ends once nothing is queued
	closed   bool // the loop has ended: Execute refuses
	wake     chan struct{}
	done     chan struct{}
}

var _ backend.Loop = (*ownLoop)(nil)

var errLoopStopped = errors.New("quorum: event loop stopped")

func newOwnLoop() *ownLoop {
	l := &ownLoop{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go l.run()
	return l
}

// Execute implements backend.Loop. Functions queued while the loop runs
// a batch run in the next one, after the batch: as on the front end's
// loops, where a function queued during a pass runs after the pass.
func (l *ownLoop) Execute(f func()) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errLoopStopped
	}
	l.queue = append(l.queue, f)
	first := len(l.queue) == 1
	l.mu.Unlock()
	if first {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

func (l *ownLoop) run() {
	defer close(l.done)
	for {
		<-l.wake
		for {
			// Let the blocking callers runnable now queue their operations
			// first: one pass then starts them all, and their commands go
			// to each node in one write.
			runtime.Gosched()
			l.mu.Lock()
			batch := l.queue
			l.queue, l.spare = l.spare[:0], nil
			stop := l.stopping && len(batch) == 0
			l.closed = stop
			l.mu.Unlock()
			if stop {
				return
			}
			if len(batch) == 0 {
				break
			}
			for i, f := range batch {
				f()
				batch[i] = nil
			}
			l.spare = batch[:0]
		}
	}
}

// stop ends the loop once it has run every function queued, those that
// the functions it runs queue included (an operation that fails at once
// on a closed connection ends on the next pass): Execute refuses only
// after that, so nothing queued is lost. It returns when the loop has
// ended.
func (l *ownLoop) stop() {
	l.mu.Lock()
	l.stopping = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
}

// Enroll implements backend.Loop: c's events go to p on this loop, Open
// first.
func (l *ownLoop) Enroll(ctx context.Context, c net.Conn, p backend.LoopPeer) error {
	oc := &ownConn{l: l, c: c, p: p, wake: make(chan struct{}, 1)}
	if err := l.Execute(func() { p.Open(oc) }); err != nil {
		c.Close()
		return err
	}
	go oc.read()
	go oc.write()
	return ctx.Err()
}

// ownConn is a connection enrolled on an ownLoop. in, out and their flags
// are under mu; the rest belongs to the loop.
type ownConn struct {
	l *ownLoop
	c net.Conn
	p backend.LoopPeer

	mu      sync.Mutex
	in      []byte // read, not yet handed to the loop
	posted  bool   // a deliver is queued on the loop
	out     []byte // written by the loop, not yet to the socket
	quit    bool   // the writer stops
	wake    chan struct{}
	pending []byte // handed to p, not consumed by it (the loop's)
	ended   bool   // Closed was said, or is on its way (the loop's)
	asked   bool   // Close was called (the loop's)
}

// read hands what the socket gives to the loop; at its end (an error, or
// Close) the loop says Closed.
func (oc *ownConn) read() {
	buf := make([]byte, 32<<10)
	for {
		n, err := oc.c.Read(buf)
		if n > 0 {
			oc.mu.Lock()
			oc.in = append(oc.in, buf[:n]...)
			post := !oc.posted
			oc.posted = true
			oc.mu.Unlock()
			if post && oc.l.Execute(oc.deliver) != nil {
				err = errLoopStopped
			}
		}
		if err != nil {
			oc.stopWriter()
			oc.c.Close()
			_ = oc.l.Execute(func() { oc.closed(err) })
			return
		}
	}
}

// deliver offers p what was read (on the loop).
func (oc *ownConn) deliver() {
	oc.mu.Lock()
	in := oc.in
	oc.in = nil
	oc.posted = false
	oc.mu.Unlock()
	if oc.ended {
		return
	}
	if len(oc.pending) > 0 {
		in = append(oc.pending, in...)
	}
	n := oc.p.Traffic(in)
	oc.pending = append([]byte(nil), in[n:]...)
}

func (oc *ownConn) closed(err error) {
	if oc.ended {
		return
	}
	oc.ended = true
	if oc.asked {
		err = nil
	}
	oc.p.Closed(err)
}

// Write implements backend.LoopWriter: the writer goroutine writes b.
func (oc *ownConn) Write(b []byte) error {
	oc.mu.Lock()
	if oc.quit {
		oc.mu.Unlock()
		return net.ErrClosed
	}
	first := len(oc.out) == 0
	oc.out = append(oc.out, b...)
	oc.mu.Unlock()
	if first {
		select {
		case oc.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Close implements backend.LoopWriter; Closed(nil) follows on the loop.
func (oc *ownConn) Close() error {
	oc.asked = true
	oc.stopWriter()
	return oc.c.Close()
}

func (oc *ownConn) stopWriter() {
	oc.mu.Lock()
	oc.quit = true
	oc.mu.Unlock()
	select {
	case oc.wake <- struct{}{}:
	default:
	}
}

func (oc *ownConn) write() {
	var buf []byte
	for range oc.wake {
		// Let the goroutines runnable now (the loop, with more replies
		// and commands in hand) add theirs first: one write then carries
		// them all, which costs the node fewer reads.
		runtime.Gosched()
		oc.mu.Lock()
		buf, oc.out = oc.out, buf[:0]
		quit := oc.quit
		oc.mu.Unlock()
		if quit {
			return
		}
		if len(buf) == 0 {
			continue
		}
		if _, err := oc.c.Write(buf); err != nil {
			oc.c.Close() // the reader sees it and the loop says Closed
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil // a burst's buffer is not kept
		}
	}
}
