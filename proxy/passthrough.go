package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/resp"
)

// Upstream is the Redis that Config.Passthrough forwards to.
type Upstream struct {
	// Addr is the upstream's host:port.
	Addr string
	// Username and Password authenticate each upstream connection (AUTH);
	// empty Password: no AUTH.
	Username, Password string
	// Dial opens a connection to Addr, TLS included when wanted.
	// default: a net.Dialer
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Passthrough, in brief: every command that lockproxy does not serve itself
// is written unchanged to an upstream Redis and the upstream's raw reply
// goes back to the client. Each client connection gets its own upstream
// connection, opened at its first forwarded command and closed with it,
// so per-connection state stays where the client expects it: the
// database (the client's SELECT, served by lockproxy, is replayed
// upstream before the next forwarded command) and the protocol (HELLO 3
// likewise). A pool shared by clients could not keep that state.
//
// Not forwarded, with errPassthroughRefused: commands that block or turn
// the connection into a stream (blocking list, zset and stream reads,
// WAIT, sharded pub/sub, MONITOR, replication) and WATCH/UNWATCH, whose
// transactions would be lockproxy's MULTI (BLPOP and BRPOP, which lockproxy
// serves without passthrough, are refused too: the lists are the
// upstream's). Pub/sub is lockproxy's own
// (pubsub.go), never the upstream's: the lock libraries' wake-ups must
// follow the locks, which live in lockproxy. A forwarded command inside
// MULTI is refused too: lockproxy runs the transaction, the upstream
// cannot take part in it.

// notForwarded are the commands passthrough refuses, by name.
var notForwarded = map[string]bool{
	"blpop": true, "brpop": true, "brpoplpush": true, "blmove": true, "blmpop": true,
	"bzpopmin": true, "bzpopmax": true, "bzmpop": true, "wait": true, "waitaof": true,
	"ssubscribe": true, "sunsubscribe": true,
	"monitor": true, "sync": true, "psync": true, "replconf": true,
	"watch": true, "unwatch": true,
}

// forwardable reports why a command may not be forwarded: "" when it may.
func forwardable(name string, args [][]byte) string {
	if notForwarded[name] {
		return name
	}
	if name == "xread" || name == "xreadgroup" {
		for _, a := range args[1:] {
			if strings.EqualFold(string(a), "block") {
				return name + " block"
			}
		}
	}
	return ""
}

func errPassthroughRefused(what string) string {
	return "ERR lockproxy passthrough does not forward '" + what + "' (blocking, pub/sub, MONITOR, replication and WATCH need a direct connection to Redis)"
}

func errPassthroughInMulti(name string) string {
	return "ERR lockproxy passthrough cannot queue '" + name + "' in MULTI: the transaction runs in lockproxy, not in the upstream Redis"
}

const msgPassthroughDown = "TRYAGAIN passthrough: the upstream Redis did not answer"

// upstreamConn is one client's connection to the upstream, with the state
// lockproxy has put it in. Only the client's goroutine uses it.
type upstreamConn struct {
	conn  net.Conn
	rd    *bufio.Reader
	db    int
	resp3 bool
	reply []byte // the last raw reply, reused
}

// passthrough forwards args upstream and returns a value that classifies
// the reply for metrics; the raw reply is left in cl.raw for serveRESP.
func (cl *client) passthrough(args [][]byte) backend.Value {
	ctx, cancel := context.WithTimeout(cl.ctx, cl.s.cfg.CommandTimeout)
	defer cancel()
	raw, err := cl.forward(ctx, args)
	if err != nil {
		if cl.up != nil {
			cl.up.conn.Close() // its state is unknown now: the next command dials again
			cl.up = nil
		}
		cl.s.log.Warn("passthrough failed", "conn_id", cl.id, "upstream", cl.s.cfg.Passthrough.Addr, "err", err)
		return backend.ErrorValue(msgPassthroughDown)
	}
	cl.raw = raw
	switch {
	case raw[0] == '-':
		line := raw[1:]
		if i := strings.IndexByte(string(line), '\r'); i >= 0 {
			line = line[:i]
		}
		return backend.ErrorValue(string(line))
	case string(raw) == "$-1\r\n" || string(raw) == "*-1\r\n" || string(raw) == "_\r\n":
		return backend.NilValue
	}
	return backend.OKValue
}

// forward sends args on the client's upstream connection (dialled and
// brought to the client's database and protocol first) and reads one
// reply.
func (cl *client) forward(ctx context.Context, args [][]byte) ([]byte, error) {
	if cl.up == nil {
		up, err := cl.s.dialUpstream(ctx)
		if err != nil {
			return nil, err
		}
		cl.up = up
	}
	up := cl.up
	if dl, ok := ctx.Deadline(); ok {
		up.conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { up.conn.SetDeadline(time.Now()) }) // drain timed out
	defer stop()
	if up.resp3 != cl.resp3 {
		proto := "2"
		if cl.resp3 {
			proto = "3"
		}
		if err := up.setup(ctx, "HELLO", proto); err != nil {
			return nil, err
		}
		up.resp3 = cl.resp3
	}
	if up.db != cl.db {
		if err := up.setup(ctx, "SELECT", strconv.Itoa(cl.db)); err != nil {
			return nil, err
		}
		up.db = cl.db
	}
	if _, err := up.conn.Write(resp.AppendCommand(nil, args)); err != nil {
		return nil, err
	}
	var err error
	up.reply, err = appendReply(up.rd, up.reply[:0])
	if cap(up.reply) > 64<<10 {
		defer func() { up.reply = nil }() // the caller copies it out first
	}
	return up.reply, err
}

// setup runs a state-changing command upstream and fails on an error reply.
func (up *upstreamConn) setup(ctx context.Context, args ...string) error {
	bs := make([][]byte, len(args))
	for i, a := range args {
		bs[i] = []byte(a)
	}
	if _, err := up.conn.Write(resp.AppendCommand(nil, bs)); err != nil {
		return err
	}
	reply, err := appendReply(up.rd, nil)
	if err != nil {
		return err
	}
	if reply[0] == '-' {
		return fmt.Errorf("upstream %s: %s", strings.ToLower(args[0]), strings.TrimSpace(string(reply[1:])))
	}
	return nil
}

// dialUpstream opens and authenticates a connection to the upstream.
func (s *Server) dialUpstream(ctx context.Context) (*upstreamConn, error) {
	u := s.cfg.Passthrough
	dial := u.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	c, err := dial(ctx, "tcp", u.Addr)
	if err != nil {
		return nil, err
	}
	up := &upstreamConn{conn: c, rd: bufio.NewReader(c)}
	if u.Password != "" {
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		}
		args := []string{"AUTH", u.Password}
		if u.Username != "" {
			args = []string{"AUTH", u.Username, u.Password}
		}
		if err := up.setup(ctx, args...); err != nil {
			c.Close()
			return nil, err // the reply names no password
		}
	}
	return up, nil
}

