package memory

import (
	"bytes"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// The shard methods hold the model's rules. The caller holds the shard's
// mutex, or the store's write lock. now is Unix milliseconds.

// get returns key's live entry, deleting it if it has expired.
func (sh *shard) get(db int, key string, now int64) (entry, bool) {
	m := sh.dbs[db]
	e, ok := m[key]
	if ok && e.exp != 0 && e.exp <= now {
		delete(m, key)
		sh.expired.Add(1)
		return entry{}, false
	}
	return e, ok
}

func (sh *shard) put(db int, key string, e entry) {
	m := sh.dbs[db]
	if m == nil {
		m = make(map[string]entry)
		sh.dbs[db] = m
	}
	m[key] = e
	if n := len(m); n > sh.peak[db] {
		sh.peak[db] = n
	}
}

func (sh *shard) set(db int, key string, tok []byte, o backend.SetOptions, now int64) backend.SetResult {
	cur, live := sh.get(db, key, now)
	res := backend.SetResult{HadPrev: live}
	if o.Get {
		res.Prev = cur.val
	}
	switch o.Cond {
	case backend.IfAbsent:
		if live {
			return res
		}
	case backend.IfPresent:
		if !live {
			return res
		}
	case backend.IfEqual:
		if !live || !bytes.Equal(cur.val, o.Match) {
			return res
		}
	case backend.IfNotEqual:
		if live && bytes.Equal(cur.val, o.Match) {
			return res
		}
	}
	res.Written = true
	var exp int64
	switch {
	case o.KeepTTL && live:
		exp = cur.exp
	case !o.Expiry.IsZero():
		exp = deadline(o.Expiry, now)
		if exp <= now {
			delete(sh.dbs[db], key)
			return res
		}
	}
	sh.put(db, key, entry{val: tok, exp: exp})
	return res
}

// deadline is e's absolute expiry in Unix milliseconds for a write at now.
func deadline(e backend.Expiry, now int64) int64 {
	if !e.At.IsZero() {
		return e.At.UnixMilli()
	}
	return now + e.TTL.Milliseconds()
}

func (sh *shard) del(db int, key string, now int64) int64 {
	if _, ok := sh.get(db, key, now); ok {
		delete(sh.dbs[db], key)
		return 1
	}
	return 0
}

func (sh *shard) delIf(db int, key string, cond backend.Cond, match []byte, now int64) bool {
	cur, live := sh.get(db, key, now)
	if !live || bytes.Equal(cur.val, match) != (cond == backend.IfEqual) {
		return false
	}
	delete(sh.dbs[db], key)
	return true
}

func (sh *shard) pttl(db int, key string, now int64) int64 {
	cur, live := sh.get(db, key, now)
	switch {
	case !live:
		return -2
	case cur.exp == 0:
		return -1
	}
	return cur.exp - now
}

func (sh *shard) expire(db int, key string, e backend.Expiry, cond backend.ExpireCond, now int64) bool {
	cur, live := sh.get(db, key, now)
	if !live {
		return false
	}
	when := deadline(e, now)
	switch cond {
	case backend.ExpireNX:
		if cur.exp != 0 {
			return false
		}
	case backend.ExpireXX:
		if cur.exp == 0 {
			return false
		}
	case backend.ExpireGT:
		if cur.exp == 0 || when <= cur.exp {
			return false
		}
	case backend.ExpireLT:
		if cur.exp != 0 && when >= cur.exp {
			return false
		}
	case backend.ExpireLTXX:
		if cur.exp == 0 || when >= cur.exp {
			return false
		}
	}
	if when <= now {
		delete(sh.dbs[db], key)
		return true
	}
	cur.exp = when
	sh.dbs[db][key] = cur
	return true
}

func (sh *shard) persist(db int, key string, now int64) bool {
	cur, live := sh.get(db, key, now)
	if !live || cur.exp == 0 {
		return false
	}
	cur.exp = 0
	sh.dbs[db][key] = cur
	return true
}

// sample looks at up to n keys of db and deletes the expired ones; it
// returns how many it looked at and how many it deleted. Go's map iteration
// starts at a random place, which makes this a random sample.
func (sh *shard) sample(db int, n int, now int64) (seen, expired int) {
	m := sh.dbs[db]
	for k, e := range m {
		if seen == n {
			break
		}
		seen++
		if e.exp != 0 && e.exp <= now {
			delete(m, k)
			expired++
		}
	}
	sh.expired.Add(uint64(expired))
	return seen, expired
}

// Go maps keep their buckets when entries are deleted, so a map that once
// held many keys would keep their memory after they expired. shrink drops
// an empty map, and copies one that has fallen to a quarter of its peak
// (when that peak was at least shrinkMin entries) into a new one of the
// right size; the copy costs at most a quarter of the peak, paid once per
// shrink.
const shrinkMin = 1024

func (sh *shard) shrink(db int) bool {
	m := sh.dbs[db]
	switch {
	case m == nil:
		return false
	case len(m) == 0:
		sh.dbs[db] = nil
	case sh.peak[db] < shrinkMin || len(m) > sh.peak[db]/4:
		return false
	default:
		n := make(map[string]entry, len(m))
		for k, e := range m {
			n[k] = e
		}
		sh.dbs[db] = n
	}
	sh.peak[db] = len(m)
	return true
}
