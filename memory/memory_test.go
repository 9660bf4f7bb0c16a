package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/backendtest"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/luascripts"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b := New(Config{})
		t.Cleanup(func() { b.Close(context.Background()) })
		return b
	})
}

// TestExpiryExact checks, on a fake clock, that a key dies at its deadline
// to the millisecond and not a millisecond earlier.
func TestExpiryExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Config{})
		defer b.Close(t.Context())
		ctx := t.Context()
		if _, err := b.Set(ctx, 0, "k", []byte("t"), backend.SetOptions{Expiry: backend.Expiry{TTL: 100 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(99 * time.Millisecond) // fake clock inside the bubble
		if ms, _ := b.PTTL(ctx, 0, "k"); ms != 1 {
			t.Errorf("PTTL 1ms before the deadline = %d; want 1", ms)
		}
		time.Sleep(time.Millisecond) // fake clock: the deadline passes
		if _, ok, _ := b.Get(ctx, 0, "k"); ok {
			t.Error("key alive at its deadline")
		}
	})
}

// TestScriptClock: a script judges expiry by the time it started, as Redis
// 7 does, so a key live at its start cannot vanish between its GET and its
// PEXPIRE; outside a script the same key is dead.
func TestScriptClock(t *testing.T) {
	b := New(Config{})
	defer b.Close(t.Context())
	ctx := t.Context()
	start := time.Now().UnixMilli()
	b.shard("k").sp.Put(0, "k", model.Entry{Token: []byte("t"), Deadline: start - 5}) // dead by the wall clock
	v := b.view(start - 10)                                                           // a script that began 10ms ago
	if _, ok, _ := v.Get(ctx, 0, "k"); !ok {
		t.Error("the script does not see a key live at its start")
	}
	if ms, _ := v.PTTL(ctx, 0, "k"); ms != 5 {
		t.Errorf("PTTL in the script = %d; want 5", ms)
	}
	if ok, _ := v.Expire(ctx, 0, "k", backend.Expiry{TTL: time.Second}, backend.ExpireAlways); !ok {
		t.Error("PEXPIRE in the script failed on a key live at its start")
	}
	if ms, _ := b.PTTL(ctx, 0, "k"); ms <= 980 || ms > 990 {
		t.Errorf("PTTL after the script's PEXPIRE 1000 = %d; want it counted from the script's start", ms)
	}
}

// TestMixedExclusion acquires and releases locks over a few keys from many
// goroutines, half through single-key commands and half through scripts,
// while multi-key commands and short-lived keys keep the exclusive path and
// the reaper busy: no lock may ever have two holders, and every release of
// a held lock must succeed.
func TestMixedExclusion(t *testing.T) {
	b := New(Config{ReapInterval: time.Millisecond})
	defer b.Close(t.Context())
	ctx := t.Context()
	const (
		keys       = 4
		acquireSrc = `return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', 10000)`
		releaseSrc = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`
	)
	acquire := backend.Script{SHA1: luascripts.SHA1(acquireSrc), Src: acquireSrc}
	release := backend.Script{SHA1: luascripts.SHA1(releaseSrc), Src: releaseSrc}
	var holders [keys]atomic.Int32
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 300 {
				k := rand.IntN(keys)
				key, tok := fmt.Sprint("m", k), fmt.Sprint(w, ":", i)
				var got bool
				if i%2 == 0 {
					res, err := b.Set(ctx, 0, key, []byte(tok), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: 10 * time.Second}})
					got = err == nil && res.Written
				} else {
					v, err := b.Eval(ctx, 0, acquire, []string{key}, [][]byte{[]byte(tok)}, false)
					got = err == nil && v.Kind == backend.KindStatus
				}
				if !got {
					continue
				}
				if n := holders[k].Add(1); n != 1 {
					t.Errorf("key %s has %d holders", key, n)
				}
				if cur, _, _ := b.Get(ctx, 0, key); string(cur) != tok {
					t.Errorf("holder %s reads %q", tok, cur)
				}
				holders[k].Add(-1)
				var released bool
				if i%3 == 0 {
					released, _ = b.DelIf(ctx, 0, key, backend.IfEqual, []byte(tok))
				} else {
					v, _ := b.Eval(ctx, 0, release, []string{key}, [][]byte{[]byte(tok)}, false)
					released = v.Int == 1
				}
				if !released {
					t.Errorf("holder %s could not release %s", tok, key)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 300 {
			junk := []string{fmt.Sprint("j", i), fmt.Sprint("j", i+1)}
			b.Set(ctx, 0, junk[0], []byte("x"), backend.SetOptions{Expiry: backend.Expiry{TTL: time.Millisecond}})
			b.MSet(ctx, 1, []backend.KV{{Key: junk[0], Value: []byte("y")}}, i%2 == 0)
			b.Del(ctx, 1, junk)
			b.Exists(ctx, 0, junk)
			b.DBSize(ctx, 0)
		}
	})
	wg.Wait()
}

func BenchmarkSetNXRelease(b *testing.B) {
	m := New(Config{})
	defer m.Close(context.Background())
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			key := fmt.Sprintf("k%d", i%1000)
			i++
			res, _ := m.Set(ctx, 0, key, []byte("tok"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Second}})
			if res.Written {
				m.DelIf(ctx, 0, key, backend.IfEqual, []byte("tok"))
			}
		}
	})
}
