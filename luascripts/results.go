package luascripts

import (
	lua "github.com/yuin/gopher-lua"
)

// Lua 5.1's bound on how many values one call returns, for the base
// functions that return as many as the script asks for: unpack and
// string.byte. gopher-lua pushes them all onto its value stack; past its
// maximum it raised "registry overflow", and pcall's error handler, which
// pushes too, then panicked out of the Lua state (an internal error for
// the client, and on the memory backend the store's lock never released).
// Lua 5.1 checks the count first (lua_checkstack: LUAI_MAXCSTACK slots
// for a C function), and so do these, in its words.

// boundResults replaces unpack and string.byte with their bounded forms.
func (v *vm) boundResults() {
	v.globals.RawSetString("unpack", v.L.NewFunction(luaUnpack))
	v.globals.RawGetString("string").(*lua.LTable).RawSetString("byte", v.L.NewFunction(strByte))
}

// luaUnpack is luaB_unpack: t[i], ..., t[e], with i and e C ints (i
// defaults to 1, e to #t); a range of more values than the stack has
// room for is "too many results to unpack".
func luaUnpack(L *lua.LState) int {
	t := L.CheckTable(1)
	i, e := int64(1), int64(t.Len())
	if !optArg(L, 2) {
		i = int64(int32(checkInteger(L, 2)))
	}
	if !optArg(L, 3) {
		e = int64(int32(checkInteger(L, 3)))
	}
	if i > e {
		return 0
	}
	n := e - i + 1
	if n > int64(maxCStack-L.GetTop()) {
		luaErrorf(L, "too many results to unpack")
	}
	for k := i; k <= e; k++ {
		L.Push(t.RawGetInt(int(k)))
	}
	return int(n)
}

// strByte is str_byte: the bytes s[i..j] as numbers (i defaults to 1, j
// to i; negative positions count from the end); a slice of more bytes
// than the stack has room for is "stack overflow (string slice too
// long)".
func strByte(L *lua.LState) int {
	s := checkString(L, 1)
	l := int64(len(s))
	posi := posRelative(optInteger(L, 2, 1), l)
	pose := posRelative(optInteger(L, 3, posi), l)
	posi, pose = max(posi, 1), min(pose, l)
	if posi > pose {
		return 0
	}
	n := pose - posi + 1
	if n > int64(maxCStack-L.GetTop()) {
		luaErrorf(L, "stack overflow (string slice too long)")
	}
	for k := posi; k <= pose; k++ {
		L.Push(lua.LNumber(s[k-1]))
	}
	return int(n)
}

// posRelative is Lua 5.1's posrelat: a negative position counts from the
// end of a string of length l.
func posRelative(pos, l int64) int64 {
	if pos < 0 {
		return l + pos + 1
	}
	return pos
}
