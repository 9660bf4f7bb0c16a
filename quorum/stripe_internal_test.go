package quorum

import (
	"slices"
	"testing"
)

type recWaiter struct {
	name string
	got  *[]string
}

func (w recWaiter) stripeReady() { *w.got = append(*w.got, w.name) }

// A stripe held by one operation is handed to the others in the order
// they asked, each once it holds every stripe it asked for: the next
// operation on a key is sent only after the one before it was decided, so
// every node sees this proxy's operations on the key in one order.
func TestStripesHandOverInOrder(t *testing.T) {
	var keys [256]stripeLock
	var got []string
	w := func(name string) recWaiter { return recWaiter{name, &got} }
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
