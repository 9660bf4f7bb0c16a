package proxy

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// Redis's own request limits that lockproxy applies as Redis does
// (networking.c): an inline command or a length line may not exceed 64 KiB,
// and before AUTH a command may have at most 10 arguments of at most 16 KiB.
const (
	maxInlineBytes     = 64 << 10
	maxHeaderBytes     = 64 << 10
	maxUnauthArgs      = 10
	maxUnauthBulkBytes = 16 << 10
)

// errLimit ends a connection whose request broke a limit (its reply is
// already written).
var errLimit = errors.New("proxy: request over a limit")

// limitConn enforces the request limits that redcon does not (redcon
// buffers a command of any size): it follows the RESP framing of what the
// client sends, a few header bytes at a time, and refuses a command whose
// declared sizes break a limit before its body is read, as Redis does.
//
// A refusal must come after the replies to the commands before it, and
// AUTH earlier in the same read changes the limits. So when a limit is
// broken in the middle of a read, Read hands redcon only the bytes before
// the offending header and keeps the rest: redcon reads again only after
// it has run every complete command it holds and flushed their replies,
// and the check then runs again, now first in its read.
//
// It also applies the idle timeout: each read from the network gets a
// deadline of idle from now (redcon's own SetIdleClose would overwrite the
// deadline wake sets to drain the connection).
//
// Only the connection's own goroutine uses a limitConn, except wake and
// the reader watchEnd starts while that goroutine waits for it.
type limitConn struct {
	net.Conn
	f      framing
	authed func() bool   // nil: no password is required
	held   []byte        // read from Conn, not yet handed to redcon
	idle   time.Duration // 0: never close an idle connection
	woken  atomic.Bool   // wake was called: no later read may wait

	// Pub/sub (pubsub.go), once the connection subscribed: messages go
	// out after the batch's replies (Write), or at once while the
	// connection waits for input (Read, the pusher).
	out  *outbox
	wmu  sync.Mutex
	busy bool // a batch of commands is being served: its replies come first
}

// wake makes the connection's pending or next network read return at
// once, so a draining server can close it after its last batch.
func (c *limitConn) wake() {
	c.woken.Store(true)
	c.Conn.SetReadDeadline(time.Now())
}

func newLimitConn(c net.Conn, max int64) *limitConn {
	return &limitConn{Conn: c, f: framing{max: max, wholeCounts: true}}
}

// Read reads from the connection and passes on the bytes that stay within
// the limits; it answers a request over a limit with Redis's protocol
// error and fails, so redcon closes the connection.
func (c *limitConn) Read(p []byte) (int, error) {
	if c.out != nil {
		c.wmu.Lock()
		c.busy = false
		c.writePushes()
		c.wmu.Unlock()
		defer func() {
			c.wmu.Lock()
			c.busy = true
			c.wmu.Unlock()
		}()
	}
	var n int
	if len(c.held) > 0 {
		n = copy(p, c.held)
		c.held = c.held[n:]
	} else {
		var err error
		if n, err = c.read(p); n == 0 {
			return 0, err
		}
	}
	authed := c.authed == nil || c.authed()
	ok, reply := c.f.scan(p[:n], authed)
	for ok == 0 && reply == "" && len(c.held) == 0 && n < len(p) {
		// A count line held back (framing.wholeCounts) is scanned again
		// with the rest of its line.
		m, err := c.read(p[n:])
		if m == 0 {
			return 0, err
		}
		n += m
		ok, reply = c.f.scan(p[:n], authed)
	}
	if reply != "" {
		c.Conn.Write([]byte("-" + reply + "\r\n"))
		return 0, errLimit
	}
	if ok < n {
		c.held = append(append([]byte(nil), p[ok:n]...), c.held...)
	}
	return ok, nil
}

// maybeEmptyCount reports whether b, which starts with '*', is the start
// of a count line, not yet ended, that may come to say 0 or less.
func maybeEmptyCount(b []byte) bool {
	return len(b) <= 24 && bytes.IndexByte(b, '\n') < 0 && (len(b) == 1 || b[1] == '-' || b[1] == '0')
}

