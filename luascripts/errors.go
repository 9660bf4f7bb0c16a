package luascripts

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/backend"
)

var stackLine = regexp.MustCompile(`user_script:(\d+):`)

// scriptError turns an error that escaped a script into Redis 7's reply.
// An error table ({err=…}: redis.call's errors, redis.error_reply) gives
// its err text verbatim; any other value v gives "ERR " .. tostring(v).
// Both end in " script: <sha>, on @user_script:<line>.", at being the
// line where the innermost Lua function was (0: unknown).
func scriptError(sha string, err error, at int) error {
	var ae *lua.ApiError
	if !errors.As(err, &ae) {
		return &backend.ReplyError{Reply: "ERR " + oneLine(err.Error()), Err: err}
	}
	line := errorLine(ae, at)
	return &backend.ReplyError{Reply: errorMessage(err, at) + " script: " + sha + ", on @user_script:" + line + ".", Err: err}
}

// errorLine is the line an escaped error is reported at: at, or the one
// in its message.
func errorLine(ae *lua.ApiError, at int) string {
	if at > 0 {
		return strconv.Itoa(at)
	} else if m := stackLine.FindStringSubmatch(ae.Object.String()); m != nil {
		return m[1]
	}
	return "1"
}

// errorMessage is the text of an error that escaped a script, without
// scriptError's " script: …" end (FUNCTION LOAD's errors have none).
func errorMessage(err error, at int) string {
	var ae *lua.ApiError
	if !errors.As(err, &ae) {
		return "ERR " + oneLine(err.Error())
	}
	var msg string
	switch o := ae.Object.(type) {
	case *lua.LTable:
		if s, ok := o.RawGetString("err").(lua.LString); ok {
			msg = string(s)
		} else {
			msg = "ERR unknown error" // Redis 7.0.15 crashes here
		}
	case lua.LString:
		msg = "ERR " + luaMessage(string(o))
		if o == "lua callstack overflow" || o == "stack overflow" {
			msg = "ERR user_script:" + errorLine(ae, at) + ": stack overflow"
		}
	default:
		msg = "ERR " + toString(o)
	}
	return oneLine(msg)
}

// gopher-lua words some runtime errors differently from Lua 5.1, which is
// what Redis embeds. luaMessage rewrites those it can into Lua 5.1's words.
// Lua 5.1 also names the variable involved ("attempt to index local 't' (a
// nil value)"), which gopher-lua cannot tell; those stay unnamed.
var rewrites = []struct {
	re   *regexp.Regexp
	repl func(m []string) string
}{
	{regexp.MustCompile(`cannot perform concat operation between (\w+) and (\w+)$`), func(m []string) string {
		bad := m[1]
		if bad == "string" || bad == "number" {
			bad = m[2]
		}
		return "attempt to concatenate a " + bad + " value"
	}},
	{regexp.MustCompile(`cannot perform \w+ operation between (\w+) and (\w+)$`), func(m []string) string {
		bad := m[1]
		if bad == "number" {
			bad = m[2]
		}
		return "attempt to perform arithmetic on a " + bad + " value"
	}},
	{regexp.MustCompile(`attempt to index a non-table object\((\w+)\) with key '.*'$`), func(m []string) string {
		return "attempt to index a " + m[1] + " value"
	}},
	{regexp.MustCompile(`bad argument #(\d+) to ([^' ]+) \(`), func(m []string) string {
		return "bad argument #" + m[1] + " to '" + m[2] + "' ("
	}},
	{regexp.MustCompile(`in table for concat$`), func([]string) string { return "in table for 'concat'" }},
	// gopher-lua's value stack has a bound, Lua 5.1's only its call depth.
	{regexp.MustCompile(`registry overflow$`), func([]string) string { return "stack overflow" }},
}

func luaMessage(s string) string {
	for _, rw := range rewrites {
		if loc := rw.re.FindStringSubmatchIndex(s); loc != nil {
			m := make([]string, len(loc)/2)
			for i := range m {
				if loc[2*i] >= 0 {
					m[i] = s[loc[2*i]:loc[2*i+1]]
				}
			}
			return s[:loc[0]] + rw.repl(m) + s[loc[1]:]
		}
	}
	return s
}

// errorText is the err field Redis builds from an error line
// (luaPushErrorBuff): "-CODE msg" keeps its code, a line without a code
// gets "ERR ", and trailing line breaks go.
func errorText(s string) string {
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		code, msg, ok := strings.Cut(rest, " ")
		if !ok {
			code, msg = "ERR", rest
		}
		return code + " " + strings.Trim(msg, "\r\n")
	}
	return "ERR " + strings.Trim(s, "\r\n")
}

// errorTable is Redis's error table {err=text}.
func errorTable(L *lua.LState, text string) *lua.LTable {
	t := L.CreateTable(0, 1)
	t.RawSetString("err", lua.LString(text))
	return t
}

// raise raises Redis's error table for msg, as the redis.* functions do:
// it escapes the script with msg verbatim, and Lua's pcall sees the text.
func raise(L *lua.LState, msg string) int {
	L.Error(errorTable(L, errorText(msg)), 0)
	return 0
}

// oneLine replaces line breaks, which an error reply cannot carry, with
// spaces, as Redis does.
func oneLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	}
	return s
}
