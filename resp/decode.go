package resp

import (
	"bytes"
	"errors"
	"math"
	"strconv"

	"github.com/lockproxy/lockproxy/backend"
)

// ErrProtocol is a reply that is not RESP, or breaks a limit: the stream
// cannot be trusted past it.
var ErrProtocol = errors.New("resp: malformed reply")

// Limits of the decoder.
const (
	MaxBulk  = 512 << 20 // one string: Redis's proto-max-bulk-len default
	MaxElems = 1 << 24   // the count in one aggregate's header (a map counts pairs)
	// MaxDepth bounds nesting, so that a hostile stream cannot exhaust the
	// stack. Redis's Lua stack (LUAI_MAXCSTACK 8000) keeps a script's reply
	// well below it.
	MaxDepth = 10000
)

// maxNumLine is the longest body of a line holding a length or an integer
// (ParseInt accepts no more): past it without a '\n' the line is wrong.
const maxNumLine = 20

// Decode decodes the first reply in b with its exact type: a status stays
// a status, a double a double, an error reply is a KindError Value. It
// returns the reply and how many bytes of b it took. n == 0 with a nil
// error means b holds only the start of a reply (or nothing): call again
// with more bytes. An error is ErrProtocol.
func Decode(b []byte) (v backend.Value, n int, err error) {
	if aggregate(b) {
		return decodeWhole(b)
	}
	return decode(b, 0) // a scalar allocates only once it is whole
}

// decodeWhole decodes an aggregate once a scan found its end.
func decodeWhole(b []byte) (backend.Value, int, error) {
	var stack [16]int64 // pending's first array: Decode allocates nothing for a reply it does not take
	_, n, err := (scanner{pending: stack[:0]}).scan(b)
	if n == 0 {
		return backend.Value{}, 0, err
	}
	return decode(b[:n], 0)
}

// aggregate reports whether b starts with an aggregate's header: a reply
// that is scanned to its end before it is decoded (scan.go).
func aggregate(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	switch b[0] {
	case '*', '~', '%', '|':
		return true
	}
	return false
}

func decode(b []byte, depth int) (backend.Value, int, error) {
	if len(b) == 0 {
		return backend.Value{}, 0, nil
	}
	if depth > MaxDepth {
		return backend.Value{}, 0, ErrProtocol
	}
	switch typ := b[0]; typ {
	case ':', '$', '=', '!', '*', '~', '%', '|':
		body, n, err := line(b, maxNumLine)
		if n == 0 {
			return backend.Value{}, 0, err
		}
		num, ok := ParseInt(body)
		if !ok {
			return backend.Value{}, 0, ErrProtocol
		}
		switch typ {
		case ':':
			return backend.Int(num), n, nil
		case '$', '=', '!':
			return decodeString(b, typ, n, num)
		}
		return decodeAggregate(b, typ, n, num, depth)
	case '+', '-', '_', '#', ',', '(':
		body, n, err := line(b, MaxBulk)
		if n == 0 {
			return backend.Value{}, 0, err
		}
		v, ok := decodeLine(typ, body)
		if !ok {
			return backend.Value{}, 0, ErrProtocol
		}
		return v, n, nil
	}
	return backend.Value{}, 0, ErrProtocol
}

// line finds the line at the start of b (a type byte, a body of at most
// max bytes, CRLF) and returns its body and its length; n == 0 with a nil
// error when the line has not ended yet.
func line(b []byte, max int) (body []byte, n int, err error) {
	lim := min(len(b), max+3)
	i := bytes.IndexByte(b[:lim], '\n')
	switch {
	case i < 0 && len(b) >= max+3:
		return nil, 0, ErrProtocol
	case i < 0:
		return nil, 0, nil
	case i < 2 || b[i-1] != '\r':
		return nil, 0, ErrProtocol
	}
	return b[1 : i-1], i + 1, nil
}

