package luascripts

import (
	"encoding/binary"
	"math"

	lua "github.com/yuin/gopher-lua"
)

// The cmsgpack library Redis bundles (lua-cmsgpack 0.4.0,
// lua_cmsgpack.c): MessagePack in the encodings that C code picks, and
// its decoder with its limits and error texts.

// mpMaxNesting is LUACMSGPACK_MAX_NESTING: deeper tables encode as nil,
// so that a table holding itself ends.
const mpMaxNesting = 16

// mpEncode appends v's encoding at nesting level.
func mpEncode(b []byte, v lua.LValue, level int) []byte {
	switch x := v.(type) {
	case lua.LString:
		return mpBytes(b, string(x))
	case lua.LBool:
		if x {
			return append(b, 0xc3)
		}
		return append(b, 0xc2)
	case lua.LNumber:
		n := float64(x)
		if i := cInt64(n); !math.IsInf(n, 0) && float64(i) == n {
			return mpInt(b, i)
		}
		if f := float32(n); float64(f) == n {
			return binary.BigEndian.AppendUint32(append(b, 0xca), math.Float32bits(f))
		}
		return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(n))
	case *lua.LTable:
		if level == mpMaxNesting {
			return append(b, 0xc0)
		}
		if n, ok := mpArrayLen(x); ok {
			b = mpHeader(b, 0x90, 0xdc, 0xdd, uint64(n))
			for j := 1; j <= n; j++ {
				b = mpEncode(b, x.RawGetInt(j), level+1)
			}
			return b
		}
		n := 0
		x.ForEach(func(lua.LValue, lua.LValue) { n++ })
		b = mpHeader(b, 0x80, 0xde, 0xdf, uint64(n))
		x.ForEach(func(k, val lua.LValue) {
			b = mpEncode(b, k, level+1)
			b = mpEncode(b, val, level+1)
		})
		return b
	}
	return append(b, 0xc0)
}

// mpArrayLen is table_is_an_array: every key a number that is a positive
// C int, and as many keys as the largest.
func mpArrayLen(t *lua.LTable) (int, bool) {
	count, max, ok := 0, int32(0), true
	t.ForEach(func(k, _ lua.LValue) {
		if !ok {
			return
		}
		n, isNum := k.(lua.LNumber)
		if !isNum || n <= 0 || float64(cInt32(float64(n))) != float64(n) {
			ok = false
			return
		}
		if float64(n) > float64(max) {
			max = cInt32(float64(n))
		}
		count++
	})
	return count, ok && int(max) == count
}

