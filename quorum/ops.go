package quorum

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
	"github.com/lockproxy/lockproxy/resp"
)

// setScript is SET with every condition of the model, run on each node so
// that IFEQ/IFNE work on Redis 7 too (SET … GET runs on the model:
// setOnModel). ARGV: token, cond (always,
// nx, xx, eq, ne), match, expiry mode (none, px, pxat, keepttl), expiry
// value. It answers {written, had a previous value, the previous value}.
// The common forms are sent as a plain SET.
var setScript = newNodeScript(`local cur = redis.call('get', KEYS[1])
local c = ARGV[2]
local go = c == 'always' or (c == 'nx' and not cur) or (c == 'xx' and cur ~= false) or
  (c == 'eq' and cur == ARGV[3]) or (c == 'ne' and cur ~= ARGV[3])
local had = 0
if cur then had = 1 end
if not go then return {0, had, cur} end
local m = ARGV[4]
if m == 'px' or m == 'pxat' then redis.call('set', KEYS[1], ARGV[1], m, ARGV[5])
elseif m == 'keepttl' then redis.call('set', KEYS[1], ARGV[1], 'keepttl')
else redis.call('set', KEYS[1], ARGV[1]) end
return {1, had, cur}`)

// delIfScript deletes KEYS[1] when its token compares as ARGV[2] (eq, ne)
// with ARGV[1]; the owner-checked delete of a release and of an undo.
var delIfScript = newNodeScript(`local v = redis.call('get', KEYS[1])
if v and ((ARGV[2] == 'eq') == (v == ARGV[1])) then return redis.call('del', KEYS[1]) end
return 0`)

func condName(c backend.Cond) string {
	return [...]string{backend.Always: "always", backend.IfAbsent: "nx", backend.IfPresent: "xx",
		backend.IfEqual: "eq", backend.IfNotEqual: "ne"}[c]
}

// runScript encodes one of the proxy's scripts: EVALSHA, or EVAL when
// eval is set.
func runScript(c *resp.Request, s *nodeScript, eval bool, keys []string, args ...[]byte) {
	c.Cmd(3 + len(keys) + len(args))
	if eval {
		c.Arg("eval")
		c.Arg(s.src)
	} else {
		c.Arg("evalsha")
		c.Arg(s.sha)
	}
	c.ArgInt(int64(len(keys)))
	for _, k := range keys {
		c.Arg(k)
	}
	for _, a := range args {
		c.ArgBytes(a)
	}
}

// scriptFallback answers a node that did not know the script (NOSCRIPT:
// its script cache was flushed) with the same request by EVAL.
func scriptFallback(s *nodeScript, keys []string, args ...[]byte) func(int, nodeReply) *req {
	return func(_ int, r nodeReply) *req {
		if r.err != nil || len(r.vals) != 1 || !noScript(r.vals[0]) {
			return nil
		}
		nr := &req{repair: keys} // a write of keys, as the request it replaces (order.go)
		runScript(&nr.cmds, s, true, keys, args...)
		return nr
	}
}

func noScript(v backend.Value) bool {
	return v.Kind == backend.KindError && bytes.HasPrefix(v.Str, []byte("NOSCRIPT"))
}

// same sends every node the same request.
func same(r *req) func(int) *req { return func(int) *req { return r } }

// one returns a node's only reply; ok is false for a node failure.
func one(r nodeReply) (backend.Value, bool) {
	if r.err != nil || len(r.vals) == 0 {
		return backend.Value{}, false
	}
	return r.vals[0], true
}

// setResult is one node's answer to a SET.
type setResult struct {
	written, had bool
	prev         []byte
}

// parseSet reads a node's reply to setScript or to a plain SET.
func parseSet(v backend.Value, plain bool) (setResult, bool) {
	if plain {
		switch v.Kind {
		case backend.KindStatus:
			return setResult{written: true}, true
		case backend.KindNil:
			return setResult{}, true
		}
		return setResult{}, false
	}
	if v.Kind != backend.KindArray || len(v.Elems) < 2 {
		return setResult{}, false
	}
	r := setResult{written: v.Elems[0].Int == 1, had: v.Elems[1].Int == 1}
	if len(v.Elems) > 2 && v.Elems[2].Kind == backend.KindBulk {
		r.prev = v.Elems[2].Str
	}
	return r, true
}

