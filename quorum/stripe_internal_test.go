package quorum

import (
	"slices"
	"testing"
)

type recWaiter struct {
	name string
	got  *[]string
	ql   *qloop
	tk   *taken
}

func (w recWaiter) stripeReady()         { *w.got = append(*w.got, w.name) }
func (w recWaiter) loop() *qloop         { return w.ql }
func (w recWaiter) took(i int, n uint64) { w.tk.took(i, n) }

// A stripe held by one operation is handed to the others in the order
// they asked, each once it holds every stripe it asked for: the next
// operation on a key is sent only after the one before it was decided, so
// every node sees this proxy's operations on the key in one order.
func TestStripesHandOverInOrder(t *testing.T) {
	var keys [256]stripeLock
	var got []string
	w := func(name string) recWaiter {
		return recWaiter{name: name, got: &got, tk: &taken{idx: []int{1, 2}, seqs: make([]uint64, 2)}}
	}
	if !lockStripes(&keys, []int{1}, w("a")) {
		t.Fatal("a free stripe was not taken at once")
	}
	if lockStripes(&keys, []int{1}, w("b")) || lockStripes(&keys, []int{1, 2}, w("c")) {
		t.Fatal("a held stripe was taken")
	}
	if lockStripes(&keys, []int{2}, w("d")) != true {
		t.Fatal("stripe 2 is free until c holds stripe 1")
	}
	keys[1].release() // a done: b's turn
	keys[1].release() // b done: c takes 1, waits for 2 (d holds it)
	if want := []string{"b"}; !slices.Equal(got, want) {
		t.Fatalf("ready = %v; want %v", got, want)
	}
	keys[2].release() // d done: c holds 1 and 2
	if want := []string{"b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("ready = %v; want %v", got, want)
	}
	keys[1].release()
	keys[2].release()
	if keys[1].held || keys[2].held {
		t.Fatal("stripes still held after every holder released them")
	}
}

// TestOvertaken: a late reply of an operation may have been overtaken on
// its node only when another loop took one of its stripes since it took
// it: takes by its own loop go out on its own connections, after it.
func TestOvertaken(t *testing.T) {
	b := &Backend{}
	loopA, loopB := &qloop{}, &qloop{}
	var got []string
	hold := func(ql *qloop, idx ...int) *taken {
		tk := &taken{idx: idx, seqs: make([]uint64, len(idx))}
		if !lockStripes(&b.keys, idx, recWaiter{got: &got, ql: ql, tk: tk}) {
			t.Fatal("a free stripe was not taken")
		}
		for _, i := range idx {
			b.keys[i].release()
		}
		return tk
	}
	first := hold(loopA, 7)
	hold(loopA, 7)
	if b.overtaken(first) {
		t.Fatal("overtaken by an operation on its own loop")
	}
	second := hold(loopA, 7, 9)
	hold(loopB, 9)
	if b.overtaken(first) {
		t.Fatal("overtaken through a stripe it does not hold")
	}
	if !b.overtaken(second) {
		t.Fatal("not overtaken after another loop took its stripe")
	}
	third := hold(loopB, 7)
	if !b.overtaken(first) || b.overtaken(third) {
		t.Fatal("a take by another loop did not count, or counted for the taker itself")
	}
}
