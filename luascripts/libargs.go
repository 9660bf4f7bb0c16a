package luascripts

import (
	"fmt"
	"math"

	lua "github.com/yuin/gopher-lua"
)

// The Lua 5.1 auxiliary library (lauxlib.c) as the C libraries Redis
// bundles use it: their arguments are checked, and their errors worded and
// placed, the way luaL_check* and luaL_error do it, so that bit, struct,
// cjson, cmsgpack and string.format answer in Lua 5.1's words.

// luaWhere is luaL_where(L, 1): "user_script:<line>: " when the running Go
// function was called from Lua code, "" when it was called from a Go
// function (pcall(cjson.encode, …)), as Lua 5.1 gives no place for a C
// caller.
func luaWhere(L *lua.LState) string {
	dbg, ok := L.GetStack(1)
	if !ok {
		return ""
	}
	if _, err := L.GetInfo("Sl", dbg, lua.LNil); err != nil || dbg.What == "G" || dbg.CurrentLine <= 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d: ", dbg.Source, dbg.CurrentLine)
}

// luaErrorf is luaL_error: the message, placed by luaWhere, raised.
func luaErrorf(L *lua.LState, format string, args ...any) {
	L.Error(lua.LString(luaWhere(L)+fmt.Sprintf(format, args...)), 0)
}

// funcName is the name the running Go function was called by, as
// luaL_argerror finds it ("?" when there is none, as under pcall).
func funcName(L *lua.LState) string {
	dbg, ok := L.GetStack(0)
	if !ok {
		return "?"
	}
	if _, err := L.GetInfo("n", dbg, lua.LNil); err != nil {
		return "?"
	}
	switch n := dbg.Name; {
	case n == "", n == "?", n == "(anonymous)", n == "main chunk", n[0] == '<':
		return "?"
	default:
		return n
	}
}

// argError is luaL_argerror: "bad argument #n to 'name' (msg)".
func argError(L *lua.LState, n int, msg string) {
	luaErrorf(L, "bad argument #%d to '%s' (%s)", n, funcName(L), msg)
}

// typeName is luaL_typename: "no value" for an argument not given.
func typeName(L *lua.LState, n int) string {
	if n > L.GetTop() {
		return "no value"
	}
	return L.Get(n).Type().String()
}

// typeError is luaL_typerror.
func typeError(L *lua.LState, n int, want string) {
	argError(L, n, want+" expected, got "+typeName(L, n))
}

// checkNumber is luaL_checknumber: a number, or a string that reads as one.
func checkNumber(L *lua.LState, n int) float64 {
	if f, ok := toNumber(L.Get(n)); ok {
		return float64(f)
	}
	typeError(L, n, "number")
	return 0
}

// optArg reports whether argument n is absent or nil (luaL_opt).
func optArg(L *lua.LState, n int) bool { return L.Get(n) == lua.LNil }

// checkInteger is luaL_checkinteger: checkNumber cast to lua_Integer as C
// casts it on x86-64.
func checkInteger(L *lua.LState, n int) int64 { return cInt64(checkNumber(L, n)) }

// optInteger is luaL_optinteger.
func optInteger(L *lua.LState, n int, def int64) int64 {
	if optArg(L, n) {
		return def
	}
	return checkInteger(L, n)
}

// checkString is luaL_checklstring: a string, or a number as Lua 5.1
// writes it ("%.14g").
func checkString(L *lua.LState, n int) string {
	switch v := L.Get(n).(type) {
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return numberString(v)
	}
	typeError(L, n, "string")
	return ""
}

// cInt64 is C's (long long) cast of a double on x86-64: out of range and
// NaN give the minimum ("integer indefinite").
func cInt64(f float64) int64 {
	if math.IsNaN(f) || f >= 1<<63 || f < -(1<<63) {
		return math.MinInt64
	}
	return int64(f)
}

// cInt32 is C's (int) cast of a double on x86-64.
func cInt32(f float64) int32 {
	if math.IsNaN(f) || f >= 1<<31 || f < -(1<<31) {
		return math.MinInt32
	}
	return int32(f)
}

// cUint64 is C's (unsigned long) cast of a double as gcc compiles it on
// x86-64: below 2^63 (NaN too) through the signed conversion, else
// through the signed conversion of f-2^63 with the top bit flipped.
func cUint64(f float64) uint64 {
	if !(f >= 1<<63) {
		return uint64(cInt64(f))
	}
	return uint64(cInt64(f-(1<<63))) ^ 1<<63
}

// maxCStack is Lua 5.1's LUAI_MAXCSTACK: how many values a C function may
// have on its stack (lua_checkstack fails past it).
const maxCStack = 8000
