package luascripts

import (
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// strFormat is Lua 5.1's string.format (lstrlib.c's str_format), in place
// of gopher-lua's, which hands the spec to Go's fmt: C's printf for each
// item (%d as long, %x as unsigned long, %g as C prints it), Lua's
// limits (two-digit width and precision, five flags) and its error texts.
func strFormat(L *lua.LState) int {
	top := L.GetTop()
	format := checkString(L, 1)
	arg := 1
	var b []byte
	for i := 0; i < len(format); {
		c := format[i]
		i++
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i < len(format) && format[i] == '%' {
			b = append(b, '%')
			i++
			continue
		}
		arg++
		if arg > top {
			argError(L, arg, "no value")
		}
		var spec printfSpec
		i = spec.scan(L, format, i)
		var op byte // the C string's NUL past the end
		if i < len(format) {
			op = format[i]
		}
		i++
		var item string
		switch op {
		case 'c':
			item = spec.pad(string([]byte{byte(cInt32(checkNumber(L, arg)))}), false)
		case 'd', 'i':
			n := cInt64(checkNumber(L, arg))
			mag := uint64(n)
			if n < 0 {
				mag = -mag
			}
			item = spec.integer(strconv.FormatUint(mag, 10), n < 0, "")
		case 'o', 'u', 'x', 'X':
			n := cUint64(checkNumber(L, arg))
			digits, prefix := strconv.FormatUint(n, 10), ""
			switch op {
			case 'o':
				digits = strconv.FormatUint(n, 8)
				if spec.hash && digits != "0" && spec.prec < len(digits)+1 {
					spec.prec = len(digits) + 1
				} else if spec.hash && digits == "0" && spec.prec == 0 {
					spec.prec = 1
				}
			case 'x', 'X':
				digits = strconv.FormatUint(n, 16)
				if spec.hash && n != 0 {
					prefix = "0x"
				}
				if op == 'X' {
					digits, prefix = strings.ToUpper(digits), strings.ToUpper(prefix)
				}
			}
			spec.plus, spec.space = false, false
			item = spec.integer(digits, false, prefix)
		case 'e', 'E', 'f', 'g', 'G':
			item = spec.float(checkNumber(L, arg), op)
		case 'q':
			b = appendQuoted(b, checkString(L, arg))
			continue
		case 's':
			s := checkString(L, arg)
			if spec.prec < 0 && len(s) >= 100 {
				b = append(b, s...) // kept whole, as Lua keeps a long string
				continue
			}
			if j := strings.IndexByte(s, 0); j >= 0 {
				s = s[:j]
			}
			if spec.prec >= 0 && len(s) > spec.prec {
				s = s[:spec.prec]
			}
			item = spec.pad(s, false)
		default:
			luaErrorf(L, "invalid option '%%%s' to 'format'", strings.TrimRight(string([]byte{op}), "\x00"))
		}
		if j := strings.IndexByte(item, 0); j >= 0 {
			item = item[:j] // luaL_addlstring(buff, strlen(buff))
		}
		b = append(b, item...)
	}
	L.Push(lua.LString(b))
	return 1
}

// printfSpec is a conversion's flags, width and precision (-1: none).
type printfSpec struct {
	minus, plus, space, hash, zero bool
	width, prec                    int
}

// scan is Lua's scanformat: the spec from format[i:], at most five flag
// characters and two digits each of width and precision; it returns where
// the conversion letter is.
func (s *printfSpec) scan(L *lua.LState, format string, i int) int {
	at := func(j int) byte {
		if j < len(format) {
			return format[j]
		}
		return 0
	}
	start := i
	for c := at(i); c != 0 && strings.IndexByte("-+ #0", c) >= 0; c = at(i) {
		switch c {
		case '-':
			s.minus = true
		case '+':
			s.plus = true
		case ' ':
			s.space = true
		case '#':
			s.hash = true
		case '0':
			s.zero = true
		}
		i++
	}
	if i-start >= 6 {
		luaErrorf(L, "invalid format (repeated flags)")
	}
	digits := func() int {
		n, j := 0, 0
		for ; j < 2 && isDigit(at(i)); j++ {
			n = n*10 + int(at(i)-'0')
			i++
		}
		return n
	}
	s.width, s.prec = digits(), -1
	if at(i) == '.' {
		i++
		s.prec = digits()
	}
	if isDigit(at(i)) {
		luaErrorf(L, "invalid format (width or precision too long)")
	}
	return i
}

// pad fills body out to the width, with zeros after the sign when zero
// says so.
func (s *printfSpec) pad(body string, zero bool) string {
	n := s.width - len(body)
	if n <= 0 {
		return body
	}
	switch {
	case s.minus:
		return body + strings.Repeat(" ", n)
	case zero:
		k := 0
		if k < len(body) && strings.IndexByte("+- ", body[k]) >= 0 {
			k++
		}
		if strings.HasPrefix(body[k:], "0x") || strings.HasPrefix(body[k:], "0X") {
			k += 2
		}
		return body[:k] + strings.Repeat("0", n) + body[k:]
	}
	return strings.Repeat(" ", n) + body
}

func (s *printfSpec) sign(neg bool) string {
	switch {
	case neg:
		return "-"
	case s.plus:
		return "+"
	case s.space:
		return " "
	}
	return ""
}

// integer formats an integer's digits as %d, %o, %u, %x do.
func (s *printfSpec) integer(digits string, neg bool, prefix string) string {
	if s.prec == 0 && digits == "0" {
		digits = ""
	}
	if len(digits) < s.prec {
		digits = strings.Repeat("0", s.prec-len(digits)) + digits
	}
	return s.pad(s.sign(neg)+prefix+digits, s.zero && s.prec < 0 && !s.minus)
}

// float formats f as %e, %f, %g (and upper-case %E, %G) do with glibc.
func (s *printfSpec) float(f float64, op byte) string {
	upper := op == 'E' || op == 'G'
	neg := math.Signbit(f)
	var body string
	switch {
	case math.IsInf(f, 0):
		body = "inf"
	case math.IsNaN(f):
		body = "nan"
	default:
		prec := s.prec
		if prec < 0 {
			prec = 6
		}
		a := math.Abs(f)
		switch op {
		case 'e', 'E':
			body = s.point(strconv.FormatFloat(a, 'e', prec, 64))
		case 'f':
			body = s.point(strconv.FormatFloat(a, 'f', prec, 64))
		default:
			if prec == 0 {
				prec = 1
			}
			e := strconv.FormatFloat(a, 'e', prec-1, 64)
			x, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
			if x < prec && x >= -4 {
				body = strconv.FormatFloat(a, 'f', prec-1-x, 64)
			} else {
				body = strconv.FormatFloat(a, 'e', prec-1, 64)
			}
			if s.hash {
				body = s.point(body)
			} else {
				body = trimZeros(body)
			}
		}
		if upper {
			body = strings.ToUpper(body)
		}
		return s.pad(s.sign(neg)+body, s.zero && !s.minus)
	}
	if upper {
		body = strings.ToUpper(body)
	}
	return s.pad(s.sign(neg)+body, false)
}

// point adds the decimal point '#' asks for when there are no decimals.
func (s *printfSpec) point(body string) string {
	if !s.hash || strings.IndexByte(body, '.') >= 0 {
		return body
	}
	if e := strings.IndexByte(body, 'e'); e >= 0 {
		return body[:e] + "." + body[e:]
	}
	return body + "."
}

// trimZeros removes %g's trailing zeros after the decimal point, and the
// point when nothing follows it.
func trimZeros(body string) string {
	mant, exp := body, ""
	if e := strings.IndexByte(body, 'e'); e >= 0 {
		mant, exp = body[:e], body[e:]
	}
	if strings.IndexByte(mant, '.') >= 0 {
		mant = strings.TrimRight(strings.TrimRight(mant, "0"), ".")
	}
	return mant + exp
}

// appendQuoted is %q (addquoted): the string in double quotes, with ",
// \ and newline escaped by a backslash, \r as \r and NUL as \000.
func appendQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\', '\n':
			b = append(b, '\\', c)
		case '\r':
			b = append(b, '\\', 'r')
		case 0:
			b = append(b, '\\', '0', '0', '0')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
