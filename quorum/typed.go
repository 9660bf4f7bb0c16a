package quorum

import (
	"bytes"
	"context"
	"slices"
	"strings"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
	"github.com/lockproxy/lockproxy/luascripts"
)

// msgMarkerReserved refuses a value-type command on the horizon marker,
// which a client could otherwise lower (HSET) and so shorten a restarted
// node's quarantine.
const msgMarkerReserved = "ERR lockproxy reserves " + markerKey + " in database 15 (the quorum backend's horizon marker)"

// Do implements backend.KeySpace: the command runs on every node as it
// came, and the reply Q nodes agree on is the answer (an error reply
// counts as a reply); otherwise TRYAGAIN. Nodes speak RESP3, so maps, sets
// and doubles keep their kind; ZRANGE … WITHSCORES pairs are flattened
// back (backend.KindPairs). EXPIRETIME and PEXPIRETIME answer the median
// of the nodes' deadlines, which differ by the nodes' receipt times.
//
// The commands on the key space as a whole are keyspace.go's; the writes
// that do not take the same twice (counters, pushes, pops: modelWrites)
// run on the model. The horizon marker is out of reach of these commands
// (msgMarkerReserved).
//
// A read ends once Q nodes gave the same reply, so a paused or slow node
// costs nothing. A write that may add runs as a script watched by value
// (typedWrite, values.go), as the scripts that may write these types do:
// what it did on a node whose reply is not the one the client was told is
// put back there, owner-checked, late replies included. One that only
// removes (removesOnly) runs as sent, like a read, and is not put back.
// A write whose connection breaks unanswered has its keys repaired on
// that node (repairValue: set to the value Q other nodes agree on).
func (b *Backend) Do(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	name := strings.ToLower(string(args[0]))
	if v, err, ok := b.keyspaceCommand(ctx, db, name, args); ok {
		return v, err
	}
	if db == markerDB && slices.Contains(keys, markerKey) {
		return backend.Value{}, backend.Reply(msgMarkerReserved)
	}
	if name == "lockproxy" { // fencing.go
		return b.lockproxy(ctx, db, args)
	}
	if len(keys) > 0 && modelWrite(name, args) {
		return b.modelCommand(ctx, db, keys, args)
	}
	c := keycmd.Lookup(args[0])
	if c != nil && c.Write && len(keys) > 0 && !removesOnly[name] {
		return b.typedWrite(ctx, db, name, keys, args)
	}
	r := &req{}
	if c != nil && c.Write {
		defer b.lockKeys(keys...)()
		// A write whose connection breaks unanswered may still run on
		// that node: its keys are repaired there (repair.go, values).
		r.repair = keys
	} else {
		defer b.rlockKeys(keys...)() // a read waits for the writes before it (stripe.go)
	}
	r.cmds.Cmd(len(args))
	for _, a := range args {
		r.cmds.ArgBytes(a)
	}
	key := ""
	if len(keys) > 0 {
		key = keys[0]
	}
	if name == "expiretime" || name == "pexpiretime" {
		return b.medianInt(b.fanout(ctx, db, key, same(r), nil))
	}
	// It ends once Q nodes gave the same reply: a paused or slow node
	// costs nothing (a semaphore's release is a plain ZREM). Its reply,
	// when it comes, is not looked at, as a timed-out one was not.
	_, replies := b.fanoutUntil(ctx, db, key, same(r), nil, func(replies []nodeReply) bool {
		_, ok := b.voteOne(replies)
		if !ok && unordered[name] {
			_, ok = b.voteOne(inOrder(replies))
		}
		return ok
	})
	v, err := b.voteReply(replies)
	if err != nil && unordered[name] {
		v, err = b.voteUnordered(replies)
	}
	if err != nil {
		return backend.Value{}, err
	}
	return typedReply(name, args, v), nil
}

// voteUnordered votes on an unordered read's members by meaning, for
// nodes that hold the same hash or set and list it in different orders:
// the reply is one of the agreeing nodes' own, in its order.
func (b *Backend) voteUnordered(replies []nodeReply) (backend.Value, error) {
	sorted := inOrder(replies)
	v, err := b.voteReply(sorted)
	if err != nil {
		return v, err
	}
	for i, r := range sorted {
		if len(r.vals) == 1 && r.err == nil && sameValue(r.vals[0], v) {
			return replies[i].vals[0], nil
		}
	}
	return v, nil
}

// typedReply is a node's RESP3 reply to a typed command as the client's
// protocol needs it: RESP3's null for a counted LPOP or RPOP stands for
// RESP2's null array, and ZRANGE … WITHSCORES pairs are flattened.
func typedReply(name string, args [][]byte, v backend.Value) backend.Value {
	if v.Kind == backend.KindNil && len(args) == 3 && (name == "lpop" || name == "rpop") {
		return backend.Value{Kind: backend.KindNilArray}
	}
	return flattenPairs(v)
}

// typedWriteScript runs a typed write as the client sent it, its reply in
// RESP3 as the command's own (a double stays a double), an error reply
// returned rather than raised, so that it reads as the command's. (The
// writes whose replies are counts beyond Lua's doubles, HINCRBY's, run on
// the model: modelWrites.)
var typedWriteScript = backend.Script{Src: typedWriteSrc, SHA1: luascripts.SHA1(typedWriteSrc)}

const typedWriteSrc = "redis.setresp(3) return redis.pcall(unpack(ARGV))"

