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

//
// An operation is decided once a majority agreed, and lets its stripes go
// then; a node that had not answered yet runs it later. The next
// operation on the key, sent on the same connection, runs after it on
// that node too; sent on another one (another loop's), it may run first.
// So each stripe counts its takes and remembers the last take by another
// loop than the one before (switched): a late reply of an operation whose
// stripe was switched since may have been overtaken (overtaken, lateWrote).

// stripeLock is one stripe of the keys: held or free, the operations
// waiting for it, first come first served, and its takes.
type stripeLock struct {
	mu       sync.Mutex
	held     bool
	waiters  []stripeWait
	takes    uint64 // times taken
	by       *qloop // the loop of the last taker
	switched uint64 // takes at the last take from another loop than the one before
}

// stripeWaiter is told once it holds every stripe it asked for.
type stripeWaiter interface {
	stripeReady()
	// loop is the loop the holder's operation runs on.
	loop() *qloop
	// took records that the holder took stripe i as its seq'th take.
	took(i int, seq uint64)
}

// stripeWait is a waiter for stripe i, and the stripes it takes next.
type stripeWait struct {
	keys *[256]stripeLock
	i    int
	rest []int
	w    stripeWaiter
}

// take holds stripe i now and reports true, or queues w (which goes on to
// take rest once it is handed the stripe) and reports false.
func (s *stripeLock) take(keys *[256]stripeLock, i int, rest []int, w stripeWaiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.held {
		s.held = true
		s.takenBy(i, w)
		return true
	}
	s.waiters = append(s.waiters, stripeWait{keys: keys, i: i, rest: rest, w: w})
	return false
}

// takenBy counts a take of stripe i by w. Under s.mu.
func (s *stripeLock) takenBy(i int, w stripeWaiter) {
	s.takes++
	if l := w.loop(); l != s.by || l == nil {
		s.by, s.switched = l, s.takes
	}
	w.took(i, s.takes)
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
	s.takenBy(next.i, next.w)
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
		if !keys[i].take(keys, i, idx[k+1:], w) {
			return false
		}
	}
	return true
}

// taken is what a holder took: its stripes (ascending) and the take count
// of each when it took it.
type taken struct {
	idx  []int
	seqs []uint64
}

func (t *taken) took(i int, seq uint64) {
	for k, j := range t.idx {
		if j == i {
			t.seqs[k] = seq
		}
	}
}

// overtaken reports whether another loop took one of t's stripes since t
// took it: an operation it sent then may have reached a node before t's.
func (b *Backend) overtaken(t *taken) bool {
	for k, i := range t.idx {
		s := &b.keys[i]
		s.mu.Lock()
		sw := s.switched
		s.mu.Unlock()
		if sw > t.seqs[k] {
			return true
		}
	}
	return false
}

// chanWaiter is a blocking caller's stripeWaiter: its operations run on
// ql (ownLoop of its first key).
type chanWaiter struct {
	taken
	ql    *qloop
	ready chan struct{}
}

func (c *chanWaiter) stripeReady() { close(c.ready) }
func (c *chanWaiter) loop() *qloop { return c.ql }

// lockKeys waits for the keys' stripes (a blocking caller) and returns what
// releases them.
func (b *Backend) lockKeys(keys ...string) func() {
	release, _ := b.lockKeysTaken(keys...)
	return release
}

// lockKeysTaken is lockKeys that also says what was taken (for overtaken).
func (b *Backend) lockKeysTaken(keys ...string) (func(), *taken) {
	idx := stripes(nil, keys)
	w := &chanWaiter{taken: taken{idx: idx, seqs: make([]uint64, len(idx))}, ready: make(chan struct{})}
	if len(keys) > 0 && len(b.lp.own) > 0 {
		w.ql = b.ownLoop(keys[0])
	}
	if !lockStripes(&b.keys, idx, w) {
		<-w.ready
	}
	return func() { b.unlockStripes(idx) }, &w.taken
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
