package luascripts

import (
	lua "github.com/yuin/gopher-lua"
)

// libNames are the libraries Redis 7.0 gives scripts beside Lua's own
// (bit, struct, cjson, cmsgpack), as globals made read-only like the rest.
var libNames = []string{"bit", "struct", "cjson", "cmsgpack"}

// libState is what those libraries keep between calls: the cjson settings
// of the global cjson table (reset for every run) and cjson.null.
type libState struct {
	cjson cjsonConfig
	null  *lua.LUserData
}

// openLibs sets the globals bit, struct, cjson and cmsgpack, and Lua
// 5.1's string.format.
func (v *vm) openLibs() {
	L := v.L
	v.libs = &libState{cjson: cjsonDefaults, null: L.NewUserData()}
	table := func(fns map[string]lua.LGFunction) *lua.LTable {
		t := L.NewTable()
		for name, fn := range fns {
			t.RawSetString(name, L.NewFunction(fn))
		}
		return t
	}
	v.globals.RawSetString("bit", table(bitFuncs))
	v.globals.RawSetString("struct", table(structFuncs))
	mp := table(cmsgpackFuncs)
	for name, s := range cmsgpackFields {
		mp.RawSetString(name, lua.LString(s))
	}
	v.globals.RawSetString("cmsgpack", mp)
	v.globals.RawSetString("cjson", cjsonModule(L, &v.libs.cjson, v.libs.null))
	if str, ok := v.globals.RawGetString("string").(*lua.LTable); ok {
		str.RawSetString("format", L.NewFunction(strFormat)) // strformat.go
	}
}

// resetLibs puts the libraries' settings back to their defaults before a
// run.
func (v *vm) resetLibs() { v.libs.cjson = cjsonDefaults }
