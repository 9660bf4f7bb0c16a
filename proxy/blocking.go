package proxy

import (
	"context"
	"math"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// Blocking pops (docs/pubsub.md): BLPOP and BRPOP, as Redis serves them,
// for the libraries that wait on a signal list (python-redis-lock). The
// pop itself is the backend's LPOP or RPOP; when every key is empty the
// connection blocks (its later commands wait, as in Redis) until a write
// of one of its keys wakes it (through this instance, or through another
// sharing the backend: tracking_remote.go), CLIENT UNBLOCK, or the
// timeout, or the client's going (it then takes nothing); it also looks
// again every blockPoll by itself, which covers a wake-up lost between
// instances. Several clients
// blocked on one key race for a pushed value: the first pop wins, not
// necessarily the first blocked (Redis serves them in order).

// blockPoll is how often a blocked client looks at its keys without a
// wake-up.
const blockPoll = 250 * time.Millisecond

// blockers is the instance's blocked clients, by database and key.
type blockers struct {
	n     atomic.Int32 // blocked clients: none, and a write skips the table
	mu    sync.Mutex
	byKey map[blockKey]map[*blocked]struct{}
	byID  map[int64]*blocked
}

type blockKey struct {
	db  int
	key string
}

// blocked is one blocked client's wake-up.
type blocked struct {
	wake  chan struct{}
	cause atomic.Int32 // unblockNone, or how CLIENT UNBLOCK ended it
}

const (
	unblockNone int32 = iota
	unblockTimeout
	unblockError
	unblockGone // the client went away (client.hangUp)
)

// woken tells every client blocked on one of keys of db to look again.
func (bs *blockers) woken(db int, keys [][]byte) {
	if bs.n.Load() == 0 {
		return
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, k := range keys {
		for b := range bs.byKey[blockKey{db, string(k)}] {
			select {
			case b.wake <- struct{}{}:
			default:
			}
		}
	}
}

// wakeBlocked wakes the clients blocked on keys of the client's database
// after its write. Inside an EXEC run command by command that waits for
// the transaction's end (wakeDeferred), so that they see its end state,
// as Redis's blocked clients do (a script, and a transaction run as one,
// wake them once they have run).
func (cl *client) wakeBlocked(keys [][]byte) {
	if !cl.inExec {
		cl.s.blockers.woken(cl.db, keys)
		return
	}
	for _, k := range keys {
		cl.execWoke = append(cl.execWoke, blockKey{cl.db, string(k)})
	}
}

// wakeDeferred wakes the clients blocked on the keys an EXEC run command
// by command wrote.
func (cl *client) wakeDeferred() {
	for _, bk := range cl.execWoke {
		cl.s.blockers.woken(bk.db, [][]byte{[]byte(bk.key)})
	}
	cl.execWoke = nil
}

// block registers cl as blocked on keys and returns its wake-up and what
// unregisters it.
func (bs *blockers) block(cl *client, keys [][]byte) (*blocked, func()) {
	b := &blocked{wake: make(chan struct{}, 1)}
	bs.mu.Lock()
	if bs.byKey == nil {
		bs.byKey, bs.byID = map[blockKey]map[*blocked]struct{}{}, map[int64]*blocked{}
	}
	for _, k := range keys {
		bk := blockKey{cl.db, string(k)}
		if bs.byKey[bk] == nil {
			bs.byKey[bk] = map[*blocked]struct{}{}
		}
		bs.byKey[bk][b] = struct{}{}
	}
	bs.byID[cl.id] = b
	bs.n.Add(1)
	bs.mu.Unlock()
	return b, func() {
		bs.mu.Lock()
		for _, k := range keys {
			bk := blockKey{cl.db, string(k)}
			delete(bs.byKey[bk], b)
			if len(bs.byKey[bk]) == 0 {
				delete(bs.byKey, bk)
			}
		}
		delete(bs.byID, cl.id)
		bs.n.Add(-1)
		bs.mu.Unlock()
	}
}

// unblock is CLIENT UNBLOCK's: true when id was blocked.
func (bs *blockers) unblock(id int64, cause int32) bool {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.byID[id]
	if b == nil || !b.cause.CompareAndSwap(unblockNone, cause) {
		return false
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return true
}

// count is INFO's blocked_clients.
func (bs *blockers) count() int { return int(bs.n.Load()) }

// parseBlockTimeout reads a blocking command's timeout as Redis 7.0's
// getTimeoutFromObjectOrReply does: seconds parsed by strtold (a long
// double, 64 bits of mantissa on x86-64), times 1000 in that precision,
// rounded up to whole milliseconds; zero (a timeout under a millisecond
// below zero included) means for ever. Past what a long long holds Redis's
// conversion yields its most negative value: "timeout is negative", the
// infinities too.
func parseBlockTimeout(arg []byte) (time.Duration, string) {
	const notFloat = "ERR timeout is not a float or out of range"
	const negative = "ERR timeout is negative"
	x, ok := parseLongDouble(string(arg))
	if !ok {
		return 0, notFloat
	}
	if x.IsInf() {
		return 0, negative
	}
	ms := new(big.Float).SetPrec(64).Mul(x, big.NewFloat(1000))
	i, acc := ms.Int(nil) // toward zero: up for a negative, down for a positive
	if acc == big.Below {
		i.Add(i, big.NewInt(1))
	}
	switch {
	case !i.IsInt64():
		return 0, negative
	case i.Sign() < 0:
		return 0, negative
	case i.Int64() > math.MaxInt64/int64(time.Millisecond):
		return 0, "" // past what a Duration holds: for ever, as it is on Redis
	}
	return time.Duration(i.Int64()) * time.Millisecond, ""
}

// parseLongDouble parses s as Redis's getLongDoubleFromObject does with
// strtold: all of s, no leading space, no NaN, not out of range; decimal
// at 64 bits of mantissa, hexadecimal (with or without a binary
// exponent) at a double's 53, "inf" and "infinity" in any case.
func parseLongDouble(s string) (*big.Float, bool) {
	if s == "" || len(s) >= 5*1024 || strings.ContainsAny(s[:1], " \t\n\v\f\r") || strings.Contains(s, "_") {
		return nil, false
	}
	unsigned := strings.TrimLeft(s[:1], "+-") + s[1:] // one sign at most
	neg := s[0] == '-'
	switch u := strings.ToLower(unsigned); {
	case u == "inf" || u == "infinity":
		return new(big.Float).SetInf(neg), true
	case strings.HasPrefix(u, "0x"):
		if !strings.Contains(u, "p") {
			s += "p0"
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, false
		}
		return new(big.Float).SetPrec(64).SetFloat64(f), true
	case strings.ContainsAny(u, "pn"): // a binary exponent, NaN, "inf" misspelled
		return nil, false
	}
	x, _, err := big.ParseFloat(s, 10, 64, big.ToNearestEven)
	if err != nil {
		return nil, false
	}
	// A long double's range: overflow and underflow to zero are errors.
	if exp := x.MantExp(nil); x.Sign() != 0 && (exp > 16384 || exp < -16444) {
		return nil, false
	}
	return x, true
}

// blockingPop reports whether name is BLPOP, BRPOP, BLMOVE or BRPOPLPUSH,
// cheaply: the event loop asks it of every command.
func blockingPop(name []byte) bool {
	switch len(name) {
	case 5:
		return name[0]|0x20 == 'b' && (lower(name) == "blpop" || lower(name) == "brpop")
	case 6:
		return name[0]|0x20 == 'b' && lower(name) == "blmove"
	case 8:
		return name[0]|0x20 == 'b' && (lower(name) == "bzpopmin" || lower(name) == "bzpopmax")
	case 10:
		return name[0]|0x20 == 'b' && lower(name) == "brpoplpush"
	}
	return false
}

func cmdBLPop(cl *client, args [][]byte) backend.Value { return cl.blockingPop(args, "lpop") }
func cmdBRPop(cl *client, args [][]byte) backend.Value { return cl.blockingPop(args, "rpop") }

// cmdBLMove is BLMOVE src dst LEFT|RIGHT LEFT|RIGHT timeout: LMOVE's
// reply, blocking while src is empty (the sides are checked first, as
// Redis does).
func cmdBLMove(cl *client, args [][]byte) backend.Value {
	for _, side := range args[3:5] {
		if s := lower(side); s != "left" && s != "right" {
			return backend.ErrorValue(backend.MsgSyntax)
		}
	}
	return cl.blockingMove(append([][]byte{[]byte("lmove")}, args[1:5]...), args[5])
}

// cmdBRPopLPush is BRPOPLPUSH src dst timeout: BLMOVE src dst RIGHT LEFT.
func cmdBRPopLPush(cl *client, args [][]byte) backend.Value {
	return cl.blockingMove([][]byte{[]byte("rpoplpush"), args[1], args[2]}, args[3])
}

// blockingMove runs move (LMOVE or RPOPLPUSH) until it moves a value, or
// its timeout passes (a null array, as Redis answers). Woken, it waits on
// while the source is of another type (Redis 7.0 serves a blocked client
// from a list only); a destination of another type under a source with a
// value answers WRONGTYPE, as Redis does, and leaves the value there.
func (cl *client) blockingMove(move [][]byte, timeoutArg []byte) backend.Value {
	timeout, bad := parseBlockTimeout(timeoutArg)
	if bad != "" {
		return backend.ErrorValue(bad)
	}
	kc := keycmd.Lookup(move[0])
	return cl.blockUntil("b"+string(move[0]), move[1:2], timeout, func(woken bool) (backend.Value, bool) {
		ctx, cancel := cl.commandCtx()
		v, err := kc.Exec(ctx, cl.store(), cl.db, move)
		cancel()
		if err != nil {
			v = cl.errorValue(string(move[0]), err)
		}
		switch {
		case v.Kind == backend.KindBulk:
			cl.touched(kc, move) // it wrote both lists
			return v, true
		case woken && wrongType(v):
			return v, !cl.srcOfAnotherType(move[1])
		}
		return v, v.Kind == backend.KindError
	})
}

// srcOfAnotherType reports whether key (a blocked move's source, whose
// move answered WRONGTYPE) holds something else than a list; false when
// it is a list (the destination was of another type) or cannot be told.
func (cl *client) srcOfAnotherType(key []byte) bool {
	llen := keycmd.Lookup([]byte("llen"))
	ctx, cancel := cl.commandCtx()
	v, err := llen.Exec(ctx, cl.store(), cl.db, [][]byte{[]byte("llen"), key})
	cancel()
	return backend.IsWrongType(err) || err == nil && wrongType(v)
}

// wrongType reports whether v is the WRONGTYPE reply.
func wrongType(v backend.Value) bool {
	return v.Kind == backend.KindError && string(v.Str) == backend.MsgWrongType
}

// blockingPop is BLPOP (pop "lpop") and BRPOP (pop "rpop"): [key, value]
// of the first key, in order, with a value; or, after the timeout, a
// null array.
func (cl *client) blockingPop(args [][]byte, pop string) backend.Value {
	return cl.blockingFirst(args, pop, func(k []byte, v backend.Value) (backend.Value, bool) {
		if v.Kind != backend.KindBulk {
			return v, false
		}
		return backend.Array(backend.Bulk(k), v), true
	})
}

func cmdBZPopMin(cl *client, args [][]byte) backend.Value { return cl.blockingZPop(args, "zpopmin") }
func cmdBZPopMax(cl *client, args [][]byte) backend.Value { return cl.blockingZPop(args, "zpopmax") }

// blockingZPop is BZPOPMIN (pop "zpopmin") and BZPOPMAX (pop "zpopmax"):
// [key, member, score] of the first key, in order, with a member; or,
// after the timeout, a null array.
func (cl *client) blockingZPop(args [][]byte, pop string) backend.Value {
	return cl.blockingFirst(args, pop, func(k []byte, v backend.Value) (backend.Value, bool) {
		if v.Kind != backend.KindArray || len(v.Elems) != 2 {
			return v, false
		}
		return backend.Array(backend.Bulk(k), v.Elems[0], v.Elems[1]), true
	})
}

// blockingFirst runs pop on each key of args (KEY … TIMEOUT) in order
// until one's reply is a hit (got's ok: the client's reply), blocking
// between rounds until the timeout (blockUntil): BLPOP's and BZPOPMIN's
// shape. Woken, a key of another type is passed over (Redis 7.0 serves
// a blocked client from a key of its type only): a write that left one
// there (MULTI, LPUSH, DEL, SET, EXEC) does not end the wait.
func (cl *client) blockingFirst(args [][]byte, pop string, got func(k []byte, v backend.Value) (backend.Value, bool)) backend.Value {
	timeout, bad := parseBlockTimeout(args[len(args)-1])
	if bad != "" {
		return backend.ErrorValue(bad)
	}
	keys := args[1 : len(args)-1]
	kc := keycmd.Lookup([]byte(pop))
	return cl.blockUntil("b"+pop, keys, timeout, func(woken bool) (backend.Value, bool) {
		for _, k := range keys {
			ctx, cancel := cl.commandCtx()
			popArgs := [][]byte{[]byte(pop), k}
			v, err := kc.Exec(ctx, cl.store(), cl.db, popArgs)
			cancel()
			if err != nil {
				v = cl.errorValue(pop, err)
			}
			if v.Kind == backend.KindError {
				if woken && wrongType(v) {
					continue
				}
				return v, true
			}
			if reply, ok := got(k, v); ok {
				cl.touched(kc, popArgs) // the pop wrote the key
				return reply, true
			}
		}
		return backend.Value{Kind: backend.KindNilArray}, false
	})
}

// blockUntil runs command name's try until it answers (ok), blocked on
// keys between tries (woken: not the first), or until the timeout (0: for ever), CLIENT UNBLOCK
// or the connection's end. Inside MULTI nothing blocks: the reply is what
// a try that did not answer returned (a null array for BLPOP, LMOVE's nil
// for BLMOVE, as Redis answers inside a transaction).
//
// A try runs only while the client is there: a client that went away
// (hangUp) while blocked takes nothing, and the element stays for the
// next reader, as Redis frees a blocked client when it reads its end of
// stream. The front end reads the connection while the client is blocked
// (the event loops always do; the goroutine front end watches it here), so
// that the wait ends, and INFO stops counting it, as soon as the client
// goes. A client that goes after a try took an element loses it, as it
// does on Redis.
func (cl *client) blockUntil(name string, keys [][]byte, timeout time.Duration, try func(woken bool) (backend.Value, bool)) backend.Value {
	if v, ok := try(false); ok || cl.inMulti || cl.inExec {
		return v // inside MULTI nothing blocks: the try's own "nothing"
	}
	b, done := cl.s.blockers.block(cl, keys)
	defer done()
	defer cl.watchEnd()()
	var end <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		end = t.C
	}
	poll := time.NewTicker(blockPoll)
	defer poll.Stop()
	for {
		if cl.hungUp.Load() { // also when it went before block registered it
			return cl.gone()
		}
		select {
		case <-b.wake:
		case <-poll.C:
			if cl.s.drain.Load() {
				return cl.errorValue(name, context.Canceled) // a drain does not wait for it
			}
		case <-end:
			return backend.Value{Kind: backend.KindNilArray}
		case <-cl.ctx.Done():
		}
		// Each case may be ready with another: the client's end wins over
		// a wake-up, so that nothing is taken for a client gone.
		switch {
		case cl.hungUp.Load():
			return cl.gone()
		case cl.ctx.Err() != nil:
			return cl.errorValue(name, context.Canceled)
		}
		switch b.cause.Load() {
		case unblockTimeout:
			return backend.Value{Kind: backend.KindNilArray}
		case unblockError:
			return backend.ErrorValue("UNBLOCKED client unblocked via CLIENT UNBLOCK")
		}
		if v, ok := try(true); ok {
			return v
		}
	}
}

// hangUp records that the client went away (its end of stream, or a
// failure, was read while a command ran) and ends the blocking wait it is
// in, if any: from any goroutine.
func (cl *client) hangUp() {
	if cl.hungUp.CompareAndSwap(false, true) {
		cl.s.blockers.unblock(cl.id, unblockGone)
	}
}

// gone ends a blocking command whose client went away: no reply, and the
// connection closes without running what the client sent after it, as
// Redis frees such a client.
func (cl *client) gone() backend.Value {
	cl.reply, cl.closeNow = replyOff, true
	return backend.Value{Kind: backend.KindNilArray}
}

// watchEnd has the goroutine front end read the connection of a blocked
// client, to see it go (limitConn.watchEnd); it returns what ends the
// watch. The event loops read every connection anyway (OnClose).
func (cl *client) watchEnd() (stop func()) {
	if cl.conn != nil {
		if lc, ok := cl.conn.NetConn().(*limitConn); ok {
			return lc.watchEnd(cl.hangUp)
		}
	}
	return func() {}
}

// cmdClientUnblock is CLIENT UNBLOCK id [TIMEOUT|ERROR].
func cmdClientUnblock(cl *client, args [][]byte) backend.Value {
	id, ok := backend.ParseInt(args[2])
	if !ok {
		return backend.ErrorValue(backend.MsgNotInteger)
	}
	cause := unblockTimeout
	if len(args) == 4 {
		switch lower(args[3]) {
		case "timeout":
		case "error":
			cause = unblockError
		default:
			return backend.ErrorValue("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
		}
	}
	return backend.Bool(cl.s.blockers.unblock(id, cause))
}
