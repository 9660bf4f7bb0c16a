package memory

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/keycmd"
	"github.com/lockproxy/lockproxy/luascripts"
)

const numShards = 64

// Config configures a Backend.
type Config struct {
	// Runner runs EVAL scripts. default: luascripts.New with its defaults
	Runner *luascripts.Runner
	// ReapInterval is how often the reaper samples for expired keys.
	// default: 100ms
	ReapInterval time.Duration
	// Freed, when set, hears of large frees (model.Space.Freed): a value
	// of a MiB or more let go, a flush. It is called under the store's
	// locks and must not block.
	Freed func(n int)
}

// Backend is the in-memory store. It is safe for concurrent use; its reaper
// goroutine runs from New until Close.
type Backend struct {
	mu     sync.RWMutex // write side: scripts and multi-key commands
	seed   maphash.Seed
	shards [numShards]shard
	spaces []*model.Space                // the shards' spaces, for views
	pick   func(key string) *model.Space // key's shard's space, for views
	runner *luascripts.Runner
	// releases knows the catalogued release scripts by SHA1: Eval runs
	// them as one DelIf under the key's shard (see Eval).
	releases luascripts.Releases
	hub      backend.Hub // where scripts' messages go (SetHub)
	// journal keeps what the running script's writes replaced, for a
	// script that lockproxy stops (one script runs at a time, under mu).
	journal model.Journal

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Immediate tells the proxy that no operation here waits (backend.Immediate).
func (b *Backend) Immediate() {}

var (
	_ backend.Backend   = (*Backend)(nil)
	_ backend.Immediate = (*Backend)(nil)
)

// New returns a Backend and starts its reaper.
func New(cfg Config) *Backend {
	if cfg.Runner == nil {
		cfg.Runner = luascripts.New(luascripts.Config{})
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = 100 * time.Millisecond
	}
	b := &Backend{seed: maphash.MakeSeed(), runner: cfg.Runner, stop: make(chan struct{}), done: make(chan struct{})}
	b.spaces = make([]*model.Space, numShards)
	// The fences of this process start above every fence of the process
	// before it (model.Space.RaiseFence): those were at most its clock in
	// microseconds when it gave them, bar a few per millisecond, and this
	// clock is later, unless it stepped back over the restart.
	floor := uint64(time.Now().UnixMicro())
	for i := range b.shards {
		b.spaces[i] = &b.shards[i].sp
		b.spaces[i].RaiseFence(floor)
		b.spaces[i].Freed = cfg.Freed
	}
	b.pick = func(key string) *model.Space { return &b.shard(key).sp }
	go b.reap(cfg.ReapInterval)
	return b
}

// Close stops the reaper and waits for it. The data stays readable.
func (b *Backend) Close(context.Context) error {
	b.stopOnce.Do(func() { close(b.stop) })
	<-b.done
	return nil
}

// Eval runs s atomically: nothing else touches the store while it runs,
// so every key it touches, declared in KEYS or not and in any database it
// SELECTs, is covered. As in Redis 7, the script's clock stands still: a
// key live when the script starts stays live until it ends (unless the
// script deletes it), and relative expiries count from the start. A
// script that lockproxy stops (luascripts.ErrStopped) leaves no trace.
//
// A catalogued release script (luascripts.IsRelease: GET the key, DEL it
// when it holds ARGV[1]) runs as DelIf on the key's shard instead, as
// atomic as the script (scripts take the whole store, a shard is taken
// under its read side) and with the script's reply, 1 when it deleted the
// key, else 0: nearly every lock client runs it on every unlock, and the
// whole store's lock, the script runner and its redis.call requests cost
// more than the release itself. EVAL_RO is left to the script (its DEL
// is refused there), and so are calls without a key or an argument.
func (b *Backend) Eval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	if err := checkDB(db); err != nil {
		return backend.Value{}, err
	}
	if !ro && len(keys) > 0 && len(args) > 0 && b.releases.Is(s) {
		// A key of another type is left to the script: its GET raises
		// WRONGTYPE in the script's own words.
		if deleted, err := b.DelIf(ctx, db, keys[0], backend.IfEqual, args[0]); !backend.IsWrongType(err) {
			return backend.Bool(deleted), err
		}
	}
	c := &keycmd.ScriptCaller{DB: db, RO: ro, Hub: b.hub}
	res, err := b.runLocked(ctx, s, keys, args, c)
	c.Deliver() // its messages, now that every client sees its changes
	return res, err
}

// runLocked runs a script under the store's write lock. A run stopped by
// lockproxy (time, memory, the client gone), or one that panics, leaves
// nothing: its writes are undone and its messages dropped; the lock is
// released whatever happens. A script that ends with an error keeps what
// it wrote, as in Redis.
func (b *Backend) runLocked(ctx context.Context, s backend.Script, keys []string, args [][]byte, c *keycmd.ScriptCaller) (res backend.Value, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			b.journal.Undo()
			c.Published = nil
			panic(p)
		}
	}()
	v := b.view(time.Now().UnixMilli())
	v.Holder = backend.HolderOf(ctx)
	v.Journal = &b.journal
	c.KS = v
	res, err = b.runner.Run(ctx, s, keys, args, c)
	if errors.Is(err, luascripts.ErrStopped) {
		b.journal.Undo()
		c.Published = nil
	} else {
		b.journal.Reset()
	}
	return res, err
}

var _ backend.Publisher = (*Backend)(nil)

// SetHub implements backend.Publisher; it is called before serving.
func (b *Backend) SetHub(h backend.Hub) { b.hub = h }

// Set implements backend.KeySpace.
func (b *Backend) Set(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	h := backend.HolderOf(ctx)
	sh, now, err := b.lock(db, key)
	if err != nil {
		return backend.SetResult{}, err
	}
	defer b.unlock(sh)
	sh.sp.Holder = h
	return sh.sp.Set(db, key, token, o, now)
}

