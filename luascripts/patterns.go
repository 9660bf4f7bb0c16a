package luascripts

import (
	"strconv"
	"strings"
	"unsafe"

	lua "github.com/yuin/gopher-lua"

	"github.com/lockproxy/lockproxy/luascripts/internal/pm"
)

// The string functions that match Lua patterns: string.find, match,
// gmatch and gsub, as gopher-lua's, on its matcher made interruptible
// (internal/pm). gopher-lua's own run the matcher inside one Lua
// instruction, where the time limit cannot reach: string.find(s,
// 'a*a*a*a*b') on a few hundred bytes ran for minutes while the script
// held what it ran under. These stop when the script's run is stopped,
// and gsub builds its result once, in time linear in it, and within the
// memory budget (gopher-lua's copied the whole string at each match).

// readOnlyBytes is s's bytes, for the matcher, which only reads them.
func readOnlyBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// find runs the matcher for the script: a stopped run raises.
func (v *vm) find(L *lua.LState, pattern, s string, offset, limit int) []*pm.MatchData {
	mds, err := pm.Find(pattern, readOnlyBytes(s), offset, limit, v.matchStopped)
	if err == pm.ErrStopped {
		L.RaiseError("%s", v.w.Err())
	}
	if err != nil {
		L.RaiseError("%s", err.Error())
	}
	return mds
}

// matchStopped tells the matcher whether the run is over; asking the
// watch also runs the memory check of a new tick.
func (v *vm) matchStopped() bool {
	select {
	case <-v.w.Done():
		return true
	default:
		return false
	}
}

// pushCaptures pushes md's captures (the whole match when it has none,
// with whole) and returns how many.
func pushCaptures(L *lua.LState, s string, md *pm.MatchData, whole bool) int {
	if md.CaptureLength() == 2 {
		if !whole {
			return 0
		}
		L.Push(lua.LString(s[md.Capture(0):md.Capture(1)]))
		return 1
	}
	for i := 2; i < md.CaptureLength(); i += 2 {
		if md.IsPosCapture(i) {
			L.Push(lua.LNumber(md.Capture(i)))
		} else {
			L.Push(lua.LString(s[md.Capture(i):md.Capture(i+1)]))
		}
	}
	return md.CaptureLength()/2 - 1
}

// initIndex is where find and match start, as Lua 5.1's str_find_aux
// reads its init argument: from the end when negative, within the string.
func initIndex(L *lua.LState, s string) int {
	i := L.OptInt(3, 1)
	if i < 0 {
		i += len(s) + 1
	}
	return min(max(i-1, 0), len(s))
}

// strFind is string.find.
func (v *vm) strFind(L *lua.LState) int {
	s := L.CheckString(1)
	pattern := L.CheckString(2)
	init := initIndex(L, s)
	if L.GetTop() >= 4 && lua.LVAsBool(L.Get(4)) || !strings.ContainsAny(pattern, "^$*+?.([%-") {
		// A plain search, asked for or with no special character.
		pos := strings.Index(s[init:], pattern)
		if pos < 0 {
			L.Push(lua.LNil)
			return 1
		}
		L.Push(lua.LNumber(init+pos) + 1)
		L.Push(lua.LNumber(init + pos + len(pattern)))
		return 2
	}
	mds := v.find(L, pattern, s, init, 1)
	if len(mds) == 0 {
		L.Push(lua.LNil)
		return 1
	}
	md := mds[0]
	L.Push(lua.LNumber(md.Capture(0) + 1))
	L.Push(lua.LNumber(md.Capture(1)))
	return 2 + pushCaptures(L, s, md, false)
}

// strMatch is string.match.
func (v *vm) strMatch(L *lua.LState) int {
	s := L.CheckString(1)
	pattern := L.CheckString(2)
	mds := v.find(L, pattern, s, initIndex(L, s), 1)
	if len(mds) == 0 {
		L.Push(lua.LNil)
		return 1
	}
	return pushCaptures(L, s, mds[0], true)
}

