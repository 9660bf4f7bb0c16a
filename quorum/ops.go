package quorum

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// setScript is SET with every condition of the model, run on each node so
// that IFEQ/IFNE work on Redis 7 too. ARGV: token, cond (always, nx, xx,
// eq, ne), match, expiry mode (none, px, pxat, keepttl), expiry value.
// It answers {written, had a previous value, the previous value}.
var setScript = redis.NewScript(`local cur = redis.call('get', KEYS[1])
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
var delIfScript = redis.NewScript(`local v = redis.call('get', KEYS[1])
if v and ((ARGV[2] == 'eq') == (v == ARGV[1])) then return redis.call('del', KEYS[1]) end
return 0`)

func condName(c backend.Cond) string {
	return [...]string{backend.Always: "always", backend.IfAbsent: "nx", backend.IfPresent: "xx",
		backend.IfEqual: "eq", backend.IfNotEqual: "ne"}[c]
}

// setResult is one node's answer to setScript.
type setResult struct {
	written, had bool
	prev         []byte
}

func parseSet(v any) (setResult, bool) {
	a, ok := v.([]any)
	if !ok || len(a) < 2 {
		return setResult{}, false
	}
	w, _ := a[0].(int64)
	h, _ := a[1].(int64)
	r := setResult{written: w == 1, had: h == 1}
	if len(a) > 2 {
		if s, ok := a[2].(string); ok {
			r.prev = []byte(s)
		}
	}
	return r, true
}

// Set implements backend.KeySpace. An acquire (NX with an expiry) gets
// Redlock's validity check and owner-checked undo.
func (b *Backend) Set(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	mode, val := "none", ""
	var ttl time.Duration
	switch {
	case o.KeepTTL:
		mode = "keepttl"
	case !o.Expiry.At.IsZero():
		mode, val = "pxat", strconv.FormatInt(o.Expiry.At.UnixMilli(), 10)
		ttl = time.Until(o.Expiry.At)
	case o.Expiry.TTL > 0:
		mode, val = "px", strconv.FormatInt(o.Expiry.TTL.Milliseconds(), 10)
		ttl = o.Expiry.TTL
	}
	defer b.lockKeys(key)()
	start := time.Now()
	answers := b.fanout(ctx, db, func(ctx context.Context, c nodeConn) (any, error) {
		return c.script(ctx, setScript, []string{key}, string(token), condName(o.Cond), string(o.Match), mode, val)
	})
	elapsed := time.Since(start)

	var wrote, refused int
	results := make([]setResult, 0, len(answers))
	for _, a := range answers {
		if r, ok := parseSet(a.v); ok && a.err == nil {
			results = append(results, r)
			if r.written {
				wrote++
			} else {
				refused++
			}
		}
	}
	// The validity rule applies to an acquire with a future expiry; without
	// one (no TTL, KEEPTTL on an absent key) the lock has no deadline to
	// miss, and with one in the past Redis itself answers OK for a key that
	// is gone at once.
	valid := true
	if o.Cond == backend.IfAbsent && (mode == "px" || mode == "pxat") && ttl > 0 {
		drift := time.Duration(float64(ttl)*b.cfg.DriftFactor) + b.cfg.DriftConst
		valid = elapsed+drift < ttl
	}
	res := backend.SetResult{}
	if o.Get {
		prev, had, ok := b.votePrev(results)
		if !ok {
			b.undoIfAcquire(ctx, db, key, token, o)
			return backend.SetResult{}, b.errNoQuorum(answers)
		}
		res.Prev, res.HadPrev = prev, had
	}
	switch {
	case wrote >= b.q && valid:
		res.Written = true
		b.noteTTL(ttl)
		return res, nil
	case o.Cond == backend.IfAbsent:
		// A partial or too slow acquire is undone everywhere it may have
		// landed, nodes that did not answer included.
		b.undo(ctx, db, key, token)
	}
	if wrote >= b.q && !valid {
		// Timing, not contention, decided: never a nil, which would say
		// someone else holds the lock.
		return backend.SetResult{}, &backend.ReplyError{Reply: fmt.Sprintf(
			"TRYAGAIN quorum reached too late: the acquire took %dms of a %dms TTL", elapsed.Milliseconds(), ttl.Milliseconds())}
	}
	if refused >= len(b.nodes)-b.q+1 {
		return res, nil // certainly not ours: held elsewhere
	}
	return backend.SetResult{}, b.errNoQuorum(answers)
}

func (b *Backend) undoIfAcquire(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) {
	if o.Cond == backend.IfAbsent {
		b.undo(ctx, db, key, token)
	}
}

// undo deletes key on every node where it still holds token, under a
// context of its own: the client's may be the one that ran out.
func (b *Backend) undo(ctx context.Context, db int, key string, token []byte) {
	ctx = context.WithoutCancel(ctx)
	b.fanout(ctx, db, func(ctx context.Context, c nodeConn) (any, error) {
		return c.script(ctx, delIfScript, []string{key}, string(token), "eq")
	})
}

// votePrev returns the previous value Q nodes agree on.
func (b *Backend) votePrev(results []setResult) ([]byte, bool, bool) {
	count := map[string]int{}
	for _, r := range results {
		k := "-"
		if r.had {
			k = "+" + string(r.prev)
		}
		count[k]++
		if count[k] >= b.q {
			return r.prev, r.had, true
		}
	}
	return nil, false, false
}

// voteValue returns the reply Q nodes agree on; node errors that are Redis
// error replies count as replies.
func (b *Backend) voteValue(answers []answer) (backend.Value, bool) {
	count := map[string]int{}
	for _, a := range answers {
		v, ok := toValue(a)
		if !ok {
			continue
		}
		k := v.String()
		count[k]++
		if count[k] >= b.q {
			return v, true
		}
	}
	return backend.Value{}, false
}

// toValue converts a node's answer to a reply; ok is false for a node
// failure.
func toValue(a answer) (backend.Value, bool) {
	var rerr redis.Error
	switch {
	case a.err == nil:
		return convert(a.v), true
	case errors.Is(a.err, redis.Nil):
		return backend.NilValue, true
	case errors.As(a.err, &rerr) && !isTransient(a.err):
		return backend.ErrorValue(rerr.Error()), true
	}
	return backend.Value{}, false
}

// isTransient reports node errors that are about the node, not the
// command: it is loading, read-only, or busy with a script.
func isTransient(err error) bool {
	s := err.Error()
	for _, p := range []string{"LOADING", "READONLY", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
		if len(s) >= len(p) && s[:len(p)] == p {
			return true
		}
	}
	return false
}

func convert(v any) backend.Value {
	switch x := v.(type) {
	case backend.Value:
		return x
	case scriptRun:
		return x.v
	case nil:
		return backend.NilValue
	case int64:
		return backend.Int(x)
	case string:
		return backend.BulkString(x)
	case []any:
		out := make([]backend.Value, len(x))
		for i, e := range x {
			out[i] = convert(e)
		}
		return backend.Array(out...)
	case redis.Error:
		return backend.ErrorValue(x.Error())
	}
	return backend.ErrorValue("ERR lockproxy: unexpected node reply")
}

// voteInt runs an integer command everywhere and returns what Q nodes said.
func (b *Backend) voteInt(ctx context.Context, db int, op func(ctx context.Context, c nodeConn) (any, error)) (int64, error) {
	answers := b.fanout(ctx, db, op)
	v, ok := b.voteValue(answers)
	if !ok {
		return 0, b.errNoQuorum(answers)
	}
	if v.Kind == backend.KindError {
		return 0, backend.Reply(string(v.Str))
	}
	return v.Int, nil
}

// voteBool is for predicates: true needs Q nodes, false needs N−Q+1 nodes
// (so that true is impossible); otherwise the outcome is unknown.
func (b *Backend) voteBool(ctx context.Context, db int, op func(ctx context.Context, c nodeConn) (any, error)) (bool, error) {
	answers := b.fanout(ctx, db, op)
	yes, no := 0, 0
	for _, a := range answers {
		v, ok := toValue(a)
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
	return false, b.errNoQuorum(answers)
}

// Get implements backend.KeySpace: the token a majority holds.
func (b *Backend) Get(ctx context.Context, db int, key string) ([]byte, bool, error) {
	answers := b.fanout(ctx, db, func(ctx context.Context, c nodeConn) (any, error) { return c.Get(ctx, key).Result() })
	v, ok := b.voteValue(answers)
	if !ok {
		return nil, false, b.errNoQuorum(answers)
	}
	if v.Kind == backend.KindNil {
		return nil, false, nil
	}
	return v.Str, true, nil
}

// Del implements backend.KeySpace.
func (b *Backend) Del(ctx context.Context, db int, keys []string) (int64, error) {
	defer b.lockKeys(keys...)()
	return b.voteInt(ctx, db, func(ctx context.Context, c nodeConn) (any, error) { return c.Del(ctx, keys...).Result() })
}

// DelIf implements backend.KeySpace: an owner-checked release needs Q
// confirmations.
func (b *Backend) DelIf(ctx context.Context, db int, key string, cond backend.Cond, match []byte) (bool, error) {
	defer b.lockKeys(key)()
	return b.voteBool(ctx, db, func(ctx context.Context, c nodeConn) (any, error) {
		return c.script(ctx, delIfScript, []string{key}, string(match), condName(cond))
	})
}

// Exists implements backend.KeySpace.
func (b *Backend) Exists(ctx context.Context, db int, keys []string) (int64, error) {
	return b.voteInt(ctx, db, func(ctx context.Context, c nodeConn) (any, error) { return c.Exists(ctx, keys...).Result() })
}

// PTTL implements backend.KeySpace: -2 or -1 when a majority says so;
// otherwise the time to live that at least Q nodes still have.
func (b *Backend) PTTL(ctx context.Context, db int, key string) (int64, error) {
	answers := b.fanout(ctx, db, func(ctx context.Context, c nodeConn) (any, error) {
		return c.Do(ctx, "pttl", key).Result()
	})
	var live []int64
	count := map[int64]int{}
	for _, a := range answers {
		v, ok := toValue(a)
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
	return 0, b.errNoQuorum(answers)
}

// Expire implements backend.KeySpace. An extension that took longer than
// the new TTL (less the drift allowance) is reported as failed: the key may
// already have expired on some nodes.
func (b *Backend) Expire(ctx context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	args := []any{"pexpire", key, e.TTL.Milliseconds()}
	ttl := e.TTL
	if !e.At.IsZero() {
		args = []any{"pexpireat", key, e.At.UnixMilli()}
		ttl = time.Until(e.At)
	}
	switch cond {
	case backend.ExpireNX:
		args = append(args, "nx")
	case backend.ExpireXX:
		args = append(args, "xx")
	case backend.ExpireGT:
		args = append(args, "gt")
	case backend.ExpireLT:
		args = append(args, "lt")
	case backend.ExpireLTXX:
		args = append(args, "lt", "xx")
	}
	defer b.lockKeys(key)()
	start := time.Now()
	ok, err := b.voteBool(ctx, db, func(ctx context.Context, c nodeConn) (any, error) { return c.Do(ctx, args...).Result() })
	if ok && ttl > 0 {
		b.noteTTL(ttl)
		drift := time.Duration(float64(ttl)*b.cfg.DriftFactor) + b.cfg.DriftConst
		ok = time.Since(start)+drift < ttl
	}
	return ok, err
}

// Persist implements backend.KeySpace.
func (b *Backend) Persist(ctx context.Context, db int, key string) (bool, error) {
	defer b.lockKeys(key)()
	return b.voteBool(ctx, db, func(ctx context.Context, c nodeConn) (any, error) { return c.Do(ctx, "persist", key).Result() })
}

// MSet implements backend.KeySpace.
func (b *Backend) MSet(ctx context.Context, db int, pairs []backend.KV, nx bool) (bool, error) {
	args := []any{"mset"}
	if nx {
		args[0] = "msetnx"
	}
	var keys []string
	for _, p := range pairs {
		args = append(args, p.Key, string(p.Value))
		keys = append(keys, p.Key)
	}
	defer b.lockKeys(keys...)()
	if !nx {
		answers := b.fanout(ctx, db, func(ctx context.Context, c nodeConn) (any, error) { return c.Do(ctx, args...).Result() })
		if v, ok := b.voteValue(answers); ok && v.Kind != backend.KindError {
			return true, nil
		}
		return false, b.errNoQuorum(answers)
	}
	return b.voteBool(ctx, db, func(ctx context.Context, c nodeConn) (any, error) { return c.Do(ctx, args...).Result() })
}

// DBSize implements backend.KeySpace: the median of the nodes' counts
// (keys on a minority of nodes make the count approximate by nature).
func (b *Backend) DBSize(ctx context.Context, db int) (int64, error) {
	answers := b.fanout(ctx, db, func(ctx context.Context, c nodeConn) (any, error) { return c.DBSize(ctx).Result() })
	var n []int64
	for _, a := range answers {
		if v, ok := toValue(a); ok && v.Kind == backend.KindInt {
			n = append(n, v.Int)
		}
	}
	if len(n) < b.q {
		return 0, b.errNoQuorum(answers)
	}
	slices.Sort(n)
	return n[len(n)/2], nil
}

// Eval implements backend.Backend: the script runs on every node (EVALSHA,
// EVAL when a node does not know it) and the reply Q nodes agree on is
// returned.
//
// Scripts that acquire are recognised by what they do, not by their SHA1:
// each node reads the script's KEYS just before and just after it, in the
// same pipeline, and reports the keys the script created (absent before,
// holding one of the script's ARGV after). A key created on fewer than Q
// nodes, or on any node when no reply reached a majority, is removed again
// on those nodes with an owner-checked delete: a failed acquire leaves
// nothing behind, as an undone SET NX does.
func (b *Backend) Eval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	argv := make([]any, len(args))
	for i, a := range args {
		argv[i] = string(a)
	}
	defer b.lockKeys(keys...)()
	sha, eval := "evalsha", "eval"
	if ro {
		sha, eval = "evalsha_ro", "eval_ro"
	}
	answers := b.fanout(ctx, db, func(ctx context.Context, c nodeConn) (any, error) {
		cmd := append([]any{sha, s.SHA1, len(keys)}, toAny(keys)...)
		r, err := runScript(ctx, c, keys, append(cmd, argv...), !ro)
		if err == nil && bytes.HasPrefix(r.raw, []byte("-NOSCRIPT")) {
			cmd[0], cmd[1] = eval, s.Src
			r, err = runScript(ctx, c, keys, append(cmd, argv...), !ro)
		}
		if err != nil {
			return nil, err
		}
		if bytes.HasPrefix(r.raw, []byte("-")) && isTransient(errors.New(string(r.raw[1:]))) {
			return nil, errors.New(string(bytes.TrimSpace(r.raw[1:]))) // the node, not the script, failed
		}
		r.created = created(keys, r.pre, r.post, args)
		if r.v, err = parseRESP(r.raw); err != nil {
			return nil, err
		}
		return r, nil
	})
	v, ok := b.voteValue(answers)
	if !ok {
		v, ok = b.voteTime(answers)
	}
	b.undoCreated(ctx, db, answers, !ok)
	if !ok {
		return backend.Value{}, b.errNoQuorum(answers)
	}
	if v.Kind == backend.KindError {
		return backend.Value{}, backend.Reply(string(v.Str))
	}
	return v, nil
}

// scriptRun is one node's run of a script: its raw reply and what its
// keys held around it.
type scriptRun struct {
	raw       []byte
	v         backend.Value
	pre, post []any
	created   map[string]string // key → the value the script left in it
}

// runScript runs cmd (EVALSHA or EVAL) on one node; when watch is set and
// the script has keys, the keys are read just before and after it in the
// same pipeline (one round trip).
func runScript(ctx context.Context, c nodeConn, keys []string, cmd []any, watch bool) (scriptRun, error) {
	ev := redis.NewRawCmd(ctx, cmd...)
	if !watch || len(keys) == 0 {
		err := c.bt.do(ctx, ev)
		return scriptRun{raw: ev.Val()}, err
	}
	mget := append([]any{"mget"}, toAny(keys)...)
	pre, post := redis.NewSliceCmd(ctx, mget...), redis.NewSliceCmd(ctx, mget...)
	if err := c.bt.do(ctx, pre, ev, post); err != nil {
		return scriptRun{}, err
	}
	return scriptRun{raw: ev.Val(), pre: pre.Val(), post: post.Val()}, nil
}

// script runs one of the proxy's own node scripts through the batcher
// (EVALSHA; on NOSCRIPT, go-redis loads it with EVAL).
func (c nodeConn) script(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	cmd := redis.NewCmd(ctx, append(append([]any{"evalsha", s.Hash(), len(keys)}, toAny(keys)...), args...)...)
	err := c.bt.do(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return s.Run(ctx, c, keys, args...).Result()
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// created lists the keys absent before the script and holding one of its
// arguments after it.
func created(keys []string, pre, post []any, args [][]byte) map[string]string {
	if len(pre) != len(keys) || len(post) != len(keys) {
		return nil
	}
	var out map[string]string
	for i, k := range keys {
		after, ok := post[i].(string)
		if pre[i] != nil || !ok {
			continue
		}
		for _, a := range args {
			if after == string(a) {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = after
				break
			}
		}
	}
	return out
}

// undoCreated removes, with owner-checked deletes, the keys a script
// created on fewer than Q nodes, or on any node when the vote failed.
func (b *Backend) undoCreated(ctx context.Context, db int, answers []answer, voteFailed bool) {
	count := map[string]int{}
	for _, a := range answers {
		if r, ok := a.v.(scriptRun); ok {
			for k := range r.created {
				count[k]++
			}
		}
	}
	undo := map[int]map[string]string{}
	for _, a := range answers {
		r, ok := a.v.(scriptRun)
		if !ok {
			continue
		}
		for k, tok := range r.created {
			if voteFailed || count[k] < b.q {
				if undo[a.node] == nil {
					undo[a.node] = map[string]string{}
				}
				undo[a.node][k] = tok
			}
		}
	}
	if len(undo) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for i, kv := range undo {
		wg.Go(func() {
			uctx, cancel := context.WithTimeout(ctx, b.cfg.NodeTimeout)
			defer cancel()
			c := b.nodes[i].client(db)
			for k, tok := range kv {
				delIfScript.Run(uctx, c, []string{k}, tok, "eq") // rare: not worth a batch
			}
		})
	}
	wg.Wait()
}

// voteTime settles integer replies that differ only because the nodes ran
// the script at slightly different times (a script returning a PTTL, such
// as bsm/redislock's): when at least Q nodes answered integers and the Q
// largest lie within two node timeouts (+2ms) of each other, the
// smallest of them is the answer — a value Q nodes meet or exceed, the
// conservative reading for a time to live or a count.
func (b *Backend) voteTime(answers []answer) (backend.Value, bool) {
	var ints []int64
	for _, a := range answers {
		if v, ok := toValue(a); ok && v.Kind == backend.KindInt {
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

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
