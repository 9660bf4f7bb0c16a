package quorum

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// Eval implements backend.Backend. A client's script runs once, in
// lockproxy, on the model (evalmodel.go): its keys read from the nodes,
// its changes committed by compare-and-set. The nodes never run it.
//
// The one exception is a lock script recognised by what it does
// (onNodes, classify.go; never a function, FCALL, whose library is this
// instance's alone): an owner-checked release or extend, or an
// acquire that writes only tokens from its ARGV (node redlock's,
// bsm/redislock's multi-key acquires). Those keep the one-round-trip path
// below, where each node runs the script and the reply Q nodes agree on
// is returned.
//
// On that path, an acquire is watched: each node reads the script's KEYS
// just before and just after it, in the same pipeline, and reports the
// keys the script created (absent before, holding one of the script's
// ARGV after). A key created on fewer than Q nodes, or on any node when
// no reply reached a majority, is removed again on those nodes with an
// owner-checked delete: a failed acquire leaves nothing behind, as an
// undone SET NX does. A release is one command per node, an extend the
// script and a PTTL per key (for the restart quarantine).
func (b *Backend) Eval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	refused, publishes := b.classes.Refusal(s)
	if refused != nil {
		return backend.Value{}, refused // beyond the lock model: refused as on every backend (luascripts/refuse.go)
	}
	if ro || len(keys) == 0 || s.Function != "" {
		// a function (FCALL) is never a node's: its library is this instance's
		return b.evalModel(ctx, db, s, keys, args, ro)
	}
	cl, lock := b.classes.Lock(ctx, s, keys, args)
	if !onNodes(cl, lock) {
		return b.evalModel(ctx, db, s, keys, args, ro)
	}
	return b.runEval(ctx, db, s, keys, args, ro, watchFor(cl), publishes)
}

// runEval runs a script watched by w on one of the Backend's own loops and
// waits for its outcome. The operation is the event loops' own (lop,
// kindEval): it ends within the node timeout, so it is waited for even
// when ctx ends first.
func (b *Backend) runEval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool, w scriptWatch, publishes bool) (backend.Value, error) {
	type result struct {
		v   backend.Value
		err error
	}
	end := make(chan result, 1)
	// A script that names no key may still touch keys (named in ARGV, or
	// after a SELECT), and no stripe orders it: all such scripts go out
	// on one loop, so that every node runs them in one order. Spread over
	// the loops in turn, three moving one token around a ring reached the
	// nodes in three orders and answered 3, 2 and 1, which only the time
	// vote (voteTime) passed off as an agreement.
	ql := b.lp.own[0]
	if len(keys) > 0 {
		ql = b.ownLoop(keys[0])
	}
	deadline, _ := ctx.Deadline()
	if ql.l.Execute(func() {
		ql.startEval(backend.HolderOf(ctx), db, s, keys, args, ro, w, publishes, deadline, func(v backend.Value, err error) { end <- result{v, err} })
	}) != nil {
		_, replies := b.closedOp()
		return backend.Value{}, b.errNoQuorum(replies)
	}
	r := <-end
	return r.v, r.err
}

// evalCertain reports whether a script's replies so far decide its reply:
// Q nodes gave the same one. The nodes still to answer cannot change it;
// what they did is judged when they answer (lateCreated). Replies that
// would only settle by time (voteTime) wait for every node: a value
// majority may still form (a release's 1, 0, 1).
func (b *Backend) evalCertain(replies []nodeReply, at int) bool {
	var buf [inlineNodes]backend.Value
	var okBuf [inlineNodes]bool
	vals, ok := buf[:0], okBuf[:0]
	if len(replies) > inlineNodes {
		vals, ok = make([]backend.Value, 0, len(replies)), make([]bool, 0, len(replies))
	}
	for _, r := range replies {
		good := r.done && r.err == nil && len(r.vals) > at && !noScript(r.vals[at])
		var v backend.Value
		if good {
			v = r.vals[at]
		}
		vals, ok = append(vals, v), append(ok, good)
	}
	_, agreed := b.voteValue(vals, ok)
	return agreed
}

