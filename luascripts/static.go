package luascripts

import (
	"strings"

	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"

	"github.com/lockproxy/lockproxy/keycmd"
)

// The static half of the classifier (classify.go): what commands a script
// can possibly send, read off its syntax tree. It answers for every run of
// the script, whatever its KEYS, ARGV and the keys' contents, and whatever
// Lua computes — which the probes on the model cannot.
//
// The script runs on the nodes, in Redis's Lua, whose sandbox is wider
// than lockproxy's (Redis 7.0 still has loadstring, which runs any text).
// So the walker does not rely on what is missing: a script may name only
// globals known to lead neither to the redis table nor to a compiler
// (globals, below), and may mention redis only as redis.call(…) or
// redis.pcall(…) with a string literal as the command name, or as
// redis.<a field other than call and pcall>. Then the literals are every
// command the script can send. Anything else — redis passed around as a
// value, redis[expr], redis:call(…), a command name computed at run time
// or spread from a table (unpack), _G, loadstring, any global outside the
// list — makes the answer "unknown", and the script is watched.

// commandSet is the set of commands a script can send (lower case), each
// with the line of its first call in the text.
type commandSet map[string]int

// staticCommands returns every command src can send, or ok false when
// that cannot be read off its syntax (or it does not compile).
func staticCommands(src string) (cmds commandSet, ok bool) {
	cmds, ok, _ = analyse(src)
	return cmds, ok
}

// analyse is staticCommands, and reports whether src keeps to the core
// subset of Lua (coreSubset) as well.
func analyse(src string) (cmds commandSet, ok, core bool) {
	chunk, err := parse.Parse(strings.NewReader(blankShebang(src)), "user_script")
	if err != nil {
		return nil, false, false
	}
	w := &walker{cmds: commandSet{}, ok: true, core: true}
	w.block(chunk)
	if !w.ok {
		return nil, false, false
	}
	return w.cmds, true, w.core
}

// coreGlobals are the only globals a script in the core subset names.
var coreGlobals = setOf("KEYS", "ARGV", "ipairs")

// The core subset is the part of Lua whose every result gopher-lua
// computes exactly as Redis's Lua 5.1 does, so that a run on the lock
// model is the run a node makes from the same key states (classify.go,
// "Guarded scripts"): locals, control statements, functions, literals, indexing,
// calls of redis.call (not pcall) with a literal command and of ipairs,
// == and ~=, not/and/or, # of KEYS or ARGV, and indexing KEYS, ARGV or
// anything by a number literal. Outside it: tables built
// by the script (# with holes differs), concatenation and tostring
// (number formatting), arithmetic and ordering (string coercion, the
// locale), the libraries, pcall and redis.pcall (a caught error's text
// could steer the script: without them every error ends the run on both
// sides, which only ever does less).

type walker struct {
	cmds   commandSet
	ok     bool
	core   bool              // the script keeps to the core subset so far
	scopes []map[string]bool // the locals in scope, innermost last
}

// globals are the global names a script may use: none of them can send a
// command or compile code, in lockproxy's sandbox or in Redis's (whose
// Lua 7.0 still has loadstring, which could run any text as a script).
// A name that is not a local in scope is a global; a local the walker
// cannot place is taken for a global, which only ever refuses more.
var globals = setOf("KEYS", "ARGV", "string", "table", "math", "tonumber", "tostring", "type",
	"ipairs", "pairs", "next", "unpack", "select", "pcall", "error", "assert", "rawequal",
	"bit", "struct", "cjson", "cmsgpack") // data in, data out: no function of theirs calls back

// block walks ss in a new scope holding names.
func (w *walker) block(ss []ast.Stmt, names ...string) {
	w.scopes = append(w.scopes, setOf(names...))
	for _, s := range ss {
		w.stmt(s)
	}
	w.scopes = w.scopes[:len(w.scopes)-1]
}

func (w *walker) local(name string) bool {
	for _, sc := range w.scopes {
		if sc[name] {
			return true
		}
	}
	return false
}

func (w *walker) exprs(es []ast.Expr) {
	for _, e := range es {
		w.expr(e)
	}
}

func (w *walker) stmt(s ast.Stmt) {
	switch s := s.(type) {
	case *ast.AssignStmt:
		w.exprs(s.Lhs)
		w.exprs(s.Rhs)
	case *ast.LocalAssignStmt:
		w.exprs(s.Exprs) // before the names come into scope, as in Lua
		for _, n := range s.Names {
			w.scopes[len(w.scopes)-1][n] = true
		}
	case *ast.FuncCallStmt:
		w.expr(s.Expr)
	case *ast.DoBlockStmt:
		w.block(s.Stmts)
	case *ast.WhileStmt:
		w.expr(s.Condition)
		w.block(s.Stmts)
	case *ast.RepeatStmt:
		// The condition sees the body's locals.
		w.scopes = append(w.scopes, map[string]bool{})
		for _, st := range s.Stmts {
			w.stmt(st)
		}
		w.expr(s.Condition)
		w.scopes = w.scopes[:len(w.scopes)-1]
	case *ast.IfStmt:
		w.expr(s.Condition)
		w.block(s.Then)
		w.block(s.Else)
	case *ast.NumberForStmt:
		w.expr(s.Init)
		w.expr(s.Limit)
		w.expr(s.Step)
		w.block(s.Stmts, s.Name)
	case *ast.GenericForStmt:
		w.exprs(s.Exprs)
		w.block(s.Stmts, s.Names...)
	case *ast.FuncDefStmt:
		if s.Name != nil {
			w.expr(s.Name.Func)
			w.expr(s.Name.Receiver)
		}
		w.expr(s.Func)
	case *ast.ReturnStmt:
		w.exprs(s.Exprs)
	case *ast.BreakStmt:
	default:
		w.ok = false // a statement this walker does not know
	}
}

