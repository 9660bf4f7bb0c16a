package quorum

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// nodeReply is one node's answer to an operation: its replies, in order,
// or why there are none.
type nodeReply struct {
	vals []backend.Value
	err  error
	done bool
}

// failed reports a node failure: no reply, or a reply that is about the
// node rather than the command (loading, read-only, busy).
func (r nodeReply) failed() bool { return r.err != nil }

// req is what one node is sent: encoded commands, one reply each.
type req struct {
	cmds resp.Request
	undo []undoRec // owner-checked deletes: sent again on a new connection if this one breaks unanswered
	// repair are the keys of a lock operation: repaired on a node whose
	// connection breaks before it answers (repair.go).
	repair []string
	// quiet: the proxy's own background work (a repair), whose node
	// failures are not the clients' and are not counted.
	quiet bool
	// exec: cmds are one MULTI … EXEC; the node's replies are handed on
	// as the queued commands' own (execReplies).
	exec bool
	// load is the script cmds call by EVALSHA, if any: loaded on a
	// connection before its first call needs it (lnode.send).
	load scriptRef
}

// scriptRef names a script by its SHA1 and gives its source.
type scriptRef struct{ sha, src string }

// op collects one operation's node replies, delivered on the loop that
// runs it (lop). Its lock is for the waiter of a blocking caller
// (fanoutUntil), which reads what the loop wrote.
type op struct {
	mu      sync.Mutex
	replies []nodeReply
	calls   []*call
	left    int
	closed  bool
	onLast  *lop // its progress runs after each reply (a pointer, not a func: a method value would cost an allocation per operation)
	quiet   bool // its node failures are not counted (req.quiet)

	// Replies that come after the operation ended (its outcome was
	// certain before every node answered, or its deadline passed) for a
	// node it had sent a call to: lateWait marks those nodes, late (set by
	// onLate once the outcome is known) is told each such reply, and
	// lateBuf keeps those that came before late was set.
	lateWait []bool
	late     func(node int, vals []backend.Value, err error)
	lateTo   *lop // instead of late, for the lock path's own operations (lop.lateReply): no closure per operation
	lateBuf  []lateReply

	// A script that may publish runs wrapped (scriptpub.go): each node's
	// reply is unwrapped as it comes, its messages kept in pubs.
	pub  *pubCall
	pubs []backend.Value
}

type lateReply struct {
	node int
	vals []backend.Value
	err  error
}

// deliver records node's reply; after the operation ended it goes to the
// late handler (onLate) when the node was still awaited, and for a node
// that already answered it is dropped.
func (o *op) deliver(node int, vals []backend.Value, err error) {
	o.mu.Lock()
	if o.closed {
		if node >= len(o.lateWait) || !o.lateWait[node] {
			o.mu.Unlock()
			return
		}
		o.lateWait[node] = false
		if o.pub != nil && err == nil {
			o.pub.unwrap(vals)
		}
		h, to := o.late, o.lateTo
		if h == nil && to == nil {
			o.lateBuf = append(o.lateBuf, lateReply{node: node, vals: cloneValues(vals), err: err})
		}
		o.mu.Unlock()
		switch {
		case to != nil:
			to.lateReply(node, vals, err)
		case h != nil:
			h(node, vals, err)
		}
		return
	}
	if o.replies[node].done {
		o.mu.Unlock()
		return
	}
	if err == nil {
		for _, v := range vals {
			if v.Kind == backend.KindError && isTransient(v.Str) {
				err = errors.New(string(v.Str)) // the node, not the command, failed
				vals = nil
				break
			}
		}
	}
	if o.pub != nil && err == nil {
		o.pubs[node] = o.pub.unwrap(vals)
	}
	o.replies[node] = nodeReply{vals: vals, err: err, done: true}
	o.left--
	o.mu.Unlock()
	o.onLast.progress()
}

var (
	errQuarantined = errors.New("quorum: node quarantined after a restart")
	errNodeTimeout = errors.New("quorum: node timeout")
	errNotSent     = errors.New("quorum: nothing to send to this node")
)

// fanout sends each node its request (reqFor; nil sends nothing) and waits
// for every reply, each node for at most NodeTimeout from the start — one
// deadline for all, since all start together — and never past ctx. A slow
// node costs at most its timeout and delays no other node's request. When
// again returns a request for a node's reply (a script the node did not
// know), it is sent to that node and waited for within the same deadline.
func (b *Backend) fanout(ctx context.Context, db int, key string, reqFor func(i int) *req, again func(i int, r nodeReply) *req) []nodeReply {
	_, replies := b.fanoutUntil(ctx, db, key, reqFor, again, nil)
	return replies
}

