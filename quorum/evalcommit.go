package quorum

// The commit of a script's round on the model path (evalmodel.go): the
// apply script sent to every node read, Q counted nodes deciding, what a
// failed commit applied put back, and the reads and replies that come
// after the decision.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// commit writes changes to every node that was read (commit.go) and
// decides: ok when Q nodes that showed the snapshot applied, in time.
// Otherwise what was applied is put back before it returns; lost reports
// that nodes refused and none failed (another writer got there first), so
// the script may run again. Either way the round's leases end: with the
// put-backs, or just after a commit that succeeded.
func (b *Backend) commit(ctx context.Context, db int, snap *snapshot, read []dbKey, changes []keyChange, now int64, start time.Time, nonce string, leasedOn []bool) (ok, lost bool, err error) {
	c := &commitRound{b: b, db: db, snap: snap, read: read, changes: changes, now: now, nonce: nonce, key: read[0].key, n: len(b.nodes)}
	c.takeLate()
	ws, fs, counts := c.plan()
	// It ends once Q counted nodes applied. A node heard from later is
	// judged then (onLate).
	certain := func(replies []nodeReply) bool {
		yes := 0
		for i, r := range replies {
			if done, _, _ := parseApplied(r, len(changes)); counts[i] && done {
				yes++
			}
		}
		// A failure waits for every node (or its timeout): the keys'
		// stripes are held until what it applied is put back, so that the
		// next operation of this instance on them, which may take its
		// leases over, never reads it.
		return yes >= b.q
	}
	o, replies := b.fanoutUntil(context.WithoutCancel(ctx), db, c.key, func(i int) *req {
		if fs[i] == nil {
			return nil
		}
		return fs[i].request(nonce, false)
	}, finishFallback(fs, nonce), certain)
	elapsed := time.Since(start)
	t := c.tally(replies, fs, counts)
	late := ""
	if t.applied >= b.q {
		late = b.tooLate(changes, now, elapsed)
	}
	success := t.applied >= b.q && late == ""
	c.decide(success)
	o.onLate(c.onLate(ws, success))
	ends := c.ends(success, leasedOn, ws, t)
	if success {
		b.finishLater(db, c.key, nonce, ends)
		if t.stale {
			b.resyncLater(db, read)
		}
		return true, false, nil
	}
	b.finish(ctx, db, c.key, nonce, ends)
	if late != "" {
		return false, false, &backend.ReplyError{Reply: late}
	}
	if t.refusals > 0 && t.failures == 0 {
		// Nodes no longer held what was read there (a write that takes no
		// lease, a lease run out): tried again.
		return false, true, &backend.ReplyError{Reply: fmt.Sprintf(
			"TRYAGAIN quorum not reached: %d of %d nodes changed the script's keys meanwhile; nothing was kept", t.refusals, c.n)}
	}
	return false, false, b.errNoQuorum(replies)
}

// commitRound is one commit's state, shared by its steps and by the
// replies and reads that come after its decision (commit).
type commitRound struct {
	b       *Backend
	db      int
	snap    *snapshot
	read    []dbKey
	changes []keyChange
	now     int64
	nonce   string
	key     string
	n       int

	mu      sync.Mutex
	decided bool
	won     bool
	waiting []lateRead // reads that came before the decision, served by decide
}

// lateRead is a node's read that came after the snapshot was decided.
type lateRead struct {
	i  int
	nk []nodeKey
}

// repair marks node i's changed keys for repair (repair.go): its outcome
// is unknown. Repairs are by database.
func (c *commitRound) repair(i int) {
	for _, ch := range c.changes {
		if !ch.keep {
			c.b.repairs.add(i, c.read[ch.j].db, []string{c.read[ch.j].key})
		}
	}
}

// writesFor is what the commit writes on a node that showed nk: nil when
// a value there could not be put back.
func (c *commitRound) writesFor(nk []nodeKey) []keyWrite {
	w := make([]keyWrite, 0, len(c.changes))
	for _, ch := range c.changes {
		old := nk[ch.j]
		if !puttable(old.typ) {
			return nil // a value no put-back could restore: left alone
		}
		kw := keyWrite{db: c.read[ch.j].db, key: c.read[ch.j].key, digest: old.digest, at: old.at, st: ch.after, mode: 'n'}
		switch {
		case ch.keep:
			kw.st = keyState{typ: "keep"}
		case ch.after.typ == "none" || ch.deadline == 0:
		case ch.deadline == ch.oldDue && old.at > 0 && c.b.agrees(c.snap, ch.j, old):
			kw.mode, kw.exp = 'a', old.at // an expiry the script kept: the node's own
		case ch.abs:
			kw.mode, kw.exp = 'a', ch.deadline // as the script gave it
		default:
			kw.mode, kw.exp = 'p', max(ch.deadline-c.now, 1)
		}
		w = append(w, kw)
	}
	return w
}

// lateDone serves a node whose read came after the snapshot was decided:
// written (and its lease ended) once the commit succeeded, its lease
// ended once it failed.
func (c *commitRound) lateDone(i int, nk []nodeKey, success bool) {
	w := c.writesFor(nk)
	if !success || w == nil {
		c.b.finishLater(c.db, c.key, c.nonce, onlyFinish(c.n, i, &nodeFinish{keys: c.read}))
		return
	}
	c.b.late.Go(func() {
		replies := c.b.finish(context.Background(), c.db, c.key, c.nonce, onlyFinish(c.n, i, &nodeFinish{ws: w, mode: applyLate}))
		if _, refused, _ := parseApplied(replies[i], len(c.changes)); refused {
			c.b.resyncLater(c.db, c.read) // it changed meanwhile: brought level from a fresh read
		}
	})
}

