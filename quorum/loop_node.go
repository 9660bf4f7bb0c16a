package quorum

import (
	"errors"
	"fmt"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// lnode is one loop's connection to one database of one node. It keeps
// the link's guarantees (link.go): one connection carries the loop's
// commands to the node in order; a new connection first kills the one it
// replaces and sends again the undos whose outcome the old one left
// unknown (lk keeps both between connections, under lk.mu); a broken
// connection fails every call waiting on it, and a reply overdue past
// overdueGrace breaks it. Everything but lk and tried belongs to the loop.
type lnode struct {
	ql      *qloop
	i       int
	lk      *link // connection set-up and what survives a connection
	state   linkState
	ready   bool          // a first connection attempt has ended
	tried   chan struct{} // closed when ready is set
	dialing bool          // a dial goroutine runs
	cur     *lconn        // the connection, when up
	wbuf    []byte        // commands not written yet
	spare   []byte        // the other buffer (write)
	pending []*call       // waiting for replies, in write order, from head
	head    int
	err     error               // why it is down
	dirty   bool                // in ql.dirty
	loaded  map[string]struct{} // SHA1s of the scripts loaded on this connection (load)
}

// lconn is one connection of an lnode on the loop (the backend.LoopPeer):
// the events of a connection the lnode has replaced are ignored.
type lconn struct {
	ln        *lnode
	w         backend.LoopWriter
	open      chan struct{} // closed by Open
	abandoned bool          // not opened in time: the dial counts as failed
}

func (c *lconn) Open(w backend.LoopWriter) {
	c.w = w
	close(c.open)
	if c.abandoned {
		w.Close() // its lnode has moved on (its events are ignored)
		return
	}
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
		err = errClosed
	}
	c.ln.lost(err)
}

// send queues cl's encoded commands buf. While the connection is being
// set up they wait for it (within their operation's deadline); while it
// is down they fail at once. The call is answered (or failed) through its
// operation.
func (ln *lnode) send(cl *call, buf []byte) {
	var err error
	switch {
	case ln.state == down || ln.state == closed:
		err = ln.err
		ln.lk.mu.Lock()
		ln.lk.keepUnsent(cl)
		ln.lk.mu.Unlock()
	case len(ln.pending)-ln.head >= maxPending && len(cl.undo) == 0:
		// Undos are queued even then: kept for a later connection, one
		// could run long after the token was granted again.
		err = errBacklog
	}
	if err != nil {
		cl.finished = true
		cl.release(ln.ql.b.order) // never written (unless kept above)
		cl.o.deliver(cl.node, nil, err)
		return
	}
	ln.load(cl)
	ln.wbuf = append(ln.wbuf, buf...)
	ln.pending = append(ln.pending, cl)
	if ln.state == up {
		ln.ql.markDirty(ln)
	}
}

// load puts a SCRIPT LOAD of the script cl calls by EVALSHA ahead of it,
// unless this connection loaded it already. A NOSCRIPT answered and sent
// again by EVAL would run the script after the commands this connection
// carried meanwhile: a release answered by a majority, its third node's
// NOSCRIPT retried after the next acquire of the key, left that node
// without the lock (TestLoopAcquireRelease under load). A script loaded
// this way is not evicted as EVAL's are (Redis 7.4); what remains is a
// SCRIPT FLUSH on the node while connected, after which the next NOSCRIPT
// reloads (traffic) and that one call is sent again by EVAL.
func (ln *lnode) load(cl *call) {
	if cl.load.sha == "" {
		return
	}
	if _, ok := ln.loaded[cl.load.sha]; ok {
		return
	}
	if ln.loaded == nil || len(ln.loaded) >= maxLoaded {
		ln.loaded = make(map[string]struct{})
	}
	ln.loaded[cl.load.sha] = struct{}{}
	r := resp.Request{B: ln.wbuf}
	r.Strs("script", "load", cl.load.src)
	ln.wbuf = r.B
	cl.n++
	cl.loading = true
}

// maxLoaded bounds the scripts a connection remembers loading; beyond,
// it forgets them all and loads each again once.
const maxLoaded = 4096

// loadedReplies strips the reply of the SCRIPT LOAD that went ahead of cl
// and forgets a script the node does not know (the load failed: it does
// not compile there; or NOSCRIPT: its script cache was flushed).
func (ln *lnode) loadedReplies(cl *call) {
	if cl.load.sha == "" {
		return
	}
	forget := false
	if cl.loading {
		forget = cl.vals[0].Kind == backend.KindError
		cl.vals = cl.vals[1:]
	}
	for _, v := range cl.vals {
		forget = forget || noScript(v)
	}
	if forget {
		delete(ln.loaded, cl.load.sha)
	}
}

// write hands the buffer to the connection.
//
// The front end keeps what the socket does not take now; a write error
// closes the connection within Write, and Closed fails the calls. The
// operations that end then may queue commands at once (an acquire's undo,
// for the next connection), so the buffer is swapped out before Write,
// not cleared after it: clearing it dropped those commands while their
// calls stayed waiting, and the next connection's replies would have gone
// to the wrong calls.
func (ln *lnode) write() {
	if ln.state != up || len(ln.wbuf) == 0 {
		return
	}
	buf := ln.wbuf
	ln.wbuf = ln.spare[:0]
	_ = ln.cur.w.Write(buf)
	ln.spare = buf[:0]
	if cap(buf) > 1<<20 {
		ln.spare = nil // a burst's buffer is not kept
	}
}

