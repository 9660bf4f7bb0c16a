package tests

import (
	"fmt"
	"strings"
)

// diffState is a state a case's key "k" starts in.
type diffState struct {
	name  string
	setup []diffLine
}

// diffStates returns the states: absent, held with 20 s left, no expiry.
func diffStates() []diffState {
	return []diffState{
		{"absent", nil},
		{"held", []diffLine{diffL("SET", "k", "old", "PX", "20000")}},
		{"no-ttl", []diffLine{diffL("SET", "k", "old")}},
	}
}

// diffL is a line compared byte for byte.
func diffL(args ...string) diffLine { return diffLine{mode: ' ', args: args} }

// diffApprox is a line whose reply is a remaining time (see diffNear).
func diffApprox(args ...string) diffLine { return diffLine{mode: '~', args: args} }

// diffTTLLine reads TTL k: exactly when the expiry is relative (Redis's
// rounding keeps "EX 100" at 100 for half a second), approximately when it
// is absolute (EXAT/PXAT/EXPIREAT), whose TTL ticks with the wall clock.
func diffTTLLine(absolute bool) diffLine {
	if absolute {
		return diffLine{mode: '%', args: []string{"TTL", "k"}}
	}
	return diffL("TTL", "k")
}

// diffGenerated builds the systematic part of the corpus: every order and
// letter case of SET's option sets against every prior state of the key,
// SET's option errors, every command's arity error, and the EXPIRE family
// against every condition and every kind of TTL.
func diffGenerated() []diffCase {
	cases := diffGenSet()
	cases = append(cases, diffGenSetErrors()...)
	cases = append(cases, diffGenArity()...)
	return append(cases, diffGenExpire()...)
}

// diffCasings returns the letter cases an option is sent in: upper, lower
// (redsync) and mixed ("Nx", "KeEpTtL").
func diffCasings() []func(string) string {
	mixed := func(s string) string {
		b := []byte(strings.ToLower(s))
		for i := 0; i < len(b); i += 2 {
			b[i] = strings.ToUpper(string(b[i]))[0]
		}
		return string(b)
	}
	return []func(string) string{strings.ToUpper, strings.ToLower, mixed}
}

func diffGenSet() []diffCase {
	var cases []diffCase
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
		{{"XX"}, {"EXAT", "4102444800"}},
		{{"NX"}, {"KEEPTTL"}},
		{{"GET"}, {"KEEPTTL"}},
		{{"XX"}, {"GET"}, {"PXAT", "4102444800000"}},
		{{"PX", "10000"}},
		{{"GET"}},
	}
	for _, set := range optionSets {
		for _, perm := range diffPermutations(set) {
			for _, casing := range diffCasings() {
				args := []string{"SET", "k", "new"}
				absolute := false
				for _, o := range perm {
					o = append([]string(nil), o...)
					o[0] = casing(o[0])
					absolute = absolute || strings.HasSuffix(strings.ToUpper(o[0]), "AT")
					args = append(args, o...)
				}
				for _, st := range diffStates() {
					c := diffCase{name: fmt.Sprintf("gen-set/%s/%s", strings.Join(args[3:], "_"), st.name)}
					c.lines = append(c.lines, st.setup...)
					c.lines = append(c.lines, diffL(args...), diffL("GET", "k"), diffApprox("PTTL", "k"), diffTTLLine(absolute))
					cases = append(cases, c)
				}
			}
		}
	}
	return cases
}

func diffGenSetErrors() []diffCase {
	var cases []diffCase
	for _, bad := range [][]string{
		{"NX", "XX"}, {"XX", "NX"}, {"EX", "1", "PX", "2"}, {"KEEPTTL", "EX", "1"}, {"PX", "1", "KEEPTTL"},
		{"PX"}, {"NX", "FOO"}, {"EX", "abc"}, {"PX", "0"}, {"PX", "-1"}, {"EX", "0"},
		{"EX", "9223372036854775807"}, {"PX", "9223372036854775807"}, {"EX", "9223372036854775"},
		{"EXAT", "0"}, {"PXAT", "-5"}, {"EX", "1.5"}, {"PX", ""}, {"PX", "+5"}, {"PX", " 5"},
		{"PXAT", "1"}, {"EXAT", "1"}, {"EX", "1", "EX", "100"}, {"GET", "GET"}, {"NX", "NX", "PX", "100000"},
		{"px", "abc"}, {"Ex", "-1"}, {"GET", "NX", "XX"}, {"KEEPTTL", "KEEPTTL"}, {"KEEPTTL", "PXAT", "4102444800000"},
		{"EXAT", "4102444800", "PXAT", "4102444800000"}, {"PX", "9223372036854775806"}, {"EXAT", "9223372036854775"},
		{"PXAT", "9223372036854775807"}, {"PXAT", "0"}, {"EX", "10abc"}, {"EX", "0x10"}, {"PX", "00100000"},
		{"PX", "100000", "XX", "GET", "NX"}, {"EX"}, {"NX", "EX"}, {"EXAT"}, {"GETX"}, {"PX", "100000", "EXTRA"},
		{"EX", "-9223372036854775808"}, {"PX", "-0"},
	} {
		args := append([]string{"SET", "k", "v"}, bad...)
		for _, st := range diffStates()[:2] {
			c := diffCase{name: "gen-set-errors/" + strings.Join(bad, "_") + "/" + st.name}
			c.lines = append(c.lines, st.setup...)
			c.lines = append(c.lines, diffL(args...), diffL("GET", "k"), diffApprox("PTTL", "k"))
			cases = append(cases, c)
		}
	}
	return cases
}

