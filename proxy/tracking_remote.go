package proxy

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// Invalidations across instances (docs/pubsub.md). A client tracking a
// key on one instance must hear of a write of it through another sharing
// the backend: rueidislock's waiter sleeps until its lock key is
// invalidated. Writes are many and trackers few, so an instance sends the
// keys it writes over the backend's Bus only while another instance has
// said, within the last announceFor, that it has clients tracking keys or
// blocked on them; such an instance says so every announceEvery (and at
// once when its first one comes). The keys go in batches from one
// goroutine, after the writes' replies, so a write never waits for them;
// a full queue sends "everything changed" instead of dropping any. What
// arrives invalidates the keys for this instance's trackers and wakes its
// clients blocked on them, as a write here would. A lost link (Rewake)
// invalidates everything tracked here: what was lost cannot be known.

// Internal channels of the Bus: never delivered to subscribers.
const (
	internalPrefix     = "__lockproxy__:"
	announceChannel    = internalPrefix + "tracking"
	invalidateInternal = internalPrefix + "invalidate"
)

const (
	announceEvery = time.Second
	announceFor   = 3 * time.Second
	remoteQueue   = 4096
	remoteBatch   = 4000 // bytes of keys per message (a NOTIFY carries ~8 kB)
)

// remote is the instance's part in invalidations across instances.
type remote struct {
	s      *Server
	bus    backend.Bus  // nil: the backend has one instance
	seenAt atomic.Int64 // when another instance last announced trackers (UnixNano)
	queue  chan remoteWrite
	full   atomic.Bool // the queue overflowed: send "everything" next
	first  chan struct{}
	stop   chan struct{}
	once   sync.Once
}

// remoteWrite is one write's keys in one database (nil keys: a flush).
type remoteWrite struct {
	db   int
	keys [][]byte
}

func newRemote(s *Server, b backend.Backend) *remote {
	r := &remote{s: s, stop: make(chan struct{})}
	if bus, ok := b.(backend.Bus); ok {
		r.bus, r.queue, r.first = bus, make(chan remoteWrite, remoteQueue), make(chan struct{}, 1)
		go r.send()
		go r.announce()
	}
	return r
}

// wanted reports whether another instance tracks or blocks now.
func (r *remote) wanted() bool {
	at := r.seenAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < announceFor
}

// wrote queues a write's keys (copied) for the other instances.
func (r *remote) wrote(db int, keys [][]byte) {
	w := remoteWrite{db: db}
	if keys != nil {
		w.keys = make([][]byte, len(keys))
		for i, k := range keys {
			w.keys[i] = append([]byte(nil), k...)
		}
	}
	select {
	case r.queue <- w:
	default:
		r.full.Store(true)
	}
}

// tracks tells the announcer that this instance's first tracker or
// blocked client came.
func (r *remote) tracks() {
	if r.first != nil {
		select {
		case r.first <- struct{}{}:
		default:
		}
	}
}

// send publishes the queued writes in batches.
func (r *remote) send() {
	for {
		var w remoteWrite
		select {
		case w = <-r.queue:
		case <-r.stop:
			return
		}
		msg := encodeWrite(nil, w)
	batch:
		for len(msg) < remoteBatch {
			select {
			case w = <-r.queue:
				msg = encodeWrite(msg, w)
			default:
				break batch
			}
		}
		if r.full.Swap(false) {
			msg = encodeWrite(nil, remoteWrite{}) // every key, every database
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := r.bus.Publish(ctx, []byte(invalidateInternal), msg); err != nil {
			r.s.log.Warn("invalidations to the other instances not sent", "err", err)
		}
		cancel()
	}
}

// announce says every announceEvery that this instance has trackers or
// blocked clients, while it has.
func (r *remote) announce() {
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.first:
		case <-r.stop:
			return
		}
		if r.s.tracker.active.Load() == 0 && r.s.blockers.n.Load() == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r.bus.Publish(ctx, []byte(announceChannel), nil) // a lost one is made up a second later
		cancel()
	}
}

func (r *remote) close() { r.once.Do(func() { close(r.stop) }) }

// receive handles a message of an internal channel from another instance.
func (r *remote) receive(channel, msg []byte) {
	switch string(channel) {
	case announceChannel:
		r.seenAt.Store(time.Now().UnixNano())
	case invalidateInternal:
		for len(msg) > 0 {
			var w remoteWrite
			var ok bool
			if w, msg, ok = decodeWrite(msg); !ok {
				return
			}
			r.s.tracker.invalidate(w.keys, nil)
			if w.keys != nil {
				r.s.blockers.woken(w.db, w.keys, serveAsync) // on a goroutine: this one delivers the Bus's messages
			}
		}
	}
}

// encodeWrite appends w: its database, its key count (0: a flush), each
// key's length and bytes, as uvarints.
func encodeWrite(b []byte, w remoteWrite) []byte {
	b = binary.AppendUvarint(b, uint64(w.db))
	b = binary.AppendUvarint(b, uint64(len(w.keys)))
	for _, k := range w.keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	return b
}

func decodeWrite(b []byte) (w remoteWrite, rest []byte, ok bool) {
	db, n := binary.Uvarint(b)
	if n <= 0 {
		return w, nil, false
	}
	b = b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return w, nil, false
	}
	b = b[n:]
	w.db = int(db)
	if count > 0 {
		w.keys = make([][]byte, 0, count)
	}
	for range count {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return w, nil, false
		}
		w.keys = append(w.keys, b[n:n+int(l)])
		b = b[n+int(l):]
	}
	return w, b, true
}
