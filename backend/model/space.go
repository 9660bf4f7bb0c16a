package model

import (
	"bytes"

	"github.com/lockproxy/lockproxy/backend"
)

// Entry is one key's token, deadline and fence.
type Entry struct {
	// Token is a string key's value, never nil (Put stores an empty
	// token as empty, not nil); nil for a key holding an Object, which
	// the Space keeps beside it (Lookup).
	Token    []byte
	Deadline int64 // Unix milliseconds; 0: none
	// Fence is the fencing token of the key's grant (docs/fencing.md):
	// given when the key is created or its token replaced by another (or
	// at its first read, ReadFence, when Space.NewFence gives them), kept
	// by every other change (an extend, a re-entrant HINCRBY); 0 until
	// given. Each is greater than every fence the Space gave before.
	Fence uint64
	// Granted and Holder are when the key's grant was made (Unix ms; 0:
	// unknown) and for whom (nil: unknown), kept as long as the fence is
	// (docs/operations.md, "Who holds what").
	Granted int64
	Holder  *backend.Holder
}

// IsString reports whether e is a string key's entry.
func (e Entry) IsString() bool { return e.Token != nil }

// emptyToken is the empty string's token: not nil, which marks an Object.
var emptyToken = []byte{}

// Live reports whether e is live at now (Unix milliseconds).
func (e Entry) Live(now int64) bool { return e.Deadline == 0 || e.Deadline > now }

// Space is a key space of backend.Databases databases. The zero Space is
// empty and ready. It is not safe for concurrent use: the caller excludes
// others while it calls a method. Every db argument must be in
// [0, backend.Databases) (View checks it; a Space panics on another). Token
// slices are kept as given and returned as kept: the caller owns their
// immutability.
type Space struct {
	dbs     [backend.Databases]map[string]Entry
	objs    [backend.Databases]map[string]Object // the values of the entries whose Token is nil
	peak    [backend.Databases]int               // most entries each map held since it was last rebuilt
	expired uint64                               // keys deleted because their deadline passed
	fence   uint64                               // the last fence given (nextFence)
	clock   int64                                // the latest time a command ran at (Get)
	// NewFence, when set, gives the fences instead of the Space's own
	// counter, for a backend whose fences come from elsewhere (PostgreSQL's
	// sequence), and only when one is read (ReadFence): a grant then
	// leaves its fence 0. 0 means it could not; the caller must not
	// commit then.
	NewFence func(db int, key string) uint64
	// Holder is who the grants the caller makes now go to (Entry.Holder):
	// the caller sets it before a call that may grant (View does).
	Holder *backend.Holder
	// Freed, when set, hears of the memory of a value of LargeValue
	// bytes or more that the Space lets go (deleted, overwritten,
	// expired, flushed), so that it can be given back to the operating
	// system at once.
	Freed func(n int)
}

// LargeValue is the size from which a value let go is told to Freed.
const LargeValue = 1 << 20

// fencesPerMilli is how far the fences run ahead of the clock: a fence is
// at least the clock's Unix milliseconds times this (its microseconds), so
// that a Space made after a restart gives greater fences than the one
// before it, which gave fewer than this many per millisecond (a shard
// gives a few hundred at most), as long as the clock did not step back
// over the restart. The fences of 2026 are about 1.8e15: below 2^53, so a
// script's Lua number holds one exactly (Redis's Lua and gopher-lua keep
// numbers as doubles), until the year 2255.
const fencesPerMilli = 1000

// nextFence gives a new grant of key its fence: the Space's next one, or
// 0 when NewFence gives them (at the first read: ReadFence).
func (s *Space) nextFence(db int, key string) uint64 {
	if s.NewFence != nil {
		return 0
	}
	return s.count()
}

// count is the Space's next fence.
func (s *Space) count() uint64 {
	s.fence = max(s.fence+1, uint64(max(s.clock, 0))*fencesPerMilli)
	return s.fence
}

// ReadFence returns the fence of key's live entry e, giving it one first
// when it has none (NewFence's grants, and keys loaded without one). A
// fence given at its grant's first read is as good as one given at the
// grant: the read happens while the grant is live, so after every earlier
// grant of the key ended and was read, and before any later one. 0 when
// none could be given.
func (s *Space) ReadFence(db int, key string, e Entry) uint64 {
	if e.Fence != 0 {
		return e.Fence
	}
	var f uint64
	if s.NewFence != nil {
		f = s.NewFence(db, key)
	} else {
		f = s.count()
	}
	s.SetFence(db, key, f)
	return f
}

