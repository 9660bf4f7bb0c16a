package proxy

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// Pub/sub, as Redis serves it (docs/pubsub.md): SUBSCRIBE, UNSUBSCRIBE,
// PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH (and redis.call('publish') in the
// memory backend's scripts), PUBSUB CHANNELS|NUMSUB|NUMPAT, with Redis's
// frames in RESP2 and RESP3 and its subscribed-mode rules.
//
// The broker keeps this instance's subscribers. A message goes into each
// receiving connection's outbox, encoded for its protocol, and the front
// end writes the outbox after the replies it has ready (loops: the next
// pass of the connection's loop, woken; goroutines: the batch's write, or
// at once while the connection waits for input): a subscriber never sees
// a message before the reply to the SUBSCRIBE that asked for it. An
// outbox past Redis's pubsub output limits (32 MiB at once, or 8 MiB for
// 60 s: client-output-buffer-limit pubsub's defaults) closes its
// connection, as Redis does.
//
// The broker reaches this instance's subscribers; a backend.Bus carries
// PUBLISH to the other instances sharing the backend, and a
// backend.Publisher delivers their messages, and its scripts', here.

const (
	pushHardLimit = 32 << 20
	pushSoftLimit = 8 << 20
	pushSoftFor   = 60 * time.Second
)

// broker is the instance's subscriptions: channel and pattern to clients.
type broker struct {
	mu       sync.RWMutex
	channels map[string]map[*client]struct{}
	patterns map[string]map[*client]struct{}

	// The last distinct messages published on each channel (here or on
	// another instance), for Rewake: up to rewakeKeep per channel,
	// rewakeChannels channels (then it starts over).
	recentMu sync.Mutex
	recent   map[string][][]byte

	// Set by the Server before serving: internal receives the Bus's
	// internal channels (tracking_remote.go), lost runs on Rewake.
	internal func(channel, msg []byte)
	lost     func()
}

const (
	rewakeKeep     = 16
	rewakeChannels = 4096
)

func newBroker() *broker {
	return &broker{channels: map[string]map[*client]struct{}{}, patterns: map[string]map[*client]struct{}{}, recent: map[string][][]byte{}}
}

// remember keeps msg among channel's last messages (Rewake).
func (br *broker) remember(channel, msg []byte) {
	br.recentMu.Lock()
	defer br.recentMu.Unlock()
	ms := br.recent[string(channel)]
	for i, m := range ms {
		if bytes.Equal(m, msg) {
			ms = append(ms[:i], ms[i+1:]...) // it moves to the end
			break
		}
	}
	if len(ms) == rewakeKeep {
		ms = ms[1:]
	}
	if ms == nil && len(br.recent) >= rewakeChannels {
		clear(br.recent)
	}
	br.recent[string(channel)] = append(ms, bytes.Clone(msg))
}

// Rewake implements backend.Hub: each channel's last messages go again to
// whoever now subscribes to it (or to a pattern matching it), oldest
// first; a channel nobody hears any more is forgotten. A waiter woken for
// nothing looks at its lock and waits again: each library of
// docs/pubsub.md does.
func (br *broker) Rewake() {
	if br.lost != nil {
		br.lost()
	}
	br.recentMu.Lock()
	recent := maps.Clone(br.recent)
	br.recentMu.Unlock()
	for channel, ms := range recent {
		if br.Receivers([]byte(channel)) == 0 {
			br.recentMu.Lock()
			delete(br.recent, channel)
			br.recentMu.Unlock()
			continue
		}
		for _, m := range ms {
			br.deliver([]byte(channel), m)
		}
	}
}

// subs is one client's subscriptions; they belong to whoever runs its
// commands.
type subs struct {
	channels map[string]struct{}
	patterns map[string]struct{}
}

func (s *subs) count() int { return len(s.channels) + len(s.patterns) }

// outbox holds messages for a connection until its front end writes them.
type outbox struct {
	pending atomic.Bool // something waits: the front end takes it soon
	resp3   atomic.Bool // the connection's protocol, for publishers to read
	// invalidateSub: subscribed to __redis__:invalidate, where clients
	// that redirect their invalidations to it send them (tracking.go).
	invalidateSub atomic.Bool
	mu            sync.Mutex
	buf           []byte
	over          bool      // past the limits: the connection is to be closed
	softAt        time.Time // when the output went past the soft limit; zero: below it
	notify        func()    // the front end's nudge: look at the outbox soon
	overFn        func()    // the front end's: the limits are broken, close now
}

// put appends a frame and nudges the front end, once until it takes.
func (o *outbox) put(frame []byte) {
	o.mu.Lock()
	var overFn func()
	if !o.over {
		o.buf = append(o.buf, frame...)
		if o.over = o.past(len(o.buf)); o.over {
			overFn = o.overFn
			o.buf = nil // nobody will read it
		}
	}
	notify := o.notify
	o.mu.Unlock()
	if overFn != nil {
		overFn()
	}
	if !o.pending.Swap(true) && notify != nil {
		notify()
	}
}

