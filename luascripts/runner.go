package luascripts

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/lockproxy/lockproxy/backend"
)

// Caller runs one redis.call or redis.pcall for a running script. A
// *backend.ReplyError it returns is a Redis command error the script sees
// (redis.call raises it, redis.pcall returns it as {err=…}); any other error
// aborts the script and Run returns it.
type Caller interface {
	Call(ctx context.Context, args [][]byte) (backend.Value, error)
}

// Config configures a Runner.
type Config struct {
	// TimeLimit bounds one script's run time. default: 5s
	TimeLimit time.Duration
	// MemoryLimit bounds the memory one script holds, in bytes (budget.go:
	// how it is checked, and by how much a script can pass it before it
	// is stopped). default: 64 MiB
	MemoryLimit int64
	// Logger receives redis.log lines. default: discard
	Logger *slog.Logger
}

// DefaultMemoryLimit is Config.MemoryLimit's default.
const DefaultMemoryLimit = 64 << 20

// Runner runs scripts. It is safe for concurrent use.
type Runner struct {
	cfg   Config
	pool  sync.Pool // *vm
	mu    sync.RWMutex
	procs map[string]*compiled // by SHA1
}

// compiled is a script ready to run: its Lua function and, for a
// catalogued script, its Go version.
type compiled struct {
	proto      *lua.FunctionProto
	native     native
	refused    error // the script can send a command lockproxy does not serve (refuse.go)
	refusedPub error // refused, for a Caller that serves PUBLISH
	// refusedNodes: refused, for scripts Redis servers run (Refusal:
	// quorum's nodes, a migrating proxy's legacy Redis), which serve
	// PUBLISH and do not know LOCKPROXY.
	refusedNodes error
	publishes    bool        // the script may PUBLISH (mayPublish)
	flags        scriptFlags // its shebang's (shebang.go)
}

// maxCompiled bounds the compiled-script cache; past it the cache starts
// over (scripts are recompiled on their next run).
const maxCompiled = 4096

// New returns a Runner.
func New(cfg Config) *Runner {
	if cfg.TimeLimit <= 0 {
		cfg.TimeLimit = 5 * time.Second
	}
	if cfg.MemoryLimit <= 0 {
		cfg.MemoryLimit = DefaultMemoryLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg, procs: make(map[string]*compiled)}
}

