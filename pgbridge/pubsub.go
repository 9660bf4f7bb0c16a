package pgbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// Pub/sub between the instances sharing a database (docs/pubsub.md). A
// message published through one instance — by PUBLISH, or by a script
// once its changes are committed — goes to that instance's subscribers
// through the proxy, and to every other instance by NOTIFY on one shared
// channel, which each instance LISTENs to on a session of its own and
// hands to its subscribers. A message that would not fit a NOTIFY payload
// (about 8 kB) is an error, not a silent local delivery.
//
// A message sent while another instance's LISTEN session is being
// re-established (PostgreSQL restarted, the session killed) does not reach
// that instance: once its session is back, it hands its subscribers the
// last messages of their channels again (Hub.Rewake), so that a waiter
// whose wake-up was lost looks again. Not covered: a message whose sender
// dies between a script's commit and its NOTIFY; the lock libraries then
// wait for their retry or the TTL.

// pubsubChannel is the NOTIFY channel every instance listens to.
const pubsubChannel = "lockproxy_pubsub"

// pubMessage is one message on pubsubChannel ([]byte travels as base64).
type pubMessage struct {
	From    string `json:"f"`
	Channel []byte `json:"c"`
	Msg     []byte `json:"m"`
}

var (
	_ backend.Publisher = (*Backend)(nil)
	_ backend.Bus       = (*Backend)(nil)
)

// SetHub implements backend.Publisher: scripts may publish, and messages
// from the other instances are delivered to h from now on.
func (b *Backend) SetHub(h backend.Hub) {
	b.hubOnce.Do(func() {
		b.hub = h
		ready := make(chan struct{})
		b.wg.Add(1)
		go b.listen(pubsubChannel, "pub/sub listener", ready, b.deliverOthers, h.Rewake)
		select { // the first LISTEN, so that a message sent right after start is heard
		case <-ready:
		case <-time.After(b.cfg.OpTimeout):
		case <-b.ctx.Done():
		}
	})
}

// Publish implements backend.Bus.
func (b *Backend) Publish(ctx context.Context, channel, msg []byte) error {
	payload, err := json.Marshal(pubMessage{From: b.instance, Channel: channel, Msg: msg})
	if err != nil {
		return err
	}
	if len(payload) > maxPayload {
		return backend.Reply(fmt.Sprintf("ERR lockproxy's postgres backend carries messages of up to about %d bytes between instances; this one encodes to %d", maxPayload*3/4, len(payload)))
	}
	if _, err := b.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, pubsubChannel, string(payload)); err != nil {
		return tryAgain(err)
	}
	return nil
}

// published delivers a committed script's messages: here, then to the
// other instances.
func (b *Backend) published(ctx context.Context, msgs [][2][]byte) error {
	for _, m := range msgs {
		b.hub.Deliver(m[0], m[1])
		if err := b.Publish(ctx, m[0], m[1]); err != nil {
			return err
		}
	}
	return nil
}

// deliverOthers hands another instance's message to the Hub.
func (b *Backend) deliverOthers(payload string) {
	var m pubMessage
	if json.Unmarshal([]byte(payload), &m) != nil || m.From == b.instance {
		return // its own messages went to its subscribers already
	}
	b.hub.Deliver(m.Channel, m.Msg)
}