// Set implements backend.KeySpace. An acquire (NX with an expiry) gets
// Redlock's validity check and owner-checked undo, and is sent again when
// it lost a split vote (splitVote). An acquire with a relative TTL, the
// lock libraries' form, runs as the front end's loops run it (acquire):
// one acquire for every caller.
func (b *Backend) Set(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	if o.Get { // it reads before it writes: on the model (typed.go: modelWrites)
		return b.setOnModel(ctx, db, key, token, o)
	}
	if res, err, ok := b.acquire(ctx, db, key, token, o); ok {
		return res, err
	}
	for splits := 0; ; splits++ {
		res, err, undone := b.setOnce(ctx, db, key, token, o)
		deadline, _ := ctx.Deadline()
		if !splitVote(res, err, undone) || splits == maxSplits || deadlineNear(deadline) || b.heldByOne(b.do(ctx, db, "get", key)) {
			if err == nil && res.Written {
				_, _, ttl := setExpiry(o)
				b.grants.record(db, key, token, backend.HolderOf(ctx), ttl)
			}
			return res, err
		}
		select {
		case <-time.After(splitPause(splits + 1)):
		case <-ctx.Done():
			return res, err
		}
	}
}

// acquire runs SET key token NX PX/EX on one of the Backend's own loops
// through StartSet, the front end's loops' entry, and waits for its
// outcome: the blocking callers (the goroutine front end, MULTI/EXEC,
// migrate, tests) and the loops share one acquire, one undo and one
// late-reply rule. ok is false when StartSet does not take it (another
// form of SET; the loop's connections to db not tried yet; the loop
// stopped): setOnce runs it. The wait ends with the operation, which its
// deadline (ctx's) bounds.
func (b *Backend) acquire(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (_ backend.SetResult, _ error, ok bool) {
	type outcome struct {
		res backend.SetResult
		err error
	}
	ql := b.ownLoop(key)
	started, end := make(chan bool, 1), make(chan outcome, 1)
	deadline, _ := ctx.Deadline()
	h := backend.HolderOf(ctx)
	if ql.l.Execute(func() {
		started <- ql.StartSet(h, db, key, token, o, deadline, func(res backend.SetResult, err error) { end <- outcome{res, err} })
	}) != nil || !<-started {
		return backend.SetResult{}, nil, false
	}
	b.acquires.Add(1)
	out := <-end
	return out.res, out.err, true
}

// setOnModel is SET … GET: one command on the model (evalmodel.go).
func (b *Backend) setOnModel(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	var res backend.SetResult
	_, err := b.onModel(ctx, db, []string{key}, false, func(ctx context.Context, c *keycmd.ScriptCaller) (backend.Value, error) {
		var err error
		res, err = c.KS.Set(ctx, db, key, token, o)
		return backend.Value{}, err
	})
	return res, err
}

// setOnce is one attempt of Set; undone marks the nodes whose writes it
// undid.
func (b *Backend) setOnce(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (_ backend.SetResult, _ error, undone []bool) {
	mode, val, ttl := setExpiry(o)
	plain := (o.Cond == backend.Always || o.Cond == backend.IfAbsent || o.Cond == backend.IfPresent)
	r, again := setRequest(key, token, o, plain, mode, val)
	if err := b.coverTTL(ctx, ttl); err != nil { // the horizon marker first (marker.go)
		return backend.SetResult{}, err, nil
	}
	unlock := b.lockKeys(key)
	start := time.Now()
	var certain func([]nodeReply) bool
	if o.Cond == backend.IfAbsent {
		certain = func(replies []nodeReply) bool { return b.setCertain(replies, plain) }
	}
	lo := &lop{db: db, again: again, certainFn: certain}
	if certain != nil {
		lo.failing = func(replies []nodeReply) bool { return !b.setWon(replies, plain) }
	}
	op, replies := b.fanoutOp(ctx, key, lo, same(r))
	res, err, undo := b.setOutcome(o, plain, mode, ttl, replies, time.Since(start))
	if o.Cond == backend.IfAbsent {
		var hold *lateHold
		if err != nil { // its stripe kept for Q late replies or more (latehold.go)
			hold = op.holdLate(b.q, unlock)
		}
		b.undoWrites(ctx, db, key, token, undo)
		granted := err == nil && res.Written
		if op.awaitsLate() {
			op.onLate(func(i int, vals []backend.Value, err error) {
				wrote := lateWrote(granted, vals, err, plain)
				switch {
				case hold != nil && wrote:
					ur, uagain := undoRequest(key, token)
					hold.undo(lo.ql, db, i, ur, uagain)
				case hold != nil:
					hold.release()
				case wrote:
					b.repairs.add(i, db, []string{key})
				}
			})
		}
		if hold != nil {
			// Their connections are told the calls are overdue, as at a
			// deadline (a ctx that ended first did not): a reply that never
			// comes breaks its connection after the grace, which ends the hold.
			lo.ql.exec(lo.overdueLate)
			hold.release() // the decision's own pin: its undos are done
			return res, err, undo
		}
	}
	unlock()
	return res, err, undo
}

// Split votes. Acquires of one key by several clients at once (through
// several instances: one instance sends them one at a time) can each win
// a minority of the nodes, or lose a node still holding the last holder's
// key, whose release has not reached it yet: each hears "held" from the
// others' nodes, answers nil and undoes its own writes, and the key is
// left held by nobody. A polling client tries again; a client that waits to be woken
// by the holder's release (simple-redis-mutex, Redisson) waits for a
// release that never comes — on one Redis a nil always means someone
// holds the key. So an acquire that answers nil after undoing writes is
// sent again after a short random pause (as Redlock's clients do), up to
// maxSplits times within its deadline, unless a read after the undo finds
// one token on a majority (that holder will release). The pause grows
// with the attempts.
// Only SET NX: its only effect is the write that was undone, so sending it
// again is a later SET NX. A script's other effects could not be sent
// twice.

// maxSplits bounds the attempts an acquire makes after split votes: a
// split ends as soon as one contender holds a majority, which under a
// herd of contenders woken together can take a few rounds.
const maxSplits = 8

// heldByOne reports whether Q of the replies to a GET are one token: a
// holder has the key on a majority.
func (b *Backend) heldByOne(replies []nodeReply) bool {
	for i, r := range replies {
		v, ok := one(r)
		if !ok || v.Kind != backend.KindBulk {
			continue
		}
		n := 1
		for _, o := range replies[i+1:] {
			if w, ok := one(o); ok && w.Kind == backend.KindBulk && bytes.Equal(w.Str, v.Str) {
				n++
			}
		}
		if n >= b.q {
			return true
		}
	}
	return false
}

// splitVote reports an acquire that answered nil having written on some
// nodes, which its undo cleared: a split, unless a holder has the key on
// a majority (heldByOne), its write not yet come where ours went.
func splitVote(res backend.SetResult, err error, undone []bool) bool {
	return err == nil && !res.Written && undone != nil
}

// splitPause is the pause before attempt n after a split vote: random, so
// that the clients that split do not meet again, within n·4ms (40ms at
// most).
func splitPause(n int) time.Duration {
	return time.Duration(1+rand.N(min(4*n, 40))) * time.Millisecond
}

// deadlineNear reports whether a command's deadline leaves no room for
// another attempt.
func deadlineNear(deadline time.Time) bool {
	return !deadline.IsZero() && time.Until(deadline) < 50*time.Millisecond
}

// setCertain reports whether an acquire's replies so far decide it: Q
// nodes wrote, or N−Q+1 refused. An acquire that is failing anyway waits
// for the rest, so that it undoes what they wrote before it answers.
func (b *Backend) setCertain(replies []nodeReply, plain bool) bool {
	wrote, refused := 0, 0
	for _, nr := range replies {
		if sr, ok := setReply(nr, plain); ok && sr.written {
			wrote++
		} else if ok {
			refused++
		}
	}
	return wrote >= b.q || refused >= len(b.nodes)-b.q+1
}

// setWon reports whether Q nodes wrote an acquire's token.
func (b *Backend) setWon(replies []nodeReply, plain bool) bool {
	wrote := 0
	for _, nr := range replies {
		if sr, ok := setReply(nr, plain); ok && sr.written {
			wrote++
		}
	}
	return wrote >= b.q
}

// lateWrote reports whether a reply that came after an acquire ended says
// the node wrote the token while the client was not told it got the lock.
// That write is not undone at once: other nodes may have run the same
// acquire late too, and a majority read may have seen it meanwhile; an
// undo would then make a value vanish that a read returned (the acquire's
// outcome was unknown to its client: it may have taken effect, and then
// it stays until its owner releases it or its TTL ends). The key is
// repaired instead (repair.go), which deletes it there only while no
// majority can see it. A node that never answers (err) is repaired when
// its connection breaks.
func lateWrote(granted bool, vals []backend.Value, err error, plain bool) bool {
	if granted || err != nil || len(vals) == 0 {
		return false
	}
	sr, ok := parseSet(vals[0], plain)
	return ok && sr.written
}

// setOutcome decides a SET from the nodes' replies, which took elapsed:
// its result or error, and, for an acquire that did not succeed, the nodes
// that wrote the token and must have it deleted again (before the client
// hears of it). Nodes that refused are never touched: the key they hold
// is someone else's lock, whatever its value.
func (b *Backend) setOutcome(o backend.SetOptions, plain bool, mode string, ttl time.Duration, replies []nodeReply, elapsed time.Duration) (_ backend.SetResult, _ error, undo []bool) {
	// Only SET … GET, IFEQ and IFNE can meet WRONGTYPE (a SET NX never
	// does), so the lock path's acquires skip this pass over the replies.
	if err, ok := b.setError(o, replies); ok {
		// WRONGTYPE (SET … GET on a hash): Q nodes refused the command,
		// in a script's words when SET ran as one (setRequest): the
		// client sent a SET.
		if o.Cond == backend.IfAbsent {
			undo = wroteOn(replies, plain)
		}
		line, _, _ := strings.Cut(err.(*backend.ReplyError).Reply, " script: ")
		return backend.SetResult{}, backend.Reply(line), undo
	}
	wrote, refused := tallySet(replies, plain)
	// The validity rule applies to an acquire with a future expiry; without
	// one (no TTL, KEEPTTL on an absent key) the lock has no deadline to
	// miss, and with one in the past Redis itself answers OK for a key that
	// is gone at once.
	valid := true
	if o.Cond == backend.IfAbsent && (mode == "px" || mode == "pxat") && ttl > 0 {
		valid = elapsed+b.drift(ttl) < ttl
	}
	if o.Cond == backend.IfAbsent && (wrote < b.q || !valid) {
		undo = wroteOn(replies, plain)
	}
	res := backend.SetResult{}
	if wrote >= b.q && valid {
		res.Written = true
		b.noteTTL(ttl)
		return res, nil, nil
	}
	if wrote >= b.q && !valid {
		// Timing, not contention, decided: never a nil, which would say
		// someone else holds the lock.
		return backend.SetResult{}, &backend.ReplyError{Reply: fmt.Sprintf(
			"TRYAGAIN quorum reached too late: the acquire took %dms of a %dms TTL", elapsed.Milliseconds(), ttl.Milliseconds())}, undo
	}
	if refused >= len(b.nodes)-b.q+1 {
		return res, nil, undo // certainly not ours: held elsewhere
	}
	return backend.SetResult{}, b.errNoQuorum(replies), undo
}

// wroteOn marks the nodes whose reply says they wrote; nil when none did.
// A reply that no longer counts as a vote (its node was quarantined while
// the operation ran) still says the node wrote.
func wroteOn(replies []nodeReply, plain bool) []bool {
	var out []bool
	for i, nr := range replies {
		if len(nr.vals) == 0 {
			continue
		}
		if sr, ok := parseSet(nr.vals[0], plain); ok && sr.written {
			if out == nil {
				out = make([]bool, len(replies))
			}
			out[i] = true
		}
	}
	return out
}

// setExpiry is the expiry of a SET as the set script's mode word and value
// ("none", "keepttl", "px" ms, "pxat" Unix ms), and the TTL it gives.
func setExpiry(o backend.SetOptions) (mode string, val int64, ttl time.Duration) {
	mode = "none"
	switch {
	case o.KeepTTL:
		mode = "keepttl"
	case !o.Expiry.At.IsZero():
		mode, val = "pxat", o.Expiry.At.UnixMilli()
		ttl = time.Until(o.Expiry.At)
	case o.Expiry.TTL > 0:
		mode, val = "px", o.Expiry.TTL.Milliseconds()
		ttl = o.Expiry.TTL
	}
	return mode, val, ttl
}

// setRequest is the request a SET sends each node: a plain SET when Redis
// has the condition, else the set script, with again its fallback for a
// node that answers NOSCRIPT.
// setReq is a SET's request with room for what it carries, so that
// building one is one allocation (plus the token's string), not five.
type setReq struct {
	req
	k [1]string
	b [128]byte
}

func setRequest(key string, token []byte, o backend.SetOptions, plain bool, mode string, val int64) (*req, func(int, nodeReply) *req) {
	sr := &setReq{}
	sr.k[0] = key
	r := &sr.req
	r.repair = sr.k[:]
	if n := len(key) + len(token) + 64; n <= len(sr.b) {
		r.cmds.B = sr.b[:0]
	} else {
		r.cmds.B = make([]byte, 0, n)
	}
	if !plain {
		args := [][]byte{token, []byte(condName(o.Cond)), o.Match, []byte(mode), strconv.AppendInt(nil, val, 10)}
		runScript(&r.cmds, setScript, false, []string{key}, args...)
		r.load = setScript.ref()
		return r, scriptFallback(setScript, []string{key}, args...)
	}
	argc := 3
	if o.Cond != backend.Always {
		argc++
	}
	switch mode {
	case "px", "pxat":
		argc += 2
	case "keepttl":
		argc++
	}
	r.cmds.Cmd(argc)
	r.cmds.Arg("set")
	r.cmds.Arg(key)
	r.cmds.ArgBytes(token)
	switch o.Cond {
	case backend.IfAbsent:
		r.cmds.Arg("nx")
	case backend.IfPresent:
		r.cmds.Arg("xx")
	}
	switch mode {
	case "px", "pxat":
		r.cmds.Arg(mode)
		r.cmds.ArgInt(val)
	case "keepttl":
		r.cmds.Arg(mode)
	}
	return r, nil
}

// tallySet parses the nodes' SET replies and counts the writes and the
// refusals among them.
func tallySet(replies []nodeReply, plain bool) (wrote, refused int) {
	for _, nr := range replies {
		if sr, ok := setReply(nr, plain); ok {
			if sr.written {
				wrote++
			} else {
				refused++
			}
		}
	}
	return wrote, refused
}

// setReply is one node's answer to a SET; ok is false for a node failure
// or a reply that is not one.
func setReply(nr nodeReply, plain bool) (setResult, bool) {
	v, ok := one(nr)
	if !ok {
		return setResult{}, false
	}
	return parseSet(v, plain)
}

// drift is the clock-drift allowance of a lock of ttl.
func (b *Backend) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*b.cfg.DriftFactor) + b.cfg.DriftConst
}