// read reads from the connection under the idle deadline.
func (c *limitConn) read(p []byte) (int, error) {
	if c.idle > 0 {
		c.Conn.SetReadDeadline(time.Now().Add(c.idle))
		if c.woken.Load() { // wake ran before the line above: its deadline must win
			c.Conn.SetReadDeadline(time.Now())
		}
	}
	return c.Conn.Read(p)
}

// watchEnd reads the connection while its goroutine waits in a blocking
// command (blocking.go), as Redis reads a blocked client: the bytes the
// client sends meanwhile are kept for redcon (held, scanned by the next
// Read), up to maxWatchBytes (past them TCP holds the client back), and
// the end of the stream or a failure calls gone. stop ends the watch and
// returns once the read is over. A timeout is not an end: stop and wake
// both end the read through the deadline.
func (c *limitConn) watchEnd(gone func()) (stop func()) {
	c.Conn.SetReadDeadline(time.Time{}) // a blocked client is not idle
	if c.woken.Load() {                 // as in Read: wake's deadline wins
		c.Conn.SetReadDeadline(time.Now())
		return func() {}
	}
	var got []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for len(got) < maxWatchBytes(c.f.max) {
			n, err := c.Conn.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
					gone()
				}
				return
			}
		}
	}()
	return func() {
		c.Conn.SetReadDeadline(time.Now())
		<-done
		c.held = append(c.held, got...)
		c.Conn.SetReadDeadline(time.Time{})
		if c.woken.Load() { // wake ran meanwhile: its deadline must win
			c.Conn.SetReadDeadline(time.Now())
		}
	}
}

// maxWatchBytes bounds what watchEnd keeps: room for one command of max
// bytes and as much again, as the event loops hold (maxQueryBytes).
func maxWatchBytes(max int64) int { return int(2 * max) }

// framing states.
const (
	fStart  = iota // before a command
	fInline        // in an inline command's line
	fCount         // in a "*<count>" line
	fLength        // before or in a "$<length>" line
	fBody          // in a bulk string (its CRLF included)
)

// framing follows the RESP framing of a request stream as redcon splits it:
// a command starting with '*' is a multibulk, anything else an inline line.
type framing struct {
	max int64 // MaxRequestBytes
	// wholeCounts: scan may answer (0, "") to hold back a count line
	// that may be an empty array, at the start of b too, until the
	// caller has read the rest of its line (limitConn).
	wholeCounts bool
	state       uint8
	hdr         [24]byte // the digits of the current count or length line
	hdrLen      int      // its length so far (may exceed len(hdr))
	line        int      // bytes of the current inline line
	args        int      // bulk strings left in the current command
	body        int64    // bytes left in the current bulk string
	size        int64    // bytes of the current multibulk command so far
}

