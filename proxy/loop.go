package proxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/tidwall/redcon"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// The event-loop front end (Config.DataPath "loops"): a few gnet event
// loops own the client connections. Each loop reads what a connection
// sent, runs its complete commands one after the other through the same
// client state and command table as the goroutine front end, appends
// their replies to one buffer and writes it once per batch. A command that
// may block (any command that reaches a backend that is not
// backend.Immediate, and passthrough) runs on a goroutine of its own; the
// connection takes no further command until its reply is back on the loop,
// so replies keep their order. See loopConn.

// loopHandler is gnet's event handler for client connections.
type loopHandler struct {
	gnet.BuiltinEventEngine
	s     *Server
	loops *loopBackends // the backend's part of each loop (loop_backend.go)
}

// loopConn is one client connection on an event loop. Its fields belong
// to the loop, except those under mu (the hand-off with the goroutine
// running a blocking command), lastActive (read by the idle sweep) and
// closing.armed; once detached (loop_close.go), to the goroutine that
// finishes it.
type loopConn struct {
	s         *Server
	cl        *client
	gc        gnet.Conn
	f         framing  // Redis's request limits, as limitConn applies them
	in        []byte   // bytes received and not yet run (see serve)
	scanned   int      // how many bytes of the batch framing has passed
	out       []byte   // the replies of the batch, written once
	argv      [][]byte // ReadNextCommand's reusable argument slice
	busy      bool     // a command runs off the loop; the loop waits for it
	sent      int      // output gnet held at the start of the batch (the output bound)
	over      string   // a buffer bound the client broke: close at once (loop_close.go)
	finishing bool     // a goroutine finishes a half-closed connection: everything runs on it
	closing   lingerState

	lb backend.LoopBackend // the backend's part of this loop, or nil (loop_backend.go)
	rs *resumer            // the loop's resumer, when lb is not nil (loop_backend.go)

	lastActive atomic.Int64 // unix nanoseconds of the last input or reply

	mu       sync.Mutex
	done     *result  // the off-loop command's result, not yet taken by the loop
	res      *result  // where done points (handBack): made once, at the first result
	gone     bool     // the connection closed: the goroutine cleans up instead
	detached net.Conn // the half-closed connection the goroutine finishes on (loop_close.go)
}

func newLoopConn(s *Server, addr string) *loopConn {
	lc := &loopConn{s: s, f: framing{max: s.cfg.MaxRequestBytes}}
	lc.cl = newClient(s, addr)
	lc.cl.lc = lc
	return lc
}

// wake makes the loop look at the connection again (drain, idle timeout).
func (lc *loopConn) wake() { lc.gc.Wake(nil) }

func (h *loopHandler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if pc, ok := c.Context().(*peerConn); ok { // a backend's connection (loop_backend.go)
		return pc.open(c)
	}
	lc := c.Context().(*loopConn)
	if p := h.loops.of(c); p != nil {
		lc.lb, lc.rs = p.lb, p.rs
	}
	lc.gc = c
	lc.cl.out.setNotify(lc.wake) // a message for it: its next pass writes it (pubsub.go)
	lc.lastActive.Store(time.Now().UnixNano())
	if !h.s.register(lc.cl) {
		return nil, gnet.Close
	}
	return nil, gnet.None
}

func (h *loopHandler) OnClose(c gnet.Conn, err error) gnet.Action {
	if pc, ok := c.Context().(*peerConn); ok { // a backend's connection (loop_backend.go)
		pc.closed(err)
		return gnet.None
	}
	lc := c.Context().(*loopConn)
	lc.cl.hangUp() // a blocked command ends at once, taking nothing (blocking.go)
	if lc.busy && lc.detach(c, err) {
		return gnet.None // a goroutine finishes the half-closed connection
	}
	lc.mu.Lock()
	lc.gone = true
	running := lc.busy && lc.done == nil
	lc.mu.Unlock()
	lc.cl.cancel()
	if running {
		// The goroutine running the command closes the upstream and
		// forgets the client when the command ends: until then the client
		// counts, so a drain waits for its command (the process closes the
		// backend right after Shutdown returns).
		return gnet.None
	}
	lc.cl.closeUpstream()
	h.s.forget(lc.cl)
	return gnet.None
}

