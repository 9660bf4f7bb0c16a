package proxy

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
)

// scriptCache maps SHA1 to source for EVALSHA, shared by all connections.
// It holds at most max bytes of source; past that it starts over.
type scriptCache struct {
	mu    sync.RWMutex
	max   int
	bytes int
	m     map[string]backend.Script // by SHA1
	// gen counts the times the cache was emptied (SCRIPT FLUSH, or full):
	// a connection's last script (client.script) stands while it holds.
	gen atomic.Uint64
}

func newScriptCache(max int) *scriptCache {
	return &scriptCache{max: max, m: make(map[string]backend.Script)}
}

// lookup finds a script by its SHA1 in any letter case, without allocating.
func (c *scriptCache) lookup(sha []byte) (backend.Script, bool) {
	var buf [40]byte
	if len(sha) != len(buf) {
		return backend.Script{}, false
	}
	for i, ch := range sha {
		if 'A' <= ch && ch <= 'F' {
			ch += 'a' - 'A'
		}
		buf[i] = ch
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.m[string(buf[:])]
	return e, ok
}

func (c *scriptCache) get(sha string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.m[sha]
	return e.Src, ok
}

func (c *scriptCache) add(sha, src string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[sha]; ok {
		return
	}
	if c.bytes+len(src) > c.max {
		clear(c.m)
		c.bytes = 0
		c.gen.Add(1)
	}
	c.m[sha] = backend.Script{SHA1: sha, Src: src}
	c.bytes += len(src)
}

func (c *scriptCache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.bytes = 0
	c.gen.Add(1)
}

func (c *scriptCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// load compiles src and caches it, returning its SHA1.
func (s *Server) load(src []byte) (string, backend.Value, bool) {
	if len(src) > s.cfg.MaxScriptBytes {
		return "", backend.ErrorValue(backend.MsgScriptTooBig), false
	}
	sha := luascripts.SHA1(string(src))
	if _, ok := s.scripts.get(sha); ok {
		return sha, backend.Value{}, true
	}
	if err := luascripts.Compile(string(src)); err != nil {
		var v backend.Value
		if re, ok := err.(*backend.ReplyError); ok {
			v = backend.ErrorValue(re.Reply)
		} else {
			v = backend.ErrorValue(backend.MsgInternal)
		}
		return "", v, false
	}
	s.scripts.add(sha, string(src))
	return sha, backend.Value{}, true
}

// cmdEval is EVAL, EVALSHA, EVAL_RO and EVALSHA_RO script numkeys key… arg….
func cmdEval(cl *client, args [][]byte) backend.Value {
	name := cl.lastCmd // the canonical name: eval, evalsha, eval_ro or evalsha_ro
	isSHA := strings.HasPrefix(name, "evalsha")
	if isSHA && len(args[1]) != 40 {
		return backend.ErrorValue(backend.MsgNoScript) // Redis checks this before numkeys
	}
	n, ok := backend.ParseInt(args[2])
	switch {
	case !ok:
		return backend.ErrorValue(backend.MsgNotInteger)
	case n < 0:
		return backend.ErrorValue(backend.MsgNumKeysNegative)
	case n > int64(len(args)-3):
		return backend.ErrorValue(backend.MsgNumKeysTooBig)
	}
	var sc backend.Script
	if isSHA {
		var ok bool
		if sc, ok = cl.script(args[1]); !ok {
			return backend.ErrorValue(backend.MsgNoScript)
		}
	} else {
		sha, bad, ok := cl.s.load(args[1])
		if !ok {
			return bad
		}
		sc = backend.Script{SHA1: sha, Src: string(args[1])}
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = string(args[3+i])
	}
	argv := args[3+n:] // redcon gives every command its own buffer: nothing here is reused
	return cl.eval(name, sc, keys, argv, strings.HasSuffix(name, "_ro"))
}

// script finds the script an EVALSHA names: the one the connection ran
// last when it is that one and the cache was not emptied since (a lock
// client runs the same release script on every unlock), else the cache's.
func (cl *client) script(sha []byte) (backend.Script, bool) {
	gen := cl.s.scripts.gen.Load() // before the lookup: a flush after it is seen next time
	if last := cl.lastScript.SHA1; gen == cl.scriptGen && len(sha) == len(last) && last != "" {
		same := true
		for i, ch := range sha {
			if 'A' <= ch && ch <= 'F' {
				ch += 'a' - 'A'
			}
			if ch != last[i] {
				same = false
				break
			}
		}
		if same {
			return cl.lastScript, true
		}
	}
	sc, ok := cl.s.scripts.lookup(sha)
	if ok {
		cl.lastScript, cl.scriptGen = sc, gen
	}
	return sc, ok
}

func (cl *client) eval(name string, sc backend.Script, keys []string, argv [][]byte, ro bool) backend.Value {
	ctx, cancel := cl.commandCtx()
	defer cancel()
	pre := cl.trackBefore(keys) // a failed script leaves them tracked: a spurious invalidation later, at worst
	v, err := cl.store().Eval(ctx, cl.db, sc, keys, argv, ro)
	if err != nil {
		return cl.errorValue(name, err)
	}
	cl.touchedScript(keys, ro, pre)
	return v
}

func cmdScript(cl *client, args [][]byte) backend.Value {
	sub := lower(args[1])
	switch sub {
	case "load":
		if len(args) != 3 {
			return backend.ErrorValue(backend.ErrWrongArgs("script|load"))
		}
		sha, bad, ok := cl.s.load(args[2])
		if !ok {
			return bad
		}
		return backend.BulkString(sha)
	case "exists":
		if len(args) < 3 {
			return backend.ErrorValue(backend.ErrWrongArgs("script|exists"))
		}
		out := make([]backend.Value, 0, len(args)-2)
		for _, a := range args[2:] {
			_, ok := cl.s.scripts.get(strings.ToLower(string(a)))
			out = append(out, backend.Bool(ok))
		}
		return backend.Array(out...)
	case "flush":
		if len(args) > 3 || len(args) == 3 && lower(args[2]) != "sync" && lower(args[2]) != "async" {
			return backend.ErrorValue(backend.MsgScriptFlushMode)
		}
		cl.s.scripts.flush()
		return backend.OKValue
	case "kill":
		if len(args) != 2 {
			return backend.ErrorValue(backend.ErrWrongArgs("script|kill"))
		}
		return backend.ErrorValue("NOTBUSY No scripts in execution right now.")
	case "help":
		return backend.Array(backend.Status("SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"),
			backend.Status("EXISTS <sha1> [<sha1> ...], FLUSH [ASYNC|SYNC], KILL, LOAD <script>"))
	}
	return backend.ErrorValue(backend.ErrUnknownSubcommand("script", string(args[1])))
}