// SHA1 returns the lower-case hex SHA1 of src, the name EVALSHA uses.
func SHA1(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// Compile checks that src compiles, answering Redis's compile-error reply
// (*backend.ReplyError) when it does not.
func Compile(src string) error {
	_, err := compile(src)
	return err
}

var parseLine = regexp.MustCompile(`line:(\d+)`)

// parseMessages maps gopher-lua's parse errors to Lua 5.1's words where
// one corresponds. Lua 5.1's "'x' expected" errors have no counterpart in
// gopher-lua's LALR parser, which says "unexpected symbol" instead.
var parseMessages = map[string]string{
	"syntax error":                  "unexpected symbol",
	"parse error":                   "unexpected symbol",
	"Invalid token":                 "unexpected symbol",
	"unterminated string":           "unfinished string",
	"unterminated multiline string": "unfinished long string",
	"illegal hexadecimal number":    "malformed number",
}

func compile(src string) (*lua.FunctionProto, error) {
	src, _, err := shebang(src) // shebang.go
	if err != nil {
		return nil, err
	}
	chunk, err := parse.Parse(strings.NewReader(src), "user_script")
	if err == nil {
		fixAssignments(chunk) // assign.go
		var proto *lua.FunctionProto
		if proto, err = lua.Compile(chunk, "user_script"); err == nil {
			// The chunk is vararg, so gopher-lua would build Lua 5.0's
			// "arg" table on every call; no name can reach it.
			proto.IsVarArg &^= lua.VarArgNeedsArg
			return proto, nil
		}
	}
	line, msg := "1", err.Error()
	var pe *parse.Error
	if errors.As(err, &pe) {
		near := pe.Token
		if pe.Pos.Line == parse.EOF || near == "" {
			// Lua reports the end of input on the last line.
			near, line = "<eof>", strconv.Itoa(strings.Count(src, "\n")+1)
		} else {
			line = strconv.Itoa(pe.Pos.Line)
		}
		what := pe.Message
		if lua51, ok := parseMessages[what]; ok {
			what = lua51
		}
		msg = fmt.Sprintf("%s near '%s'", what, near)
	} else if m := parseLine.FindStringSubmatch(msg); m != nil {
		line = m[1]
	}
	msg = strings.Join(strings.Fields(msg), " ")
	return nil, backend.Reply("ERR Error compiling script (new function): user_script:" + line + ": " + msg)
}

// compiled returns s compiled, from the cache when it is there. A
// function's library (s.Function set) is cached apart from the scripts,
// once for all its functions.
func (r *Runner) compiled(s backend.Script) (*compiled, error) {
	key := s.SHA1
	if s.Function != "" {
		key = "library:" + s.SHA1
	}
	r.mu.RLock()
	p := r.procs[key]
	r.mu.RUnlock()
	if p != nil {
		return p, nil
	}
	var proto *lua.FunctionProto
	var err error
	if s.Function != "" {
		proto, err = compileLibrary(s.Src)
	} else {
		proto, err = compile(s.Src)
	}
	if err != nil {
		return nil, err
	}
	p = &compiled{proto: proto, refused: refusal(s, false, false), refusedPub: refusal(s, true, false),
		refusedNodes: refusal(s, true, true), publishes: mayPublish(s.Src), flags: flagsOf(s.Src)}
	if s.Function == "" {
		p.native = lookupNative(s.Src)
	}
	r.mu.Lock()
	if len(r.procs) >= maxCompiled {
		clear(r.procs)
	}
	r.procs[key] = p
	r.mu.Unlock()
	return p, nil
}

// Run runs s with KEYS and ARGV against c and returns its reply. A reply
// that is an error (a script returning {err=…}) is a Value of KindError,
// not an error; an error that escapes the script is a *backend.ReplyError
// with Redis's text; a Caller failure that is not a ReplyError, or ctx
// ending, comes back wrapped. s.SHA1, when set, must be SHA1(s.Src): the
// compiled script is cached under it. A Caller that panics makes Run panic
// with the same value. With s.Function set, s.Src is a function library
// and Run calls that function of it (functions.go).
func (r *Runner) Run(ctx context.Context, s backend.Script, keys []string, args [][]byte, c Caller) (backend.Value, error) {
	if s.SHA1 == "" {
		s.SHA1 = SHA1(s.Src)
	}
	if s.Function != "" {
		v, err := r.run(ctx, s, keys, args, c)
		return functionResult(s, v, err)
	}
	return r.run(ctx, s, keys, args, c)
}

func (r *Runner) run(ctx context.Context, s backend.Script, keys []string, args [][]byte, c Caller) (backend.Value, error) {
	p, err := r.compiled(s)
	if err != nil {
		return backend.Value{}, err
	}
	if p.refused != nil {
		if m, ok := c.(lockModel); ok && m.LockModelOnly() {
			refused := p.refused
			if pc, ok := c.(publishing); ok && pc.Publishes() {
				refused = p.refusedPub
			}
			if refused != nil {
				return backend.Value{}, refused
			}
		}
	}
	if s.Function != "" {
		// a function's flags are those it registers: callFunction's
	} else if c, err = p.flags.caller(c); err != nil {
		return backend.Value{}, err
	}
	if p.native != nil {
		if v, ok, err := p.native(ctx, keys, args, c); ok {
			return v, err
		}
	}
	v, _ := r.pool.Get().(*vm)
	if v == nil {
		v = newVM(r.cfg.Logger)
	}
	runCtx, cancel := context.WithTimeout(ctx, r.cfg.TimeLimit)
	defer cancel()
	startClock()
	v.budget = r.cfg.MemoryLimit
	out, err, reusable := v.run(runCtx, cancel, p.proto, s.SHA1, s.Function, keys, args, c)
	stopped := v.stopped
	if v.panicked != nil {
		v.L.Close()
		panic(v.panicked)
	}
	if reusable {
		r.pool.Put(v)
	} else {
		v.L.Close()
	}
	if stopped != nil {
		freeMemory()
		return backend.Value{}, &backend.ReplyError{
			Reply: "ERR Script killed by lockproxy: it used more memory than the script memory limit (" + memoryText(r.cfg.MemoryLimit) + ")",
			Err:   fmt.Errorf("%w: %w", ErrStopped, stopped),
		}
	}
	if err == nil || runCtx.Err() == nil {
		return out, err
	}
	// The run was cut short: by the caller's ctx, by the time limit, or by
	// a Caller failure (which cancels runCtx itself and is err already).
	// What it built went with its state: give it back, as for memory.
	freeMemory()
	if ctx.Err() != nil {
		return backend.Value{}, fmt.Errorf("luascripts: script %s: %w: %w", s.SHA1, ErrStopped, ctx.Err())
	}
	if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		return backend.Value{}, &backend.ReplyError{
			Reply: fmt.Sprintf("ERR Script killed by lockproxy: it ran longer than the script time limit (%s)", r.cfg.TimeLimit),
			Err:   fmt.Errorf("%w: %w", ErrStopped, runCtx.Err()),
		}
	}
	return out, fmt.Errorf("%w: %w", ErrStopped, err)
}

// ErrStopped is in the error of a run that lockproxy cut short: by the
// time limit, the memory budget, the caller's ctx, or a Caller failure
// (errors.Is finds it; the reply, if any, is the error's). Such a script
// did not end by itself: the backend must drop what it wrote, where a
// script that ends with an error keeps its writes, as in Redis.
var ErrStopped = errors.New("luascripts: script stopped")