// SetFence sets a live key's fence as it is (0: none known), for a
// backend that loads keys whose fences it keeps elsewhere.
func (s *Space) SetFence(db int, key string, f uint64) {
	if e, ok := s.dbs[db][key]; ok {
		e.Fence = f
		s.dbs[db][key] = e
	}
}

// SetGrant sets a live key's grant as it is, for a backend that loads
// keys whose grants it keeps elsewhere.
func (s *Space) SetGrant(db int, key string, g backend.Grant) {
	if e, ok := s.dbs[db][key]; ok {
		e.Granted, e.Holder = g.At, g.Holder
		s.dbs[db][key] = e
	}
}

// RaiseFence makes every fence the Space gives from now on greater than
// f (memory's start: the clock in microseconds, above what the process
// before it gave).
func (s *Space) RaiseFence(f uint64) { s.fence = max(s.fence, f) }

// fenceFor is the fence of e written under key: the key's own when it is
// live holding the same token, else a new one.
func (s *Space) fenceFor(db int, key string, e Entry) uint64 {
	if old, ok := s.dbs[db][key]; ok && old.Live(s.clock) && e.Token != nil && bytes.Equal(old.Token, e.Token) {
		return old.Fence
	}
	return s.nextFence(db, key)
}

// Get returns key's live entry; a key past its deadline is deleted and
// counted as expired.
func (s *Space) Get(db int, key string, now int64) (Entry, bool) {
	if now > s.clock {
		s.clock = now
	}
	m := s.dbs[db]
	e, ok := m[key]
	if ok && !e.Live(now) {
		s.drop(db, key)
		s.expired++
		return Entry{}, false
	}
	return e, ok
}

// Lookup returns key's live entry and, when it holds one, its Object
// (nil for a string); a key past its deadline is deleted and counted as
// expired.
func (s *Space) Lookup(db int, key string, now int64) (Entry, Object, bool) {
	e, ok := s.Get(db, key, now)
	if !ok || e.IsString() {
		return e, nil, ok
	}
	return e, s.objs[db][key], true
}

// drop deletes key, whatever it holds.
func (s *Space) drop(db int, key string) {
	if s.Freed != nil {
		if n := len(s.dbs[db][key].Token); n >= LargeValue {
			s.Freed(n)
		}
	}
	delete(s.dbs[db], key)
	if s.objs[db] != nil {
		delete(s.objs[db], key)
	}
}

// Put writes the string entry e under key as it is, whatever was there
// (MSET, or a state loaded from elsewhere). A nil Token is the empty
// string. A zero Fence is filled in (fenceFor).
func (s *Space) Put(db int, key string, e Entry) {
	if e.Token == nil {
		e.Token = emptyToken
	}
	if s.objs[db] != nil {
		delete(s.objs[db], key)
	}
	s.put(db, key, e)
}

// PutObject writes o under key with deadline (0: none), whatever was
// there, with a new fence.
func (s *Space) PutObject(db int, key string, o Object, deadline int64) {
	if s.objs[db] == nil {
		s.objs[db] = make(map[string]Object)
	}
	s.objs[db][key] = o
	s.put(db, key, Entry{Deadline: deadline})
}

func (s *Space) put(db int, key string, e Entry) {
	if e.Fence == 0 {
		e.Fence = s.fenceFor(db, key, e)
	}
	m := s.dbs[db]
	old, ok := m[key]
	if ok && sameGrant(old, e, s.clock) {
		e.Granted, e.Holder = old.Granted, old.Holder
	} else {
		e.Granted, e.Holder = s.clock, s.Holder
	}
	if s.Freed != nil && len(old.Token) >= LargeValue {
		s.Freed(len(old.Token))
	}
	if m == nil {
		m = make(map[string]Entry)
		s.dbs[db] = m
	}
	m[key] = e
	if n := len(m); n > s.peak[db] {
		s.peak[db] = n
	}
}

// sameGrant reports whether e, written over old, continues old's grant:
// old is live and e keeps its fence (a fence not given yet, under
// NewFence: its token).
func sameGrant(old, e Entry, now int64) bool {
	if !old.Live(now) || old.Fence != e.Fence {
		return false
	}
	return e.Fence != 0 || e.Token != nil && bytes.Equal(old.Token, e.Token)
}

