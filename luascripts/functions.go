package luascripts

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/backend"
)

// Redis 7 functions (FUNCTION LOAD, FCALL) on the script engine.
//
// A library is Lua code behind a "#!lua name=<lib>" line whose run
// registers functions with redis.register_function. LoadLibrary checks a
// library as FUNCTION LOAD does: its metadata, its compilation, and one
// run of its code in Redis's load environment (the only global is a
// redis table holding register_function, log, the LOG_* levels and the
// version; no redis.call; at most loadTimeout), with Redis 7.0's error
// texts. The proxy keeps the libraries it loaded; this package keeps none.
//
// FCALL is a Run of a backend.Script whose Src is the library's code and
// whose Function names the function: the run executes the library's code
// in the load environment again, then calls the function it registered
// under that name with two tables, KEYS and ARGV, in the script
// environment (no KEYS or ARGV globals, as in Redis). So a function runs
// on every backend's script path, atomically like EVAL, and on quorum on
// the model path. The function's flags are those it registered: FCALL_RO
// refuses one without no-writes, and no-writes refuses its writes, with
// Redis's texts. Errors name the function and user_function, as Redis's
// do ("… script: <function>, on @user_function:<line>.").
//
// A function is refused, before it runs, for a command lockproxy does not
// serve that its library's text can send (refuse.go), whichever function
// of the library sends it.
//
// Unlike Redis, which runs a library's code once at FUNCTION LOAD, each
// FCALL starts from a fresh run of it: a library's local variables start
// over on every call instead of lasting until the library is replaced.
// That makes a call repeatable, which quorum's model rounds need (a round
// may run a script again), and no lock library keeps state that way.

// loadTimeout bounds the run of FUNCTION LOAD, as Redis's LOAD_TIMEOUT_MS.
const loadTimeout = 500 * time.Millisecond

// msgBadName is Redis's reply for a library or function name that is
// not letters, digits and underscores (functionsVerifyName).
const msgBadName = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"

// Library is a function library as FUNCTION LOAD found it.
type Library struct {
	Name      string     // from its "name=" metadata, as given
	Code      string     // the whole text, metadata line included
	Functions []Function // in the order the code registered them
}

// Function is one function a library registered.
type Function struct {
	Name           string
	Description    string
	HasDescription bool
	// Flags are its flags by Redis's names, in Redis's order (no-writes,
	// allow-oom, allow-stale, no-cluster, allow-cross-slot-keys).
	Flags []string
}

// registration is one redis.register_function call of a run.
type registration struct {
	name    string
	desc    string
	hasDesc bool
	flags   scriptFlags
	fn      *lua.LFunction
}

// LibraryName reads code's metadata line as Redis's
// functionExtractLibMetaData and functionsCreateWithLibraryCtx do, before
// anything else: the library's name, or Redis's error for bad metadata,
// a bad name or an engine other than Lua (*backend.ReplyError).
func LibraryName(code string) (string, error) {
	if !strings.HasPrefix(code, "#!") {
		return "", backend.Reply("ERR Missing library metadata")
	}
	end := strings.IndexByte(code, '\n')
	if nul := strings.IndexByte(code, 0); end < 0 || nul >= 0 && nul < end { // C's strchr stops at a NUL
		return "", backend.Reply("ERR Invalid library metadata")
	}
	parts, ok := splitArgs(code[:end])
	if !ok || len(parts) == 0 {
		return "", backend.Reply("ERR Invalid library metadata")
	}
	engine, name, named := parts[0][2:], "", false
	for _, p := range parts[1:] {
		if len(p) < 5 || !strings.EqualFold(p[:5], "name=") {
			return "", backend.Reply("ERR Invalid metadata value given: " + p)
		}
		if named {
			return "", backend.Reply("ERR Invalid metadata value, name argument was given multiple times")
		}
		name, named = p[5:], true
	}
	if !named {
		return "", backend.Reply("ERR Library name was not given")
	}
	if !validName(name) {
		return "", backend.Reply("ERR " + msgBadName)
	}
	if !strings.EqualFold(engine, "lua") {
		return "", backend.Reply("ERR Engine '" + engine + "' not found")
	}
	return name, nil
}

// validName is Redis's functionsVerifyName.
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

