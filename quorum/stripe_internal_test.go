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
	if !lockStripes(&keys, []int{1}, w("a"), false) {
		t.Fatal("a free stripe was not taken at once")
	}
	if lockStripes(&keys, []int{1}, w("b"), false) || lockStripes(&keys, []int{1, 2}, w("c"), false) {
		t.Fatal("a held stripe was taken")
	}
	if lockStripes(&keys, []int{2}, w("d"), false) != true {
		t.Fatal("stripe 2 is free until c holds stripe 1")
	}
	keys[1].release(false) // a done: b's turn
	keys[1].release(false) // b done: c takes 1, waits for 2 (d holds it)
	if want := []string{"b"}; !slices.Equal(got, want) {
		t.Fatalf("ready = %v; want %v", got, want)
	}
	keys[2].release(false) // d done: c holds 1 and 2
	if want := []string{"b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("ready = %v; want %v", got, want)
	}
	keys[1].release(false)
	keys[2].release(false)
	if keys[1].held() || keys[2].held() {
		t.Fatal("stripes still held after every holder released them")
	}
}

// Reads share a stripe with each other and never with a write: a read
// waits for the write before it, a write for the reads before it, and a
// read that comes while a write waits waits behind that write.
func TestStripesReadersShare(t *testing.T) {
	var keys [256]stripeLock
	var got []string
	w := func(name string) recWaiter { return recWaiter{name, &got} }
	take := func(name string, read bool) bool { return lockStripes(&keys, []int{3}, w(name), read) }
	if !take("r1", true) || !take("r2", true) {
		t.Fatal("two reads of a free stripe did not both take it at once")
	}
	if take("w1", false) {
		t.Fatal("a write took a stripe that reads hold")
	}
	if take("r3", true) {
		t.Fatal("a read went ahead of the write waiting before it")
	}
	if take("w2", false) || take("r4", true) {
		t.Fatal("a held stripe was taken")
	}
	keys[3].release(true)
	if len(got) != 0 {
		t.Fatalf("ready = %v with a read still holding the stripe", got)
	}
	keys[3].release(true) // the last read done: w1's turn
	if want := []string{"w1"}; !slices.Equal(got, want) {
		t.Fatalf("ready = %v; want %v", got, want)
	}
	keys[3].release(false) // w1 done: r3 alone (w2 is next, r4 behind it)
	if want := []string{"w1", "r3"}; !slices.Equal(got, want) {
		t.Fatalf("ready = %v; want %v", got, want)
	}
	keys[3].release(true)
	keys[3].release(false) // w2 done: r4
	if want := []string{"w1", "r3", "w2", "r4"}; !slices.Equal(got, want) {
		t.Fatalf("ready = %v; want %v", got, want)
	}
	keys[3].release(true)
	if keys[3].held() {
		t.Fatal("the stripe is still held after every holder released it")
	}
}
