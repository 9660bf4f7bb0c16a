package model

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// now is the stopped clock of every test: Unix milliseconds.
const now int64 = 1_700_000_000_000

var (
	tok   = []byte("tok")
	other = []byte("other")
)

// live is a key's entry in a test table (nil, where one is expected, is absent).
func live(t []byte, deadline int64) *Entry { return &Entry{Token: t, Deadline: deadline} }

// with returns a Space holding key "k" of db 3 as cur (nil: absent).
func with(cur *Entry) *Space {
	s := &Space{}
	if cur != nil {
		s.Put(3, "k", *cur)
	}
	return s
}

// checkKey fails t unless key "k" of db 3 is stored as want (nil: not
// stored at all, live or not).
func checkKey(t *testing.T, s *Space, want *Entry) {
	t.Helper()
	got, ok := s.dbs[3]["k"]
	switch {
	case want == nil && ok:
		t.Errorf("key stored as %q@%d; want it absent", got.Token, got.Deadline)
	case want != nil && !ok:
		t.Errorf("key absent; want %q@%d", want.Token, want.Deadline)
	case want != nil && (!bytes.Equal(got.Token, want.Token) || got.Deadline != want.Deadline):
		t.Errorf("key = %q@%d; want %q@%d", got.Token, got.Deadline, want.Token, want.Deadline)
	}
}

func TestSet(t *testing.T) {
	ttl := backend.Expiry{TTL: 1500 * time.Millisecond}
	at := func(ms int64) backend.Expiry { return backend.Expiry{At: time.UnixMilli(ms)} }
	for _, tc := range []struct {
		name             string
		cur              *Entry
		o                backend.SetOptions
		written, hadPrev bool
		prev             []byte
		after            *Entry
		expired          uint64
	}{
		{"plain on absent", nil, backend.SetOptions{}, true, false, nil, live(tok, 0), 0},
		{"plain drops the old expiry", live(other, now+10), backend.SetOptions{}, true, true, nil, live(tok, 0), 0},
		{"plain with ttl", nil, backend.SetOptions{Expiry: ttl}, true, false, nil, live(tok, now+1500), 0},
		{"plain with absolute deadline", nil, backend.SetOptions{Expiry: at(now + 7)}, true, false, nil, live(tok, now+7), 0},
		{"deadline now deletes", live(other, 0), backend.SetOptions{Expiry: at(now)}, true, true, nil, nil, 0},
		{"deadline past deletes", nil, backend.SetOptions{Expiry: at(now - 1)}, true, false, nil, nil, 0},
		{"NX on absent", nil, backend.SetOptions{Cond: backend.IfAbsent}, true, false, nil, live(tok, 0), 0},
		{"NX on live", live(other, now+1), backend.SetOptions{Cond: backend.IfAbsent}, false, true, nil, live(other, now+1), 0},
		{"NX on a key at its deadline", live(other, now), backend.SetOptions{Cond: backend.IfAbsent, Expiry: ttl}, true, false, nil, live(tok, now+1500), 1},
		{"NX GET on live", live(other, 0), backend.SetOptions{Cond: backend.IfAbsent, Get: true}, false, true, other, live(other, 0), 0},
		{"XX on absent", nil, backend.SetOptions{Cond: backend.IfPresent}, false, false, nil, nil, 0},
		{"XX on expired", live(other, now-1), backend.SetOptions{Cond: backend.IfPresent}, false, false, nil, nil, 1},
		{"XX on live", live(other, 0), backend.SetOptions{Cond: backend.IfPresent, Get: true}, true, true, other, live(tok, 0), 0},
		{"IFEQ match", live(other, now+5), backend.SetOptions{Cond: backend.IfEqual, Match: other}, true, true, nil, live(tok, 0), 0},
		{"IFEQ mismatch", live(other, 0), backend.SetOptions{Cond: backend.IfEqual, Match: tok}, false, true, nil, live(other, 0), 0},
		{"IFEQ absent", nil, backend.SetOptions{Cond: backend.IfEqual, Match: tok}, false, false, nil, nil, 0},
		{"IFNE match", live(other, 0), backend.SetOptions{Cond: backend.IfNotEqual, Match: other}, false, true, nil, live(other, 0), 0},
		{"IFNE mismatch", live(other, 0), backend.SetOptions{Cond: backend.IfNotEqual, Match: tok}, true, true, nil, live(tok, 0), 0},
		{"IFNE absent", nil, backend.SetOptions{Cond: backend.IfNotEqual, Match: tok}, true, false, nil, live(tok, 0), 0},
		{"KEEPTTL on live", live(other, now+9), backend.SetOptions{KeepTTL: true}, true, true, nil, live(tok, now+9), 0},
		{"KEEPTTL on absent", nil, backend.SetOptions{KeepTTL: true}, true, false, nil, live(tok, 0), 0},
		{"KEEPTTL on expired", live(other, now), backend.SetOptions{KeepTTL: true}, true, false, nil, live(tok, 0), 1},
		{"GET of absent", nil, backend.SetOptions{Get: true}, true, false, nil, live(tok, 0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := with(tc.cur)
			res, _ := s.Set(3, "k", tok, tc.o, now)
			if res.Written != tc.written || res.HadPrev != tc.hadPrev || !bytes.Equal(res.Prev, tc.prev) {
				t.Errorf("Set = %+v; want written %v, hadPrev %v, prev %q", res, tc.written, tc.hadPrev, tc.prev)
			}
			checkKey(t, s, tc.after)
			if s.Expired() != tc.expired {
				t.Errorf("Expired = %d; want %d", s.Expired(), tc.expired)
			}
		})
	}
}

