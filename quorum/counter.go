package quorum

import (
	"bytes"
	"context"
	"math"
	"strconv"

	"github.com/lockproxy/lockproxy/backend"
)

// Counters (INCR, INCRBY, DECR, DECRBY) are not run on each node as they
// come: a node that missed one increment would answer one less from then
// on, no reply would find a majority again, and a counter used as a
// fencing token (Redisson's, bsm/redislock's FenceKey) could be read back
// lower than a value already handed out. Instead:
//
//  1. every node's value is read (GET); Q replies are needed, and the
//     base is the largest integer among them (absent: 0);
//  2. each node is moved from the value it just showed to base+by, by a
//     script that checks the value is still that one (a compare-and-set
//     per node); the new value is answered once Q nodes moved;
//  3. otherwise (another instance moved the counter in between) the
//     round starts again, a few times, then TRYAGAIN.
//
// A value answered was written on Q nodes, and the next read covers every
// reachable node, so it meets one of them: an INCR never answers a value
// at or below one answered before, across instances too, as long as a
// majority of the nodes that took it keep their data (a counter has no
// TTL, so the restart quarantine does not cover it). Two instances cannot
// both move a majority to the same value: a node moves once from the
// value both read. The key keeps its expiry (KEEPTTL).

// casScript moves a node's counter to ARGV[2] when it still holds ARGV[1]
// (ARGV[3] "1": still absent); 1 when it did.
var casScript = newNodeScript(`local v = redis.call('get', KEYS[1])
if (ARGV[3] == '1' and v == false) or v == ARGV[1] then
  redis.call('set', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
return 0`)

// counterRounds bounds the rounds of one counter command.
const counterRounds = 5

// counter runs INCR, DECR, INCRBY or DECRBY (name) on key: args[2] is the
// increment of the BY forms.
func (b *Backend) counter(ctx context.Context, db int, key, name string, args [][]byte) (backend.Value, error) {
	by := int64(1)
	switch name {
	case "decr":
		by = -1
	case "incrby", "decrby":
		n, ok := backend.ParseInt(args[2])
		if !ok {
			return backend.Value{}, backend.Reply(backend.MsgNotInteger)
		}
		if name == "decrby" {
			if n == math.MinInt64 {
				return backend.Value{}, backend.Reply(backend.MsgDecrOverflow)
			}
			n = -n
		}
		by = n
	}
	defer b.lockKeys(key)()
	var replies []nodeReply
	for range counterRounds {
		replies = b.do(ctx, db, "get", key)
		base, err := b.counterBase(replies)
		if err != nil {
			return backend.Value{}, err
		}
		if (by < 0 && base < 0 && by < math.MinInt64-base) || (by > 0 && base > 0 && by > math.MaxInt64-base) {
			return backend.Value{}, backend.Reply(backend.MsgOverflow)
		}
		next := []byte(strconv.FormatInt(base+by, 10))
		// What each node showed, copied: the replies' buffers are reused.
		seen := make([][]byte, len(replies))
		absent := make([][]byte, len(replies))
		for i, r := range replies {
			switch v, ok := one(r); {
			case ok && v.Kind == backend.KindBulk:
				seen[i], absent[i] = bytes.Clone(v.Str), []byte("0")
			case ok && v.Kind == backend.KindNil:
				seen[i], absent[i] = []byte{}, []byte("1")
			}
		}
		cas := func(i int, eval bool) *req {
			if absent[i] == nil {
				return nil // no value to compare with: it stays as it is
			}
			r := &req{}
			runScript(&r.cmds, casScript, eval, []string{key}, seen[i], next, absent[i])
			if !eval {
				r.load = casScript.ref()
			}
			return r
		}
		replies = b.fanout(ctx, db, key, func(i int) *req { return cas(i, false) }, func(i int, r nodeReply) *req {
			if v, ok := one(r); ok && noScript(v) {
				return cas(i, true)
			}
			return nil
		})
		moved := 0
		for _, r := range replies {
			if v, ok := one(r); ok && v.Kind == backend.KindInt && v.Int == 1 {
				moved++
			}
		}
		if moved >= b.q {
			return backend.Int(base + by), nil
		}
		if err := ctx.Err(); err != nil {
			break
		}
	}
	return backend.Value{}, b.errNoQuorum(replies)
}

// counterBase is the largest counter value among the nodes' GET replies,
// with Redis's errors when Q nodes agree on one (WRONGTYPE, a value that
// is not an integer).
func (b *Backend) counterBase(replies []nodeReply) (int64, error) {
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