// strGmatch is string.gmatch: an iterator over the matches, found at
// once as gopher-lua does.
func (v *vm) strGmatch(L *lua.LState) int {
	s := L.CheckString(1)
	pattern := L.CheckString(2)
	mds := v.find(L, pattern, s, 0, -1)
	next := 0
	L.Push(L.NewFunction(func(L *lua.LState) int {
		if next >= len(mds) {
			return 0
		}
		md := mds[next]
		next++
		return pushCaptures(L, s, md, true)
	}))
	return 1
}

// strGsub is string.gsub.
func (v *vm) strGsub(L *lua.LState) int {
	s := L.CheckString(1)
	pattern := L.CheckString(2)
	repl := L.Get(3)
	switch repl.Type() {
	case lua.LTString, lua.LTNumber, lua.LTTable, lua.LTFunction:
	default:
		L.ArgError(3, "string/function/table expected")
	}
	limit := L.OptInt(4, -1)
	mds := v.find(L, pattern, s, 0, limit)
	if len(mds) == 0 {
		L.SetTop(1)
		L.Push(lua.LNumber(0))
		return 2
	}
	var b strings.Builder
	last := 0
	for _, md := range mds {
		start, end := md.Capture(0), md.Capture(1)
		b.WriteString(s[last:start])
		last = end
		switch r := repl.(type) {
		case lua.LString, lua.LNumber:
			v.addReplacement(L, &b, s, lua.LVAsString(r), md)
		case *lua.LTable:
			v.addValue(L, &b, s, md, L.GetTable(r, firstCapture(s, md)))
		case *lua.LFunction:
			L.Push(r)
			n := pushCaptures(L, s, md, true)
			L.Call(n, 1)
			v.addValue(L, &b, s, md, L.Get(-1))
			L.Pop(1)
		}
		v.charge(int64(b.Len()))
	}
	b.WriteString(s[last:])
	v.charge(int64(b.Len()))
	L.Push(lua.LString(b.String()))
	L.Push(lua.LNumber(len(mds)))
	return 2
}

// firstCapture is the key of a table replacement: the first capture, or
// the whole match.
func firstCapture(s string, md *pm.MatchData) lua.LValue {
	i := 0
	if md.CaptureLength() > 2 {
		i = 2
	}
	if md.IsPosCapture(i) {
		return lua.LNumber(md.Capture(i))
	}
	return lua.LString(s[md.Capture(i):md.Capture(i+1)])
}

// addValue appends a table's or a function's replacement: false or nil
// keeps the match, a string or a number replaces it, anything else is
// Lua 5.1's error.
func (v *vm) addValue(L *lua.LState, b *strings.Builder, s string, md *pm.MatchData, val lua.LValue) {
	switch r := val.(type) {
	case lua.LString:
		b.WriteString(string(r))
	case lua.LNumber:
		b.WriteString(numberString(r))
	default:
		if !lua.LVIsFalse(val) {
			L.RaiseError("invalid replacement value (a %s)", val.Type().String())
		}
		b.WriteString(s[md.Capture(0):md.Capture(1)])
	}
}

// addReplacement appends a string replacement as Lua 5.1's add_s: %0 is
// the match, %1 to %9 its captures (%1 the match when it has none), %%
// and any other escaped character that character.
func (v *vm) addReplacement(L *lua.LState, b *strings.Builder, s, repl string, md *pm.MatchData) {
	for i := 0; i < len(repl); i++ {
		c := repl[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i == len(repl) {
			b.WriteByte(0) // Lua 5.1 reads the string's terminating NUL
			break
		}
		c = repl[i]
		switch {
		case c == '0':
			b.WriteString(s[md.Capture(0):md.Capture(1)])
		case c >= '1' && c <= '9':
			idx := 2 * int(c-'0')
			if idx >= md.CaptureLength() {
				if idx != 2 {
					L.RaiseError("invalid capture index")
				}
				idx = 0
			}
			if md.IsPosCapture(idx) {
				b.WriteString(strconv.Itoa(md.Capture(idx)))
			} else {
				b.WriteString(s[md.Capture(idx):md.Capture(idx+1)])
			}
		default:
			b.WriteByte(c)
		}
		if b.Len() > int(v.budget) && v.budget > 0 {
			v.charge(int64(b.Len()))
		}
	}
}