// OnTraffic runs on new input and on every wake-up: a blocking command's
// result, a drain, an idle check.
func (h *loopHandler) OnTraffic(c gnet.Conn) gnet.Action {
	if pc, ok := c.Context().(*peerConn); ok { // a backend's connection (loop_backend.go)
		return pc.traffic(c)
	}
	lc := c.Context().(*loopConn)
	data, _ := c.Next(-1)
	if lc.closing.on {
		return lc.linger(c) // input after the close is dropped, as Redis does after QUIT
	}
	active := len(data) > 0
	act := gnet.None
	lc.sent = c.OutboundBuffered()
	if lc.busy {
		r := lc.take()
		if r == nil { // the input waits behind the running command
			lc.in = append(lc.in, data...)
			return lc.checkQuery()
		}
		lc.busy, active = false, true
		lc.out = lc.cl.appendReply(lc.out, *r)
		if r.panicked || lc.cl.closeNow {
			act = gnet.Close
		}
		*r = result{} // lc.res: keep no reply's values past it
	}
	if act == gnet.None {
		act = lc.serveInput(data)
	}
	if act == gnet.None && !lc.busy && lc.cl.out.pending.Load() {
		// Messages after the replies of this pass, never before the reply
		// to the SUBSCRIBE that asked for them.
		var over bool
		if lc.out, over = lc.cl.out.take(lc.out, c.OutboundBuffered()); over {
			lc.over = "pubsub"
		}
	}
	if lc.over != "" {
		return lc.closeOver()
	}
	if len(lc.out) > 0 {
		c.Write(lc.out) // gnet keeps what the socket does not take now
		lc.out = lc.out[:0]
		if cap(lc.out) > 64<<10 {
			lc.out = nil // do not keep a big reply's buffer per connection
		}
	}
	if act == gnet.None && !lc.busy {
		act = lc.afterBatch(active)
	}
	if act == gnet.Close {
		return lc.closeAfterOutput(c) // deliver what gnet still holds first
	}
	return act
}

// afterBatch closes a connection that has nothing running when the
// server drains or it has been idle for Config.IdleTimeout.
func (lc *loopConn) afterBatch(active bool) gnet.Action {
	if lc.s.drain.Load() {
		return gnet.Close
	}
	if idle := lc.s.cfg.IdleTimeout; idle > 0 {
		now := time.Now().UnixNano()
		if active {
			lc.lastActive.Store(now)
		} else if now-lc.lastActive.Load() >= int64(idle) {
			return gnet.Close
		}
	}
	return gnet.None
}

// serveInput runs the complete commands of what is held plus data, and
// keeps the rest (a partial command, or the commands after one running off
// the loop) in lc.in. data is gnet's buffer: it is used in place when
// nothing is held, the common case, and copied only for what is kept.
func (lc *loopConn) serveInput(data []byte) gnet.Action {
	buf := data
	if len(lc.in) > 0 {
		lc.in = append(lc.in, data...)
		buf = lc.in
	}
	used, act := lc.serve(buf)
	lc.scanned -= used
	switch rest := buf[used:]; {
	case len(rest) == 0:
		lc.in = lc.in[:0]
		if cap(lc.in) > 64<<10 {
			lc.in = nil
		}
	case len(lc.in) > 0:
		lc.in = lc.in[:copy(lc.in, rest)]
	default:
		lc.in = append(lc.in, rest...)
	}
	return act
}

// serve runs the complete commands at the start of buf and returns how
// many bytes they took. Bytes are run only after framing has passed them
// (lc.scanned), with the limits as they stand after the commands before
// them, as limitConn does on the goroutine front end: a refusal's reply
// follows the replies to the commands before it. A plainly framed command
// at a command boundary takes the quick path instead (quick), which
// passes and parses it in one step.
func (lc *loopConn) serve(buf []byte) (int, gnet.Action) {
	used := 0
	for {
		if used == lc.scanned && lc.f.state == fStart {
			if args, n := lc.quick(buf[used:]); n > 0 {
				used += n
				lc.scanned = used
				if act, stop := lc.runArgs(args); stop {
					return used, act
				}
				continue
			}
		}
		for used < lc.scanned {
			args, n, err := lc.next(buf[used:lc.scanned])
			if err != nil { // redcon's own reply to a protocol error
				lc.out = append(append(append(lc.out, "-ERR "...), err.Error()...), '\r', '\n')
				return used, gnet.Close
			}
			if n == 0 {
				break // a partial command
			}
			used += n
			if act, stop := lc.runArgs(args); stop {
				return used, act
			}
		}
		if lc.scanned == len(buf) {
			return used, gnet.None
		}
		ok, reply := lc.f.scan(buf[lc.scanned:], lc.cl.authed)
		if reply != "" {
			lc.out = append(append(append(lc.out, '-'), reply...), '\r', '\n')
			return used, gnet.Close
		}
		lc.scanned += ok
	}
}

// runArgs runs one command of serve's; stop means serve returns now, with
// act: the command runs off the loop, or the connection closes.
func (lc *loopConn) runArgs(args [][]byte) (act gnet.Action, stop bool) {
	if len(args) == 0 {
		return gnet.None, false // an empty inline line
	}
	if !lc.offLoop() && lc.cl.blocking(args) {
		if !lc.startOnLoop(args) { // else the backend runs it on the loop (loop_backend.go)
			lc.runOff(cloneArgs(args))
		}
		clear(args)
		return gnet.None, true
	}
	r := lc.cl.run(args)
	clear(args) // argv must not keep a big input buffer alive
	lc.out = lc.cl.appendReply(lc.out, r)
	if r.panicked || lc.cl.closeNow || lc.checkOutput() {
		return gnet.Close, true
	}
	return gnet.None, false
}

// quickParse turns the quick path off, for the test that compares it with
// framing and redcon.
var quickParse = true

