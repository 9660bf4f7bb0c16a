package model

import (
	"context"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// do runs one command on v, its keys being the first argument's.
func do(t *testing.T, v *View, args ...string) (backend.Value, error) {
	t.Helper()
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	var keys []string
	if len(args) > 1 {
		keys = []string{args[1]}
	}
	return v.Do(context.Background(), 0, keys, b)
}

// TestObjectsBesideStrings: a key holds a string or an object, never both;
// the string operations answer WRONGTYPE on an object where Redis does,
// and replace it where Redis does.
func TestObjectsBesideStrings(t *testing.T) {
	ctx := context.Background()
	s := &Space{}
	v := &View{Now: now, Spaces: []*Space{s}}
	if _, err := do(t, v, "hset", "h", "f", "1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Get(ctx, 0, "h"); !backend.IsWrongType(err) {
		t.Errorf("GET of a hash: %v; want WRONGTYPE", err)
	}
	if _, err := v.Set(ctx, 0, "h", tok, backend.SetOptions{Get: true}); !backend.IsWrongType(err) {
		t.Errorf("SET … GET of a hash: %v; want WRONGTYPE", err)
	}
	if _, err := v.DelIf(ctx, 0, "h", backend.IfEqual, tok); !backend.IsWrongType(err) {
		t.Errorf("DELIFEQ of a hash: %v; want WRONGTYPE", err)
	}
	if res, err := v.Set(ctx, 0, "h", tok, backend.SetOptions{Cond: backend.IfAbsent}); err != nil || res.Written {
		t.Errorf("SET NX over a hash = %+v, %v; want not written", res, err)
	}
	if res, err := v.Set(ctx, 0, "h", tok, backend.SetOptions{}); err != nil || !res.Written {
		t.Fatalf("SET over a hash = %+v, %v; want written", res, err)
	}
	if _, o, ok := s.Lookup(0, "h", now); !ok || o != nil {
		t.Errorf("after SET the key holds object %v; want the string alone", o)
	}
	if _, err := do(t, v, "hget", "h", "f"); !backend.IsWrongType(err) {
		t.Errorf("HGET of a string: %v; want WRONGTYPE", err)
	}
	s.Put(0, "e", Entry{}) // a nil token is the empty string, not an object
	if got, err := do(t, v, "type", "e"); err != nil || string(got.Str) != "string" {
		t.Errorf("TYPE of an empty string = %v, %v", got, err)
	}
}

// TestObjectsExpire: an object's key expires and is reclaimed like a
// string's, its object with it; emptied objects delete their key.
func TestObjectsExpire(t *testing.T) {
	s := &Space{}
	v := &View{Now: now, Spaces: []*Space{s}}
	do(t, v, "zadd", "z", "1", "a")
	do(t, v, "rpush", "l", "a")
	s.dbs[0]["z"] = Entry{Deadline: now + 10}
	s.dbs[0]["l"] = Entry{Deadline: now + 10}
	if seen, expired := s.Sample(0, 10, now+10); seen != 2 || expired != 2 {
		t.Fatalf("Sample = %d seen, %d expired; want 2, 2", seen, expired)
	}
	if len(s.objs[0]) != 0 {
		t.Errorf("the reaper left %d objects behind", len(s.objs[0]))
	}
	do(t, v, "sadd", "s", "m")
	do(t, v, "srem", "s", "m")
	if _, _, ok := s.Lookup(0, "s", now); ok || len(s.objs[0]) != 0 {
		t.Error("an emptied set kept its key")
	}
	late := &View{Now: now + 20, Spaces: []*Space{s}}
	do(t, v, "hset", "h", "f", "v")
	s.dbs[0]["h"] = Entry{Deadline: now + 10}
	if got, _ := do(t, late, "hget", "h", "f"); !got.IsNil() {
		t.Errorf("HGET past the deadline = %v; want nil", got)
	}
	if s.Expired() != 3 {
		t.Errorf("Expired = %d; want 3", s.Expired())
	}
}

// TestMatch: Redis's glob rules.
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"", "", true}, {"", "a", false}, {"a*", "abc", true}, {"a?c", "abc", true},
		{"a?c", "ac", false}, {"[abc]x", "bx", true}, {"[^abc]x", "bx", false}, {"[a-c]x", "cx", true},
		{"[c-a]x", "bx", true}, {`user:\1`, "user:1", true}, {`\*`, "*", true}, {`\*`, "a", false},
		{"*b*", "aaab", true}, {"h[ae]llo", "hallo", true}, {"h[ae]llo", "hillo", false},
		{"[", "a", false}, {"**a", "ba", true},
	} {
		if got := Match([]byte(tc.pattern), []byte(tc.s)); got != tc.want {
			t.Errorf("Match(%q, %q) = %v; want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// TestScanVisitsEveryKey: a SCAN iteration returns every key present
// throughout it at least once, whatever is added and removed meanwhile.
func TestScanVisitsEveryKey(t *testing.T) {
	s := &Space{}
	v := &View{Now: now, Spaces: []*Space{s}}
	for i := range 50 {
		s.Put(0, "k"+string(rune('A'+i)), Entry{Token: tok})
	}
	seen := map[string]bool{}
	cursor := "0"
	for round := 0; ; round++ {
		got, err := do(t, v, "scan", cursor, "COUNT", "7")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range got.Elems[1].Elems {
			seen[string(k.Str)] = true
		}
		s.Put(0, "new"+string(rune('a'+round)), Entry{Token: tok}) // churn
		cursor = string(got.Elems[0].Str)
		if cursor == "0" {
			break
		}
		if round > 100 {
			t.Fatal("SCAN does not end")
		}
	}
	for i := range 50 {
		if k := "k" + string(rune('A'+i)); !seen[k] {
			t.Errorf("SCAN missed %s", k)
		}
	}
}
