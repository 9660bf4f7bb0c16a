package proxy

import (
	"strconv"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/keycmd"
	"github.com/lockproxy/lockproxy/luascripts"
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
	keys, argv, db, ok := execPlan(queue, cl.db)
	if !ok {
		out := make([]backend.Value, 0, len(queue))
		cl.inExec = true
		for _, c := range queue {
			out = append(out, cl.command(c))
		}
		cl.inExec = false
		cl.wakeDeferred() // the blocked clients see the transaction's end state
		return backend.Array(out...)
	}
	v := cl.eval("exec", execScript, keys, argv, false)
	if v.Kind == backend.KindArray {
		cl.db = db
	}
	return v
}

// execPlan prepares a transaction queued in database start to run as
// execScript: the script's KEYS (every key of every queued command, each
// once, in order of first use), its ARGV, and the database the connection
// is in once the transaction has run. The keys change nothing the script
// does (it reads ARGV only); they tell the backend what the transaction
// touches: quorum watches them on every node and undoes an acquisition
// that did not reach a majority, pgbridge prepares them up front.
//
// ok is false when the transaction must run command by command instead:
// when it holds a command no script may run (CLIENT, INFO, …), or when a
// SELECT in the queue leads a later command to keys of another database
// than start. A script declares keys of the one database it is called in,
// and a key the backend cannot see declared escapes quorum's watch (an
// acquisition refused by the majority would stay on the minority). Run
// one by one, each command gets its backend's own treatment (a SET NX is
// undone as outside MULTI), at the price of atomicity for this rare shape.
func execPlan(queue [][][]byte, start int) (keys []string, argv [][]byte, db int, ok bool) {
	db = start
	seen := map[string]bool{}
	for _, c := range queue {
		kc := keycmd.Lookup(c[0])
		name := lower(c[0])
		if kc == nil && !scriptable[name] {
			return nil, nil, 0, false
		}
		if name == "select" {
			if n, ok := backend.ParseInt(c[1]); ok && n >= 0 && n < keycmd.Databases {
				db = int(n)
			}
		}
		if kc != nil {
			for _, k := range kc.Keys(c) {
				if db != start {
					return nil, nil, 0, false
				}
				if !seen[string(k)] {
					seen[string(k)] = true
					keys = append(keys, string(k))
				}
			}
		}
		argv = append(argv, []byte(strconv.Itoa(len(c))))
		argv = append(argv, c...)
	}
	return keys, argv, db, true
}