// undoWrites deletes key where it holds token on the nodes marked in on,
// under a context of its own: the client's may be the one that ran out.
// On each node the delete runs after the acquire it undoes (one ordered
// stream per node); one whose outcome stays unknown is sent again when the
// node's connection is replaced.
func (b *Backend) undoWrites(ctx context.Context, db int, key string, token []byte, on []bool) {
	if on == nil {
		return
	}
	r, again := undoRequest(key, token)
	b.fanout(context.WithoutCancel(ctx), db, key, func(i int) *req {
		if on[i] {
			return r
		}
		return nil
	}, again)
}

// undoRequest is the owner-checked delete an undo sends every node, and
// its fallback for a node that answers NOSCRIPT.
func undoRequest(key string, token []byte) (*req, func(int, nodeReply) *req) {
	r := &req{undo: []undoRec{{key: key, token: string(token)}}, load: delIfScript.ref()}
	runScript(&r.cmds, delIfScript, false, []string{key}, token, []byte("eq"))
	return r, scriptFallback(delIfScript, []string{key}, token, []byte("eq"))
}

// voteValue returns the reply Q nodes agree on; error replies count as
// replies, node failures do not.
func (b *Backend) voteValue(vals []backend.Value, ok []bool) (backend.Value, bool) {
	for i, v := range vals {
		if !ok[i] {
			continue
		}
		n := 0
		for j := i; j < len(vals); j++ {
			if ok[j] && sameValue(vals[j], v) {
				n++
			}
		}
		if n >= b.q {
			return v, true
		}
	}
	return backend.Value{}, false
}

