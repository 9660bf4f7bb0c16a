package proxy

import (
	"context"
	"math"
	"math/big"
	"slices"
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
// of one of its keys serves it, CLIENT UNBLOCK, the timeout, or the
// client's going (it then takes nothing).
//
// As in Redis, a write serves the clients blocked on its keys before its
// own reply, key by key, in the order they blocked (serveKey): the first
// blocked tries its pop, then, if that took something, the next, until
// one finds nothing. The pop runs on the writer's goroutine, for the
// blocked client (whose own goroutine waits meanwhile), so a push a
// blocked client moves on (BLMOVE) serves the next list's clients in
// turn, and the writer's next command sees the state they left. A write
// that may not wait for the backend (one started on an event loop, or
// another instance's, which arrives over the Bus: tracking_remote.go)
// serves on a goroutine of its own instead, in the same order. A blocked
// client also serves its keys every blockPoll by itself, which covers a
// wake-up lost between instances. The order holds on one instance;
// across instances each serves its own clients, and the first pop wins.

// blockPoll is how often a blocked client looks at its keys without a
// wake-up.
const blockPoll = 250 * time.Millisecond

// blockers is the instance's blocked clients, by database and key.
type blockers struct {
	n     atomic.Int32 // clients waiting (not served, not gone): none, and a write skips the table
	mu    sync.Mutex
	byKey map[blockKey][]*blocked // in the order they blocked
	byID  map[int64]*blocked
	// serving are the keys a serve runs for (serveKey).
	serving map[blockKey]*serveRun
}

// serveRun is a serve of one key that runs: again when another was asked
// for meanwhile; done closes when it has ended, rounds asked for included.
type serveRun struct {
	again bool
	done  chan struct{}
}

type blockKey struct {
	db  int
	key string
}

// blocked is one blocked client: what serves it and its wake-up.
type blocked struct {
	cl    *client
	try   func(woken bool) (backend.Value, bool)
	wake  chan struct{}
	cause atomic.Int32  // unblockNone, or how CLIENT UNBLOCK ended it
	state atomic.Int32  // blockWaiting, blockServing, blockDone
	v     backend.Value // what serving it answered (state blockDone by serveKey)
}

const (
	unblockNone int32 = iota
	unblockTimeout
	unblockError
	unblockGone // the client went away (client.hangUp)
)

// A blocked client's state: waiting; being served (its try runs, on its
// own goroutine or a writer's); done (served, or left: no try runs again).
// Whoever moves it to done counts it out of blockers.n.
const (
	blockWaiting int32 = iota
	blockServing
	blockDone
)

func (b *blocked) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// How woken serves: on a goroutine of its own (serveAsync); on this one,
// leaving a key whose serve runs elsewhere to that serve (serveHere); or
// on this one and, for such a key, until that serve has ended
// (serveAndWait: a writer's reply, and its next command, come after the
// clients it served).
const (
	serveAsync = iota
	serveHere
	serveAndWait
)

// woken serves the clients blocked on keys of db after a write of them,
// as how says.
func (bs *blockers) woken(db int, keys [][]byte, how int) {
	if bs.n.Load() == 0 {
		return
	}
	var ready []blockKey
	bs.mu.Lock()
	for _, k := range keys {
		if bk := (blockKey{db, string(k)}); len(bs.byKey[bk]) > 0 && !slices.Contains(ready, bk) {
			ready = append(ready, bk)
		}
	}
	bs.mu.Unlock()
	if len(ready) == 0 {
		return
	}
	if how == serveAsync {
		go bs.serve(ready, false)
		return
	}
	bs.serve(ready, how == serveAndWait)
}

func (bs *blockers) serve(ready []blockKey, wait bool) {
	for _, bk := range ready {
		bs.serveKey(bk, wait)
	}
}

// serveKey serves the clients blocked on bk in the order they blocked,
// as Redis's serveClientsBlockedOnListKey does: each one's try, until one
// takes nothing (the key has nothing more for them). A client that went,
// or that CLIENT UNBLOCK ended, is passed over: it leaves by itself.
//
// One serve of a key runs at a time: two at once (a write's, and a
// blocked client's own look, or another instance's write) would each take
// a client, and the second in line could pop before the first. A serve
// asked for while one runs makes that one go round again instead, and,
// with wait, returns once it has: a writer's next command sees what the
// clients it woke took, as on Redis. Only a goroutine that owns no serve
// waits (a serve inside a blocked client's try, BLMOVE's push, does not),
// so no two serves wait for each other.
func (bs *blockers) serveKey(bk blockKey, wait bool) {
	bs.mu.Lock()
	if run := bs.serving[bk]; run != nil {
		run.again = true
		bs.mu.Unlock()
		if wait {
			<-run.done
		}
		return
	}
	if bs.serving == nil {
		bs.serving = map[blockKey]*serveRun{}
	}
	run := &serveRun{done: make(chan struct{})}
	bs.serving[bk] = run
	bs.mu.Unlock()
	defer close(run.done)
	for again := true; again; {
		bs.serveInOrder(bk)
		bs.mu.Lock()
		if again = run.again; again {
			run.again = false
		} else {
			delete(bs.serving, bk)
		}
		bs.mu.Unlock()
	}
}

// serveInOrder is one round of serveKey.
func (bs *blockers) serveInOrder(bk blockKey) {
	for {
		b := bs.claim(bk)
		if b == nil {
			return
		}
		b.cl.inServe.Store(true)
		v, ok := b.try(true)
		b.cl.inServe.Store(false)
		if !ok {
			b.state.Store(blockWaiting)
			b.signal() // one whose timeout came meanwhile leaves now
			return
		}
		b.v = v
		b.state.Store(blockDone)
		bs.n.Add(-1)
		b.signal()
	}
}

// claim returns the first client blocked on bk that is waiting, now
// being served; nil when there is none.
func (bs *blockers) claim(bk blockKey) *blocked {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, b := range bs.byKey[bk] {
		if b.cause.Load() != unblockNone || b.cl.hungUp.Load() {
			continue
		}
		if b.state.CompareAndSwap(blockWaiting, blockServing) {
			return b
		}
	}
	return nil
}

// leave ends b's wait unless it is being served (false: its serve's
// signal comes, with a result or without).
func (bs *blockers) leave(b *blocked) bool {
	if !b.state.CompareAndSwap(blockWaiting, blockDone) {
		return false
	}
	bs.n.Add(-1)
	return true
}

// wakeBlocked wakes the clients blocked on keys of the client's database
// after its write. Inside an EXEC run command by command that waits for
// the transaction's end (wakeDeferred), so that they see its end state,
// as Redis's blocked clients do (a script, and a transaction run as one,
// wake them once they have run).
func (cl *client) wakeBlocked(keys [][]byte) {
	if !cl.inExec {
		cl.s.blockers.woken(cl.db, keys, cl.serveHow())
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
		cl.s.blockers.woken(bk.db, [][]byte{[]byte(bk.key)}, cl.serveHow())
	}
	cl.execWoke = nil
}

// serveHow is how the client's write serves the clients it woke: on a
// goroutine of its own when the command was started on a loop (the
// backend's answers come through it); without waiting for another serve
// when the write is a blocked client's, in its serve (serveKey).
func (cl *client) serveHow() int {
	switch {
	case cl.alt != nil:
		return serveAsync
	case cl.inServe.Load():
		return serveHere
	}
	return serveAndWait
}

// block registers cl as blocked on keys, served by try, and returns it
// and what unregisters it.
func (bs *blockers) block(cl *client, keys [][]byte, try func(woken bool) (backend.Value, bool)) (*blocked, func()) {
	b := &blocked{cl: cl, try: try, wake: make(chan struct{}, 1)}
	bs.mu.Lock()
	if bs.byKey == nil {
		bs.byKey, bs.byID = map[blockKey][]*blocked{}, map[int64]*blocked{}
	}
	for _, k := range keys {
		bk := blockKey{cl.db, string(k)}
		if !slices.Contains(bs.byKey[bk], b) { // BLPOP k k: once
			bs.byKey[bk] = append(bs.byKey[bk], b)
		}
	}
	bs.byID[cl.id] = b
	bs.n.Add(1)
	bs.mu.Unlock()
	return b, func() {
		bs.mu.Lock()
		for _, k := range keys {
			bk := blockKey{cl.db, string(k)}
			if i := slices.Index(bs.byKey[bk], b); i >= 0 {
				bs.byKey[bk] = slices.Delete(bs.byKey[bk], i, i+1)
			}
			if len(bs.byKey[bk]) == 0 {
				delete(bs.byKey, bk)
			}
		}
		delete(bs.byID, cl.id)
		bs.mu.Unlock()
	}
}

// unblock is CLIENT UNBLOCK's: true when id was blocked.
func (bs *blockers) unblock(id int64, cause int32) bool {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.byID[id]
	if b == nil || b.state.Load() == blockDone || !b.cause.CompareAndSwap(unblockNone, cause) {
		return false
	}
	b.signal()
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
	bs := &cl.s.blockers
	b, done := bs.block(cl, keys, try)
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
	// leaving makes the reply once the client may leave (not while it is
	// being served: a serve runs on the client's state).
	var leaving func() backend.Value
	ctxDone := cl.ctx.Done()
	for {
		// The client's end comes first: nothing is taken for a client
		// gone (it went before block registered it, or with a wake-up).
		switch {
		case cl.hungUp.Load():
			leaving = cl.gone
		case leaving != nil:
		case cl.ctx.Err() != nil:
			leaving = func() backend.Value { return cl.errorValue(name, context.Canceled) }
		case b.cause.Load() == unblockTimeout:
			leaving = nilArray
		case b.cause.Load() == unblockError:
			leaving = func() backend.Value { return backend.ErrorValue("UNBLOCKED client unblocked via CLIENT UNBLOCK") }
		}
		if leaving != nil {
			if bs.leave(b) {
				return leaving()
			}
			ctxDone = nil // its serve's signal comes next
		}
		if b.state.Load() == blockDone { // served: what was taken is the reply
			return b.v
		}
		select {
		case <-b.wake:
		case <-poll.C:
			switch {
			case leaving != nil:
			case cl.s.drain.Load():
				leaving = func() backend.Value { return cl.errorValue(name, context.Canceled) } // a drain does not wait for it
			default:
				bs.woken(cl.db, keys, serveHere) // a wake-up lost between instances
			}
		case <-end:
			if leaving == nil {
				leaving = nilArray
			}
		case <-ctxDone:
		}
	}
}

func nilArray() backend.Value { return backend.Value{Kind: backend.KindNilArray} }

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