// closeUpstream closes the client's upstream connection, if any.
func (cl *client) closeUpstream() {
	if cl.up != nil {
		cl.up.conn.Close()
		cl.up = nil
	}
}

// errUpstreamProtocol: the upstream sent something that is not RESP.
var errUpstreamProtocol = errors.New("passthrough: upstream protocol error")

// appendReply reads one whole RESP2 or RESP3 reply from rd, nested values
// and attributes included, and appends its raw bytes to b.
func appendReply(rd *bufio.Reader, b []byte) ([]byte, error) {
	for pending := 1; pending > 0; pending-- {
		start := len(b)
		for {
			line, err := rd.ReadSlice('\n')
			b = append(b, line...)
			if err == nil {
				break
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				return b, err
			}
		}
		line := b[start:]
		if len(line) < 3 || line[len(line)-2] != '\r' {
			return b, errUpstreamProtocol
		}
		switch line[0] {
		case '+', '-', ':', ',', '#', '(', '_':
		case '$', '=', '!', '*', '~', '>', '%', '|':
			n, err := strconv.Atoi(string(line[1 : len(line)-2]))
			if err != nil {
				return b, errUpstreamProtocol
			}
			switch line[0] {
			case '$', '=', '!':
				if n >= 0 {
					body := len(b)
					b = append(b, make([]byte, n+2)...)
					if _, err := io.ReadFull(rd, b[body:]); err != nil {
						return b, err
					}
				}
			case '*', '~', '>':
				pending += max(n, 0)
			case '%':
				pending += 2 * n
			case '|': // attributes come before the reply they describe
				pending += 2*n + 1
			}
		default:
			return b, errUpstreamProtocol
		}
	}
	return b, nil
}