// setError is voteError for a SET whose form can meet WRONGTYPE.
func (b *Backend) setError(o backend.SetOptions, replies []nodeReply) (error, bool) {
	if o.Cond != backend.IfEqual && o.Cond != backend.IfNotEqual {
		return nil, false
	}
	return b.voteError(replies)
}

// voteError returns the error reply Q nodes agree on, if they do.
func (b *Backend) voteError(replies []nodeReply) (error, bool) {
	n := 0
	var first backend.Value
	for _, r := range replies {
		v, ok := one(r)
		if !ok || v.Kind != backend.KindError {
			continue
		}
		if n == 0 || sameValue(v, first) {
			first = v
			n++
		}
	}
	if n < b.q {
		return nil, false
	}
	return backend.Reply(string(first.Str)), true
}

// voteOne votes on the nodes' only replies.
func (b *Backend) voteOne(replies []nodeReply) (backend.Value, bool) {
	vals := make([]backend.Value, len(replies))
	ok := make([]bool, len(replies))
	for i, r := range replies {
		vals[i], ok[i] = one(r)
	}
	return b.voteValue(vals, ok)
}

// do runs one command that writes nothing on every node.
func (b *Backend) do(ctx context.Context, db int, args ...string) []nodeReply {
	return b.write(ctx, db, nil, args...)
}

