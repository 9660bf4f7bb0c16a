package model

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// fence reads LOCKPROXY FENCE key token on v: 0 for nil.
func fence(t *testing.T, v *View, key, token string) uint64 {
	t.Helper()
	r, err := v.Do(context.Background(), 0, []string{key}, [][]byte{[]byte("LOCKPROXY"), []byte("FENCE"), []byte(key), []byte(token)})
	if err != nil {
		t.Fatalf("LOCKPROXY FENCE %s %s: %v", key, token, err)
	}
	if r.Kind == backend.KindNil {
		return 0
	}
	return uint64(r.Int)
}

// A grant's fence is new each time a key goes from free to held or
// changes hands, greater than every earlier one; an extend, a repeated
// write of the same token and a re-entrant HINCRBY keep it.
func TestFences(t *testing.T) {
	ctx := context.Background()
	s := &Space{}
	v := &View{Now: now, Spaces: []*Space{s}}
	nx := backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Second}}
	var last uint64
	grow := func(what string, f uint64) {
		t.Helper()
		if f <= last {
			t.Errorf("%s: fence %d; want above %d", what, f, last)
		}
		last = f
	}
	same := func(what string, f uint64) {
		t.Helper()
		if f != last {
			t.Errorf("%s: fence %d; want %d kept", what, f, last)
		}
	}
	v.Set(ctx, 0, "k", []byte("a"), nx)
	grow("SET NX", fence(t, v, "k", "a"))
	if f := fence(t, v, "k", "b"); f != 0 {
		t.Errorf("fence of another token = %d; want nil", f)
	}
	if f := fence(t, v, "absent", "a"); f != 0 {
		t.Errorf("fence of an absent key = %d; want nil", f)
	}
	v.Expire(ctx, 0, "k", backend.Expiry{TTL: time.Minute}, backend.ExpireAlways)
	same("PEXPIRE", fence(t, v, "k", "a"))
	v.Set(ctx, 0, "k", []byte("a"), backend.SetOptions{Expiry: backend.Expiry{TTL: time.Minute}})
	same("SET of the same token", fence(t, v, "k", "a"))
	v.Set(ctx, 0, "k", []byte("b"), backend.SetOptions{})
	grow("SET of another token", fence(t, v, "k", "b"))
	v.Del(ctx, 0, []string{"k"})
	v.Set(ctx, 0, "k", []byte("b"), nx)
	grow("SET NX after DEL, same token", fence(t, v, "k", "b"))
	later := &View{Now: now + 2000, Spaces: []*Space{s}} // k expired
	later.Set(ctx, 0, "k", []byte("b"), nx)
	grow("SET NX after expiry, same token", fence(t, later, "k", "b"))

	hincr := func(field string) {
		t.Helper()
		if _, err := v.Do(ctx, 0, []string{"h"}, [][]byte{[]byte("hincrby"), []byte("h"), []byte(field), []byte("1")}); err != nil {
			t.Fatal(err)
		}
	}
	hincr("owner:1")
	grow("HINCRBY creating the hash", fence(t, v, "h", "owner:1"))
	hincr("owner:1")
	same("re-entrant HINCRBY", fence(t, v, "h", "owner:1"))
	if f := fence(t, v, "h", "owner:2"); f != 0 {
		t.Errorf("fence of a field the hash lacks = %d; want nil", f)
	}
	if _, err := v.Do(ctx, 0, []string{"h", "h2"}, [][]byte{[]byte("rename"), []byte("h"), []byte("h2")}); err != nil {
		t.Fatal(err)
	}
	grow("RENAME's destination", fence(t, v, "h2", "owner:1"))

	// A Space made after a restart, a millisecond later, gives greater
	// fences than this one did.
	s2 := &Space{}
	v2 := &View{Now: later.Now + 1, Spaces: []*Space{s2}}
	v2.Set(ctx, 0, "k", []byte("c"), nx)
	grow("after a restart", fence(t, v2, "k", "c"))
}

func TestLockproxyCommand(t *testing.T) {
	ctx := context.Background()
	v := &View{Now: now, Spaces: []*Space{{}}}
	run := func(args ...string) (backend.Value, error) {
		b := make([][]byte, len(args))
		for i, a := range args {
			b[i] = []byte(a)
		}
		var keys []string
		if len(args) > 2 {
			keys = args[2:3]
		}
		return v.Do(ctx, 0, keys, b)
	}
	v.Set(ctx, 0, "k", []byte("tok"), backend.SetOptions{Expiry: backend.Expiry{TTL: time.Second}})
	r, err := run("lockproxy", "lock", "k")
	if err != nil || len(r.Elems) != 4 || string(r.Elems[0].Str) != "tok" || r.Elems[1].Int <= 0 || r.Elems[2].Int != 1000 {
		t.Errorf("LOCKPROXY LOCK k = %+v, %v; want [tok, fence, 1000]", r, err)
	}
	if r, err := run("lockproxy", "lock", "absent"); err != nil || r.Kind != backend.KindNil {
		t.Errorf("LOCKPROXY LOCK absent = %+v, %v; want nil", r, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lockproxy", "nope", "k"}, "ERR unknown subcommand 'nope'. Try LOCKPROXY HELP."},
		{[]string{"lockproxy", "FENCE", "k"}, "ERR wrong number of arguments for 'lockproxy|fence' command"},
		{[]string{"lockproxy", "lock", "k", "x"}, "ERR wrong number of arguments for 'lockproxy|lock' command"},
	} {
		if _, err := run(c.args...); err == nil || err.Error() != c.want {
			t.Errorf("%q: %v; want %q", c.args, err, c.want)
		}
	}
	if r, err := run("lockproxy", "help"); err != nil || len(r.Elems) == 0 {
		t.Errorf("LOCKPROXY HELP = %+v, %v", r, err)
	}
}
