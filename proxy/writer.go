package proxy

import (
	"math"
	"strconv"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// appendValue renders v in RESP3 or RESP2 and appends it to b.
func appendValue(b []byte, v backend.Value, resp3 bool) []byte {
	switch v.Kind {
	case backend.KindNil:
		if resp3 {
			return append(b, "_\r\n"...)
		}
		return append(b, "$-1\r\n"...)
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
		return append(strconv.AppendInt(append(b, ':'), v.Int, 10), '\r', '\n')
	case backend.KindBulk:
		return appendBulk(b, '$', v.Str)
	case backend.KindDouble:
		s := formatDouble(v.Float)
		if resp3 {
			return append(append(append(b, ','), s...), '\r', '\n')
		}
		return appendBulk(b, '$', []byte(s))
	case backend.KindBool:
		if resp3 {
			if v.Int != 0 {
				return append(b, "#t\r\n"...)
			}
			return append(b, "#f\r\n"...)
		}
		if v.Int != 0 {
			return append(b, ":1\r\n"...)
		}
		return append(b, ":0\r\n"...)
	case backend.KindBigNumber:
		if resp3 {
			return append(append(append(b, '('), v.Str...), '\r', '\n')
		}
		return appendBulk(b, '$', v.Str)
	case backend.KindVerbatim:
		if resp3 {
			return appendBulk(b, '=', append([]byte("txt:"), v.Str...))
		}
		return appendBulk(b, '$', v.Str)
	case backend.KindMap:
		if resp3 {
			b = appendHeader(b, '%', len(v.Elems)/2)
		} else {
			b = appendHeader(b, '*', len(v.Elems))
		}
	case backend.KindSet:
		if resp3 {
			b = appendHeader(b, '~', len(v.Elems))
		} else {
			b = appendHeader(b, '*', len(v.Elems))
		}
	default: // KindArray
		b = appendHeader(b, '*', len(v.Elems))
	}
	for _, e := range v.Elems {
		b = appendValue(b, e, resp3)
	}
	return b
}

func appendHeader(b []byte, c byte, n int) []byte {
	return append(strconv.AppendInt(append(b, c), int64(n), 10), '\r', '\n')
}

func appendBulk(b []byte, c byte, s []byte) []byte {
	b = appendHeader(b, c, len(s))
	return append(append(b, s...), '\r', '\n')
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

// formatDouble renders a double as Redis 7.0 does (%.17g, inf, -inf, nan).
func formatDouble(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}
