package pgbridge

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// TestTimers: the leases' timer heap (expiry.go) starts the work of every
// timer that is due, once, with its kind; a timer stopped or set again
// for later does not run at its former time; a lease has one timer. Due
// times are far in the past or the future, and fire is called by hand:
// nothing here depends on how fast the machine is.
func TestTimers(t *testing.T) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	ran := map[string]int{}
	ts := &timers{run: func(k dbKey, e *held, row bool) {
		defer wg.Done()
		mu.Lock()
		defer mu.Unlock()
		ran[fmt.Sprintf("%s/%v", k.key, row)]++
	}}
	// The time.Timer counts as set for long ago, so that schedule leaves
	// it alone until the first fire by hand: no timer runs on its own
	// while the test sets them.
	ts.at = 1
	defer func() {
		ts.mu.Lock()
		if ts.t != nil {
			ts.t.Stop()
		}
		ts.mu.Unlock()
	}()
	past, future := nowMS()-time.Hour.Milliseconds(), nowMS()+time.Hour.Milliseconds()
	es := map[string]*held{}
	for i := range 50 {
		k := dbKey{0, fmt.Sprintf("k%d", i)}
		es[k.key] = &held{}
		at := past + int64(i)
		if i%2 == 1 {
			at = future + int64(i)
		}
		ts.set(k, es[k.key], at, i%3 == 0)
	}
	ts.stop(es["k0"])                               // due, stopped: never runs
	ts.set(dbKey{0, "k2"}, es["k2"], future, false) // due, moved later: not now
	ts.set(dbKey{0, "k3"}, es["k3"], past, false)   // not due, moved earlier: now, as expire
	ts.set(dbKey{0, "k4"}, es["k4"], past, true)    // set again, still due: runs once, as writeRow
	want := map[string]int{}
	for i := 0; i < 50; i += 2 {
		want[fmt.Sprintf("k%d/%v", i, i%3 == 0)] = 1
	}
	delete(want, "k0/true")
	delete(want, "k2/false")
	want["k3/false"] = 1
	delete(want, "k4/false")
	want["k4/true"] = 1
	wg.Add(len(want))
	ts.fire()
	ts.fire() // nothing is due twice
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(ran) != fmt.Sprint(want) {
		t.Errorf("timers run:\n%v\nwant:\n%v", ran, want)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if n := len(ts.q); n != 50-len(want)-1 {
		t.Errorf("%d timers left; want %d", n, 50-len(want)-1)
	}
	for i, e := range ts.q {
		if e.timer.idx != i || !e.timer.on || e.timer.at < future {
			t.Errorf("timer %d in the heap: %+v", i, e.timer)
		}
	}
}

// untilMS saturates: a lease whose deadline lies centuries ahead (SET …
// EX 10000000000 NX is accepted) waits "forever", not a wrapped negative
// time that fired its timer at once, again and again, spinning a core.
func TestUntilMSSaturates(t *testing.T) {
	now := nowMS()
	for _, tt := range []struct {
		at   int64
		want func(time.Duration) bool
	}{
		{now + 10_000_000_000_000, func(d time.Duration) bool { return d == math.MaxInt64 }},
		{math.MaxInt64, func(d time.Duration) bool { return d == math.MaxInt64 }},
		{now - 10_000_000_000_000, func(d time.Duration) bool { return d == math.MinInt64 }},
		{now + 5000, func(d time.Duration) bool { return d > 4*time.Second && d <= 5*time.Second }},
	} {
		if d := untilMS(tt.at); !tt.want(d) {
			t.Errorf("untilMS(now%+d ms) = %v", tt.at-now, d)
		}
	}
}
