package quorum

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// link is what an event loop's connection to one database of one node
// (lnode) keeps across connections, and how a connection is set up.
//
// Order. A node runs one connection's commands in the order they were
// written, so this proxy's operations on one key (serialised by their
// stripes) reach each node in order: an undo always runs after the
// acquire it undoes, even when the node answers neither in time. A new
// connection keeps that order across reconnects: before it carries
// anything it kills the connections it replaces (CLIENT KILL ID, when the
// node is still the same process), so that commands still queued on them
// cannot run after newer ones; and it sends again the owner-checked
// deletes (undos) whose outcome the broken connection left unknown.
//
// Failure. A broken connection (I/O error, a malformed reply, a reply
// overdue past overdueGrace) fails every call waiting on it with an
// error, never a reply, and a new one is set up in the background (see
// lnode); meanwhile calls fail at once.
type link struct {
	addr    string
	db      int
	opt     *redis.Options
	cfg     *Config
	replies prometheus.Observer // each call's reply time
	onRunID func(string)        // told each new connection's run_id before it carries anything
	node    int                 // the node's place in Backend.nodes
	repairs *repairQueue        // told the keys of calls its broken connection leaves unanswered
	order   orderHolds          // told when the writes a broken connection left unanswered can no longer run
	ctx     context.Context     // ends at Close: stops connection set-up

	mu     sync.Mutex
	connID int64        // the node's ID of the current connection
	kill   []int64      // IDs of replaced connections, to kill before anything else
	redo   []undoRec    // owner-checked deletes whose outcome is unknown
	held   stripeCounts // the writes left unanswered on connections to kill, by stripe (order.go)
	runID  string       // the node process the IDs in kill belong to
}

type linkState uint8

const (
	connecting linkState = iota // calls queue, written once connected
	up                          // calls are written as they come
	down                        // calls fail at once until the next attempt
	closed
)

const (
	maxPending = 1 << 16 // calls queued on one connection; beyond, a node is too far behind to wait for
	maxRedo    = 1 << 16
	maxBackoff = time.Second
)

// undoRec is an owner-checked delete: key is removed if it holds token;
// or, with restore set, an owner-checked restore of a
// key's value from before a script (values.go).
type undoRec struct {
	key, token string
	restore    *valueChange
}

// call is one operation's request to one node: n replies expected.
type call struct {
	o        *op
	c        *lnode // the connection it was sent on
	node     int
	n        int
	vals     []backend.Value
	undo     []undoRec // the deletes this call makes, sent again if its connection breaks unanswered
	repair   []string  // the keys a lock operation's call touches: repaired if its connection breaks unanswered (repair.go)
	sent     time.Time
	finished bool      // answered or failed (on its loop)
	holds    bool      // it holds its keys' stripes on its node until answered (order.go)
	parked   bool      // it waits for its node's earlier writes on another line (order.go)
	exec     bool      // a MULTI … EXEC: its replies are EXEC's (req.exec)
	load     scriptRef // the script its EVALSHA needs (req.load)
	loading  bool      // a SCRIPT LOAD of it went ahead of it: its first reply is that one's
}

var (
	errClosed     = errors.New("quorum: backend closed")
	errBacklog    = errors.New("quorum: node too far behind")
	errUnexpected = errors.New("quorum: node sent a reply nobody asked for")
	errOverdue    = errors.New("quorum: node reply overdue")
)

// overdueGrace is how long a call may stay unanswered after its operation
// stopped waiting for it before its connection is treated as broken: at
// least a second, so that a node paused or slowed for less than that
// still answers on the same connection. Its late replies then say what
// it did, and what the client was not told of is repaired (a write whose
// reply is lost with its connection is repaired once the node is back:
// values are not always unique, so it cannot be deleted blind). (The
// grace also keeps a pause of the proxy itself, whose replies wait in the
// socket, from costing its connections.)
func overdueGrace(cfg *Config) time.Duration { return max(time.Second, 4*cfg.NodeTimeout) }

// keepUndo remembers cl's deletes for the next connection. Under s.mu.
func (s *link) keepUndo(cl *call) {
	if len(cl.undo) > 0 && len(s.redo) < maxRedo {
		s.redo = append(s.redo, cl.undo...)
	}
}

// keepUnsent keeps what a call that was never written leaves for the
// next connection: an undo (of an earlier write, which did run) with its
// holds, sent before that connection carries anything. A call without one
// leaves nothing, its holds included: its write never ran, and a hold
// kept for it made every write of its stripe from another loop's
// connection wait for the node to come back, each left out of it and
// queued for repair (TestAvailability: with a node killed, the
// Semaphore's own-key rate fell to half, the repair queue at 12,000 keys).
// Under s.mu.
func (s *link) keepUnsent(cl *call) {
	cl.finished = true
	if len(cl.undo) > 0 {
		cl.keep(&s.held)
		s.keepUndo(cl)
	}
}

// retire forgets the current connection, whose unanswered calls are
// calls: it is to be killed before a new one carries anything, and the
// calls' deletes are sent again on the new one. Under s.mu.
func (s *link) retire(calls []*call) {
	if s.connID != 0 {
		s.kill = append(s.kill, s.connID)
		s.connID = 0
	}
	for _, cl := range calls {
		cl.finished = true
		cl.keep(&s.held)
		s.keepUndo(cl)
		s.repairs.add(s.node, s.db, cl.repair)
	}
}

// connect dials the node and sets the connection up: protocol 3, AUTH,
// the database, the proxy's scripts; then, before the connection may carry
// anything else, the replaced connections are killed and the undos of
// unknown outcome are sent again.
func (s *link) connect() (net.Conn, *resp.Reader, error) {
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
	kill, redo, held := s.kill, s.redo, s.held
	if runID != s.runID {
		kill = nil // the process that had them is gone, and so are they
	}
	s.kill, s.redo, s.held = nil, nil, stripeCounts{}
	s.mu.Unlock()
	putBack := func() {
		s.mu.Lock()
		s.kill = append(append(s.kill, kill...), id) // this one too: it may carry undos
		s.held.merge(&held)
		if len(s.redo) < maxRedo {
			s.redo = append(s.redo, redo...)
		}
		s.runID = runID
		s.mu.Unlock()
	}
	if len(kill)+len(redo) > 0 {
		c = replaceRequest(kill, redo)
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
	held.releaseTo(s.order, s.node) // the undos ran, and what the killed connections carried can run no more
	if s.onRunID != nil {
		s.onRunID(runID) // a restarted node is quarantined before this connection carries a vote
	}
	s.mu.Lock()
	s.runID, s.connID = runID, id
	s.mu.Unlock()
	return conn, br, nil
}

// replaceRequest is what a new connection sends before anything else:
// the kills of the connections it replaces, then the undos they left
// (owner-checked deletes, or restores of values: values.go).
func replaceRequest(kill []int64, redo []undoRec) resp.Request {
	var c resp.Request
	for _, k := range kill {
		c.Cmd(4)
		c.Arg("client")
		c.Arg("kill")
		c.Arg("id")
		c.ArgInt(k)
	}
	for _, u := range redo {
		if u.restore != nil {
			u.restore.appendRestore(&c)
			continue
		}
		c.Strs("eval", delIfScript.src, "1", u.key, u.token, "eq")
	}
	return c
}

func (s *link) dial(ctx context.Context) (net.Conn, error) {
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
