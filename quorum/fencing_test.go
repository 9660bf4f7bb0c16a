package quorum_test

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/quorum"
)

func lockproxyCmd(t *testing.T, b *quorum.Backend, args ...string) (backend.Value, error) {
	t.Helper()
	a := make([][]byte, len(args))
	for i, s := range args {
		a[i] = []byte(s)
	}
	var keys []string
	if len(args) > 2 {
		keys = args[2:3]
	}
	return b.Do(t.Context(), 0, keys, a)
}

// Each fence read on quorum is above every one before it, through either
// of two instances on the same nodes and with a node down; a token the key
// does not hold reads nil.
func TestFencesGrowAcrossInstances(t *testing.T) {
	nodes := startNodes(t, 3)
	addrs := addrsOf(nodes)
	a, b := newBackend(t, addrs), newBackend(t, addrs)
	if r, err := a.Set(t.Context(), 0, "k", []byte("tok"), acq(time.Minute)); err != nil || !r.Written {
		t.Fatalf("SET NX = %+v, %v", r, err)
	}
	var last int64
	read := func(what string, be *quorum.Backend) {
		t.Helper()
		v, err := lockproxyCmd(t, be, "lockproxy", "fence", "k", "tok")
		if err != nil || v.Kind != backend.KindInt || v.Int <= last {
			t.Fatalf("%s: LOCKPROXY FENCE = %+v, %v; want an integer above %d", what, v, err, last)
		}
		if v.Int >= 1<<53 {
			t.Fatalf("%s: fence %d beyond 2^53", what, v.Int)
		}
		last = v.Int
	}
	read("first", a)
	read("the other instance", b)
	nodes[0].Kill()
	read("a node down", a)
	read("a node down, the other instance", b)
	if v, err := lockproxyCmd(t, a, "lockproxy", "fence", "k", "other"); err != nil || v.Kind != backend.KindNil {
		t.Errorf("fence of another token = %+v, %v; want nil", v, err)
	}
	v, err := lockproxyCmd(t, b, "lockproxy", "lock", "k")
	if err != nil || len(v.Elems) != 4 || string(v.Elems[0].Str) != "tok" || v.Elems[1].Int <= last || v.Elems[2].Int <= 0 {
		t.Errorf("LOCKPROXY LOCK k = %+v, %v; want [tok, a fence above %d, PTTL]", v, err, last)
	}
	if v, err := lockproxyCmd(t, a, "lockproxy", "lock", "absent"); err != nil || v.Kind != backend.KindNil {
		t.Errorf("LOCKPROXY LOCK absent = %+v, %v; want nil", v, err)
	}
	if _, err := lockproxyCmd(t, a, "lockproxy", "nope", "k"); err == nil || err.Error() != "ERR unknown subcommand 'nope'. Try LOCKPROXY HELP." {
		t.Errorf("LOCKPROXY nope: %v", err)
	}
}