// Set is SET: it writes tok under o's condition at now. A condition on
// the token (IFEQ, IFNE) or GET on a key of another type is WRONGTYPE, as
// Redis answers; a plain, NX or XX SET replaces any type.
func (s *Space) Set(db int, key string, tok []byte, o backend.SetOptions, now int64) (backend.SetResult, error) {
	cur, live := s.Get(db, key, now)
	if live && !cur.IsString() && (o.Get || o.Cond == backend.IfEqual || o.Cond == backend.IfNotEqual) {
		return backend.SetResult{}, backend.ErrWrongType
	}
	res := backend.SetResult{HadPrev: live}
	if o.Get {
		res.Prev = cur.Token
	}
	if !setAllowed(o, cur, live) {
		return res, nil
	}
	res.Written = true
	fence := uint64(0) // a new one, unless the same token is written again (put)
	if live && cur.IsString() && bytes.Equal(cur.Token, tok) {
		fence = cur.Fence
	}
	var exp int64
	switch {
	case o.KeepTTL && live:
		exp = cur.Deadline
	case !o.Expiry.IsZero():
		exp = deadline(o.Expiry, now)
		if exp <= now {
			s.drop(db, key)
			return res, nil
		}
	}
	if fence == 0 {
		fence = s.nextFence(db, key)
	}
	s.Put(db, key, Entry{Token: tok, Deadline: exp, Fence: fence})
	return res, nil
}

// setAllowed reports whether SET's condition holds on the key's current
// entry.
func setAllowed(o backend.SetOptions, cur Entry, live bool) bool {
	switch o.Cond {
	case backend.IfAbsent:
		return !live
	case backend.IfPresent:
		return live
	case backend.IfEqual:
		return live && bytes.Equal(cur.Token, o.Match)
	case backend.IfNotEqual:
		return !live || !bytes.Equal(cur.Token, o.Match)
	}
	return true
}

// deadline is e's absolute expiry in Unix milliseconds for a write at now.
func deadline(e backend.Expiry, now int64) int64 {
	if !e.At.IsZero() {
		return e.At.UnixMilli()
	}
	return now + e.TTL.Milliseconds()
}

// Del removes key and reports whether it was live.
func (s *Space) Del(db int, key string, now int64) bool {
	if _, ok := s.Get(db, key, now); ok {
		s.drop(db, key)
		return true
	}
	return false
}

// DelIf removes a live key whose token compares as cond (IfEqual or
// IfNotEqual) with match, and reports whether it did; a key of another
// type is WRONGTYPE.
func (s *Space) DelIf(db int, key string, cond backend.Cond, match []byte, now int64) (bool, error) {
	cur, live := s.Get(db, key, now)
	switch {
	case !live:
		return false, nil
	case !cur.IsString():
		return false, backend.ErrWrongType
	case bytes.Equal(cur.Token, match) != (cond == backend.IfEqual):
		return false, nil
	}
	s.drop(db, key)
	return true, nil
}

// PTTL is the milliseconds key has left: -2 when it is absent, -1 when it
// has no deadline.
func (s *Space) PTTL(db int, key string, now int64) int64 {
	cur, live := s.Get(db, key, now)
	switch {
	case !live:
		return -2
	case cur.Deadline == 0:
		return -1
	}
	return cur.Deadline - now
}

// Expire is EXPIRE and PEXPIRE: it sets a live key's deadline under cond
// and reports whether it did; a deadline at or before now deletes the key.
func (s *Space) Expire(db int, key string, e backend.Expiry, cond backend.ExpireCond, now int64) bool {
	cur, live := s.Get(db, key, now)
	if !live {
		return false
	}
	when := deadline(e, now)
	if !expireAllowed(cond, cur.Deadline, when) {
		return false
	}
	if when <= now {
		s.drop(db, key)
		return true
	}
	cur.Deadline = when
	s.dbs[db][key] = cur
	return true
}

// expireAllowed reports whether EXPIRE's condition lets deadline cur (0:
// none, which counts as infinite) become when.
func expireAllowed(cond backend.ExpireCond, cur, when int64) bool {
	switch cond {
	case backend.ExpireNX:
		return cur == 0
	case backend.ExpireXX:
		return cur != 0
	case backend.ExpireGT:
		return cur != 0 && when > cur
	case backend.ExpireLT:
		return cur == 0 || when < cur
	case backend.ExpireLTXX:
		return cur != 0 && when < cur
	}
	return true
}

// Persist removes a live key's deadline and reports whether it had one.
func (s *Space) Persist(db int, key string, now int64) bool {
	cur, live := s.Get(db, key, now)
	if !live || cur.Deadline == 0 {
		return false
	}
	cur.Deadline = 0
	s.dbs[db][key] = cur
	return true
}

// Count counts the live keys of db at now, deleting none.
func (s *Space) Count(db int, now int64) int64 {
	var n int64
	for _, e := range s.dbs[db] {
		if e.Live(now) {
			n++
		}
	}
	return n
}

// CountAll counts the live keys of every database at now, deleting none.
func (s *Space) CountAll(now int64) int64 {
	var n int64
	for db := range s.dbs {
		n += s.Count(db, now)
	}
	return n
}
