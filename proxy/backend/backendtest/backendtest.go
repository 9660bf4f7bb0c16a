// Package backendtest is the conformance suite of SPEC §1: every backend
// (memory, quorum, pgbridge) runs Run and must pass it unchanged, as
// filesystems run testing/fstest.TestFS.
//
// The suite talks to a backend only through backend.Backend. It uses a key
// prefix unique per test, TTLs of at least 100ms where timing matters, and
// polls with deadlines instead of sleeping, so slower backends pass too.
package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/backend"
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
		{"ExpiryInThePast", testExpiryInThePast},
		{"ExpireConditions", testExpireConditions},
		{"Persist", testPersist},
		{"DelAndDelIf", testDel},
		{"ExistsCountsDuplicates", testExists},
		{"MSet", testMSet},
		{"Databases", testDatabases},
		{"OneWinner", testOneWinner},
		{"EvalRelease", testEvalRelease},
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

func testSetGet(t *testing.T, b backend.Backend, k func(string) string) {
	wantGet(t, b, 0, k("absent"), "", false)
	if ms := pttl(t, b, 0, k("absent")); ms != -2 {
		t.Errorf("PTTL(absent) = %d; want -2", ms)
	}
	res := set(t, b, 0, k("a"), "tok", backend.SetOptions{})
	if !res.Written {
		t.Errorf("plain Set not written")
	}
	wantGet(t, b, 0, k("a"), "tok", true)
	if ms := pttl(t, b, 0, k("a")); ms != -1 {
		t.Errorf("PTTL(no expiry) = %d; want -1", ms)
	}
	bin := "\x00\r\n\xff tok"
	set(t, b, 0, k("bin\x00\n"), bin, backend.SetOptions{})
	wantGet(t, b, 0, k("bin\x00\n"), bin, true)
}

func testSetConditions(t *testing.T, b backend.Backend, k func(string) string) {
	ttl := backend.Expiry{TTL: 10 * time.Second}
	if !set(t, b, 0, k("l"), "t1", backend.SetOptions{Cond: backend.IfAbsent, Expiry: ttl}).Written {
		t.Fatal("NX on an absent key not written")
	}
	if set(t, b, 0, k("l"), "t2", backend.SetOptions{Cond: backend.IfAbsent, Expiry: ttl}).Written {
		t.Error("NX on a live key written")
	}
	wantGet(t, b, 0, k("l"), "t1", true)
	if set(t, b, 0, k("absent"), "x", backend.SetOptions{Cond: backend.IfPresent}).Written {
		t.Error("XX on an absent key written")
	}
	wantGet(t, b, 0, k("absent"), "", false)
	if !set(t, b, 0, k("l"), "t3", backend.SetOptions{Cond: backend.IfPresent, Expiry: ttl}).Written {
		t.Error("XX on a live key not written")
	}
	if set(t, b, 0, k("l"), "t4", backend.SetOptions{Cond: backend.IfEqual, Match: []byte("t1")}).Written {
		t.Error("IFEQ with a different token written")
	}
	if !set(t, b, 0, k("l"), "t4", backend.SetOptions{Cond: backend.IfEqual, Match: []byte("t3")}).Written {
		t.Error("IFEQ with the same token not written")
	}
	if set(t, b, 0, k("ifeq-absent"), "x", backend.SetOptions{Cond: backend.IfEqual, Match: []byte("x")}).Written {
		t.Error("IFEQ on an absent key written")
	}
	if set(t, b, 0, k("l"), "t5", backend.SetOptions{Cond: backend.IfNotEqual, Match: []byte("t4")}).Written {
		t.Error("IFNE with the same token written")
	}
	if !set(t, b, 0, k("ifne-absent"), "x", backend.SetOptions{Cond: backend.IfNotEqual, Match: []byte("x")}).Written {
		t.Error("IFNE on an absent key not written")
	}
	wantGet(t, b, 0, k("l"), "t4", true)
}

func testSetGetOption(t *testing.T, b backend.Backend, k func(string) string) {
	res := set(t, b, 0, k("g"), "a", backend.SetOptions{Get: true})
	if res.HadPrev {
		t.Errorf("SET GET on an absent key reported a previous value %q", res.Prev)
	}
	res = set(t, b, 0, k("g"), "b", backend.SetOptions{Get: true, Cond: backend.IfAbsent})
	if !res.HadPrev || string(res.Prev) != "a" || res.Written {
		t.Errorf("SET NX GET on a live key = %+v; want prev a, not written", res)
	}
}

