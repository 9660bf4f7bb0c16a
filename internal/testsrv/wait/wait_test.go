package wait

import (
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	calls := 0
	if !Poll(Timeout, func() bool { calls++; return calls == 3 }) {
		t.Fatal("Poll gave up on a condition that held at its third check")
	}
	if Poll(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
}

func TestUntil(t *testing.T) {
	calls := 0
	Until(t, "the third call", func() (bool, any) { calls++; return calls >= 3, calls })
	if calls != 3 {
		t.Fatalf("Until returned after %d calls; want 3", calls)
	}
}
