package quorum

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
)

// Pub/sub between the lockproxy instances in front of the same nodes
// (docs/pubsub.md). PUBLISH through one instance goes to its own
// subscribers through the proxy and, wrapped with the instance's name and
// a sequence number, to busChannel on every node; it succeeds once Q nodes
// took it. Every instance keeps one subscription to busChannel on each
// node and hands each message it has not seen yet to its subscribers:
// each one arrives up to N times, once per node, and is delivered once.
// Two majorities meet on a node, so with a majority of nodes up every
// instance subscribed to them hears every message.
// A script's messages take the same way once its vote has decided it
// (scriptpub.go).

// busChannel is the nodes' channel the instances talk on.
const busChannel = "lockproxy:pubsub"

// busHeader is a message's prefix: the instance's name (8 bytes), its
// sequence number, the channel's length (8 bytes each); then the channel
// and the message.
const busHeader = 24

// bus is the Backend's part in pub/sub.
type bus struct {
	self [8]byte
	seq  atomic.Uint64
	once sync.Once
	hub  backend.Hub
	subs []*redis.PubSub
	cls  []*redis.Client

	mu   sync.Mutex
	seen map[[16]byte]struct{} // instance and sequence of the messages delivered lately
	ring [][16]byte            // the same, oldest first, to forget them
}

const busSeen = 1 << 16 // messages remembered: far more than N copies can straddle

var (
	_ backend.Publisher = (*Backend)(nil)
	_ backend.Bus       = (*Backend)(nil)
)

// SetHub implements backend.Publisher: messages from the other instances
// are delivered to h from now on, and so are the messages of scripts
// that publish.
func (b *Backend) SetHub(h backend.Hub) {
	b.bus.once.Do(func() {
		rand.Read(b.bus.self[:])
		b.bus.hub = h
		b.bus.seen = make(map[[16]byte]struct{})
		for _, n := range b.nodes {
			opt := *n.opt
			opt.ReadTimeout = -1 // a subscription waits for messages
			opt.PoolSize = 1
			c := redis.NewClient(&opt)
			ps := c.Subscribe(context.Background(), busChannel)
			b.bus.subs, b.bus.cls = append(b.bus.subs, ps), append(b.bus.cls, c)
			go b.bus.listen(ps)
		}
	})
}

// Publish implements backend.Bus.
func (b *Backend) Publish(ctx context.Context, channel, msg []byte) error {
	r := b.busRequest(channel, msg)
	replies := b.fanout(ctx, 0, "", same(r), nil)
	took := 0
	for _, nr := range replies {
		if v, ok := one(nr); ok && v.Kind == backend.KindInt {
			took++
		}
	}
	if took < b.q {
		return b.errNoQuorum(replies)
	}
	return nil
}

// busRequest is the PUBLISH on busChannel that carries a message to the
// other instances.
func (b *Backend) busRequest(channel, msg []byte) *req {
	payload := make([]byte, busHeader, busHeader+len(channel)+len(msg))
	copy(payload, b.bus.self[:])
	binary.BigEndian.PutUint64(payload[8:], b.bus.seq.Add(1))
	binary.BigEndian.PutUint64(payload[16:], uint64(len(channel)))
	payload = append(append(payload, channel...), msg...)
	r := &req{}
	r.cmds.Cmd(3)
	r.cmds.Arg("publish")
	r.cmds.Arg(busChannel)
	r.cmds.ArgBytes(payload)
	return r
}

// listen delivers the messages of one node's subscription until it is
// closed. go-redis reconnects it meanwhile and subscribes again; from then
// on the subscribers get the last messages of their channels again
// (Hub.Rewake): what the node carried meanwhile was not heard here, and
// the other nodes' copies may have been lost too.
func (s *bus) listen(ps *redis.PubSub) {
	subscribed := 0
	for e := range ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)) {
		m, ok := e.(*redis.Message)
		if !ok {
			if sub, ok := e.(*redis.Subscription); ok && sub.Kind == "subscribe" {
				if subscribed++; subscribed > 1 {
					s.hub.Rewake()
				}
			}
			continue
		}
		p := []byte(m.Payload)
		if len(p) < busHeader {
			continue
		}
		var id [16]byte
		copy(id[:], p[:16])
		if [8]byte(id[:8]) == s.self {
			continue // its own: its subscribers had it from the proxy
		}
		n := binary.BigEndian.Uint64(p[16:])
		if n > uint64(len(p)-busHeader) || !s.first(id) {
			continue
		}
		s.hub.Deliver(p[busHeader:busHeader+n], p[busHeader+n:])
	}
}

// first reports whether the message id is seen for the first time.
func (s *bus) first(id [16]byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[id]; ok {
		return false
	}
	s.seen[id] = struct{}{}
	s.ring = append(s.ring, id)
	if len(s.ring) > busSeen {
		delete(s.seen, s.ring[0])
		s.ring = s.ring[1:]
	}
	return true
}

// close ends the subscriptions (Close).
func (s *bus) close() {
	for i, ps := range s.subs {
		ps.Close()
		s.cls[i].Close()
	}
}
