package quorum

import (
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// Late replies of a failed vote. An operation is decided as soon as its
// outcome is certain, or at its deadline; a node that had not answered by
// then (paused, slow) still runs it, late. What a late reply says was
// written where the client was not granted it is normally repaired
// (repair.go): deleted on that node only while no majority holds it, for
// a read may have seen it meanwhile (the client was told the outcome is
// unknown), and a value a read returned must not vanish.
//
// That rule alone left a failed acquire in place when Q or more nodes
// answer late (two of three paused while it ran, issue 39 item 8): they
// all write the token, the repair finds a majority holding it and keeps
// it, and the key is blocked for its whole TTL by a client told TRYAGAIN.
// So when the nodes still to answer at the decision are Q or more — only
// a vote that failed leaves that many — the operation keeps its keys'
// stripes (stripe.go) past its decision, until each of those nodes has
// answered, and removes what each late reply says it created there with
// an owner-checked delete on that node alone, before this instance runs
// anything else on those keys. No read of this instance can see the late
// majority, so nothing a read returned vanishes, and once the nodes are
// back the key is free. The hold is bounded: a reply still missing after
// the connection's grace fails its call (the node's keys are repaired).
// With fewer than Q late nodes, what they write cannot make a majority on
// its own, and repairing it needs no hold (the keys are not held for a
// paused node, which would cost a contended key its availability).

// lateHold is an operation's hold of its stripes past its decision: one
// pin for the decision's own undo and one per node awaited late. The last
// release lets the stripes go.
type lateHold struct {
	left atomic.Int32
	done func()
}

// holdLate returns the hold for an operation whose vote failed (the
// caller's to say) and that awaits Q or more late replies, with done
// letting its stripes go; nil, and nothing held, otherwise. Called at the
// decision, before the late replies are judged (lateFromNowOn, onLate).
func (o *op) holdLate(q int, done func()) *lateHold {
	n := o.lateCount()
	if n < q {
		return nil
	}
	h := &lateHold{done: done}
	h.left.Store(int32(n + 1))
	return h
}

// lateCount is how many nodes' replies may come, or came, after the end.
func (o *op) lateCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.lateBuf)
	for _, w := range o.lateWait {
		if w {
			n++
		}
	}
	return n
}

// release drops one pin; the last lets the stripes go.
func (h *lateHold) release() {
	if h.left.Add(-1) == 0 {
		h.done()
	}
}

// undo sends r, owner-checked deletes of what a late reply created, to
// node i alone from loop ql (again for a node that answers NOSCRIPT), and
// drops that reply's pin once it is answered. It may be called off the
// loop.
func (h *lateHold) undo(ql *qloop, db, i int, r *req, again func(int, nodeReply) *req) {
	if ql.l.Execute(func() {
		ql.run(db, only(i, r), again, time.Time{}, func([]nodeReply, time.Duration) { h.release() })
	}) != nil {
		h.release() // the loop is gone (Close): its connections with it
	}
}

// lateUndo judges node i's late reply to a failed acquire or acquiring
// script that holds its stripes for it (latehold.go): what the reply says
// it created there is deleted there, owner-checked, and the reply's pin
// dropped once that is answered. A NOSCRIPT ran nothing; a node that
// failed is repaired when its connection breaks.
func (lo *lop) lateUndo(i int, vals []backend.Value, err error) {
	if lo.kind == kindSet {
		if lateWrote(false, vals, err, true) {
			r, again := undoRequest(lo.key, lo.token)
			lo.hold.undo(lo.ql, lo.db, i, r, again)
			return
		}
	} else if c := lateCreated(lo.keys, lo.args, lo.watch, lo.told, true, vals, err); c != nil {
		created := make([]map[string]string, len(lo.replies))
		created[i] = c
		lo.hold.undo(lo.ql, lo.db, i, undoRequests(created, createdCount(created), true, lo.ql.b.q)[i], nil)
		return
	}
	lo.hold.release()
}

// unpin lets the stripes go once the decision's undos are done: at once,
// or with the last pin of its hold for late replies (lateHold).
func (lo *lop) unpin() {
	if lo.hold != nil {
		lo.hold.release()
		return
	}
	lo.releaseStripes()
}
