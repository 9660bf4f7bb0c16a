package quorum

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// The engine (see doc.go): each event loop — the front end's, or one of
// the Backend's own (ownloop.go) — has its own connection to each node
// (per database used), registered on that loop. An operation started on
// the loop appends its commands to the nodes' buffers; each buffer is
// written once per pass of the loop, after the pass has read its clients;
// the replies are decoded where the loop received them and complete the
// vote on the loop. Connection setup (dial, HELLO, the replaced
// connections' CLIENT KILL, the undos sent again) is the link's
// (link.connect), run on a goroutine before the connection is handed to
// the loop.

// loops is the Backend's part of the event loops: every qloop made, so
// Close can stop them, the goroutines that set up their connections, and
// the Backend's own loops.
type loops struct {
	mu     sync.Mutex
	all    []*qloop
	closed bool
	wg     sync.WaitGroup // connection set-up goroutines (lnode.dial)

	own  []*qloop // on the Backend's own loops (ownLoop): the blocking callers'
	next atomic.Uint32
}

var _ backend.Looper = (*Backend)(nil)

// NewLoop implements backend.Looper. It returns nil (the front end then
// runs every command the ordinary way, which runs it on the Backend's own
// loops) for nodes reached over TLS or through Config.Dialer: the front
// end's loops take raw sockets only.
func (b *Backend) NewLoop(l backend.Loop) backend.LoopBackend {
	if b.cfg.Dialer != nil {
		return nil
	}
	for _, n := range b.nodes {
		if n.opt.TLSConfig != nil {
			return nil
		}
	}
	ql := b.newQloop(l, false)
	if ql == nil {
		return nil // an untyped nil: a nil *qloop in the interface would not compare equal to nil
	}
	return ql
}

