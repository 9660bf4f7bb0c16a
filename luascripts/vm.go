package luascripts

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// RedisVersion is the version scripts see in redis.REDIS_VERSION.
const RedisVersion = "7.2.4"

// vm is one Lua state with the sandbox set up, and the state of the script
// it is running. Not safe for concurrent use: a vm serves one Run at a time.
type vm struct {
	L       *lua.LState
	globals *lua.LTable // the real globals, behind env
	env     *lua.LTable // what scripts see as _G: empty and read-only
	proxies []*lua.LTable
	log     *slog.Logger

	// per run
	ctx    context.Context
	cancel context.CancelFunc
	caller Caller
	resp   int
	abort  error // a Caller failure that ends the script
}

// unsafeGlobals are the base functions Redis's sandbox lacks or that would
// let a script out of ours.
var unsafeGlobals = []string{"dofile", "load", "loadfile", "loadstring", "module", "require",
	"print", "_printregs", "getfenv", "setfenv", "newproxy", "coroutine"}

func newVM(log *slog.Logger) *vm {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 200, MinimizeStackMemory: true})
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
	v.globals.RawSetString("redis", v.redisLib())
	for _, name := range []string{"string", "table", "math", "redis"} {
		v.globals.RawSetString(name, v.readOnly(v.globals.RawGetString(name)))
	}

	// Reading a global nobody defined is an error, as in Redis.
	strict := L.NewTable()
	strict.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.CheckAny(2).String())
		return 0
	}))
	L.SetMetatable(v.globals, strict)
	v.env = v.readOnly(v.globals).(*lua.LTable)
	v.globals.RawSetString("_G", v.env)
	return v
}

// readOnly returns an empty table that reads through to t and refuses
// every write with Redis's text.
func (v *vm) readOnly(t lua.LValue) lua.LValue {
	proxy, mt := v.L.NewTable(), v.L.NewTable()
	mt.RawSetString("__index", t)
	mt.RawSetString("__newindex", v.L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	mt.RawSetString("__metatable", lua.LFalse)
	v.L.SetMetatable(proxy, mt)
	v.proxies = append(v.proxies, proxy)
	return proxy
}

// run runs one script. reusable reports whether the state may serve
// another run (not after a timeout, a cancellation or an abort).
func (v *vm) run(ctx context.Context, cancel context.CancelFunc, p *lua.FunctionProto, sha string, keys []string, args [][]byte, c Caller) (out backend.Value, err error, reusable bool) {
	v.ctx, v.cancel, v.caller, v.resp, v.abort = ctx, cancel, c, 2, nil
	defer func() { v.ctx, v.cancel, v.caller = nil, nil, nil }()

	L := v.L
	kt := L.CreateTable(len(keys), 0)
	for _, k := range keys {
		kt.Append(lua.LString(k))
	}
	at := L.CreateTable(len(args), 0)
	for _, a := range args {
		at.Append(lua.LString(a))
	}
	v.globals.RawSetString("KEYS", kt)
	v.globals.RawSetString("ARGV", at)

	fn := L.NewFunctionFromProto(p)
	fn.Env = v.env
	L.SetContext(ctx)
	L.Push(fn)
	err = L.PCall(0, 1, nil)
	L.RemoveContext()
	if v.abort != nil {
		L.SetTop(0)
		return backend.Value{}, fmt.Errorf("luascripts: script %s: %w", sha, v.abort), false
	}
	if err != nil {
		L.SetTop(0)
		return backend.Value{}, scriptError(sha, err), ctx.Err() == nil && v.clean()
	}
	ret := L.Get(-1)
	L.SetTop(0)
	out, err = v.toValue(ret, 0)
	return out, err, v.clean()
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

var stackLine = regexp.MustCompile(`user_script:(\d+):`)

// scriptError turns an error that escaped a script into Redis 7's reply:
// the error table's err text verbatim, or "ERR " and the message, then
// " script: <sha>, on @user_script:<line>.".
func scriptError(sha string, err error) error {
	var ae *lua.ApiError
	if !errors.As(err, &ae) {
		return &backend.ReplyError{Reply: "ERR " + oneLine(err.Error()), Err: err}
	}
	line := "1"
	if m := stackLine.FindStringSubmatch(ae.StackTrace); m != nil {
		line = m[1]
	} else if m := stackLine.FindStringSubmatch(ae.Object.String()); m != nil {
		line = m[1]
	}
	var msg string
	switch o := ae.Object.(type) {
	case *lua.LTable:
		if s, ok := o.RawGetString("err").(lua.LString); ok {
			msg = string(s)
		} else {
			msg = "ERR unknown error"
		}
	default:
		msg = "ERR " + o.String()
	}
	return &backend.ReplyError{Reply: oneLine(msg) + " script: " + sha + ", on @user_script:" + line + ".", Err: err}
}

// oneLine replaces line breaks, which an error reply cannot carry, with
// spaces, as Redis does.
func oneLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	}
	return s
}

// formatNumber renders a Lua number as Redis does when it passes one to a
// command (%.17g).
func formatNumber(n lua.LNumber) string {
	f := float64(n)
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
