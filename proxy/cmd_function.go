package proxy

import (
	"bytes"
	"encoding/binary"
	"hash/crc64"
	"slices"
	"strings"
	"sync"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/luascripts"
)

// functionLibs are the Redis 7 function libraries this instance loaded
// (FUNCTION LOAD, RESTORE), shared by all its connections like the script
// cache, and never evicted. They are this instance's alone: lockproxy
// instances sharing a backend do not share their libraries (each is
// loaded on each instance), and a restart forgets them, as Redis without
// persistence does. FCALL runs a function as a script (luascripts'
// functions.go): its library's code is the Script's Src, so a backend
// runs it where it runs EVAL, on quorum on the model.
type functionLibs struct {
	write sync.Mutex // one change at a time: a LOAD checks, runs the code, then installs
	mu    sync.RWMutex
	libs  []*luascripts.Library // in load order (Redis lists them in its dict's order)
	funcs map[string]funcRef    // by lower-case function name: Redis finds them in any case
}

// funcRef is a loaded function: its library and its name as registered.
type funcRef struct {
	lib  *luascripts.Library
	name string
}

func newFunctionLibs() *functionLibs { return &functionLibs{funcs: map[string]funcRef{}} }

// find returns the function FCALL names.
func (f *functionLibs) find(name []byte) (funcRef, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.funcs[strings.ToLower(string(name))]
	return r, ok
}

// snapshot returns the libraries in load order.
func (f *functionLibs) snapshot() []*luascripts.Library {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.libs)
}

