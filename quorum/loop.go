package quorum

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/proxy/backend"
	"github.com/lockproxy/lockproxy/proxy/resp"
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
		st: &stream{addr: n.addr, db: db, opt: n.opt, cfg: &ql.b.cfg, replies: n.replies, onRunID: n.onRunID, ctx: ql.ctx}}
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

// lnode is one loop's connection to one database of one node: the loop
// path's stream. It keeps the stream's guarantees (stream.go): one
// connection carries the loop's commands to the node in order; a new
// connection first kills the one it replaces and sends again the undos
// whose outcome the old one left unknown (st keeps both between
// connections, under st.mu); a broken connection fails every call
// waiting on it, and a reply overdue past two node timeouts breaks it.
// Everything but st belongs to the loop.
type lnode struct {
	ql      *qloop
	i       int
	st      *stream // connection set-up and what survives a connection; its goroutines never run
	state   streamState
	ready   bool   // a first connection attempt has ended
	dialing bool   // a dial goroutine runs
	cur     *lconn // the connection, when up
	wbuf    []byte
	pending []*call // waiting for replies, in write order, from head
	head    int
	err     error // why it is down
	dirty   bool  // in ql.dirty
}

// lconn is one connection of an lnode on the loop (the backend.LoopPeer):
// the events of a connection the lnode has replaced are ignored.
type lconn struct {
	ln *lnode
	w  backend.LoopWriter
}

func (c *lconn) Open(w backend.LoopWriter) {
	c.w = w
	c.ln.opened(c)
}

func (c *lconn) Traffic(in []byte) int {
	if c.ln.cur != c {
		return len(in)
	}
	return c.ln.traffic(in)
}

func (c *lconn) Closed(err error) {
	if c.ln.cur != c {
		return
	}
	if err == nil {
		err = errStreamClosed
	}
	c.ln.lost(err)
}

// send queues cl's encoded commands buf, as stream.send does.
func (ln *lnode) send(cl *call, buf []byte) {
	var err error
	switch {
	case ln.state == down || ln.state == closed:
		err = ln.err
		ln.st.mu.Lock()
		ln.st.keepUndo(cl)
		ln.st.mu.Unlock()
	case len(ln.pending)-ln.head >= maxPending && len(cl.undo) == 0:
		err = errBacklog
	}
	if err != nil {
		cl.finished = true
		cl.o.deliver(cl.node, nil, err)
		return
	}
	ln.wbuf = append(ln.wbuf, buf...)
	ln.pending = append(ln.pending, cl)
	if ln.state == up {
		ln.ql.markDirty(ln)
	}
}

// write hands the buffer to the connection.
func (ln *lnode) write() {
	if ln.state != up || len(ln.wbuf) == 0 {
		return
	}
	// The front end keeps what the socket does not take now; a write error
	// closes the connection, and Closed fails the calls.
	_ = ln.cur.w.Write(ln.wbuf)
	ln.wbuf = ln.wbuf[:0]
	if cap(ln.wbuf) > 1<<20 {
		ln.wbuf = nil // a burst's buffer is not kept
	}
}

// opened makes c the connection: the calls queued meanwhile go out.
func (ln *lnode) opened(c *lconn) {
	ln.dialing = false
	if ln.state == closed {
		c.w.Close()
		return
	}
	ln.cur, ln.state, ln.err, ln.ready = c, up, nil, true
	ln.write()
}

// traffic decodes the node's replies and hands each call its own, in
// order, as stream.readLoop does.
func (ln *lnode) traffic(in []byte) int {
	used := 0
	for used < len(in) {
		v, n, err := resp.Decode(in[used:])
		if err != nil {
			ln.breakConn(err)
			return len(in)
		}
		if n == 0 {
			break
		}
		used += n
		if ln.head == len(ln.pending) {
			ln.breakConn(errUnexpected)
			return len(in)
		}
		cl := ln.pending[ln.head]
		cl.vals = append(cl.vals, v)
		if len(cl.vals) < cl.n {
			continue
		}
		cl.finished = true
		ln.pending[ln.head] = nil
		ln.head++
		switch {
		case ln.head == len(ln.pending):
			ln.pending, ln.head = ln.pending[:0], 0
		case ln.head >= 1024 && ln.head > len(ln.pending)/2:
			k := copy(ln.pending, ln.pending[ln.head:])
			clear(ln.pending[k:])
			ln.pending, ln.head = ln.pending[:k], 0
		}
		ln.st.replies.Observe(time.Since(cl.sent).Seconds())
		cl.o.deliver(cl.node, cl.vals, nil)
		if ln.cur == nil { // the delivery broke the connection (a retry that found it overdue)
			return len(in)
		}
	}
	return used
}

