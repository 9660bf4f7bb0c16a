package luascripts

import (
	"context"
	"strings"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
)

// Redis 7 scripts may start with a shebang line, "#!lua" and its flags
// ("#!lua flags=no-writes,allow-oom"), which Redis reads off before Lua
// compiles the rest (evalExtractShebangFlags). A script with one runs in
// Redis 7's mode: EVAL_RO refuses it unless it is flagged no-writes, and
// no-writes refuses its write commands. allow-oom, allow-stale,
// no-cluster and allow-cross-slot-keys are accepted and change nothing:
// lockproxy has no maxmemory, replicas or cluster slots to relax. A
// script without one runs as before (Redis's EVAL compatibility mode).

// scriptFlags are a script's shebang flags (Redis's SCRIPT_FLAG_*).
type scriptFlags uint8

const (
	flagNoWrites scriptFlags = 1 << iota
	flagAllowOOM
	flagAllowStale
	flagNoCluster
	flagAllowCrossSlot
	flagCompat // no shebang line: EVAL's compatibility mode
)

var flagNames = map[string]scriptFlags{"no-writes": flagNoWrites, "allow-oom": flagAllowOOM,
	"allow-stale": flagAllowStale, "no-cluster": flagNoCluster, "allow-cross-slot-keys": flagAllowCrossSlot}

// Redis 7.0's replies for a script its flags refuse.
const (
	msgROWithWriteFlag = "ERR Can not execute a script with write flag using *_ro command."
)

// shebang reads src's shebang line as Redis does. body is src with that
// line blanked (its line break kept, so that lines keep their numbers);
// err is Redis's compile-time reply for a bad one.
func shebang(src string) (body string, flags scriptFlags, err error) {
	if !strings.HasPrefix(src, "#!") {
		return src, flagCompat, nil
	}
	end := strings.IndexByte(src, '\n')
	if nul := strings.IndexByte(src, 0); end < 0 || nul >= 0 && nul < end { // C's strchr stops at a NUL
		return "", 0, backend.Reply("ERR Invalid script shebang")
	}
	parts, ok := splitArgs(src[:end])
	if !ok || len(parts) == 0 {
		return "", 0, backend.Reply("ERR Invalid engine in script shebang")
	}
	if parts[0] != "#!lua" {
		return "", 0, backend.Reply("ERR Unexpected engine in script shebang: " + parts[0])
	}
	for _, p := range parts[1:] {
		list, isFlags := strings.CutPrefix(p, "flags=")
		if !isFlags {
			return "", 0, backend.Reply("ERR Unknown lua shebang option: " + p)
		}
		if list == "" {
			continue
		}
		for _, name := range strings.Split(list, ",") {
			f, known := flagNames[name]
			if !known {
				return "", 0, backend.Reply("ERR Unexpected flag in script shebang: " + name)
			}
			flags |= f
		}
	}
	return strings.Repeat(" ", end) + src[end:], flags, nil
}

// blankShebang is src with a shebang line blanked, for the readers of a
// script's text (analyse, tokens): a script's, or a function library's
// metadata line ("#!lua name=…"); src when there is none.
func blankShebang(src string) string {
	if body, _, err := shebang(src); err == nil {
		return body
	}
	if end := strings.IndexByte(src, '\n'); end >= 0 && strings.HasPrefix(src, "#!") {
		return strings.Repeat(" ", end) + src[end:]
	}
	return src
}

// flagsOf returns src's flags (flagCompat when it has no shebang, or a
// bad one, which does not compile).
func flagsOf(src string) scriptFlags {
	if _, f, err := shebang(src); err == nil {
		return f
	}
	return flagCompat
}

// splitArgs is Redis's sdssplitargs: words separated by spaces, "double
// quotes" with \xHH, \n, \r, \t, \b, \a escapes, 'single quotes' with \';
// ok is false for unbalanced quotes or a closing quote followed by
// anything but a space. The text ends at a NUL, as the C string does.
func splitArgs(line string) (args []string, ok bool) {
	if i := strings.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	at := func(i int) byte {
		if i < len(line) {
			return line[i]
		}
		return 0
	}
	isSpace := func(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }
	isHex := func(c byte) bool { return isDigit(c) || 'a' <= c|0x20 && c|0x20 <= 'f' }
	hexVal := func(c byte) byte {
		if isDigit(c) {
			return c - '0'
		}
		return c | 0x20 - 'a' + 10
	}
	p := 0
	for {
		for p < len(line) && isSpace(line[p]) {
			p++
		}
		if p >= len(line) {
			return args, true
		}
		var cur []byte
		inq, insq := false, false
		for done := false; !done; {
			c := at(p)
			switch {
			case inq:
				switch {
				case c == '\\' && at(p+1) == 'x' && isHex(at(p+2)) && isHex(at(p+3)):
					cur = append(cur, hexVal(at(p+2))<<4|hexVal(at(p+3)))
					p += 3
				case c == '\\' && at(p+1) != 0:
					p++
					e := at(p)
					switch e {
					case 'n':
						e = '\n'
					case 'r':
						e = '\r'
					case 't':
						e = '\t'
					case 'b':
						e = '\b'
					case 'a':
						e = '\a'
					}
					cur = append(cur, e)
				case c == '"':
					if n := at(p + 1); n != 0 && !isSpace(n) {
						return nil, false
					}
					done = true
				case c == 0:
					return nil, false
				default:
					cur = append(cur, c)
				}
			case insq:
				switch {
				case c == '\\' && at(p+1) == '\'':
					p++
					cur = append(cur, '\'')
				case c == '\'':
					if n := at(p + 1); n != 0 && !isSpace(n) {
						return nil, false
					}
					done = true
				case c == 0:
					return nil, false
				default:
					cur = append(cur, c)
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					cur = append(cur, c)
				}
			}
			if c != 0 {
				p++
			}
		}
		args = append(args, string(cur))
	}
}

// readOnlyCaller is a Caller that knows whether its run refuses writes
// (keycmd's ScriptCaller: EVAL_RO and EVALSHA_RO).
type readOnlyCaller interface{ ReadOnly() bool }

// caller prepares a run of a script with flags f, as Redis's
// scriptPrepareForRun: a script with a shebang but without no-writes is
// refused on a read-only run; one with no-writes gets a Caller that
// refuses write commands.
func (f scriptFlags) caller(c Caller) (Caller, error) {
	if f&flagCompat != 0 {
		return c, nil
	}
	if f&flagNoWrites == 0 {
		if rc, ok := c.(readOnlyCaller); ok && rc.ReadOnly() {
			return nil, backend.Reply(msgROWithWriteFlag)
		}
		return c, nil
	}
	return noWritesCaller{c}, nil
}

// noWritesCaller refuses the write commands of a no-writes script with
// Redis's words, after the checks Redis makes first (a known command, its
// arity); PUBLISH counts as a write, as Redis's may-replicate commands do.
type noWritesCaller struct{ Caller }

func (c noWritesCaller) Call(ctx context.Context, args [][]byte) (backend.Value, error) {
	if len(args) > 0 {
		cmd := keycmd.Lookup(args[0])
		write := cmd != nil && cmd.ArityOK(len(args)) && cmd.Write
		if cmd == nil && len(args) == 3 && strings.EqualFold(string(args[0]), "publish") {
			write = true
		}
		if write {
			return backend.Value{}, backend.Reply(backend.MsgScriptReadOnly)
		}
	}
	return c.Caller.Call(ctx, args)
}
