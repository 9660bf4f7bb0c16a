package luascripts

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/backend"
)

// FuzzLuaToRESP runs arbitrary return expressions: whatever a script
// returns converts to a reply or fails with an error, and never panics or
// hangs the runner.
func FuzzLuaToRESP(f *testing.F) {
	for _, s := range []string{"{1, 2, nil, 4}", "{err='x'}", "{ok='y'}", "{double=1/0}", "3.7", "true",
		"{map={a=1}}", "{set={a=true}}", "(function() local t = {} t[1] = t return t end)()", "{{{}}}",
		"redis.call('arr')", "-0", "0/0", "'\\r\\n'"} {
		f.Add(s)
	}
	r := New(Config{TimeLimit: 100 * time.Millisecond})
	f.Fuzz(func(t *testing.T, expr string) {
		src := "return " + expr
		if Compile(src) != nil {
			return
		}
		c := &echoCaller{data: map[string]string{}}
		v, err := r.Run(context.Background(), backend.Script{Src: src}, nil, nil, c)
		if err == nil {
			_ = v.String()
		}
	})
}
