package memory

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// How the store is locked; the rules themselves are package model's.

// shard is one model.Space behind a mutex. A single-key command holds the
// mutex under the read side of the store lock; scripts and multi-key
// commands touch the spaces under the write side, without shard mutexes.
type shard struct {
	mu sync.Mutex
	sp model.Space
}

func (b *Backend) shard(key string) *shard {
	return &b.shards[maphash.String(b.seed, key)%numShards]
}

func checkDB(db int) error {
	if db < 0 || db >= backend.Databases {
		return fmt.Errorf("memory: database %d out of range", db)
	}
	return nil
}

// lock takes key's shard under the read side of the store lock and
// returns the time to judge expiry by; unlock releases both.
func (b *Backend) lock(db int, key string) (*shard, int64, error) {
	if err := checkDB(db); err != nil {
		return nil, 0, err
	}
	b.mu.RLock()
	sh := b.shard(key)
	sh.mu.Lock()
	return sh, time.Now().UnixMilli(), nil
}

func (b *Backend) unlock(sh *shard) {
	sh.mu.Unlock()
	b.mu.RUnlock()
}

// view is the whole store as a script or a multi-key command sees it, its
// clock stopped at now (Unix milliseconds), which Redis 7 also freezes for
// a script's run. The caller holds the store's write lock for as long as
// it uses the view.
func (b *Backend) view(now int64) *model.View {
	return &model.View{Now: now, Spaces: b.spaces, Pick: b.pick}
}

// all runs f alone, under the write side of the store lock.
func (b *Backend) all(db int, f func(v *model.View)) error {
	if err := checkDB(db); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b.view(time.Now().UnixMilli()))
	return nil
}

// listing answers KEYS and SCAN (ok) one shard at a time, each under its
// own lock, so that listing a large key space never holds what other keys
// need for longer than one shard's part. As with Redis's SCAN, a key
// present for the whole listing is in it and one written meanwhile may or
// may not be; KEYS gives the same promise here, where Redis stops the world
// for it.
func (b *Backend) listing(db int, args [][]byte) (v backend.Value, ok bool, err error) {
	var sc model.Scan
	switch {
	case strings.EqualFold(string(args[0]), "keys"):
	case strings.EqualFold(string(args[0]), "scan"):
		if sc, err = model.ParseScan(args); err != nil {
			return backend.Value{}, true, err
		}
	default:
		return backend.Value{}, false, nil
	}
	if err := checkDB(db); err != nil {
		return backend.Value{}, true, err
	}
	now := time.Now().UnixMilli()
	var keys []string
	var page, part []model.KeyType
	for i := range b.shards {
		sh := &b.shards[i]
		b.mu.RLock()
		sh.mu.Lock()
		if sc.Count == 0 {
			keys = sh.sp.AppendKeys(keys, db, now, args[1])
		} else {
			part = sh.sp.AppendScan(part[:0], db, now, sc.Cursor)
		}
		sh.mu.Unlock()
		b.mu.RUnlock()
		page = append(page, sc.Trim(part)...) // sorted outside the shard's lock
	}
	if sc.Count == 0 {
		out := make([]backend.Value, len(keys))
		for i, k := range keys {
			out[i] = backend.BulkString(k)
		}
		return backend.Array(out...), true, nil
	}
	return sc.Page(page), true, nil
}