// lateCreated returns the keys a script created on a node whose reply came
// after the vote ended and whose client was not told of it, with the
// token each holds there: every key it created there, unless its reply is
// the one the client was told (told, and the vote did not fail). They are
// repaired, not undone, for the reason lateWrote gives — unless the
// operation holds its keys for its late replies (latehold.go).
func lateCreated(keys []string, args [][]byte, w scriptWatch, told backend.Value, failed bool, vals []backend.Value, err error) map[string]string {
	if w != watchKeys || err != nil || len(vals) != 3+len(keys) {
		return nil
	}
	c := createdKeys(keys, vals[0], vals[2], args)
	if len(c) == 0 || (!failed && sameValue(vals[1], told)) {
		return nil
	}
	return c
}

// scriptRequest is a script call's request to each node under w: the
// script, with the reads around it (watchKeys), each key's PTTL after it
// (watchTTLs), or in a transaction with each key's value before and after
// it (watchValues, values.go).
func scriptRequest(s backend.Script, keys []string, args [][]byte, ro bool, w scriptWatch, eval bool) *req {
	switch w {
	case watchTTLs:
		return appendTTLs(evalRequest(s, keys, args, ro, false, eval), keys)
	case watchValues:
		return valuesRequest(s, keys, args, ro, eval)
	}
	return evalRequest(s, keys, args, ro, w == watchKeys, eval)
}

// scriptAt is where the script's own reply is among a node's replies
// under w to a call with n keys (after the MGET before it, or the DUMP and
// PEXPIRETIME of each key, when watched).
func scriptAt(w scriptWatch, n int) int {
	switch w {
	case watchKeys:
		return 1
	case watchValues:
		return 2 * n
	}
	return 0
}

// evalUndo is what a script's outcome leaves to put back on the nodes
// before the client hears it. Watched by keys: the keys it created where
// they do not count (created, count: undoRequests). Watched by values:
// what it changed on each node (changes), put back where the node did not
// give the agreed reply (agreed). all: on every node that did something
// (no agreement, or the grant came too late).
type evalUndo struct {
	created []map[string]string
	count   map[string]int
	changes [][]valueChange
	agreed  []bool
	all     bool
	granted []grantedKey // the keys it created on Q nodes that gave the agreed reply (holders.go)
}

// grantedKey is a key a script acquired: its token (nil for a value of
// another type) and TTL.
type grantedKey struct {
	key   string
	token []byte
	ttl   time.Duration
}

// keysGranted are the keys a script watched by keys created, with one
// token, on Q of the nodes that answered v.
func (b *Backend) keysGranted(keys []string, args [][]byte, at int, replies []nodeReply, v backend.Value) []grantedKey {
	type tk struct{ key, token string }
	count := map[tk]int{}
	ttl := map[tk]time.Duration{}
	for _, r := range replies {
		if r.err != nil || len(r.vals) != 3+len(keys) || !sameValue(r.vals[at], v) {
			continue
		}
		for k, tok := range createdKeys(keys, r.vals[0], r.vals[2], args) {
			count[tk{k, tok}]++
			for j, kk := range keys {
				if kk == k && r.vals[3+j].Kind == backend.KindInt && r.vals[3+j].Int > 0 {
					ttl[tk{k, tok}] = time.Duration(r.vals[3+j].Int) * time.Millisecond
				}
			}
		}
	}
	var out []grantedKey
	for c, n := range count {
		if n >= b.q {
			out = append(out, grantedKey{key: c.key, token: []byte(c.token), ttl: ttl[c]})
		}
	}
	return out
}

// requests are u's undos by node (nil for a node with none; nil when no
// node has any).
func (u evalUndo) requests(q int) []*req {
	if u.changes != nil {
		return u.restoreRequests()
	}
	return undoRequests(u.created, u.count, u.all, q)
}

