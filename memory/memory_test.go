package memory

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockproxy/lockproxy/proxy/backend"
	"github.com/lockproxy/lockproxy/proxy/backend/backendtest"
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
		time.Sleep(time.Millisecond)
		if _, ok, _ := b.Get(ctx, 0, "k"); ok {
			t.Error("key alive at its deadline")
		}
	})
}

// TestReaperBoundsChurn acquires keys that are never released, on a fake
// clock: the reaper must reclaim them without anyone reading them again.
func TestReaperBoundsChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Config{ReapInterval: 100 * time.Millisecond})
		defer b.Close(t.Context())
		ctx := t.Context()
		const perSecond = 5000
		for sec := range 10 {
			for i := range perSecond {
				key := fmt.Sprintf("lock:%d:%d", sec, i)
				b.Set(ctx, 0, key, []byte("tok"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Second}})
			}
			time.Sleep(time.Second)
		}
		time.Sleep(2 * time.Second)
		if n := b.stored(); n > perSecond/4 {
			t.Errorf("%d keys still stored 2s after all expired; want the reaper to have reclaimed them", n)
		}
	})
}

// stored counts the entries held, live or not (what memory is spent on).
func (b *Backend) stored() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for i := range b.shards {
		for _, m := range b.shards[i].dbs {
			n += len(m)
		}
	}
	return n
}

// TestHeapPerLock measures the heap one held lock costs; SPEC §6 allows
// 1 GiB for 1,000,000 locks, so one lock may cost about 1 KiB.
func TestHeapPerLock(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 200k locks")
	}
	const n = 200_000
	b := New(Config{})
	defer b.Close(t.Context())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		key := fmt.Sprintf("lock:resource:%08d", i) // 21 bytes
		tok := []byte(fmt.Sprintf("tok-%018d", i))  // 22 bytes
		b.Set(t.Context(), 0, key, tok, backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Hour}})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("heap per held lock: %.0f bytes (1,000,000 locks: %.0f MiB)", per, per*1e6/(1<<20))
	if per > 1024 {
		t.Errorf("heap per held lock = %.0f bytes; 1,000,000 locks would exceed 1 GiB", per)
	}
	runtime.KeepAlive(b)
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