// write runs one command that writes keys on every node: it goes to each
// node in the keys' order and is repaired where it may have run unseen
// (order.go, repair.go).
func (b *Backend) write(ctx context.Context, db int, keys []string, args ...string) []nodeReply {
	r := &req{repair: keys}
	r.cmds.Strs(args...)
	key := ""
	if len(args) > 1 {
		key = args[1]
	}
	return b.fanout(ctx, db, key, same(r), nil)
}

// voteInt returns the integer Q nodes answered.
func (b *Backend) voteInt(replies []nodeReply) (int64, error) {
	v, ok := b.voteOne(replies)
	if !ok {
		return 0, b.errNoQuorum(replies)
	}
	if v.Kind == backend.KindError {
		return 0, backend.Reply(string(v.Str))
	}
	return v.Int, nil
}

// voteBool is for predicates: true needs Q nodes, false needs N−Q+1 nodes
// (so that true is impossible); otherwise the outcome is unknown.
func (b *Backend) voteBool(replies []nodeReply) (bool, error) {
	yes, no := 0, 0
	for _, r := range replies {
		v, ok := one(r)
		switch {
		case !ok:
		case v.Kind == backend.KindInt && v.Int != 0:
			yes++
		case v.Kind == backend.KindInt:
			no++
		default:
			return false, backend.Reply(string(v.Str))
		}
	}
	switch {
	case yes >= b.q:
		return true, nil
	case no >= len(b.nodes)-b.q+1:
		return false, nil
	}
	return false, b.errNoQuorum(replies)
}