// takeLate includes the late reads that came already; one that comes
// later waits for the decision (decide), or is served by it.
func (c *commitRound) takeLate() {
	for i, nk := range c.snap.late.take(func(i int, nk []nodeKey) {
		c.mu.Lock()
		if !c.decided {
			c.waiting = append(c.waiting, lateRead{i, nk})
			c.mu.Unlock()
			return
		}
		ok := c.won
		c.mu.Unlock()
		c.lateDone(i, nk, ok)
	}, true) {
		if nk != nil && c.snap.nodes[i] == nil {
			c.snap.nodes[i] = nk
		}
	}
}

// decide records the outcome and serves the late reads that waited for it.
func (c *commitRound) decide(success bool) {
	c.mu.Lock()
	c.decided, c.won = true, success
	reads := c.waiting
	c.mu.Unlock()
	for _, lr := range reads {
		c.lateDone(lr.i, lr.nk, success)
	}
}

// plan is each node's writes and request, and whether its applying counts:
// only a node that showed the snapshot's state of every key read counts
// toward Q (the script's writes rest on that state). Another node is
// written too where it still shows what it showed (it is brought up to
// date), but its applying decides nothing. A node not read is not
// written: nothing to check against.
func (c *commitRound) plan() (ws [][]keyWrite, fs []*nodeFinish, counts []bool) {
	ws, fs, counts = make([][]keyWrite, c.n), make([]*nodeFinish, c.n), make([]bool, c.n)
	for i := range c.n {
		nk := c.snap.nodes[i]
		if nk == nil {
			continue
		}
		ws[i] = c.writesFor(nk)
		if ws[i] != nil {
			fs[i] = &nodeFinish{ws: ws[i]}
		}
		counts[i] = ws[i] != nil
		for j := range c.read {
			counts[i] = counts[i] && c.b.agrees(c.snap, j, nk[j])
		}
	}
	return ws, fs, counts
}

// commitTally is what the nodes answered to a commit by its decision.
type commitTally struct {
	applied, refusals, failures int
	stale                       bool         // a node to bring level afterwards (resync)
	afters                      [][]keyWrite // what each node that applied holds now
	pending                     []bool       // a node whose reply may still come
}

// tally counts the replies: a node read that refused, or one another
// operation had leased (not read, so not written), is stale.
func (c *commitRound) tally(replies []nodeReply, fs []*nodeFinish, counts []bool) commitTally {
	t := commitTally{stale: slices.Contains(c.snap.busy, true), afters: make([][]keyWrite, c.n), pending: make([]bool, c.n)}
	for i, r := range replies {
		if fs[i] == nil {
			continue
		}
		if !r.done {
			t.pending[i] = true
			continue
		}
		done, refused, after := parseApplied(r, len(c.changes))
		switch {
		case done:
			if counts[i] {
				t.applied++
			}
			t.afters[i] = after
		case refused:
			t.refusals++
			t.stale = true
		case r.err != nil && r.err != errNotSent && r.err != errQuarantined:
			t.failures++
			t.pending[i] = true // its reply may still come (onLate)
			c.repair(i)
		}
	}
	return t
}

// onLate judges a node heard from after the end: where the commit failed,
// what it applied there is put back (its lease ended with it); where it
// succeeded, its lease ended already.
func (c *commitRound) onLate(ws [][]keyWrite, success bool) func(i int, vals []backend.Value, lerr error) {
	return func(i int, vals []backend.Value, lerr error) {
		done, refused, after := parseApplied(nodeReply{vals: vals, err: lerr, done: true}, len(c.changes))
		if refused && success {
			c.b.resyncLater(c.db, c.read)
		}
		switch {
		case done && !success:
			c.b.finishLater(c.db, c.key, c.nonce, onlyFinish(c.n, i, &nodeFinish{ws: putBack(ws[i], after, keyStates(c.snap.nodes[i], c.changes)), mode: applyPutBack}))
		case !success:
			c.b.finishLater(c.db, c.key, c.nonce, onlyFinish(c.n, i, &nodeFinish{keys: c.read}))
		}
		if !done && lerr != nil {
			c.repair(i)
		}
	}
}

// ends is how the round's leases end on each node: every node read, but
// one whose commit is still unanswered after a failure (its late reply
// puts back: onLate), with a put-back where a failed commit applied.
func (c *commitRound) ends(success bool, leasedOn []bool, ws [][]keyWrite, t commitTally) []*nodeFinish {
	ends := make([]*nodeFinish, c.n)
	for i := range c.n {
		switch {
		case !leasedOn[i] || c.snap.nodes[i] == nil:
			// not leased, or its read is still to come (lateReads)
		case !success && t.afters[i] != nil:
			ends[i] = &nodeFinish{ws: putBack(ws[i], t.afters[i], keyStates(c.snap.nodes[i], c.changes)), mode: applyPutBack}
		case !success && t.pending[i]:
		default:
			ends[i] = &nodeFinish{keys: c.read}
		}
	}
	return ends
}