// quick parses the multibulk command at the start of b when it is
// complete, plainly framed and within every request limit: a count and
// lengths of at most 9 digits without sign or leading zero, each line
// ending in CRLF, each bulk string followed by CRLF. Framing would pass
// such a command whole, ending at a command boundary, and redcon would
// read the same arguments from it, so the bytes are parsed once instead of
// twice. n is 0 for anything else (incomplete, unusual, over a limit):
// framing and redcon then take it, and word any refusal.
func (lc *loopConn) quick(b []byte) (args [][]byte, n int) {
	if !quickParse || len(b) == 0 || b[0] != '*' {
		return nil, 0
	}
	count, i := plainLength(b, 1)
	authed, max := lc.cl.authed, lc.f.max
	if i == 0 || count == 0 || int64(count) > max/6 || (!authed && count > maxUnauthArgs) {
		return nil, 0
	}
	args = lc.argv[:0]
	for range count {
		if i >= len(b) || b[i] != '$' {
			return nil, 0
		}
		size, j := plainLength(b, i+1)
		if j == 0 || (!authed && size > maxUnauthBulkBytes) {
			return nil, 0
		}
		end := j + size
		if end+2 > len(b) || int64(end+2) > max || b[end] != '\r' || b[end+1] != '\n' {
			return nil, 0
		}
		args = append(args, b[j:end])
		i = end + 2
	}
	lc.argv = args[:0]
	return args, i
}

// plainLength reads the digits of a count or length line at b[i:] up to
// its CRLF: at most 9 digits, no sign, no leading zero. It returns the
// number and the index after the line, or next 0 when the line is not
// complete or not plain.
func plainLength(b []byte, i int) (n, next int) {
	start := i
	for ; i < len(b) && i-start <= 9; i++ {
		c := b[i]
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	digits := i - start
	if digits == 0 || digits > 9 || (b[start] == '0' && digits > 1) || i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
		return 0, 0
	}
	return n, i + 2
}

// next parses the command at the start of b as redcon's server does: n is
// 0 when it is not complete; args is empty for an empty inline line.
func (lc *loopConn) next(b []byte) (args [][]byte, n int, err error) {
	if b[0] == '*' {
		if nl := bytes.IndexByte(b, '\n'); nl > 0 {
			if count, ok := resp.ParseLength(b[1:nl]); ok && count <= 0 {
				return nil, nl + 1, nil // an empty or null array: no command, as in Redis
			}
		}
		complete, args, _, rest, err := redcon.ReadNextCommand(b, lc.argv)
		if err != nil || !complete {
			return nil, 0, err
		}
		lc.argv = args[:0]
		return args, len(b) - len(rest), nil
	}
	// An inline command. ReadNextCommand would take a line starting with
	// '$' for Tile38's protocol; redcon's server reads any line that does
	// not start with '*' as inline, and so does redcon.Parse.
	i := 0
	for i < len(b) && b[i] != '\n' {
		i++
	}
	if i == len(b) {
		return nil, 0, nil
	}
	if blankLine(b[:i]) {
		return nil, i + 1, nil
	}
	cmd, err := redcon.Parse(b[:i+1])
	if err != nil {
		return nil, 0, err
	}
	return cmd.Args, i + 1, nil
}

// blankLine reports whether an inline line holds no argument: only
// spaces, before an optional '\r'.
func blankLine(line []byte) bool {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	for _, c := range line {
		if c != ' ' {
			return false
		}
	}
	return true
}

// runOff runs a blocking command on a goroutine; its result comes back to
// the loop through wake, and the connection takes nothing else meanwhile.
func (lc *loopConn) runOff(args [][]byte) {
	lc.busy = true
	go func() {
		r := lc.cl.run(args)
		if nc := lc.handBack(r, false); nc != nil {
			lc.finish(nc, r) // already off the loop
		}
	}()
}

// handBack gives the loop the result of a command that ran off it (from
// its goroutine) or was started on it (onLoop: called on the loop,
// loop_backend.go). The result waits in lc.res; a command run off the loop
// wakes the loop through gnet, one started on it has the loop's resumer
// give the connection its next pass. When OnClose left the connection to
// the command's end it cleans up instead, and it returns the half-closed
// connection, if any, for the caller to finish (off the loop: finish
// writes and may run more commands).
func (lc *loopConn) handBack(r result, onLoop bool) (detached net.Conn) {
	lc.mu.Lock()
	gone, detached := lc.gone, lc.detached
	if !gone {
		if lc.res == nil {
			lc.res = new(result)
		}
		*lc.res = r
		lc.done = lc.res
	}
	lc.mu.Unlock()
	switch {
	case detached != nil:
		return detached
	case gone:
		lc.cl.closeUpstream()
		lc.s.forget(lc.cl)
	case onLoop:
		lc.rs.add(lc)
	default:
		lc.gc.Wake(nil)
	}
	return nil
}

// take returns the off-loop command's result once it is there.
func (lc *loopConn) take() *result {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	r := lc.done
	lc.done = nil
	return r
}
