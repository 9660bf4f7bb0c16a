package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
	"github.com/lockproxy/lockproxy/luascripts"
)

// Commands started on the event loop (backend.Looper; the quorum backend
// does it for acquires, release scripts and majority reads: SET, EVAL and
// EVALSHA in their forms, GET, TTL, PTTL; postgres's advisory strategy for
// SET NX and catalogued releases). A command that would run off
// the loop (runOff) is first offered to the backend's part of the loop,
// in two passes through the ordinary command code, so that parsing,
// errors, replies and metrics stay one copy:
//
//  1. start: the command's own code runs against a loopCmd standing in for
//     the backend. Its Set or Eval asks the backend to start the operation
//     on the loop; the connection is then busy, as with runOff, and the
//     value that pass computes is dropped. Anything else (another backend
//     call, an error before any, the backend declining) leaves the command
//     to runOff, which runs it from scratch: pass 1 counted nothing.
//  2. complete: when the backend calls back (on the loop), the command runs
//     again through client.run with the loopCmd answering its backend call
//     with the outcome, and the result is handed over as runOff's is, but
//     without gnet's wake-up: the loop's resumer runs the connection's next
//     pass once the loop has handled the event it is in.
//
// Node connections are enrolled into the same gnet client as the client
// connections, so their events reach loopHandler too: they are told apart
// by their context (peerConn).

// loopBackends finds the backend's part of each event loop.
type loopBackends struct {
	lr backend.Looper // nil: the backend starts nothing on the loops
	h  *loopHandler
	mu sync.Mutex
	m  map[gnet.EventLoop]*loopPart
}

// loopPart is what one event loop has for the commands started on it.
type loopPart struct {
	lb backend.LoopBackend // the backend's part of the loop, or nil
	rs *resumer
}

func newLoopBackends(b backend.Backend) *loopBackends {
	lr, _ := b.(backend.Looper)
	return &loopBackends{lr: lr, m: map[gnet.EventLoop]*loopPart{}}
}

// of returns c's loop's part, or nil when the backend starts nothing on
// the loops.
func (r *loopBackends) of(c gnet.Conn) *loopPart {
	if r.lr == nil {
		return nil
	}
	el := c.EventLoop()
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.m[el]
	if !ok {
		p = &loopPart{lb: r.lr.NewLoop(eventLoop{el}), rs: newResumer(r.h, el)}
		r.m[el] = p
	}
	return p
}

// resumer gives the connections of one loop whose command started on the
// loop has its outcome (loopCmd.complete) their next pass: all of them
// once the loop has handled the event it is in, by one Execute, where a
// gnet wake-up each would cost two allocations and a trip through gnet's
// queue per command. Not at once, inside complete: that runs within the
// backend's own handling of an event (a node's reply), which must not
// start the connection's next command under it. Its fields belong to the
// loop.
type resumer struct {
	h      *loopHandler
	el     gnet.EventLoop
	task   gnet.Runnable // run, made once
	ready  []*loopConn
	spare  []*loopConn
	queued bool
}

func newResumer(h *loopHandler, el gnet.EventLoop) *resumer {
	rs := &resumer{h: h, el: el}
	rs.task = gnet.RunnableFunc(func(context.Context) error { rs.run(); return nil })
	return rs
}

// add queues lc's next pass. A loop that stopped runs nothing more (gnet
// refuses tasks only once its loops have exited, having closed every
// connection): nothing stays queued then.
func (rs *resumer) add(lc *loopConn) {
	rs.ready = append(rs.ready, lc)
	if !rs.queued {
		rs.queued = true
		if rs.el.Execute(context.Background(), rs.task) != nil {
			clear(rs.ready)
			rs.ready, rs.queued = rs.ready[:0], false
		}
	}
}

// run gives each queued connection its pass, as gnet's wake-up would
// (OnTraffic with no new input, then its action), unless it closed
// meanwhile (OnClose then cleaned up after its command).
func (rs *resumer) run() {
	ready := rs.ready
	rs.ready, rs.spare = rs.spare[:0], nil
	rs.queued = false
	for i, lc := range ready {
		ready[i] = nil
		lc.mu.Lock()
		gone := lc.gone || lc.detached != nil
		lc.mu.Unlock()
		if gone {
			continue
		}
		if rs.h.OnTraffic(lc.gc) == gnet.Close {
			_ = rs.el.Close(lc.gc) // at once, on the loop, as gnet does for its own events
		}
	}
	rs.spare = ready[:0]
}

// eventLoop is a gnet event loop as a backend.Loop.
type eventLoop struct{ el gnet.EventLoop }

