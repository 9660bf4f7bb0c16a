package luascripts

import (
	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/backend"
)

// toLua converts a command's reply to Lua as Redis does for the script's
// protocol (redis.setresp).
func (v *vm) toLua(val backend.Value) lua.LValue {
	L := v.L
	switch val.Kind {
	case backend.KindInt:
		return lua.LNumber(val.Int)
	case backend.KindBulk, backend.KindVerbatim, backend.KindBigNumber:
		v.charge(int64(len(val.Str)))
		if v.resp == 3 && val.Kind == backend.KindBigNumber {
			return fieldTable(L, "big_number", lua.LString(val.Str))
		}
		if v.resp == 3 && val.Kind == backend.KindVerbatim {
			vs := L.CreateTable(0, 2)
			vs.RawSetString("format", lua.LString("txt"))
			vs.RawSetString("string", lua.LString(val.Str))
			return fieldTable(L, "verbatim_string", vs)
		}
		return lua.LString(val.Str)
	case backend.KindNil, backend.KindNilArray:
		if v.resp == 3 {
			return lua.LNil
		}
		return lua.LFalse
	case backend.KindStatus:
		return fieldTable(L, "ok", lua.LString(val.Str))
	case backend.KindError:
		return errorTable(L, errorText("-"+string(val.Str)))
	case backend.KindDouble:
		if v.resp == 3 {
			return fieldTable(L, "double", lua.LNumber(val.Float))
		}
		return lua.LString(formatNumber(lua.LNumber(val.Float)))
	case backend.KindBool:
		if v.resp == 3 {
			return lua.LBool(val.Int != 0)
		}
		return lua.LNumber(val.Int)
	case backend.KindMap:
		if v.resp == 3 {
			m := L.NewTable()
			for i := 0; i+1 < len(val.Elems); i += 2 {
				m.RawSet(v.toLua(val.Elems[i]), v.toLua(val.Elems[i+1]))
			}
			return fieldTable(L, "map", m)
		}
	case backend.KindPairs:
		if v.resp == 3 {
			t := L.CreateTable(len(val.Elems)/2, 0)
			for i := 0; i+1 < len(val.Elems); i += 2 {
				p := L.CreateTable(2, 0)
				p.Append(v.toLua(val.Elems[i]))
				p.Append(v.toLua(val.Elems[i+1]))
				t.Append(p)
			}
			return t
		}
	case backend.KindSet:
		if v.resp == 3 {
			s := L.NewTable()
			for _, e := range val.Elems {
				s.RawSet(v.toLua(e), lua.LTrue)
			}
			return fieldTable(L, "set", s)
		}
	}
	t := L.CreateTable(len(val.Elems), 0)
	for _, e := range val.Elems {
		t.Append(v.toLua(e))
	}
	return t
}

// maxDepth bounds the nesting of a script's reply, so that a table holding
// itself ends: past it an element becomes Redis's stack-limit error.
const maxDepth = 200

// toValue converts a script's return value to a reply by Redis's rules
// (luaReplyToRedisReply): fields are read raw, an array ends at its first
// nil, and anything else (functions, userdata) is nil.
func (v *vm) toValue(lv lua.LValue, depth int) backend.Value {
	if depth > maxDepth {
		return backend.ErrorValue(backend.MsgStackLimit)
	}
	switch x := lv.(type) {
	case lua.LString:
		return backend.BulkString(string(x))
	case lua.LNumber:
		return backend.Int(toInteger(x))
	case lua.LBool:
		if v.resp == 3 {
			return backend.Value{Kind: backend.KindBool, Int: boolInt(bool(x))}
		}
		if x {
			return backend.Int(1)
		}
		return backend.NilValue
	case *lua.LTable:
		return v.tableValue(x, depth)
	}
	return backend.NilValue
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (v *vm) tableValue(x *lua.LTable, depth int) backend.Value {
	if s, ok := x.RawGetString("err").(lua.LString); ok {
		return backend.ErrorValue(oneLine(string(s)))
	}
	if s, ok := x.RawGetString("ok").(lua.LString); ok {
		return backend.Status(oneLine(string(s)))
	}
	if d, ok := x.RawGetString("double").(lua.LNumber); ok {
		return backend.Value{Kind: backend.KindDouble, Float: float64(d)}
	}
	if s, ok := x.RawGetString("big_number").(lua.LString); ok {
		return backend.Value{Kind: backend.KindBigNumber, Str: []byte(s)}
	}
	if m, ok := x.RawGetString("map").(*lua.LTable); ok {
		out := backend.Value{Kind: backend.KindMap, Elems: []backend.Value{}}
		m.ForEach(func(k, val lua.LValue) {
			out.Elems = append(out.Elems, v.toValue(k, depth+1), v.toValue(val, depth+1))
		})
		return out
	}
	if s, ok := x.RawGetString("set").(*lua.LTable); ok {
		out := backend.Value{Kind: backend.KindSet, Elems: []backend.Value{}}
		s.ForEach(func(k, _ lua.LValue) {
			out.Elems = append(out.Elems, v.toValue(k, depth+1))
		})
		return out
	}
	if vs, ok := x.RawGetString("verbatim_string").(*lua.LTable); ok {
		_, okf := vs.RawGetString("format").(lua.LString)
		s, oks := vs.RawGetString("string").(lua.LString)
		if okf && oks {
			return backend.Value{Kind: backend.KindVerbatim, Str: []byte(s)}
		}
	}
	n := 0
	for x.RawGetInt(n+1) != lua.LNil {
		n++
	}
	elems := make([]backend.Value, n)
	for i := range elems {
		elems[i] = v.toValue(x.RawGetInt(i+1), depth+1)
	}
	return backend.Value{Kind: backend.KindArray, Elems: elems}
}

// fieldTable is a one-field table {name=v}, the shape of Redis's typed
// replies in Lua ({ok=…}, {double=…}, {map=…}).
func fieldTable(L *lua.LState, name string, v lua.LValue) *lua.LTable {
	t := L.CreateTable(0, 1)
	t.RawSetString(name, v)
	return t
}
