package migrate

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/luascripts"
)

// Counters (INCR, INCRBY, DECR, DECRBY). The counters lock libraries keep
// beside their locks are fencing counters (simple-redis-mutex's global
// one, Redisson's redisson_lock_token, bsm/redislock's FenceKey): their
// numbers must be one sequence for the clients still on the legacy Redis
// and those already on lockproxy, and go on from there after the cutover.
// So while the fleet moves, a counter lives on the legacy Redis, where the
// clients not moved yet count it; a change through lockproxy
//   - runs there, atomically, never below the inner backend's copy: a
//     legacy Redis that lost the counter (a restart without persistence)
//     goes on from that copy, not from 0;
//   - is answered with the legacy Redis's reply, its errors in its words;
//   - is then written to the inner backend: the copy is raised to the new
//     value by an increment (never lowered: two increments' copies may
//     arrive out of order), set to it by a decrement.
// A legacy Redis that fails fails the command (TRYAGAIN migrate); so does
// an inner backend that fails, the legacy change made (an error reply to
// INCR leaves its effect unknown, as it does on Redis). Reads answer from
// the inner copy, as for every key (keys.go): a GET may trail the clients
// still counting on the legacy Redis.

// lessLua compares two canonical decimal integers as text: Lua's numbers
// are doubles, which tell integers apart only up to 2^53.
const lessLua = `local function less(a, b)
  local na, nb = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if na ~= nb then return na end
  if na then a, b = b:sub(2), a:sub(2) end
  if #a ~= #b then return #a < #b end
  return a < b
end
local function int(s) return type(s) == 'string' and #s <= 20 and (s == '0' or string.match(s, '^-?[1-9]%d*$') ~= nil) end
`

// counterFloor raises KEYS[1] to ARGV[1] (the inner copy) when it is
// absent or an integer below it, keeping its TTL. The command itself runs
// after it, in the same MULTI, as the client sent it: its reply and its
// errors are the legacy Redis's own (a script would carry the reply
// through a Lua double).
var counterFloor = redis.NewScript(lessLua + `local cur = redis.pcall('get', KEYS[1])
if cur == false or (int(cur) and less(cur, ARGV[1])) then
  redis.call('set', KEYS[1], ARGV[1], 'keepttl')
end
return 0`)

// counterMirror writes the legacy Redis's new value ARGV[1] to the inner
// backend's copy: raised to it only (ARGV[2] "max"), or set.
var counterMirror = backend.Script{Src: counterMirrorSrc, SHA1: luascripts.SHA1(counterMirrorSrc)}

const counterMirrorSrc = lessLua + `local cur = redis.call('get', KEYS[1])
if ARGV[2] == 'max' and int(cur) and not less(cur, ARGV[1]) then return 0 end
redis.call('set', KEYS[1], ARGV[1], 'keepttl')
return 1`

// counter runs one of INCR, INCRBY, DECR and DECRBY (name, lower case;
// args the whole command).
func (b *Backend) counter(ctx context.Context, db int, key, name string, args [][]byte) (backend.Value, error) {
	op, by := "incrby", "1"
	switch name {
	case "incrby":
		by = string(args[2])
	case "decr":
		op = "decrby"
	case "decrby":
		op, by = "decrby", string(args[2])
	}
	floor := ""
	switch tok, ok, err := b.inner.Get(ctx, db, key); {
	case err != nil && !backend.IsWrongType(err):
		return backend.Value{}, err
	case ok:
		if v, perr := strconv.ParseInt(string(tok), 10, 64); perr == nil {
			floor = strconv.FormatInt(v, 10)
		}
	}
	lctx, cancel := b.legacyCtx(ctx)
	pipe := b.client(db).TxPipeline()
	if floor != "" {
		counterFloor.Eval(lctx, pipe, []string{key}, floor)
	}
	cmd := pipe.Do(lctx, anys(args)...)
	_, err := pipe.Exec(lctx)
	cancel()
	var re redis.Error
	if err != nil && !errors.As(err, &re) {
		return backend.Value{}, b.failed(err)
	}
	n, err := cmd.Int64()
	switch {
	case errors.As(err, &re):
		return backend.Value{}, backend.Reply(re.Error())
	case err != nil:
		return backend.Value{}, b.failed(err)
	}
	up := "max"
	if (op == "incrby") == strings.HasPrefix(by, "-") {
		up = "set" // a decrement
	}
	if _, err := b.inner.Eval(ctx, db, counterMirror, []string{key}, [][]byte{[]byte(strconv.FormatInt(n, 10)), []byte(up)}, false); err != nil {
		return backend.Value{}, err
	}
	return backend.Int(n), nil
}
