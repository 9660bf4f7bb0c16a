package proxy

import (
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// opsView keeps what the status page shows that no metric holds: the most
// contended keys and the last TRYAGAIN replies. Its memory is bounded
// (topKeys entries, recentTryagain replies), and it is written only on
// those outcomes, never on a grant. It is safe for concurrent use.
type opsView struct {
	mu   sync.Mutex
	seed maphash.Seed // set on first use
	// The space-saving summary, the first n entries used: the hashes and
	// counts apart from the keys, so that a refusal reads two cache
	// lines of them, not one per key.
	hashes   [topKeys]uint64
	counts   [topKeys]uint64
	top      [topKeys]contended
	n        int
	tryagain [recentTryagain]tryagainReply // a ring; next is the oldest once full
	next     int
	full     bool
}

const (
	// topKeys is how many keys the space-saving summary keeps.
	topKeys = 16
	// recentTryagain is how many TRYAGAIN replies are kept.
	recentTryagain = 20
	// maxKeyShown bounds a key as kept (and shown): longer ones are cut
	// (it fits contended.klen).
	maxKeyShown = 200
	// maxTryagainShown bounds a kept TRYAGAIN text.
	maxTryagainShown = 300
)

// contended is one key of the space-saving summary (Metwally et al.):
// Count overestimates the key's refusals by at most Err, the count of the
// key it replaced. The key is kept in place, so replacing one allocates
// nothing.
type contended struct {
	DB    int
	Count uint64
	Err   uint64
	key   [maxKeyShown]byte
	klen  uint8
}

// Key is the key, cut at maxKeyShown bytes.
func (c *contended) Key() string { return string(c.key[:c.klen]) }

func (c *contended) is(db int, key []byte) bool {
	return c.DB == db && string(c.key[:c.klen]) == string(key)
}

// put makes entry i key of db, counted count with error err.
func (o *opsView) put(i int, h uint64, db int, key []byte, count, err uint64) {
	o.hashes[i], o.counts[i] = h, count
	c := &o.top[i]
	c.DB, c.Err = db, err
	c.klen = uint8(copy(c.key[:], key))
}

// tryagainReply is one TRYAGAIN reply.
type tryagainReply struct {
	At      time.Time
	Command string
	Message string
}

// contended counts a refused acquire of key in db (SET … NX or SETNX
// answered nil or 0).
func (o *opsView) contended(db int, key []byte) {
	if len(key) > maxKeyShown {
		key = key[:maxKeyShown]
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seed == (maphash.Seed{}) {
		o.seed = maphash.MakeSeed()
	}
	h := maphash.Bytes(o.seed, key)
	low := 0
	for i := range o.n {
		if o.hashes[i] == h && o.top[i].is(db, key) {
			o.counts[i]++
			return
		}
		if o.counts[i] < o.counts[low] {
			low = i
		}
	}
	if o.n < topKeys {
		o.put(o.n, h, db, key, 1, 0)
		o.n++
		return
	}
	o.put(low, h, db, key, o.counts[low]+1, o.counts[low])
}

// topContended returns the summary's keys, most refused first.
func (o *opsView) topContended() []contended {
	o.mu.Lock()
	out := append([]contended(nil), o.top[:o.n]...)
	for i := range out {
		out[i].Count = o.counts[i]
	}
	o.mu.Unlock()
	for i := 1; i < len(out); i++ { // at most topKeys: insertion sort
		for j := i; j > 0 && out[j].Count > out[j-1].Count; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// sawTryagain records a TRYAGAIN reply msg to the command cmd.
func (o *opsView) sawTryagain(cmd string, msg []byte) {
	if len(msg) > maxTryagainShown {
		msg = msg[:maxTryagainShown]
	}
	r := tryagainReply{At: time.Now(), Command: cmd, Message: string(msg)}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tryagain[o.next] = r
	o.next = (o.next + 1) % recentTryagain
	o.full = o.full || o.next == 0
}

// recentTryagains returns the TRYAGAIN replies kept, newest first.
func (o *opsView) recentTryagains() []tryagainReply {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.next
	if o.full {
		n = recentTryagain
	}
	out := make([]tryagainReply, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, o.tryagain[(o.next-i+recentTryagain)%recentTryagain])
	}
	return out
}

// isTryagain reports whether an error reply's text is a TRYAGAIN.
func isTryagain(msg []byte) bool { return strings.HasPrefix(string(msg), "TRYAGAIN") }