// removesOnly are the typed writes that only take away, and take the same
// whether they run once or twice (a release: a semaphore's ZREM). They
// run as sent, not as typedWrite: putting one back where it lost the vote
// would give a released permit back to its holder until the TTL. Found
// by TestAvailability under the suite's load: with a node slow, the
// Semaphore's releases missed their majority, were put back everywhere,
// and contended grants fell to a twentieth.
var removesOnly = map[string]bool{
	"zrem": true, "zremrangebyscore": true, "hdel": true, "srem": true,
}

// modelWrites are the typed writes whose effect depends on the state they
// find and that do not take the same when they run twice: counters,
// pushes, pops, moves. Run on each node as sent, two instances'
// writes reach the nodes in different orders, the replies split, and one
// answered TRYAGAIN stays applied where it ran (issue 39: 240
// acknowledged HINCRBYs read back as 505). They run once, on the model,
// as a script of that one command would (evalmodel.go): read from a
// majority under leases, committed compare-and-set, put back on TRYAGAIN.
// modelWrite adds ZADD … INCR; SET … GET takes the same path from Set.
var modelWrites = map[string]bool{
	"incr": true, "decr": true, "incrby": true, "decrby": true, "hincrby": true, "zincrby": true,
	"lpush": true, "rpush": true, "lpushx": true, "rpushx": true, "lpop": true, "rpop": true,
	"lmove": true, "rpoplpush": true, "lrem": true, "ltrim": true, "zpopmin": true, "zpopmax": true,
}

// modelWrite reports whether the typed write name with args runs on the
// model: one of modelWrites, or ZADD … INCR.
func modelWrite(name string, args [][]byte) bool {
	if modelWrites[name] {
		return true
	}
	return name == "zadd" && slices.ContainsFunc(args[2:], func(a []byte) bool { return strings.EqualFold(string(a), "incr") })
}

// typedWrite runs a typed write that may add (HSET, ZADD, RENAME …) on the
// nodes as a script watched by value: a write that lost the vote is put
// back on the nodes that ran it, as a script's is (values.go), rather
// than left on a minority until the key's TTL.
func (b *Backend) typedWrite(ctx context.Context, db int, name string, keys []string, args [][]byte) (backend.Value, error) {
	v, err := b.runEval(ctx, db, typedWriteScript, keys, args, false, watchValues, false)
	if err != nil {
		return backend.Value{}, err
	}
	return typedReply(name, args, v), nil
}

// flattenPairs turns a RESP3 array of two-element arrays (ZRANGE …
// WITHSCORES) into backend.KindPairs, which renders flat for RESP2.
func flattenPairs(v backend.Value) backend.Value {
	if v.Kind != backend.KindArray || len(v.Elems) == 0 {
		return v
	}
	flat := make([]backend.Value, 0, 2*len(v.Elems))
	for _, e := range v.Elems {
		if e.Kind != backend.KindArray || len(e.Elems) != 2 || e.Elems[1].Kind != backend.KindDouble {
			return v
		}
		flat = append(flat, e.Elems...)
	}
	return backend.Value{Kind: backend.KindPairs, Elems: flat}
}

// medianInt is the median of Q or more integer replies; a -2 or -1 needs a
// majority of its own.
func (b *Backend) medianInt(replies []nodeReply) (backend.Value, error) {
	var n []int64
	for _, r := range replies {
		if v, ok := one(r); ok && v.Kind == backend.KindInt {
			n = append(n, v.Int)
		}
	}
	if len(n) < b.q {
		return b.voteReply(replies)
	}
	slices.Sort(n)
	m := n[len(n)/2]
	if m < 0 {
		return b.voteReply(replies)
	}
	return backend.Int(m), nil
}

// voteReply is the reply Q nodes agree on, an error reply as an error.
func (b *Backend) voteReply(replies []nodeReply) (backend.Value, error) {
	v, ok := b.voteOne(replies)
	switch {
	case !ok:
		return backend.Value{}, b.errNoQuorum(replies)
	case v.Kind == backend.KindError:
		return backend.Value{}, backend.Reply(string(v.Str))
	}
	return v, nil
}

// unordered are the reads whose members Redis returns in no promised
// order: each node walks its own hash table, so two nodes holding the same
// hash or set list it differently (a hash of 600 fields never agreed).
var unordered = map[string]bool{"hkeys": true, "hvals": true, "hgetall": true, "smembers": true}

// inOrder is replies with the members of an unordered read sorted (a
// hash's field-value pairs by field), so that nodes holding the same
// value agree by meaning.
func inOrder(replies []nodeReply) []nodeReply {
	out := make([]nodeReply, len(replies))
	for i, r := range replies {
		out[i] = r
		if len(r.vals) == 1 && r.err == nil {
			out[i].vals = []backend.Value{sortedMembers(r.vals[0])}
		}
	}
	return out
}

// sortedMembers is v with its elements sorted: a map's pairs by key, an
// array's or a set's elements by their text.
func sortedMembers(v backend.Value) backend.Value {
	switch v.Kind {
	case backend.KindMap:
		pairs := make([][2]backend.Value, len(v.Elems)/2)
		for i := range pairs {
			pairs[i] = [2]backend.Value{v.Elems[2*i], v.Elems[2*i+1]}
		}
		slices.SortFunc(pairs, func(a, b [2]backend.Value) int { return bytes.Compare(a[0].Str, b[0].Str) })
		elems := make([]backend.Value, 0, len(v.Elems))
		for _, p := range pairs {
			elems = append(elems, p[0], p[1])
		}
		v.Elems = elems
	case backend.KindArray, backend.KindSet:
		v.Elems = slices.Clone(v.Elems)
		slices.SortFunc(v.Elems, func(a, b backend.Value) int { return bytes.Compare(a.Str, b.Str) })
	}
	return v
}
