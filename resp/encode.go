package resp

import (
	"math"
	"strconv"

	"github.com/tidwall/redcon"

	"github.com/lockproxy/lockproxy/backend"
)

// AppendValue renders v in RESP3 or RESP2 and appends it to b, as Redis
// renders the same reply for a connection of that protocol.
func AppendValue(b []byte, v backend.Value, resp3 bool) []byte {
	switch v.Kind {
	case backend.KindNil:
		if resp3 {
			return append(b, "_\r\n"...)
		}
		return redcon.AppendNull(b)
	case backend.KindNilArray:
		if resp3 {
			return append(b, "_\r\n"...)
		}
		return append(b, "*-1\r\n"...)
	case backend.KindStatus:
		return appendLine(append(b, '+'), v.Str)
	case backend.KindError:
		return appendLine(append(b, '-'), v.Str)
	case backend.KindInt:
		return redcon.AppendInt(b, v.Int)
	case backend.KindBulk:
		return redcon.AppendBulk(b, v.Str)
	case backend.KindMap, backend.KindSet, backend.KindArray:
		return appendAggregate(b, v, resp3)
	case backend.KindPairs:
		if !resp3 {
			return appendAggregate(b, v, false)
		}
		b = appendHeader(b, '*', len(v.Elems)/2)
		for i := 0; i+1 < len(v.Elems); i += 2 {
			b = AppendValue(appendHeader(b, '*', 2), v.Elems[i], true)
			b = AppendValue(b, v.Elems[i+1], true)
		}
		return b
	}
	return appendScalar3(b, v, resp3)
}

// appendScalar3 renders the RESP3 scalar kinds, which RESP2 shows as a
// bulk string or an integer. Any other kind is an array, as before.
func appendScalar3(b []byte, v backend.Value, resp3 bool) []byte {
	switch v.Kind {
	case backend.KindDouble:
		if math.IsNaN(v.Float) {
			v.Float = math.NaN() // "nan" whatever its sign: see the package doc
		}
		if resp3 {
			return append(AppendFloat(append(b, ','), v.Float, 17), '\r', '\n')
		}
		var tmp [32]byte
		return redcon.AppendBulk(b, AppendFloat(tmp[:0], v.Float, 17))
	case backend.KindBool:
		switch {
		case resp3 && v.Int != 0:
			return append(b, "#t\r\n"...)
		case resp3:
			return append(b, "#f\r\n"...)
		case v.Int != 0:
			return append(b, ":1\r\n"...)
		}
		return append(b, ":0\r\n"...)
	case backend.KindBigNumber:
		if resp3 {
			return append(append(append(b, '('), v.Str...), '\r', '\n')
		}
		return redcon.AppendBulk(b, v.Str)
	case backend.KindVerbatim:
		if !resp3 {
			return redcon.AppendBulk(b, v.Str)
		}
		b = appendHeader(b, '=', len(v.Str)+4)
		return append(append(append(b, "txt:"...), v.Str...), '\r', '\n')
	}
	return appendAggregate(b, v, resp3)
}

// appendAggregate renders an array, set or map (RESP2: a flat array).
func appendAggregate(b []byte, v backend.Value, resp3 bool) []byte {
	switch {
	case resp3 && v.Kind == backend.KindMap:
		b = appendHeader(b, '%', len(v.Elems)/2)
	case resp3 && v.Kind == backend.KindSet:
		b = appendHeader(b, '~', len(v.Elems))
	default:
		b = redcon.AppendArray(b, len(v.Elems))
	}
	for _, e := range v.Elems {
		b = AppendValue(b, e, resp3)
	}
	return b
}

func appendHeader(b []byte, c byte, n int) []byte {
	return append(strconv.AppendInt(append(b, c), int64(n), 10), '\r', '\n')
}

// appendLine appends a simple string or error line; CR and LF, which would
// break the protocol, become spaces, as Redis does.
func appendLine(b []byte, s []byte) []byte {
	for _, c := range s {
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}

// AppendFloat appends f as C's "%.<prec>g" prints it with glibc: inf,
// -inf, nan, and -nan for a NaN with its sign bit set. Redis formats
// doubles this way with prec 17 (replies, numbers a script passes to a
// command); Lua 5.1's tostring uses 14.
func AppendFloat(b []byte, f float64, prec int) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	case math.IsNaN(f) && math.Signbit(f):
		return append(b, "-nan"...)
	case math.IsNaN(f):
		return append(b, "nan"...)
	}
	return strconv.AppendFloat(b, f, 'g', prec, 64)
}

// FormatFloat is AppendFloat to a string.
func FormatFloat(f float64, prec int) string {
	var tmp [32]byte
	return string(AppendFloat(tmp[:0], f, prec))
}
