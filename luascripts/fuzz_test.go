package luascripts

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/backend"
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
