package quorum

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// The watch of scripts that may write a value beyond strings (watchValues):
// a semaphore's ZADD beside its other holders' members, a reentrant hash
// lock's HINCRBY. Such a script changes a key that may exist already, and
// whatever it wrote is not one of its ARGV that a read of the key could
// find (watchKeys), so each node reports the keys' whole values instead,
// atomically with the script:
//
//	MULTI
//	DUMP k, PEXPIRETIME k      for each key (before)
//	EVALSHA …
//	DUMP k, PTTL k, PEXPIRETIME k   for each key (after)
//	EXEC
//
// A key changed on a node when its DUMP after differs from its DUMP before.
// What a node changed is restored on every node whose reply is not the one
// the client is told (on every node when no reply reached a majority, or
// the grant came too late), before the client hears it; a node whose reply
// comes after the vote is judged the same way when it comes. A restore is
// owner-checked, one script per node: a key is put back to its value and
// expiry from before only while its DUMP is still the one the script left;
// a key anything else changed since (another client's member) is left
// alone. Values are never compared by what they hold (a member, a field),
// so a retry that re-adds its own member, or two clients with the same
// value, cannot have the other's removed: the state from before the
// script, whatever it held, is what comes back.
//
// The validity check and the restart quarantine read the TTLs after the
// script as for strings: a key changed, its expiry set by the script, on Q
// nodes that gave the agreed reply must outlive the vote's time plus the
// drift allowance; every TTL left counts toward the quarantine.

// restoreScript puts each KEYS[i] back to its state before a script,
// while it holds what the script left: ARGV[3i-2] is that DUMP ("" for
// absent), ARGV[3i-1] the DUMP from before ("" for absent: deleted),
// ARGV[3i] its absolute expiry in Unix ms (0 for none). DUMP never
// answers an empty payload. It answers how many keys it put back.
var restoreScript = newNodeScript(`local n = 0
for i = 1, #KEYS do
  local cur = redis.call('dump', KEYS[i])
  if (cur or '') == ARGV[3*i-2] then
    if ARGV[3*i-1] == '' then
      redis.call('del', KEYS[i])
    else
      redis.call('restore', KEYS[i], ARGV[3*i], ARGV[3*i-1], 'replace', 'absttl')
    end
    n = n + 1
  end
end
return n`)

// valueChange is what a script did to one key on one node: the key's DUMP
// before (nil: absent) with its absolute expiry then (PEXPIRETIME: -1
// none, -2 absent), and its DUMP after (nil: absent).
type valueChange struct {
	key       string
	pre, post []byte
	at        int64
}

// restoreRequest is the owner-checked restore of changes on one node: one
// script call for all of them (EVAL: rare, not worth a NOSCRIPT round),
// each sent again on a new connection if this one breaks unanswered.
func restoreRequest(changes []valueChange) *req {
	r := &req{}
	keys := make([]string, len(changes))
	args := make([][]byte, 0, 3*len(changes))
	for i, c := range changes {
		keys[i] = c.key
		args = append(args, c.post, c.pre, strconv.AppendInt(nil, max(c.at, 0), 10))
		r.undo = append(r.undo, undoRec{key: c.key, restore: &changes[i]})
	}
	runScript(&r.cmds, restoreScript, true, keys, args...)
	return r
}

// appendRestore encodes the restore of c alone: one sent again on a new
// connection (link.connect).
func (c valueChange) appendRestore(rq *resp.Request) {
	runScript(rq, restoreScript, true, []string{c.key}, c.post, c.pre, strconv.AppendInt(nil, max(c.at, 0), 10))
}