// decodeLine decodes the one-line types.
func decodeLine(typ byte, body []byte) (backend.Value, bool) {
	switch typ {
	case '+':
		return backend.Value{Kind: backend.KindStatus, Str: bytes.Clone(body)}, true
	case '-':
		return backend.Value{Kind: backend.KindError, Str: bytes.Clone(body)}, true
	case '_':
		return backend.NilValue, true
	case '#':
		return backend.Value{Kind: backend.KindBool, Int: b2i(len(body) == 1 && body[0] == 't')}, true
	case ',':
		if string(body) == "-nan" { // Redis's %.17g of a negative NaN; Go does not parse it
			return backend.Value{Kind: backend.KindDouble, Float: math.Copysign(math.NaN(), -1)}, true
		}
		f, err := strconv.ParseFloat(string(body), 64)
		return backend.Value{Kind: backend.KindDouble, Float: f}, err == nil
	}
	// '('
	return backend.Value{Kind: backend.KindBigNumber, Str: bytes.Clone(body)}, true
}

// decodeString decodes a bulk string, a verbatim string or a bulk error
// of size bytes whose header line took hdr bytes. A negative size is the
// nil reply.
func decodeString(b []byte, typ byte, hdr int, size int64) (backend.Value, int, error) {
	n, _, err := stringEnd(b, typ, hdr, size)
	switch {
	case n == 0:
		return backend.Value{}, 0, err
	case size < 0:
		return backend.NilValue, n, nil
	}
	end := n - 2
	switch typ {
	case '!':
		return backend.Value{Kind: backend.KindError, Str: bytes.Clone(b[hdr:end])}, n, nil
	case '=':
		return backend.Value{Kind: backend.KindVerbatim, Str: bytes.Clone(b[hdr+4 : end])}, n, nil
	}
	return backend.Bulk(bytes.Clone(b[hdr:end])), n, nil
}

// decodeAggregate decodes an array, set, map or attribute of count
// elements (pairs for a map or attribute) whose header took hdr bytes. A
// negative count is the nil array. An attribute is dropped: the reply is
// the value after it.
func decodeAggregate(b []byte, typ byte, hdr int, count int64, depth int) (backend.Value, int, error) {
	if count > MaxElems {
		return backend.Value{}, 0, ErrProtocol
	}
	if count < 0 {
		return backend.Value{Kind: backend.KindNilArray}, hdr, nil
	}
	kind := backend.KindArray
	switch typ {
	case '~':
		kind = backend.KindSet
	case '%', '|':
		kind, count = backend.KindMap, 2*count
	}
	if int64(len(b)-hdr) < 3*count { // each element takes 3 bytes at least (decode sees scanned replies: a defence)
		return backend.Value{}, 0, nil
	}
	elems := make([]backend.Value, count)
	off := hdr
	for i := range elems {
		e, n, err := decode(b[off:], depth+1)
		if n == 0 {
			return backend.Value{}, 0, err
		}
		elems[i] = e
		off += n
	}
	if typ == '|' {
		v, n, err := decode(b[off:], depth+1)
		if n == 0 {
			return backend.Value{}, 0, err
		}
		return v, off + n, nil
	}
	return backend.Value{Kind: kind, Elems: elems}, off, nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// ParseInt parses a RESP integer or length: decimal digits after an
// optional '-', within int64, at most 20 bytes, without allocating.
func ParseInt(b []byte) (int64, bool) {
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
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (1<<63)/10 { // one more digit passes 1<<63
			return 0, false
		}
		n = n*10 + uint64(c-'0')
		if n > 1<<63 {
			return 0, false
		}
	}
	switch {
	case neg:
		return -int64(n), true // -(1<<63) wraps to itself: MinInt64
	case n == 1<<63:
		return 0, false
	}
	return int64(n), true
}

// ParseLength parses a request's count or length line ("12\r", without
// its '\n') as Redis does: decimal, no sign but '-', no leading zeros, at
// most 18 digits, a trailing '\r'.
func ParseLength(b []byte) (int64, bool) {
	if len(b) < 2 || b[len(b)-1] != '\r' {
		return 0, false
	}
	b = b[:len(b)-1]
	digits := b
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	return ParseInt(b)
}
