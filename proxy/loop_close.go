package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// How a connection on the event loops ends. gnet's own close (the Close
// action) makes one non-blocking attempt to write what it still holds for
// the client, and it closes a connection as soon as a read finds the end
// of stream. Three things here make the event-loop front end end
// connections as the goroutine front end and redis-server do:
//
//   - linger: a close the loop decides (QUIT, a limit refusal, a drain, an
//     idle timeout, a panic) waits until the client has taken every reply
//     gnet holds, as long as it keeps taking them (lingerStall);
//   - detach: a client that shuts down its writing half while a command
//     runs off the loop still gets that command's reply and those of the
//     commands it pipelined after it, written by a goroutine on a
//     duplicate of the socket (gnet closes its own descriptor);
//   - bounds: input held behind a running command, and replies the client
//     does not take, are bounded (maxQueryBytes, maxOutputBytes).
//
// What a client sees, point by point (each has a test on real sockets):
//   - A close the server decides comes after the client has taken every
//     reply before it; a client that takes nothing for lingerStall is
//     closed with its replies cut (the goroutine front end would wait on
//     it until the drain's deadline).
//   - A client that shuts down its writing half while a command runs off
//     the loop gets that command's reply and those of the complete
//     commands it pipelined after it; gnet has no half-close state, so the
//     connection is finished on a goroutine, on a duplicate of the socket
//     taken in OnClose, with one write bounded by lingerStall. redis-server
//     answers such a client too (it runs the commands it read before the
//     end of stream). Like redis-server, a half-closed client whose
//     earlier replies are still unsent when the end of stream is read
//     loses them; the goroutine front end would deliver them. A blocking
//     pop still waiting when the end of stream comes is the exception, on
//     both front ends: it ends at once, taking nothing, and the connection
//     closes without its reply or the commands after it, as redis-server
//     frees a blocked client whose end of stream it reads (blocking.go).
//   - gnet cannot stop reading a connection, so what a client sends while
//     a command runs off the loop is held up to twice MaxRequestBytes;
//     past that the client is closed and the server logs "closing client
//     that reached max query buffer length", as Redis does past
//     client-query-buffer-limit. The goroutine front end stops reading
//     instead (TCP holds the client back).
//   - Replies a client does not take are held up to eight times
//     MaxRequestBytes; past that the client is closed at once ("closing
//     client that reached max output buffer length"). Redis's limit for
//     normal clients is unlimited by default; this bound differs on
//     purpose (no unbounded per-connection buffer). The goroutine front
//     end blocks on its write and stops reading instead.

// lingerPoll is how often a closing connection checks whether the client
// took its output (gnet reports no write progress).
const lingerPoll = 5 * time.Millisecond

// lingerStall ends a closing connection whose client has taken none of its
// output for this long; it also bounds the write of a detached connection.
// A variable for the test of the stall.
var lingerStall = 10 * time.Second

// lingerState is a closing connection's progress; it belongs to the loop.
type lingerState struct {
	on    bool
	left  int         // output gnet held at the last check
	since time.Time   // when the client last took output
	armed atomic.Bool // a lingerPoll wake-up is pending
}

// closeAfterOutput closes c once gnet has written everything it holds for
// it: at once when nothing is left, else it stops taking commands and
// lingers.
func (lc *loopConn) closeAfterOutput(c gnet.Conn) gnet.Action {
	n := c.OutboundBuffered()
	if n == 0 {
		return gnet.Close
	}
	lc.closing.on, lc.closing.left, lc.closing.since = true, n, time.Now()
	lc.armLinger()
	return gnet.None
}

// linger runs on every wake-up of a closing connection.
func (lc *loopConn) linger(c gnet.Conn) gnet.Action {
	n := c.OutboundBuffered()
	if n == 0 {
		return gnet.Close
	}
	if now := time.Now(); n < lc.closing.left {
		lc.closing.left, lc.closing.since = n, now
	} else if now.Sub(lc.closing.since) >= lingerStall {
		lc.s.log.Warn("closing a client that took no reply for a while; its replies are cut",
			"conn_id", lc.cl.id, "addr", lc.cl.addr, "unsent", n, "waited", lingerStall)
		return gnet.Close
	}
	lc.armLinger()
	return gnet.None
}