// valuesRequest is the request of a script watched by values (the top of
// this file): EVALSHA (EVAL when eval is set) inside a transaction with
// each key's DUMP and expiry before and after it. The node answers every
// command's reply in EXEC's array, which the connection hands on as the
// replies themselves (req.exec): first 2 per key, then the script's, then
// 3 per key.
func valuesRequest(s backend.Script, keys []string, args [][]byte, ro, eval bool) *req {
	r := &req{exec: true, repair: keys}
	n := 64 + len(s.SHA1)
	if eval {
		n += len(s.Src)
	}
	for _, k := range keys {
		n += 5 * (24 + len(k))
	}
	for _, a := range args {
		n += 16 + len(a)
	}
	r.cmds.B = make([]byte, 0, n)
	r.cmds.Strs("multi")
	for _, k := range keys {
		r.cmds.Strs("dump", k)
		r.cmds.Strs("pexpiretime", k)
	}
	appendEval(&r.cmds, s, keys, args, ro, eval)
	if !eval {
		r.load = scriptRef{sha: s.SHA1, src: s.Src}
	}
	for _, k := range keys {
		r.cmds.Strs("dump", k)
		r.cmds.Strs("pttl", k)
		r.cmds.Strs("pexpiretime", k)
	}
	r.cmds.Strs("exec")
	return r
}

// execReplies turns the replies to MULTI … EXEC (+OK, +QUEUED for each
// command, then EXEC's array) into the queued commands' own replies. A
// transaction that did not run (EXECABORT; a node loading or busy refuses
// the commands as they are queued) answers one reply: the first error
// among them, so that one about the node reads as a node failure
// (op.deliver), and no other as a vote.
func execReplies(vals []backend.Value) []backend.Value {
	last := vals[len(vals)-1]
	if last.Kind == backend.KindArray && len(last.Elems) == len(vals)-2 {
		return last.Elems
	}
	for _, v := range vals {
		if v.Kind == backend.KindError {
			return []backend.Value{v}
		}
	}
	return []backend.Value{last}
}

// valuesReply is one node's reply to valuesRequest, read: its script's
// reply, what the script changed there, and per key the TTL it left
// (0: none, or absent) and whether the script set the key's expiry.
type valuesReply struct {
	v       backend.Value
	changes []valueChange
	ttl     []time.Duration
	expSet  []bool
}

// readValues reads node replies vals to valuesRequest over keys; ok is
// false when they are not that (a node failure, a transaction that did
// not run).
func readValues(keys []string, vals []backend.Value) (out valuesReply, ok bool) {
	n := len(keys)
	if len(vals) != 5*n+1 {
		return out, false
	}
	out.v = vals[2*n]
	out.ttl = make([]time.Duration, n)
	out.expSet = make([]bool, n)
	for j, k := range keys {
		pre, preAt := vals[2*j], vals[2*j+1]
		post, pttl, postAt := vals[2*n+1+3*j], vals[2*n+2+3*j], vals[2*n+3+3*j]
		if pttl.Kind == backend.KindInt && pttl.Int > 0 {
			out.ttl[j] = time.Duration(pttl.Int) * time.Millisecond
		}
		if bytes.Equal(dumpOf(pre), dumpOf(post)) { // a payload is never empty: nil is absent
			continue
		}
		if pre.Kind == backend.KindError || post.Kind == backend.KindError || preAt.Kind != backend.KindInt {
			continue // not read: nothing known to put back
		}
		out.changes = append(out.changes, valueChange{key: k, pre: dumpOf(pre), post: dumpOf(post), at: preAt.Int})
		out.expSet[j] = dumpOf(pre) == nil || postAt.Kind != backend.KindInt || postAt.Int != preAt.Int
	}
	return out, true
}

// dumpOf is a DUMP reply's payload; nil for an absent key.
func dumpOf(v backend.Value) []byte {
	if v.Kind != backend.KindBulk {
		return nil
	}
	return v.Str
}

// changed reports whether the script changed key in r.
func (r valuesReply) changed(key string) bool {
	for _, c := range r.changes {
		if c.key == key {
			return true
		}
	}
	return false
}

// lockTTL reports whether a TTL a script left on a key it created or
// changed is a lock's, for the validity check: one at least the node
// timeout (configuration asks lock TTLs to be far above it). A shorter one
// is a marker: Redisson's unlock script (node-redisson's, with 10ms) sets
// an "unlock latch" that only makes a retried unlock idempotent, and under
// load its vote takes longer than that TTL, which the check turned into a
// TRYAGAIN for the unlock (found by TestWakeUpsAcrossInstances in the full
// suite). Such a key is still put back where its script lost the vote.
func (b *Backend) lockTTL(d time.Duration) bool { return d > 0 && d >= b.cfg.NodeTimeout }