// evalOutcome decides a script's reply from the nodes' replies, which
// took elapsed, and says what it did that is to be put back (evalUndo).
func (b *Backend) evalOutcome(keys []string, args [][]byte, w scriptWatch, replies []nodeReply, elapsed time.Duration) (backend.Value, error, evalUndo) {
	if w == watchValues {
		return b.valuesOutcome(keys, replies, elapsed)
	}
	v, err, created, count, undoAll := b.keysOutcome(keys, args, w, scriptAt(w, len(keys)), replies, elapsed)
	u := evalUndo{created: created, count: count, all: undoAll}
	if err == nil && !undoAll && w == watchKeys {
		u.granted = b.keysGranted(keys, args, scriptAt(w, len(keys)), replies, v)
	}
	return v, err, u
}

// keysOutcome is evalOutcome for the scripts not watched by values: it
// says which keys a script created are to be removed again (created,
// count and undoAll, for undoRequests).
func (b *Backend) keysOutcome(keys []string, args [][]byte, w scriptWatch, at int, replies []nodeReply, elapsed time.Duration) (_ backend.Value, _ error, created []map[string]string, count map[string]int, undoAll bool) {
	watch := w == watchKeys
	vals := make([]backend.Value, len(replies))
	ok := make([]bool, len(replies))
	var ttls [][]backend.Value
	if watch { // unwatched, no key is known to be created: nothing to allocate
		created = make([]map[string]string, len(replies))
		ttls = make([][]backend.Value, len(replies))
	}
	for i, r := range replies {
		if r.err != nil || len(r.vals) <= at || noScript(r.vals[at]) {
			continue // a NOSCRIPT still standing means the script did not run there: no vote
		}
		vals[i], ok[i] = r.vals[at], true
		if watch && len(r.vals) == 3+len(keys) {
			created[i] = createdKeys(keys, r.vals[0], r.vals[2], args)
			ttls[i] = r.vals[3:]
		}
	}
	v, agreed := b.voteValue(vals, ok)
	if !agreed {
		// Replies that differ only by when each node ran the script (a
		// PTTL) may settle by time, but only among nodes where the script
		// created nothing: a node that acquired did something else than
		// one that refused, whatever their replies read as numbers (an
		// acquire's 1 beside a refusal's 0 is not "0 or a little later").
		tv := ok
		if watch {
			tv = make([]bool, len(ok))
			for i := range ok {
				tv[i] = ok[i] && len(created[i]) == 0
			}
		}
		v, agreed = b.voteTime(vals, tv)
	}
	// The longest TTL any node now has on these keys bounds what a node
	// restarting now may forget (the restart quarantine), whether the
	// script acquired, extended, or failed.
	if watch {
		count = createdCount(created)
	}
	longest, shortest := scriptTTLs(keys, created, count, ttls, b.q, b.cfg.NodeTimeout)
	if w == watchTTLs {
		longest = longestTTL(replies, keys)
	}
	b.noteTTL(longest)
	// An acquire by script gets Redlock's validity check as SET NX does:
	// the keys it created on a majority must outlive the time the vote
	// took plus the drift allowance, by the shortest TTL a creating node
	// reports.
	late := agreed && shortest > 0 && elapsed+b.drift(shortest) >= shortest
	over := agreed && b.overMax(longest) // what it created goes; an extend keeps its TTL (noted above)
	undoAll = !agreed || late || over
	if !undoAll && watch {
		// A node that gave the agreed reply keeps what the script did
		// there: the client hears that reply, so that node's state is the
		// one it is told of. Only nodes that answered otherwise have the
		// keys they created undone (a key created on a minority, where the
		// others said "held"); a node in a time vote created nothing.
		for i := range created {
			if ok[i] && sameValue(vals[i], v) {
				created[i] = nil
			}
		}
	}
	switch {
	case over:
		return backend.Value{}, b.errOverMax(longest), created, count, undoAll
	case late:
		return backend.Value{}, &backend.ReplyError{Reply: fmt.Sprintf(
			"TRYAGAIN quorum reached too late: the script's acquire took %dms of a %dms TTL", elapsed.Milliseconds(), shortest.Milliseconds())}, created, count, undoAll
	case !agreed:
		return backend.Value{}, b.errNoQuorum(replies), created, count, undoAll
	case v.Kind == backend.KindError:
		return backend.Value{}, backend.Reply(string(v.Str)), created, count, undoAll
	}
	return v, nil, created, count, undoAll
}

