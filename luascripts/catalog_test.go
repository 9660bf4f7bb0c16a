package luascripts

import (
	"errors"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// TestCatalogMatchesLua runs each catalogued script natively and, with a
// comment appended so that the catalogue does not know it, in Lua, over
// every state a lock can be in, and requires the same reply and the same
// effect.
func TestCatalogMatchesLua(t *testing.T) {
	r := New(Config{})
	scripts := map[string]string{
		"classic double quotes": `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`,
		"classic single quotes": `if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`,
		"redis-py release":      "\n        local token = redis.call('get', KEYS[1])\n        if not token or token ~= ARGV[1] then\n            return 0\n        end\n        redis.call('del', KEYS[1])\n        return 1\n    ",
	}
	states := map[string]map[string]string{"absent": {}, "mine": {"k": "tok"}, "theirs": {"k": "other"}}
	for name, src := range scripts {
		if lookupNative(src) == nil {
			t.Fatalf("%s: not in the catalogue", name)
		}
		for st, data := range states {
			for _, args := range [][]string{{"tok"}, {}} {
				run := func(src string) (string, map[string]string) {
					c := &echoCaller{data: map[string]string{}}
					for k, v := range data {
						c.data[k] = v
					}
					bargs := make([][]byte, len(args))
					for i, a := range args {
						bargs[i] = []byte(a)
					}
					v, err := r.Run(t.Context(), backend.Script{Src: src}, []string{"k"}, bargs, c)
					var re *backend.ReplyError
					if errors.As(err, &re) {
						return "error", c.data // Lua's text names its SHA1, which differs by the comment
					}
					return v.String(), c.data
				}
				gotV, gotData := run(src)
				wantV, wantData := run(src + "\n-- run in Lua")
				if gotV != wantV || len(gotData) != len(wantData) || gotData["k"] != wantData["k"] {
					t.Errorf("%s, %s, args %q: native %s %v; Lua %s %v", name, st, args, gotV, gotData, wantV, wantData)
				}
			}
		}
	}
}

func TestCatalogIgnoresOtherScripts(t *testing.T) {
	for _, src := range []string{
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[2]) else return 0 end`,
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 1 end`,
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("unlink",KEYS[1]) else return 0 end`,
	} {
		if lookupNative(src) != nil {
			t.Errorf("%q taken for a catalogued script", src)
		}
	}
}