func TestExpire(t *testing.T) {
	later := backend.Expiry{At: time.UnixMilli(now + 100)}
	sooner := backend.Expiry{At: time.UnixMilli(now + 10)}
	past := backend.Expiry{At: time.UnixMilli(now - 1)}
	for _, tc := range []struct {
		name  string
		cur   *Entry
		e     backend.Expiry
		cond  backend.ExpireCond
		ok    bool
		after *Entry
	}{
		{"absent", nil, later, backend.ExpireAlways, false, nil},
		{"at its deadline", live(tok, now), later, backend.ExpireAlways, false, nil},
		{"relative", live(tok, 0), backend.Expiry{TTL: 2 * time.Second}, backend.ExpireAlways, true, live(tok, now+2000)},
		{"past deletes", live(tok, 0), past, backend.ExpireAlways, true, nil},
		{"now deletes", live(tok, now+50), backend.Expiry{At: time.UnixMilli(now)}, backend.ExpireAlways, true, nil},
		{"NX without expiry", live(tok, 0), later, backend.ExpireNX, true, live(tok, now+100)},
		{"NX with expiry", live(tok, now+50), later, backend.ExpireNX, false, live(tok, now+50)},
		{"XX without expiry", live(tok, 0), later, backend.ExpireXX, false, live(tok, 0)},
		{"XX with expiry", live(tok, now+50), later, backend.ExpireXX, true, live(tok, now+100)},
		{"GT later", live(tok, now+50), later, backend.ExpireGT, true, live(tok, now+100)},
		{"GT sooner", live(tok, now+50), sooner, backend.ExpireGT, false, live(tok, now+50)},
		{"GT equal", live(tok, now+100), later, backend.ExpireGT, false, live(tok, now+100)},
		{"GT without expiry (infinite)", live(tok, 0), later, backend.ExpireGT, false, live(tok, 0)},
		{"LT sooner", live(tok, now+50), sooner, backend.ExpireLT, true, live(tok, now+10)},
		{"LT later", live(tok, now+50), later, backend.ExpireLT, false, live(tok, now+50)},
		{"LT equal", live(tok, now+10), sooner, backend.ExpireLT, false, live(tok, now+10)},
		{"LT without expiry (infinite)", live(tok, 0), later, backend.ExpireLT, true, live(tok, now+100)},
		{"LT past deletes", live(tok, now+50), past, backend.ExpireLT, true, nil},
		{"LT XX without expiry", live(tok, 0), sooner, backend.ExpireLTXX, false, live(tok, 0)},
		{"LT XX sooner", live(tok, now+50), sooner, backend.ExpireLTXX, true, live(tok, now+10)},
		{"LT XX later", live(tok, now+50), later, backend.ExpireLTXX, false, live(tok, now+50)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := with(tc.cur)
			if ok := s.Expire(3, "k", tc.e, tc.cond, now); ok != tc.ok {
				t.Errorf("Expire = %v; want %v", ok, tc.ok)
			}
			checkKey(t, s, tc.after)
		})
	}
}

