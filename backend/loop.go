package backend

import (
	"context"
	"net"
	"time"
)

// The interfaces below let a backend run some commands on the front end's
// event loops (docs/architecture.md): the backend's connections to its servers are
// registered on the loop that owns the client, a command is started on
// that loop and completes on it through a callback, with no goroutine
// hand-off. Everything is optional: a backend without them, or a command
// a backend declines, takes the ordinary path (a blocking call on a
// goroutine).

// Looper is implemented by a Backend that can start commands on the
// front end's event loops.
type Looper interface {
	// NewLoop returns the backend's part of one event loop, or nil when
	// the backend cannot use it (TLS to its servers, say). The front end
	// calls it once per loop, from any goroutine, before the loop's first
	// command.
	NewLoop(l Loop) LoopBackend
}

// Loop is one event loop of the front end, as a backend sees it.
type Loop interface {
	// Enroll moves c, an established connection, onto this loop: its
	// events go to p, on the loop (p.Open first). c itself is closed
	// either way: the loop works on a duplicate of its descriptor. Enroll
	// blocks until the connection is on the loop, or ctx ends (a loop that
	// stopped never takes it): call it off the loop. c must be a
	// *net.TCPConn or a *net.UnixConn.
	Enroll(ctx context.Context, c net.Conn, p LoopPeer) error
	// Execute runs f on the loop, soon; it may be called from any
	// goroutine. Functions queued during one pass of the loop run after
	// the pass has handled its input (so a function queued while reading
	// clients runs once they have all been read).
	Execute(f func()) error
}

// LoopPeer receives the events of a connection enrolled on a loop. Its
// methods run on that loop.
type LoopPeer interface {
	// Open says the connection is on the loop; w writes to it and closes
	// it, on the loop only.
	Open(w LoopWriter)
	// Traffic offers the bytes received and not yet consumed; it returns
	// how many it consumed (the rest is offered again with what comes
	// next).
	Traffic(in []byte) int
	// Closed says the connection is closed (by either side); err is why,
	// nil when it was closed on request.
	Closed(err error)
}

// LoopWriter writes to a connection on a loop. Its methods must be called
// on that loop.
type LoopWriter interface {
	// Write sends b, keeping what the socket does not take now; b may be
	// reused as soon as Write returns.
	Write(b []byte) error
	// Close closes the connection; Closed follows.
	Close() error
}

// LoopBackend is a backend's part of one event loop. Its methods run on
// that loop and never block. A Start method either takes the command and
// returns true, and then calls done exactly once, later, on the same loop
// (never from within the Start call), with what the Backend's own method
// would have returned; or returns false and does nothing, and the caller
// runs the command the ordinary way.
type LoopBackend interface {
	// StartSet is Set, started on the loop; deadline is the command's, h
	// its client (HolderOf the context Set would have had).
	StartSet(h *Holder, db int, key string, token []byte, o SetOptions, deadline time.Time, done func(SetResult, error)) bool
	// StartEval is Eval, started on the loop; deadline is the command's, h
	// its client.
	StartEval(h *Holder, db int, s Script, keys []string, args [][]byte, ro bool, deadline time.Time, done func(Value, error)) bool
	// StartGet is Get, started on the loop; deadline is the command's.
	StartGet(db int, key string, deadline time.Time, done func(token []byte, ok bool, err error)) bool
	// StartPTTL is PTTL, started on the loop; deadline is the command's.
	StartPTTL(db int, key string, deadline time.Time, done func(int64, error)) bool
}