// scan advances over b and returns how many of its bytes may go on now.
// When a limit is broken at b[i], scan stops there: with i > 0 it returns
// i and no reply (the caller holds the rest back and scans it again at the
// next read); with i == 0 it returns the reply that ends the connection.
func (f *framing) scan(b []byte, authed bool) (int, string) {
	stop := func(i int, reply string) (int, string) {
		if i > 0 {
			return i, ""
		}
		return 0, reply
	}
	countAt := -1 // where in b the current count line starts, if it does in b
	for i := 0; i < len(b); {
		switch f.state {
		case fStart:
			if b[i] == '*' {
				if (i > 0 || f.wholeCounts) && maybeEmptyCount(b[i:]) {
					return i, "" // the count line whole in the next read, so an empty one can be blanked there
				}
				f.state, f.hdrLen, f.size = fCount, 0, 1
				countAt = i
				i++
				continue
			}
			if i > 0 && quoted(b[i:]) {
				return i, "" // see quoted
			}
			f.state, f.line = fInline, 0
		case fInline:
			room := min(maxInlineBytes, int(f.max)) - f.line
			nl := bytes.IndexByte(b[i:min(len(b), i+room+1)], '\n')
			if nl >= 0 {
				f.state = fStart
				i += nl + 1
				continue
			}
			take := min(len(b)-i, room)
			f.line += take
			if i += take; i < len(b) {
				return stop(i, backend.MsgTooBigInline)
			}
		case fCount, fLength:
			if f.state == fLength && f.hdrLen == 0 && b[i] != '$' {
				return stop(i, backend.ErrExpectedBulk(printable(b[i])))
			}
			room := maxHeaderBytes - f.hdrLen
			nl := bytes.IndexByte(b[i:min(len(b), i+room+1)], '\n')
			take := nl
			if nl < 0 {
				take = min(len(b)-i, room)
			}
			if f.hdrLen < len(f.hdr) {
				copy(f.hdr[f.hdrLen:], b[i:i+take])
			}
			f.hdrLen += take
			i += take
			switch {
			case nl >= 0:
				if reply := f.header(authed); reply != "" {
					return stop(i, reply)
				}
				if f.state == fStart && countAt >= 0 {
					// A count of 0 or less: Redis reads it as no command.
					// Blanked to an empty inline line, which both readers
					// skip; one begun in an earlier read is skipped by
					// the loop's reader (loopConn.next) alone.
					for j := countAt; j < i; j++ {
						b[j] = ' '
					}
				}
				i++
			case i < len(b) && f.state == fCount:
				return stop(i, backend.MsgTooBigMultibulk)
			case i < len(b):
				return stop(i, backend.MsgTooBigBulk)
			}
		case fBody:
			if f.body > 2 {
				n := min(f.body-2, int64(len(b)-i))
				f.body -= n
				i += int(n)
				continue
			}
			if want := "\n\r"[f.body-1]; b[i] != want { // redcon's check, made here: see quoted
				return stop(i, backend.MsgInvalidBulk)
			}
			i++
			if f.body--; f.body == 0 {
				if f.args--; f.args == 0 {
					f.state = fStart
				} else {
					f.state, f.hdrLen = fLength, 0
				}
			}
		}
	}
	return len(b), ""
}

// header checks the count or length line just ended (its '\n' not yet
// counted) and, when it is within the limits, moves past it.
func (f *framing) header(authed bool) string {
	digits := f.hdr[:min(f.hdrLen, len(f.hdr))]
	if f.state == fLength {
		digits = digits[1:] // the '$'
	}
	n, ok := resp.ParseLength(digits)
	ok = ok && f.hdrLen <= len(f.hdr)
	lineBytes := int64(f.hdrLen) + 1
	if f.state == fCount {
		switch {
		case ok && n <= 0: // an empty or null array: no command (scan blanks it)
			f.state, f.hdrLen = fStart, 0
			return ""
		case !ok || n > f.max/6: // each argument takes at least "$0\r\n\r\n"
			return backend.MsgInvalidMultibulk
		case !authed && n > maxUnauthArgs:
			return backend.MsgUnauthMultibulk
		}
		f.size += lineBytes
		f.state, f.args, f.hdrLen = fLength, int(n), 0
		return ""
	}
	switch {
	case !ok || n < 0 || f.size+lineBytes+n+2 > f.max:
		return backend.MsgInvalidBulk
	case !authed && n > maxUnauthBulkBytes:
		return backend.MsgUnauthBulk
	}
	f.size += lineBytes + n + 2
	f.state, f.body = fBody, n+2
	return ""
}

// quoted reports whether the inline command at the start of b has quotes
// (as far as b goes). redcon drops the complete commands it holds when a
// later one is malformed, so scan hands it a command that may be
// malformed (quotes, for an inline command; a bulk string without its
// CRLF) only first in a read: the replies to the commands before it come
// first, as from Redis.
func quoted(b []byte) bool {
	if nl := bytes.IndexByte(b, '\n'); nl >= 0 {
		b = b[:nl]
	}
	return bytes.ContainsAny(b, "\"'")
}

// printable returns c for an error line: CR and LF would end the line
// early, so they become a space, as in Redis's replies.
func printable(c byte) string {
	if c == '\r' || c == '\n' {
		return " "
	}
	return string([]byte{c})
}