// lib returns the library named name (case-sensitive, as Redis's).
func (f *functionLibs) lib(name string) *luascripts.Library {
	for _, l := range f.snapshot() {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// join installs base and add, dropping base's libraries of add's names
// when replace (else such a name is Redis's "Library … already exists"),
// unless one of add's functions is a function of another library
// ("Function … already exists"): then nothing changes. Under f.write.
func (f *functionLibs) join(base, add []*luascripts.Library, replace bool) string {
	keep := make([]*luascripts.Library, 0, len(base))
	for _, l := range base {
		if slices.ContainsFunc(add, func(a *luascripts.Library) bool { return a.Name == l.Name }) {
			if !replace {
				return "ERR Library " + l.Name + " already exists"
			}
			continue
		}
		keep = append(keep, l)
	}
	funcs := map[string]funcRef{}
	for _, l := range keep {
		for _, fn := range l.Functions {
			funcs[strings.ToLower(fn.Name)] = funcRef{l, fn.Name}
		}
	}
	for _, l := range add {
		for _, fn := range l.Functions {
			if _, ok := funcs[strings.ToLower(fn.Name)]; ok {
				return "ERR Function " + fn.Name + " already exists"
			}
			funcs[strings.ToLower(fn.Name)] = funcRef{l, fn.Name}
		}
	}
	f.mu.Lock()
	f.libs, f.funcs = append(keep, add...), funcs
	f.mu.Unlock()
	return ""
}

// remove drops the library named name and reports whether there was one.
func (f *functionLibs) remove(name string) bool {
	f.write.Lock()
	defer f.write.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.libs, func(l *luascripts.Library) bool { return l.Name == name })
	if i < 0 {
		return false
	}
	for _, fn := range f.libs[i].Functions {
		delete(f.funcs, strings.ToLower(fn.Name))
	}
	f.libs = slices.Delete(f.libs, i, i+1)
	return true
}

// flush drops every library.
func (f *functionLibs) flush() {
	f.write.Lock()
	defer f.write.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.libs, f.funcs = nil, map[string]funcRef{}
}

// cmdFCall is FCALL and FCALL_RO function numkeys key… arg…, with Redis's
// checks in Redis's order.
func cmdFCall(cl *client, args [][]byte) backend.Value {
	name := cl.lastCmd // fcall or fcall_ro
	fn, ok := cl.s.functions.find(args[1])
	if !ok {
		return backend.ErrorValue("ERR Function not found")
	}
	n, ok := backend.ParseInt(args[2])
	switch {
	case !ok:
		return backend.ErrorValue("ERR Bad number of keys provided")
	case n > int64(len(args)-3):
		return backend.ErrorValue("ERR Number of keys can't be greater than number of args")
	case n < 0:
		return backend.ErrorValue("ERR Number of keys can't be negative")
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = string(args[3+i])
	}
	sc := backend.Script{SHA1: luascripts.SHA1(fn.lib.Code), Src: fn.lib.Code, Function: fn.name}
	return cl.eval(name, sc, keys, args[3+n:], name == "fcall_ro")
}

// functionArity are the arities of FUNCTION's subcommands, as Redis's.
var functionArity = map[string]int{"load": -3, "delete": 3, "list": -2, "stats": 2, "kill": 2,
	"flush": -2, "dump": 2, "restore": -3, "help": 2}

// cmdFunction is FUNCTION and its subcommands.
func cmdFunction(cl *client, args [][]byte) backend.Value {
	sub := lower(args[1])
	arity, ok := functionArity[sub]
	if !ok {
		return backend.ErrorValue(backend.ErrUnknownSubcommand("function", string(args[1])))
	}
	if !arityOK(arity, len(args)) {
		return backend.ErrorValue(backend.ErrWrongArgs("function|" + sub))
	}
	f := cl.s.functions
	switch sub {
	case "load":
		return cl.s.functionLoad(args)
	case "delete":
		if !f.remove(string(args[2])) {
			return backend.ErrorValue("ERR Library not found")
		}
		return backend.OKValue
	case "list":
		return functionList(f, args)
	case "stats":
		libs, n := f.snapshot(), 0
		for _, l := range libs {
			n += len(l.Functions)
		}
		return mapValue(backend.BulkString("running_script"), backend.NilValue,
			backend.BulkString("engines"), mapValue(backend.BulkString("LUA"), mapValue(
				backend.BulkString("libraries_count"), backend.Int(int64(len(libs))),
				backend.BulkString("functions_count"), backend.Int(int64(n)))))
	case "kill":
		return backend.ErrorValue("NOTBUSY No scripts in execution right now.")
	case "flush":
		if len(args) > 3 {
			return backend.ErrorValue(subcommandSyntax(args[1]))
		}
		if m := lower(args[len(args)-1]); len(args) == 3 && m != "sync" && m != "async" {
			return backend.ErrorValue("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
		}
		f.flush()
		return backend.OKValue
	case "dump":
		return backend.Bulk(dumpLibraries(f.snapshot()))
	case "restore":
		return cl.s.functionRestore(args)
	}
	return functionHelp()
}

// mapValue is a map reply of its key, value pairs.
func mapValue(kv ...backend.Value) backend.Value {
	return backend.Value{Kind: backend.KindMap, Elems: kv}
}

// subcommandSyntax is Redis's addReplySubcommandSyntaxError, naming the
// subcommand as the client wrote it.
func subcommandSyntax(sub []byte) string {
	return "ERR unknown subcommand or wrong number of arguments for '" + string(sub) + "'. Try FUNCTION HELP."
}

// functionLoad is FUNCTION LOAD [REPLACE] code.
func (s *Server) functionLoad(args [][]byte) backend.Value {
	replace, i := false, 2
	for ; i < len(args)-1; i++ {
		if lower(args[i]) != "replace" {
			return backend.ErrorValue("ERR Unknown option given: " + string(args[i]))
		}
		replace = true
	}
	code := string(args[i])
	if len(code) > s.cfg.MaxScriptBytes {
		return backend.ErrorValue(backend.MsgScriptTooBig)
	}
	name, err := luascripts.LibraryName(code)
	if err != nil {
		return replyOf(err)
	}
	f := s.functions
	f.write.Lock()
	defer f.write.Unlock()
	if !replace && f.lib(name) != nil {
		return backend.ErrorValue("ERR Library '" + name + "' already exists")
	}
	lib, err := luascripts.LoadLibrary(code)
	if err != nil {
		return replyOf(err)
	}
	if msg := f.join(f.snapshot(), []*luascripts.Library{lib}, true); msg != "" {
		return backend.ErrorValue(msg)
	}
	return backend.BulkString(name)
}

// replyOf is the error reply of a *backend.ReplyError (luascripts' for a
// library), or the internal error's.
func replyOf(err error) backend.Value {
	if re, ok := err.(*backend.ReplyError); ok {
		return backend.ErrorValue(re.Reply)
	}
	return backend.ErrorValue(backend.MsgInternal)
}

// functionList is FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
func functionList(f *functionLibs, args [][]byte) backend.Value {
	withCode, pattern := false, []byte(nil)
	for i := 2; i < len(args); i++ {
		switch a := lower(args[i]); {
		case a == "withcode" && !withCode:
			withCode = true
		case a == "libraryname" && pattern == nil:
			if i >= len(args)-1 {
				return backend.ErrorValue("ERR library name argument was not given")
			}
			i++
			pattern = bytes.ToLower(args[i])
		default:
			return backend.ErrorValue("ERR Unknown argument " + string(args[i]))
		}
	}
	out := []backend.Value{}
	for _, l := range f.snapshot() {
		if pattern != nil && !model.Match(pattern, bytes.ToLower([]byte(l.Name))) {
			continue
		}
		fns := make([]backend.Value, 0, len(l.Functions))
		for _, fn := range l.Functions {
			desc := backend.NilValue
			if fn.HasDescription {
				desc = backend.BulkString(fn.Description)
			}
			flags := make([]backend.Value, len(fn.Flags))
			for i, fl := range fn.Flags {
				flags[i] = backend.Status(fl)
			}
			fns = append(fns, mapValue(backend.BulkString("name"), backend.BulkString(fn.Name),
				backend.BulkString("description"), desc,
				backend.BulkString("flags"), backend.Value{Kind: backend.KindSet, Elems: flags}))
		}
		e := []backend.Value{backend.BulkString("library_name"), backend.BulkString(l.Name),
			backend.BulkString("engine"), backend.BulkString("LUA"),
			backend.BulkString("functions"), backend.Array(fns...)}
		if withCode {
			e = append(e, backend.BulkString("library_code"), backend.BulkString(l.Code))
		}
		out = append(out, mapValue(e...))
	}
	return backend.Array(out...)
}

// FUNCTION DUMP's payload is lockproxy's own, not Redis's RDB encoding:
// it round-trips through lockproxy's FUNCTION RESTORE (on any instance
// and version that has this format), and Redis's payloads are refused
// with Redis's "DUMP payload version or checksum are wrong", as are
// lockproxy's in Redis. It is each library's code (a 4-byte big-endian
// length, then the code), then dumpVersion (2 bytes, little-endian) and
// the CRC-64 (ECMA) of all before it (8 bytes, little-endian): the same
// trailer layout as Redis's, with a version Redis never wrote.
const dumpVersion = 0x4c50 // "PL"

var crcTable = crc64.MakeTable(crc64.ECMA)

func dumpLibraries(libs []*luascripts.Library) []byte {
	var b []byte
	for _, l := range libs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(l.Code)))
		b = append(b, l.Code...)
	}
	b = binary.LittleEndian.AppendUint16(b, dumpVersion)
	return binary.LittleEndian.AppendUint64(b, crc64.Checksum(b, crcTable))
}

