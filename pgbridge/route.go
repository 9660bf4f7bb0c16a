package pgbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockproxy/lockproxy/backend"
)

// Routing between instances (advisory strategy). Only the session holding
// a key's advisory lock can release it, so a write that reaches an
// instance not holding the key travels to the holding instance: a request
// by NOTIFY on that instance's channel (lockproxy_<instance>), the reply by
// NOTIFY on the sender's. The holding instance runs it as if its own
// client had sent it, but never routes it further.

// routeReq is one routed operation: a KeySpace method or a script.
type routeReq struct {
	ID     uint64             `json:"id"`
	From   string             `json:"from"`
	Op     string             `json:"op"` // set del delif expire persist eval do read count
	DB     int                `json:"db"`
	Key    []byte             `json:"key,omitempty"`
	Token  []byte             `json:"token,omitempty"`
	Opts   backend.SetOptions `json:"opts"`
	Cond   backend.Cond       `json:"cond,omitempty"`
	Match  []byte             `json:"match,omitempty"`
	Expiry backend.Expiry     `json:"expiry"`
	ECond  backend.ExpireCond `json:"econd,omitempty"`
	Script backend.Script     `json:"script"`
	Keys   [][]byte           `json:"keys,omitempty"`
	Args   [][]byte           `json:"args,omitempty"`
	RO     bool               `json:"ro,omitempty"`
}

// routeReply is the outcome of a routeReq.
type routeReply struct {
	ID    uint64            `json:"id"`
	Err   string            `json:"err,omitempty"`
	Reply bool              `json:"reply,omitempty"` // Err is a Redis error reply
	Set   backend.SetResult `json:"set"`
	OK    bool              `json:"ok,omitempty"`
	Tok   []byte            `json:"tok"`            // read: the value
	Kind  uint8             `json:"kind,omitempty"` // read: its type (model.Kind…)
	N     int64             `json:"n,omitempty"`
	V     backend.Value     `json:"v"`
}

func (r *routeReply) error() error {
	switch {
	case r.Err == "":
		return nil
	case r.Reply:
		return backend.Reply(r.Err)
	}
	return tryAgain(errors.New("holding instance: " + r.Err))
}

type envelope struct {
	Req   *routeReq   `json:"q,omitempty"`
	Reply *routeReply `json:"r,omitempty"`
}

// maxPayload is PostgreSQL's limit on a NOTIFY payload, less a margin.
const maxPayload = 7900

type router struct {
	routeCounts
	a       *advisory
	channel string
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan *routeReply
	ready   chan struct{} // closed once the first LISTEN is in place
}

type routedKey struct{}

// routed reports whether ctx belongs to an operation that arrived routed.
func routed(ctx context.Context) bool { return ctx.Value(routedKey{}) != nil }

func channelOf(instance string) string { return "lockproxy_" + instance }

