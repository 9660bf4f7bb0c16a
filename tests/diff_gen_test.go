package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// diffGenerated builds the systematic part of the corpus: every order and
// letter case of SET's option sets against every prior state of the key,
// SET's option errors, every key command's arity error, and the EXPIRE
// family against every condition.
func diffGenerated() []diffCase {
	var cases []diffCase
	line := func(mode byte, args ...string) diffLine { return diffLine{mode: mode, args: args} }

	states := map[string][]diffLine{
		"absent": nil,
		"held":   {line(' ', "SET", "k", "old", "PX", "20000")},
		"no-ttl": {line(' ', "SET", "k", "old")},
	}
	optionSets := [][][]string{
		{{"NX"}, {"PX", "10000"}},
		{{"NX"}, {"EX", "10"}},
		{{"XX"}, {"PX", "10000"}},
		{{"NX"}, {"GET"}, {"PX", "5000"}},
		{{"XX"}, {"KEEPTTL"}},
		{{"XX"}, {"GET"}, {"KEEPTTL"}},
		{{"NX"}, {"EXAT", "4102444800"}},
		{{"NX"}, {"PXAT", "4102444800000"}},
		{{"GET"}, {"EX", "100"}},
	}
	for _, set := range optionSets {
		for _, perm := range permutations(set) {
			for _, lowerCase := range []bool{false, true} {
				args := []string{"SET", "k", "new"}
				for _, o := range perm {
					o = append([]string(nil), o...)
					if lowerCase {
						o[0] = strings.ToLower(o[0])
					}
					args = append(args, o...)
				}
				for _, st := range []string{"absent", "held", "no-ttl"} {
					c := diffCase{name: fmt.Sprintf("gen-set/%s/%s", strings.Join(args[3:], "_"), st)}
					c.lines = append(append(c.lines, states[st]...), line(' ', args...), line(' ', "GET", "k"), line('~', "PTTL", "k"), line(' ', "TTL", "k"))
					cases = append(cases, c)
				}
			}
		}
	}

	for _, bad := range [][]string{
		{"NX", "XX"}, {"XX", "NX"}, {"EX", "1", "PX", "2"}, {"KEEPTTL", "EX", "1"}, {"PX", "1", "KEEPTTL"},
		{"PX"}, {"NX", "FOO"}, {"EX", "abc"}, {"PX", "0"}, {"PX", "-1"}, {"EX", "0"},
		{"EX", "9223372036854775807"}, {"PX", "9223372036854775807"}, {"EX", "9223372036854775"},
		{"EXAT", "0"}, {"PXAT", "-5"}, {"EX", "1.5"}, {"PX", ""}, {"PX", "+5"}, {"PX", " 5"},
		{"PXAT", "1"}, {"EXAT", "1"}, {"EX", "1", "EX", "100"}, {"GET", "GET"}, {"NX", "NX", "PX", "100"},
	} {
		args := append([]string{"SET", "k", "v"}, bad...)
		cases = append(cases, diffCase{name: "gen-set-errors/" + strings.Join(bad, "_"),
			lines: []diffLine{line(' ', args...), line(' ', "GET", "k"), line('~', "PTTL", "k")}})
	}

	for _, args := range [][]string{
		{"GET"}, {"GET", "a", "b"}, {"SET", "k"}, {"SETNX", "k"}, {"SETEX", "k", "10"}, {"PSETEX", "k"},
		{"GETDEL"}, {"MGET"}, {"MSET", "a"}, {"MSET", "a", "1", "b"}, {"MSETNX", "a"}, {"MSETNX", "a", "1", "b"},
		{"GETRANGE", "k", "0"}, {"DEL"}, {"UNLINK"}, {"EXISTS"}, {"DBSIZE", "x"}, {"EXPIRE", "k"},
		{"PEXPIRE"}, {"EXPIREAT", "k"}, {"PEXPIREAT", "k"}, {"TTL"}, {"PTTL", "a", "b"}, {"PERSIST"},
		{"EVAL", "return 1"}, {"EVALSHA", "abc"}, {"SCRIPT"}, {"SELECT"}, {"ECHO"}, {"PING", "a", "b"},
		{"MULTI", "x"}, {"EXEC", "x"}, {"CLIENT"}, {"CONFIG"}, {"AUTH"}, {"TIME", "x"},
	} {
		cases = append(cases, diffCase{name: "gen-arity/" + strings.Join(args, "_"), lines: []diffLine{line(' ', args...)}})
	}

	expires := map[string]string{"EXPIRE": "100", "PEXPIRE": "100000", "EXPIREAT": "4102444800", "PEXPIREAT": "4102444800000"}
	for _, cmd := range []string{"EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"} {
		for _, opts := range []string{"", "NX", "XX", "GT", "LT", "nx", "NX XX", "GT LT", "XX GT", "XX LT", "FOO", "GT FOO"} {
			for _, st := range []string{"absent", "held", "no-ttl"} {
				args := append([]string{cmd, "k", expires[cmd]}, strings.Fields(opts)...)
				c := diffCase{name: fmt.Sprintf("gen-expire/%s_%s/%s", cmd, strings.ReplaceAll(opts, " ", "_"), st)}
				c.lines = append(append(c.lines, states[st]...), line(' ', args...), line(' ', "TTL", "k"), line('~', "PTTL", "k"))
				cases = append(cases, c)
			}
		}
	}
	return cases
}

func permutations(s [][]string) [][][]string {
	if len(s) <= 1 {
		return [][][]string{s}
	}
	var out [][][]string
	for i := range s {
		rest := append(append([][]string{}, s[:i]...), s[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([][]string{s[i]}, p...))
		}
	}
	return out
}

// diffScriptCases runs every script captured from the client libraries
// (testdata/scripts/*.lua) against the states a lock can be in: absent,
// held by the caller's token, held by another token, with one and with two
// keys.
func diffScriptCases(t interface{ Fatal(...any) }) []diffCase {
	files, _ := filepath.Glob("testdata/scripts/*.lua")
	var cases []diffCase
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".lua")
		l := func(args ...string) diffLine { return diffLine{mode: ' ', args: args} }
		for _, st := range []struct {
			name  string
			setup []diffLine
		}{
			{"absent", nil},
			{"mine", []diffLine{l("SET", "lock:a", "tok", "PX", "20000"), l("SET", "lock:b", "tok", "PX", "20000")}},
			{"theirs", []diffLine{l("SET", "lock:a", "other", "PX", "20000")}},
		} {
			c := diffCase{name: "lib-script/" + name + "/" + st.name}
			c.lines = append(c.lines, st.setup...)
			// '~': a script may answer a TTL (redislock's pttl.lua).
			approx := func(args ...string) diffLine { return diffLine{mode: '~', args: args} }
			c.lines = append(c.lines,
				approx("EVAL", string(src), "1", "lock:a", "tok", "10000", "10000"),
				l("GET", "lock:a"), approx("PTTL", "lock:a"),
				approx("EVAL", string(src), "2", "lock:a", "lock:b", "tok", "10000", "10000"),
				l("MGET", "lock:a", "lock:b"))
			cases = append(cases, c)
		}
	}
	return cases
}