func (l eventLoop) Enroll(ctx context.Context, c net.Conn, p backend.LoopPeer) error {
	ch, err := l.el.Enroll(gnet.NewContext(context.Background(), &peerConn{p: p}), c)
	if err != nil {
		c.Close()
		return err
	}
	select {
	case res := <-ch:
		if res.Err == nil && res.Conn == nil {
			return errors.New("proxy: event loop dropped a connection")
		}
		return res.Err
	case <-ctx.Done():
		// A stopped loop never registers it (gnet's own goroutine then
		// waits for good); a loop that still does opens it after all.
		return ctx.Err()
	}
}

func (l eventLoop) Execute(f func()) error {
	return l.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		f()
		return nil
	}))
}

// peerConn is a backend's connection on a loop: gnet's events go to the
// backend's LoopPeer, and it is the peer's LoopWriter.
type peerConn struct {
	p backend.LoopPeer
	c gnet.Conn
}

func (pc *peerConn) Write(b []byte) error { _, err := pc.c.Write(b); return err }
func (pc *peerConn) Close() error         { return pc.c.Close() }

func (pc *peerConn) open(c gnet.Conn) ([]byte, gnet.Action) {
	pc.c = c
	pc.p.Open(pc)
	return nil, gnet.None
}

func (pc *peerConn) traffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Peek(-1)
	if n := pc.p.Traffic(buf); n > 0 {
		c.Discard(n) // not Discard(0): that drops everything
	}
	return gnet.None
}

func (pc *peerConn) closed(err error) { pc.p.Closed(err) }

// errOnLoop is what a loopCmd's backend methods return in pass 1 (never
// seen by a client: that pass's value is dropped). A ReplyError, so that
// errorValue does not log it.
var errOnLoop = &backend.ReplyError{Reply: "ERR started on the event loop"}

// loopCmd is one command offered to the backend's part of the loop: the
// backend its code sees in both passes.
type loopCmd struct {
	lc      *loopConn
	args    [][]byte // the command, copied: the input buffer moves on
	t0      time.Time
	started bool // pass 1: the backend took it
	replay  bool // pass 2
	used    bool // pass 2: the outcome was asked for
	set     backend.SetResult
	v       backend.Value // Eval's value; Get's token in Str (ok in Int), PTTL's in Int
	err     error

	// Room for args, so that a lock command's copy costs no allocation of
	// its own (cloneArgs makes two).
	argv [8][]byte
	abuf [192]byte
}

// clone copies args into c.args, in c's own storage when they fit.
func (c *loopCmd) clone(args [][]byte) {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	if len(args) > len(c.argv) || n > len(c.abuf) {
		c.args = cloneArgs(args)
		return
	}
	buf := c.abuf[:0]
	out := c.argv[:len(args)]
	for i, a := range args {
		buf = append(buf, a...)
		out[i] = buf[len(buf)-len(a) : len(buf) : len(buf)] // an empty one stays non-nil, as cloneArgs keeps it
	}
	c.args = out
}

// startOnLoop offers args, a command that would run off the loop, to the
// backend's part of the loop, and reports whether it took it (the
// connection is then busy until the outcome is back).
func (lc *loopConn) startOnLoop(args [][]byte) (started bool) {
	cl := lc.cl
	if lc.lb == nil || !cl.authed || cl.inMulti {
		return false
	}
	c := &loopCmd{lc: lc, t0: time.Now()}
	defer func() {
		// As client.run does; then runOff runs the command from scratch
		// (and meets the panic there), unless the backend took it.
		if p := recover(); p != nil {
			lc.s.log.Error("panic starting a command on the event loop", "conn_id", cl.id, "cmd", cl.lastCmd, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			cl.alt = nil
			lc.busy = c.started
			started = c.started
		}
	}()
	if kc := keycmd.Lookup(args[0]); kc != nil {
		switch kc.Name {
		case "set", "get", "ttl", "pttl":
		default:
			return false
		}
		c.clone(args)
		kc.Exec(cl.ctx, c, cl.db, c.args) // the result is pass 2's
	} else if cc := lookupConn(args[0]); cc != nil && cc.run != nil && isEval(cc.name) && arityOK(cc.arity, len(args)) {
		if !strings.HasPrefix(cc.name, "evalsha") && !lc.s.knowsScript(args[1]) {
			// A source not seen yet would be compiled here, in pass 1,
			// stalling every client of the loop: its first call goes off
			// the loop (compiled and, on quorum, classified there), as an
			// EVALSHA's first call does.
			return false
		}
		c.clone(args)
		cl.lastCmd, cl.alt = cc.name, c
		cmdEval(cl, c.args)
		cl.alt = nil
	}
	if c.started {
		lc.busy = true
	}
	return c.started
}

// knowsScript reports whether src is in the script cache (so EVAL src
// compiles nothing).
func (s *Server) knowsScript(src []byte) bool {
	if len(src) > s.cfg.MaxScriptBytes {
		return false
	}
	_, ok := s.scripts.get(luascripts.SHA1(string(src)))
	return ok
}

func isEval(name string) bool {
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro":
		return true
	}
	return false
}

