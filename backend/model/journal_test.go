package model

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// state is a deep copy of what spaces hold, to compare before and after.
func state(spaces []*Space) []map[[2]string]any {
	out := make([]map[[2]string]any, len(spaces))
	for i, sp := range spaces {
		out[i] = map[[2]string]any{}
		for db := range sp.dbs {
			for k, e := range sp.dbs[db] {
				var o any
				if obj := sp.objs[db][k]; obj != nil {
					o = obj.Clone()
				}
				out[i][[2]string{string(rune('0' + db)), k}] = []any{e.Token, e.Deadline, e.Fence, e.Granted, o}
			}
		}
	}
	return out
}

// TestJournalUndo runs every kind of write on a View with a Journal over
// two spaces, in two databases, and checks that Undo puts back exactly
// what was there; and that without Undo the writes stay.
func TestJournalUndo(t *testing.T) {
	ctx := context.Background()
	spaces := []*Space{{}, {}}
	pick := func(key string) *Space { return spaces[len(key)%2] }
	setup := &View{Now: now, Spaces: spaces, Pick: pick}
	for _, cmd := range [][]string{
		{"hset", "hash", "f", "1", "g", "2"}, {"rpush", "list", "a", "b", "c"}, {"sadd", "set", "x", "y"},
		{"zadd", "zset", "1", "m", "2", "n"}, {"incr", "counter"},
	} {
		if _, err := do(t, setup, cmd...); err != nil {
			t.Fatal(cmd, err)
		}
	}
	for i := range 20 { // past journalScan
		setup.Set(ctx, 0, "k"+string(rune('a'+i)), []byte("v"), backend.SetOptions{})
	}
	setup.Set(ctx, 1, "other", []byte("db1"), backend.SetOptions{Expiry: backend.Expiry{TTL: time.Hour}})
	before := state(spaces)

	writes := func(v *View) {
		v.Set(ctx, 0, "new", []byte("x"), backend.SetOptions{})
		v.Set(ctx, 0, "ka", []byte("changed"), backend.SetOptions{})
		v.Del(ctx, 0, []string{"kb", "kc", "absent"})
		v.DelIf(ctx, 0, "kd", backend.IfEqual, []byte("v"))
		v.Expire(ctx, 0, "ke", backend.Expiry{TTL: time.Minute}, backend.ExpireAlways)
		v.Persist(ctx, 1, "other")
		v.MSet(ctx, 0, []backend.KV{{Key: "kf", Value: []byte("m")}, {Key: "m2", Value: []byte("m")}}, false)
		for _, cmd := range [][]string{
			{"hset", "hash", "f", "changed", "h", "3"}, {"hdel", "hash", "g"}, {"lpop", "list"}, {"rpush", "list", "d"},
			{"srem", "set", "x"}, {"zadd", "zset", "5", "m"}, {"zrem", "zset", "n"}, {"incrby", "counter", "41"},
			{"hset", "newhash", "a", "b"},
		} {
			if _, err := do(t, v, cmd...); err != nil {
				t.Fatal(cmd, err)
			}
		}
		b := func(ss ...string) [][]byte {
			out := make([][]byte, len(ss))
			for i, s := range ss {
				out[i] = []byte(s)
			}
			return out
		}
		for _, c := range []struct {
			keys []string
			args [][]byte
		}{
			{[]string{"kg", "renamed"}, b("rename", "kg", "renamed")},
			{[]string{"hash", "hashcopy"}, b("copy", "hash", "hashcopy", "db", "1")},
			{[]string{"list", "newlist"}, b("rpoplpush", "list", "newlist")},
			{nil, b("flushall", "bad")}, // refused: changes nothing
			{nil, b("flushdb")},
			{[]string{"afterflush"}, b("incr", "afterflush")},
			{[]string{"ki"}, b("incr", "ki")}, // WRONGTYPE-free: ki was flushed
		} {
			if _, err := v.Do(ctx, 0, c.keys, c.args); err != nil && string(c.args[1]) != "bad" {
				t.Fatal(string(c.args[0]), err)
			}
		}
	}
	v := &View{Now: now, Spaces: spaces, Pick: pick, Journal: &Journal{}}
	writes(v)
	if reflect.DeepEqual(state(spaces), before) {
		t.Fatal("the writes changed nothing")
	}
	v.Journal.Undo()
	if after := state(spaces); !reflect.DeepEqual(after, before) {
		t.Errorf("after Undo:\n%v\nwant\n%v", after, before)
	}
	// The Journal serves again once undone; a run kept is kept.
	writes(v)
	changed := state(spaces)
	v.Journal.Reset()
	v.Journal.Undo()
	if !reflect.DeepEqual(state(spaces), changed) {
		t.Error("Undo after Reset changed the spaces")
	}
}

// TestJournalReads checks that reads save nothing: a script that only
// reads a large object does not copy it.
func TestJournalReads(t *testing.T) {
	s := &Space{}
	v := &View{Now: now, Spaces: []*Space{s}, Journal: &Journal{}}
	do(t, &View{Now: now, Spaces: []*Space{s}}, "hset", "h", "f", "1")
	for _, cmd := range [][]string{{"hget", "h", "f"}, {"hgetall", "h"}, {"type", "h"}, {"hlen", "h"}} {
		do(t, v, cmd...)
	}
	v.Get(context.Background(), 0, "x")
	if len(v.Journal.saved) != 0 {
		t.Errorf("reads saved %d keys", len(v.Journal.saved))
	}
	if ReadOnly("hset") || !ReadOnly("hget") {
		t.Error("ReadOnly is wrong about hset or hget")
	}
	for name := range readOnly {
		if !Serves(name) {
			t.Errorf("ReadOnly lists %q, which Do does not run", name)
		}
	}
}