// opened makes c the connection: the calls queued meanwhile go out.
func (ln *lnode) opened(c *lconn) {
	ln.dialing = false
	if ln.state == closed {
		c.w.Close()
		return
	}
	ln.cur, ln.state, ln.err = c, up, nil
	ln.setReady()
	ln.write()
}

// traffic decodes the node's replies and hands each call its own, in
// order.
func (ln *lnode) traffic(in []byte) int {
	used := 0
	var now time.Time
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
		ln.loadedReplies(cl)
		if cl.exec {
			cl.vals = execReplies(cl.vals)
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
		if now.IsZero() {
			now = time.Now() // once per read: the replies in it arrived together
		}
		ln.lk.replies.Observe(now.Sub(cl.sent).Seconds())
		cl.release(ln.ql.b.order)
		cl.o.deliver(cl.node, cl.vals, nil)
		if ln.cur == nil { // the delivery broke the connection (a retry that found it overdue)
			return len(in)
		}
	}
	return used
}

// overdue is told that cl's operation stopped waiting for it after a full
// node timeout; if it is still unanswered overdueGrace later, the
// connection is broken: a node that far behind is paused, partitioned or
// gone.
func (ln *lnode) overdue(cl *call) {
	ln.ql.after(time.Now().Add(overdueGrace(ln.lk.cfg)), timerEntry{cl: cl, ln: ln})
}

func (ln *lnode) checkOverdue(cl *call) {
	if !cl.finished && !cl.parked && ln.state == up {
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

// lost ends the current connection after a break:
// every call waiting fails with err and keeps its deletes for the next
// connection, which is set up at once.
func (ln *lnode) lost(err error) {
	ln.cur = nil
	next := connecting
	if ln.ql.closed {
		next, err = closed, errClosed
	}
	ln.fail(fmt.Errorf("node %s: %w", ln.lk.addr, err), next, true)
	if next == connecting {
		ln.startDial()
	}
}

// fail fails every call waiting with err and moves to state st. written
// says whether they went out on a connection. Those that did not (queued
// while one was being set up) leave no repair and no hold behind: what
// they would have written did not run; an undo among them is kept for the
// next connection all the same (keepUnsent).
func (ln *lnode) fail(err error, st linkState, written bool) {
	ln.state, ln.err = st, err
	calls := ln.pending[ln.head:]
	ln.pending, ln.head = nil, 0
	ln.wbuf = ln.wbuf[:0]
	clear(ln.loaded) // the next connection may reach a restarted node
	ln.lk.mu.Lock()
	if written {
		ln.lk.retire(calls)
	} else {
		for _, cl := range calls {
			ln.lk.keepUnsent(cl)
		}
	}
	ln.lk.mu.Unlock()
	for _, cl := range calls {
		cl.release(ln.ql.b.order) // a kept or retired call holds nothing any more
		cl.o.deliver(cl.node, nil, err)
	}
}

// shut closes the connection for good (Close).
func (ln *lnode) shut() {
	c := ln.cur
	ln.cur = nil
	ln.setReady()
	ln.fail(errClosed, closed, true)
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

// errNotOpened: a connection enrolled on the loop was not opened there
// within the node timeout (the loop failed to register it, and dropped
// it without a word).
var errNotOpened = errors.New("connection not opened on the event loop")

// awaitOpen waits, off the loop, until c, enrolled, is opened on the loop.
// One not open after a node timeout is abandoned: if the loop opens it
// later after all, it is closed at once; meanwhile the lnode fails over
// as for a failed dial (its calls fail, and a new connection follows).
// The verdict is the loop's (Open and the check both run there), so a
// connection is either opened or abandoned, never both.
func (ln *lnode) awaitOpen(c *lconn) error {
	t := time.NewTimer(ln.lk.cfg.NodeTimeout)
	defer t.Stop()
	select {
	case <-c.open:
		return nil
	case <-ln.ql.ctx.Done():
		return ln.ql.ctx.Err()
	case <-t.C:
	}
	checked := make(chan struct{})
	opened := false // written on the loop before checked is closed
	ln.ql.exec(func() {
		select {
		case <-c.open:
			opened = true
		default:
			c.abandoned = true
		}
		close(checked)
	})
	select {
	case <-checked:
	case <-ln.ql.ctx.Done():
		return ln.ql.ctx.Err()
	}
	if !opened {
		return errNotOpened
	}
	return nil
}

// dial sets connections up until one is on the loop:
// the first attempt at once (calls queue meanwhile); after a failure,
// calls fail at once until the next attempt, after a backoff.
func (ln *lnode) dial() {
	backoff := time.Duration(0)
	for {
		conn, _, err := ln.lk.connect()
		if err == nil {
			c := &lconn{ln: ln, open: make(chan struct{})}
			if err = ln.ql.l.Enroll(ln.ql.ctx, conn, c); err == nil {
				if err = ln.awaitOpen(c); err == nil {
					return // opened ran on the loop
				}
			}
			ln.lk.mu.Lock()
			ln.lk.retire(nil) // it may have carried undos: killed before the next one carries anything
			ln.lk.mu.Unlock()
		}
		if ln.ql.ctx.Err() != nil {
			return
		}
		err = fmt.Errorf("node %s: %w", ln.lk.addr, err)
		ln.ql.exec(func() {
			if ln.state == connecting { // not closed meanwhile (nor up: one dial at a time)
				ln.setReady()
				ln.fail(err, down, false)
			}
		})
		backoff = min(max(2*backoff, ln.lk.cfg.NodeTimeout), maxBackoff)
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

// setReady records that a first connection attempt has ended.
func (ln *lnode) setReady() {
	if !ln.ready {
		ln.ready = true
		close(ln.tried)
	}
}