// evalReq is a script's request with room for its commands (a release's
// fit), so that building one is one allocation, not four.
type evalReq struct {
	req
	b [160]byte
}

// evalRequest is the request an EVAL sends each node: EVALSHA (EVAL when
// eval is set; the _RO forms for ro), and with watch an MGET of the keys
// before and after it and each key's PTTL after it.
func evalRequest(s backend.Script, keys []string, args [][]byte, ro, watch, eval bool) *req {
	er := &evalReq{}
	r := &er.req
	r.repair = keys
	n := 48 + len(s.SHA1)
	if eval {
		n += len(s.Src)
	}
	for _, k := range keys {
		n += 16 + len(k)
		if watch {
			n += 32 + len(k)
		}
	}
	for _, a := range args {
		n += 16 + len(a)
	}
	if n <= len(er.b) {
		r.cmds.B = er.b[:0]
	} else {
		r.cmds.B = make([]byte, 0, n)
	}
	mget := 0
	if watch {
		r.cmds.Cmd(1 + len(keys))
		r.cmds.Arg("mget")
		for _, k := range keys {
			r.cmds.Arg(k)
		}
		mget = len(r.cmds.B)
	}
	appendEval(&r.cmds, s, keys, args, ro, eval)
	if !eval {
		r.load = scriptRef{sha: s.SHA1, src: s.Src}
	}
	if watch {
		r.cmds.B = append(r.cmds.B, r.cmds.B[:mget]...) // the same MGET after
		r.cmds.N++
		for _, k := range keys { // and each key's TTL as the script left it
			r.cmds.Cmd(2)
			r.cmds.Arg("pttl")
			r.cmds.Arg(k)
		}
	}
	return r
}

// appendEval encodes the client's script call: EVALSHA (EVAL when eval
// is set; the _RO forms for ro).
func appendEval(c *resp.Request, s backend.Script, keys []string, args [][]byte, ro, eval bool) {
	c.Cmd(3 + len(keys) + len(args))
	switch {
	case eval && ro:
		c.Arg("eval_ro")
	case eval:
		c.Arg("eval")
	case ro:
		c.Arg("evalsha_ro")
	default:
		c.Arg("evalsha")
	}
	if eval {
		c.Arg(s.Src)
	} else {
		c.Arg(s.SHA1)
	}
	c.ArgInt(int64(len(keys)))
	for _, k := range keys {
		c.Arg(k)
	}
	for _, a := range args {
		c.ArgBytes(a)
	}
}

// createdKeys lists the keys holding one of the script's arguments after
// it (post, an MGET reply) that did not hold that value before it (pre):
// absent before, or holding something else. "Something else" counts: the
// reads around the script are not atomic with it, so another client's
// token read before may have been released or expired before the script
// ran and created the key (found by review: not counting it left a lock
// the script took on a majority looking like a minority's).
func createdKeys(keys []string, pre, post backend.Value, args [][]byte) map[string]string {
	if len(pre.Elems) != len(keys) || len(post.Elems) != len(keys) {
		return nil
	}
	var out map[string]string
	for i, k := range keys {
		before, after := pre.Elems[i], post.Elems[i]
		if after.Kind != backend.KindBulk || (before.Kind == backend.KindBulk && bytes.Equal(before.Str, after.Str)) {
			continue
		}
		for _, a := range args {
			if bytes.Equal(after.Str, a) {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = string(a)
				break
			}
		}
	}
	return out
}

