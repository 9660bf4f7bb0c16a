package quorum

import (
	"maps"
	"slices"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// lop is one operation: the engine's state machine, fed by its loop. The
// node replies go into the embedded op (its deliver classifies them);
// what decides it happens here as events: each reply (op.onLast), the
// deadline (a loop timer), a NOSCRIPT retry. All of it on the loop.
type lop struct {
	op
	ql        *qloop
	db        int
	again     func(int, nodeReply) *req
	retried   []bool
	start     time.Time
	sentAt    time.Time // when the calls being sent are sent: start, or a retry's time (one clock read per batch)
	sending   bool      // inside dispatch or a retry: a reply delivered now is looked at afterwards
	ended     bool
	early     bool              // ended before every node answered: the rest are late replies
	lateStore [inlineNodes]bool // lateWait's storage
	stripes   []int             // the keys' stripes it holds from its start until decided and undone (stripe.go)
	sbuf      [1]int            // stripes' storage for one key
	// What a late reply is judged against (lateReply): the acquire was
	// granted; the script's reply, and whether its vote failed.
	granted   bool
	told      backend.Value
	failed    bool
	hold      *lateHold                                        // its stripes kept until Q or more late replies are judged (latehold.go)
	req       *req                                             // what it sends each node (begin)
	deadline  time.Time                                        // its command's deadline (begin)
	decide    func(replies []nodeReply, elapsed time.Duration) // unless kind says otherwise
	certainFn func(replies []nodeReply) bool                   // whether the replies so far decide it (kindDecide; nil: wait for all)
	failing   func(replies []nodeReply) bool                   // for an acquire (kindDecide): decided and lost, so its grace applies (splitGrace)

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
	holder   *backend.Holder // the client (holders.go)
	splits   int             // the split votes this acquire lost and was sent again after (splitVote)
	grace    bool            // a failing acquire waits for its last replies (splitGrace)
	script   backend.Script
	orig     backend.Script // the client's script (script is wrapped when it may publish)
	keys     []string
	args     [][]byte
	ro       bool
	watch    scriptWatch
	evalDone func(backend.Value, error)
	pubOut   [][2][]byte // the messages a script that publishes sent, once decided (scriptpub.go)

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

// run starts an operation on the loop; decide is called on the loop with
// the replies, once, never from within run.
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
		lo.replies, lo.calls, lo.lateWait = lo.rbuf[:n], lo.cbuf[:n], lo.lateStore[:n]
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
	var cl *call
	if i < inlineNodes && lo.calls[i] == nil && r.cmds.N == 1 { // the first call to node i (a retry gets its own)
		cl = &lo.cls[i]
		*cl = call{vals: lo.vbuf[i][:0]}
	} else {
		cl = &call{vals: make([]backend.Value, 0, r.cmds.N)}
	}
	cl.o, cl.c, cl.node, cl.n, cl.undo, cl.repair, cl.sent, cl.exec, cl.load = &lo.op, ln, i, r.cmds.N, r.undo, r.repair, lo.sentAt, r.exec, r.load
	var sb [2]uint8
	if held := writeStripes(sb[:0], r.repair, r.undo); len(held) > 0 {
		// One order per key on each node (order.go).
		switch lo.ql.b.order.take(i, ln, held, cl, r.cmds.B) {
		case behind:
			lo.ql.b.repairs.add(i, lo.db, r.orderKeys())
			lo.op.deliver(i, nil, errBehind)
			return
		case waiting:
			lo.calls[i] = cl
			lo.quiet = lo.quiet || r.quiet
			return
		}
		cl.holds = true
	}
	lo.calls[i] = cl
	lo.quiet = lo.quiet || r.quiet
	ln.send(cl, r.cmds.B)
}

// answered reports whether every node has answered (or failed).
func (lo *lop) answered() bool {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	return lo.left == 0
}

// progress runs after each node's reply: a node that did not know a
// script is asked again with its source (within the same deadline); the
// operation ends when every node has answered, or as soon as the replies
// so far decide it (certain), so that a slow or paused node costs nothing.
func (lo *lop) progress() {
	if lo.sending || lo.ended {
		return
	}
	again := lo.again
	if lo.kind == kindEval {
		again = func(_ int, r nodeReply) *req { // only called within retries: no allocation
			if at := scriptAt(lo.watch, len(lo.keys)); r.err == nil && len(r.vals) > at && noScript(r.vals[at]) {
				return scriptRequest(lo.script, lo.keys, lo.args, lo.ro, lo.watch, true)
			}
			return nil
		}
	}
	for again != nil {
		retry, reqs, _ := lo.retries(again, &lo.retried)
		if len(retry) == 0 {
			break
		}
		lo.sending = true
		lo.sentAt = time.Now()
		for k, i := range retry {
			lo.send(i, reqs[k])
		}
		lo.sending = false
	}
	switch {
	case lo.answered():
		lo.end()
	case lo.grace:
		// A failing acquire waits out its grace for the rest (splitGrace).
	case lo.certain():
		if lo.failingAcquire() && !lo.restLag() {
			lo.grace = true
			lo.ql.after(time.Now().Add(splitGrace), timerEntry{o: lo})
			return
		}
		lo.early = true
		lo.end()
	}
}

// failingAcquire reports whether the operation is an acquire that cannot
// win any more (its outcome is certain, and not a grant).
func (lo *lop) failingAcquire() bool {
	if lo.kind == kindSet {
		return !lo.ql.b.setWon(lo.replies, true)
	}
	return lo.failing != nil && lo.failing(lo.replies)
}

// restLag reports whether every node still to answer has left a call of
// this loop unanswered longer than splitGrace: a paused, partitioned or
// slow node, whose reply the grace would wait for in vain (a healthy
// node's oldest unanswered call is a few microseconds old). Found by the
// full suite: with the grace waited for a paused node, contended SET NX
// kept half its all-up grant rate.
func (lo *lop) restLag() bool {
	now := time.Now()
	for i, r := range lo.replies {
		if r.done {
			continue
		}
		ln := lo.ql.nodes[i][lo.db]
		if ln == nil || ln.head >= len(ln.pending) || now.Sub(ln.pending[ln.head].sent) < splitGrace {
			return false
		}
	}
	return true
}

// splitGrace is how long an acquire that is failing (N−Q+1 nodes said
// the key is held) waits for the nodes still to answer before it answers
// nil: their replies say whether it wrote there, and so whether it lost a
// split vote, which sends it again (splitVote). Healthy nodes answer
// within it; one that lags already (restLag) is not waited for, and its
// write, if any, is repaired when it comes (lateWrote).
const splitGrace = 2 * time.Millisecond

// certain reports whether the replies so far decide the operation (the
// lock path's own: an acquire, a script).
func (lo *lop) certain() bool {
	switch lo.kind {
	case kindSet:
		return lo.ql.b.setCertain(lo.replies, true)
	case kindEval:
		return lo.ql.b.evalCertain(lo.replies, scriptAt(lo.watch, len(lo.keys)))
	}
	return lo.certainFn != nil && lo.certainFn(lo.replies)
}

// expire is the deadline: the nodes that have not answered count as timed
// out (and their connections hear that they are overdue). After an early
// end, only the connections hear it.
func (lo *lop) expire() {
	if lo.grace && !lo.ended { // a failing acquire's grace ran out (splitGrace)
		lo.early = true
		lo.end()
		return
	}
	if lo.ended {
		if lo.early {
			lo.overdueLate()
		}
		return
	}
	lo.stop(errNodeTimeout, true)
	lo.end()
}

// overdueLate tells the connections of the calls still awaited after an
// early end that they are overdue.
func (lo *lop) overdueLate() {
	for i, w := range lo.lateWait {
		if w && lo.calls[i] != nil {
			lo.calls[i].c.overdue(lo.calls[i])
		}
	}
}

func (lo *lop) end() {
	lo.ended = true
	if lo.early {
		lo.closeEarly()
	} else {
		lo.mu.Lock()
		lo.closed = true
		lo.mu.Unlock()
	}
	lo.ql.b.settle(&lo.op)
	elapsed := time.Since(lo.start)
	switch lo.kind {
	case kindSet:
		ql := lo.ql
		res, err, undo := ql.b.setOutcome(lo.setOpt, true, lo.mode, lo.ttl, lo.replies, elapsed)
		again := splitVote(res, err, undo) && lo.splits < maxSplits && !deadlineNear(lo.deadline)
		if err != nil {
			lo.hold = lo.holdLate(ql.b.q, func() { lo.releaseStripes() })
		}
		if undo != nil {
			ur, uagain := undoRequest(lo.key, lo.token)
			ql.run(lo.db, func(i int) *req {
				if undo[i] {
					return ur
				}
				return nil
			}, uagain, time.Time{}, func([]nodeReply, time.Duration) {
				lo.unpin()
				if again {
					lo.splitOrHeld(res)
				}
			})
		} else {
			lo.unpin()
		}
		if lo.awaitsLate() {
			lo.granted = err == nil && res.Written
			lo.lateFromNowOn()
		}
		if !again {
			if err == nil && res.Written {
				ql.b.grants.record(lo.db, lo.key, lo.token, lo.holder, lo.ttl)
			}
			lo.setDone(res, err)
		}
	case kindEval:
		ql := lo.ql
		v, err, u := ql.b.evalOutcome(lo.keys, lo.args, lo.watch, lo.replies, elapsed)
		if lo.pub != nil {
			lo.pubOut = lo.pubsDecided(v, err)
		}
		if d := time.Duration(ql.b.maxTTL.Load()); err == nil && ql.b.needsCover(d) {
			// The script left a TTL longer than the horizon markers cover:
			// they must before the client hears of it, which blocks, so off
			// the loop (marker.go), and the reply follows on the loop.
			v = cloneValue(v)
			ql.b.late.Go(func() {
				cerr := ql.b.coverTTL(ql.ctx, d)
				ql.exec(func() {
					if cerr != nil {
						undoAll := u // a copy: u captured by value costs no allocation unless this runs
						undoAll.all = true
						lo.finishEval(backend.Value{}, cerr, undoAll)
						return
					}
					lo.finishEval(v, nil, u)
				})
			})
			return
		}
		lo.finishEval(v, err, u)
	default:
		lo.decide(lo.replies, elapsed)
	}
}

// finishEval ends a script on the loop once its reply is known: what it
// did where it does not count (u) is undone (its stripes are held until
// then), late replies are judged from now on, and the client hears the
// reply.
func (lo *lop) finishEval(v backend.Value, err error, u evalUndo) {
	ql := lo.ql
	again := lo.splitScript(err, u)
	if lo.watch == watchKeys && (err != nil || u.all) {
		lo.hold = lo.holdLate(ql.b.q, func() { lo.releaseStripes() })
	}
	if undos := u.requests(ql.b.q); undos != nil {
		ql.run(lo.db, func(i int) *req { return undos[i] }, nil, time.Time{}, func(replies []nodeReply, _ time.Duration) {
			lo.unpin()
			if !again {
				return
			}
			if restoredAll(replies, u.changes) {
				lo.retryEval()
				return
			}
			lo.evalDone(v, err)
		})
	} else {
		lo.unpin()
		again = false
	}
	// awaitsLate, not lateWait alone: while the reply waited for the
	// horizon markers, a late reply may have come already (kept in
	// lateBuf, its lateWait cleared). Found when EXEC moved onto the
	// loops: a refused transaction's write on the third node stayed.
	if lo.pubOut != nil && !u.all {
		ql.deliverPubs(lo.pubOut)
	}
	if lo.awaitsLate() {
		// A late reply may come after the read buffer v points into was
		// reused.
		lo.told, lo.failed = cloneValue(v), u.all || err != nil
		lo.lateFromNowOn()
	}
	if !again {
		if err == nil && !u.all {
			for _, g := range u.granted {
				ql.b.grants.record(lo.db, g.key, g.token, lo.holder, g.ttl)
			}
		}
		lo.evalDone(v, err)
	}
}

// splitScript reports a script watched by values that every node ran
// (no node failed) with no reply agreed: a split among scripts acquiring
// the same key at once, such as Redisson's lock script, which answers the
// other holder's PTTL where it finds the key taken. Everything it changed
// is put back on every node; when each restore finds the node as the
// script left it, the script left no trace and is sent again after a
// short pause (splitVote says why; a script watched by keys may have done
// more than it created, and is not).
func (lo *lop) splitScript(err error, u evalUndo) bool {
	if err == nil || !u.all || lo.watch != watchValues || lo.splits >= maxSplits || deadlineNear(lo.deadline) {
		return false
	}
	for _, r := range lo.replies {
		if !r.done || r.err != nil {
			return false
		}
	}
	return true
}

// restoredAll reports whether each restore put back every key it was
// given (restoreScript answers how many it did).
func restoredAll(replies []nodeReply, changes [][]valueChange) bool {
	for i, r := range replies {
		if len(changes[i]) == 0 {
			continue
		}
		if v, ok := one(r); !ok || v.Kind != backend.KindInt || v.Int != int64(len(changes[i])) {
			return false
		}
	}
	return true
}

// retryEval sends a script that lost a split again, after a short random
// pause, as a new operation (splitScript).
func (lo *lop) retryEval() {
	ql := lo.ql
	time.AfterFunc(splitPause(lo.splits+1), func() {
		if ql.l.Execute(func() {
			n := ql.startEval(lo.holder, lo.db, lo.orig, lo.keys, lo.args, lo.ro, lo.watch, lo.pub != nil, lo.deadline, lo.evalDone)
			n.splits = lo.splits + 1
		}) != nil {
			lo.evalDone(backend.Value{}, errClosed)
		}
	})
}

// lateFromNowOn sends the replies that come after the end to lateReply.
func (lo *lop) lateFromNowOn() {
	lo.mu.Lock()
	lo.lateTo = lo
	buf := lo.lateBuf // those that came while the reply waited for the horizon markers
	lo.lateBuf = nil
	lo.mu.Unlock()
	for _, r := range buf {
		lo.lateReply(r.node, r.vals, r.err)
	}
}

// lateReply judges node i's reply that came after the operation ended
// against what the client was told, on the loop: a write or a created key
// the client was not told of is repaired there (lateWrote), or undone
// when the operation holds its keys for its late replies (lateUndo); a script the
// node did not know is run there now, as it would have been before the
// vote ended, and judged the same way.
func (lo *lop) lateReply(i int, vals []backend.Value, err error) {
	ql := lo.ql
	if lo.hold != nil {
		lo.lateUndo(i, vals, err)
		return
	}
	switch lo.kind {
	case kindSet:
		if lateWrote(lo.granted, vals, err, true) {
			ql.b.repairs.add(i, lo.db, []string{lo.key})
		}
	case kindEval:
		if at := scriptAt(lo.watch, len(lo.keys)); err == nil && len(vals) > at && noScript(vals[at]) {
			r := scriptRequest(lo.script, lo.keys, lo.args, lo.ro, lo.watch, true)
			ql.run(lo.db, only(i, r), nil, time.Time{}, func(replies []nodeReply, _ time.Duration) {
				if lo.pub != nil && replies[i].err == nil {
					lo.pub.unwrap(replies[i].vals)
				}
				lo.lateReply(i, replies[i].vals, replies[i].err)
			})
			return
		}
		if lo.watch == watchValues {
			if c := lateChanges(lo.keys, lo.told, lo.failed, vals, err); c != nil {
				ql.run(lo.db, only(i, restoreRequest(c)), nil, time.Time{}, func([]nodeReply, time.Duration) {})
			}
			return
		}
		ql.b.repairs.add(i, lo.db, slices.Collect(maps.Keys(lateCreated(lo.keys, lo.args, lo.watch, lo.told, lo.failed, vals, err))))
	}
}

// only sends r to node i alone.
func only(i int, r *req) func(int) *req {
	return func(j int) *req {
		if j == i {
			return r
		}
		return nil
	}
}

var _ backend.LoopBackend = (*qloop)(nil)

// splitOrHeld ends an acquire that answered nil having written on some
// nodes, once those writes are undone: the answer is nil when Q nodes hold
// one token (someone holds the lock; ours wrote where that holder's write
// had not come yet), else it was a split and the acquire is sent again.
func (lo *lop) splitOrHeld(lost backend.SetResult) {
	r := &req{}
	r.cmds.Strs("get", lo.key)
	lo.ql.run(lo.db, same(r), nil, lo.deadline, func(replies []nodeReply, _ time.Duration) {
		if lo.ql.b.heldByOne(replies) {
			lo.setDone(lost, nil)
			return
		}
		lo.retrySet(lost)
	})
}

// retrySet sends an acquire that lost a split vote (splitVote) again,
// once its writes are undone and after a short random pause, as a new
// operation; lost stands for its answer should the loop be gone by then.
func (lo *lop) retrySet(lost backend.SetResult) {
	ql := lo.ql
	n := &lop{ql: ql, db: lo.db, kind: kindSet, key: lo.key, token: lo.token, setOpt: lo.setOpt, mode: lo.mode, ttl: lo.ttl, holder: lo.holder,
		setDone: lo.setDone, splits: lo.splits + 1, req: lo.req, deadline: lo.deadline}
	time.AfterFunc(splitPause(n.splits), func() {
		if ql.l.Execute(func() { n.startLocked([]string{n.key}) }) != nil {
			n.setDone(lost, nil)
		}
	})
}

// StartSet implements backend.LoopBackend for an acquire: SET key token NX
// with a relative expiry (PX, EX), nothing else. It is decided by the same
// rules as Set (setOutcome); an acquire to undo is undone by an operation
// queued on the same connections before the client hears the outcome, so
// on each node the undo runs after the acquire and before anything the
// client sends next.
func (ql *qloop) StartSet(h *backend.Holder, db int, key string, token []byte, o backend.SetOptions, deadline time.Time, done func(backend.SetResult, error)) bool {
	if o.Cond != backend.IfAbsent || o.Get || o.KeepTTL || o.Expiry.TTL <= 0 || !o.Expiry.At.IsZero() || !ql.usable(db) {
		return false
	}
	mode, val, ttl := setExpiry(o)
	if ql.b.overMax(ttl) {
		err := ql.b.errOverMax(ttl)
		ql.exec(func() { done(backend.SetResult{}, err) }) // never from within its own Start
		return true
	}
	r, _ := setRequest(key, token, o, true, mode, val) // plain: no script, no fallback
	lo := &lop{ql: ql, db: db, kind: kindSet, key: key, token: token, setOpt: o, mode: mode, ttl: ttl, setDone: done, holder: h}
	lo.req, lo.deadline = r, deadline
	if ql.b.needsCover(ttl) {
		// The horizon markers must cover the TTL before it can be granted,
		// which blocks: off the loop (marker.go), then the acquire on it.
		ql.b.late.Go(func() {
			err := ql.b.coverTTL(ql.ctx, ttl)
			ql.exec(func() {
				if err != nil {
					done(backend.SetResult{}, err)
					return
				}
				lo.startLocked([]string{key})
			})
		})
		return true
	}
	lo.startLocked([]string{key})
	return true
}

// StartEval implements backend.LoopBackend for a lock script whose class
// is known (Classes.CachedLock, onNodes; a script's first call, which
// classifies it, a Guarded script's call, which runs it on the model, and
// every script that runs on the model (evalmodel.go) are blocking calls,
// made off the loop). It sends what Eval sends — the script alone, with
// each key's PTTL after an extend, with the reads around an acquire — and
// decides by the same rules (evalOutcome). Like every lock operation it holds its
// keys' stripes (stripe.go) from send until decided and undone, queued on
// its loop while another operation holds them.
func (ql *qloop) StartEval(h *backend.Holder, db int, s backend.Script, keys []string, args [][]byte, ro bool, deadline time.Time, done func(backend.Value, error)) bool {
	refused, publishes, read := ql.b.classes.RefusalCached(s)
	if ro || len(keys) == 0 || !read || !ql.usable(db) {
		return false // a script on the model runs off the loop (Eval)
	}
	if refused != nil {
		ql.exec(func() { done(backend.Value{}, refused) })
		return true
	}
	cl, lock, ok := ql.b.classes.CachedLock(s, keys, args)
	if !ok || !onNodes(cl, lock) {
		return false
	}
	ql.startEval(h, db, s, keys, args, ro, watchFor(cl), publishes, deadline, done)
	return true
}

// startEval starts a script whose watch is known: StartEval's, and a
// blocking Eval's on the Backend's own loops.
func (ql *qloop) startEval(h *backend.Holder, db int, s backend.Script, keys []string, args [][]byte, ro bool, w scriptWatch, publishes bool, deadline time.Time, done func(backend.Value, error)) *lop {
	lo := &lop{ql: ql, db: db, kind: kindEval, script: s, orig: s, keys: keys, args: args, ro: ro, watch: w, evalDone: done, holder: h}
	if publishes { // it runs wrapped, its messages held back until the vote (scriptpub.go)
		lo.script = ql.b.pubScripts.of(s)
		lo.pub = &pubCall{at: scriptAt(w, len(keys)), wrapped: []byte(lo.script.SHA1), sha: []byte(s.SHA1)}
		lo.pubs = make([]backend.Value, len(ql.b.nodes))
	}
	lo.req, lo.deadline = scriptRequest(lo.script, lo.keys, lo.args, lo.ro, lo.watch, false), deadline
	lo.startLocked(keys)
	return lo
}

// startLocked begins the operation once it holds its keys' stripes: at
// once when they are free, else on its loop when they are handed to it.
func (lo *lop) startLocked(keys []string) {
	lo.stripes = stripes(lo.sbuf[:0], keys)
	if lockStripes(&lo.ql.b.keys, lo.stripes, lo, false) {
		lo.begin()
	}
}

// begin sends the operation's request to every node.
func (lo *lop) begin() { lo.ql.runOp(lo, same(lo.req), lo.deadline) }

// stripeReady implements stripeWaiter: the operation holds its stripes
// now and begins on its loop. A loop that is gone lets them go again.
func (lo *lop) stripeReady() {
	if lo.ql.l.Execute(lo.begin) != nil {
		lo.releaseStripes()
	}
}

// releaseStripes lets the operation's stripes go (once).
func (lo *lop) releaseStripes() {
	lo.ql.b.unlockStripes(lo.stripes, false)
	lo.stripes = nil
}

// StartGet implements backend.LoopBackend: a majority read, decided as Get
// decides (getOutcome).
func (ql *qloop) StartGet(db int, key string, deadline time.Time, done func([]byte, bool, error)) bool {
	if !ql.usable(db) {
		return false
	}
	ql.startRead(db, "get", key, deadline, func(replies []nodeReply) { done(ql.b.getOutcome(replies)) })
	return true
}

// StartPTTL implements backend.LoopBackend: decided as PTTL decides
// (pttlOutcome).
func (ql *qloop) StartPTTL(db int, key string, deadline time.Time, done func(int64, error)) bool {
	if !ql.usable(db) {
		return false
	}
	ql.startRead(db, "pttl", key, deadline, func(replies []nodeReply) { done(ql.b.pttlOutcome(replies)) })
	return true
}

// loopRead is a read of one key on a loop. It holds the key's stripe as a
// reader (stripe.go) from send until decided: it is sent after the write
// before it was decided and undone.
type loopRead struct {
	ql       *qloop
	db       int
	r        req
	deadline time.Time
	idx      [1]int
	decide   func([]nodeReply)
}

// startRead sends cmd key to every node once the key's stripe is free of
// writers, and hands the replies to decide.
func (ql *qloop) startRead(db int, cmd, key string, deadline time.Time, decide func([]nodeReply)) {
	rd := &loopRead{ql: ql, db: db, deadline: deadline, decide: decide}
	rd.r.cmds.Strs(cmd, key)
	rd.idx[0] = int(stripe(key))
	if lockStripes(&ql.b.keys, rd.idx[:], rd, true) {
		rd.begin()
	}
}

func (rd *loopRead) begin() {
	rd.ql.run(rd.db, same(&rd.r), nil, rd.deadline, func(replies []nodeReply, _ time.Duration) {
		rd.ql.b.unlockStripes(rd.idx[:], true)
		rd.decide(replies)
	})
}

// stripeReady implements stripeWaiter: the read holds its stripe now and
// begins on its loop. A loop that is gone lets it go again.
func (rd *loopRead) stripeReady() {
	if rd.ql.l.Execute(rd.begin) != nil {
		rd.ql.b.unlockStripes(rd.idx[:], true)
	}
}