// Get implements backend.KeySpace: the token a majority holds.
func (b *Backend) Get(ctx context.Context, db int, key string) ([]byte, bool, error) {
	defer b.rlockKeys(key)()
	return b.getOutcome(b.do(ctx, db, "get", key))
}

// getOutcome decides a GET from the nodes' replies (both paths).
func (b *Backend) getOutcome(replies []nodeReply) ([]byte, bool, error) {
	v, ok := b.voteOne(replies)
	if !ok {
		return nil, false, b.errNoQuorum(replies)
	}
	switch v.Kind {
	case backend.KindNil:
		return nil, false, nil
	case backend.KindError:
		return nil, false, backend.Reply(string(v.Str))
	}
	return v.Str, true, nil
}

// Del implements backend.KeySpace.
func (b *Backend) Del(ctx context.Context, db int, keys []string) (int64, error) {
	defer b.lockKeys(keys...)()
	n, err := b.voteInt(b.write(ctx, db, keys, append([]string{"del"}, keys...)...))
	if err == nil && n > 0 {
		b.grants.forget(db, keys...)
	}
	return n, err
}

// DelIf implements backend.KeySpace: an owner-checked release needs Q
// confirmations.
func (b *Backend) DelIf(ctx context.Context, db int, key string, cond backend.Cond, match []byte) (bool, error) {
	defer b.lockKeys(key)()
	r := &req{repair: []string{key}, load: delIfScript.ref()}
	c := []byte(condName(cond))
	runScript(&r.cmds, delIfScript, false, []string{key}, match, c)
	ok, err := b.voteBool(b.fanout(ctx, db, key, same(r), scriptFallback(delIfScript, []string{key}, match, c)))
	if err == nil && ok {
		b.grants.forget(db, key)
	}
	return ok, err
}

// Exists implements backend.KeySpace.
func (b *Backend) Exists(ctx context.Context, db int, keys []string) (int64, error) {
	defer b.rlockKeys(keys...)()
	return b.voteInt(b.do(ctx, db, append([]string{"exists"}, keys...)...))
}