func newRouter(ctx context.Context, a *advisory) (*router, error) {
	r := &router{a: a, channel: channelOf(a.b.instance), pending: make(map[uint64]chan *routeReply), ready: make(chan struct{})}
	a.b.wg.Add(1)
	go a.b.listen(r.channel, "routing listener", r.ready, func(payload string) { r.dispatch([]byte(payload)) }, nil)
	select {
	case <-r.ready:
		return r, nil
	case <-time.After(a.b.cfg.OpTimeout):
		return nil, errors.New("pgbridge: could not LISTEN for routed operations")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// listen keeps a session LISTENing on channel until Close (b.wg counts
// it), handing each payload to handle; ready is closed once the first
// LISTEN is in place. what names it in the outage log.
func (b *Backend) listen(channel, what string, ready chan struct{}, handle func(payload string), recovered func()) {
	defer b.wg.Done()
	first := true
	for b.ctx.Err() == nil {
		conn, err := pgx.Connect(b.ctx, b.cfg.DSN)
		if err == nil {
			_, err = conn.Exec(b.ctx, `LISTEN "`+channel+`"`)
		}
		if err == nil {
			b.outage.ok()
			if first {
				close(ready)
				first = false
			} else if recovered != nil {
				recovered() // what was sent meanwhile was not heard
			}
			for {
				var n *pgconn.Notification
				if n, err = conn.WaitForNotification(b.ctx); err != nil {
					break
				}
				handle(n.Payload)
			}
		}
		if conn != nil {
			conn.Close(context.Background())
		}
		if b.ctx.Err() == nil {
			b.outage.fail(what, err)
			time.Sleep(200 * time.Millisecond) // before reconnecting
		}
	}
}

func (r *router) dispatch(payload []byte) {
	var env envelope
	if err := json.Unmarshal(payload, &env); err != nil {
		r.a.b.log.Warn("pgbridge: bad routed message", "err", err)
		return
	}
	if env.Reply != nil {
		r.mu.Lock()
		ch := r.pending[env.Reply.ID]
		delete(r.pending, env.Reply.ID)
		r.mu.Unlock()
		if ch != nil {
			ch <- env.Reply
		}
		return
	}
	if env.Req != nil {
		go r.serve(env.Req)
	}
}

// serve runs a routed operation here and sends the reply back.
func (r *router) serve(req *routeReq) {
	b := r.a.b
	ctx, cancel := context.WithTimeout(context.WithValue(b.ctx, routedKey{}, true), b.cfg.OpTimeout)
	defer cancel()
	r.served.Add(1)
	rep := &routeReply{ID: req.ID}
	var err error
	switch req.Op {
	case "set":
		rep.Set, err = b.Set(ctx, req.DB, string(req.Key), req.Token, req.Opts)
	case "del":
		rep.N, err = b.Del(ctx, req.DB, []string{string(req.Key)})
	case "release": // lockproxy.force_release's (release.go)
		rep.N, err = b.forceRelease(ctx, req.DB, string(req.Key))
	case "delif":
		rep.OK, err = b.DelIf(ctx, req.DB, string(req.Key), req.Cond, req.Match)
	case "expire":
		rep.OK, err = b.Expire(ctx, req.DB, string(req.Key), req.Expiry, req.ECond)
	case "persist":
		rep.OK, err = b.Persist(ctx, req.DB, string(req.Key))
	case "count": // this instance's keys, for another's DBSIZE (count.go)
		if err = checkDB(req.DB); err == nil {
			rep.N = r.a.ownCount(req.DB, nil)
		}
	case "rows": // the rows of this instance's locks without one, for another's listing (whole.go)
		if err = checkDB(req.DB); err == nil {
			r.a.writeRows(req.DB)
		}
	case "read": // GET, PTTL, EXISTS of a lock held here without a row (deferred.go)
		var s state
		s, err = r.a.read(ctx, dbKey{req.DB, string(req.Key)})
		rep.OK, rep.Kind, rep.Tok, rep.N = s.present, s.kind, s.token, s.deadline
	case "eval", "do":
		keys := make([]string, len(req.Keys))
		for i, k := range req.Keys {
			keys[i] = string(k)
		}
		if req.Op == "do" {
			rep.V, err = b.Do(ctx, req.DB, keys, req.Args)
		} else {
			rep.V, err = b.Eval(ctx, req.DB, req.Script, keys, req.Args, req.RO)
		}
	default:
		err = fmt.Errorf("unknown routed operation %q", req.Op)
	}
	if err != nil {
		var re *backend.ReplyError
		rep.Err, rep.Reply = err.Error(), errors.As(err, &re)
		if rep.Reply {
			rep.Err = re.Reply
		}
	}
	if err := r.notify(ctx, req.From, &envelope{Reply: rep}); err != nil {
		b.log.Warn("pgbridge: routed reply", "to", req.From, "err", err)
	}
}

func (r *router) notify(ctx context.Context, instance string, env *envelope) error {
	payload, err := json.Marshal(env)
	if err != nil {
		return err
	}
	if len(payload) > maxPayload {
		return fmt.Errorf("routed message of %d bytes is over PostgreSQL's NOTIFY limit", len(payload))
	}
	_, err = r.a.b.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channelOf(instance), string(payload))
	return err
}

// send routes req to instance and waits for its reply until ctx ends. A
// reply that does not come is a TRYAGAIN error: the operation may or may
// not have happened there.
func (r *router) send(ctx context.Context, instance string, req *routeReq) (*routeReply, error) {
	if instance == r.a.b.instance {
		return nil, tryAgain(errors.New("a key of this instance is held by a session it no longer knows"))
	}
	r.sent.Add(1)
	ch := make(chan *routeReply, 1)
	r.mu.Lock()
	r.next++
	req.ID, req.From = r.next, r.a.b.instance
	r.pending[req.ID] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.pending, req.ID)
		r.mu.Unlock()
	}()
	if err := r.notify(ctx, instance, &envelope{Req: req}); err != nil {
		return nil, tryAgain(fmt.Errorf("routing to the holding instance: %w", err))
	}
	wait := r.a.b.cfg.OpTimeout + time.Second
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case rep := <-ch:
		return rep, nil
	case <-ctx.Done():
		return nil, tryAgain(errors.New("no reply from the holding instance before the command's deadline"))
	case <-t.C:
		return nil, tryAgain(fmt.Errorf("no reply from the holding instance within %v", wait))
	}
}

func (r *router) close() {}

// route sends an operation to the instance holding h's keys, when the
// operation did not arrive routed and one instance holds them all.
func (a *advisory) route(ctx context.Context, h *heldError, req *routeReq) (*routeReply, error) {
	if routed(ctx) {
		return nil, heldReply(h)
	}
	target := ""
	for _, in := range h.instances {
		if in == "" || (target != "" && in != target) {
			return nil, heldReply(h)
		}
		target = in
	}
	return a.router.send(ctx, target, req)
}
