package luascripts

import (
	"math"

	lua "github.com/yuin/gopher-lua"
)

// The bit library Redis bundles (LuaBitOp 1.0, lua_bit.c): 32-bit
// operations on numbers, results signed 32-bit.

// bitArg is LuaBitOp's barg: the low 32 bits of the number rounded by the
// 2^52+2^51 trick (so 2^32+1 is 1 and 1.5 is 2), a string that reads as a
// number taken as that number, anything else an error.
func bitArg(L *lua.LState, n int) uint32 {
	f, ok := toNumber(L.Get(n))
	if !ok {
		f = 0
	}
	b := uint32(math.Float64bits(float64(f) + 6755399441055744.0))
	if b == 0 && !ok {
		typeError(L, n, "number")
	}
	return b
}

func bitReturn(L *lua.LState, b uint32) int {
	L.Push(lua.LNumber(int32(b)))
	return 1
}

func bitFold(op func(a, b uint32) uint32) lua.LGFunction {
	return func(L *lua.LState) int {
		b := bitArg(L, 1)
		for i := L.GetTop(); i > 1; i-- {
			b = op(b, bitArg(L, i))
		}
		return bitReturn(L, b)
	}
}

func bitShift(op func(b, n uint32) uint32) lua.LGFunction {
	return func(L *lua.LState) int {
		b := bitArg(L, 1)
		return bitReturn(L, op(b, bitArg(L, 2)&31))
	}
}

// bitFuncs are the functions of the bit table.
var bitFuncs = map[string]lua.LGFunction{
	"tobit":   func(L *lua.LState) int { return bitReturn(L, bitArg(L, 1)) },
	"bnot":    func(L *lua.LState) int { return bitReturn(L, ^bitArg(L, 1)) },
	"band":    bitFold(func(a, b uint32) uint32 { return a & b }),
	"bor":     bitFold(func(a, b uint32) uint32 { return a | b }),
	"bxor":    bitFold(func(a, b uint32) uint32 { return a ^ b }),
	"lshift":  bitShift(func(b, n uint32) uint32 { return b << n }),
	"rshift":  bitShift(func(b, n uint32) uint32 { return b >> n }),
	"arshift": bitShift(func(b, n uint32) uint32 { return uint32(int32(b) >> n) }),
	"rol":     bitShift(func(b, n uint32) uint32 { return b<<n | b>>((32-n)&31) }),
	"ror":     bitShift(func(b, n uint32) uint32 { return b>>n | b<<((32-n)&31) }),
	"bswap": func(L *lua.LState) int {
		b := bitArg(L, 1)
		return bitReturn(L, b>>24|b>>8&0xff00|(b&0xff00)<<8|b<<24)
	},
	"tohex": bitToHex,
}

// bitToHex is bit.tohex(x [, n]): n hex digits (8 by default, at most 8),
// upper case when n is negative.
func bitToHex(L *lua.LState) int {
	b := bitArg(L, 1)
	n := int32(8)
	if L.GetTop() >= 2 {
		n = int32(bitArg(L, 2))
	}
	digits := "0123456789abcdef"
	if n == math.MinInt32 {
		n++ // Redis's fix of CVE-2024-31449: -n must not overflow
	}
	if n < 0 {
		n = -n
		digits = "0123456789ABCDEF"
	}
	n = min(n, 8)
	buf := make([]byte, n)
	for i := int(n) - 1; i >= 0; i-- {
		buf[i] = digits[b&15]
		b >>= 4
	}
	L.Push(lua.LString(buf))
	return 1
}