func testKeepTTL(t *testing.T, b backend.Backend, k func(string) string) {
	set(t, b, 0, k("kt"), "a", backend.SetOptions{Expiry: backend.Expiry{TTL: 100 * time.Second}})
	set(t, b, 0, k("kt"), "b", backend.SetOptions{KeepTTL: true})
	if ms := pttl(t, b, 0, k("kt")); ms <= 0 || ms > 100000 {
		t.Errorf("PTTL after KEEPTTL = %d; want the old TTL", ms)
	}
	set(t, b, 0, k("kt"), "c", backend.SetOptions{})
	if ms := pttl(t, b, 0, k("kt")); ms != -1 {
		t.Errorf("PTTL after a plain SET = %d; want -1 (SET clears the TTL)", ms)
	}
}

func testExpiry(t *testing.T, b backend.Backend, k func(string) string) {
	set(t, b, 0, k("e"), "t", backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: 150 * time.Millisecond}})
	if ms := pttl(t, b, 0, k("e")); ms <= 0 || ms > 150 {
		t.Errorf("PTTL just after PX 150 = %d; want 1..150", ms)
	}
	eventually(t, 5*time.Second, "expiry of a 150ms key", func() bool { _, ok := get(t, b, 0, k("e")); return !ok })
	if ms := pttl(t, b, 0, k("e")); ms != -2 {
		t.Errorf("PTTL of an expired key = %d; want -2", ms)
	}
	// An expired key is absent for NX.
	if !set(t, b, 0, k("e"), "t2", backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: 10 * time.Second}}).Written {
		t.Error("NX on an expired key not written")
	}
	set(t, b, 0, k("at"), "t", backend.SetOptions{Expiry: backend.Expiry{At: time.Now().Add(20 * time.Second)}})
	if ms := pttl(t, b, 0, k("at")); ms < 18000 || ms > 20000 {
		t.Errorf("PTTL after PXAT now+20s = %d", ms)
	}
}

func testExpiryInThePast(t *testing.T, b backend.Backend, k func(string) string) {
	res := set(t, b, 0, k("p"), "t", backend.SetOptions{Expiry: backend.Expiry{At: time.UnixMilli(1)}})
	if !res.Written {
		t.Error("SET PXAT in the past not reported written (Redis answers OK)")
	}
	wantGet(t, b, 0, k("p"), "", false)
	set(t, b, 0, k("q"), "t", backend.SetOptions{})
	ok, err := b.Expire(t.Context(), 0, k("q"), backend.Expiry{At: time.UnixMilli(1)}, backend.ExpireAlways)
	if err != nil || !ok {
		t.Errorf("Expire in the past = %v, %v; want true (deletes)", ok, err)
	}
	wantGet(t, b, 0, k("q"), "", false)
}

func testExpireConditions(t *testing.T, b backend.Backend, k func(string) string) {
	ctx := t.Context()
	expire := func(key string, d time.Duration, c backend.ExpireCond) bool {
		t.Helper()
		ok, err := b.Expire(ctx, 0, key, backend.Expiry{TTL: d}, c)
		if err != nil {
			t.Fatalf("Expire(%q): %v", key, err)
		}
		return ok
	}
	if expire(k("absent"), time.Minute, backend.ExpireAlways) {
		t.Error("Expire of an absent key = true")
	}
	set(t, b, 0, k("x"), "t", backend.SetOptions{})
	for _, tc := range []struct {
		name string
		d    time.Duration
		c    backend.ExpireCond
		want bool
	}{
		{"XX without ttl", time.Minute, backend.ExpireXX, false},
		{"GT without ttl", time.Minute, backend.ExpireGT, false},
		{"LTXX without ttl", time.Minute, backend.ExpireLTXX, false},
		{"NX without ttl", time.Minute, backend.ExpireNX, true},
		{"NX with ttl", 2 * time.Minute, backend.ExpireNX, false},
		{"GT longer", 2 * time.Minute, backend.ExpireGT, true},
		{"GT shorter", time.Minute, backend.ExpireGT, false},
		{"LT longer", 3 * time.Minute, backend.ExpireLT, false},
		{"LT shorter", time.Minute, backend.ExpireLT, true},
		{"LTXX shorter", 30 * time.Second, backend.ExpireLTXX, true},
		{"XX with ttl", 40 * time.Second, backend.ExpireXX, true},
	} {
		if got := expire(k("x"), tc.d, tc.c); got != tc.want {
			t.Errorf("%s: Expire = %v; want %v", tc.name, got, tc.want)
		}
	}
	if ms := pttl(t, b, 0, k("x")); ms <= 30000 || ms > 40000 {
		t.Errorf("PTTL after the conditions = %d; want about 40s", ms)
	}
}

