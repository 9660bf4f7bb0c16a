package quorum

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// One order per key on every node. Each node must run this proxy's writes
// of a key in the order they were decided in, or two nodes that ran
// different parts of the history can agree on a state no client was told
// of. The stripes (stripe.go) send one write of a key at a time, but an
// operation ends once a majority answered: a node that has not run it
// yet (paused, slow) gets the next one too, and when that one travels on
// another loop's connection (a line), the node may run it first. With
// values that repeat across clients that is a wrong answer, not only a
// lost vote: a refused `SET k 1 NX` run late on one node, beside another
// that has not run the release before it, made a majority for `SET k 1
// XX` on a key just released (TestLateWritesAreNotVotes).
//
// So a write goes to a node only on the line that carries the node's
// unanswered writes of its keys' stripes, if there are any: one line runs
// in order. A write from another line waits until the node has answered
// them (parked, sent on its own line then, in the order it was decided),
// while the other nodes decide it; a healthy node answers within
// microseconds, and a paused one runs the writes waiting for it, in order,
// once it is back. A write of several stripes (a script of several keys)
// waits in the queue of each and is sent once it has its turn in all of
// them; it is queued in all of them at once, under their locks taken in
// ascending order, so any two writes are queued in the same order
// wherever they meet and no two can wait for each other. Only where
// waiting costs more than it is worth — more than maxParked writes
// waiting for one node's stripe, or a connection that is down — is the
// node left out (errBehind: neither a write nor a refusal, decided by the
// others, as for a node that is down) and the keys repaired on it once it
// has caught up (repair.go). Either way each node runs a part of the
// history in the history's order, never a reordering. (Leaving a node out
// of every write of several stripes that met another line's, as this did
// before, let two nodes each miss a different write of a reader-writer
// lock's keys under load: no two of three then agreed on its state.)

// A write whose connection breaks unanswered may still run on the node
// until the line's next connection has killed the old one, so its hold
// lasts until then; a write never written (its connection down) holds
// nothing past its failure (keepUnsent). Reads neither hold nor wait here
// (they wait for the key's stripe, stripe.go): a decided write ran on Q
// nodes, so Q replies that agree always include one that ran it.

// errBehind: the node has unanswered writes of these keys on another line.
var errBehind = errors.New("quorum: node behind on these keys on another connection")

// maxParked is how many writes may wait for one node's stripe; beyond,
// the node is too far behind to wait for, and is left out (errBehind).
const maxParked = 1024

// lineHold is one node's unanswered writes of one stripe: how many, the
// line they travel on, and the writes from other lines waiting for them
// (parked), in the order they were decided.
type lineHold struct {
	mu     sync.Mutex
	line   *link
	n      int
	moving int       // taken from wait, on their way to their loop's buffer
	wait   []*parked // first come, first sent
}

// parked is a write waiting for its node's earlier writes of its stripe
// on another line: it goes out on its own line once they are answered.
// A write of several stripes waits in each of hs and goes out when need,
// the stripes not granted to it yet, falls to 0.
type parked struct {
	cl   *call
	ln   *lnode
	buf  []byte
	h    *lineHold   // its stripe (one)
	hs   []*lineHold // its stripes (several)
	need atomic.Int32
}

// orderHolds is every node's holds, by node and stripe.
type orderHolds [][256]lineHold

type verdict uint8

const (
	admitted verdict = iota // hold taken: send it now
	waiting                 // parked: sent when its turn comes
	behind                  // neither: leave the node out of it
)

// free reports whether a write on line may go out now. Under h.mu.
func (h *lineHold) free(line *link) bool {
	return h.moving == 0 && len(h.wait) == 0 && (h.n == 0 || h.line == line)
}

// take decides node i's part of a write of stripes (ascending, each once)
// to be sent on ln: its holds are taken (admitted), or it waits its turn
// (waiting: sent by the release that lets it go), or, too many writes
// waiting already or its connection down, it leaves the node out
// (behind).
func (h orderHolds) take(i int, ln *lnode, stripes []uint8, cl *call, buf []byte) verdict {
	hs := &h[i]
	line := ln.lk
	// A connection that is down fails the write at once (its undo kept
	// for the next one, with its hold): it does not wait, nor is it
	// waited for, and a closed loop sends nothing more.
	parkable := ln.state != down && ln.state != closed && !ln.ql.closed
	if len(stripes) == 1 && parkable {
		e := &hs[stripes[0]]
		e.mu.Lock()
		defer e.mu.Unlock()
		switch {
		case e.free(line):
			e.line = line
			e.n++
			return admitted
		case len(e.wait) >= maxParked:
			return behind
		}
		cl.parked = true
		e.wait = append(e.wait, &parked{cl: cl, ln: ln, buf: buf, h: e})
		return waiting
	}
	for _, s := range stripes {
		hs[s].mu.Lock()
	}
	defer func() {
		for _, s := range stripes {
			hs[s].mu.Unlock()
		}
	}()
	free, full := true, false
	for _, s := range stripes {
		free = free && hs[s].free(line)
		full = full || len(hs[s].wait) >= maxParked
	}
	switch {
	case free:
		for _, s := range stripes {
			hs[s].line = line
			hs[s].n++
		}
		return admitted
	case !parkable || full:
		return behind
	}
	// Granted at once where it is free (reserved, as a write on its way,
	// until it goes out), queued where it is not.
	p := &parked{cl: cl, ln: ln, buf: buf, hs: make([]*lineHold, len(stripes))}
	need := int32(0)
	for j, s := range stripes {
		e := &hs[s]
		p.hs[j] = e
		if e.free(line) {
			e.line = line
			e.n++
			e.moving++
			continue
		}
		e.wait = append(e.wait, p)
		need++
	}
	p.need.Store(need)
	cl.parked = true
	return waiting
}

