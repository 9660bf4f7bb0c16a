package model

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// TestViewClock: a View judges expiry and counts relative expiries by its
// stopped clock, not by the time of the call.
func TestViewClock(t *testing.T) {
	ctx := context.Background()
	s := &Space{}
	s.Put(0, "k", Entry{Token: tok, Deadline: now + 5})
	v := &View{Now: now, Spaces: []*Space{s}}
	if ms, _ := v.PTTL(ctx, 0, "k"); ms != 5 {
		t.Errorf("PTTL = %d; want 5", ms)
	}
	v.Expire(ctx, 0, "k", backend.Expiry{TTL: time.Second}, backend.ExpireAlways)
	if e, _ := s.Get(0, "k", now); e.Deadline != now+1000 {
		t.Errorf("deadline after PEXPIRE 1000 = now%+d; want now+1000", e.Deadline-now)
	}
	late := &View{Now: now + 1000, Spaces: []*Space{s}}
	if _, ok, _ := late.Get(ctx, 0, "k"); ok {
		t.Error("a View at the deadline sees the key")
	}
}

// TestViewPick: each key goes to the space Pick names, and DBSize counts
// every space.
func TestViewPick(t *testing.T) {
	ctx := context.Background()
	a, b := &Space{}, &Space{}
	v := &View{Now: now, Spaces: []*Space{a, b}, Pick: func(key string) *Space {
		if key[0] == 'a' {
			return a
		}
		return b
	}}
	if ok, _ := v.MSet(ctx, 2, []backend.KV{{Key: "a1", Value: tok}, {Key: "b1", Value: tok}, {Key: "b2", Value: tok}}, false); !ok {
		t.Fatal("MSET refused")
	}
	if a.Stored() != 1 || b.Stored() != 2 {
		t.Errorf("stored %d in a, %d in b; want 1, 2", a.Stored(), b.Stored())
	}
	if n, _ := v.DBSize(ctx, 2); n != 3 {
		t.Errorf("DBSize = %d; want 3", n)
	}
	if n, _ := v.Del(ctx, 2, []string{"a1", "b1", "b1", "x"}); n != 2 {
		t.Errorf("DEL a1 b1 b1 x = %d; want 2 (a key named twice counts once)", n)
	}
	if n, _ := v.Exists(ctx, 2, []string{"b2", "b2", "a1"}); n != 2 {
		t.Errorf("EXISTS b2 b2 a1 = %d; want 2 (a key named twice counts twice)", n)
	}
}

func TestViewMSetNX(t *testing.T) {
	ctx := context.Background()
	s := &Space{}
	s.Put(0, "held", Entry{Token: other, Deadline: now + 1})
	s.Put(0, "gone", Entry{Token: other, Deadline: now})
	v := &View{Now: now, Spaces: []*Space{s}}
	if ok, _ := v.MSet(ctx, 0, []backend.KV{{Key: "new", Value: tok}, {Key: "held", Value: tok}}, true); ok {
		t.Error("MSETNX over a live key wrote")
	}
	if _, ok := s.Get(0, "new", now); ok {
		t.Error("a refused MSETNX wrote a key")
	}
	if ok, _ := v.MSet(ctx, 0, []backend.KV{{Key: "new", Value: tok}, {Key: "gone", Value: tok}}, true); !ok {
		t.Error("MSETNX over an expired key refused")
	}
	if e, _ := s.Get(0, "gone", now); e.Deadline != 0 || string(e.Token) != "tok" {
		t.Errorf("MSET left %q@%d; want tok without deadline", e.Token, e.Deadline)
	}
}

// TestViewAdmit: a refused key fails the call before it changes anything,
// after Admit heard of every key the call names.
func TestViewAdmit(t *testing.T) {
	ctx := context.Background()
	errNo := errors.New("not admitted")
	s := &Space{}
	s.Put(0, "ok", Entry{Token: tok})
	var asked []string
	v := &View{Now: now, Spaces: []*Space{s}, Admit: func(db int, key string) error {
		asked = append(asked, key)
		if key == "ok" {
			return nil
		}
		return errNo
	}}
	calls := map[string]func() error{
		"Set":     func() error { _, err := v.Set(ctx, 0, "no", tok, backend.SetOptions{}); return err },
		"Get":     func() error { _, _, err := v.Get(ctx, 0, "no"); return err },
		"Del":     func() error { _, err := v.Del(ctx, 0, []string{"ok", "no", "no2"}); return err },
		"DelIf":   func() error { _, err := v.DelIf(ctx, 0, "no", backend.IfEqual, tok); return err },
		"Exists":  func() error { _, err := v.Exists(ctx, 0, []string{"no", "ok"}); return err },
		"PTTL":    func() error { _, err := v.PTTL(ctx, 0, "no"); return err },
		"Expire":  func() error { _, err := v.Expire(ctx, 0, "no", backend.Expiry{TTL: time.Second}, 0); return err },
		"Persist": func() error { _, err := v.Persist(ctx, 0, "no"); return err },
		"MSet": func() error {
			_, err := v.MSet(ctx, 0, []backend.KV{{Key: "ok", Value: other}, {Key: "no", Value: tok}}, false)
			return err
		},
	}
	for name, call := range calls {
		asked = nil
		if err := call(); !errors.Is(err, errNo) {
			t.Errorf("%s: err = %v; want the Admit error", name, err)
		}
		if !slices.Contains(asked, "no") {
			t.Errorf("%s asked Admit about %q; want every key", name, asked)
		}
	}
	asked = nil
	v.Del(ctx, 0, []string{"ok", "no", "no2"})
	if !slices.Equal(asked, []string{"ok", "no", "no2"}) {
		t.Errorf("DEL asked about %q; want ok, no, no2", asked)
	}
	if e, ok := s.Get(0, "ok", now); !ok || string(e.Token) != "tok" || s.Stored() != 1 {
		t.Errorf("refused calls changed the space: ok = %q, %d stored", e.Token, s.Stored())
	}
	if _, _, err := v.Get(ctx, 0, "ok"); err != nil {
		t.Errorf("GET of an admitted key: %v", err)
	}
}

// TestViewDBSizeOutside: DBSize adds what Outside counts, and passes its
// error on.
func TestViewDBSizeOutside(t *testing.T) {
	ctx := context.Background()
	s := &Space{}
	s.Put(4, "mine", Entry{Token: tok})
	s.Put(4, "dead", Entry{Token: tok, Deadline: now})
	var fail error
	v := &View{Now: now, Spaces: []*Space{s}, Outside: func(_ context.Context, db int) (int64, error) {
		return int64(10 * db), fail
	}}
	if n, err := v.DBSize(ctx, 4); n != 41 || err != nil {
		t.Errorf("DBSize = %d, %v; want 41", n, err)
	}
	fail = errors.New("down")
	if _, err := v.DBSize(ctx, 4); !errors.Is(err, fail) {
		t.Errorf("DBSize err = %v; want Outside's", err)
	}
}

func TestViewDBRange(t *testing.T) {
	ctx := context.Background()
	v := &View{Now: now, Spaces: []*Space{{}}}
	for _, db := range []int{-1, backend.Databases} {
		if _, err := v.Set(ctx, db, "k", tok, backend.SetOptions{}); err == nil {
			t.Errorf("SET in db %d: no error", db)
		}
		if _, err := v.MSet(ctx, db, nil, false); err == nil {
			t.Errorf("MSET in db %d: no error", db)
		}
		if _, err := v.DBSize(ctx, db); err == nil {
			t.Errorf("DBSIZE in db %d: no error", db)
		}
	}
}
