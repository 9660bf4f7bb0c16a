package quorum

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The loop's timer queue gives back its entries earliest first whatever
// the order they were added in: an operation whose command deadline is
// sooner than the node timeout is added after entries due later.
func TestTimerQueueOrder(t *testing.T) {
	at := func(ms int) int64 { return int64(ms) * 1e6 }
	cases := [][]int{
		{50, 10, 30},          // a later-added earlier deadline
		{10, 20, 30, 40, 50},  // in order, the common case
		{50, 40, 30, 20, 10},  // reversed
		{10, 10, 5, 10, 5, 1}, // ties
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		c := make([]int, rng.IntN(300)+1)
		for i := range c {
			c[i] = rng.IntN(100)
		}
		cases = append(cases, c)
	}
	for _, c := range cases {
		var q timerQueue
		for _, ms := range c {
			q.push(timerEntry{at: at(ms)})
		}
		want := slices.Clone(c)
		slices.Sort(want)
		for i, ms := range want {
			if q.len() == 0 {
				t.Fatalf("added %v: queue empty after %d entries", c, i)
			}
			if got := q.pop(); got.at != at(ms) {
				t.Fatalf("added %v: entry %d is due at %v; want %dms", c, i, time.Duration(got.at), ms)
			}
		}
		if q.len() != 0 {
			t.Fatalf("added %v: %d entries left", c, q.len())
		}
	}
}

// The queue's cost with about a thousand entries waiting (20,000
// operations a second times a 50 ms node timeout), each fired in turn:
// entries added in increasing order (the usual case), and each one due
// before the last (all through the heap).
func BenchmarkTimerQueue(b *testing.B) {
	for _, order := range []struct {
		name string
		step int64
	}{{"in-order", 1000}, {"reversed", -1000}} {
		b.Run(order.name, func(b *testing.B) {
			var q timerQueue
			at := int64(1 << 40)
			for range 1000 {
				q.push(timerEntry{at: at})
				at += order.step
			}
			b.ReportAllocs()
			for b.Loop() {
				q.push(timerEntry{at: at})
				at += order.step
				q.pop()
			}
		})
	}
}