// release lets go of holds taken for one write, and sends the next
// write waiting, if its turn has come.
func (h orderHolds) release(i int, stripes []uint8) {
	for _, s := range stripes {
		h[i][s].drop(1)
	}
}

// drop lets go of n holds.
func (e *lineHold) drop(n int) {
	e.mu.Lock()
	if e.n -= n; e.n <= 0 {
		e.n, e.line = 0, nil
	}
	p := e.next()
	e.mu.Unlock()
	p.launch()
}

// next takes the first write waiting when its turn has come: its hold is
// taken, and it is on its way (moving) until its loop has buffered it. A
// write of several stripes is returned when this was the last of them to
// grant it; until then the stripe stays reserved for it (moving). Under
// e.mu.
func (e *lineHold) next() *parked {
	if e.moving > 0 || len(e.wait) == 0 {
		return nil
	}
	p := e.wait[0]
	if e.n > 0 && e.line != p.ln.lk {
		return nil
	}
	e.wait[0] = nil
	e.wait = e.wait[1:]
	if len(e.wait) == 0 {
		e.wait = nil
	}
	e.line = p.ln.lk
	e.n++
	e.moving++
	if p.hs != nil && p.need.Add(-1) > 0 {
		return nil
	}
	return p
}

// launch sends p on its loop (nil: nothing).
func (p *parked) launch() {
	if p == nil {
		return
	}
	if p.ln.ql.l.Execute(p.send) != nil {
		// The loop is gone: it will not be sent.
		p.cl.finished = true
		p.arrived()
		if p.hs == nil {
			p.h.drop(1)
		}
		for _, e := range p.hs {
			e.drop(1)
		}
	}
}

// send buffers p's write on its loop, in its turn.
func (p *parked) send() {
	cl, ln := p.cl, p.ln
	cl.parked, cl.holds = false, true
	cl.sent = time.Now()
	p.arrived()
	ln.send(cl, p.buf)
	if cl.o.ended() {
		ln.overdue(cl) // its operation stopped waiting: a late write, watched as the others
	}
}

// arrived ends p's move, and sends the next writes waiting if their turn
// has come (of the same line, behind it).
func (p *parked) arrived() {
	if p.hs == nil {
		p.h.arrive()
	}
	for _, e := range p.hs {
		e.arrive()
	}
}

// arrive ends the move of the write that had its turn in e.
func (e *lineHold) arrive() {
	e.mu.Lock()
	e.moving--
	q := e.next()
	e.mu.Unlock()
	q.launch()
}

// stripeCounts counts holds by stripe: those of a line's connections
// that were broken, until the next one has killed them.
type stripeCounts struct {
	n   [256]int32
	any bool
}

func (c *stripeCounts) add(stripes []uint8) {
	for _, s := range stripes {
		c.n[s]++
		c.any = true
	}
}

func (c *stripeCounts) merge(o *stripeCounts) {
	if !o.any {
		return
	}
	for s, n := range o.n {
		c.n[s] += n
	}
	c.any = true
}

// releaseTo lets node i's holds counted in c go.
func (c *stripeCounts) releaseTo(h orderHolds, i int) {
	if !c.any {
		return
	}
	for s, n := range c.n {
		if n != 0 {
			h[i][s].drop(int(n))
		}
	}
}

// writeStripes appends the stripes of the keys a request writes
// (ascending, each once) to buf: its repair keys, or its undos' keys. A
// request with none (a read) is not ordered.
func writeStripes(buf []uint8, repair []string, undo []undoRec) []uint8 {
	if repair != nil {
		for _, k := range repair {
			buf = addStripe(buf, stripe(k))
		}
		return buf
	}
	for _, u := range undo {
		buf = addStripe(buf, stripe(u.key))
	}
	return buf
}

// release lets go of the holds cl took, if it holds them (once).
func (cl *call) release(h orderHolds) {
	if cl.holds {
		cl.holds = false
		var sb [2]uint8
		h.release(cl.node, writeStripes(sb[:0], cl.repair, cl.undo))
	}
}

// keep moves the holds cl took, if it holds them, to c (once).
func (cl *call) keep(c *stripeCounts) {
	if cl.holds {
		cl.holds = false
		var sb [2]uint8
		c.add(writeStripes(sb[:0], cl.repair, cl.undo))
	}
}

// addStripe adds s to the ascending buf, unless it is there.
func addStripe(buf []uint8, s uint8) []uint8 {
	j, found := slices.BinarySearch(buf, s)
	if found {
		return buf
	}
	return slices.Insert(buf, j, s)
}

// busy reports whether node i has unanswered or waiting writes of key's
// stripe: a repair of the key there waits for them.
func (h orderHolds) busy(i int, key string) bool {
	e := &h[i][stripe(key)]
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n > 0 || e.moving > 0 || len(e.wait) > 0
}

// orderKeys are the keys whose holds a write left out of (errBehind) or
// broken off (a lost connection) is repaired on: repair.go.
func (r *req) orderKeys() []string {
	if r.repair != nil {
		return r.repair
	}
	keys := make([]string, len(r.undo))
	for i, u := range r.undo {
		keys[i] = u.key
	}
	return keys
}