func (w *walker) expr(e ast.Expr) {
	switch e := e.(type) {
	case nil:
	case *ast.TrueExpr, *ast.FalseExpr, *ast.NilExpr, *ast.NumberExpr, *ast.StringExpr, *ast.Comma3Expr:
	case *ast.IdentExpr:
		local := w.local(e.Value)
		if e.Value == "redis" || (!local && !globals[e.Value]) {
			w.ok = false // the library as a value, or a global that is not known harmless
		}
		if !local && !coreGlobals[e.Value] {
			w.core = false
		}
	case *ast.AttrGetExpr:
		if isIdent(e.Object, "redis") {
			k, lit := e.Key.(*ast.StringExpr)
			if !lit || k.Value == "call" || k.Value == "pcall" {
				w.ok = false // redis[expr], or call/pcall not called right here
			}
			w.core = false
			return
		}
		// In the core subset only KEYS and ARGV are indexed by anything
		// but a number: a string's fields are the string library.
		if _, num := e.Key.(*ast.NumberExpr); !num && !isIdent(e.Object, "KEYS") && !isIdent(e.Object, "ARGV") {
			w.core = false
		}
		w.expr(e.Object)
		w.expr(e.Key)
	case *ast.TableExpr:
		w.core = false
		for _, f := range e.Fields {
			w.expr(f.Key)
			w.expr(f.Value)
		}
	case *ast.FuncCallExpr:
		if a, ok := e.Func.(*ast.AttrGetExpr); ok && isIdent(a.Object, "redis") {
			if k, lit := a.Key.(*ast.StringExpr); lit && (k.Value == "call" || k.Value == "pcall") {
				if len(e.Args) == 0 {
					w.ok = false
					return
				}
				name, lit := e.Args[0].(*ast.StringExpr)
				if !lit {
					w.ok = false // a command chosen at run time
					return
				}
				if n := strings.ToLower(name.Value); w.cmds[n] == 0 {
					w.cmds[n] = max(e.Line(), 1)
				}
				if k.Value == "pcall" {
					w.core = false
				}
				w.exprs(e.Args[1:])
				return
			}
		}
		if e.Receiver != nil {
			w.core = false // a method: of a string, the string library
		}
		w.expr(e.Func)
		w.expr(e.Receiver)
		w.exprs(e.Args)
	case *ast.LogicalOpExpr:
		w.expr(e.Lhs)
		w.expr(e.Rhs)
	case *ast.RelationalOpExpr:
		if e.Operator != "==" && e.Operator != "~=" {
			w.core = false
		}
		w.expr(e.Lhs)
		w.expr(e.Rhs)
	case *ast.StringConcatOpExpr:
		w.core = false
		w.expr(e.Lhs)
		w.expr(e.Rhs)
	case *ast.ArithmeticOpExpr:
		w.core = false
		w.expr(e.Lhs)
		w.expr(e.Rhs)
	case *ast.UnaryMinusOpExpr:
		w.core = false
		w.expr(e.Expr)
	case *ast.UnaryNotOpExpr:
		w.expr(e.Expr)
	case *ast.UnaryLenOpExpr:
		if !isIdent(e.Expr, "KEYS") && !isIdent(e.Expr, "ARGV") {
			w.core = false
		}
		w.expr(e.Expr)
	case *ast.FunctionExpr:
		var params []string
		if e.ParList != nil {
			params = e.ParList.Names
		}
		w.block(e.Stmts, params...)
	default:
		w.ok = false // an expression this walker does not know
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.IdentExpr)
	return ok && id.Value == name
}

// Commands by what they can do to a key. None of them creates a key that
// is absent: each reads, or deletes, or changes the expiry of a key that
// is live (on an absent key EXPIRE and PERSIST do nothing). PUBLISH counts
// as a read: it touches no key, and where a script runs on nodes its
// message is held back and its reply is 0 (quorum/scriptpub.go). Every other
// command — SET in any form, SETNX, MSET, MSETNX, SELECT, TIME, anything
// unknown — may create, or makes a run depend on more than its keys.
var (
	readCommands   = setOf("get", "mget", "exists", "pttl", "ttl", "getrange", "ping", "echo", "publish")
	deleteCommands = setOf("del", "unlink", "delifeq", "delex")
	expireCommands = setOf("pexpire", "expire", "pexpireat", "expireat", "persist")
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// counterCommands write counters, which are strings (WritesValues).
var counterCommands = setOf("incr", "decr", "incrby", "decrby")

// writesValues reports whether cmds has a command that can write a value
// of a type beyond strings (Class.WritesValues): one of keycmd's typed
// commands that writes, counters aside. RENAME and COPY count (they may
// move such a value); FLUSHDB and FLUSHALL are refused in scripts anyway.
func (cmds commandSet) writesValues() bool {
	for c := range cmds {
		if k := keycmd.Lookup([]byte(c)); k != nil && k.Typed() && k.Write && !counterCommands[c] {
			return true
		}
	}
	return false
}

// reach sums up what a script sending cmds can do: create false means it
// can create no key; expire false means it also changes no expiry (it only
// reads and deletes).
func (cmds commandSet) reach() (create, expire bool) {
	for c := range cmds {
		switch {
		case readCommands[c], deleteCommands[c]:
		case expireCommands[c]:
			expire = true
		default:
			return true, true
		}
	}
	return false, expire
}
