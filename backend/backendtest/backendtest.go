// Package backendtest is the conformance suite of the lock model
// (docs/architecture.md): every backend (memory, quorum, pgbridge) runs
// Run and must pass it unchanged, as filesystems run testing/fstest.TestFS.
//
// The suite talks to a backend only through backend.Backend. It uses a key
// prefix unique per test, TTLs of at least 100ms where timing matters, and
// polls with deadlines instead of sleeping, so slower backends pass too.
package backendtest

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// Run runs the conformance suite against backends made by newBackend, which
// registers their cleanup on t.
func Run(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	b := newBackend(t)
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, b backend.Backend, k func(string) string)
	}{
		{"SetGet", testSetGet},
		{"SetConditions", testSetConditions},
		{"SetGetOption", testSetGetOption},
		{"KeepTTL", testKeepTTL},
		{"Expiry", testExpiry},
		{"ExpiryPrecision", testExpiryPrecision},
		{"AbsentAndExpired", testAbsentAndExpired},
		{"ExpiryInThePast", testExpiryInThePast},
		{"ExpireConditions", testExpireConditions},
		{"Persist", testPersist},
		{"DelAndDelIf", testDel},
		{"ExistsCountsDuplicates", testExists},
		{"MSet", testMSet},
		{"DBSize", testDBSize},
		{"Databases", testDatabases},
		{"OneWinner", testOneWinner},
		{"EvalRelease", testEvalRelease},
		{"EvalExpiry", testEvalExpiry},
		{"EvalMultiKeyAtomic", testEvalMultiKeyAtomic},
		{"EvalSelect", testEvalSelect},
		{"EvalReadOnly", testEvalReadOnly},
		{"EvalErrors", testEvalErrors},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("bt:%s:%d:", tc.name, time.Now().UnixNano())
			tc.f(t, b, func(s string) string { return prefix + s })
		})
	}
}

func set(t *testing.T, b backend.Backend, db int, key, tok string, o backend.SetOptions) backend.SetResult {
	t.Helper()
	res, err := b.Set(t.Context(), db, key, []byte(tok), o)
	if err != nil {
		t.Fatalf("Set(%q, %q, %+v): %v", key, tok, o, err)
	}
	return res
}

func get(t *testing.T, b backend.Backend, db int, key string) (string, bool) {
	t.Helper()
	tok, ok, err := b.Get(t.Context(), db, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(tok), ok
}

func pttl(t *testing.T, b backend.Backend, db int, key string) int64 {
	t.Helper()
	ms, err := b.PTTL(t.Context(), db, key)
	if err != nil {
		t.Fatalf("PTTL(%q): %v", key, err)
	}
	return ms
}

func wantGet(t *testing.T, b backend.Backend, db int, key, want string, wantOK bool) {
	t.Helper()
	got, ok := get(t, b, db, key)
	if got != want || ok != wantOK {
		t.Errorf("Get(%q) = %q, %v; want %q, %v", key, got, ok, want, wantOK)
	}
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising
	}
}

// eval runs src as EVAL (not read-only) with string arguments.
func eval(t *testing.T, b backend.Backend, db int, src string, keys []string, args ...string) (backend.Value, error) {
	t.Helper()
	bargs := make([][]byte, len(args))
	for i, a := range args {
		bargs[i] = []byte(a)
	}
	return b.Eval(t.Context(), db, script(src), keys, bargs, false)
}

func script(src string) backend.Script {
	sum := sha1.Sum([]byte(src))
	return backend.Script{SHA1: hex.EncodeToString(sum[:]), Src: src}
}