// overdue implements carrier: cl's operation stopped waiting for it after
// a full node timeout; if it is still unanswered one more node timeout
// later, the connection is broken, as stream.overdue does.
func (ln *lnode) overdue(cl *call) {
	ln.ql.after(timerEntry{at: time.Now().Add(ln.st.cfg.NodeTimeout), cl: cl, ln: ln})
}

func (ln *lnode) checkOverdue(cl *call) {
	if !cl.finished && ln.state == up {
		ln.breakConn(errOverdue)
	}
}

// breakConn closes the connection for cause: its calls fail now, and a
// new connection is set up.
func (ln *lnode) breakConn(cause error) {
	c := ln.cur
	if c == nil {
		return
	}
	ln.lost(cause)
	c.w.Close()
}

// lost ends the current connection, as stream.fail does after a break:
// every call waiting fails with err and keeps its deletes for the next
// connection, which is set up at once.
func (ln *lnode) lost(err error) {
	ln.cur = nil
	next := connecting
	if ln.ql.closed {
		next, err = closed, errStreamClosed
	}
	ln.fail(fmt.Errorf("node %s: %w", ln.st.addr, err), next)
	if next == connecting {
		ln.startDial()
	}
}

// fail fails every call waiting with err and moves to state st.
func (ln *lnode) fail(err error, st streamState) {
	ln.state, ln.err = st, err
	calls := ln.pending[ln.head:]
	ln.pending, ln.head = nil, 0
	ln.wbuf = ln.wbuf[:0]
	ln.st.mu.Lock()
	ln.st.retire(calls)
	ln.st.mu.Unlock()
	for _, cl := range calls {
		cl.o.deliver(cl.node, nil, err)
	}
}

// shut closes the connection for good (Close).
func (ln *lnode) shut() {
	c := ln.cur
	ln.cur = nil
	ln.ready = true
	ln.fail(errStreamClosed, closed)
	if c != nil {
		c.w.Close()
	}
}

// startDial sets a connection up on a goroutine, unless one is at it.
func (ln *lnode) startDial() {
	ln.state = connecting
	if ln.dialing {
		return
	}
	ln.dialing = true
	ln.ql.b.lp.wg.Go(ln.dial)
}

// dial sets connections up until one is on the loop, as stream.run does:
// the first attempt at once (calls queue meanwhile); after a failure,
// calls fail at once until the next attempt, after a backoff.
func (ln *lnode) dial() {
	backoff := time.Duration(0)
	for {
		conn, _, err := ln.st.connect()
		if err == nil {
			if err = ln.ql.l.Enroll(ln.ql.ctx, conn, &lconn{ln: ln}); err == nil {
				return // opened ran on the loop
			}
			ln.st.mu.Lock()
			ln.st.retire(nil) // it may have carried undos: killed before the next one carries anything
			ln.st.mu.Unlock()
		}
		if ln.ql.ctx.Err() != nil {
			return
		}
		err = fmt.Errorf("node %s: %w", ln.st.addr, err)
		ln.ql.exec(func() {
			if ln.state == connecting { // not closed meanwhile (nor up: one dial at a time)
				ln.ready = true
				ln.fail(err, down)
			}
		})
		backoff = min(max(2*backoff, ln.st.cfg.NodeTimeout), maxBackoff)
		t := time.NewTimer(backoff)
		select {
		case <-ln.ql.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ln.ql.exec(func() {
			if ln.state == down {
				ln.state = connecting
			}
		})
	}
}