// past reports whether n bytes of output waiting for the client break the
// limits, and keeps the soft limit's clock. Under o.mu.
func (o *outbox) past(n int) bool {
	switch {
	case n > pushHardLimit:
		return true
	case n <= pushSoftLimit:
		o.softAt = time.Time{}
	case o.softAt.IsZero():
		o.softAt = time.Now()
	case time.Since(o.softAt) > pushSoftFor:
		return true
	}
	return false
}

// take appends what waits to b and empties the outbox; over reports that
// the connection broke the limits, counting unsent the bytes the front
// end still holds besides (held) and those taken now.
func (o *outbox) take(b []byte, held int) (_ []byte, over bool) {
	o.pending.Store(false)
	o.mu.Lock()
	defer o.mu.Unlock()
	b = append(b, o.buf...)
	o.buf = o.buf[:0]
	if cap(o.buf) > 64<<10 {
		o.buf = nil
	}
	o.over = o.over || o.past(held+len(b))
	return b, o.over
}

// setNotify sets the front end's nudge.
func (o *outbox) setNotify(f func()) {
	o.mu.Lock()
	o.notify = f
	o.mu.Unlock()
}

// frame encodes a pub/sub frame: a push in RESP3, an array in RESP2, of
// bulk strings (nil: a null) and a final integer when withCount.
func frame(b []byte, resp3 bool, kind string, parts [][]byte, count int, withCount bool) []byte {
	n := 1 + len(parts)
	if withCount {
		n++
	}
	if resp3 {
		b = append(b, '>')
	} else {
		b = append(b, '*')
	}
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, "\r\n"...)
	b = appendBulk(b, []byte(kind))
	for _, p := range parts {
		switch {
		case p == nil && resp3:
			b = append(b, "_\r\n"...)
		case p == nil:
			b = append(b, "$-1\r\n"...)
		default:
			b = appendBulk(b, p)
		}
	}
	if withCount {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(count), 10)
		b = append(b, "\r\n"...)
	}
	return b
}

func appendBulk(b, s []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, "\r\n"...)
	b = append(b, s...)
	return append(b, "\r\n"...)
}

// deliver hands a message to this instance's subscribers of channel and
// of the patterns that match it, and returns how many received it (a
// client subscribed by channel and by two patterns counts three times).
func (br *broker) deliver(channel, msg []byte) int64 {
	br.mu.RLock()
	defer br.mu.RUnlock()
	var n int64
	var f2, f3 []byte // encoded once per protocol
	for cl := range br.channels[string(channel)] {
		if cl.out.resp3.Load() {
			if f3 == nil {
				f3 = frame(nil, true, "message", [][]byte{channel, msg}, 0, false)
			}
			cl.out.put(f3)
		} else {
			if f2 == nil {
				f2 = frame(nil, false, "message", [][]byte{channel, msg}, 0, false)
			}
			cl.out.put(f2)
		}
		n++
	}
	for p, cls := range br.patterns {
		if !model.Match([]byte(p), channel) {
			continue
		}
		var p2, p3 []byte
		for cl := range cls {
			if cl.out.resp3.Load() {
				if p3 == nil {
					p3 = frame(nil, true, "pmessage", [][]byte{[]byte(p), channel, msg}, 0, false)
				}
				cl.out.put(p3)
			} else {
				if p2 == nil {
					p2 = frame(nil, false, "pmessage", [][]byte{[]byte(p), channel, msg}, 0, false)
				}
				cl.out.put(p2)
			}
			n++
		}
	}
	return n
}

var _ backend.Hub = (*broker)(nil)

// Deliver implements backend.Hub. A message on an internal channel of the
// instances (tracking_remote.go) is theirs, not the subscribers'.
func (br *broker) Deliver(channel, msg []byte) int64 {
	if bytes.HasPrefix(channel, []byte(internalPrefix)) {
		if br.internal != nil {
			br.internal(channel, msg)
		}
		return 0
	}
	return br.publish(channel, msg)
}

// publish delivers a message published through this instance or another
// and remembers it (Rewake), heard or not: a waiter that subscribes after
// it, and whose own wake-up is then lost, gets it again.
func (br *broker) publish(channel, msg []byte) int64 {
	n := br.deliver(channel, msg)
	br.remember(channel, msg)
	return n
}

// Receivers implements backend.Hub: who a message on channel would reach
// now.
func (br *broker) Receivers(channel []byte) int64 {
	br.mu.RLock()
	defer br.mu.RUnlock()
	n := int64(len(br.channels[string(channel)]))
	for p, cls := range br.patterns {
		if model.Match([]byte(p), channel) {
			n += int64(len(cls))
		}
	}
	return n
}