// LoadLibrary checks code as FUNCTION LOAD does (the top of this file) and
// returns what it registers, or Redis's error reply (*backend.ReplyError).
func LoadLibrary(code string) (*Library, error) {
	name, err := LibraryName(code)
	if err != nil {
		return nil, err
	}
	proto, err := compileLibrary(code)
	if err != nil {
		return nil, err
	}
	v := newVM(slog.New(slog.DiscardHandler))
	defer v.L.Close()
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	startClock()
	v.ctx, v.cancel, v.budget, v.stopped = ctx, cancel, DefaultMemoryLimit, nil
	v.L.SetContext(v.watchRun(ctx))
	regs, err := v.load(proto)
	v.L.RemoveContext()
	v.endWatch()
	switch {
	case v.stopped != nil:
		freeMemory()
		return nil, backend.Reply("ERR Error registering functions: ERR FUNCTION LOAD used more memory than the script memory limit (" + memoryText(DefaultMemoryLimit) + ")")
	case ctx.Err() != nil:
		return nil, backend.Reply("ERR Error registering functions: ERR FUNCTION LOAD timeout")
	case err != nil:
		return nil, backend.Reply("ERR Error registering functions: " + functionText(errorMessage(err, v.line), "", ""))
	case len(regs) == 0:
		return nil, backend.Reply("ERR No functions registered")
	}
	lib := &Library{Name: name, Code: code}
	for _, r := range regs {
		lib.Functions = append(lib.Functions, Function{Name: r.name, Description: r.desc, HasDescription: r.hasDesc, Flags: r.flags.names()})
	}
	return lib, nil
}

// compileLibrary compiles a library's code with its metadata line blanked
// (lines keep their numbers), with Redis's words for an error.
func compileLibrary(code string) (*lua.FunctionProto, error) {
	end := strings.IndexByte(code, '\n')
	if end < 0 {
		return nil, backend.Reply("ERR Invalid library metadata")
	}
	proto, err := compile(strings.Repeat(" ", end) + code[end:])
	var re *backend.ReplyError
	if errors.As(err, &re) {
		msg := strings.Replace(re.Reply, "ERR Error compiling script (new function): ", "ERR Error compiling function: ", 1)
		return nil, backend.Reply(functionText(msg, "", ""))
	}
	return proto, err
}

// functionText words a script's error text for a function: user_function
// for user_script, and the function's name for the script's SHA1.
func functionText(s, sha, name string) string {
	if sha != "" {
		s = strings.ReplaceAll(s, " script: "+sha+", on @user_script:", " script: "+name+", on @user_script:")
	}
	return strings.ReplaceAll(s, "user_script:", "user_function:")
}

// functionResult words a function run's error, or error reply, as Redis
// does for functions (functionText).
func functionResult(s backend.Script, v backend.Value, err error) (backend.Value, error) {
	var re *backend.ReplyError
	if errors.As(err, &re) {
		return v, &backend.ReplyError{Reply: functionText(re.Reply, s.SHA1, s.Function), Err: re.Err}
	}
	if err == nil && v.Kind == backend.KindError {
		v.Str = []byte(functionText(string(v.Str), s.SHA1, s.Function))
	}
	return v, err
}

// names returns f's flags by Redis's names, in Redis's order.
func (f scriptFlags) names() []string {
	out := []string{}
	for _, n := range []string{"no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"} {
		if f&flagNames[n] != 0 {
			out = append(out, n)
		}
	}
	return out
}

// functionEnv sets up the environment a library's code runs in: fenv, an
// empty read-only table whose lookups go to the load API while the code
// registers its functions and to the script globals (fglobals: with a
// function's redis table) while a function runs (Redis swaps the __index
// of its globals' metatable the same way).
// The functions the code defines keep fenv as theirs.
func (v *vm) functionEnv() {
	L := v.L
	strict := L.NewTable()
	strict.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.CheckAny(2).String())
		return 0
	}))
	red := L.NewTable()
	red.RawSetString("register_function", L.NewFunction(v.registerFunction))
	red.RawSetString("log", L.NewFunction(v.logLine))
	for name, n := range map[string]int{"LOG_DEBUG": logDebug, "LOG_VERBOSE": logVerbose, "LOG_NOTICE": logNotice, "LOG_WARNING": logWarning} {
		red.RawSetString(name, lua.LNumber(n))
	}
	red.RawSetString("REDIS_VERSION", lua.LString(RedisVersion))
	red.RawSetString("REDIS_VERSION_NUM", lua.LNumber(redisVersionNum))
	L.SetMetatable(red, strict)
	api := L.NewTable()
	api.RawSetString("redis", v.readOnly(red))
	L.SetMetatable(api, strict)
	v.loadAPI = v.readOnly(api)

	// A function's redis table lacks what only EVAL has (Redis's eval.c
	// adds them): breakpoint, debug and replicate_commands.
	fred := v.redisLib()
	for _, name := range []string{"breakpoint", "debug", "replicate_commands"} {
		fred.RawSetString(name, lua.LNil)
	}
	v.fglobals = L.NewTable()
	v.fglobals.RawSetString("redis", v.readOnly(fred))
	mt := L.NewTable()
	mt.RawSetString("__index", v.globals)
	L.SetMetatable(v.fglobals, mt)

	v.fenv, v.fenvMT = L.NewTable(), L.NewTable()
	v.fenvMT.RawSetString("__index", v.fglobals)
	v.fenvMT.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError(msgReadonly)
		return 0
	}))
	v.fenvMT.RawSetString("__metatable", v.locked)
	L.SetMetatable(v.fenv, v.fenvMT)
	v.proxies = append(v.proxies, v.fenv)
}