func testPersist(t *testing.T, b backend.Backend, k func(string) string) {
	ctx := t.Context()
	set(t, b, 0, k("p"), "t", backend.SetOptions{})
	if ok, _ := b.Persist(ctx, 0, k("p")); ok {
		t.Error("Persist without a TTL = true")
	}
	b.Expire(ctx, 0, k("p"), backend.Expiry{TTL: time.Minute}, backend.ExpireAlways)
	if ok, err := b.Persist(ctx, 0, k("p")); !ok || err != nil {
		t.Errorf("Persist with a TTL = %v, %v", ok, err)
	}
	if ms := pttl(t, b, 0, k("p")); ms != -1 {
		t.Errorf("PTTL after Persist = %d", ms)
	}
	if ok, _ := b.Persist(ctx, 0, k("absent")); ok {
		t.Error("Persist of an absent key = true")
	}
}

func testDel(t *testing.T, b backend.Backend, k func(string) string) {
	ctx := t.Context()
	set(t, b, 0, k("a"), "1", backend.SetOptions{})
	set(t, b, 0, k("b"), "2", backend.SetOptions{})
	if n, err := b.Del(ctx, 0, []string{k("a"), k("b"), k("c"), k("a")}); n != 2 || err != nil {
		t.Errorf("Del(a b c a) = %d, %v; want 2", n, err)
	}
	set(t, b, 0, k("l"), "mine", backend.SetOptions{})
	if ok, _ := b.DelIf(ctx, 0, k("l"), backend.IfEqual, []byte("other")); ok {
		t.Error("DelIf equal with another token deleted")
	}
	if ok, _ := b.DelIf(ctx, 0, k("l"), backend.IfNotEqual, []byte("mine")); ok {
		t.Error("DelIf not-equal with the same token deleted")
	}
	if ok, err := b.DelIf(ctx, 0, k("l"), backend.IfEqual, []byte("mine")); !ok || err != nil {
		t.Errorf("DelIf equal with the token = %v, %v", ok, err)
	}
	if ok, _ := b.DelIf(ctx, 0, k("l"), backend.IfNotEqual, []byte("x")); ok {
		t.Error("DelIf on an absent key deleted")
	}
}

func testExists(t *testing.T, b backend.Backend, k func(string) string) {
	set(t, b, 0, k("a"), "1", backend.SetOptions{})
	if n, err := b.Exists(t.Context(), 0, []string{k("a"), k("a"), k("b")}); n != 2 || err != nil {
		t.Errorf("Exists(a a b) = %d, %v; want 2", n, err)
	}
}

func testMSet(t *testing.T, b backend.Backend, k func(string) string) {
	ctx := t.Context()
	set(t, b, 0, k("a"), "old", backend.SetOptions{Expiry: backend.Expiry{TTL: time.Minute}})
	ok, err := b.MSet(ctx, 0, []backend.KV{{Key: k("a"), Value: []byte("1")}, {Key: k("b"), Value: []byte("2")}}, false)
	if !ok || err != nil {
		t.Fatalf("MSet = %v, %v", ok, err)
	}
	wantGet(t, b, 0, k("a"), "1", true)
	if ms := pttl(t, b, 0, k("a")); ms != -1 {
		t.Errorf("PTTL after MSET = %d; want -1", ms)
	}
	if ok, _ := b.MSet(ctx, 0, []backend.KV{{Key: k("c"), Value: []byte("3")}, {Key: k("b"), Value: []byte("x")}}, true); ok {
		t.Error("MSETNX with one live key wrote")
	}
	wantGet(t, b, 0, k("c"), "", false)
	if ok, _ := b.MSet(ctx, 0, []backend.KV{{Key: k("c"), Value: []byte("3")}, {Key: k("d"), Value: []byte("4")}}, true); !ok {
		t.Error("MSETNX with no live key did not write")
	}
}

func testDatabases(t *testing.T, b backend.Backend, k func(string) string) {
	set(t, b, 3, k("d"), "in3", backend.SetOptions{})
	wantGet(t, b, 0, k("d"), "", false)
	wantGet(t, b, 3, k("d"), "in3", true)
	if !set(t, b, 4, k("d"), "in4", backend.SetOptions{Cond: backend.IfAbsent}).Written {
		t.Error("NX in db 4 blocked by a key of db 3")
	}
}

// testOneWinner races many acquirers for one key: at most one may win. A
// single store has exactly one winner; a quorum may have none when the
// votes split, and must then have undone every partial acquisition, so a
// later acquire succeeds at once.
func testOneWinner(t *testing.T, b backend.Backend, k func(string) string) {
	const n = 32
	var wg sync.WaitGroup
	wins := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			tok := fmt.Sprintf("tok-%d", i)
			res, err := b.Set(t.Context(), 0, k("race"), []byte(tok), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}})
			if err != nil {
				t.Errorf("Set: %v", err)
			}
			if res.Written {
				wins <- tok
			}
		})
	}
	wg.Wait()
	close(wins)
	var won []string
	for w := range wins {
		won = append(won, w)
	}
	switch len(won) {
	case 0:
		if !set(t, b, 0, k("race"), "late", backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}}).Written {
			t.Fatal("no racer won, and the lock is still held: a partial acquisition was left behind")
		}
	case 1:
		wantGet(t, b, 0, k("race"), won[0], true)
	default:
		t.Fatalf("%d acquirers won one lock: %v", len(won), won)
	}
}

