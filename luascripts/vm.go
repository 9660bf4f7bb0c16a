package luascripts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/backend"
)

// RedisVersion is the version scripts see in redis.REDIS_VERSION.
const RedisVersion = "7.2.4"

// redisVersionNum is RedisVersion as redis.REDIS_VERSION_NUM (0x00MMmmpp).
const redisVersionNum = 7<<16 | 2<<8 | 4

// vm is one Lua state with the sandbox set up, and the state of the script
// it is running. Not safe for concurrent use: a vm serves one Run at a time.
type vm struct {
	L       *lua.LState
	globals *lua.LTable   // the real globals, behind env
	env     *lua.LTable   // what scripts see as _G: empty and read-only
	proxies []*lua.LTable // the read-only tables
	locked  *lua.LTable   // what getmetatable answers for a read-only table
	strMT   *lua.LTable   // what getmetatable answers for a string
	onError *lua.LFunction
	log     *slog.Logger
	libs    *libState // bit, struct, cjson, cmsgpack (libs.go)

	// functions (functions.go)
	fenv     *lua.LTable     // a library's environment
	fenvMT   *lua.LTable     // its metatable, whose __index changes with the phase
	loadAPI  *lua.LTable     // what a library's code sees while it registers
	fglobals *lua.LTable     // what a function sees: the globals, with its own redis table
	loading  *[]registration // the registrations of the load under way; nil outside one

	// per run
	ctx    context.Context
	cancel context.CancelFunc
	caller Caller
	resp   int
	abort  error // a Caller failure that ends the script
	line   int   // where the innermost Lua function was when an error escaped
	// panicked is what a Caller panicked with; Run panics with it again.
	panicked any
	cCalls   int // the calls from C under way, as Lua 5.1 counts them for pcall

	// the memory budget (budget.go)
	budget    int64  // bytes; 0: none
	stopped   error  // why the runner stopped the script (errMemory), nil if it did not
	watched   bool   // the run lasted past a tick and counts in clock.running
	heapStart uint64 // the heap when it started to count
	heapNext  uint64 // the heap at which the next check collects
	w         watch  // the context the state runs under
}

// unsafeGlobals are the base functions Redis's sandbox lacks or that would
// let a script out of ours.
var unsafeGlobals = []string{"dofile", "load", "loadfile", "loadstring", "module", "require",
	"print", "_printregs", "getfenv", "setfenv", "newproxy", "coroutine"}

// maxCalls is Lua 5.1's LUAI_MAXCALLS: how deep Lua calls nest before
// "stack overflow". maxRegistry bounds the value stack (16 bytes a slot).
const (
	maxCalls    = 20000
	maxRegistry = 1 << 20
)

func newVM(log *slog.Logger) *vm {
	L := lua.NewState(lua.Options{
		SkipOpenLibs:        true,
		CallStackSize:       maxCalls,
		RegistrySize:        1024,
		RegistryMaxSize:     maxRegistry,
		RegistryGrowStep:    1 << 16, // it grows linearly: small steps cost the square of deep recursion
		MinimizeStackMemory: true,    // both stacks start small and grow
	})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	v := &vm{L: L, globals: L.G.Global, log: log}
	for _, name := range unsafeGlobals {
		v.globals.RawSetString(name, lua.LNil)
	}
	for name, fn := range map[string]lua.LGFunction{"pcall": v.pcall, "error": luaError, "tostring": luaToString,
		"collectgarbage": noGC, "gcinfo": noGC} {
		v.globals.RawSetString(name, L.NewFunction(fn))
	}
	v.globals.RawSetString("redis", v.redisLib())
	v.openLibs()
	v.boundResults()
	v.globals.RawSetString(concatName, L.NewFunction(func(L *lua.LState) int { // assign.go's splitConcat
		a := L.Get(1)
		if s, ok := a.(lua.LString); ok {
			v.charge(int64(len(s)))
		}
		L.Push(a)
		return 1
	}))
	tbl := v.globals.RawGetString("table").(*lua.LTable)
	for _, name := range []string{"insert", "remove", "sort"} {
		tbl.RawSetString(name, v.guard(name, tbl.RawGetString(name)))
	}
	tbl.RawSetString("concat", v.tableConcat(tbl.RawGetString("concat")))
	str := v.globals.RawGetString("string").(*lua.LTable)
	str.RawSetString("rep", v.strRep(str.RawGetString("rep")))
	for name, fn := range map[string]lua.LGFunction{"find": v.strFind, "match": v.strMatch, "gmatch": v.strGmatch, "gsub": v.strGsub} {
		str.RawSetString(name, L.NewFunction(fn)) // patterns.go
	}
	v.locked = v.readOnly(L.NewTable())
	for _, name := range append([]string{"string", "table", "math", "redis"}, libNames...) {
		v.globals.RawSetString(name, v.readOnly(v.globals.RawGetString(name)))
	}
	// Strings index the string library through their metatable: it and
	// what it leads to are read-only too, as in Redis.
	if mt, ok := L.GetMetatable(lua.LString("")).(*lua.LTable); ok {
		mt.RawSetString("__index", v.globals.RawGetString("string"))
		v.strMT = v.readOnly(mt)
	}
	for _, name := range []string{"rawset", "setmetatable"} {
		v.globals.RawSetString(name, v.guard(name, v.globals.RawGetString(name)))
	}
	v.globals.RawSetString("getmetatable", L.NewFunction(v.getMetatable))
	v.onError = L.NewFunction(v.errorLine)

	// Reading a global nobody defined is an error, as in Redis.
	strict := L.NewTable()
	strict.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.CheckAny(2).String())
		return 0
	}))
	L.SetMetatable(v.globals, strict)
	v.env = v.readOnly(v.globals)
	v.globals.RawSetString("_G", v.env)
	v.functionEnv()
	return v
}