// valuesOutcome is evalOutcome for a script watched by values: the reply
// Q nodes agree on, and what to put back where (evalUndo).
func (b *Backend) valuesOutcome(keys []string, replies []nodeReply, elapsed time.Duration) (backend.Value, error, evalUndo) {
	at := scriptAt(watchValues, len(keys))
	read := make([]valuesReply, len(replies))
	vals := make([]backend.Value, len(replies))
	ok := make([]bool, len(replies))
	u := evalUndo{changes: make([][]valueChange, len(replies)), agreed: make([]bool, len(replies))}
	var longest time.Duration
	for i, r := range replies {
		// A node quarantined meanwhile keeps its replies (dropQuarantined)
		// with an error: no vote, but what it did is put back.
		rv, good := readValues(keys, r.vals)
		if !good {
			continue
		}
		read[i], u.changes[i] = rv, rv.changes
		for _, d := range rv.ttl {
			longest = max(longest, d)
		}
		if r.err == nil && !noScript(r.vals[at]) {
			vals[i], ok[i] = rv.v, true
		}
	}
	v, agreed := b.voteValue(vals, ok)
	if !agreed {
		// Replies that differ only by when each node ran the script (a
		// Redisson refusal answers the key's PTTL) settle by time among the
		// nodes where the script changed nothing (evalOutcome says why).
		tv := make([]bool, len(ok))
		for i := range ok {
			tv[i] = ok[i] && len(read[i].changes) == 0
		}
		v, agreed = b.voteTime(vals, tv)
	}
	b.noteTTL(longest) // the restart quarantine, whatever the outcome
	for i := range ok {
		u.agreed[i] = agreed && ok[i] && sameValue(vals[i], v)
	}
	// Validity: a key changed, its expiry set by the script, on Q nodes
	// that gave the agreed reply must outlive the vote plus the drift, by
	// the shortest TTL among them. A refusal that only tidied the key
	// (a semaphore dropping lapsed members) sets no expiry and is not a
	// grant to check.
	var shortest time.Duration
	for j, k := range keys {
		n, short := 0, time.Duration(0)
		for i := range read {
			if u.agreed[i] && read[i].changed(k) && read[i].expSet[j] && b.lockTTL(read[i].ttl[j]) {
				n++
				if short == 0 || read[i].ttl[j] < short {
					short = read[i].ttl[j]
				}
			}
		}
		if n >= b.q && (shortest == 0 || short < shortest) {
			shortest = short
		}
	}
	late := agreed && shortest > 0 && elapsed+b.drift(shortest) >= shortest
	u.all = !agreed || late
	if !u.all {
		u.granted = valuesGranted(keys, read, u.agreed, b.q)
	}
	switch {
	case late:
		return backend.Value{}, &backend.ReplyError{Reply: fmt.Sprintf(
			"TRYAGAIN quorum reached too late: the script's acquire took %dms of a %dms TTL", elapsed.Milliseconds(), shortest.Milliseconds())}, u
	case !agreed:
		return backend.Value{}, b.errNoQuorum(replies), u
	case v.Kind == backend.KindError:
		return backend.Value{}, backend.Reply(string(v.Str)), u
	}
	return v, nil, u
}

// valuesGranted are the keys a script watched by values created (absent
// before) on q of the nodes that gave the agreed reply: a hash lock's
// first acquire, a semaphore's first member. A re-entrant acquire changes
// a key that was there and keeps its grant.
func valuesGranted(keys []string, read []valuesReply, agreed []bool, q int) []grantedKey {
	var out []grantedKey
	for j, k := range keys {
		n := 0
		var ttl time.Duration
		for i := range read {
			if !agreed[i] {
				continue
			}
			for _, c := range read[i].changes {
				if c.key == k && c.pre == nil && c.post != nil {
					n++
					if j < len(read[i].ttl) {
						ttl = read[i].ttl[j]
					}
					break
				}
			}
		}
		if n >= q {
			out = append(out, grantedKey{key: k, ttl: ttl})
		}
	}
	return out
}

// restoreRequests are the restores of u.changes by node: on every node
// that changed something and did not give the agreed reply, or on every
// node that changed something when u.all (nil for a node with nothing to
// put back; nil when no node has any).
func (u evalUndo) restoreRequests() []*req {
	var reqs []*req
	for i, c := range u.changes {
		if len(c) == 0 || (!u.all && u.agreed[i]) {
			continue
		}
		if reqs == nil {
			reqs = make([]*req, len(u.changes))
		}
		reqs[i] = restoreRequest(c)
	}
	return reqs
}