// fanoutUntil is fanout that stops waiting as soon as certain says the
// replies so far decide the outcome (a majority agreed): a node that is
// slow or paused then costs nothing. The nodes not heard from by then are
// not done in the replies returned, and their replies come to the
// returned op's late handler (op.onLate), which the caller must set; it
// runs on the loop, which it must not block.
//
// It is the blocking callers' way onto the engine: the operation runs on
// one of the Backend's own loops (ownloop.go), as the front end's loops
// run theirs, and the caller waits for its end. key (the operation's
// first key, "" for none) picks the loop: see ownLoop.
func (b *Backend) fanoutUntil(ctx context.Context, db int, key string, reqFor func(i int) *req, again func(i int, r nodeReply) *req, certain func([]nodeReply) bool) (*op, []nodeReply) {
	return b.fanoutOp(ctx, key, &lop{db: db, again: again, certainFn: certain}, reqFor)
}

// fanoutOp is fanoutUntil for an operation the caller made (its db and
// what ends it set).
func (b *Backend) fanoutOp(ctx context.Context, key string, lo *lop, reqFor func(i int) *req) (*op, []nodeReply) {
	ql := b.ownLoop(key)
	end := make(chan []nodeReply, 1)
	lo.ql, lo.decide = ql, func(replies []nodeReply, _ time.Duration) { end <- replies }
	deadline, _ := ctx.Deadline()
	if ql.l.Execute(func() { ql.runOp(lo, reqFor, deadline) }) != nil {
		return b.closedOp()
	}
	select {
	case replies := <-end:
		return &lo.op, replies
	case <-ctx.Done():
	}
	err := ctx.Err()
	// If the loop has stopped, Close ended the operation already.
	_ = ql.l.Execute(func() {
		if !lo.ended {
			lo.stop(err, false)
			lo.end()
		}
	})
	return &lo.op, <-end
}

// closedOp is the outcome of an operation asked for after Close: every
// node failed.
func (b *Backend) closedOp() (*op, []nodeReply) {
	o := &op{replies: make([]nodeReply, len(b.nodes)), closed: true}
	for i := range o.replies {
		o.replies[i] = nodeReply{err: errClosed, done: true}
	}
	return o, o.replies
}

// dispatch sends each node its request (reqFor; nil sends nothing) through
// send; now is the operation's start (for the quarantine check).
func (b *Backend) dispatch(o *op, db int, now time.Time, reqFor func(i int) *req, send func(i int, r *req)) {
	for i := range b.nodes {
		r := reqFor(i)
		switch {
		case r == nil:
			o.deliver(i, nil, errNotSent)
		case b.health[i].quarantinedAt(now) && len(r.undo) == 0:
			// Quarantined nodes get no votes to cast, but they do get
			// undos: an acquire may have landed there just before the
			// quarantine began.
			o.deliver(i, nil, errQuarantined)
		default:
			send(i, r)
		}
	}
}

// retries returns the requests again makes of the replies in (a script a
// node did not know), each node's at most once (retried remembers), and
// makes o wait for their replies; left is how many replies o still awaits,
// read under the same lock, so that "nothing to ask again and nothing
// awaited" is one observation.
func (o *op) retries(again func(i int, r nodeReply) *req, retried *[]bool) (retry []int, reqs []*req, left int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, r := range o.replies {
		if *retried != nil && (*retried)[i] { // once: a script whose own error reply reads NOSCRIPT is not run again and again
			continue
		}
		if nr := again(i, r); nr != nil {
			if nr.undo == nil {
				nr.undo = o.calls[i].undo // the same deletes: sent again if this connection breaks too
			}
			if *retried == nil {
				*retried = make([]bool, len(o.replies))
			}
			(*retried)[i] = true
			retry, reqs = append(retry, i), append(reqs, nr)
			o.replies[i] = nodeReply{}
			o.left++
		}
	}
	return retry, reqs, o.left
}

// settle ends an operation: replies of nodes quarantined meanwhile become
// failures, and every node's failure is counted.
func (b *Backend) settle(o *op) {
	o.dropQuarantined(b)
	if !o.quiet {
		b.countFailures(o.replies)
	}
}

