package backendtest

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

const releaseSrc = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

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

// extendSrc is the owner-checked extend of redlock-style clients.
const extendSrc = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`

func testEvalExpiry(t *testing.T, b backend.Backend, k func(string) string) {
	v, err := eval(t, b, 0, `redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) return redis.call('pttl', KEYS[1])`,
		[]string{k("x")}, "mine", "10000")
	if err != nil || v.Kind != backend.KindInt || v.Int <= 0 || v.Int > 10000 {
		t.Fatalf("SET NX PX then PTTL in a script = %v, %v; want 1..10000", v, err)
	}
	if v, err := eval(t, b, 0, extendSrc, []string{k("x")}, "theirs", "30000"); err != nil || v.Int != 0 {
		t.Errorf("extend with another token = %v, %v; want :0", v, err)
	}
	if v, err := eval(t, b, 0, extendSrc, []string{k("x")}, "mine", "30000"); err != nil || v.Int != 1 {
		t.Errorf("extend with the token = %v, %v; want :1", v, err)
	}
	if ms := pttl(t, b, 0, k("x")); ms <= 10000 || ms > 30000 {
		t.Errorf("PTTL after the extend = %d; want 10001..30000", ms)
	}
	// PEXPIRE 0 deletes at once, by the script's stopped clock too
	// (redislock's obtain.lua with a 0 TTL).
	v, err = eval(t, b, 0, `redis.call('pexpire', KEYS[1], ARGV[1]) return redis.call('exists', KEYS[1])`, []string{k("x")}, "0")
	if err != nil || v.Kind != backend.KindInt || v.Int != 0 {
		t.Errorf("PEXPIRE 0 then EXISTS in a script = %v, %v; want :0", v, err)
	}
	if ms := pttl(t, b, 0, k("x")); ms != -2 {
		t.Errorf("PTTL after PEXPIRE 0 = %d; want -2", ms)
	}
}

// testEvalMultiKeyAtomic runs scripts that move one token around a ring of
// keys while others read the whole ring: every reader must see exactly one
// token, which only holds if each script runs alone over every key it
// touches, declared in KEYS or not, in the database it SELECTs.
func testEvalMultiKeyAtomic(t *testing.T, b backend.Backend, k func(string) string) {
	const (
		move = `for i = 1, #ks do
	  if redis.call('get', ks[i]) then
	    redis.call('del', ks[i])
	    redis.call('set', ks[i % #ks + 1], 'T')
	    return i
	  end
	end
	return 0`
		count = `local n = 0 for i = 1, #ks do if redis.call('exists', ks[i]) == 1 then n = n + 1 end end return n`
	)
	for _, tc := range []struct {
		name     string
		db       int    // where the ring lives
		prologue string // defines ks, the ring's keys
		declared bool   // the keys are passed as KEYS, else as ARGV
	}{
		{"declared keys", 0, `local ks = KEYS `, true},
		{"undeclared keys", 0, `local ks = ARGV `, false},
		{"after SELECT", 7, `redis.call('select', 7) local ks = ARGV `, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring := []string{k(tc.name + ":1"), k(tc.name + ":2"), k(tc.name + ":3")}
			set(t, b, tc.db, ring[0], "T", backend.SetOptions{})
			run := func(src string) (backend.Value, error) {
				if tc.declared {
					return eval(t, b, 0, tc.prologue+src, ring)
				}
				return eval(t, b, 0, tc.prologue+src, nil, ring...)
			}
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					for range 40 {
						if v, err := run(move); err != nil || v.Int == 0 {
							t.Errorf("move = %v, %v", v, err)
							return
						}
					}
				})
				wg.Go(func() {
					for range 40 {
						if v, err := run(count); err != nil || v.Int != 1 {
							t.Errorf("a reader saw %v tokens (err %v); want exactly 1", v, err)
							return
						}
					}
				})
			}
			wg.Wait()
			if n, err := b.Exists(t.Context(), tc.db, ring); n != 1 || err != nil {
				t.Errorf("Exists(ring) after the moves = %d, %v; want 1", n, err)
			}
		})
	}
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
	_, err := b.Eval(t.Context(), 0, script(src), []string{k("ro")}, nil, true)
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
