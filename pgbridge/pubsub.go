package pgbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// Not guaranteed: a message sent while another instance's LISTEN session
// is being re-established (PostgreSQL restarted) does not reach that
// instance; nor one whose sender dies between a script's commit and its
// NOTIFY. The lock libraries then wait for their retry or the TTL.

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
		go b.listenPubsub(ready)
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

// listenPubsub keeps a session LISTENing on pubsubChannel until Close,
// delivering the other instances' messages to the Hub.
func (b *Backend) listenPubsub(ready chan struct{}) {
	defer b.wg.Done()
	var once sync.Once
	for b.ctx.Err() == nil {
		conn, err := pgx.Connect(b.ctx, b.cfg.DSN)
		if err == nil {
			_, err = conn.Exec(b.ctx, `LISTEN `+pubsubChannel)
		}
		if err == nil {
			once.Do(func() { close(ready) })
			for {
				var n *pgconn.Notification
				if n, err = conn.WaitForNotification(b.ctx); err != nil {
					break
				}
				var m pubMessage
				if json.Unmarshal([]byte(n.Payload), &m) != nil || m.From == b.instance {
					continue // its own messages went to its subscribers already
				}
				b.hub.Deliver(m.Channel, m.Msg)
			}
		}
		if conn != nil {
			conn.Close(context.Background())
		}
		if b.ctx.Err() == nil {
			b.outage.fail("pub/sub listener", err)
			time.Sleep(200 * time.Millisecond) // before reconnecting
		}
	}
}