// load runs a library's code in the load environment and returns what it
// registered. The caller has set the state's context.
func (v *vm) load(p *lua.FunctionProto) ([]registration, error) {
	L := v.L
	v.loading = &[]registration{}
	v.fenvMT.RawSetString("__index", v.loadAPI)
	defer func() {
		v.loading = nil
		v.fenvMT.RawSetString("__index", v.fglobals)
	}()
	fn := L.NewFunctionFromProto(p)
	fn.Env = v.fenv
	L.Push(fn)
	err := L.PCall(0, 0, v.onError)
	L.SetTop(0)
	return *v.loading, err
}

// callFunction is a run's body for a function (run): the library's code
// registers its functions, then the one named runs with KEYS and ARGV,
// under its flags. It leaves the reply or the error on the stack as run's
// PCall does.
func (v *vm) callFunction(p *lua.FunctionProto, name string, kt, at *lua.LTable) error {
	regs, err := v.load(p)
	if err != nil {
		return err
	}
	for _, r := range regs {
		if r.name != name {
			continue
		}
		c, err := r.flags.caller(v.caller)
		if err != nil {
			return err
		}
		v.caller = c
		L := v.L
		L.Push(r.fn)
		L.Push(kt)
		L.Push(at)
		return L.PCall(2, 1, v.onError)
	}
	return backend.Reply("ERR Function not found")
}

// registerFunction is redis.register_function (Redis's
// luaRegisterFunction), with Redis's texts for its errors.
func (v *vm) registerFunction(L *lua.LState) int {
	if v.loading == nil {
		return raise(L, "redis.register_function can only be called on FUNCTION LOAD command")
	}
	var r registration
	var msg string
	switch n := L.GetTop(); {
	case n < 1 || n > 2:
		msg = "wrong number of arguments to redis.register_function"
	case n == 1:
		r, msg = v.namedArgs(L)
	default:
		name, ok := luaString(L.Get(1))
		fn, isFn := L.Get(2).(*lua.LFunction)
		switch {
		case !ok:
			msg = "first argument to redis.register_function must be a string"
		case !isFn:
			msg = "second argument to redis.register_function must be a function"
		}
		r = registration{name: name, fn: fn}
	}
	if msg == "" && !validName(r.name) {
		msg = msgBadName
	}
	if msg == "" {
		for _, o := range *v.loading {
			if o.name == r.name {
				msg = "Function already exists in the library"
			}
		}
	}
	if msg != "" {
		return raise(L, msg)
	}
	*v.loading = append(*v.loading, r)
	return 0
}

// namedArgs reads register_function's table form.
func (v *vm) namedArgs(L *lua.LState) (r registration, msg string) {
	t, ok := L.Get(1).(*lua.LTable)
	if !ok {
		return r, "calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments)."
	}
	named := false
	for k, val := t.Next(lua.LNil); k != lua.LNil; k, val = t.Next(k) {
		key, ok := luaString(k)
		if !ok {
			return r, "named argument key given to redis.register_function is not a string"
		}
		switch strings.ToLower(key) {
		case "function_name":
			if r.name, named = luaString(val); !named {
				return r, "function_name argument given to redis.register_function must be a string"
			}
		case "description":
			if r.desc, r.hasDesc = luaString(val); !r.hasDesc {
				return r, "description argument given to redis.register_function must be a string"
			}
		case "callback":
			if r.fn, ok = val.(*lua.LFunction); !ok {
				return r, "callback argument given to redis.register_function must be a function"
			}
		case "flags":
			ft, ok := val.(*lua.LTable)
			if !ok {
				return r, "flags argument to redis.register_function must be a table representing function flags"
			}
			for i := 1; ; i++ {
				e := ft.RawGetInt(i)
				if e == lua.LNil {
					break
				}
				s, ok := luaString(e)
				f, known := flagNames[strings.ToLower(s)]
				if !ok || !known {
					return r, "unknown flag given"
				}
				r.flags |= f
			}
		default:
			return r, "unknown argument given to redis.register_function"
		}
	}
	if !named {
		return r, "redis.register_function must get a function name argument"
	}
	if r.fn == nil {
		return r, "redis.register_function must get a callback argument"
	}
	return r, ""
}

// luaString is lua_isstring and lua_tostring: a string, or a number as
// Lua writes it.
func luaString(lv lua.LValue) (string, bool) {
	switch x := lv.(type) {
	case lua.LString:
		return string(x), true
	case lua.LNumber:
		return x.String(), true
	}
	return "", false
}