func mpBytes(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= 0xff:
		b = append(b, 0xd9, byte(n))
	case n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func mpInt(b []byte, n int64) []byte {
	switch {
	case n >= 0 && n <= 127:
		return append(b, byte(n))
	case n >= 0 && n <= 0xff:
		return append(b, 0xcc, byte(n))
	case n >= 0 && n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n >= 0 && n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	case n >= 0:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), uint64(n))
	case n >= -32:
		return append(b, byte(int8(n)))
	case n >= -128:
		return append(b, 0xd0, byte(n))
	case n >= -32768:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= -2147483648:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

// mpHeader is an array or map header: fix (n <= 15), 16-bit or 32-bit.
func mpHeader(b []byte, fix, b16, b32 byte, n uint64) []byte {
	switch {
	case n <= 15:
		return append(b, fix|byte(n))
	case n <= 65535:
		return binary.BigEndian.AppendUint16(append(b, b16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, b32), uint32(n))
}

// cmsgpackPack is cmsgpack.pack(...): the encodings of every argument,
// one after the other.
func cmsgpackPack(L *lua.LState) int {
	n := L.GetTop()
	if n == 0 {
		argError(L, 0, "MessagePack pack needs input.")
	}
	var b []byte
	for i := 1; i <= n; i++ {
		b = mpEncode(b, L.Get(i), 0)
	}
	L.Push(lua.LString(b))
	return 1
}

// The decoder's cursor errors.
const (
	mpErrNone = iota
	mpErrEOF
	mpErrBadFmt
)

// mpDecoder is a cursor over a MessagePack string. stack counts the
// values the C decoder would hold on its Lua stack, so that it fails
// where luaL_checkstack does.
type mpDecoder struct {
	L     *lua.LState
	s     string
	p     int
	err   int
	stack int
}

func (d *mpDecoder) left() int { return len(d.s) - d.p }

func (d *mpDecoder) need(n uint64) bool {
	if uint64(d.left()) < n {
		d.err = mpErrEOF
		return false
	}
	return true
}

func (d *mpDecoder) u(off, n int) uint64 {
	var v uint64
	for i := range n {
		v = v<<8 | uint64(d.s[d.p+off+i])
	}
	return v
}

// value is mp_decode_to_lua_type. On a cursor error it returns nil and
// d.err says which.
func (d *mpDecoder) value() lua.LValue {
	if !d.need(1) {
		return nil
	}
	if d.stack+1 > maxCStack {
		luaErrorf(d.L, "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)")
	}
	c := d.s[d.p]
	if size, conv := mpFixed(c); size > 0 {
		if !d.need(uint64(size)) {
			return nil
		}
		v := conv(d.u(1, size-1))
		d.p += size
		return v
	}
	switch c {
	case 0xc0:
		d.p++
		return lua.LNil
	case 0xc3:
		d.p++
		return lua.LTrue
	case 0xc2:
		d.p++
		return lua.LFalse
	case 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf:
		hdr := mpLenSize[c]
		if !d.need(uint64(hdr)) {
			return nil
		}
		n := d.u(1, hdr-1)
		switch c {
		case 0xd9, 0xda, 0xdb:
			return d.str(hdr, n)
		case 0xdc, 0xdd:
			d.p += hdr
			return d.array(n)
		default:
			d.p += hdr
			return d.hash(n)
		}
	}
	switch {
	case c&0x80 == 0:
		d.p++
		return lua.LNumber(c)
	case c&0xe0 == 0xe0:
		d.p++
		return lua.LNumber(int8(c))
	case c&0xe0 == 0xa0:
		return d.str(1, uint64(c&0x1f))
	case c&0xf0 == 0x90:
		d.p++
		return d.array(uint64(c & 0xf))
	case c&0xf0 == 0x80:
		d.p++
		return d.hash(uint64(c & 0xf))
	}
	d.err = mpErrBadFmt
	return nil
}

// mpLenSize is the header size (type byte and length) of the strings,
// arrays and maps with a length after their type byte.
var mpLenSize = map[byte]int{0xd9: 2, 0xda: 3, 0xdb: 5, 0xdc: 3, 0xdd: 5, 0xde: 3, 0xdf: 5}

// mpFixed is the size (type byte included) of a number of type c and how
// its big-endian payload becomes a Lua number; size 0 for other types.
func mpFixed(c byte) (int, func(uint64) lua.LValue) {
	switch c {
	case 0xcc, 0xcd, 0xce:
		return 1<<(c-0xcc) + 1, func(u uint64) lua.LValue { return lua.LNumber(u) }
	case 0xd0:
		return 2, func(u uint64) lua.LValue { return lua.LNumber(int8(u)) }
	case 0xd1:
		return 3, func(u uint64) lua.LValue { return lua.LNumber(int16(u)) }
	case 0xd2:
		return 5, func(u uint64) lua.LValue { return lua.LNumber(int32(u)) }
	case 0xcf, 0xd3: // lua_pushinteger of the 64 bits, signed
		return 9, func(u uint64) lua.LValue { return lua.LNumber(int64(u)) }
	case 0xca:
		return 5, func(u uint64) lua.LValue { return lua.LNumber(math.Float32frombits(uint32(u))) }
	case 0xcb:
		return 9, func(u uint64) lua.LValue { return lua.LNumber(math.Float64frombits(u)) }
	}
	return 0, nil
}

// str reads a string of n bytes after a header of hdr bytes.
func (d *mpDecoder) str(hdr int, n uint64) lua.LValue {
	if !d.need(uint64(hdr) + n) {
		return nil
	}
	s := d.s[d.p+hdr : d.p+hdr+int(n)]
	d.p += hdr + int(n)
	return lua.LString(s)
}

func (d *mpDecoder) array(n uint64) lua.LValue {
	t := d.L.NewTable()
	d.stack++ // the table
	for i := uint64(1); i <= n; i++ {
		d.stack++ // the index
		v := d.value()
		if d.err != mpErrNone {
			return nil
		}
		d.stack--
		t.RawSetInt(int(i), v)
	}
	d.stack--
	return t
}

func (d *mpDecoder) hash(n uint64) lua.LValue {
	t := d.L.NewTable()
	d.stack++ // the table
	for ; n > 0; n-- {
		k := d.value()
		if d.err != mpErrNone {
			return nil
		}
		d.stack++ // the key
		v := d.value()
		if d.err != mpErrNone {
			return nil
		}
		d.stack--
		switch x := k.(type) {
		case *lua.LNilType:
			d.L.Error(lua.LString("table index is nil"), 0)
		case lua.LNumber:
			if math.IsNaN(float64(x)) {
				d.L.Error(lua.LString("table index is NaN"), 0)
			}
		}
		t.RawSet(k, v)
	}
	d.stack--
	return t
}

// mpUnpack is mp_unpack_full: up to limit values from offset (every value
// when both are 0), and, unless every value was asked for, the offset to
// go on from first (-1 at the end). args is how many arguments stay on
// the C stack.
func mpUnpack(L *lua.LState, limit, offset int64, args int) int {
	s := checkString(L, 1)
	all := limit == 0 && offset == 0
	if offset < 0 || limit < 0 {
		luaErrorf(L, "Invalid request to unpack with offset of %d and limit of %d.", int32(offset), int32(len(s))) // sic
	} else if uint64(offset) > uint64(len(s)) {
		luaErrorf(L, "Start offset %d greater than input length %d.", int32(offset), int32(len(s)))
	}
	if all {
		limit = math.MaxInt32
	}
	d := &mpDecoder{L: L, s: s, p: int(offset), stack: args}
	var out []lua.LValue
	for cnt := int64(0); d.left() > 0 && cnt < limit; cnt++ {
		v := d.value()
		switch d.err {
		case mpErrEOF:
			luaErrorf(L, "Missing bytes in input.")
		case mpErrBadFmt:
			luaErrorf(L, "Bad data format in input.")
		}
		out = append(out, v)
		d.stack++
	}
	if !all {
		if d.stack+1 > maxCStack {
			luaErrorf(L, "stack overflow (in function mp_unpack_full)")
		}
		next := int64(d.p)
		if d.left() == 0 {
			next = -1
		}
		L.Push(lua.LNumber(next))
	}
	for _, v := range out {
		L.Push(v)
	}
	if all {
		return len(out)
	}
	return len(out) + 1
}

// cmsgpackFuncs are the functions of the cmsgpack table.
var cmsgpackFuncs = map[string]lua.LGFunction{
	"pack":   cmsgpackPack,
	"unpack": func(L *lua.LState) int { return mpUnpack(L, 0, 0, L.GetTop()) },
	"unpack_one": func(L *lua.LState) int {
		return mpUnpack(L, 1, optInteger(L, 2, 0), 1)
	},
	"unpack_limit": func(L *lua.LState) int {
		limit := checkInteger(L, 2)
		return mpUnpack(L, limit, optInteger(L, 3, 0), 1)
	},
}

// cmsgpackFields are the cmsgpack table's other fields.
var cmsgpackFields = map[string]string{
	"_NAME":        "cmsgpack",
	"_VERSION":     "lua-cmsgpack 0.4.0",
	"_COPYRIGHT":   "Copyright (C) 2012, Salvatore Sanfilippo",
	"_DESCRIPTION": "MessagePack C implementation for Lua",
}
