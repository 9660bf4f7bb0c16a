package quorum

import (
	"errors"
	"slices"
	"sync"
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
// once it is back. Only where waiting costs more than it is worth — a
// write of several stripes, or more than maxParked writes waiting for one
// node's stripe — is the node left out (errBehind: neither a write nor a
// refusal, decided by the others, as for a node that is down) and the keys
// repaired on it once it has caught up (repair.go). Either way each node
// runs a part of the history in the history's order, never a reordering.
//
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
type parked struct {
	cl  *call
	ln  *lnode
	buf []byte
	h   *lineHold
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
// to be sent on ln: its holds are taken (admitted), or, for one stripe,
// it waits its turn (waiting: sent by the release that lets it go), or,
// waiting for several stripes at once being more than it is worth, it
// leaves the node out (behind).
func (h orderHolds) take(i int, ln *lnode, stripes []uint8, cl *call, buf []byte) verdict {
	hs := &h[i]
	line := ln.lk
	// A connection that is down fails the write at once (its undo kept
	// for the next one, with its hold): it does not wait, nor is it
	// waited for, and a closed loop sends nothing more.
	if len(stripes) == 1 && ln.state != down && ln.state != closed && !ln.ql.closed {
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
	for k, s := range stripes {
		hs[s].mu.Lock()
		if !hs[s].free(line) {
			for _, t := range stripes[:k+1] {
				hs[t].mu.Unlock()
			}
			return behind
		}
	}
	for _, s := range stripes {
		hs[s].line = line
		hs[s].n++
		hs[s].mu.Unlock()
	}
	return admitted
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
// taken, and it is on its way (moving) until its loop has buffered it.
// Under e.mu.
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
		p.h.drop(1)
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

// arrived ends p's move, and sends the next write waiting if its turn
// has come (one of the same line, behind it).
func (p *parked) arrived() {
	e := p.h
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
