package proxy

import (
	"strconv"

	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/proxy/backend"
	"github.com/lockproxy/lockproxy/proxy/keycmd"
)

func cmdMulti(cl *client, args [][]byte) backend.Value {
	if cl.inMulti {
		return backend.ErrorValue(backend.MsgMultiNested)
	}
	cl.inMulti, cl.dirty, cl.queue = true, false, nil
	return backend.OKValue
}

func cmdDiscard(cl *client, args [][]byte) backend.Value {
	if !cl.inMulti {
		return backend.ErrorValue(backend.MsgDiscardNoMulti)
	}
	cl.inMulti, cl.dirty, cl.queue = false, false, nil
	return backend.OKValue
}

// execSrc runs a transaction's commands as one script, so EXEC is atomic on
// every backend. ARGV holds each command as its argument count followed by
// its arguments; redis.pcall keeps a failing command's error in its slot,
// as EXEC does.
const execSrc = `local out, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  out[#out + 1] = redis.pcall(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return out`

var execScript = backend.Script{SHA1: luascripts.SHA1(execSrc), Src: execSrc}

// scriptable are the non-key commands a transaction script can run.
var scriptable = map[string]bool{"select": true, "ping": true, "echo": true, "time": true}

func cmdExec(cl *client, args [][]byte) backend.Value {
	if !cl.inMulti {
		return backend.ErrorValue(backend.MsgExecWithoutMulti)
	}
	queue, dirty := cl.queue, cl.dirty
	cl.inMulti, cl.dirty, cl.queue = false, false, nil
	if dirty {
		return backend.ErrorValue(backend.MsgExecAbort)
	}
	if len(queue) == 0 {
		return backend.Array()
	}
	asScript := true
	var argv [][]byte
	db := cl.db
	for _, c := range queue {
		name := lower(c[0])
		if keycmd.Lookup(c[0]) == nil && !scriptable[name] {
			asScript = false
			break
		}
		if name == "select" {
			if n, ok := keycmd.ParseInt(c[1]); ok && n >= 0 && n < keycmd.Databases {
				db = int(n)
			}
		}
		argv = append(argv, []byte(strconv.Itoa(len(c))))
		argv = append(argv, c...)
	}
	if !asScript {
		out := make([]backend.Value, 0, len(queue))
		for _, c := range queue {
			out = append(out, cl.command(c))
		}
		return backend.Array(out...)
	}
	v := cl.eval("exec", execScript, nil, argv, false)
	if v.Kind == backend.KindArray {
		cl.db = db
	}
	return v
}