// PTTL implements backend.KeySpace: -2 or -1 when a majority says so;
// otherwise the time to live that at least Q nodes still have.
func (b *Backend) PTTL(ctx context.Context, db int, key string) (int64, error) {
	defer b.rlockKeys(key)()
	return b.pttlOutcome(b.do(ctx, db, "pttl", key))
}

// pttlOutcome decides a PTTL from the nodes' replies (both paths).
func (b *Backend) pttlOutcome(replies []nodeReply) (int64, error) {
	var live []int64
	count := map[int64]int{}
	for _, r := range replies {
		v, ok := one(r)
		if !ok || v.Kind != backend.KindInt {
			continue
		}
		if v.Int >= 0 {
			live = append(live, v.Int)
		} else {
			count[v.Int]++
		}
	}
	if len(live) >= b.q {
		slices.Sort(live)
		return live[len(live)-b.q], nil // Q nodes hold it at least this long
	}
	for _, n := range []int64{-2, -1} {
		if count[n] >= b.q {
			return n, nil
		}
	}
	return 0, b.errNoQuorum(replies)
}

// Expire implements backend.KeySpace. An extension that took longer than
// the new TTL (less the drift allowance) is reported as failed: the key may
// already have expired on some nodes.
func (b *Backend) Expire(ctx context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	args := []string{"pexpire", key, strconv.FormatInt(e.TTL.Milliseconds(), 10)}
	ttl := e.TTL
	if !e.At.IsZero() {
		args = []string{"pexpireat", key, strconv.FormatInt(e.At.UnixMilli(), 10)}
		ttl = time.Until(e.At)
	}
	args = append(args, cond.Options()...)
	if err := b.coverTTL(ctx, ttl); err != nil { // the horizon marker first (marker.go)
		return false, err
	}
	defer b.lockKeys(key)()
	start := time.Now()
	ok, err := b.voteBool(b.write(ctx, db, []string{key}, args...))
	if ok && ttl > 0 {
		b.noteTTL(ttl)
		ok = time.Since(start)+b.drift(ttl) < ttl
	}
	return ok, err
}

// Persist implements backend.KeySpace.
func (b *Backend) Persist(ctx context.Context, db int, key string) (bool, error) {
	defer b.lockKeys(key)()
	return b.voteBool(b.write(ctx, db, []string{key}, "persist", key))
}

// MSet implements backend.KeySpace.
func (b *Backend) MSet(ctx context.Context, db int, pairs []backend.KV, nx bool) (bool, error) {
	args := []string{"mset"}
	if nx {
		args[0] = "msetnx"
	}
	var keys []string
	for _, p := range pairs {
		args = append(args, p.Key, string(p.Value))
		keys = append(keys, p.Key)
	}
	defer b.lockKeys(keys...)()
	replies := b.write(ctx, db, keys, args...)
	if !nx {
		if v, ok := b.voteOne(replies); ok && v.Kind != backend.KindError {
			return true, nil
		}
		return false, b.errNoQuorum(replies)
	}
	return b.voteBool(replies)
}

// DBSize implements backend.KeySpace: the median of the nodes' counts
// (keys on a minority of nodes make the count approximate by nature).
func (b *Backend) DBSize(ctx context.Context, db int) (int64, error) {
	replies := b.do(ctx, db, dbsizeArgs(db)...) // leaves the horizon marker out (marker.go)
	var n []int64
	for _, r := range replies {
		if v, ok := one(r); ok && v.Kind == backend.KindInt {
			n = append(n, v.Int)
		}
	}
	if len(n) < b.q {
		return 0, b.errNoQuorum(replies)
	}
	slices.Sort(n)
	return n[len(n)/2], nil
}

// sameValue reports whether two replies are the same reply. Doubles
// compare by their bits: a NaN is the same reply as itself.
func sameValue(a, b backend.Value) bool {
	if a.Kind != b.Kind || a.Int != b.Int || math.Float64bits(a.Float) != math.Float64bits(b.Float) || !bytes.Equal(a.Str, b.Str) || len(a.Elems) != len(b.Elems) {
		return false
	}
	for i := range a.Elems {
		if !sameValue(a.Elems[i], b.Elems[i]) {
			return false
		}
	}
	return true
}