// Get implements backend.KeySpace.
func (b *Backend) Get(_ context.Context, db int, key string) ([]byte, bool, error) {
	sh, now, err := b.lock(db, key)
	if err != nil {
		return nil, false, err
	}
	defer b.unlock(sh)
	e, ok := sh.sp.Get(db, key, now)
	if ok && !e.IsString() {
		return nil, false, backend.ErrWrongType
	}
	return e.Token, ok, nil
}

// Del implements backend.KeySpace.
func (b *Backend) Del(ctx context.Context, db int, keys []string) (n int64, err error) {
	if len(keys) == 1 {
		sh, now, err := b.lock(db, keys[0])
		if err != nil {
			return 0, err
		}
		defer b.unlock(sh)
		if sh.sp.Del(db, keys[0], now) {
			return 1, nil
		}
		return 0, nil
	}
	err = b.all(db, func(v *model.View) { n, _ = v.Del(ctx, db, keys) })
	return n, err
}

// DelIf implements backend.KeySpace.
func (b *Backend) DelIf(_ context.Context, db int, key string, cond backend.Cond, match []byte) (bool, error) {
	sh, now, err := b.lock(db, key)
	if err != nil {
		return false, err
	}
	defer b.unlock(sh)
	return sh.sp.DelIf(db, key, cond, match, now)
}

// Exists implements backend.KeySpace.
func (b *Backend) Exists(ctx context.Context, db int, keys []string) (n int64, err error) {
	if len(keys) == 1 {
		sh, now, err := b.lock(db, keys[0])
		if err != nil {
			return 0, err
		}
		defer b.unlock(sh)
		if _, ok := sh.sp.Get(db, keys[0], now); ok {
			return 1, nil
		}
		return 0, nil
	}
	err = b.all(db, func(v *model.View) { n, _ = v.Exists(ctx, db, keys) })
	return n, err
}

// PTTL implements backend.KeySpace.
func (b *Backend) PTTL(_ context.Context, db int, key string) (int64, error) {
	sh, now, err := b.lock(db, key)
	if err != nil {
		return 0, err
	}
	defer b.unlock(sh)
	return sh.sp.PTTL(db, key, now), nil
}

// Expire implements backend.KeySpace.
func (b *Backend) Expire(_ context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	sh, now, err := b.lock(db, key)
	if err != nil {
		return false, err
	}
	defer b.unlock(sh)
	return sh.sp.Expire(db, key, e, cond, now), nil
}

// Persist implements backend.KeySpace.
func (b *Backend) Persist(_ context.Context, db int, key string) (bool, error) {
	sh, now, err := b.lock(db, key)
	if err != nil {
		return false, err
	}
	defer b.unlock(sh)
	return sh.sp.Persist(db, key, now), nil
}

// MSet implements backend.KeySpace.
func (b *Backend) MSet(ctx context.Context, db int, pairs []backend.KV, nx bool) (ok bool, err error) {
	err = b.all(db, func(v *model.View) {
		v.Holder = backend.HolderOf(ctx)
		ok, _ = v.MSet(ctx, db, pairs, nx)
	})
	return ok, err
}

// DBSize implements backend.KeySpace.
func (b *Backend) DBSize(ctx context.Context, db int) (n int64, err error) {
	err = b.all(db, func(v *model.View) { n, _ = v.DBSize(ctx, db) })
	return n, err
}

// Do implements backend.KeySpace: a command on one key runs under its
// shard, KEYS and SCAN one shard at a time (listing), any other under the
// whole store.
func (b *Backend) Do(ctx context.Context, db int, keys []string, args [][]byte) (v backend.Value, err error) {
	if len(keys) == 1 {
		sh, now, err := b.lock(db, keys[0])
		if err != nil {
			return backend.Value{}, err
		}
		defer b.unlock(sh)
		return (&model.View{Now: now, Spaces: []*model.Space{&sh.sp}, Holder: backend.HolderOf(ctx)}).Do(ctx, db, keys, args)
	}
	if len(keys) == 0 {
		if v, ok, err := b.listing(db, args); ok {
			return v, err
		}
	}
	if aerr := b.all(db, func(mv *model.View) {
		mv.Holder = backend.HolderOf(ctx)
		v, err = mv.Do(ctx, db, keys, args)
	}); aerr != nil {
		return backend.Value{}, aerr
	}
	return v, err
}

// HeldLocks counts the live keys of every database (proxy.HeldLocksCounter):
// keys whose deadline has passed are not counted, even before the reaper
// reclaims them. It visits every key, one shard at a time (a scrape of a
// million keys holds each of the 64 shards for some 100µs).
func (b *Backend) HeldLocks() int64 {
	now := time.Now().UnixMilli()
	var n int64
	for i := range b.shards {
		b.mu.RLock() // scripts write under the write side, without shard locks
		sh := &b.shards[i]
		sh.mu.Lock()
		n += sh.sp.CountAll(now)
		sh.mu.Unlock()
		b.mu.RUnlock()
	}
	return n
}

// ExpiredLocks counts the keys deleted because their deadline passed, by
// the reaper or by a command that found them expired
// (proxy.ExpiryCounter). It reads each shard's count under its lock, as
// HeldLocks does: the count lives in the shard's model.Space, which takes
// no locks of its own.
func (b *Backend) ExpiredLocks() uint64 {
	var n uint64
	for i := range b.shards {
		b.mu.RLock()
		sh := &b.shards[i]
		sh.mu.Lock()
		n += sh.sp.Expired()
		sh.mu.Unlock()
		b.mu.RUnlock()
	}
	return n
}
