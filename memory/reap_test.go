package memory

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// stored counts the entries held, live or not (what memory is spent on).
func (b *Backend) stored() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for i := range b.shards {
		n += b.shards[i].sp.Stored()
	}
	return n
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestChurnBounded acquires perSecond locks of 1s every second that are
// never released, for 40 seconds of a fake clock: the reaper alone must
// keep the stored keys near the live ones and the heap flat.
func TestChurnBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Config{ReapInterval: 100 * time.Millisecond})
		defer b.Close(t.Context())
		const perSecond = 5000
		var heap5 uint64
		for sec := range 40 {
			for i := range perSecond {
				key := "lock:" + strconv.Itoa(sec) + ":" + strconv.Itoa(i)
				b.Set(t.Context(), 0, key, []byte("tok"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Second}})
			}
			time.Sleep(time.Second) // fake clock: a second of churn passes
			if n := b.stored(); n > 2*perSecond {
				t.Fatalf("second %d: %d keys stored, %d live at most; the reaper falls behind", sec, n, perSecond)
			}
			switch sec {
			case 5:
				heap5 = heapAlloc()
			case 39:
				heap := heapAlloc()
				t.Logf("heap after 5s of churn: %d KiB; after 40s: %d KiB", heap5>>10, heap>>10)
				if heap > heap5+heap5/2+1<<20 {
					t.Errorf("heap grew from %d KiB to %d KiB under steady churn", heap5>>10, heap>>10)
				}
			}
		}
		time.Sleep(2 * time.Second) // fake clock: every TTL passes
		if n := b.stored(); n != 0 {
			t.Errorf("%d keys still stored 2s after all expired; want the reaper to have reclaimed them", n)
		}
	})
}

// TestShrinkAfterPeak: after a burst of locks expires, the maps that held
// them are rebuilt and the heap returns to about where it was.
func TestShrinkAfterPeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Config{})
		defer b.Close(t.Context())
		const n = 100_000
		base := heapAlloc()
		for i := range n {
			b.Set(t.Context(), 2, "burst:"+strconv.Itoa(i), []byte("tok"), backend.SetOptions{Expiry: backend.Expiry{TTL: time.Second}})
		}
		peak := heapAlloc()
		time.Sleep(3 * time.Second) // fake clock: every TTL passes
		after := heapAlloc()
		t.Logf("heap: base %d KiB, %d locks %d KiB, after they expired %d KiB", base>>10, n, peak>>10, after>>10)
		if after > base+(peak-base)/8 {
			t.Errorf("heap after the burst expired = %d KiB; want near the base %d KiB (peak %d KiB)", after>>10, base>>10, peak>>10)
		}
	})
}

// heapPerLock holds n locks (key 21 bytes, token 22 bytes, with a TTL, as
// docs/performance.md describes them) and returns the heap bytes each one
// costs.
func heapPerLock(tb testing.TB, n int) float64 {
	b := New(Config{})
	defer b.Close(tb.Context())
	before := heapAlloc()
	for i := range n {
		key := fmt.Sprintf("lock:resource:%08d", i)
		tok := fmt.Appendf(nil, "tok-%018d", i)
		b.Set(tb.Context(), 0, key, tok, backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Hour}})
	}
	per := float64(heapAlloc()-before) / float64(n)
	runtime.KeepAlive(b)
	return per
}

// TestHeapPerLock: the budget is 1 GiB for 1,000,000 locks, about 1 KiB
// each. BenchmarkHeapPerLock measures the full million.
func TestHeapPerLock(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 100k locks")
	}
	per := heapPerLock(t, 100_000)
	t.Logf("heap per held lock: %.0f bytes (1,000,000 locks: %.0f MiB)", per, per*1e6/(1<<20))
	if per > 1024 {
		t.Errorf("heap per held lock = %.0f bytes; 1,000,000 locks would exceed 1 GiB", per)
	}
}

// BenchmarkHeapPerLock reports the heap of 1,000,000 held locks:
// go test -run '^$' -bench HeapPerLock -benchtime 1x ./memory
func BenchmarkHeapPerLock(b *testing.B) {
	for b.Loop() {
		per := heapPerLock(b, 1_000_000)
		b.ReportMetric(per, "B/lock")
		b.ReportMetric(per*1e6/(1<<20), "MiB/1M-locks")
	}
}

// TestLockCounts: HeldLocks counts live keys of every database and not
// expired ones the reaper has yet to reach; ExpiredLocks counts every
// expiry once, whether a command or the reaper found it, and no release.
func TestLockCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Config{ReapInterval: time.Hour}) // only commands reclaim here
		defer b.Close(t.Context())
		ctx := t.Context()
		short := backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Second}}
		for i := range 10 {
			b.Set(ctx, i%3, "short:"+strconv.Itoa(i), []byte("tok"), short)
		}
		b.Set(ctx, 0, "forever", []byte("tok"), backend.SetOptions{})
		b.Set(ctx, 5, "released", []byte("tok"), short)
		if n := b.HeldLocks(); n != 12 {
			t.Fatalf("HeldLocks = %d; want 12", n)
		}
		if ok, _ := b.DelIf(ctx, 5, "released", backend.IfEqual, []byte("tok")); !ok {
			t.Fatal("release refused")
		}
		time.Sleep(1500 * time.Millisecond) // fake clock: the TTL passes
		if n, e := b.HeldLocks(), b.ExpiredLocks(); n != 1 || e != 0 {
			t.Fatalf("after the TTL: HeldLocks = %d, ExpiredLocks = %d; want 1 (unreaped keys are not held), 0 (none reclaimed yet)", n, e)
		}
		b.Get(ctx, 0, "short:0") // a command finds one expired
		if e := b.ExpiredLocks(); e != 1 {
			t.Fatalf("ExpiredLocks after GET of an expired key = %d; want 1", e)
		}
		b.reapOnce()
		b.Get(ctx, 0, "short:0")
		if e := b.ExpiredLocks(); e != 10 {
			t.Errorf("ExpiredLocks after the reaper = %d; want 10 (each expiry once, the release not at all)", e)
		}
	})
}
