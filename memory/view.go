package memory

import (
	"context"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// view is the store as a script or a multi-key command sees it: the caller
// holds the store's write lock, so view touches shards without their
// mutexes. A view is only valid inside that critical section. now (Unix
// milliseconds) is the time of the whole section, which Redis 7 also
// freezes for a script's run.
type view struct {
	b   *Backend
	now int64
}

func (v *view) sh(key string) *shard { return v.b.shard(key) }

func (v *view) Set(_ context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	if err := checkDB(db); err != nil {
		return backend.SetResult{}, err
	}
	return v.sh(key).set(db, key, token, o, v.now), nil
}

func (v *view) Get(_ context.Context, db int, key string) ([]byte, bool, error) {
	if err := checkDB(db); err != nil {
		return nil, false, err
	}
	e, ok := v.sh(key).get(db, key, v.now)
	return e.val, ok, nil
}

func (v *view) Del(_ context.Context, db int, keys []string) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	var n int64
	t := v.now
	for _, k := range keys {
		n += v.sh(k).del(db, k, t)
	}
	return n, nil
}

func (v *view) DelIf(_ context.Context, db int, key string, cond backend.Cond, match []byte) (bool, error) {
	if err := checkDB(db); err != nil {
		return false, err
	}
	return v.sh(key).delIf(db, key, cond, match, v.now), nil
}

func (v *view) Exists(_ context.Context, db int, keys []string) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	var n int64
	t := v.now
	for _, k := range keys {
		if _, ok := v.sh(k).get(db, k, t); ok {
			n++
		}
	}
	return n, nil
}

func (v *view) PTTL(_ context.Context, db int, key string) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	return v.sh(key).pttl(db, key, v.now), nil
}

func (v *view) Expire(_ context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	if err := checkDB(db); err != nil {
		return false, err
	}
	return v.sh(key).expire(db, key, e, cond, v.now), nil
}

func (v *view) Persist(_ context.Context, db int, key string) (bool, error) {
	if err := checkDB(db); err != nil {
		return false, err
	}
	return v.sh(key).persist(db, key, v.now), nil
}

func (v *view) MSet(_ context.Context, db int, pairs []backend.KV, nx bool) (bool, error) {
	if err := checkDB(db); err != nil {
		return false, err
	}
	t := v.now
	if nx {
		for _, p := range pairs {
			if _, ok := v.sh(p.Key).get(db, p.Key, t); ok {
				return false, nil
			}
		}
	}
	for _, p := range pairs {
		v.sh(p.Key).put(db, p.Key, entry{val: p.Value})
	}
	return true, nil
}

func (v *view) DBSize(_ context.Context, db int) (int64, error) {
	if err := checkDB(db); err != nil {
		return 0, err
	}
	var n int64
	t := v.now
	for i := range v.b.shards {
		for _, e := range v.b.shards[i].dbs[db] {
			if e.exp == 0 || e.exp > t {
				n++
			}
		}
	}
	return n, nil
}