const releaseSrc = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

func eval(t *testing.T, b backend.Backend, db int, src string, keys []string, args ...string) (backend.Value, error) {
	t.Helper()
	bargs := make([][]byte, len(args))
	for i, a := range args {
		bargs[i] = []byte(a)
	}
	return b.Eval(t.Context(), db, backend.Script{SHA1: sha1hex(src), Src: src}, keys, bargs, false)
}

func testEvalRelease(t *testing.T, b backend.Backend, k func(string) string) {
	set(t, b, 0, k("r"), "mine", backend.SetOptions{Expiry: backend.Expiry{TTL: time.Minute}})
	if v, err := eval(t, b, 0, releaseSrc, []string{k("r")}, "theirs"); err != nil || v.Kind != backend.KindInt || v.Int != 0 {
		t.Errorf("release with another token = %v, %v; want :0", v, err)
	}
	wantGet(t, b, 0, k("r"), "mine", true)
	if v, err := eval(t, b, 0, releaseSrc, []string{k("r")}, "mine"); err != nil || v.Int != 1 {
		t.Errorf("release with the token = %v, %v; want :1", v, err)
	}
	wantGet(t, b, 0, k("r"), "", false)
}

// testEvalMultiKeyAtomic runs scripts that move one token around a ring of
// keys while others read the whole ring: every reader must see exactly one
// token, which only holds if each script runs alone.
func testEvalMultiKeyAtomic(t *testing.T, b backend.Backend, k func(string) string) {
	keys := []string{k("r1"), k("r2"), k("r3")}
	set(t, b, 0, keys[0], "T", backend.SetOptions{})
	const move = `for i = 1, #KEYS do
	  if redis.call('get', KEYS[i]) then
	    redis.call('del', KEYS[i])
	    redis.call('set', KEYS[i % #KEYS + 1], 'T')
	    return i
	  end
	end
	return 0`
	const count = `local n = 0 for i = 1, #KEYS do if redis.call('exists', KEYS[i]) == 1 then n = n + 1 end end return n`
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if v, err := eval(t, b, 0, move, keys); err != nil || v.Int == 0 {
					t.Errorf("move = %v, %v", v, err)
					return
				}
			}
		})
		wg.Go(func() {
			for range 50 {
				if v, err := eval(t, b, 0, count, keys); err != nil || v.Int != 1 {
					t.Errorf("a reader saw %v tokens (err %v); want exactly 1", v, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func testEvalSelect(t *testing.T, b backend.Backend, k func(string) string) {
	src := `redis.call('set', KEYS[1], 'db0') redis.call('select', 5) redis.call('set', KEYS[1], 'db5') return redis.call('get', KEYS[1])`
	v, err := eval(t, b, 0, src, []string{k("s")})
	if err != nil || string(v.Str) != "db5" {
		t.Fatalf("SELECT in a script = %v, %v; want db5", v, err)
	}
	wantGet(t, b, 0, k("s"), "db0", true)
	wantGet(t, b, 5, k("s"), "db5", true)
}

func testEvalReadOnly(t *testing.T, b backend.Backend, k func(string) string) {
	src := `return redis.call('set', KEYS[1], 'x')`
	_, err := b.Eval(t.Context(), 0, backend.Script{SHA1: sha1hex(src), Src: src}, []string{k("ro")}, nil, true)
	var re *backend.ReplyError
	if !errors.As(err, &re) || !bytes.HasPrefix([]byte(re.Reply), []byte("ERR Write commands are not allowed from read-only scripts.")) {
		t.Errorf("a write in EVAL_RO = %v; want Redis's read-only error", err)
	}
	wantGet(t, b, 0, k("ro"), "", false)
}

func testEvalErrors(t *testing.T, b backend.Backend, k func(string) string) {
	// Scripts are atomic, not transactional: the write before the error stays.
	src := `redis.call('set', KEYS[1], 'x') return redis.call('nosuchcommand')`
	_, err := eval(t, b, 0, src, []string{k("e")})
	var re *backend.ReplyError
	if !errors.As(err, &re) {
		t.Fatalf("a failing script = %v; want a ReplyError", err)
	}
	wantGet(t, b, 0, k("e"), "x", true)
	// A script returning pcall's error table is an error reply, which a
	// backend may return as a Value of KindError or as a ReplyError: the
	// client sees the same "-ERR …" line.
	v, err := eval(t, b, 0, `return redis.pcall('set', KEYS[1])`, []string{k("e")})
	if !errors.As(err, &re) && v.Kind != backend.KindError {
		t.Errorf("pcall with a wrong arity = %v, %v; want an error reply", v, err)
	}
}
