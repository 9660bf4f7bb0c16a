package quorum

import (
	"context"
	"strconv"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// Fencing tokens (docs/fencing.md). A grant's fence is taken when it is
// read (LOCKPROXY FENCE or LOCK), not at the grant: the read happens while
// the grant is live, after every earlier grant of the key ended, so fences
// taken in the order of the reads grow in the order of the grants, and a
// lock nobody asks the fence of costs nothing.
//
// The fences come from one counter, the field fence of the horizon marker
// in every node's database 15 (marker.go), taken like a counter
// (counter.go) but merged rather than compared-and-set, so that readers at
// once never retry:
//
//  1. every node's value is read; Q replies are needed, and the fence is
//     one above the largest, or this process's clock in microseconds if
//     that is larger;
//  2. every node is raised to the fence where it is lower (a max-merge);
//     the fence is answered once Q nodes hold it or more;
//  3. only then is the grant read (the key holds the token on Q nodes):
//     a fence answered for a grant was taken before the grant ended.
//
// A later read meets, among the Q nodes it reads, one of the Q that were
// raised, so it takes a greater fence, across instances too, as long as
// the nodes raised keep their data. The restart quarantine (safety.go,
// marker.go) keeps a node that restarted empty out of both steps until the
// longest TTL has passed, so that the reads meanwhile meet the raised
// nodes that kept their value; it does not bring the lost value back. A
// read after it may meet only that node and one never raised: then, as
// after a majority's loss or for a new cluster, the clock orders the
// fences. The restart and the quarantine took seconds, and a fence is at
// least its instance's clock in microseconds, so the next one is above
// every earlier one unless fences were taken faster than one per
// microsecond or the instances' clocks disagree by more than that time. Two readers at once may take the same fence: they read
// different keys' grants (one grant of a key at a time), whose fences are
// not compared.
//
// Scripts run on the nodes, which do not know LOCKPROXY: a script that
// calls it fails there, so a client reads its fence with the command
// after its acquire.

// fenceRaise raises a node's fence to ARGV[1] where it is lower and
// answers the node's fence after.
var fenceRaise = newNodeScript(`local c = tonumber(redis.call('hget', KEYS[1], 'fence') or '0')
local f = tonumber(ARGV[1])
if c < f then
  redis.call('hset', KEYS[1], 'fence', ARGV[1])
  return f
end
return c`)

// holdsScript answers 1 when the key holds ARGV[1] (model.holds: a
// string's value, a hash's field, a set's or sorted set's member), else 0.
var holdsScript = newNodeScript(`local t = redis.call('type', KEYS[1]).ok
if t == 'string' then return redis.call('get', KEYS[1]) == ARGV[1] and 1 or 0
elseif t == 'hash' then return redis.call('hexists', KEYS[1], ARGV[1])
elseif t == 'set' then return redis.call('sismember', KEYS[1], ARGV[1])
elseif t == 'zset' then return redis.call('zscore', KEYS[1], ARGV[1]) and 1 or 0 end
return 0`)

// lockproxy runs LOCKPROXY FENCE, LOCK and HELP.
func (b *Backend) lockproxy(ctx context.Context, db int, args [][]byte) (backend.Value, error) {
	sub, err := model.CheckLockproxy(args)
	switch {
	case err != nil:
		return backend.Value{}, err
	case sub == "help":
		return model.LockproxyHelp, nil
	case sub == "locks" || sub == "release":
		return backend.Value{}, backend.Reply(model.NotInScripts(sub))
	}
	key := string(args[2])
	f, err := b.newFence(ctx)
	if err != nil {
		return backend.Value{}, err
	}
	if sub == "fence" {
		held, err := b.holds(ctx, db, key, args[3])
		if err != nil || !held {
			return backend.Value{Kind: backend.KindNil}, err
		}
		return backend.Int(f), nil
	}
	pttl, err := b.PTTL(ctx, db, key)
	if err != nil || pttl == -2 {
		return backend.Value{Kind: backend.KindNil}, err
	}
	tok := backend.Value{Kind: backend.KindNil}
	var raw []byte // nil: a value of another type
	switch v, ok, err := b.Get(ctx, db, key); {
	case backend.IsWrongType(err): // a value of another type: no token
	case err != nil:
		return backend.Value{}, err
	case !ok:
		return backend.Value{Kind: backend.KindNil}, nil // ended meanwhile
	default:
		tok, raw = backend.Bulk(v), append([]byte{}, v...)
	}
	holder := model.HolderValue(b.grants.lookup(db, key, raw), b.nodesHolding(ctx, db, key, raw))
	return backend.Array(tok, backend.Int(f), backend.Int(pttl), holder), nil
}

// newFence takes the next fence (the top of this file).
func (b *Backend) newFence(ctx context.Context) (int64, error) {
	read := &req{}
	read.cmds.Strs("hget", markerKey, "fence")
	base, err := b.fenceBase(b.fanout(ctx, markerDB, markerKey, same(read), nil))
	if err != nil {
		return 0, err
	}
	f := max(base+1, time.Now().UnixMicro())
	arg := strconv.AppendInt(nil, f, 10)
	raise := &req{load: fenceRaise.ref()}
	runScript(&raise.cmds, fenceRaise, false, []string{markerKey}, arg)
	replies := b.fanout(ctx, markerDB, markerKey, same(raise), scriptFallback(fenceRaise, []string{markerKey}, arg))
	raised := 0
	for _, r := range replies {
		if v, ok := one(r); ok && v.Kind == backend.KindInt && v.Int >= f {
			raised++
		}
	}
	if raised < b.q {
		return 0, b.errNoQuorum(replies)
	}
	return f, nil
}

// holds reports whether key holds tok on Q nodes; N−Q+1 nodes saying it
// does not is false, anything else TRYAGAIN.
func (b *Backend) holds(ctx context.Context, db int, key string, tok []byte) (bool, error) {
	r := &req{load: holdsScript.ref()}
	runScript(&r.cmds, holdsScript, false, []string{key}, tok)
	defer b.rlockKeys(key)()
	return b.voteBool(b.fanout(ctx, db, key, same(r), scriptFallback(holdsScript, []string{key}, tok)))
}

// fenceBase is the largest fence among the nodes' HGET replies: fences
// only rise (fenceRaise), so the largest of Q replies is at least the
// last fence taken. Redis's errors when Q nodes agree on one.
func (b *Backend) fenceBase(replies []nodeReply) (int64, error) {
	if err, ok := b.voteError(replies); ok {
		return 0, err
	}
	var base int64
	have, notInt := 0, 0
	for _, r := range replies {
		v, ok := one(r)
		if !ok || (v.Kind != backend.KindNil && v.Kind != backend.KindBulk) {
			continue
		}
		var n int64 // absent: 0
		if v.Kind == backend.KindBulk {
			var isInt bool
			if n, isInt = backend.ParseInt(v.Str); !isInt {
				notInt++
				continue
			}
		}
		if have == 0 || n > base {
			base = n
		}
		have++
	}
	switch {
	case notInt >= b.q:
		return 0, backend.Reply(backend.MsgNotInteger)
	case have < b.q:
		return 0, b.errNoQuorum(replies)
	}
	return base, nil
}
