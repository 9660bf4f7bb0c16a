// Package wait is the suite's one way to wait for a state: it polls a
// condition on a ticker until it holds or a deadline passes, and a test that
// gives up says what it waited for and what it saw last. It imports nothing
// of the product, so any package's tests can use it.
package wait

import (
	"fmt"
	"testing"
	"time"
)

// Timeout bounds For and Until. It is generous because the suite shares a
// loaded machine; a state that holds arrives long before it.
const Timeout = 30 * time.Second

// tick is how often a condition is polled.
const tick = 5 * time.Millisecond

// Poll reports whether cond held within d, polling it every few
// milliseconds; cond is checked once more at the deadline.
func Poll(d time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	tk := time.NewTicker(tick)
	defer tk.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	for {
		select {
		case <-tk.C:
			if cond() {
				return true
			}
		case <-end.C:
			return cond()
		}
	}
}

// For waits until cond holds, or fails the test saying what it awaited.
// It must be called from the test's goroutine.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Poll(Timeout, cond) {
		t.Fatalf("gave up after %v waiting for %s", Timeout, what)
	}
}

// Until waits until check reports done, or fails the test saying what it
// awaited and what check saw last. It must be called from the test's
// goroutine.
func Until(t testing.TB, what string, check func() (done bool, seen any)) {
	t.Helper()
	var seen any
	if !Poll(Timeout, func() (done bool) { done, seen = check(); return done }) {
		t.Fatalf("gave up after %v waiting for %s; last saw %s", Timeout, what, fmt.Sprint(seen))
	}
}
