package quorum

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// parseRESP turns a node's raw RESP3 reply into a Value with its exact
// type: a script's status reply stays a status, not a bulk string, and a
// double stays a double (go-redis' parsed replies tell neither apart). The
// proxy renders the Value for its client's protocol, as Redis would have.
func parseRESP(raw []byte) (backend.Value, error) {
	v, rest, err := parseValue(raw)
	if err == nil && len(rest) != 0 {
		err = errors.New("quorum: trailing bytes after a node reply")
	}
	return v, err
}

var errShortReply = errors.New("quorum: truncated node reply")

func parseValue(b []byte) (backend.Value, []byte, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 1 {
		return backend.Value{}, nil, errShortReply
	}
	line, rest := b[1:i], b[i+2:]
	switch b[0] {
	case '+':
		return backend.Status(string(line)), rest, nil
	case '-':
		return backend.ErrorValue(string(line)), rest, nil
	case ':':
		n, err := strconv.ParseInt(string(line), 10, 64)
		return backend.Int(n), rest, err
	case '$':
		n, err := strconv.Atoi(string(line))
		if err != nil {
			return backend.Value{}, nil, err
		}
		if n < 0 {
			return backend.NilValue, rest, nil
		}
		if len(rest) < n+2 {
			return backend.Value{}, nil, errShortReply
		}
		return backend.Bulk(append([]byte(nil), rest[:n]...)), rest[n+2:], nil
	case '_':
		return backend.NilValue, rest, nil
	case ',':
		f, err := strconv.ParseFloat(string(line), 64)
		return backend.Value{Kind: backend.KindDouble, Float: f}, rest, err
	case '#':
		return backend.Value{Kind: backend.KindBool, Int: map[bool]int64{true: 1}[string(line) == "t"]}, rest, nil
	case '(':
		return backend.Value{Kind: backend.KindBigNumber, Str: []byte(string(line))}, rest, nil
	case '=':
		n, err := strconv.Atoi(string(line))
		if err != nil || n < 4 || len(rest) < n+2 {
			return backend.Value{}, nil, errShortReply
		}
		return backend.Value{Kind: backend.KindVerbatim, Str: append([]byte(nil), rest[4:n]...)}, rest[n+2:], nil
	case '*', '~', '%':
		n, err := strconv.Atoi(string(line))
		if err != nil {
			return backend.Value{}, nil, err
		}
		if n < 0 {
			return backend.Value{Kind: backend.KindNilArray}, rest, nil
		}
		kind := map[byte]backend.Kind{'*': backend.KindArray, '~': backend.KindSet, '%': backend.KindMap}[b[0]]
		if kind == backend.KindMap {
			n *= 2
		}
		elems := make([]backend.Value, n)
		for k := range elems {
			if elems[k], rest, err = parseValue(rest); err != nil {
				return backend.Value{}, nil, err
			}
		}
		return backend.Value{Kind: kind, Elems: elems}, rest, nil
	}
	return backend.Value{}, nil, errors.New("quorum: unexpected reply type " + strconv.Quote(string(b[:1])))
}
