package migrate

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
)

// Pub/sub while the fleet moves. A lock's release wakes its waiters by a
// message (simple-redis-mutex, Redisson, node-redisson), and the holder
// and its waiters may be on different sides:
//   - a script's PUBLISH runs on both sides, as the script does: the
//     legacy Redis's subscribers hear its run there, lockproxy's hear the
//     inner backend's (SetHub);
//   - what the legacy Redis's clients publish reaches lockproxy's
//     subscribers through a bridge: one connection per instance
//     subscribed to every channel there (PSUBSCRIBE *), named as the
//     fleet's other connections so that the cutover status leaves it out.
//
// So a message a script publishes through lockproxy reaches lockproxy's
// subscribers twice, once from each side: a second wake-up, which every
// lock library here treats as the spurious one it is (it tries, finds the
// lock held, and waits again); telling the copies apart would risk
// dropping a legacy client's own message of the same text (Redisson's
// unlock message is always "0"), a lost wake-up. After the bridge's
// connection is lost and back, the subscribers are woken again
// (Hub.Rewake): messages may have been lost meanwhile. A client's own
// PUBLISH reaches this instance's subscribers only, not the legacy
// Redis's nor another instance's.
//
// A script runs on the legacy Redis first, so its message there comes
// back through the bridge while the inner backend has yet to run it: a
// release's wake-up would reach a waiter while the lock is still held
// inside, the waiter's try fails, and the inner side's own copy can come
// while it is between that try and its next wait (node-redisson then
// sleeps out the lock's lease: seen in TestNodeClients). So the bridge
// holds each message until every script run of this instance that was
// in flight when the message came has ended (at most bridgeHold): a
// legacy message of this instance's script reaches the waiters once the
// lock is free on both sides.

// The bridge subscribes again after a failure once bridgeBackoff has
// passed, doubling up to bridgeMaxBackoff while it keeps failing; it
// checks its connection with a PING when no message came for bridgeIdle.
const (
	bridgeBackoff    = 100 * time.Millisecond
	bridgeMaxBackoff = 2 * time.Second
	bridgeIdle       = 5 * time.Second
	// bridgeHold bounds how long a message waits for the script runs in
	// flight when it came (a run slower than that: delivered anyway, a
	// spurious wake-up at worst).
	bridgeHold = time.Second
)

// SetHub implements backend.Publisher: the inner backend delivers its
// scripts' messages to this instance's subscribers, and the bridge the
// legacy Redis's, until Close.
func (b *Backend) SetHub(h backend.Hub) {
	if p, ok := b.inner.(backend.Publisher); ok {
		p.SetHub(h)
	}
	b.hubSet.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var cur *redis.PubSub // closed at Close: a blocked read heeds no context
		b.bridge.Go(func() {
			<-b.stop
			cancel()
			mu.Lock()
			if cur != nil {
				cur.Close()
			}
			mu.Unlock()
		})
		b.bridge.Go(func() {
			b.runBridge(ctx, h, func(ps *redis.PubSub) {
				mu.Lock()
				cur = ps
				mu.Unlock()
			})
		})
	})
}

// runBridge subscribes to every channel of the legacy Redis and hands each
// message to h, subscribing again after a failure, until ctx ends.
// Each subscription is handed to track first.
func (b *Backend) runBridge(ctx context.Context, h backend.Hub, track func(*redis.PubSub)) {
	// A client of its own: its reads wait for ReceiveTimeout's deadline,
	// not for the context's (ContextTimeoutEnabled), which go-redis takes
	// for a broken connection once it passes, and reconnects, losing what
	// was published meanwhile.
	o := b.options(0)
	o.ContextTimeoutEnabled, o.PoolSize, o.ReadTimeout = false, 1, bridgeIdle
	c := redis.NewClient(o)
	defer c.Close()
	backoff := time.Duration(0)
	for first := true; ctx.Err() == nil; first = false {
		ps := c.PSubscribe(ctx, "*")
		track(ps)
		if ctx.Err() != nil { // Close came before track
			ps.Close()
			return
		}
		relayed, err := b.relay(ctx, ps, h, first)
		ps.Close()
		if ctx.Err() != nil {
			return
		}
		if relayed || backoff == 0 { // once per outage
			b.cfg.Logger.Warn("migrate: pub/sub bridge to the legacy Redis lost; subscribing again", "err", err)
			backoff = 0
		}
		backoff = min(max(2*backoff, bridgeBackoff), bridgeMaxBackoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// relay hands the messages of ps to h until ps fails; subscribed reports
// whether its subscription was confirmed. Once it is after a lost one
// (first false), the subscribers are woken again.
func (b *Backend) relay(ctx context.Context, ps *redis.PubSub, h backend.Hub, first bool) (subscribed bool, _ error) {
	for {
		m, err := ps.ReceiveTimeout(ctx, bridgeIdle)
		var ne net.Error
		switch {
		case ctx.Err() != nil:
			return subscribed, ctx.Err()
		case errors.As(err, &ne) && ne.Timeout():
			if err := ps.Ping(ctx); err != nil {
				return subscribed, err
			}
			continue
		case err != nil:
			return subscribed, err
		}
		switch m := m.(type) {
		case *redis.Subscription:
			subscribed = true
			if !first {
				h.Rewake()
			}
		case *redis.Message:
			b.evals.wait(ctx, bridgeHold)
			h.Deliver([]byte(m.Channel), []byte(m.Payload))
		}
	}
}

// inflight tracks the script runs in flight (Eval). The zero value is
// ready; it is safe for concurrent use.
type inflight struct {
	mu   sync.Mutex
	runs map[chan struct{}]struct{} // each closed when its run ends
}

// start records a run; the returned func ends it.
func (f *inflight) start() (end func()) {
	done := make(chan struct{})
	f.mu.Lock()
	if f.runs == nil {
		f.runs = map[chan struct{}]struct{}{}
	}
	f.runs[done] = struct{}{}
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		delete(f.runs, done)
		f.mu.Unlock()
		close(done)
	}
}

// wait returns once every run in flight now has ended (runs started later
// are not waited for), after max, or when ctx ends.
func (f *inflight) wait(ctx context.Context, max time.Duration) {
	f.mu.Lock()
	runs := make([]chan struct{}, 0, len(f.runs))
	for done := range f.runs {
		runs = append(runs, done)
	}
	f.mu.Unlock()
	if len(runs) == 0 {
		return
	}
	timer := time.NewTimer(max)
	defer timer.Stop()
	for _, done := range runs {
		select {
		case <-done:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// sandboxHub is the sandbox's (script.go's classify): a script that
// publishes runs there as on the backends, and its messages go nowhere.
type sandboxHub struct{}

func (sandboxHub) Receivers([]byte) int64    { return 0 }
func (sandboxHub) Deliver(_, _ []byte) int64 { return 0 }
func (sandboxHub) Rewake()                   {}