// lateChanges returns what a script watched by values changed on a node
// whose reply came after the vote ended and is not the one the client
// was told (or the vote failed): it is put back there too, owner-checked
// as before the answer. Unlike a string key's late write, which is
// repaired (lateWrote), a restore needs no look at the other nodes: it
// puts back exactly the node's state from before the script, and only
// while nothing else changed the key since.
func lateChanges(keys []string, told backend.Value, failed bool, vals []backend.Value, err error) []valueChange {
	if err != nil {
		return nil
	}
	rv, ok := readValues(keys, vals)
	if !ok || len(rv.changes) == 0 || (!failed && sameValue(rv.v, told)) {
		return nil
	}
	return rv.changes
}

// repairValueScript sets KEYS[1] to the value a majority of nodes holds,
// while it still holds what the repair read there: ARGV[1] that DUMP (""
// for absent), ARGV[2] the majority's DUMP ("" for absent: deleted),
// ARGV[3] its TTL in ms (0 for none).
var repairValueScript = newNodeScript(`if (redis.call('dump', KEYS[1]) or '') ~= ARGV[1] then return 0 end
if ARGV[2] == '' then return redis.call('del', KEYS[1]) end
redis.call('restore', KEYS[1], ARGV[3], ARGV[2], 'replace')
return 1`)

// repairValue is repairKey for a key that holds a value beyond strings on
// node rk.node (a write to it, or a script, lost its reply there: it may
// have run). The value is read on every node (DUMP, PTTL); the node's is
// kept when Q nodes hold the same, left for later while the nodes that did
// not answer could make it Q, and otherwise, when Q other nodes agree on
// one value (absent included), set to that value, with the shortest TTL
// among them, owner-checked against what was read there. With no value on
// Q nodes it is left as it is: no majority read sees it either way.
func (b *Backend) repairValue(ctx context.Context, rk repairKey) bool {
	r := &req{quiet: true}
	r.cmds.Strs("dump", rk.key)
	r.cmds.Strs("pttl", rk.key)
	replies := b.fanout(ctx, rk.db, rk.key, same(r), nil)
	type value struct {
		dump []byte
		n    int
		ttl  int64 // the shortest, in ms; 0 for none
	}
	var values []value
	mine, ok := dumpReply(replies[rk.node])
	if !ok {
		return false
	}
	holders, unknown := 0, 0
	for i, nr := range replies {
		d, ok := dumpReply(nr)
		if !ok {
			unknown++
			continue
		}
		if bytes.Equal(d, mine) {
			holders++
		}
		if i == rk.node {
			continue
		}
		ttl := nr.vals[1].Int
		j := 0
		for j < len(values) && !bytes.Equal(values[j].dump, d) {
			j++
		}
		if j == len(values) {
			values = append(values, value{dump: d, ttl: max(ttl, 0)})
		}
		values[j].n++
		if ttl > 0 && (values[j].ttl == 0 || ttl < values[j].ttl) {
			values[j].ttl = ttl
		}
	}
	switch {
	case holders >= b.q:
		return true // a majority holds it
	case holders+unknown >= b.q:
		return false // it might be one: asked again later
	}
	for _, v := range values {
		if v.n >= b.q {
			fix := &req{quiet: true}
			runScript(&fix.cmds, repairValueScript, true, []string{rk.key}, mine, v.dump, strconv.AppendInt(nil, v.ttl, 10))
			b.fanout(ctx, rk.db, rk.key, only(rk.node, fix), nil)
			return true
		}
	}
	return true
}

// dumpReply reads a node's reply to DUMP and PTTL: the payload (nil for
// absent); ok is false for a failure or an error reply.
func dumpReply(nr nodeReply) ([]byte, bool) {
	if nr.err != nil || len(nr.vals) != 2 || nr.vals[1].Kind != backend.KindInt {
		return nil, false
	}
	switch v := nr.vals[0]; v.Kind {
	case backend.KindBulk:
		return v.Str, true
	case backend.KindNil:
		return nil, true
	}
	return nil, false
}
