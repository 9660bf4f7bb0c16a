package quorum

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// The loop path (SPEC §7; see doc.go for what runs on it): each event loop
// of the front end has its own connection to each node (per database
// used), registered on that loop. An operation started on the loop
// appends its commands to the nodes' buffers; each buffer is written once
// per pass of the loop, after the pass has read its clients; the replies
// are decoded where the loop received them and complete the vote on the
// loop. Connection setup (dial, HELLO, the replaced connections' CLIENT
// KILL, the undos sent again) is the stream's own (stream.connect), run on
// a goroutine before the connection is handed to the loop.

// loops is the Backend's part of the event loops: every qloop made, so
// Close can stop them, and the goroutines that set up their connections.
type loops struct {
	mu     sync.Mutex
	all    []*qloop
	closed bool
	wg     sync.WaitGroup // connection set-up goroutines (lnode.dial)
}

var _ backend.Looper = (*Backend)(nil)

// NewLoop implements backend.Looper. It returns nil (the front end then
// runs every command the ordinary way) for nodes reached over TLS or
// through Config.Dialer: the loop takes raw sockets only.
func (b *Backend) NewLoop(l backend.Loop) backend.LoopBackend {
	if b.cfg.Dialer != nil {
		return nil
	}
	for _, n := range b.nodes {
		if n.opt.TLSConfig != nil {
			return nil
		}
	}
	b.lp.mu.Lock()
	defer b.lp.mu.Unlock()
	if b.lp.closed {
		return nil
	}
	ql := &qloop{b: b, l: l, nodes: make([][backend.Databases]*lnode, len(b.nodes))}
	ql.ctx, ql.cancel = context.WithCancel(context.Background())
	ql.flushFn, ql.tickFn = ql.flush, ql.tick
	b.lp.all = append(b.lp.all, ql)
	// Database 0's connections are made now: the loop's first command
	// will most likely want them.
	ql.exec(func() {
		for i := range b.nodes {
			ql.node(i, 0)
		}
	})
	return ql
}

// LoopOps counts the operations started on the front end's event loops
// so far (the rest ran on the node streams).
func (b *Backend) LoopOps() int64 {
	b.lp.mu.Lock()
	defer b.lp.mu.Unlock()
	var n int64
	for _, ql := range b.lp.all {
		n += ql.ops.Load()
	}
	return n
}

// closeLoops closes every loop's node connections and waits for their
// set-up goroutines (Close).
func (b *Backend) closeLoops() {
	b.lp.mu.Lock()
	b.lp.closed = true
	all := b.lp.all
	b.lp.mu.Unlock()
	for _, ql := range all {
		ql.cancel()
		ql.exec(ql.close)
	}
	b.lp.wg.Wait()
}

// qloop is the Backend's part of one event loop. Everything in it belongs
// to the loop, except ctx and cancel.
type qloop struct {
	b      *Backend
	l      backend.Loop
	ctx    context.Context // ends at Close: stops connection set-up
	cancel context.CancelFunc
	nodes  [][backend.Databases]*lnode // by node, then database; made on first use
	closed bool
	ops    atomic.Int64 // operations started (LoopOps)

	dirty       []*lnode // connections with commands to write this pass
	flushQueued bool
	flushFn     func()

	// Timers: operation deadlines and overdue checks, in the order they
	// fall due (every one is now + NodeTimeout when it is added; an
	// operation whose command deadline comes sooner, with a CommandTimeout
	// below the node timeout, may fire up to a node timeout late), fired
	// by one time.Timer that runs tick on the loop.
	timers []timerEntry
	thead  int
	timer  *time.Timer
	armed  bool
	tickFn func()
}

// timerEntry is an operation's deadline (o) or a call's overdue check (cl
// on ln).
type timerEntry struct {
	at time.Time
	o  *lop
	cl *call
	ln *lnode
}

// exec runs f on the loop; after the front end stopped, nothing runs and
// nothing waits.
func (ql *qloop) exec(f func()) { _ = ql.l.Execute(f) }

