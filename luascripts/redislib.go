package luascripts

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/backend"
)

// The redis.log levels, as in Redis.
const (
	logDebug   = 0
	logVerbose = 1
	logNotice  = 2
	logWarning = 3
)

// The redis.set_repl flags, as in Redis.
const (
	replAOF     = 1
	replReplica = 2
)

// The texts of the errors the redis table raises, as Redis 7 words them
// (each gets "ERR " in front).
const (
	msgNoArgs       = "Please specify at least one argument for this redis lib call"
	msgBadArg       = "Lua redis lib command arguments must be strings or integers"
	msgReplyArgs    = "wrong number or type of arguments"
	msgSHA1Args     = "wrong number of arguments"
	msgLogArgs      = "redis.log() requires two arguments or more."
	msgLogLevelType = "First argument must be a number (log level)."
	msgLogLevel     = "Invalid debug level."
	msgRESPArgs     = "redis.setresp() requires one argument."
	msgRESPVersion  = "RESP version must be 2 or 3."
	msgReplArgs     = "redis.set_repl() requires two arguments." // sic
	msgReplFlags    = "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."
)

// redisLib builds the redis table scripts see.
func (v *vm) redisLib() *lua.LTable {
	L := v.L
	t := L.NewTable()
	fns := map[string]lua.LGFunction{
		"call":               func(L *lua.LState) int { return v.call(L, true) },
		"pcall":              func(L *lua.LState) int { return v.call(L, false) },
		"error_reply":        errorReply,
		"status_reply":       statusReply,
		"sha1hex":            sha1Hex,
		"log":                v.logLine,
		"setresp":            v.setRESP,
		"set_repl":           setRepl,
		"replicate_commands": func(L *lua.LState) int { L.Push(lua.LTrue); return 1 },
		"breakpoint":         func(L *lua.LState) int { L.Push(lua.LFalse); return 1 },
		"debug":              func(L *lua.LState) int { return 0 },
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	for name, n := range map[string]int{"LOG_DEBUG": logDebug, "LOG_VERBOSE": logVerbose, "LOG_NOTICE": logNotice,
		"LOG_WARNING": logWarning, "REPL_NONE": 0, "REPL_AOF": replAOF, "REPL_SLAVE": replReplica,
		"REPL_REPLICA": replReplica, "REPL_ALL": replAOF | replReplica} {
		t.RawSetString(name, lua.LNumber(n))
	}
	t.RawSetString("REDIS_VERSION", lua.LString(RedisVersion))
	t.RawSetString("REDIS_VERSION_NUM", lua.LNumber(redisVersionNum))
	return t
}

// errorReply is redis.error_reply: {err=text}, text made as Redis makes
// it from "-" and the argument. Bad arguments give an error table too,
// returned, not raised.
func errorReply(L *lua.LState) int {
	s, ok := L.Get(1).(lua.LString)
	if L.GetTop() != 1 || !ok {
		L.Push(errorTable(L, errorText(msgReplyArgs)))
		return 1
	}
	line := string(s)
	if !strings.HasPrefix(line, "-") {
		line = "-" + line
	}
	L.Push(errorTable(L, errorText(line)))
	return 1
}

// statusReply is redis.status_reply: {ok=text}.
func statusReply(L *lua.LState) int {
	s, ok := L.Get(1).(lua.LString)
	if L.GetTop() != 1 || !ok {
		L.Push(errorTable(L, errorText(msgReplyArgs)))
		return 1
	}
	t := L.CreateTable(0, 1)
	t.RawSetString("ok", s)
	L.Push(t)
	return 1
}

func sha1Hex(L *lua.LState) int {
	if L.GetTop() != 1 {
		return raise(L, msgSHA1Args)
	}
	sum := sha1.Sum([]byte(lua.LVAsString(L.Get(1))))
	L.Push(lua.LString(hex.EncodeToString(sum[:])))
	return 1
}

// toNumber is lua_tonumber: a number, or a string that reads as one
// (strtod or hex, spaces around allowed); ok is false for anything else.
func toNumber(v lua.LValue) (n lua.LNumber, ok bool) {
	switch x := v.(type) {
	case lua.LNumber:
		return x, true
	case lua.LString:
		s := strings.TrimSpace(string(x))
		if h, found := strings.CutPrefix(strings.ToLower(s), "0x"); found {
			u, err := strconv.ParseUint(h, 16, 64)
			return lua.LNumber(u), err == nil
		}
		f, err := strconv.ParseFloat(s, 64)
		return lua.LNumber(f), err == nil && !strings.Contains(s, "_")
	}
	return 0, false
}

// logLine is redis.log: the level, then the message parts (strings and
// numbers, joined by spaces) to cfg.Logger.
func (v *vm) logLine(L *lua.LState) int {
	n := L.GetTop()
	if n < 2 {
		return raise(L, msgLogArgs)
	}
	lv, ok := toNumber(L.Get(1))
	if !ok {
		return raise(L, msgLogLevelType)
	}
	level := int(lv)
	if level < logDebug || level > logWarning {
		return raise(L, msgLogLevel)
	}
	var b strings.Builder
	for i := 2; i <= n; i++ {
		switch a := L.Get(i).(type) {
		case lua.LString:
			if i > 2 {
				b.WriteByte(' ')
			}
			b.WriteString(string(a))
		case lua.LNumber:
			if i > 2 {
				b.WriteByte(' ')
			}
			b.WriteString(numberString(a))
		}
	}
	sl := [...]slog.Level{logDebug: slog.LevelDebug, logVerbose: slog.LevelDebug, logNotice: slog.LevelInfo, logWarning: slog.LevelWarn}[level]
	v.log.Log(v.ctx, sl, b.String(), "source", "redis.log")
	return 0
}

// setRESP is redis.setresp: the protocol of the replies redis.call gives
// the script from now on.
func (v *vm) setRESP(L *lua.LState) int {
	if L.GetTop() != 1 {
		return raise(L, msgRESPArgs)
	}
	n, _ := toNumber(L.Get(1))
	if resp := int(n); resp == 2 || resp == 3 {
		v.resp = resp
		return 0
	}
	return raise(L, msgRESPVersion)
}

// setRepl is redis.set_repl: checked, then ignored (lockproxy has no
// replicas).
func setRepl(L *lua.LState) int {
	if L.GetTop() != 1 {
		return raise(L, msgReplArgs)
	}
	n, _ := toNumber(L.Get(1))
	if int(n)&^(replAOF|replReplica) != 0 {
		return raise(L, msgReplFlags)
	}
	return 0
}

// call is redis.call (raise) and redis.pcall (return the error table).
func (v *vm) call(L *lua.LState, raiseErr bool) int {
	fail := func(msg string) int {
		if raiseErr {
			return raise(L, msg)
		}
		L.Push(errorTable(L, errorText(msg)))
		return 1
	}
	if v.abort != nil {
		L.RaiseError("script aborted: %v", v.abort)
	}
	n := L.GetTop()
	if n == 0 {
		return fail(msgNoArgs)
	}
	// One buffer holds every argument (a backend may keep them: they are
	// copies, never Lua's own strings).
	size := 0
	for i := 1; i <= n; i++ {
		switch a := L.Get(i).(type) {
		case lua.LString:
			size += len(a)
		case lua.LNumber:
			size += 24
		default:
			return fail(msgBadArg)
		}
	}
	v.charge(int64(size))
	buf := make([]byte, 0, size)
	args := make([][]byte, n)
	for i := range args {
		start := len(buf)
		switch a := L.Get(i + 1).(type) {
		case lua.LString:
			buf = append(buf, a...)
		case lua.LNumber:
			buf = append(buf, formatNumber(a)...)
		}
		args[i] = buf[start:len(buf):len(buf)]
	}
	val, err := v.callCaller(args)
	if err != nil {
		var re *backend.ReplyError
		if errors.As(err, &re) {
			return fail("-" + re.Reply)
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

// callCaller runs the Caller. A panic in it does not become a script
// error: it is kept, the run is stopped, and Run panics again with it
// once out of the Lua state, so the panic reaches the caller's recovery.
func (v *vm) callCaller(args [][]byte) (val backend.Value, err error) {
	defer func() {
		if p := recover(); p != nil {
			v.panicked = p
			err = errCallerPanicked
		}
	}()
	return v.caller.Call(v.ctx, args)
}

var errCallerPanicked = errors.New("luascripts: Caller panicked")