// complete is pass 2, on the loop: the command runs again with the outcome,
// and its result goes to the connection as runOff's does.
func (c *loopCmd) complete() {
	lc, cl := c.lc, c.lc.cl
	c.replay = true
	cl.alt, cl.t0 = c, c.t0
	r := cl.run(c.args)
	cl.alt, cl.t0 = nil, time.Time{}
	if !c.used && !r.panicked && isEval(cl.lastCmd) {
		// The script left the script cache between the passes (SCRIPT
		// FLUSH): it ran all the same, and its outcome is the reply.
		r.v = c.v
		if c.err != nil {
			r.v = cl.errorValue(cl.lastCmd, c.err)
		}
	}
	if nc := lc.handBack(r, true); nc != nil {
		go lc.finish(nc, r) // this runs on the loop
	}
}

func (c *loopCmd) deadline() time.Time { return c.t0.Add(c.lc.s.cfg.CommandTimeout) }

// Set starts (pass 1) or answers (pass 2) a SET.
func (c *loopCmd) Set(ctx context.Context, db int, key string, token []byte, o backend.SetOptions) (backend.SetResult, error) {
	if c.replay {
		c.used = true
		return c.set, c.err
	}
	c.started = c.lc.lb.StartSet(backend.HolderOf(ctx), db, key, token, o, c.deadline(), func(res backend.SetResult, err error) {
		c.set, c.err = res, err
		c.complete()
	})
	return backend.SetResult{}, errOnLoop
}

// Eval starts (pass 1) or answers (pass 2) a script.
func (c *loopCmd) Eval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	if c.replay {
		c.used = true
		return c.v, c.err
	}
	c.started = c.lc.lb.StartEval(backend.HolderOf(ctx), db, s, keys, args, ro, c.deadline(), func(v backend.Value, err error) {
		c.v, c.err = v, err
		c.complete()
	})
	if c.started {
		// No error: the value is dropped, and turning errOnLoop into an
		// error reply (cmdEval does) costs two allocations.
		return backend.Value{}, nil
	}
	return backend.Value{}, errOnLoop
}

// Get starts (pass 1) or answers (pass 2) a GET.
func (c *loopCmd) Get(_ context.Context, db int, key string) ([]byte, bool, error) {
	if c.replay {
		c.used = true
		return c.v.Str, c.v.Int == 1, c.err
	}
	c.started = c.lc.lb.StartGet(db, key, c.deadline(), func(tok []byte, ok bool, err error) {
		c.v, c.err = backend.Value{Str: tok, Int: b2i(ok)}, err
		c.complete()
	})
	return nil, false, errOnLoop
}

// PTTL starts (pass 1) or answers (pass 2) a PTTL or TTL.
func (c *loopCmd) PTTL(_ context.Context, db int, key string) (int64, error) {
	if c.replay {
		c.used = true
		return c.v.Int, c.err
	}
	c.started = c.lc.lb.StartPTTL(db, key, c.deadline(), func(ms int64, err error) {
		c.v, c.err = backend.Value{Int: ms}, err
		c.complete()
	})
	return 0, errOnLoop
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// The other methods are never started on the loop: a command calling one
// is left to runOff (pass 1), and pass 2 runs only a command that called
// Set, Eval, Get or PTTL.
func (c *loopCmd) Del(context.Context, int, []string) (int64, error) { return 0, errOnLoop }
func (c *loopCmd) DelIf(context.Context, int, string, backend.Cond, []byte) (bool, error) {
	return false, errOnLoop
}
func (c *loopCmd) Exists(context.Context, int, []string) (int64, error) { return 0, errOnLoop }
func (c *loopCmd) Expire(context.Context, int, string, backend.Expiry, backend.ExpireCond) (bool, error) {
	return false, errOnLoop
}
func (c *loopCmd) Persist(context.Context, int, string) (bool, error) { return false, errOnLoop }
func (c *loopCmd) MSet(context.Context, int, []backend.KV, bool) (bool, error) {
	return false, errOnLoop
}
func (c *loopCmd) DBSize(context.Context, int) (int64, error) { return 0, errOnLoop }
func (c *loopCmd) Do(context.Context, int, []string, [][]byte) (backend.Value, error) {
	return backend.Value{}, errOnLoop
}
func (c *loopCmd) Close(context.Context) error { return nil }

var _ backend.Backend = (*loopCmd)(nil)