// TestReads covers the calls that find a key and report on it: Get, PTTL,
// Persist, Del and DelIf, on an absent, an expired, a permanent and an
// expiring key.
func TestReads(t *testing.T) {
	type call struct {
		name string
		do   func(s *Space) any
	}
	calls := []call{
		{"Get", func(s *Space) any { e, ok := s.Get(3, "k", now); return fmt.Sprintf("%s %v", e.Token, ok) }},
		{"PTTL", func(s *Space) any { return s.PTTL(3, "k", now) }},
		{"Persist", func(s *Space) any { return s.Persist(3, "k", now) }},
		{"Del", func(s *Space) any { return s.Del(3, "k", now) }},
		{"DelIf equal", func(s *Space) any { ok, _ := s.DelIf(3, "k", backend.IfEqual, tok, now); return ok }},
		{"DelIf equal other", func(s *Space) any { ok, _ := s.DelIf(3, "k", backend.IfEqual, other, now); return ok }},
		{"DelIf not equal", func(s *Space) any { ok, _ := s.DelIf(3, "k", backend.IfNotEqual, tok, now); return ok }},
		{"DelIf not equal other", func(s *Space) any { ok, _ := s.DelIf(3, "k", backend.IfNotEqual, other, now); return ok }},
	}
	for _, tc := range []struct {
		name  string
		cur   *Entry
		want  []any    // per call
		after []*Entry // per call
	}{
		{"absent", nil,
			[]any{" false", int64(-2), false, false, false, false, false, false},
			[]*Entry{nil, nil, nil, nil, nil, nil, nil, nil}},
		{"at its deadline", live(tok, now),
			[]any{" false", int64(-2), false, false, false, false, false, false},
			[]*Entry{nil, nil, nil, nil, nil, nil, nil, nil}},
		{"permanent", live(tok, 0),
			[]any{"tok true", int64(-1), false, true, true, false, false, true},
			[]*Entry{live(tok, 0), live(tok, 0), live(tok, 0), nil, nil, live(tok, 0), live(tok, 0), nil}},
		{"expiring", live(tok, now+1),
			[]any{"tok true", int64(1), true, true, true, false, false, true},
			[]*Entry{live(tok, now+1), live(tok, now+1), live(tok, 0), nil, nil, live(tok, now+1), live(tok, now+1), nil}},
	} {
		for i, c := range calls {
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				s := with(tc.cur)
				if got := c.do(s); got != tc.want[i] {
					t.Errorf("%s = %v; want %v", c.name, got, tc.want[i])
				}
				checkKey(t, s, tc.after[i])
				wantExpired := uint64(0)
				if tc.cur != nil && !tc.cur.Live(now) {
					wantExpired = 1
				}
				if s.Expired() != wantExpired {
					t.Errorf("Expired = %d; want %d", s.Expired(), wantExpired)
				}
			})
		}
	}
}

// TestDatabases: the same key in two databases is two keys.
func TestDatabases(t *testing.T) {
	s := &Space{}
	s.Set(0, "k", tok, backend.SetOptions{}, now)
	if _, ok := s.Get(1, "k", now); ok {
		t.Error("db 1 sees db 0's key")
	}
	if s.Del(1, "k", now) {
		t.Error("DEL in db 1 removed db 0's key")
	}
	if e, ok := s.Get(0, "k", now); !ok || !bytes.Equal(e.Token, tok) {
		t.Error("db 0 lost its key")
	}
}

// TestCount: live keys are counted at now and nothing is deleted.
func TestCount(t *testing.T) {
	s := &Space{}
	s.Put(0, "a", Entry{Token: tok})
	s.Put(0, "b", Entry{Token: tok, Deadline: now + 1})
	s.Put(0, "c", Entry{Token: tok, Deadline: now})
	s.Put(2, "d", Entry{Token: tok, Deadline: now - 5})
	s.Put(2, "e", Entry{Token: tok})
	if n := s.Count(0, now); n != 2 {
		t.Errorf("Count(0) = %d; want 2", n)
	}
	if n := s.CountAll(now); n != 3 {
		t.Errorf("CountAll = %d; want 3", n)
	}
	if n := s.Stored(); n != 5 {
		t.Errorf("Stored = %d; want 5 (counting deletes nothing)", n)
	}
	if s.Expired() != 0 {
		t.Errorf("Expired = %d; want 0", s.Expired())
	}
}
