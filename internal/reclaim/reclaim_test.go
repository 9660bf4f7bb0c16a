package reclaim

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestReclaimerCoalesces: a large free gives memory back once after the
// pause; a burst of them once; small frees never; and no more than once
// per interval however many come.
func TestReclaimerCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gave atomic.Int32
		r := start(50*time.Millisecond, time.Second, func() { gave.Add(1) })
		defer r.Close()

		r.Freed(Large - 1)
		time.Sleep(time.Minute) // fake clock inside the bubble
		if gave.Load() != 0 {
			t.Fatalf("a small free gave memory back %d times; want 0", gave.Load())
		}
		for range 10 {
			r.Freed(Large)
		}
		time.Sleep(49 * time.Millisecond) // fake clock: just short of the pause
		synctest.Wait()
		if gave.Load() != 0 {
			t.Fatalf("gave back before the pause: %d", gave.Load())
		}
		time.Sleep(time.Millisecond) // fake clock: the pause ends
		synctest.Wait()
		if gave.Load() != 1 {
			t.Fatalf("a burst of 10 large frees gave back %d times; want 1", gave.Load())
		}
		r.Freed(Large)                     // within the interval: waits for its end
		time.Sleep(900 * time.Millisecond) // fake clock: within the interval
		synctest.Wait()
		if gave.Load() != 1 {
			t.Fatalf("gave back %d times within one interval; want 1", gave.Load())
		}
		time.Sleep(200 * time.Millisecond) // fake clock: past the interval
		synctest.Wait()
		if gave.Load() != 2 {
			t.Fatalf("the free during the interval was not given back after it: %d", gave.Load())
		}
	})
}

// TestNilReclaimer: a nil Reclaimer ignores every call.
func TestNilReclaimer(t *testing.T) {
	var r *Reclaimer
	r.Freed(Large)
	r.Close()
}
