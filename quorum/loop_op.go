package quorum

import (
	"time"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// lop is one operation on the loop path: fanout's state machine, fed by
// the loop. The node replies go into the embedded op, as on the stream
// path (its deliver classifies them the same way); what fanout waits for
// happens here as events: the last reply (op.onLast), the deadline (a
// loop timer), a NOSCRIPT retry. All of it on the loop.
type lop struct {
	op
	ql      *qloop
	db      int
	again   func(int, nodeReply) *req
	retried []bool
	start   time.Time
	sentAt  time.Time // when the calls being sent are sent: start, or a retry's time (one clock read per batch)
	sending bool      // inside dispatch or a retry: a reply delivered now is looked at afterwards
	ended   bool
	decide  func(replies []nodeReply, elapsed time.Duration) // unless kind says otherwise

	// The lock path's own operations keep what decides them here rather
	// than in a decide closure (an allocation per operation saved): an
	// acquire (kindSet) and a script sent alone (kindEval).
	kind     lopKind
	key      string
	token    []byte
	setOpt   backend.SetOptions
	mode     string
	ttl      time.Duration
	setDone  func(backend.SetResult, error)
	script   backend.Script
	keys     []string
	args     [][]byte
	ro       bool
	evalDone func(backend.Value, error)

	// Storage for the common case (up to inlineNodes nodes, one command
	// each, one call per node): an operation is a handful of allocations,
	// not a dozen.
	rbuf [inlineNodes]nodeReply
	cbuf [inlineNodes]*call
	cls  [inlineNodes]call
	vbuf [inlineNodes][1]backend.Value
}

const inlineNodes = 5

type lopKind uint8

const (
	kindDecide lopKind = iota // decide
	kindSet                   // StartSet's acquire
	kindEval                  // StartEval's script
)

// run starts an operation on the loop, as fanout does on the streams;
// decide is called on the loop with the replies, once, never from within
// run.
func (ql *qloop) run(db int, reqFor func(int) *req, again func(int, nodeReply) *req, deadline time.Time, decide func([]nodeReply, time.Duration)) {
	ql.runOp(&lop{ql: ql, db: db, again: again, decide: decide}, reqFor, deadline)
}

// runOp is run for an operation made by the caller (lo.ql, lo.db and what
// decides it are set).
func (ql *qloop) runOp(lo *lop, reqFor func(int) *req, deadline time.Time) {
	ql.ops.Add(1)
	n := len(ql.b.nodes)
	lo.start = time.Now()
	lo.sentAt = lo.start
	lo.op.left = n
	if n <= inlineNodes {
		lo.replies, lo.calls = lo.rbuf[:n], lo.cbuf[:n]
	} else {
		lo.replies, lo.calls = make([]nodeReply, n), make([]*call, n)
	}
	lo.onLast = lo
	lo.sending = true
	ql.b.dispatch(&lo.op, lo.db, lo.start, reqFor, lo.send)
	lo.sending = false
	at := lo.start.Add(ql.b.cfg.NodeTimeout)
	if !deadline.IsZero() && deadline.Before(at) {
		at = deadline
	}
	ql.after(at, timerEntry{o: lo})
	if lo.answered() {
		// Every node failed at once (down, quarantined): the end runs on
		// the loop's next pass, so the caller is never called back from
		// within its own Start.
		ql.exec(lo.progress)
	}
}

func (lo *lop) send(i int, r *req) {
	ln := lo.ql.node(i, lo.db)
	if lo.ql.b.pending.blocks(ln.st, i, lo.db, r.writes) {
		lo.op.deliver(i, nil, errUndoPending)
		return
	}
	var cl *call
	if i < inlineNodes && lo.calls[i] == nil && r.cmds.N == 1 { // the first call to node i (a retry gets its own)
		cl = &lo.cls[i]
		*cl = call{vals: lo.vbuf[i][:0]}
	} else {
		cl = &call{vals: make([]backend.Value, 0, r.cmds.N)}
	}
	cl.o, cl.c, cl.node, cl.n, cl.undo, cl.sent = &lo.op, ln, i, r.cmds.N, r.undo, lo.sentAt
	lo.calls[i] = cl
	lo.ql.b.pending.add(ln.st, i, lo.db, r.undo, 1)
	ln.send(cl, r.cmds.B)
}

// answered reports whether every node has answered (or failed).
func (lo *lop) answered() bool {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	return lo.left == 0
}

// progress runs when every node has answered: a node that did not know a
// script is asked again with its source (within the same deadline), and
// otherwise the operation ends.
func (lo *lop) progress() {
	if lo.sending || lo.ended {
		return
	}
	again := lo.again
	if lo.kind == kindEval {
		again = func(_ int, r nodeReply) *req { // only called within retries: no allocation
			if r.err == nil && len(r.vals) > 0 && noScript(r.vals[0]) {
				return evalRequest(lo.script, lo.keys, lo.args, lo.ro, false, true)
			}
			return nil
		}
	}
	for again != nil {
		retry, reqs := lo.retries(again, &lo.retried)
		if len(retry) == 0 {
			break
		}
		lo.sending = true
		lo.sentAt = time.Now()
		for k, i := range retry {
			lo.send(i, reqs[k])
		}
		lo.sending = false
		if !lo.answered() {
			return
		}
	}
	lo.end()
}

// expire is the deadline: the nodes that have not answered count as timed
// out (and their connections hear that they are overdue).
func (lo *lop) expire() {
	if lo.ended {
		return
	}
	lo.stop(errNodeTimeout, true)
	lo.end()
}

func (lo *lop) end() {
	lo.ended = true
	lo.mu.Lock()
	lo.closed = true
	lo.mu.Unlock()
	lo.ql.b.settle(&lo.op)
	elapsed := time.Since(lo.start)
	switch lo.kind {
	case kindSet:
		ql := lo.ql
		res, err, undo := ql.b.setOutcome(lo.setOpt, true, lo.mode, lo.ttl, lo.replies, elapsed)
		if undo {
			ur, uagain := undoRequest(lo.key, lo.token)
			ql.run(lo.db, same(ur), uagain, time.Time{}, func([]nodeReply, time.Duration) {})
		}
		lo.setDone(res, err)
	case kindEval:
		// Unwatched, nothing is recorded as created: there is nothing to
		// undo (undoCreated would send nothing).
		v, err, _, _, _ := lo.ql.b.evalOutcome(lo.keys, lo.args, watchNone, 0, lo.replies, elapsed)
		lo.evalDone(v, err)
	default:
		lo.decide(lo.replies, elapsed)
	}
}

var _ backend.LoopBackend = (*qloop)(nil)

// StartSet implements backend.LoopBackend for an acquire: SET key token NX
// with a relative expiry (PX, EX), nothing else. It is decided by the same
// rules as Set (setOutcome); an acquire to undo is undone by an operation
// queued on the same connections before the client hears the outcome, so
// on each node the undo runs after the acquire and before anything the
// client sends next.
func (ql *qloop) StartSet(db int, key string, token []byte, o backend.SetOptions, deadline time.Time, done func(backend.SetResult, error)) bool {
	if o.Cond != backend.IfAbsent || o.Get || o.KeepTTL || o.Expiry.TTL <= 0 || !o.Expiry.At.IsZero() || !ql.usable(db) {
		return false
	}
	mode, val, ttl := setExpiry(o)
	r, _ := setRequest(key, token, o, true, mode, val) // plain: no script, no fallback
	ql.runOp(&lop{ql: ql, db: db, kind: kindSet, key: key, token: token, setOpt: o, mode: mode, ttl: ttl, setDone: done}, same(r), deadline)
	return true
}

// StartEval implements backend.LoopBackend for the scripts sent alone
// (watchCached: releases and reads by what they do, read-only scripts,
// scripts without keys; a script's first call, which classifies it, and
// an extend, which carries PTTL reads, take the stream path): one command
// per node, decided by the same rules as Eval (evalOutcome).
func (ql *qloop) StartEval(db int, s backend.Script, keys []string, args [][]byte, ro bool, deadline time.Time, done func(backend.Value, error)) bool {
	if w, ok := ql.b.watchCached(s, keys, args, ro); !ok || w != watchNone || !ql.usable(db) {
		return false
	}
	// evalPlan's request and NOSCRIPT fallback for watchNone, without its
	// closures (kindEval).
	r := evalRequest(s, keys, args, ro, false, false)
	ql.runOp(&lop{ql: ql, db: db, kind: kindEval, script: s, keys: keys, args: args, ro: ro, evalDone: done}, same(r), deadline)
	return true
}

// StartGet implements backend.LoopBackend: a majority read, decided as Get
// decides (getOutcome).
func (ql *qloop) StartGet(db int, key string, deadline time.Time, done func([]byte, bool, error)) bool {
	if !ql.usable(db) {
		return false
	}
	r := &req{}
	r.cmds.Strs("get", key)
	ql.run(db, same(r), nil, deadline, func(replies []nodeReply, _ time.Duration) {
		done(ql.b.getOutcome(replies))
	})
	return true
}

// StartPTTL implements backend.LoopBackend: decided as PTTL decides
// (pttlOutcome).
func (ql *qloop) StartPTTL(db int, key string, deadline time.Time, done func(int64, error)) bool {
	if !ql.usable(db) {
		return false
	}
	r := &req{}
	r.cmds.Strs("pttl", key)
	ql.run(db, same(r), nil, deadline, func(replies []nodeReply, _ time.Duration) {
		done(ql.b.pttlOutcome(replies))
	})
	return true
}
