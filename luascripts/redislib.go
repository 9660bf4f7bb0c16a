package luascripts

import (
	"errors"
	"log/slog"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// The redis.log levels, as in Redis.
const (
	logDebug   = 0
	logVerbose = 1
	logNotice  = 2
	logWarning = 3
)

// redisLib builds the redis table scripts see.
func (v *vm) redisLib() *lua.LTable {
	L := v.L
	t := L.NewTable()
	fns := map[string]lua.LGFunction{
		"call":         func(L *lua.LState) int { return v.call(L, true) },
		"pcall":        func(L *lua.LState) int { return v.call(L, false) },
		"error_reply":  replyFunc("err"),
		"status_reply": replyFunc("ok"),
		"sha1hex": func(L *lua.LState) int {
			if L.GetTop() != 1 {
				L.RaiseError("wrong number of arguments")
			}
			L.Push(lua.LString(sha1hex(L.ToString(1))))
			return 1
		},
		"log": func(L *lua.LState) int {
			if L.GetTop() < 2 {
				L.RaiseError("redis.log() requires two arguments or more.")
			}
			level, ok := L.Get(1).(lua.LNumber)
			if !ok || level < logDebug || level > logWarning {
				L.RaiseError("Invalid debug level.")
			}
			parts := make([]string, 0, L.GetTop()-1)
			for i := 2; i <= L.GetTop(); i++ {
				parts = append(parts, L.ToString(i))
			}
			lv := map[lua.LNumber]slog.Level{logDebug: slog.LevelDebug, logVerbose: slog.LevelDebug, logNotice: slog.LevelInfo, logWarning: slog.LevelWarn}[level]
			v.log.Log(v.ctx, lv, strings.Join(parts, " "), "source", "redis.log")
			return 0
		},
		"setresp": func(L *lua.LState) int {
			if L.GetTop() != 1 {
				L.RaiseError("redis.setresp() requires one argument.")
			}
			n := L.CheckInt(1)
			if n != 2 && n != 3 {
				L.RaiseError("RESP version must be 2 or 3.")
			}
			v.resp = n
			return 0
		},
		"replicate_commands": func(L *lua.LState) int { L.Push(lua.LTrue); return 1 },
		"set_repl":           func(L *lua.LState) int { return 0 },
		"breakpoint":         func(L *lua.LState) int { L.Push(lua.LFalse); return 1 },
		"debug":              func(L *lua.LState) int { return 0 },
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	for name, n := range map[string]int{"LOG_DEBUG": logDebug, "LOG_VERBOSE": logVerbose, "LOG_NOTICE": logNotice,
		"LOG_WARNING": logWarning, "REPL_NONE": 0, "REPL_AOF": 1, "REPL_SLAVE": 2, "REPL_REPLICA": 2, "REPL_ALL": 3} {
		t.RawSetString(name, lua.LNumber(n))
	}
	t.RawSetString("REDIS_VERSION", lua.LString(RedisVersion))
	t.RawSetString("REDIS_VERSION_NUM", lua.LNumber(7<<16|2<<8|4))
	return t
}

// replyFunc is redis.error_reply (field "err") or redis.status_reply
// ("ok"): one string argument, returned as the reply table.
func replyFunc(field string) lua.LGFunction {
	return func(L *lua.LState) int {
		s, ok := L.Get(1).(lua.LString)
		if L.GetTop() != 1 || !ok {
			L.RaiseError("wrong number or type of arguments")
		}
		L.Push(replyTable(L, field, string(s)))
		return 1
	}
}

func replyTable(L *lua.LState, field, s string) *lua.LTable {
	t := L.CreateTable(0, 1)
	t.RawSetString(field, lua.LString(s))
	return t
}

// call is redis.call (raise) and redis.pcall (return the error table).
func (v *vm) call(L *lua.LState, raise bool) int {
	fail := func(msg string) int {
		t := replyTable(L, "err", msg)
		if raise {
			L.Error(t, 0)
		}
		L.Push(t)
		return 1
	}
	if v.abort != nil {
		L.RaiseError("script aborted: %v", v.abort)
	}
	n := L.GetTop()
	if n == 0 {
		return fail("ERR Please specify at least one argument for this redis lib call")
	}
	args := make([][]byte, n)
	for i := 1; i <= n; i++ {
		switch a := L.Get(i).(type) {
		case lua.LString:
			args[i-1] = []byte(a)
		case lua.LNumber:
			args[i-1] = []byte(formatNumber(a))
		default:
			return fail("ERR Lua redis lib command arguments must be strings or integers")
		}
	}
	val, err := v.caller.Call(v.ctx, args)
	if err != nil {
		var re *backend.ReplyError
		if errors.As(err, &re) {
			return fail(re.Reply)
		}
		// Storage failed: the script must not go on as if it had an
		// answer. Cancelling the run makes every later instruction fail,
		// even under pcall.
		v.abort = err
		v.cancel()
		L.RaiseError("script aborted: %v", err)
	}
	L.Push(v.toLua(val))
	return 1
}

// toLua converts a command's reply to Lua as Redis does for the script's
// protocol (redis.setresp).
func (v *vm) toLua(val backend.Value) lua.LValue {
	L := v.L
	switch val.Kind {
	case backend.KindInt:
		return lua.LNumber(val.Int)
	case backend.KindBulk, backend.KindVerbatim, backend.KindBigNumber:
		if v.resp == 3 && val.Kind == backend.KindBigNumber {
			return replyTable(L, "big_number", string(val.Str))
		}
		return lua.LString(val.Str)
	case backend.KindNil, backend.KindNilArray:
		if v.resp == 3 {
			return lua.LNil
		}
		return lua.LFalse
	case backend.KindStatus:
		return replyTable(L, "ok", string(val.Str))
	case backend.KindError:
		return replyTable(L, "err", string(val.Str))
	case backend.KindDouble:
		if v.resp == 3 {
			t := L.CreateTable(0, 1)
			t.RawSetString("double", lua.LNumber(val.Float))
			return t
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
			t := L.CreateTable(0, 1)
			t.RawSetString("map", m)
			return t
		}
	case backend.KindSet:
		if v.resp == 3 {
			s := L.NewTable()
			for _, e := range val.Elems {
				s.RawSet(v.toLua(e), lua.LTrue)
			}
			t := L.CreateTable(0, 1)
			t.RawSetString("set", s)
			return t
		}
	}
	t := L.CreateTable(len(val.Elems), 0)
	for _, e := range val.Elems {
		t.Append(v.toLua(e))
	}
	return t
}

// maxDepth bounds the nesting of a script's reply, so a table that holds
// itself is an error, not a hang.
const maxDepth = 200

// toValue converts a script's return value to a reply by Redis's rules.
func (v *vm) toValue(lv lua.LValue, depth int) (backend.Value, error) {
	if depth > maxDepth {
		return backend.Value{}, backend.Reply("ERR reached lua stack limit")
	}
	switch x := lv.(type) {
	case lua.LString:
		return backend.BulkString(string(x)), nil
	case lua.LNumber:
		return backend.Int(int64(x)), nil
	case lua.LBool:
		if v.resp == 3 {
			return backend.Value{Kind: backend.KindBool, Int: map[bool]int64{true: 1}[bool(x)]}, nil
		}
		if x {
			return backend.Int(1), nil
		}
		return backend.NilValue, nil
	case *lua.LTable:
		if s, ok := x.RawGetString("err").(lua.LString); ok {
			return backend.ErrorValue(oneLine(string(s))), nil
		}
		if s, ok := x.RawGetString("ok").(lua.LString); ok {
			return backend.Status(oneLine(string(s))), nil
		}
		if d, ok := x.RawGetString("double").(lua.LNumber); ok {
			return backend.Value{Kind: backend.KindDouble, Float: float64(d)}, nil
		}
		if s, ok := x.RawGetString("big_number").(lua.LString); ok {
			return backend.Value{Kind: backend.KindBigNumber, Str: []byte(s)}, nil
		}
		if m, ok := x.RawGetString("map").(*lua.LTable); ok {
			out := backend.Value{Kind: backend.KindMap, Elems: []backend.Value{}}
			var err error
			m.ForEach(func(k, val lua.LValue) {
				if err != nil {
					return
				}
				kv, e1 := v.toValue(k, depth+1)
				vv, e2 := v.toValue(val, depth+1)
				err = errors.Join(e1, e2)
				out.Elems = append(out.Elems, kv, vv)
			})
			return out, err
		}
		if s, ok := x.RawGetString("set").(*lua.LTable); ok {
			out := backend.Value{Kind: backend.KindSet, Elems: []backend.Value{}}
			var err error
			s.ForEach(func(k, _ lua.LValue) {
				if err != nil {
					return
				}
				kv, e := v.toValue(k, depth+1)
				err = e
				out.Elems = append(out.Elems, kv)
			})
			return out, err
		}
		elems := []backend.Value{}
		for i := 1; ; i++ {
			e := x.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			ev, err := v.toValue(e, depth+1)
			if err != nil {
				return backend.Value{}, err
			}
			elems = append(elems, ev)
		}
		return backend.Value{Kind: backend.KindArray, Elems: elems}, nil
	}
	return backend.NilValue, nil
}
