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

// A read of a key (GET, EXISTS, PTTL, a typed read) holds its stripe too,
// shared with the other reads and never with a write: a write that is
// undone (an acquire that lost, a script whose reply a node did not give)
// is visible on the nodes that ran it until its undo has run, and a
// majority read whose replies met it on some nodes and its late run on a
// paused one would report a key that no majority ever held, and that is
// gone a moment later. TestModelFaults found it: EXISTS answered 1 for an
// acquire that answered TRYAGAIN and was undone, then the key was free.
// A read sent once the write is decided and undone meets the undone
// nodes as they were before, and the late node alone is not a majority.

// stripeLock is one stripe of the keys: held by one writer, by readers, or
// free, and the operations waiting for it, first come first served (a
// read that comes while a write waits waits behind it).
type stripeLock struct {
	mu      sync.Mutex
	writer  bool
	readers int
	waiters []stripeWait
}

// stripeWaiter is told once it holds every stripe it asked for.
type stripeWaiter interface{ stripeReady() }

// stripeWait is a waiter for one stripe, and the stripes it takes next.
type stripeWait struct {
	keys *[256]stripeLock
	rest []int
	w    stripeWaiter
	read bool
}

// take holds the stripe now and reports true, or queues w (which goes on
// to take rest once it is handed the stripe) and reports false.
func (s *stripeLock) take(keys *[256]stripeLock, rest []int, w stripeWaiter, read bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.writer && len(s.waiters) == 0 && (read || s.readers == 0) {
		if read {
			s.readers++
		} else {
			s.writer = true
		}
		return true
	}
	s.waiters = append(s.waiters, stripeWait{keys: keys, rest: rest, w: w, read: read})
	return false
}

// held reports whether anyone holds the stripe.
func (s *stripeLock) held() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writer || s.readers > 0
}

// release lets a holder's hold go (a reader's or the writer's) and hands
// the stripe to the waiters first in line it can take now: one writer,
// or every reader up to the next writer.
func (s *stripeLock) release(read bool) {
	var buf [4]stripeWait
	next := buf[:0]
	s.mu.Lock()
	if read {
		s.readers--
	} else {
		s.writer = false
	}
	for len(s.waiters) > 0 && !s.writer {
		h := s.waiters[0]
		if !h.read && s.readers > 0 {
			break
		}
		s.waiters[0] = stripeWait{}
		s.waiters = s.waiters[1:]
		if h.read {
			s.readers++
		} else {
			s.writer = true
		}
		next = append(next, h)
	}
	if len(s.waiters) == 0 {
		s.waiters = nil
	}
	s.mu.Unlock()
	for _, n := range next {
		if lockStripes(n.keys, n.rest, n.w, n.read) {
			n.w.stripeReady()
		}
	}
}

// lockStripes takes the stripes idx (ascending) of keys, shared when read.
// It reports true when it holds them all now; otherwise w is told
// (stripeReady, from the release that hands over the last one it waited
// for).
func lockStripes(keys *[256]stripeLock, idx []int, w stripeWaiter, read bool) bool {
	for k, i := range idx {
		if !keys[i].take(keys, idx[k+1:], w, read) {
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
func (b *Backend) lockKeys(keys ...string) func() { return b.holdKeys(false, keys) }

// rlockKeys is lockKeys for a read: shared with the other reads.
func (b *Backend) rlockKeys(keys ...string) func() { return b.holdKeys(true, keys) }

func (b *Backend) holdKeys(read bool, keys []string) func() {
	idx := stripes(nil, keys)
	if len(idx) == 0 {
		return func() {} // a keyless command (typed.go's reads include them): nothing to wait for
	}
	if w := make(chanWaiter); !lockStripes(&b.keys, idx, w, read) {
		<-w
	}
	return func() { b.unlockStripes(idx, read) }
}

func (b *Backend) unlockStripes(idx []int, read bool) {
	for _, i := range idx {
		b.keys[i].release(read)
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
