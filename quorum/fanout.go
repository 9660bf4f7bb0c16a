package quorum

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
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
	// writes are the key and token pairs the request may write: not sent
	// to a node where a delete of one is pending (pendingUndos).
	writes []undoRec
}

// op collects one operation's node replies. Streams deliver into it from
// their reader goroutines; the operation's goroutine is woken once, when
// the last reply is in, or by its deadline.
type op struct {
	mu      sync.Mutex
	replies []nodeReply
	calls   []*call
	left    int
	closed  bool
	wake    chan struct{}
	onLast  *lop // instead of wake, on an event loop (loop_op.go): its progress runs when the last reply is in (a pointer, not a func: a method value would cost an allocation per operation)
}

// deliver records node's reply; after the operation stopped waiting, and
// for a node that already answered, it is dropped.
func (o *op) deliver(node int, vals []backend.Value, err error) {
	o.mu.Lock()
	if o.closed || o.replies[node].done {
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
	o.replies[node] = nodeReply{vals: vals, err: err, done: true}
	o.left--
	last := o.left == 0
	o.mu.Unlock()
	if last && o.onLast != nil {
		o.onLast.progress()
		return
	}
	if last {
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
}

var (
	errQuarantined = errors.New("quorum: node quarantined after a restart")
	errNodeTimeout = errors.New("quorum: node timeout")
	errNotSent     = errors.New("quorum: nothing to send to this node")
	errUndoPending = errors.New("quorum: an undo of this token is still pending on this node")
)

// fanout sends each node its request (reqFor; nil sends nothing) and waits
// for every reply, each node for at most NodeTimeout from the start — one
// deadline for all, since all start together — and never past ctx. A slow
// node costs at most its timeout and delays no other node's request. When
// again returns a request for a node's reply (a script the node did not
// know), it is sent to that node and waited for within the same deadline.
func (b *Backend) fanout(ctx context.Context, db int, reqFor func(i int) *req, again func(i int, r nodeReply) *req) []nodeReply {
	n := len(b.nodes)
	o := &op{replies: make([]nodeReply, n), calls: make([]*call, n), left: n, wake: make(chan struct{}, 1)}
	send := func(i int, r *req) {
		s := b.nodes[i].stream(db, &b.cfg)
		if b.pending.blocks(s, i, db, r.writes) {
			o.deliver(i, nil, errUndoPending)
			return
		}
		cl := &call{o: o, c: s, node: i, n: r.cmds.N, vals: make([]backend.Value, 0, r.cmds.N), undo: r.undo, sent: time.Now()}
		o.calls[i] = cl
		b.pending.add(s, i, db, r.undo, 1)
		s.send(cl, r.cmds.B)
	}
	b.dispatch(o, db, time.Now(), reqFor, send)
	timer := time.NewTimer(b.cfg.NodeTimeout)
	defer timer.Stop()
	defer b.settle(o)
	var retried []bool // made on the first retry: most operations have none
	for {
		select {
		case <-o.wake:
		case <-timer.C:
			o.stop(errNodeTimeout, true)
			return o.replies
		case <-ctx.Done():
			o.stop(ctx.Err(), false)
			return o.replies
		}
		if again == nil {
			return o.replies
		}
		retry, reqs := o.retries(again, &retried)
		if len(retry) == 0 {
			return o.replies
		}
		for k, i := range retry {
			send(i, reqs[k])
		}
	}
}

// dispatch sends each node its request (reqFor; nil sends nothing) through
// send, the same on the stream and the loop paths; now is the operation's
// start (for the quarantine check).
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
// makes o wait for their replies.
func (o *op) retries(again func(i int, r nodeReply) *req, retried *[]bool) (retry []int, reqs []*req) {
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
	return retry, reqs
}

// settle ends an operation: replies of nodes quarantined meanwhile become
// failures, and every node's failure is counted.
func (b *Backend) settle(o *op) {
	o.dropQuarantined(b)
	b.countFailures(o.replies)
}

// dropQuarantined turns the replies of nodes quarantined while the
// operation ran into failures: a node that restarted may have answered
// from an empty memory (its stream connection, made after the restart,
// quarantined it before carrying the queued commands).
func (o *op) dropQuarantined(b *Backend) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, r := range o.replies {
		if o.calls[i] != nil && !r.failed() && b.health[i].quarantinedAt(now) {
			o.replies[i] = nodeReply{err: errQuarantined, done: true}
		}
	}
}

// countFailures counts, per node, the operations it failed: no reply, or
// one about the node (nodeReply.failed); not a node left out by its
// quarantine or sent nothing, nor one whose client went away.
func (b *Backend) countFailures(replies []nodeReply) {
	for i, r := range replies {
		if r.failed() && r.err != errQuarantined && r.err != errNotSent && !errors.Is(r.err, context.Canceled) {
			b.nodes[i].failures.Add(1)
		}
	}
}

// stop ends the wait: nodes that have not answered get err, and when the
// node timeout ran out, their streams hear that they are overdue.
func (o *op) stop(err error, timedOut bool) {
	o.mu.Lock()
	o.closed = true
	var late []*call
	for i := range o.replies {
		if !o.replies[i].done {
			o.replies[i] = nodeReply{err: err, done: true}
			if o.calls[i] != nil {
				late = append(late, o.calls[i])
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

// nodeScript is one of the proxy's own scripts, run on the nodes by
// EVALSHA (each connection loads them when it is set up; EVAL when a node
// lost them).
type nodeScript struct{ src, sha string }

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
