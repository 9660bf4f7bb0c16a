package quorum

import (
	"context"
	"slices"
	"strings"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
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
// Counters are counter.go's, the commands on the key space as a whole
// keyspace.go's. The horizon
// marker is out of reach of these commands (msgMarkerReserved).
//
// A command ends once Q nodes gave the same reply, so a paused or slow
// node costs nothing; a write whose connection breaks unanswered has its
// keys repaired on that node (repairValue: set to the value Q other nodes
// agree on). Scripts that may write these types are watched by value
// (values.go): what one did on a node whose reply is not the one the
// client was told is put back there, owner-checked, late replies
// included, and a grant gets the validity check and counts toward the
// restart quarantine.
//
// Not yet: a command sent alone (not in a script) that lost the vote is
// not undone on the nodes that ran it, and its late reply is not looked
// at: a ZADD or HSET on a minority stays there until the key's TTL, or
// until a lost connection's repair brings the node in line.
func (b *Backend) Do(ctx context.Context, db int, keys []string, args [][]byte) (backend.Value, error) {
	name := strings.ToLower(string(args[0]))
	if v, err, ok := b.keyspaceCommand(ctx, db, name, args); ok {
		return v, err
	}
	if db == markerDB && slices.Contains(keys, markerKey) {
		return backend.Value{}, backend.Reply(msgMarkerReserved)
	}
	switch name {
	case "incr", "decr", "incrby", "decrby":
		return b.counter(ctx, db, keys[0], name, args)
	}
	r := &req{}
	if c := keycmd.Lookup(args[0]); c != nil && c.Write {
		defer b.lockKeys(keys...)()
		// A write whose connection breaks unanswered may still run on
		// that node: its keys are repaired there (repair.go, values).
		r.repair = keys
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
		return ok
	})
	v, err := b.voteReply(replies)
	switch {
	case err != nil:
		return backend.Value{}, err
	case v.Kind == backend.KindNil && len(args) == 3 && (name == "lpop" || name == "rpop"):
		return backend.Value{Kind: backend.KindNilArray}, nil // RESP3's null stands for RESP2's null array here
	}
	return flattenPairs(v), nil
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
