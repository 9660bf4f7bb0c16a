package migrate

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// sandbox is a key space that starts empty and lives for one script run:
// running a script on it tells which keys the script reads or writes and
// which it creates from nothing (an acquire creates its lock key from an
// empty key space; a release, an extend or a reacquire creates none). It
// keeps what the script wrote, so the script's later reads see it as they
// would on Redis; expiry is kept as "has one" and never elapses during the
// run. Not safe for concurrent use (one script run at a time).
type sandbox struct {
	db      int // the script's database: only its keys are watched
	keys    map[string]sandboxEntry
	touched []string // keys of db the script named, first use first
}

type sandboxEntry struct {
	val     []byte
	expires bool
}

var _ backend.KeySpace = (*sandbox)(nil)

func newSandbox(db int) *sandbox { return &sandbox{db: db, keys: map[string]sandboxEntry{}} }

// name builds the map key of key in db, recording key as touched.
func (s *sandbox) name(db int, key string) string {
	if db == s.db {
		if !slices.Contains(s.touched, key) {
			s.touched = append(s.touched, key)
		}
		return key
	}
	return "\x00" + strconv.Itoa(db) + "\x00" + key // another database's key, not watched
}

// created returns the keys of the script's database that hold a value
// after the run, with that value: the keys the script creates from an
// empty key space.
func (s *sandbox) created() map[string][]byte {
	out := map[string][]byte{}
	for _, k := range s.touched {
		if e, ok := s.keys[k]; ok {
			out[k] = e.val
		}
	}
	return out
}

func (s *sandbox) Set(_ context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	k := s.name(db, key)
	cur, live := s.keys[k]
	ok := false
	switch o.Cond {
	case backend.Always:
		ok = true
	case backend.IfAbsent:
		ok = !live
	case backend.IfPresent:
		ok = live
	case backend.IfEqual:
		ok = live && bytes.Equal(cur.val, o.Match)
	case backend.IfNotEqual:
		ok = !live || !bytes.Equal(cur.val, o.Match)
	}
	res := backend.SetResult{Written: ok, HadPrev: live, Prev: cur.val}
	if !ok {
		return res, nil
	}
	if !o.Expiry.At.IsZero() && !o.Expiry.At.After(time.Now()) {
		delete(s.keys, k)
		return res, nil
	}
	expires := !o.Expiry.IsZero() || (o.KeepTTL && cur.expires)
	s.keys[k] = sandboxEntry{val: token, expires: expires}
	return res, nil
}

func (s *sandbox) Get(_ context.Context, db int, key string) ([]byte, bool, error) {
	e, ok := s.keys[s.name(db, key)]
	return e.val, ok, nil
}

func (s *sandbox) Del(_ context.Context, db int, keys []string) (int64, error) {
	var n int64
	for _, key := range keys {
		k := s.name(db, key)
		if _, ok := s.keys[k]; ok {
			delete(s.keys, k)
			n++
		}
	}
	return n, nil
}

func (s *sandbox) DelIf(_ context.Context, db int, key string, cond backend.Cond, match []byte) (bool, error) {
	k := s.name(db, key)
	e, ok := s.keys[k]
	if !ok || bytes.Equal(e.val, match) != (cond == backend.IfEqual) {
		return false, nil
	}
	delete(s.keys, k)
	return true, nil
}

func (s *sandbox) Exists(_ context.Context, db int, keys []string) (int64, error) {
	var n int64
	for _, key := range keys {
		if _, ok := s.keys[s.name(db, key)]; ok {
			n++
		}
	}
	return n, nil
}

func (s *sandbox) PTTL(_ context.Context, db int, key string) (int64, error) {
	e, ok := s.keys[s.name(db, key)]
	switch {
	case !ok:
		return -2, nil
	case !e.expires:
		return -1, nil
	}
	return 1000, nil // some time left: the run never lets it elapse
}

func (s *sandbox) Expire(_ context.Context, db int, key string, e backend.Expiry, cond backend.ExpireCond) (bool, error) {
	k := s.name(db, key)
	cur, ok := s.keys[k]
	if !ok || (cond == backend.ExpireNX && cur.expires) || ((cond == backend.ExpireXX || cond == backend.ExpireLTXX) && !cur.expires) {
		return false, nil
	}
	if !e.At.IsZero() && !e.At.After(time.Now()) {
		delete(s.keys, k)
		return true, nil
	}
	cur.expires = true
	s.keys[k] = cur
	return true, nil
}

func (s *sandbox) Persist(_ context.Context, db int, key string) (bool, error) {
	k := s.name(db, key)
	cur, ok := s.keys[k]
	if !ok || !cur.expires {
		return false, nil
	}
	cur.expires = false
	s.keys[k] = cur
	return true, nil
}

func (s *sandbox) MSet(_ context.Context, db int, pairs []backend.KV, nx bool) (bool, error) {
	if nx {
		for _, p := range pairs {
			if _, ok := s.keys[s.name(db, p.Key)]; ok {
				return false, nil
			}
		}
	}
	for _, p := range pairs {
		s.keys[s.name(db, p.Key)] = sandboxEntry{val: p.Value}
	}
	return true, nil
}

func (s *sandbox) DBSize(_ context.Context, db int) (int64, error) {
	if db != s.db {
		return 0, nil
	}
	return int64(len(s.created())), nil
}

// Do implements backend.KeySpace: never reached, as the migrating proxy
// refuses these commands, in scripts too (Backend.Eval).
func (s *sandbox) Do(_ context.Context, _ int, _ []string, args [][]byte) (backend.Value, error) {
	return backend.Value{}, backend.Reply(keycmd.NotServedHereMsg(strings.ToLower(string(args[0])), "migrating proxy"))
}