// undump returns the libraries' codes of a payload, or false when it is
// not one of dumpLibraries'.
func undump(p []byte) ([]string, bool) {
	if len(p) < 10 || binary.LittleEndian.Uint16(p[len(p)-10:]) != dumpVersion ||
		binary.LittleEndian.Uint64(p[len(p)-8:]) != crc64.Checksum(p[:len(p)-8], crcTable) {
		return nil, false
	}
	var codes []string
	for p = p[:len(p)-10]; len(p) > 0; {
		if len(p) < 4 || uint64(len(p)-4) < uint64(binary.BigEndian.Uint32(p)) {
			return nil, false
		}
		n := binary.BigEndian.Uint32(p)
		codes, p = append(codes, string(p[4:4+n])), p[4+n:]
	}
	return codes, true
}

// functionRestore is FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]:
// every library in the payload is loaded again (as FUNCTION LOAD checks
// it), then all are installed, or none.
func (s *Server) functionRestore(args [][]byte) backend.Value {
	if len(args) > 4 {
		return backend.ErrorValue(subcommandSyntax(args[1]))
	}
	policy := "append"
	if len(args) == 4 {
		policy = lower(args[3])
		if policy != "append" && policy != "replace" && policy != "flush" {
			return backend.ErrorValue("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")
		}
	}
	codes, ok := undump(args[2])
	if !ok {
		return backend.ErrorValue("ERR DUMP payload version or checksum are wrong")
	}
	var add []*luascripts.Library
	for _, code := range codes {
		if len(code) > s.cfg.MaxScriptBytes {
			return backend.ErrorValue(backend.MsgScriptTooBig)
		}
		lib, err := luascripts.LoadLibrary(code)
		if err != nil {
			return replyOf(err)
		}
		for _, a := range add {
			if a.Name == lib.Name {
				return backend.ErrorValue("ERR Library '" + lib.Name + "' already exists")
			}
		}
		add = append(add, lib)
	}
	f := s.functions
	f.write.Lock()
	defer f.write.Unlock()
	base := f.snapshot()
	if policy == "flush" {
		base = nil
	}
	if msg := f.join(base, add, policy == "replace"); msg != "" {
		return backend.ErrorValue(msg)
	}
	return backend.OKValue
}

// functionHelp is FUNCTION HELP, Redis 7.0's text.
func functionHelp() backend.Value {
	lines := []string{
		"FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"LOAD [REPLACE] <FUNCTION CODE>",
		"    Create a new library with the given library name and code.",
		"DELETE <LIBRARY NAME>",
		"    Delete the given library.",
		"LIST [LIBRARYNAME PATTERN] [WITHCODE]",
		"    Return general information on all the libraries:",
		"    * Library name",
		"    * The engine used to run the Library",
		"    * Library description",
		"    * Functions list",
		"    * Library code (if WITHCODE is given)",
		"    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
		"STATS",
		"    Return information about the current function running:",
		"    * Function name",
		"    * Command used to run the function",
		"    * Duration in MS that the function is running",
		"    If no function is running, return nil",
		"    In addition, returns a list of available engines.",
		"KILL",
		"    Kill the current running function.",
		"FLUSH [ASYNC|SYNC]",
		"    Delete all the libraries.",
		"    When called without the optional mode argument, the behavior is determined by the",
		"    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
		"    * ASYNC: Asynchronously flush the libraries.",
		"    * SYNC: Synchronously flush the libraries.",
		"DUMP",
		"    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
		"RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
		"    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
		"    control how to handle existing libraries (default APPEND):",
		"    * FLUSH: delete all existing libraries.",
		"    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
		"    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
		"      libraries with the new libraries (notice that even on this option there is a chance of failure",
		"      in case of functions name collision with another library).",
		"HELP",
		"    Prints this help.",
	}
	out := make([]backend.Value, len(lines))
	for i, l := range lines {
		out[i] = backend.Status(l)
	}
	return backend.Array(out...)
}
