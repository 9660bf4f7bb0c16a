package quorum

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// stream is the proxy's one connection to one database of one node,
// carrying every operation's commands for it full-duplex. An operation
// appends its encoded commands to the write buffer and its call to the
// pending queue, under one lock, and returns to wait; one writer goroutine
// writes whatever has accumulated since its last write in one system call,
// and one reader goroutine reads the replies in order and hands each call
// its replies. Nothing waits for a batch to fill or to be answered: under
// load each write simply carries more commands.
//
// Order. A node runs one connection's commands in the order they were
// written, so this proxy's operations on one key (serialised by lockKeys)
// reach each node in order: an undo always runs after the acquire it
// undoes, even when the node answers neither in time. A new connection
// keeps that order across reconnects: before it carries anything it kills
// the connections it replaces (CLIENT KILL ID, when the node is still the
// same process), so that commands still queued on them cannot run after
// newer ones; and it sends again the owner-checked deletes (undos) whose
// outcome the broken connection left unknown.
//
// Failure. A broken connection (I/O error, a malformed reply, a reply
// overdue past the node timeout) fails every call waiting on it with an
// error, never a reply, and the stream reconnects in the background;
// meanwhile calls fail at once. Calls made while a connection is being set
// up wait for it, within their operation's deadline.
type stream struct {
	addr    string
	db      int
	opt     *redis.Options
	cfg     *Config
	replies prometheus.Observer // each call's reply time
	onRunID func(string)        // told each new connection's run_id before it carries anything
	node    int                 // the node's place in Backend.nodes
	undos   *pendingUndos       // told of each undo answered, dropped or sent again
	repairs *repairQueue        // told the keys of calls its broken connection leaves unanswered

	mu      sync.Mutex
	state   streamState
	conn    net.Conn
	connID  int64         // the node's ID of conn
	wbuf    []byte        // encoded commands not yet written
	pending []*call       // calls waiting for replies, in write order, from head
	head    int           // first live entry of pending
	err     error         // why the stream is down
	broken  error         // why conn was closed, when the stream closed it
	kill    []int64       // IDs of replaced connections, to kill before anything else
	redo    []undoRec     // owner-checked deletes whose outcome is unknown
	runID   string        // the node process the IDs in kill belong to
	wake    chan struct{} // the writer has something to write
	ready   chan struct{} // closed after the first connection attempt
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

type streamState uint8

const (
	connecting streamState = iota // calls queue, written once connected
	up                            // calls are written as they come
	down                          // calls fail at once until the next attempt
	closed
)

const (
	maxPending = 1 << 16 // calls queued on one stream; beyond, a node is too far behind to wait for
	maxRedo    = 1 << 16
	maxBackoff = time.Second
)

// undoRec is an owner-checked delete: key is removed if it holds token.
type undoRec struct{ key, token string }

// call is one operation's request to one node: n replies expected.
type call struct {
	o        *op
	c        carrier // the connection it was sent on
	node     int
	n        int
	vals     []backend.Value
	undo     []undoRec // the deletes this call makes, sent again if its connection breaks unanswered
	repair   []string  // the keys a lock operation's call touches: repaired if its connection breaks unanswered (repair.go)
	sent     time.Time
	finished bool // answered or failed (under the stream's mu; on the loop path, the loop's)
}

// carrier is what carries calls to a node: a stream, or a connection on an
// event loop (loop.go).
type carrier interface {
	// overdue is told that cl's operation stopped waiting for it after a
	// full node timeout.
	overdue(cl *call)
}

var (
	errStreamClosed = errors.New("quorum: backend closed")
	errBacklog      = errors.New("quorum: node too far behind")
	errUnexpected   = errors.New("quorum: node sent a reply nobody asked for")
	errOverdue      = errors.New("quorum: node reply overdue")
)

func newStream(addr string, db int, opt *redis.Options, cfg *Config, replies prometheus.Observer, onRunID func(string), node int, undos *pendingUndos) *stream {
	s := &stream{addr: addr, db: db, opt: opt, cfg: cfg, replies: replies, onRunID: onRunID, node: node, undos: undos,
		wake: make(chan struct{}, 1), ready: make(chan struct{}), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.run()
	return s
}

// closedStream is a stream of a closed Backend: it fails every call and
// runs nothing.
func closedStream(addr string, db int) *stream {
	s := &stream{addr: addr, db: db, state: closed, err: errStreamClosed,
		wake: make(chan struct{}, 1), ready: make(chan struct{}), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cancel()
	close(s.ready)
	close(s.done)
	return s
}

// send queues cl's encoded commands buf. The call is answered (or failed)
// through its operation.
func (s *stream) send(cl *call, buf []byte) {
	s.mu.Lock()
	var err error
	switch {
	case s.state == down || s.state == closed:
		err = s.err
		s.keepUndo(cl)
	case len(s.pending)-s.head >= maxPending && len(cl.undo) == 0:
		// Undos are queued even then: kept for a later connection, one
		// could run long after the token was granted again.
		err = errBacklog
	}
	if err != nil {
		cl.finished = true
		s.mu.Unlock()
		cl.o.deliver(cl.node, nil, err)
		return
	}
	signal := s.state == up && len(s.wbuf) == 0
	s.wbuf = append(s.wbuf, buf...)
	s.pending = append(s.pending, cl)
	s.mu.Unlock()
	if signal {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// isUp reports whether the stream's connection is up.
func (s *stream) isUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == up
}

// keepUndo remembers cl's deletes for the next connection. Under s.mu.
func (s *stream) keepUndo(cl *call) {
	if len(cl.undo) > 0 && len(s.redo) < maxRedo {
		s.redo = append(s.redo, cl.undo...)
		return
	}
	s.undos.add(s, s.node, s.db, cl.undo, -1) // dropped: it will not run
}

// overdueGrace is how long a call may stay unanswered after its operation
// stopped waiting for it before its connection is treated as broken: at
// least a second, so that a node paused or slowed for less than that
// still answers on the same connection. Its late replies then say what
// it did, and what the client was not told of is undone (a write whose
// reply is lost with its connection stays until its TTL: values are not
// always unique, so it cannot be deleted blind).
func overdueGrace(cfg *Config) time.Duration { return max(time.Second, 4*cfg.NodeTimeout) }

// overdue is told that cl's operation stopped waiting for it after a full
// node timeout. If cl is still unanswered overdueGrace later, the
// connection is treated as broken, as a socket read timeout would be: a
// node that far behind is paused, partitioned or gone. (The grace keeps a
// pause of the proxy itself, whose replies wait in the socket, from
// costing its connections.)
func (s *stream) overdue(cl *call) {
	time.AfterFunc(overdueGrace(s.cfg), func() {
		s.mu.Lock()
		var c net.Conn
		if !cl.finished && s.state == up {
			c = s.conn
			s.broken = errOverdue
		}
		s.mu.Unlock()
		if c != nil {
			c.Close()
		}
	})
}

// close stops the stream and fails what waits on it.
func (s *stream) close() {
	s.cancel()
	s.mu.Lock()
	if s.conn != nil {
		s.conn.Close()
	}
	s.mu.Unlock()
	<-s.done
}

func (s *stream) run() {
	defer close(s.done)
	backoff := time.Duration(0) // a connection that broke is replaced at once
	first := true
	for {
		conn, br, err := s.connect()
		if first {
			close(s.ready)
			first = false
		}
		if err == nil {
			backoff = 0
			err = s.serve(conn, br)
		}
		if s.ctx.Err() != nil {
			s.fail(errStreamClosed, closed)
			return
		}
		s.mu.Lock()
		if s.broken != nil {
			err = s.broken // the cause, not the closed socket
		}
		s.broken = nil
		s.mu.Unlock()
		err = fmt.Errorf("node %s: %w", s.addr, err)
		if backoff == 0 {
			// Calls keep queueing for the new connection, which comes
			// right away.
			s.fail(err, connecting)
			backoff = s.cfg.NodeTimeout
			continue
		}
		// Setting up a connection failed: calls fail at once until the
		// next attempt.
		s.fail(err, down)
		t := time.NewTimer(backoff)
		select {
		case <-s.ctx.Done():
			t.Stop()
			s.fail(errStreamClosed, closed)
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
		s.mu.Lock()
		s.state = connecting
		s.mu.Unlock()
	}
}

// fail ends the current connection: every call waiting on it fails with
// err, and their deletes are kept for the next connection.
func (s *stream) fail(err error, st streamState) {
	s.mu.Lock()
	s.err, s.state = err, st
	s.conn = nil
	calls := s.pending[s.head:]
	s.pending, s.head = nil, 0
	s.wbuf = s.wbuf[:0]
	s.retire(calls)
	s.mu.Unlock()
	for _, cl := range calls {
		cl.o.deliver(cl.node, nil, err)
	}
}

// retire forgets the current connection, whose unanswered calls are
// calls: it is to be killed before a new one carries anything, and the
// calls' deletes are sent again on the new one. Under s.mu.
func (s *stream) retire(calls []*call) {
	if s.connID != 0 {
		s.kill = append(s.kill, s.connID)
		s.connID = 0
	}
	for _, cl := range calls {
		cl.finished = true
		s.keepUndo(cl)
		s.repairs.add(s.node, s.db, cl.repair)
	}
}

// serve runs the connection until it breaks: a writer goroutine, and the
// reader here.
func (s *stream) serve(conn net.Conn, br *resp.Reader) error {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		// close ran while conn was being set up, before it was stored
		// where close could close it: nobody else will.
		s.mu.Unlock()
		conn.Close()
		return s.ctx.Err()
	}
	s.err = nil
	s.state, s.conn = up, conn
	signal := len(s.wbuf) > 0
	s.mu.Unlock()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { s.writeLoop(conn, quit) })
	if signal {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	err := s.readLoop(br)
	conn.Close()
	close(quit)
	wg.Wait()
	return err
}

func (s *stream) writeLoop(conn net.Conn, quit <-chan struct{}) {
	var out []byte
	for {
		select {
		case <-quit:
			return
		case <-s.wake:
		}
		// Let the goroutines that are runnable now (client connections
		// with a command in hand) queue theirs first: one write then
		// carries them all. Without it, each write carried ~3 commands
		// under 50 clients; with it, ~11, for 8-15% more lock cycles/s
		// (fewer system calls here and on the node).
		runtime.Gosched()
		s.mu.Lock()
		out, s.wbuf = s.wbuf, out[:0]
		s.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		if _, err := conn.Write(out); err != nil {
			conn.Close() // the reader sees it and fails the calls
			return
		}
		if cap(out) > 1<<20 {
			out = nil // a burst's buffer is not kept
		}
	}
}

func (s *stream) readLoop(br *resp.Reader) error {
	for {
		v, err := br.ReadValue()
		if err != nil {
			return err
		}
		s.mu.Lock()
		if s.head == len(s.pending) {
			s.mu.Unlock()
			return errUnexpected
		}
		cl := s.pending[s.head]
		cl.vals = append(cl.vals, v)
		if len(cl.vals) < cl.n {
			s.mu.Unlock()
			continue
		}
		cl.finished = true
		s.pending[s.head] = nil
		s.head++
		switch {
		case s.head == len(s.pending):
			s.pending, s.head = s.pending[:0], 0
		case s.head >= 1024 && s.head > len(s.pending)/2:
			n := copy(s.pending, s.pending[s.head:])
			clear(s.pending[n:])
			s.pending, s.head = s.pending[:n], 0
		}
		s.mu.Unlock()
		s.replies.Observe(time.Since(cl.sent).Seconds())
		s.undos.add(s, s.node, s.db, cl.undo, -1)
		cl.o.deliver(cl.node, cl.vals, nil)
	}
}

// connect dials the node and sets the connection up: protocol 3, AUTH,
// the database, the proxy's scripts; then, before the connection may carry
// anything else, the replaced connections are killed and the undos of
// unknown outcome are sent again.
func (s *stream) connect() (net.Conn, *resp.Reader, error) {
	timeout := 4 * s.cfg.NodeTimeout
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	conn, err := s.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetDeadline(time.Now().Add(timeout))
	br := resp.NewReader(conn, 32<<10)

	var c resp.Request
	if s.opt.Password != "" {
		user := s.opt.Username
		if user == "" {
			user = "default"
		}
		c.Strs("hello", "3", "auth", user, s.opt.Password, "setname", "lockproxy")
	} else {
		c.Strs("hello", "3", "setname", "lockproxy")
	}
	c.Strs("info", "server")
	c.Strs("select", fmt.Sprint(s.db))
	c.Strs("script", "load", setScript.src)
	c.Strs("script", "load", delIfScript.src)
	vals, err := roundTrip(conn, br, &c)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	for _, v := range vals[:3] {
		if v.Kind == backend.KindError {
			conn.Close()
			return nil, nil, fmt.Errorf("connection setup: %s", v.Str)
		}
	}
	id := int64(mapField(vals[0], "id").Int)
	runID := infoField(string(vals[1].Str), "run_id")

	s.mu.Lock()
	kill, redo := s.kill, s.redo
	if runID != s.runID {
		kill = nil // the process that had them is gone, and so are they
	}
	s.kill, s.redo = nil, nil
	s.mu.Unlock()
	putBack := func() {
		s.mu.Lock()
		s.kill = append(append(s.kill, kill...), id) // this one too: it may carry undos
		if len(s.redo) < maxRedo {
			s.redo = append(s.redo, redo...)
		} else {
			s.undos.add(s, s.node, s.db, redo, -1) // dropped: they will not run
		}
		s.runID = runID
		s.mu.Unlock()
	}
	if len(kill)+len(redo) > 0 {
		c = resp.Request{}
		for _, k := range kill {
			c.Cmd(4)
			c.Arg("client")
			c.Arg("kill")
			c.Arg("id")
			c.ArgInt(k)
		}
		for _, u := range redo {
			c.Strs("eval", delIfScript.src, "1", u.key, u.token, "eq")
		}
		vals, err := roundTrip(conn, br, &c)
		if err != nil {
			conn.Close()
			putBack()
			return nil, nil, err
		}
		for _, v := range vals[:len(kill)] {
			if v.Kind == backend.KindError && !strings.Contains(string(v.Str), "No such client") {
				s.cfg.Logger.Warn("quorum node refused to close a replaced connection: an operation still queued on it may run out of order",
					"node", s.addr, "err", string(v.Str))
			}
		}
	}
	if !stop() || conn.SetDeadline(time.Time{}) != nil {
		conn.Close()
		putBack()
		return nil, nil, fmt.Errorf("connection setup: %w", context.DeadlineExceeded)
	}
	s.undos.add(s, s.node, s.db, redo, -1) // they ran before this connection carries anything
	if s.onRunID != nil {
		s.onRunID(runID) // a restarted node is quarantined before this connection carries a vote
	}
	s.mu.Lock()
	s.runID, s.connID = runID, id
	s.mu.Unlock()
	return conn, br, nil
}

func (s *stream) dial(ctx context.Context) (net.Conn, error) {
	var conn net.Conn
	var err error
	if s.cfg.Dialer != nil {
		conn, err = s.cfg.Dialer(ctx, "tcp", s.addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", s.addr)
	}
	if err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if s.opt.TLSConfig != nil {
		t := tls.Client(conn, s.opt.TLSConfig)
		if err := t.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = t
	}
	return conn, nil
}

// roundTrip writes c and reads its replies: connection setup only.
func roundTrip(conn net.Conn, br *resp.Reader, c *resp.Request) ([]backend.Value, error) {
	if _, err := conn.Write(c.B); err != nil {
		return nil, err
	}
	vals := make([]backend.Value, c.N)
	for i := range vals {
		v, err := br.ReadValue()
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	return vals, nil
}

// mapField returns the value of name in a RESP3 map reply.
func mapField(m backend.Value, name string) backend.Value {
	for i := 0; i+1 < len(m.Elems); i += 2 {
		if string(m.Elems[i].Str) == name {
			return m.Elems[i+1]
		}
	}
	return backend.Value{}
}
