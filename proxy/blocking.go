package proxy

import (
	"context"
	"math"
	"strconv"
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
// of one of its keys through this instance wakes it, CLIENT UNBLOCK, or
// the timeout. A push through another instance sharing the backend wakes
// it within blockPoll, when it looks again by itself. Several clients
// blocked on one key race for a pushed value: the first pop wins, not
// necessarily the first blocked (Redis serves them in order).

// blockPoll is how often a blocked client looks at its keys without a
// wake-up: for pushes through other instances.
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

// parseBlockTimeout reads a blocking command's timeout (seconds, a
// float) as Redis does; zero means for ever.
func parseBlockTimeout(arg []byte) (time.Duration, string) {
	f, err := strconv.ParseFloat(string(arg), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, "ERR timeout is not a float or out of range"
	}
	if f < 0 {
		return 0, "ERR timeout is negative"
	}
	return time.Duration(f * float64(time.Second)), ""
}

// blockingPop reports whether name is BLPOP or BRPOP, cheaply: the event
// loop asks it of every command.
func blockingPop(name []byte) bool {
	return len(name) == 5 && name[0]|0x20 == 'b' && (lower(name) == "blpop" || lower(name) == "brpop")
}

func cmdBLPop(cl *client, args [][]byte) backend.Value { return cl.blockingPop(args, "lpop") }
func cmdBRPop(cl *client, args [][]byte) backend.Value { return cl.blockingPop(args, "rpop") }

// blockingPop is BLPOP (pop "lpop") and BRPOP (pop "rpop"): [key, value]
// of the first key, in order, with a value; or, after the timeout, a
// null array.
func (cl *client) blockingPop(args [][]byte, pop string) backend.Value {
	timeout, bad := parseBlockTimeout(args[len(args)-1])
	if bad != "" {
		return backend.ErrorValue(bad)
	}
	keys := args[1 : len(args)-1]
	kc := keycmd.Lookup([]byte(pop))
	try := func() (backend.Value, bool) {
		for _, k := range keys {
			ctx, cancel := cl.commandCtx()
			popArgs := [][]byte{[]byte(pop), k}
			v, err := kc.Exec(ctx, cl.store(), cl.db, popArgs)
			cancel()
			switch {
			case err != nil:
				return cl.errorValue(pop, err), true
			case v.Kind == backend.KindBulk:
				cl.touched(kc, popArgs) // the pop wrote the list
				return backend.Array(backend.Bulk(k), v), true
			case v.Kind == backend.KindError:
				return v, true
			}
		}
		return backend.Value{}, false
	}
	if v, ok := try(); ok || cl.inMulti || cl.inExec {
		if !ok {
			return backend.Value{Kind: backend.KindNilArray} // inside MULTI nothing blocks
		}
		return v
	}
	b, done := cl.s.blockers.block(cl, keys)
	defer done()
	var end <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		end = t.C
	}
	poll := time.NewTicker(blockPoll)
	defer poll.Stop()
	for {
		select {
		case <-b.wake:
		case <-poll.C:
			if cl.s.drain.Load() {
				return cl.errorValue(pop, context.Canceled) // a drain does not wait for it
			}
		case <-end:
			return backend.Value{Kind: backend.KindNilArray}
		case <-cl.ctx.Done():
			return cl.errorValue(pop, context.Canceled)
		}
		switch b.cause.Load() {
		case unblockTimeout:
			return backend.Value{Kind: backend.KindNilArray}
		case unblockError:
			return backend.ErrorValue("UNBLOCKED client unblocked via CLIENT UNBLOCK")
		}
		if v, ok := try(); ok {
			return v
		}
	}
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
