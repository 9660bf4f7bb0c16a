package quorum

import (
	"slices"
	"sync"
)

// This proxy's operations on one key reach the nodes that answer them in
// one order: each lock operation holds its keys' stripes from the moment
// it is sent until it is decided (and until the undos it sends have run),
// and the next operation on those keys is sent only then. Concurrent
// acquires, releases and scripts of one key therefore cannot split the
// vote by reaching two nodes in different orders: with one node of three
// down, the two left always agree. (Several proxy instances in front of the same nodes do not
// share this order; their split votes end in nil or TRYAGAIN and the
// clients retry, as with client-side Redlock.)
//
// A stripe is held by a blocking caller (which waits for it) or
// by an operation on an event loop, which never waits: it queues its start,
// which runs on its own loop once the stripe is handed to it, in the order
// the operations asked. Stripes are taken in ascending order, so two
// multi-key operations cannot deadlock.

// stripeLock is one stripe of the keys: held or free, and the operations
// waiting for it, first come first served.
type stripeLock struct {
	mu      sync.Mutex
	held    bool
	waiters []stripeWait
}

// stripeWaiter is told once it holds every stripe it asked for.
type stripeWaiter interface{ stripeReady() }

// stripeWait is a waiter for one stripe, and the stripes it takes next.
type stripeWait struct {
	keys *[256]stripeLock
	rest []int
	w    stripeWaiter
}

// take holds the stripe now and reports true, or queues w (which goes on
// to take rest once it is handed the stripe) and reports false.
func (s *stripeLock) take(keys *[256]stripeLock, rest []int, w stripeWaiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.held {
		s.held = true
		return true
	}
	s.waiters = append(s.waiters, stripeWait{keys: keys, rest: rest, w: w})
	return false
}

// release hands the stripe to the first waiter, or frees it.
func (s *stripeLock) release() {
	s.mu.Lock()
	if len(s.waiters) == 0 {
		s.held = false
		s.mu.Unlock()
		return
	}
	next := s.waiters[0]
	s.waiters[0] = stripeWait{}
	s.waiters = s.waiters[1:]
	if len(s.waiters) == 0 {
		s.waiters = nil
	}
	s.mu.Unlock()
	if lockStripes(next.keys, next.rest, next.w) {
		next.w.stripeReady()
	}
}

// lockStripes takes the stripes idx (ascending) of keys. It reports true
// when it holds them all now; otherwise w is told (stripeReady, from the
// release that hands over the last one it waited for).
func lockStripes(keys *[256]stripeLock, idx []int, w stripeWaiter) bool {
	for k, i := range idx {
		if !keys[i].take(keys, idx[k+1:], w) {
			return false
		}
	}
	return true
}

// chanWaiter is a blocking caller's stripeWaiter.
type chanWaiter chan struct{}

func (c chanWaiter) stripeReady() { close(c) }

// lockKeys waits for the keys' stripes (a blocking caller) and returns what
// releases them.
func (b *Backend) lockKeys(keys ...string) func() {
	idx := stripes(nil, keys)
	if w := make(chanWaiter); !lockStripes(&b.keys, idx, w) {
		<-w
	}
	return func() { b.unlockStripes(idx) }
}

func (b *Backend) unlockStripes(idx []int) {
	for _, i := range idx {
		b.keys[i].release()
	}
}

// stripes appends the keys' stripe indices to idx, each once, in
// ascending order.
func stripes(idx []int, keys []string) []int {
	for _, k := range keys {
		i := int(stripe(k))
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return idx
}

func stripe(key string) uint8 {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return uint8(h)
}