// node returns the loop's connection to node i's database db, setting it
// up on first use.
func (ql *qloop) node(i, db int) *lnode {
	if ln := ql.nodes[i][db]; ln != nil {
		return ln
	}
	n := ql.b.nodes[i]
	ln := &lnode{ql: ql, i: i, state: connecting,
		st: &stream{addr: n.addr, db: db, opt: n.opt, cfg: &ql.b.cfg, replies: n.replies, onRunID: n.onRunID, ctx: ql.ctx,
			node: i, undos: &ql.b.pending}}
	ql.nodes[i][db] = ln
	if ql.closed {
		ln.state, ln.err, ln.ready = closed, errStreamClosed, true
		return ln
	}
	ln.startDial()
	return ln
}

// usable reports whether every node's connection for db has been tried at
// least once (so that a call either goes out or fails at once, as on a
// stream); a loop that has not got there yet leaves its commands to the
// stream path.
func (ql *qloop) usable(db int) bool {
	if ql.closed {
		return false
	}
	ok := true
	for i := range ql.b.nodes {
		if !ql.node(i, db).ready {
			ok = false
		}
	}
	return ok
}

// markDirty makes sure ln's buffer is written in this pass of the loop.
func (ql *qloop) markDirty(ln *lnode) {
	if !ln.dirty {
		ln.dirty = true
		ql.dirty = append(ql.dirty, ln)
	}
	if !ql.flushQueued {
		ql.flushQueued = true
		ql.exec(ql.flushFn)
	}
}

// flush writes each connection's buffer, once, after the pass's input.
func (ql *qloop) flush() {
	ql.flushQueued = false
	for k, ln := range ql.dirty {
		ql.dirty[k] = nil
		ln.dirty = false
		ln.write()
	}
	ql.dirty = ql.dirty[:0]
}

// after adds a timer entry, due NodeTimeout from now (or sooner for an
// operation whose command deadline is sooner).
func (ql *qloop) after(e timerEntry) {
	ql.timers = append(ql.timers, e)
	if ql.armed {
		return
	}
	ql.armed = true
	d := max(time.Until(e.at), 0)
	if ql.timer == nil {
		ql.timer = time.AfterFunc(d, func() { ql.exec(ql.tickFn) })
	} else {
		ql.timer.Reset(d)
	}
}

// tick fires the entries due, on the loop, and arms the timer for the next.
func (ql *qloop) tick() {
	now := time.Now()
	for ql.thead < len(ql.timers) && !ql.timers[ql.thead].at.After(now) {
		e := ql.timers[ql.thead]
		ql.timers[ql.thead] = timerEntry{}
		ql.thead++
		switch {
		case e.o != nil:
			e.o.expire()
		case e.cl != nil:
			e.ln.checkOverdue(e.cl)
		}
	}
	if ql.thead == len(ql.timers) {
		ql.timers, ql.thead = ql.timers[:0], 0
		ql.armed = false
		return
	}
	if ql.thead >= 1024 && ql.thead > len(ql.timers)/2 {
		n := copy(ql.timers, ql.timers[ql.thead:])
		clear(ql.timers[n:])
		ql.timers, ql.thead = ql.timers[:n], 0
	}
	ql.timer.Reset(max(ql.timers[ql.thead].at.Sub(now), time.Millisecond))
}

// close ends the loop's connections (Close): every call waiting fails.
func (ql *qloop) close() {
	ql.closed = true
	if ql.timer != nil {
		ql.timer.Stop()
	}
	for i := range ql.nodes {
		for _, ln := range ql.nodes[i] {
			if ln != nil {
				ln.shut()
			}
		}
	}
	// The operations still waiting end now, with what they have.
	for _, e := range ql.timers[ql.thead:] {
		if e.o != nil {
			e.o.expire()
		}
	}
	ql.timers, ql.thead = nil, 0
}