// dropQuarantined turns the replies of nodes quarantined while the
// operation ran into failures: a node that restarted may have answered
// from an empty memory (its connection, made after the restart,
// quarantined it before carrying the queued commands).
func (o *op) dropQuarantined(b *Backend) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, r := range o.replies {
		if o.calls[i] != nil && !r.failed() && b.health[i].quarantinedAt(now) {
			o.replies[i] = nodeReply{vals: r.vals, err: errQuarantined, done: true} // vals: what it did, for the undo
		}
	}
}

// countFailures counts, per node, the operations it failed: no reply, or
// one about the node (nodeReply.failed); not a node left out by its
// quarantine, sent nothing or behind (its late call counted), nor one
// whose client went away.
func (b *Backend) countFailures(replies []nodeReply) {
	for i, r := range replies {
		if r.failed() && r.err != errQuarantined && r.err != errNotSent && r.err != errBehind && !errors.Is(r.err, context.Canceled) {
			b.nodes[i].failures.Add(1)
		}
	}
}

// stop ends the wait: nodes that have not answered get err, and when the
// node timeout ran out, their connections hear that they are overdue.
func (o *op) stop(err error, timedOut bool) {
	o.mu.Lock()
	wasClosed := o.closed
	o.closed = true
	var late []*call
	for i := range o.replies {
		if !o.replies[i].done {
			o.replies[i] = nodeReply{err: err, done: true}
			if o.calls[i] != nil {
				late = append(late, o.calls[i])
				if !wasClosed {
					o.markLate(i)
				}
			}
		}
	}
	o.mu.Unlock()
	if timedOut {
		for _, cl := range late {
			cl.c.overdue(cl)
		}
	}
}

// closeEarly ends the wait before every node answered, because the
// outcome is already certain, and returns the replies it ended with: the nodes not heard from are awaited as late
// replies (onLate) and keep their place (not done) so that a deadline
// that falls later can still tell their connections they are overdue.
func (o *op) closeEarly() []nodeReply {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for i := range o.replies {
		if !o.replies[i].done && o.calls[i] != nil {
			o.markLate(i)
		}
	}
	return o.replies // closed: deliver no longer writes them
}

// ended reports whether the operation stopped waiting for replies.
func (o *op) ended() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// markLate awaits node i's reply after the end. Under o.mu.
func (o *op) markLate(i int) {
	if o.lateWait == nil {
		o.lateWait = make([]bool, len(o.replies))
	}
	o.lateWait[i] = true
}

// awaitsLate reports whether a node's reply may still come after the end,
// or came after it already.
func (o *op) awaitsLate() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.lateWait, true) || len(o.lateBuf) > 0
}

// onLate sets what is done with replies that arrive after the end, once
// the outcome they are judged against is known, and runs it for those
// that came already. h runs where the reply is delivered, on the
// operation's event loop, which it must not block.
func (o *op) onLate(h func(node int, vals []backend.Value, err error)) {
	o.mu.Lock()
	o.late = h
	buf := o.lateBuf
	o.lateBuf = nil
	o.mu.Unlock()
	for _, r := range buf {
		h(r.node, r.vals, r.err)
	}
}

func cloneValues(vs []backend.Value) []backend.Value {
	out := make([]backend.Value, len(vs))
	for i, v := range vs {
		out[i] = cloneValue(v)
	}
	return out
}

func cloneValue(v backend.Value) backend.Value {
	v.Str = bytes.Clone(v.Str)
	if v.Elems != nil {
		v.Elems = cloneValues(v.Elems)
	}
	return v
}

// nodeScript is one of the proxy's own scripts, run on the nodes by
// EVALSHA (each connection loads them when it is set up; EVAL when a node
// lost them).
type nodeScript struct{ src, sha string }

func (s *nodeScript) ref() scriptRef { return scriptRef{sha: s.sha, src: s.src} }

func newNodeScript(src string) *nodeScript {
	h := sha1.Sum([]byte(src))
	return &nodeScript{src: src, sha: hex.EncodeToString(h[:])}
}

// isTransient reports error replies that are about the node, not the
// command: it is loading, read-only, or busy with a script.
func isTransient(s []byte) bool {
	for _, p := range []string{"LOADING", "READONLY", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
		if len(s) >= len(p) && string(s[:len(p)]) == p {
			return true
		}
	}
	return false
}
