package quorum

import (
	"errors"
	"slices"
	"sync"
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
// in order. Where they travel on another line, the node is left out of
// this operation (errBehind: neither a write nor a refusal, decided by
// the others, as for a node that is down) and the keys are repaired on it
// once it has caught up (repair.go): it runs a part of the history in the
// history's order, never a reordering. A node that answers in time is
// never behind; a paused one is left out of the keys it is behind on until
// its replies come, as it would be if it were down.
//
// A write whose connection breaks unanswered may still run on the node
// until the line's next connection has killed the old one (link.connect),
// so its hold lasts until then. Reads neither hold nor wait: a decided
// write ran on Q nodes, so Q replies that agree always include one that
// ran it.

// errBehind: the node has unanswered writes of these keys on another line.
var errBehind = errors.New("quorum: node behind on these keys on another connection")

// lineHold is one node's unanswered writes of one stripe: how many, and
// the line they travel on.
type lineHold struct {
	mu   sync.Mutex
	line *link
	n    int
}

// orderHolds is every node's holds, by node and stripe.
type orderHolds [][256]lineHold

// take holds stripes of node i for a write on line and reports true, or
// reports false, holding nothing, when one of them is held on another
// line. stripes are ascending, each once.
func (h orderHolds) take(i int, line *link, stripes []uint8) bool {
	hs := &h[i]
	for k, s := range stripes {
		hs[s].mu.Lock()
		if hs[s].n > 0 && hs[s].line != line {
			for _, t := range stripes[:k+1] {
				hs[t].mu.Unlock()
			}
			return false
		}
	}
	for _, s := range stripes {
		hs[s].line = line
		hs[s].n++
		hs[s].mu.Unlock()
	}
	return true
}

// release lets go of holds taken for one write.
func (h orderHolds) release(i int, stripes []uint8) {
	hs := &h[i]
	for _, s := range stripes {
		hs[s].mu.Lock()
		if hs[s].n--; hs[s].n <= 0 {
			hs[s].n, hs[s].line = 0, nil
		}
		hs[s].mu.Unlock()
	}
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
	hs := &h[i]
	for s, n := range c.n {
		if n == 0 {
			continue
		}
		hs[s].mu.Lock()
		if hs[s].n -= int(n); hs[s].n <= 0 {
			hs[s].n, hs[s].line = 0, nil
		}
		hs[s].mu.Unlock()
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

// behind reports whether node i has unanswered writes of key's stripe
// on any line: a repair of the key there waits for them.
func (h orderHolds) behind(i int, key string) bool {
	hs := &h[i][stripe(key)]
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.n > 0
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