// createdCount counts, per key, the nodes on which a script created it.
func createdCount(created []map[string]string) map[string]int {
	count := map[string]int{}
	for _, c := range created {
		for k := range c {
			count[k]++
		}
	}
	return count
}

// scriptTTLs reads the TTLs the nodes reported right after a script:
// longest is the longest of any key on any node; shortest is the shortest
// a node reports for a key it created, among keys created on a majority
// (count: createdCount; q nodes; 0 when there are none, or they have no
// expiry), TTLs under floor left out (lockTTL says why).
func scriptTTLs(keys []string, created []map[string]string, count map[string]int, ttls [][]backend.Value, q int, floor time.Duration) (longest, shortest time.Duration) {
	for i, t := range ttls {
		for j, v := range t {
			if v.Kind != backend.KindInt || v.Int <= 0 || j >= len(keys) {
				continue
			}
			d := time.Duration(v.Int) * time.Millisecond
			longest = max(longest, d)
			if _, mine := created[i][keys[j]]; mine && count[keys[j]] >= q && d >= floor && (shortest == 0 || d < shortest) {
				shortest = d
			}
		}
	}
	return longest, shortest
}

// undoRequests are the owner-checked deletes of the keys a script created
// on fewer than Q nodes (count: createdCount), or on any node when the
// vote failed, by node (nil for a node with nothing to undo; nil when no
// node has any).
func undoRequests(created []map[string]string, count map[string]int, voteFailed bool, q int) []*req {
	if len(count) == 0 {
		return nil
	}
	reqs := make([]*req, len(created))
	for i, c := range created {
		for k, tok := range c {
			if !voteFailed && count[k] >= q {
				continue
			}
			if reqs[i] == nil {
				reqs[i] = &req{}
			}
			// Rare: EVAL, not worth a NOSCRIPT round.
			runScript(&reqs[i].cmds, delIfScript, true, []string{k}, []byte(tok), []byte("eq"))
			reqs[i].undo = append(reqs[i].undo, undoRec{key: k, token: tok})
		}
	}
	if !slices.ContainsFunc(reqs, func(r *req) bool { return r != nil }) {
		return nil
	}
	return reqs
}

// voteTime settles integer replies that differ only because the nodes ran
// the script at slightly different times (a script returning a PTTL, such
// as bsm/redislock's): when at least Q nodes answered integers that can
// be a lock's time to live and the Q largest lie within two node timeouts
// (+2ms) of each other, the smallest of them is the answer — a value Q
// nodes meet or exceed, the conservative reading for a time to live.
//
// Only replies of at least the node timeout take part (lockTTL: no lock
// has a shorter TTL here). A smaller integer is a flag or a count, and
// two that differ say the nodes were in different states, not that they
// ran at different times: a release's 1 (it deleted the key) beside
// another node's 0 (the key held another value there) settled as 0 told
// the client its token was not there while one node deleted it. With
// nodes left apart by writes of unknown outcome (node 1 holding "1", node
// 2 "a", node 0 quarantined after a restart) the releases of "a" and of
// "1" both answered 0, each deleting its token on one node, where the key
// existed on both (TestModelFaults, seed 1795720758042278986;
// TestSplitReleaseIsNoTimeVote).
func (b *Backend) voteTime(vals []backend.Value, ok []bool) (backend.Value, bool) {
	floor := b.cfg.NodeTimeout.Milliseconds()
	var ints []int64
	for i, v := range vals {
		if ok[i] && v.Kind == backend.KindInt && v.Int > 0 && v.Int >= floor {
			ints = append(ints, v.Int)
		}
	}
	if len(ints) < b.q {
		return backend.Value{}, false
	}
	slices.Sort(ints)
	top := ints[len(ints)-b.q:]
	// Each node ran the script within one node timeout of the others, and
	// the keys' expiries were set within one node timeout of each other too.
	if top[len(top)-1]-top[0] > 2*b.cfg.NodeTimeout.Milliseconds()+2 {
		return backend.Value{}, false
	}
	return backend.Int(top[0]), true
}
