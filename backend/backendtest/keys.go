package backendtest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

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
	set(t, b, 0, k("live"), "old", backend.SetOptions{Expiry: backend.Expiry{TTL: time.Minute}})
	for _, tc := range []struct {
		name      string
		key       string
		o         backend.SetOptions
		want      backend.SetResult
		wantAfter string
	}{
		{"absent", k("absent"), backend.SetOptions{Get: true},
			backend.SetResult{Written: true}, "new"},
		{"NX on live", k("live"), backend.SetOptions{Get: true, Cond: backend.IfAbsent},
			backend.SetResult{HadPrev: true, Prev: []byte("old")}, "old"},
		{"XX on absent", k("absent-xx"), backend.SetOptions{Get: true, Cond: backend.IfPresent},
			backend.SetResult{}, ""},
		{"IFEQ mismatch", k("live"), backend.SetOptions{Get: true, Cond: backend.IfEqual, Match: []byte("x")},
			backend.SetResult{HadPrev: true, Prev: []byte("old")}, "old"},
		{"overwrite live", k("live"), backend.SetOptions{Get: true},
			backend.SetResult{Written: true, HadPrev: true, Prev: []byte("old")}, "new"},
	} {
		got := set(t, b, 0, tc.key, "new", tc.o)
		if got.Written != tc.want.Written || got.HadPrev != tc.want.HadPrev || string(got.Prev) != string(tc.want.Prev) {
			t.Errorf("%s: SET GET = %+v; want %+v", tc.name, got, tc.want)
		}
		wantGet(t, b, 0, tc.key, tc.wantAfter, tc.wantAfter != "")
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

// testExpiryPrecision checks that a key lives until its deadline and dies
// soon after it. A backend sets the deadline after the Set began, so no
// read that finished before start+ttl may find the key gone (less 1ms:
// deadlines count in whole milliseconds, from a clock read truncated to
// one, as in Redis); the upper bound leaves room for slow backends and
// loaded machines.
func testExpiryPrecision(t *testing.T, b backend.Backend, k func(string) string) {
	const late = time.Second
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		exp  func(start time.Time, ttl time.Duration) backend.Expiry
	}{
		{"PX 100", 100 * time.Millisecond, func(_ time.Time, ttl time.Duration) backend.Expiry { return backend.Expiry{TTL: ttl} }},
		{"PX 250", 250 * time.Millisecond, func(_ time.Time, ttl time.Duration) backend.Expiry { return backend.Expiry{TTL: ttl} }},
		{"PXAT now+200", 200 * time.Millisecond, func(start time.Time, ttl time.Duration) backend.Expiry {
			return backend.Expiry{At: start.Add(ttl).Truncate(time.Millisecond).Add(time.Millisecond)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := k(tc.name)
			start := time.Now()
			set(t, b, 0, key, "t", backend.SetOptions{Cond: backend.IfAbsent, Expiry: tc.exp(start, tc.ttl)})
			if ms := pttl(t, b, 0, key); ms > tc.ttl.Milliseconds()+1 || (ms <= 0 && time.Since(start) < tc.ttl) {
				t.Errorf("PTTL right after the Set = %d; want at most %d", ms, tc.ttl.Milliseconds())
			}
			for {
				_, ok := get(t, b, 0, key)
				done := time.Now()
				if !ok {
					if early := start.Add(tc.ttl).Sub(done); early > time.Millisecond {
						t.Fatalf("key gone %v before its deadline", early)
					}
					break
				}
				if over := done.Sub(start) - tc.ttl; over > late {
					t.Fatalf("key still alive %v after its deadline", over)
				}
				time.Sleep(2 * time.Millisecond) // polling, not synchronising
			}
		})
	}
}

// testAbsentAndExpired checks that an expired key, reclaimed or not, answers
// every operation exactly as an absent one does.
func testAbsentAndExpired(t *testing.T, b backend.Backend, k func(string) string) {
	ctx := t.Context()
	ops := []struct {
		name string
		f    func(key string) (any, error)
		want any
	}{
		{"Get", func(key string) (any, error) { _, ok, err := b.Get(ctx, 0, key); return ok, err }, false},
		{"PTTL", func(key string) (any, error) { return b.PTTL(ctx, 0, key) }, int64(-2)},
		{"Exists", func(key string) (any, error) { return b.Exists(ctx, 0, []string{key, key}) }, int64(0)},
		{"Del", func(key string) (any, error) { return b.Del(ctx, 0, []string{key}) }, int64(0)},
		{"DelIf equal", func(key string) (any, error) { return b.DelIf(ctx, 0, key, backend.IfEqual, []byte("t")) }, false},
		{"Expire", func(key string) (any, error) {
			return b.Expire(ctx, 0, key, backend.Expiry{TTL: time.Minute}, backend.ExpireAlways)
		}, false},
		{"Persist", func(key string) (any, error) { return b.Persist(ctx, 0, key) }, false},
		{"Set XX", func(key string) (any, error) {
			res, err := b.Set(ctx, 0, key, []byte("u"), backend.SetOptions{Cond: backend.IfPresent, Get: true})
			return res.Written || res.HadPrev, err
		}, false},
		{"Set IFEQ", func(key string) (any, error) {
			res, err := b.Set(ctx, 0, key, []byte("u"), backend.SetOptions{Cond: backend.IfEqual, Match: []byte("t")})
			return res.Written, err
		}, false},
		{"Set NX", func(key string) (any, error) {
			res, err := b.Set(ctx, 0, key, []byte("u"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}})
			return res.Written, err
		}, true},
		{"MSetNX", func(key string) (any, error) {
			return b.MSet(ctx, 0, []backend.KV{{Key: key, Value: []byte("u")}}, true)
		}, true},
	}
	// Expire one key per operation, then a sentinel set last: once the
	// sentinel is gone, every other key is past its deadline, unread.
	for _, op := range ops {
		set(t, b, 0, k("expired:"+op.name), "t", backend.SetOptions{Expiry: backend.Expiry{TTL: 100 * time.Millisecond}})
	}
	set(t, b, 0, k("sentinel"), "t", backend.SetOptions{Expiry: backend.Expiry{TTL: 100 * time.Millisecond}})
	eventually(t, 5*time.Second, "expiry of the sentinel", func() bool { _, ok := get(t, b, 0, k("sentinel")); return !ok })
	for _, state := range []string{"absent", "expired"} {
		for _, op := range ops {
			got, err := op.f(k(state + ":" + op.name))
			if err != nil || got != op.want {
				t.Errorf("%s on an %s key = %v, %v; want %v", op.name, state, got, err, op.want)
			}
		}
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

// testDBSize counts in database 9, which no other test writes, by
// difference, so keys left by earlier runs do not matter.
func testDBSize(t *testing.T, b backend.Backend, k func(string) string) {
	ctx := t.Context()
	n0, err := b.DBSize(ctx, 9)
	if err != nil {
		t.Fatalf("DBSize: %v", err)
	}
	set(t, b, 9, k("a"), "1", backend.SetOptions{})
	set(t, b, 9, k("b"), "2", backend.SetOptions{})
	set(t, b, 0, k("other-db"), "3", backend.SetOptions{})
	if n, err := b.DBSize(ctx, 9); n != n0+2 || err != nil {
		t.Errorf("DBSize after two Sets = %d, %v; want %d", n, err, n0+2)
	}
	if _, err := b.Del(ctx, 9, []string{k("a"), k("b")}); err != nil {
		t.Fatalf("Del: %v", err)
	}
	if n, err := b.DBSize(ctx, 9); n != n0 || err != nil {
		t.Errorf("DBSize after the Del = %d, %v; want %d", n, err, n0)
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
