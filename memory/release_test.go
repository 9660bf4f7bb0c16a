package memory

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/luascripts"
)

// The catalogued release scripts, and the same scripts with a statement
// in front, which the catalogue does not know: those run in Lua.
var releaseScripts = []string{
	`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`,
	`if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`,
	"local token = redis.call('get', KEYS[1])\nif not token or token ~= ARGV[1] then\n    return 0\nend\nredis.call('del', KEYS[1])\nreturn 1",
}

func script(src string) backend.Script { return backend.Script{SHA1: luascripts.SHA1(src), Src: src} }

// TestReleaseOnShard: a catalogued release script answers and deletes
// exactly as the same script run in Lua, for a matching token, another
// token, an absent key and a key past its deadline.
func TestReleaseOnShard(t *testing.T) {
	ctx := t.Context()
	type state struct {
		reply   backend.Value
		left    bool
		expired uint64
	}
	run := func(src string, setup func(b *Backend), token string) state {
		b := New(Config{ReapInterval: time.Hour})
		defer b.Close(ctx)
		setup(b)
		v, err := b.Eval(ctx, 3, script(src), []string{"lock"}, [][]byte{[]byte(token)}, false)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		_, left, _ := b.Get(ctx, 3, "lock")
		return state{v, left, b.ExpiredLocks()}
	}
	held := func(b *Backend) {
		b.Set(ctx, 3, "lock", []byte("mine"), backend.SetOptions{Expiry: backend.Expiry{TTL: time.Minute}})
	}
	cases := map[string]struct {
		setup func(b *Backend)
		token string
	}{
		"held, same token":  {held, "mine"},
		"held, other token": {held, "theirs"},
		"held, empty token": {held, ""},
		"absent":            {func(*Backend) {}, "mine"},
		"past its deadline": {func(b *Backend) {
			b.shard("lock").sp.Put(3, "lock", model.Entry{Token: []byte("mine"), Deadline: time.Now().UnixMilli() - 1})
		}, "mine"},
	}
	for name, c := range cases {
		for _, src := range releaseScripts {
			if !luascripts.IsRelease(src) {
				t.Fatalf("not catalogued: %q", src)
			}
			got := run(src, c.setup, c.token)
			want := run("local _ = 1\n"+src, c.setup, c.token) // in Lua
			if got.reply.Kind != want.reply.Kind || got.reply.Int != want.reply.Int || got.left != want.left || got.expired != want.expired {
				t.Errorf("%s, %q: got %+v, Lua gives %+v", name, src, got, want)
			}
		}
	}
}

// TestReleaseAllocs: the catalogued release runs on the key's shard, not
// through the script runner and its redis.call requests (which allocate
// the requests, the caller and the store's view on every release).
func TestReleaseAllocs(t *testing.T) {
	b := New(Config{})
	defer b.Close(context.Background())
	s := script(releaseScripts[0])
	keys, args := []string{"lock"}, [][]byte{[]byte("mine")}
	if v, err := b.Eval(t.Context(), 0, s, keys, args, false); err != nil || v.Int != 0 {
		t.Fatalf("release of an absent key: %+v, %v", v, err)
	}
	if n := testing.AllocsPerRun(100, func() { b.Eval(t.Context(), 0, s, keys, args, false) }); n != 0 {
		t.Errorf("a release allocates %v times", n)
	}
}