// subscribers returns the clients with a subscription (CLIENT LIST TYPE).
func (br *broker) subscribers() map[*client]bool {
	br.mu.RLock()
	defer br.mu.RUnlock()
	out := map[*client]bool{}
	for _, m := range []map[string]map[*client]struct{}{br.channels, br.patterns} {
		for _, set := range m {
			for c := range set {
				out[c] = true
			}
		}
	}
	return out
}

// add and remove keep the broker's index of one client's subscription.
func (br *broker) add(m map[string]map[*client]struct{}, name string, cl *client) {
	br.mu.Lock()
	defer br.mu.Unlock()
	set := m[name]
	if set == nil {
		set = map[*client]struct{}{}
		m[name] = set
	}
	set[cl] = struct{}{}
}

func (br *broker) remove(m map[string]map[*client]struct{}, name string, cl *client) {
	br.mu.Lock()
	defer br.mu.Unlock()
	delete(m[name], cl)
	if len(m[name]) == 0 {
		delete(m, name)
	}
}

// subscribe is SUBSCRIBE (pattern false) and PSUBSCRIBE: one reply frame
// per name, with the client's count after it.
func (cl *client) subscribe(names [][]byte, pattern bool) backend.Value {
	kind, own, index := "subscribe", &cl.subs.channels, cl.s.broker.channels
	if pattern {
		kind, own, index = "psubscribe", &cl.subs.patterns, cl.s.broker.patterns
	}
	if *own == nil {
		*own = map[string]struct{}{}
	}
	cl.startPushes()
	var b []byte
	for _, name := range names {
		if _, ok := (*own)[string(name)]; !ok {
			(*own)[string(name)] = struct{}{}
			cl.s.broker.add(index, string(name), cl)
		}
		if !pattern && string(name) == invalidateChannel {
			cl.out.invalidateSub.Store(true)
		}
		b = frame(b, cl.resp3, kind, [][]byte{name}, cl.subs.count(), true)
	}
	cl.raw = b
	return backend.Value{}
}

// unsubscribe is UNSUBSCRIBE (pattern false) and PUNSUBSCRIBE: the names
// given, or every one the client has (in no particular order, as Redis);
// with nothing to leave, one frame with a null name.
func (cl *client) unsubscribe(names [][]byte, pattern bool) backend.Value {
	kind, own, index := "unsubscribe", &cl.subs.channels, cl.s.broker.channels
	if pattern {
		kind, own, index = "punsubscribe", &cl.subs.patterns, cl.s.broker.patterns
	}
	if len(names) == 0 {
		for name := range *own {
			names = append(names, []byte(name))
		}
		slices.SortFunc(names, func(a, b []byte) int { return slices.Compare(a, b) })
	}
	var b []byte
	for _, name := range names {
		if _, ok := (*own)[string(name)]; ok {
			delete(*own, string(name))
			cl.s.broker.remove(index, string(name), cl)
		}
		if !pattern && string(name) == invalidateChannel {
			cl.out.invalidateSub.Store(false)
		}
		b = frame(b, cl.resp3, kind, [][]byte{name}, cl.subs.count(), true)
	}
	if len(names) == 0 {
		b = frame(b, cl.resp3, kind, [][]byte{nil}, cl.subs.count(), true)
	}
	cl.raw = b
	return backend.Value{}
}

// leaveAll drops every subscription (RESET, and the connection's end).
func (cl *client) leaveAll() {
	for name := range cl.subs.channels {
		cl.s.broker.remove(cl.s.broker.channels, name, cl)
	}
	for name := range cl.subs.patterns {
		cl.s.broker.remove(cl.s.broker.patterns, name, cl)
	}
	cl.subs = subs{}
	cl.out.invalidateSub.Store(false)
}

func cmdSubscribe(cl *client, args [][]byte) backend.Value    { return cl.subscribe(args[1:], false) }
func cmdPSubscribe(cl *client, args [][]byte) backend.Value   { return cl.subscribe(args[1:], true) }
func cmdUnsubscribe(cl *client, args [][]byte) backend.Value  { return cl.unsubscribe(args[1:], false) }
func cmdPUnsubscribe(cl *client, args [][]byte) backend.Value { return cl.unsubscribe(args[1:], true) }

// cmdPublish delivers to this instance's subscribers and, through a
// backend.Bus, to the other instances' (first: a failure there is the
// reply, and nobody got the message).
func cmdPublish(cl *client, args [][]byte) backend.Value {
	if bus, ok := cl.s.b.(backend.Bus); ok {
		ctx, cancel := cl.commandCtx()
		defer cancel()
		if err := bus.Publish(ctx, args[1], args[2]); err != nil {
			return cl.errorValue("publish", err)
		}
	}
	return backend.Int(cl.s.broker.publish(args[1], args[2]))
}