const msgReadonly = "Attempt to modify a readonly table"

// readOnly returns an empty table that reads through to t and refuses
// every write with Redis's text.
func (v *vm) readOnly(t lua.LValue) *lua.LTable {
	proxy, mt := v.L.NewTable(), v.L.NewTable()
	mt.RawSetString("__index", t)
	mt.RawSetString("__newindex", v.L.NewFunction(func(L *lua.LState) int {
		L.RaiseError(msgReadonly)
		return 0
	}))
	if v.locked != nil {
		mt.RawSetString("__metatable", v.locked)
	} else {
		mt.RawSetString("__metatable", lua.LFalse)
	}
	v.L.SetMetatable(proxy, mt)
	v.proxies = append(v.proxies, proxy)
	return proxy
}

// guard wraps name, a function that changes the table it gets first, so
// that it refuses a read-only table as Redis's do, and anything but a
// table with Lua 5.1's words.
func (v *vm) guard(name string, fn lua.LValue) *lua.LFunction {
	return v.L.NewFunction(func(L *lua.LState) int {
		switch t := L.Get(1).(type) {
		case *lua.LTable:
			if slices.Contains(v.proxies, t) {
				L.Error(lua.LString(msgReadonly), 0)
			}
		default:
			got := t.Type().String()
			if L.GetTop() == 0 {
				got = "no value"
			}
			L.RaiseError("bad argument #1 to '%s' (table expected, got %s)", name, got)
		}
		L.Insert(fn, 1)
		L.Call(L.GetTop()-1, lua.MultRet)
		return L.GetTop()
	})
}

// getMetatable is getmetatable with the string metatable read-only.
func (v *vm) getMetatable(L *lua.LState) int {
	obj := L.CheckAny(1)
	if _, ok := obj.(lua.LString); ok && v.strMT != nil {
		L.Push(v.strMT)
		return 1
	}
	mt := L.GetMetatable(obj)
	if t, ok := mt.(*lua.LTable); ok {
		if p := t.RawGetString("__metatable"); p != lua.LNil {
			mt = p
		}
	}
	L.Push(mt)
	return 1
}

// run runs one script. reusable reports whether the state may serve
// another run (not after a timeout, a cancellation or an abort).
// A function's run (fn, the name of the function of library p to call)
// has no KEYS and ARGV globals: the function gets them as arguments.
func (v *vm) run(ctx context.Context, cancel context.CancelFunc, p *lua.FunctionProto, sha, fn string, keys []string, args [][]byte, c Caller) (out backend.Value, err error, reusable bool) {
	v.ctx, v.cancel, v.caller, v.resp, v.abort, v.line, v.panicked, v.stopped = ctx, cancel, c, 2, nil, 0, nil, nil
	v.cCalls = 1 // the call of the script
	v.resetLibs()
	defer func() {
		v.endWatch()
		v.ctx, v.cancel, v.caller, v.w = nil, nil, nil, watch{}
	}()

	L := v.L
	kt := L.CreateTable(len(keys), 0)
	for _, k := range keys {
		kt.Append(lua.LString(k))
	}
	at := L.CreateTable(len(args), 0)
	for _, a := range args {
		at.Append(lua.LString(a))
	}
	L.SetContext(v.watchRun(ctx))
	if fn != "" {
		v.globals.RawSetString("KEYS", lua.LNil)
		v.globals.RawSetString("ARGV", lua.LNil)
		err = v.callFunction(p, fn, kt, at)
	} else {
		v.globals.RawSetString("KEYS", kt)
		v.globals.RawSetString("ARGV", at)
		f := L.NewFunctionFromProto(p)
		f.Env = v.env
		L.Push(f)
		err = L.PCall(0, 1, v.onError)
	}
	L.RemoveContext()
	if v.abort != nil {
		L.SetTop(0)
		return backend.Value{}, fmt.Errorf("luascripts: script %s: %w", sha, v.abort), false
	}
	if re, ok := err.(*backend.ReplyError); ok {
		L.SetTop(0) // refused before the function ran (its flags)
		return backend.Value{}, re, ctx.Err() == nil && v.clean()
	}
	if err != nil {
		L.SetTop(0)
		// A Go panic inside the state may have left it inconsistent.
		var ae *lua.ApiError
		panicked := errors.As(err, &ae) && ae.Type == lua.ApiErrorPanic
		return backend.Value{}, scriptError(sha, err, v.line), !panicked && ctx.Err() == nil && v.clean()
	}
	ret := L.Get(-1)
	L.SetTop(0)
	return v.toValue(ret, 0), nil, v.clean()
}

// errorLine is the error handler of a run, as Redis's: called where the
// error happened, it notes the line of the innermost Lua function and
// hands the error on unchanged. (It also spares gopher-lua building a
// stack trace, which costs the square of the call depth.)
func (v *vm) errorLine(L *lua.LState) int {
	v.line = 0
	for level := 0; ; level++ {
		dbg, ok := L.GetStack(level)
		if !ok {
			break
		}
		if _, err := L.GetInfo("l", dbg, lua.LNil); err == nil && dbg.CurrentLine > 0 {
			v.line = dbg.CurrentLine
			break
		}
	}
	return 1
}

// clean reports whether the read-only tables are still empty: a script
// can rawset into them, and what it put there must not reach the next run.
func (v *vm) clean() bool {
	for _, p := range v.proxies {
		if k, _ := p.Next(lua.LNil); k != lua.LNil {
			return false
		}
	}
	return true
}
