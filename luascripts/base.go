package luascripts

import (
	"math"
	"strconv"

	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/resp"
)

// The base functions below replace gopher-lua's where Redis's Lua behaves
// differently: Redis's own pcall, and Lua 5.1's error and tostring.

// pcall is Redis's pcall (luaRedisPcall): like Lua's, except that an error
// table's err field comes back instead of the table, so that
// pcall(redis.call, …) yields the error text.
//
// It runs the function with an error handler (errorLine), as Run does:
// without one gopher-lua builds a stack trace of every error, which costs
// the square of the call depth (seconds for a runaway recursion, during
// which the script holds what it runs under).
func (v *vm) pcall(L *lua.LState) int {
	n := L.GetTop()
	if n == 0 {
		// Redis calls the result placeholder it pushed.
		L.Push(lua.LFalse)
		L.Push(lua.LString("attempt to call a boolean value"))
		return 2
	}
	fn := L.Get(1)
	if fn.Type() != lua.LTFunction && L.GetMetaField(fn, "__call").Type() != lua.LTFunction {
		L.SetTop(0)
		L.Push(lua.LFalse)
		L.Push(lua.LString("attempt to call a " + fn.Type().String() + " value"))
		return 2
	}
	if v.cCalls+1 >= maxCCalls {
		// Lua 5.1 counts the calls made from C (pcall's among them) and
		// refuses the one that reaches LUAI_MAXCCALLS, inside that pcall.
		L.SetTop(0)
		L.Push(lua.LFalse)
		L.Push(lua.LString("C stack overflow"))
		return 2
	}
	v.cCalls++
	v.line = -1
	err := L.PCall(n-1, lua.MultRet, v.onError)
	v.cCalls--
	line := v.line
	v.line = 0
	if err != nil && v.ctx.Err() != nil {
		// The run is over (time limit, memory budget, its caller gone):
		// no pcall catches that, or `return pcall(f)` would end the
		// script as if it had finished.
		L.RaiseError("%s", v.ctx.Err())
	}
	if err != nil {
		var obj lua.LValue = lua.LString(err.Error())
		if ae, ok := err.(*lua.ApiError); ok {
			obj = ae.Object
		}
		switch o := obj.(type) {
		case *lua.LTable:
			switch e := o.RawGetString("err").(type) {
			case lua.LString, lua.LNumber:
				obj = e
			}
		case lua.LString:
			obj = lua.LString(luaMessage(string(o)))
			if o == msgCallstackOverflow {
				obj = lua.LString("user_script:" + strconv.Itoa(overflowLine(fn, line)) + ": stack overflow")
			}
		}
		L.SetTop(0)
		L.Push(lua.LFalse)
		L.Push(obj)
		return 2
	}
	L.Insert(lua.LTrue, 1)
	return L.GetTop()
}

// maxCCalls is Lua 5.1's LUAI_MAXCCALLS: how deep calls made from C nest
// (the script's own call, made by Redis, is the first).
const maxCCalls = 200

// msgCallstackOverflow is what gopher-lua panics with when a call passes
// its call stack (Lua 5.1's LUAI_MAXCALLS): Lua says "stack overflow".
const msgCallstackOverflow = "lua callstack overflow"

// overflowLine is the line Lua 5.1 gives a stack overflow under pcall(fn):
// where the innermost call was. The error handler cannot run on a full
// call stack to see it; line is what it saw if it ran (-1 if not). A
// runaway recursion calls itself from fn, so the line of fn's first call
// stands for it; 1 when fn is no Lua function.
func overflowLine(fn lua.LValue, line int) int {
	if line > 0 {
		return line
	}
	if f, ok := fn.(*lua.LFunction); ok && f.Proto != nil {
		for pc, inst := range f.Proto.Code {
			if op := int(inst >> 26); (op == lua.OP_CALL || op == lua.OP_TAILCALL) && pc < len(f.Proto.DbgSourcePositions) {
				return f.Proto.DbgSourcePositions[pc]
			}
		}
	}
	return 1
}

// luaError is Lua 5.1's error: any value (nil too), and a number is a
// message like a string.
func luaError(L *lua.LState) int {
	obj := L.Get(1)
	level := L.OptInt(2, 1)
	if n, ok := obj.(lua.LNumber); ok && level > 0 {
		obj = lua.LString(numberString(n))
	}
	L.Error(obj, level)
	return 0
}

// luaToString is Lua 5.1's tostring, whose numbers read as %.14g.
func luaToString(L *lua.LState) int {
	L.Push(lua.LString(toString(L.CheckAny(1))))
	return 1
}

func toString(v lua.LValue) string {
	switch x := v.(type) {
	case lua.LNumber:
		return numberString(x)
	case *lua.LUserData:
		if x.Value == nil {
			return "userdata: (nil)" // cjson.null, C's NULL as glibc prints %p
		}
	}
	return v.String()
}

// numberString renders a number as Lua 5.1 does ("%.14g").
func numberString(n lua.LNumber) string { return resp.FormatFloat(float64(n), 14) }

// formatNumber renders a number as Redis does when it passes one to a
// command ("%.17g").
func formatNumber(n lua.LNumber) string { return resp.FormatFloat(float64(n), 17) }

// toInteger is C's (long long) cast on x86-64, which Redis applies to a
// number a script returns: out of range and NaN give the minimum.
func toInteger(n lua.LNumber) int64 {
	f := float64(n)
	if math.IsNaN(f) || f >= 1<<63 || f < -(1<<63) {
		return math.MinInt64
	}
	return int64(f)
}

// noGC stands for collectgarbage and gcinfo: Go's collector is not the
// script's to run (gopher-lua's collectgarbage calls runtime.GC), and a
// pooled state has no heap of its own to count. It answers 0.
func noGC(L *lua.LState) int {
	L.Push(lua.LNumber(0))
	return 1
}
