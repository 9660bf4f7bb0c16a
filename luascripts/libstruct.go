package luascripts

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// The struct library Redis bundles (Roberto Ierusalimschy's struct,
// lua_struct.c): pack, unpack and size of binary records, with the sizes,
// alignment and byte order of x86-64 (native is little-endian, long and
// size_t are 8 bytes, the maximum alignment 8).

const (
	structMaxIntSize = 32
	structMaxAlign   = 8
)

// structHeader is the running state of a format: byte order and alignment.
type structHeader struct {
	little bool
	align  int
}

// structFormat walks a format string as the C library does: it ends at
// its first NUL byte.
type structFormat struct {
	s string
	i int
}

func newStructFormat(L *lua.LState) *structFormat {
	s := checkString(L, 1)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return &structFormat{s: s}
}

func (f *structFormat) more() bool { return f.i < len(f.s) }

func (f *structFormat) next() byte {
	c := f.s[f.i]
	f.i++
	return c
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// num is getnum: the decimal number at the cursor, or df.
func (f *structFormat) num(L *lua.LState, df int) int {
	if !f.more() || !isDigit(f.s[f.i]) {
		return df
	}
	a := 0
	for f.more() && isDigit(f.s[f.i]) {
		d := int(f.s[f.i] - '0')
		if a > math.MaxInt32/10 || a*10 > math.MaxInt32-d {
			luaErrorf(L, "integral size overflow")
		}
		a = a*10 + d
		f.i++
	}
	return a
}

// optSize is optsize: the size of option opt.
func (f *structFormat) optSize(L *lua.LState, opt byte) int {
	switch opt {
	case 'B', 'b':
		return 1
	case 'H', 'h':
		return 2
	case 'L', 'l', 'T', 'd':
		return 8
	case 'f':
		return 4
	case 'x':
		return 1
	case 'c':
		return f.num(L, 1)
	case 'i', 'I':
		sz := f.num(L, 4)
		if sz > structMaxIntSize {
			luaErrorf(L, "integral size %d is larger than limit of %d", sz, structMaxIntSize)
		}
		return sz
	}
	return 0
}

// toAlign is gettoalign: the padding before an item of size at pos.
func (h *structHeader) toAlign(pos int, opt byte, size int) int {
	if size == 0 || opt == 'c' {
		return 0
	}
	if size > h.align {
		size = h.align
	}
	return (size - (pos & (size - 1))) & (size - 1)
}

// control is controloptions: byte order, alignment, spaces; anything
// else is an invalid option.
func (h *structHeader) control(L *lua.LState, opt byte, f *structFormat) {
	switch opt {
	case ' ':
	case '>':
		h.little = false
	case '<':
		h.little = true
	case '!':
		a := f.num(L, structMaxAlign)
		if a <= 0 || a&(a-1) != 0 {
			luaErrorf(L, "alignment %d is not a power of 2", a)
		}
		h.align = a
	default:
		argError(L, 1, "invalid format option '"+string(opt)+"'")
	}
}

func isStructInt(opt byte) bool { return strings.IndexByte("bBhHlLTiI", opt) >= 0 }

// structPack is struct.pack(fmt, ...).
func structPack(L *lua.LState) int {
	f := newStructFormat(L)
	L.Push(lua.LNil) // the C code's mark after the arguments: a missing one is "nil", not "no value"
	h := structHeader{little: true, align: 1}
	arg := 2
	var b bytes.Buffer
	total := 0
	for f.more() {
		opt := f.next()
		size := f.optSize(L, opt)
		pad := h.toAlign(total, opt, size)
		total += pad
		for ; pad > 0; pad-- {
			b.WriteByte(0)
		}
		switch {
		case isStructInt(opt):
			n := checkNumber(L, arg)
			arg++
			var v uint64
			if n < 0 {
				v = uint64(cInt64(n))
			} else {
				v = cUint64(n)
			}
			buf := make([]byte, size)
			for i := range size {
				j := i
				if !h.little {
					j = size - 1 - i
				}
				buf[j] = byte(v)
				v >>= 8
			}
			b.Write(buf)
		case opt == 'x':
			b.WriteByte(0)
		case opt == 'f':
			bits := math.Float32bits(float32(checkNumber(L, arg)))
			arg++
			b.Write(order(h.little).AppendUint32(nil, bits))
		case opt == 'd':
			bits := math.Float64bits(checkNumber(L, arg))
			arg++
			b.Write(order(h.little).AppendUint64(nil, bits))
		case opt == 'c' || opt == 's':
			s := checkString(L, arg)
			arg++
			if size == 0 {
				size = len(s)
			}
			if len(s) < size {
				argError(L, arg, "string too short") // sic: the next argument's number, as in C
			}
			b.WriteString(s[:size])
			if opt == 's' {
				b.WriteByte(0)
				size++
			}
		default:
			h.control(L, opt, f)
		}
		total += size
	}
	L.Push(lua.LString(b.String()))
	return 1
}

// byteOrder is what struct needs of a byte order.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

func order(little bool) byteOrder {
	if little {
		return binary.LittleEndian
	}
	return binary.BigEndian
}

// structUnpack is struct.unpack(fmt, data [, pos]).
func structUnpack(L *lua.LState) int {
	f := newStructFormat(L)
	data := checkString(L, 2)
	ld := uint64(len(data))
	pos := uint64(optInteger(L, 3, 1)) // size_t: a negative offset is huge, and too far
	if pos == 0 {
		argError(L, 3, "offset must be 1 or greater")
	}
	pos--
	h := structHeader{little: true, align: 1}
	var out []lua.LValue
	for f.more() {
		opt := f.next()
		size := uint64(f.optSize(L, opt))
		pos += uint64(h.toAlign(int(pos), opt, int(size)))
		if !(size <= ld && pos <= ld-size) {
			argError(L, 2, "data string too short")
		}
		if L.GetTop()+len(out)+2 > maxCStack {
			luaErrorf(L, "stack overflow (too many results)")
		}
		switch {
		case isStructInt(opt):
			out = append(out, lua.LNumber(structInteger(data[pos:pos+size], h.little, opt >= 'a')))
		case opt == 'x':
		case opt == 'f':
			bits := order(h.little).Uint32([]byte(data[pos : pos+4]))
			out = append(out, lua.LNumber(math.Float32frombits(bits)))
		case opt == 'd':
			bits := order(h.little).Uint64([]byte(data[pos : pos+8]))
			out = append(out, lua.LNumber(math.Float64frombits(bits)))
		case opt == 'c':
			if size == 0 {
				var prev lua.LNumber
				ok := false
				if len(out) > 0 {
					prev, ok = toNumber(out[len(out)-1])
				}
				if !ok {
					luaErrorf(L, "format 'c0' needs a previous size")
				}
				size = cUint64(float64(prev)) // size_t from lua_Number
				out = out[:len(out)-1]
				if !(size <= ld && pos <= ld-size) {
					argError(L, 2, "data string too short")
				}
			}
			out = append(out, lua.LString(data[pos:pos+size]))
		case opt == 's':
			e := strings.IndexByte(data[pos:], 0)
			if e < 0 {
				luaErrorf(L, "unfinished string in data")
			}
			size = uint64(e) + 1
			out = append(out, lua.LString(data[pos:pos+uint64(e)]))
		default:
			h.control(L, opt, f)
		}
		pos += size
	}
	for _, v := range out {
		L.Push(v)
	}
	L.Push(lua.LNumber(int64(pos + 1)))
	return len(out) + 1
}

// structInteger is getinteger: the bytes as an unsigned long, the last
// eight counting for sizes above 8, sign-extended as the C code does.
func structInteger(b string, little, signed bool) float64 {
	var l uint64
	n := len(b)
	for i := range n {
		j := i
		if little {
			j = n - 1 - i
		}
		l = l<<8 | uint64(b[j])
	}
	if !signed {
		return float64(l)
	}
	mask := ^uint64(0) << ((n*8 - 1) & 63) // x86 masks the shift count
	if l&mask != 0 {
		l |= mask
	}
	return float64(int64(l))
}

// structSize is struct.size(fmt).
func structSize(L *lua.LState) int {
	f := newStructFormat(L)
	h := structHeader{little: true, align: 1}
	pos := 0
	for f.more() {
		opt := f.next()
		size := f.optSize(L, opt)
		pos += h.toAlign(pos, opt, size)
		if opt == 's' {
			argError(L, 1, "option 's' has no fixed size")
		} else if opt == 'c' && size == 0 {
			argError(L, 1, "option 'c0' has no fixed size")
		}
		if !isAlnum(opt) {
			h.control(L, opt, f)
		}
		pos += size
	}
	L.Push(lua.LNumber(pos))
	return 1
}

func isAlnum(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// structFuncs are the functions of the struct table.
var structFuncs = map[string]lua.LGFunction{"pack": structPack, "unpack": structUnpack, "size": structSize}