// cmdPubsub is PUBSUB CHANNELS [pattern], NUMSUB [channel …], NUMPAT.
func cmdPubsub(cl *client, args [][]byte) backend.Value {
	br := cl.s.broker
	sub := lower(args[1])
	switch {
	case sub == "channels" && len(args) <= 3:
		br.mu.RLock()
		var out []backend.Value
		for name := range br.channels {
			if len(args) == 2 || model.Match(args[2], []byte(name)) {
				out = append(out, backend.BulkString(name))
			}
		}
		br.mu.RUnlock()
		return backend.Array(out...)
	case sub == "numsub":
		br.mu.RLock()
		out := make([]backend.Value, 0, 2*(len(args)-2))
		for _, name := range args[2:] {
			out = append(out, backend.Bulk(name), backend.Int(int64(len(br.channels[string(name)]))))
		}
		br.mu.RUnlock()
		return backend.Array(out...)
	case sub == "numpat" && len(args) == 2:
		br.mu.RLock()
		defer br.mu.RUnlock()
		return backend.Int(int64(len(br.patterns)))
	case sub == "channels":
		return backend.ErrorValue("ERR unknown subcommand or wrong number of arguments for '" + string(args[1]) + "'. Try PUBSUB HELP.")
	case sub == "numpat":
		return backend.ErrorValue(backend.ErrWrongArgs("pubsub|numpat"))
	}
	return backend.ErrorValue("ERR unknown subcommand '" + string(args[1]) + "'. Try PUBSUB HELP.")
}

// subscribedOnly are the commands a RESP2 connection with subscriptions
// may run (Redis's processCommand).
var subscribedOnly = map[string]bool{
	"subscribe": true, "psubscribe": true, "unsubscribe": true, "punsubscribe": true,
	"ping": true, "quit": true, "reset": true,
}

// subscribedRefusal is Redis's error for another command in RESP2
// subscribed mode, or "".
func (cl *client) subscribedRefusal(name string, args [][]byte) string {
	if cl.resp3 || cl.subs.count() == 0 || subscribedOnly[name] {
		return ""
	}
	if containers[name] && len(args) > 1 {
		name += "|" + lower(args[1]) // Redis names a subcommand by its full name
	}
	return "ERR Can't execute '" + name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
}

// containers are the commands with subcommands, named "name|sub".
var containers = map[string]bool{"client": true, "config": true, "script": true, "function": true, "command": true, "pubsub": true, "object": true}

// subscribedPing is PING in RESP2 subscribed mode: ["pong", arg or ""].
func subscribedPing(args [][]byte) backend.Value {
	arg := []byte{}
	if len(args) == 2 {
		arg = args[1]
	}
	return backend.Array(backend.BulkString("pong"), backend.Bulk(arg))
}

// Write implements net.Conn for redcon's replies: a batch's replies, then
// the messages that came meanwhile.
func (c *limitConn) Write(p []byte) (int, error) {
	if c.out == nil {
		return c.Conn.Write(p)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, err := c.Conn.Write(p)
	if err == nil {
		c.writePushes()
	}
	return n, err
}

// writePushes writes the messages waiting; past the limits, the
// connection closes (its goroutine's next read fails). Under c.wmu.
func (c *limitConn) writePushes() {
	if !c.out.pending.Load() {
		return
	}
	b, over := c.out.take(nil, 0)
	if len(b) > 0 {
		c.Conn.Write(b)
	}
	if over {
		c.Conn.Close()
	}
}

// startPushes makes the goroutine front end deliver messages to cl: a
// pusher goroutine writes them while the connection waits for input
// (writes that may block wait there, not in the publisher).
func (cl *client) startPushes() {
	if cl.conn == nil || cl.pushing {
		return
	}
	lc, ok := cl.conn.NetConn().(*limitConn)
	if !ok {
		return
	}
	cl.pushing = true
	lc.out = &cl.out
	nudge := make(chan struct{}, 1)
	cl.out.setNotify(func() {
		select {
		case nudge <- struct{}{}:
		default:
		}
	})
	cl.out.mu.Lock()
	cl.out.overFn = func() { lc.Conn.Close() } // a pusher stuck in a write to a client that does not read
	cl.out.mu.Unlock()
	go func() {
		for {
			select {
			case <-nudge:
			case <-cl.ctx.Done():
				return
			}
			lc.wmu.Lock()
			if !lc.busy {
				lc.writePushes()
			}
			lc.wmu.Unlock()
		}
	}()
}

// subscribing reports whether name is SUBSCRIBE or PSUBSCRIBE.
func subscribing(name []byte) bool {
	return len(name) >= 9 && (lower(name) == "subscribe" || lower(name) == "psubscribe")
}