func (lc *loopConn) armLinger() {
	if lc.closing.armed.CompareAndSwap(false, true) {
		time.AfterFunc(lingerPoll, func() {
			lc.closing.armed.Store(false)
			lc.wake() // ignored by gnet once the connection is closed
		})
	}
}

// maxQueryBytes bounds the input a connection holds while a command runs
// off the loop: room for one command at MaxRequestBytes and as much again
// of commands pipelined behind it. The goroutine front end stops reading
// instead; gnet cannot pause reading a connection, so past the bound the
// client is closed, as Redis closes one past client-query-buffer-limit.
func (s *Server) maxQueryBytes() int { return int(2 * s.cfg.MaxRequestBytes) }

// maxOutputBytes bounds the replies gnet holds for a client that does not
// take them: eight replies of MaxRequestBytes (64 MiB by default). Past it
// the client is closed, as Redis closes one past client-output-buffer-limit
// (whose default for normal clients is no limit; the goroutine front end
// blocks on the write instead, and stops reading).
func (s *Server) maxOutputBytes() int { return int(8 * s.cfg.MaxRequestBytes) }

// checkQuery closes a busy connection whose held input passed
// maxQueryBytes.
func (lc *loopConn) checkQuery() gnet.Action {
	if len(lc.in) <= lc.s.maxQueryBytes() {
		return gnet.None
	}
	lc.over = "query"
	return lc.closeOver()
}

// checkOutput reports whether the batch's replies took the connection
// past maxOutputBytes.
func (lc *loopConn) checkOutput() bool {
	if lc.finishing || lc.sent+len(lc.out) <= lc.s.maxOutputBytes() {
		return false
	}
	lc.over = "output"
	return true
}

// closeOver closes a connection that broke a buffer bound, without
// writing the batch's replies.
func (lc *loopConn) closeOver() gnet.Action {
	switch lc.over {
	case "query":
		lc.s.log.Warn("closing client that reached max query buffer length",
			"conn_id", lc.cl.id, "addr", lc.cl.addr, "qbuf", len(lc.in), "max", lc.s.maxQueryBytes())
	case "pubsub":
		lc.s.log.Warn("closing subscriber that reached the pubsub output buffer limits",
			"conn_id", lc.cl.id, "addr", lc.cl.addr, "obuf", lc.sent+len(lc.out))
	default:
		lc.s.log.Warn("closing client that reached max output buffer length",
			"conn_id", lc.cl.id, "addr", lc.cl.addr, "obuf", lc.sent+len(lc.out), "max", lc.s.maxOutputBytes())
	}
	lc.in, lc.out = nil, nil
	return gnet.Close
}

// offLoop reports whether commands run on a goroutine that may block: a
// detached connection's.
func (lc *loopConn) offLoop() bool { return lc.finishing }

// detach takes over a connection gnet closes because its client shut down
// its writing half (or went away) while a command runs off the loop: the
// goroutine of that command (or a new one, when its result is already
// back) finishes it on a duplicate of the socket. It reports false when
// the connection cannot be finished: gnet closed it for another reason,
// or replies gnet holds would not go out first.
func (lc *loopConn) detach(c gnet.Conn, err error) bool {
	if !errors.Is(err, io.EOF) {
		return false
	}
	if c.Flush(); c.OutboundBuffered() > 0 {
		return false // earlier replies would be cut before this one
	}
	fd, derr := c.Dup()
	if derr != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "")
	nc, derr := net.FileConn(f)
	f.Close()
	if derr != nil {
		return false
	}
	lc.mu.Lock()
	lc.gone, lc.detached = true, nc
	r := lc.done
	lc.mu.Unlock()
	if r != nil { // the result is back: no goroutine waits to finish
		go lc.finish(nc, *r)
	}
	return true
}

// finish answers a detached connection: r's reply, then the complete
// commands pipelined after it, all on this goroutine, one blocking write
// bounded by lingerStall; then the connection is closed and forgotten.
func (lc *loopConn) finish(nc net.Conn, r result) {
	lc.finishing = true
	lc.out = lc.cl.appendReply(lc.out[:0], r)
	if !r.panicked && !lc.cl.closeNow {
		lc.serve(lc.in)
	}
	nc.SetWriteDeadline(time.Now().Add(lingerStall))
	nc.Write(lc.out)
	nc.Close()
	lc.cl.cancel()
	lc.cl.closeUpstream()
	lc.s.forget(lc.cl)
}
