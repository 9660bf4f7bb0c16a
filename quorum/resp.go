package quorum

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// cmdBuf encodes commands for a node in RESP, back to back: what a stream
// writes as is. The zero cmdBuf is empty.
type cmdBuf struct {
	b []byte
	n int // commands encoded
}

// cmd starts a command of argc arguments; the arguments follow with arg,
// argBytes and argInt.
func (c *cmdBuf) cmd(argc int) {
	c.b = append(c.b, '*')
	c.b = strconv.AppendInt(c.b, int64(argc), 10)
	c.b = append(c.b, '\r', '\n')
	c.n++
}

func (c *cmdBuf) arg(s string) {
	c.b = append(c.b, '$')
	c.b = strconv.AppendInt(c.b, int64(len(s)), 10)
	c.b = append(c.b, '\r', '\n')
	c.b = append(c.b, s...)
	c.b = append(c.b, '\r', '\n')
}

func (c *cmdBuf) argBytes(s []byte) {
	c.b = append(c.b, '$')
	c.b = strconv.AppendInt(c.b, int64(len(s)), 10)
	c.b = append(c.b, '\r', '\n')
	c.b = append(c.b, s...)
	c.b = append(c.b, '\r', '\n')
}

func (c *cmdBuf) argInt(n int64) {
	var tmp [20]byte
	c.argBytes(strconv.AppendInt(tmp[:0], n, 10))
}

// strs encodes one command of string arguments.
func (c *cmdBuf) strs(args ...string) {
	c.cmd(len(args))
	for _, a := range args {
		c.arg(a)
	}
}

// errProtocol is a node reply that is not RESP: the stream cannot be
// trusted past it.
var errProtocol = errors.New("quorum: malformed node reply")

// maxReply bounds one string of a node's reply: Redis's own
// proto-max-bulk-len default.
const maxReply = 512 << 20

// readValue reads one RESP3 reply from r with its exact type: a script's
// status reply stays a status, not a bulk string, and a double stays a
// double. The proxy renders the Value for its client's protocol, as Redis
// would have. An error reply is a KindError Value, not an error: errors are
// the connection's.
func readValue(r *bufio.Reader) (backend.Value, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A line longer than the buffer: a script's long error or status
		// reply (Redis sends errors as one '-' line). Such a reply is the
		// script's business, not a broken node: read it whole, up to the
		// bulk limit.
		long := bytes.Clone(line)
		for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxReply {
			line, err = r.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			err = errProtocol
		}
		return backend.Value{}, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return backend.Value{}, errProtocol
	}
	typ, body := line[0], line[1:len(line)-2]
	switch typ {
	case '+':
		return backend.Value{Kind: backend.KindStatus, Str: bytes.Clone(body)}, nil
	case '-':
		return backend.Value{Kind: backend.KindError, Str: bytes.Clone(body)}, nil
	case ':':
		n, ok := parseInt(body)
		if !ok {
			return backend.Value{}, errProtocol
		}
		return backend.Int(n), nil
	case '_':
		return backend.NilValue, nil
	case '#':
		return backend.Value{Kind: backend.KindBool, Int: b2i(len(body) == 1 && body[0] == 't')}, nil
	case ',':
		f, err := strconv.ParseFloat(string(body), 64)
		if err != nil {
			return backend.Value{}, errProtocol
		}
		return backend.Value{Kind: backend.KindDouble, Float: f}, nil
	case '(':
		return backend.Value{Kind: backend.KindBigNumber, Str: bytes.Clone(body)}, nil
	case '$', '=', '!':
		n, ok := parseInt(body)
		if !ok || n > maxReply {
			return backend.Value{}, errProtocol
		}
		if n < 0 {
			return backend.NilValue, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return backend.Value{}, err
		}
		switch {
		case typ == '!':
			return backend.Value{Kind: backend.KindError, Str: buf[:n]}, nil
		case typ == '=' && n >= 4:
			return backend.Value{Kind: backend.KindVerbatim, Str: buf[4:n]}, nil
		case typ == '=':
			return backend.Value{}, errProtocol
		}
		return backend.Bulk(buf[:n]), nil
	case '*', '~', '%', '|':
		n, ok := parseInt(body)
		if !ok || n > 1<<24 {
			return backend.Value{}, errProtocol
		}
		if n < 0 {
			return backend.Value{Kind: backend.KindNilArray}, nil
		}
		kind := backend.KindArray
		switch typ {
		case '~':
			kind = backend.KindSet
		case '%', '|':
			kind, n = backend.KindMap, 2*n
		}
		elems := make([]backend.Value, n)
		for i := range elems {
			if elems[i], err = readValue(r); err != nil {
				return backend.Value{}, err
			}
		}
		if typ == '|' { // attributes precede the reply they describe
			return readValue(r)
		}
		return backend.Value{Kind: kind, Elems: elems}, nil
	}
	return backend.Value{}, errProtocol
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// parseInt parses a RESP length or integer without allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// sameValue reports whether two replies are the same reply.
func sameValue(a, b backend.Value) bool {
	if a.Kind != b.Kind || a.Int != b.Int || a.Float != b.Float || !bytes.Equal(a.Str, b.Str) || len(a.Elems) != len(b.Elems) {
		return false
	}
	for i := range a.Elems {
		if !sameValue(a.Elems[i], b.Elems[i]) {
			return false
		}
	}
	return true
}
