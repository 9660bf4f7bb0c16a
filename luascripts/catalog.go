package luascripts

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lockproxy/lockproxy/backend"
)

// The catalogue holds Go versions of the few release scripts that nearly
// every lock client runs on every unlock. It is an optimisation only: a
// script is recognised by its whole source text (whitespace aside), never
// by a SHA1 alone; a native version makes exactly the redis.call requests
// the script would, through the same Caller, and gives the same reply; and
// it hands the script back to Lua whenever anything is unusual (KEYS or
// ARGV missing, any command failing), which is safe because until its last
// step a release has only read. Everything else runs in Lua.

// native runs a catalogued script; ok false means "run it in Lua instead",
// and is only answered before anything was written.
type native func(ctx context.Context, keys []string, args [][]byte, c Caller) (v backend.Value, ok bool, err error)

var catalog = map[string]native{
	// The release script of the Redis docs, go-redis' examples, redis-rb
	// and many others (and lockbench).
	normalize(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`): releaseDelCount,
	normalize(`if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`): releaseDelCount,
	// redis-py's Lock.release (LUA_RELEASE_SCRIPT).
	normalize(`local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
return 1`): releaseOne,
}

// normalize collapses runs of whitespace, so indentation does not matter.
// It never joins two tokens, so two scripts with the same normal form
// differ at most in whitespace inside string literals, where a run of
// whitespace would become one space: none of the catalogued scripts has
// whitespace inside a literal.
func normalize(src string) string { return strings.Join(strings.Fields(src), " ") }

func lookupNative(src string) native { return catalog[normalize(src)] }

// IsRelease reports whether src is one of the catalogued release scripts
// (recognised by its whole text, whitespace aside): it reads its key and
// may delete it, and never creates a key, answering 1 (or DEL's count)
// when it deleted it and 0 otherwise. pgbridge and migrate run such a
// release as one statement, which needs those exact replies; a backend
// that needs only to know whether a script can create a key asks
// Classify (classify.go), which knows any script by what it does.
func IsRelease(src string) bool { return lookupNative(src) != nil }

// Releases remembers IsRelease by SHA1 (which the proxy computes from the
// source, backend.Script), for at most maxReleases scripts, so that a
// backend asks it on every EVAL without normalising the source each time.
// The zero value is ready.
type Releases struct {
	known sync.Map     // SHA1 → bool
	n     atomic.Int64 // entries in known
}

const maxReleases = 4096

// Is reports IsRelease(s.Src).
func (r *Releases) Is(s backend.Script) bool {
	if v, ok := r.known.Load(s.SHA1); ok {
		return v.(bool)
	}
	is := IsRelease(s.Src)
	if r.n.Load() < maxReleases && s.SHA1 != "" {
		if _, loaded := r.known.LoadOrStore(s.SHA1, is); !loaded {
			r.n.Add(1)
		}
	}
	return is
}

var (
	cmdGet = []byte("get")
	cmdDel = []byte("del")
)

// release runs GET; when the token matches, DEL. It returns the DEL reply
// (delCount) or 1.
func release(ctx context.Context, keys []string, args [][]byte, c Caller, delCount bool) (backend.Value, bool, error) {
	if len(keys) < 1 || len(args) < 1 {
		return backend.Value{}, false, nil
	}
	key := []byte(keys[0])
	v, err := c.Call(ctx, [][]byte{cmdGet, key})
	if err != nil {
		return backend.Value{}, false, nil // let Lua meet (and word) the failure
	}
	if v.Kind != backend.KindBulk || !bytes.Equal(v.Str, args[0]) {
		return backend.Int(0), true, nil
	}
	d, err := c.Call(ctx, [][]byte{cmdDel, key})
	if err != nil {
		return backend.Value{}, false, nil // nothing was deleted: Lua may redo both steps
	}
	if delCount {
		return d, true, nil
	}
	return backend.Int(1), true, nil
}

func releaseDelCount(ctx context.Context, keys []string, args [][]byte, c Caller) (backend.Value, bool, error) {
	return release(ctx, keys, args, c, true)
}

func releaseOne(ctx context.Context, keys []string, args [][]byte, c Caller) (backend.Value, bool, error) {
	return release(ctx, keys, args, c, false)
}
