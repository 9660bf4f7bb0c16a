package luascripts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// FuzzLuaToRESP runs arbitrary return expressions: whatever a script
// returns converts to a well-formed reply (error and status lines without
// line breaks, maps in pairs) or fails with a one-line ReplyError, and
// never panics or hangs the runner.
func FuzzLuaToRESP(f *testing.F) {
	for _, s := range []string{"{1, 2, nil, 4}", "{err='x'}", "{ok='y'}", "{double=1/0}", "3.7", "true",
		"{map={a=1}}", "{set={a=true}}", "(function() local t = {} t[1] = t return t end)()", "{{{}}}",
		"redis.call('arr')", "-0", "0/0", "'\\r\\n'", "{err='a\\r\\nb'}", "{ok='\\n'}", "{map={[1]={2}}}",
		"{verbatim_string={format='txt', string='x'}}", "{big_number='1'}", "redis.error_reply('\\n')",
		"error('x\\ny')", "redis.setresp(3) or {redis.call('get', 'no')}", "1e309", "{double=0/0}",
		"(redis.setresp(3)) or true", "string.rep('x', 10)", "{tostring}", "{1, {err='e'}, {ok='o'}}"} {
		f.Add(s)
	}
	r := New(Config{TimeLimit: 100 * time.Millisecond})
	f.Fuzz(func(t *testing.T, expr string) {
		src := "return " + expr
		if Compile(src) != nil {
			return
		}
		c := &echoCaller{data: map[string]string{}}
		v, err := r.Run(t.Context(), backend.Script{Src: src}, nil, nil, c)
		var re *backend.ReplyError
		switch {
		case errors.As(err, &re):
			if strings.ContainsAny(re.Reply, "\r\n") {
				t.Errorf("%s: error reply %q has a line break", src, re.Reply)
			}
		case err != nil:
			t.Errorf("%s: %v; want a reply or a ReplyError", src, err)
		default:
			checkValue(t, src, v)
		}
	})
}

func checkValue(t *testing.T, src string, v backend.Value) {
	t.Helper()
	switch v.Kind {
	case backend.KindError, backend.KindStatus:
		if strings.ContainsAny(string(v.Str), "\r\n") {
			t.Errorf("%s: %s has a line break", src, v)
		}
	case backend.KindMap:
		if len(v.Elems)%2 != 0 {
			t.Errorf("%s: map of %d elements", src, len(v.Elems))
		}
	}
	for _, e := range v.Elems {
		checkValue(t, src, e)
	}
	_ = v.String()
}

// FuzzClassify: a script whose call Classes.Of finds creating nothing
// creates no key in any state the fuzzer builds on the model, with ARGV
// other than those it was classified with. The seeds are every client
// library's script (tests/testdata/scripts) and the adversarial ones.
func FuzzClassify(f *testing.F) {
	files, _ := filepath.Glob("../tests/testdata/scripts/*.lua")
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src), "tok", "5000", uint8(0), uint8(1))
	}
	f.Add(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end if ARGV[2] == 'x' then redis.call('set', KEYS[1], ARGV[1]) end return 0`, "tok", "x", uint8(0), uint8(2))
	f.Add(`for _, a in ipairs(ARGV) do if a == 'x' then redis.call('set', KEYS[1], a) end end return 0`, "tok", "x", uint8(1), uint8(0))
	r := New(Config{TimeLimit: 50 * time.Millisecond})
	f.Fuzz(func(t *testing.T, src, a1, a2 string, state1, state2 uint8) {
		if Compile(src) != nil {
			return
		}
		c := Classes{Runner: r}
		keys := []string{"k1", "k2"}[:1+int(state2)%2]
		c.Of(t.Context(), backend.Script{Src: src}, keys, [][]byte{[]byte("tok"), []byte("5000")})
		args := [][]byte{[]byte(a1), []byte(a2)}
		if !c.Of(t.Context(), backend.Script{Src: src}, keys, args).CreatesNothing() {
			return
		}
		entries := []*model.Entry{nil, {Token: args[0]}, {Token: args[1], Deadline: probeNow + 5}, {Token: []byte("x")}}
		st := make(probeState, len(keys))
		for i := range st {
			st[i] = entries[int(state1>>(2*i))%len(entries)]
		}
		if _, created, _ := probe(t.Context(), r, backend.Script{Src: src}, keys, args, st); created {
			t.Errorf("%q with ARGV %q created a key in state %v, but its call was classified as creating nothing", src, args, st)
		}
	})
}

// FuzzScript runs arbitrary scripts under small limits (issue 40): a run
// always returns, within the time limit and a second, with a well-formed
// value or a one-line error reply, and never panics, whatever the script
// builds, calls or loops on. The seeds (testdata/fuzz/FuzzScript) are the
// issue's hostile scripts and the libraries' edges.
func FuzzScript(f *testing.F) {
	const limit = 100 * time.Millisecond
	r := New(Config{TimeLimit: limit, MemoryLimit: 8 << 20})
	f.Fuzz(func(t *testing.T, src, key, arg string) {
		type result struct {
			v   backend.Value
			err error
		}
		done := make(chan result, 1)
		start := time.Now()
		go func() {
			c := arityCaller{&echoCaller{data: map[string]string{key: arg}}}
			v, err := r.Run(context.Background(), backend.Script{Src: src}, []string{key}, [][]byte{[]byte(arg)}, c)
			done <- result{v, err}
		}()
		var res result
		select {
		case res = <-done:
		case <-time.After(limit + time.Second):
			t.Fatalf("%q: no answer %v after it started; want one within the time limit (%v) and a second", src, time.Since(start), limit)
		}
		var re *backend.ReplyError
		switch {
		case errors.As(res.err, &re):
			if strings.ContainsAny(re.Reply, "\r\n") || re.Reply == "" {
				t.Errorf("%q: error reply %q is not one line", src, re.Reply)
			}
		case res.err != nil:
			t.Errorf("%q: %v; want a reply or a ReplyError", src, res.err)
		default:
			checkValue(t, src, res.v)
		}
	})
}

// arityCaller is echoCaller with its commands' arity checked, as every
// backend checks it: a fuzzed redis.call may name any arguments.
type arityCaller struct{ *echoCaller }

func (c arityCaller) Call(ctx context.Context, args [][]byte) (backend.Value, error) {
	need := map[string]int{"get": 2, "set": 3, "del": 2, "echo": 2}[strings.ToLower(string(args[0]))]
	if len(args) < need {
		return backend.Value{}, backend.Reply("ERR wrong number of arguments for '" + strings.ToLower(string(args[0])) + "' command")
	}
	return c.echoCaller.Call(ctx, args)
}