func diffGenArity() []diffCase {
	var cases []diffCase
	for _, args := range [][]string{
		{"GET"}, {"GET", "a", "b"}, {"SET", "k"}, {"SET"}, {"SETNX", "k"}, {"SETNX", "k", "v", "x"},
		{"SETEX", "k", "10"}, {"SETEX", "k", "10", "v", "x"}, {"PSETEX", "k"}, {"PSETEX", "k", "100", "v", "x"},
		{"GETDEL"}, {"GETDEL", "a", "b"}, {"MGET"}, {"MSET", "a"}, {"MSET", "a", "1", "b"}, {"MSET"},
		{"MSETNX", "a"}, {"MSETNX", "a", "1", "b"}, {"GETRANGE", "k", "0"}, {"GETRANGE", "k", "0", "1", "2"},
		{"DEL"}, {"UNLINK"}, {"EXISTS"}, {"DBSIZE", "x"}, {"EXPIRE", "k"}, {"PEXPIRE"}, {"EXPIREAT", "k"},
		{"PEXPIREAT", "k"}, {"TTL"}, {"TTL", "a", "b"}, {"PTTL", "a", "b"}, {"PERSIST"}, {"PERSIST", "a", "b"},
		{"EVAL", "return 1"}, {"EVAL"}, {"EVALSHA", "abc"}, {"EVAL_RO", "return 1"}, {"EVALSHA_RO", "abc"},
		{"SCRIPT"}, {"SCRIPT", "LOAD"}, {"SCRIPT", "LOAD", "return 1", "x"}, {"SCRIPT", "EXISTS"},
		{"SCRIPT", "FLUSH", "ASYNC", "x"}, {"SELECT"}, {"SELECT", "1", "2"}, {"ECHO"}, {"ECHO", "a", "b"},
		{"PING", "a", "b"}, {"MULTI", "x"}, {"EXEC", "x"}, {"DISCARD", "x"}, {"CLIENT"}, {"CLIENT", "SETNAME"},
		{"CLIENT", "GETNAME", "x"}, {"CONFIG"}, {"CONFIG", "GET"}, {"AUTH"}, {"AUTH", "a", "b", "c"},
		{"TIME", "x"}, {"HELLO", "3", "AUTH"}, {"HELLO", "2", "SETNAME"},
	} {
		cases = append(cases, diffCase{name: "gen-arity/" + strings.Join(args, "_"), lines: []diffLine{diffL(args...)}})
	}
	return cases
}

func diffGenExpire() []diffCase {
	var cases []diffCase
	add := func(cmd, ttl string, opts string) {
		absolute := strings.HasSuffix(cmd, "AT")
		for _, st := range diffStates() {
			args := append([]string{cmd, "k", ttl}, strings.Fields(opts)...)
			c := diffCase{name: fmt.Sprintf("gen-expire/%s_%s_%s/%s", cmd, ttl, strings.ReplaceAll(opts, " ", "_"), st.name)}
			c.lines = append(c.lines, st.setup...)
			// held keys have 20 s left: the first TTL of each command is
			// longer (GT holds, LT fails), the second shorter, the third
			// in the past (the key is deleted when the condition holds).
			c.lines = append(c.lines, diffL(args...), diffTTLLine(absolute), diffApprox("PTTL", "k"), diffL("EXISTS", "k"))
			cases = append(cases, c)
		}
	}
	ttls := map[string][]string{
		"EXPIRE":    {"100", "5", "-1"},
		"PEXPIRE":   {"100000", "5000", "-1"},
		"EXPIREAT":  {"4102444800", "1"},
		"PEXPIREAT": {"4102444800000", "1"},
	}
	for _, cmd := range []string{"EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"} {
		for i, ttl := range ttls[cmd] {
			if i == 0 {
				for _, opts := range []string{"", "NX", "XX", "GT", "LT", "nx", "Gt", "lT", "NX XX", "GT LT",
					"XX GT", "XX LT", "NX GT", "NX LT", "GT GT", "FOO", "GT FOO", "xx gt"} {
					add(cmd, ttl, opts)
				}
				continue
			}
			for _, opts := range []string{"", "NX", "XX", "GT", "LT"} {
				add(cmd, ttl, opts)
			}
		}
	}
	return cases
}

// diffPermutations returns every order of s.
func diffPermutations(s [][]string) [][][]string {
	if len(s) <= 1 {
		return [][][]string{s}
	}
	var out [][][]string
	for i := range s {
		rest := append(append([][]string{}, s[:i]...), s[i+1:]...)
		for _, p := range diffPermutations(rest) {
			out = append(out, append([][]string{s[i]}, p...))
		}
	}
	return out
}