// newQloop makes the Backend's part of loop l (own: one of the Backend's
// own loops), nil after Close.
func (b *Backend) newQloop(l backend.Loop, own bool) *qloop {
	b.lp.mu.Lock()
	defer b.lp.mu.Unlock()
	if b.lp.closed {
		return nil
	}
	ql := &qloop{b: b, l: l, own: own, nodes: make([][backend.Databases]*lnode, len(b.nodes))}
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

// startOwnLoops starts the Backend's own loops (New) and waits until each
// has tried its first connection to every node, so that run_ids are known
// and a node down at start fails calls at once rather than after a node
// timeout.
func (b *Backend) startOwnLoops(n int) {
	for range n {
		b.lp.own = append(b.lp.own, b.newQloop(newOwnLoop(), true))
	}
	for _, ql := range b.lp.own {
		for i := range b.nodes {
			ready := make(chan chan struct{}, 1)
			ql.exec(func() { ready <- ql.node(i, 0).tried })
			<-<-ready
		}
	}
}

// ownLoop returns the Backend's own loop for an operation on key: the
// same one for every operation on a key, so that they reach each node on
// one connection, in order — an operation ends once a majority agreed,
// and on another connection the next one could overtake it on a node
// that has not run it yet (docs/quorum.md, "One order per key"). Without
// a key, in turn.
func (b *Backend) ownLoop(key string) *qloop {
	own := b.lp.own
	if key == "" {
		return own[int(b.lp.next.Add(1))%len(own)]
	}
	return own[int(stripe(key))%len(own)]
}

// LoopOps counts the operations started on the front end's event loops
// so far (the rest ran on the Backend's own loops).
func (b *Backend) LoopOps() int64 {
	b.lp.mu.Lock()
	defer b.lp.mu.Unlock()
	var n int64
	for _, ql := range b.lp.all {
		if !ql.own {
			n += ql.ops.Load()
		}
	}
	return n
}

// closeLoops closes every loop's node connections, waits for their
// set-up goroutines and stops the Backend's own loops (Close).
func (b *Backend) closeLoops() {
	b.lp.mu.Lock()
	b.lp.closed = true
	all := b.lp.all
	b.lp.mu.Unlock()
	for _, ql := range all {
		ql.cancel()
		// Wait until the loop has closed ql: until then an operation it
		// runs can still start a connection's set-up (wg.Go), which must
		// not race wg.Wait below. A front end's loop that stopped runs
		// nothing, and one that takes it but never runs it is waited for a
		// second only.
		done := make(chan struct{})
		if ql.l.Execute(func() { ql.close(); close(done) }) == nil {
			select {
			case <-done:
			case <-time.After(time.Second):
			}
		}
	}
	b.lp.wg.Wait()
	for _, ql := range b.lp.own {
		ql.l.(*ownLoop).stop()
	}
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
	own    bool         // one of the Backend's own loops
	ops    atomic.Int64 // operations started (LoopOps)

	dirty       []*lnode // connections with commands to write this pass
	flushQueued bool
	flushFn     func()

	// Timers: operation deadlines and overdue checks, in a queue ordered
	// by when they fall due (deadlines come in any order: an operation's
	// is its command's when that is sooner than NodeTimeout), fired by one
	// time.Timer, armed for the earliest, that runs tick on the loop.
	timers timerQueue
	timer  *time.Timer
	armed  int64 // when the timer fires (as timerEntry.at); zero: not armed
	tickFn func()
}

// timerEntry is an operation's deadline (o) or a call's overdue check (cl
// on ln).
type timerEntry struct {
	at int64 // when it falls due, in nanoseconds after timeBase
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
	ln := &lnode{ql: ql, i: i, state: connecting, tried: make(chan struct{}),
		lk: &link{addr: n.addr, db: db, opt: n.opt, cfg: &ql.b.cfg, replies: n.replies, onRunID: n.onRunID, ctx: ql.ctx,
			node: i, repairs: &ql.b.repairs, order: ql.b.order}}
	ql.nodes[i][db] = ln
	if ql.closed {
		ln.state, ln.err = closed, errClosed
		ln.setReady()
		return ln
	}
	ln.startDial()
	return ln
}

// usable reports whether every node's connection for db has been tried at
// least once (so that a call either goes out or fails at once); a front
// end's loop that has not got there yet leaves its commands to the
// Backend's own loops, whose connections were tried at start.
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
//
// A write can mark connections dirty on its own: a write that fails
// closes its connection at once, and the calls that fail with it end
// operations whose callers may start new ones (an undo, a client's next
// pipelined command). Those are appended to ql.dirty while it is walked,
// so the walk goes by index up to its current length: a connection
// appended then and dropped with the list would have stayed marked dirty,
// never to be listed again, and its commands never written (found under
// load: every operation of one loop timed out on two live nodes for good).
func (ql *qloop) flush() {
	ql.flushQueued = false
	for k := 0; k < len(ql.dirty); k++ {
		ln := ql.dirty[k]
		ql.dirty[k] = nil
		ln.dirty = false
		ln.write()
	}
	ql.dirty = ql.dirty[:0]
}

// timeBase is the origin of timer entries' times: they are kept as plain
// nanoseconds (on the monotonic clock), cheaper to compare than time.Time.
var timeBase = time.Now()

func since(t time.Time) int64 { return int64(t.Sub(timeBase)) }

// after adds a timer entry e, due at at.
func (ql *qloop) after(at time.Time, e timerEntry) {
	e.at = since(at)
	ql.timers.push(e)
	if ql.armed != 0 && e.at >= ql.armed {
		return // the timer fires first, and tick re-arms it
	}
	ql.arm(e.at, since(time.Now()))
}

// arm makes the timer fire at at (at the earliest a millisecond from now,
// so that a burst of entries falling due together is fired in one tick).
func (ql *qloop) arm(at, now int64) {
	ql.armed = at
	d := max(time.Duration(at-now), time.Millisecond)
	if ql.timer == nil {
		ql.timer = time.AfterFunc(d, func() { ql.exec(ql.tickFn) })
	} else {
		ql.timer.Reset(d)
	}
}

// tick fires the entries due, on the loop, and arms the timer for the next.
func (ql *qloop) tick() {
	now := since(time.Now())
	for ql.timers.len() > 0 && ql.timers.next() <= now {
		e := ql.timers.pop()
		switch {
		case e.o != nil:
			e.o.expire()
		case e.cl != nil:
			e.ln.checkOverdue(e.cl)
		}
	}
	if ql.timers.len() == 0 {
		ql.armed = 0
		if cap(ql.timers.fifo) > 4096 || cap(ql.timers.heap) > 4096 {
			ql.timers = timerQueue{} // a burst's queue is not kept
		}
		return
	}
	ql.arm(ql.timers.next(), now)
}

// timerQueue holds timer entries and gives them back earliest first,
// whatever the order they came in. Nearly all come in order (now +
// NodeTimeout, or now + CommandTimeout): those go to a FIFO, at a few
// nanoseconds each; an entry due before the FIFO's last goes to a binary
// heap (written out: container/heap boxes every entry), and pop takes the
// earlier of the two heads. Measured (BenchmarkTimerQueue, 1,000 entries
// waiting): about 40 ns per push and pop in order, 200 ns through the
// heap.
type timerQueue struct {
	fifo []timerEntry // non-decreasing at, from head
	head int
	heap []timerEntry
}

func (q *timerQueue) len() int { return len(q.fifo) - q.head + len(q.heap) }

func (q *timerQueue) push(e timerEntry) {
	if q.head == len(q.fifo) || e.at >= q.fifo[len(q.fifo)-1].at {
		q.fifo = append(q.fifo, e)
		return
	}
	h := append(q.heap, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[i].at >= h[p].at {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	q.heap = h
}

// next returns when the earliest entry falls due; the queue must not be
// empty.
func (q *timerQueue) next() int64 {
	if q.head == len(q.fifo) || len(q.heap) > 0 && q.heap[0].at < q.fifo[q.head].at {
		return q.heap[0].at
	}
	return q.fifo[q.head].at
}

// pop removes and returns the earliest entry; the queue must not be empty.
func (q *timerQueue) pop() timerEntry {
	if q.head < len(q.fifo) && (len(q.heap) == 0 || q.fifo[q.head].at <= q.heap[0].at) {
		e := q.fifo[q.head]
		q.fifo[q.head] = timerEntry{}
		q.head++
		switch {
		case q.head == len(q.fifo):
			q.fifo, q.head = q.fifo[:0], 0
		case q.head >= 1024 && q.head > len(q.fifo)/2:
			k := copy(q.fifo, q.fifo[q.head:])
			clear(q.fifo[k:])
			q.fifo, q.head = q.fifo[:k], 0
		}
		return e
	}
	h := q.heap
	e := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = timerEntry{}
	h = h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].at < h[l].at {
			m = r
		}
		if h[m].at >= h[i].at {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	q.heap = h
	return e
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
	for ql.timers.len() > 0 {
		if e := ql.timers.pop(); e.o != nil {
			e.o.expire()
		}
	}
	ql.timers = timerQueue{}
}
