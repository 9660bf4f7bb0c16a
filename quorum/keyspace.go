package quorum

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// The commands on the key space as a whole (KEYS, SCAN, RANDOMKEY,
// FLUSHDB, FLUSHALL), which test harnesses and operators send. A key is
// listed when Q nodes hold it with the same type, which is what a read
// of it would find; a key left on a minority (a lost acquire awaiting its
// repair) is not. The horizon marker (marker.go) is neither listed nor
// flushed. SCAN pages through that list as the memory backend does
// (model.Scan: hash order, so a cursor means the same on every call).

// listKeys is the script each node runs to list its keys of a database
// with their types, leaving out the marker and the leases' hash (ARGV[2]
// and ARGV[3] name them, in their database).
const listKeys = `local out = {}
for _, k in ipairs(redis.call('keys', ARGV[1])) do
  if k ~= ARGV[2] and k ~= ARGV[3] then
    out[#out+1] = k
    out[#out+1] = redis.call('type', k)['ok']
  end
end
return out`

// flushKeys is the script that empties a database on a node but for the
// marker: FLUSHDB (with ARGV[2] as its option, when given) where the marker
// is not, a delete of every other key where it is. With ARGV[1] "all" it
// does so for every database.
const flushKeys = `local function flush(db)
  redis.call('select', db)
  if db == tonumber(ARGV[3]) then
    for _, k in ipairs(redis.call('keys', '*')) do
      if k ~= ARGV[4] and k ~= ARGV[5] then redis.call('del', k) end
    end
  elseif ARGV[2] ~= '' then
    redis.call('flushdb', ARGV[2])
  else
    redis.call('flushdb')
  end
end
if ARGV[1] == 'all' then
  for db = 0, 15 do flush(db) end
else
  flush(tonumber(ARGV[1]))
end
return 'OK'`

// keyspaceCommand runs one of the commands above; ok is false for any
// other command.
func (b *Backend) keyspaceCommand(ctx context.Context, db int, name string, args [][]byte) (v backend.Value, err error, ok bool) {
	switch name {
	case "keys":
		keys, err := b.majorityKeys(ctx, db, string(args[1]))
		if err != nil {
			return backend.Value{}, err, true
		}
		out := make([]backend.Value, len(keys))
		for i, k := range keys {
			out[i] = backend.BulkString(k.Key)
		}
		return backend.Array(out...), nil, true
	case "scan":
		sc, err := model.ParseScan(args)
		if err != nil {
			return backend.Value{}, err, true
		}
		keys, err := b.majorityKeys(ctx, db, "*")
		if err != nil {
			return backend.Value{}, err, true
		}
		return sc.Page(keys), nil, true
	case "randomkey":
		keys, err := b.majorityKeys(ctx, db, "*")
		if err != nil || len(keys) == 0 {
			return backend.NilValue, err, true
		}
		return backend.BulkString(keys[rand.IntN(len(keys))].Key), nil, true
	case "flushdb", "flushall":
		if err := model.CheckFlush(args); err != nil {
			return backend.Value{}, err, true
		}
		which, opt := "all", ""
		if name == "flushdb" {
			which = strconv.Itoa(db)
		}
		if len(args) == 2 {
			opt = strings.ToLower(string(args[1]))
		}
		replies := b.do(ctx, db, "eval", flushKeys, "0", which, opt, strconv.Itoa(markerDB), markerKey, leasesKey)
		if _, err := b.voteReply(replies); err != nil {
			return backend.Value{}, err, true
		}
		return backend.OKValue, nil, true
	}
	return backend.Value{}, nil, false
}

// majorityKeys lists the keys of db matching pattern that Q nodes hold
// with the same type, sorted.
func (b *Backend) majorityKeys(ctx context.Context, db int, pattern string) ([]model.KeyType, error) {
	marker, leases := "", ""
	if db == markerDB {
		marker, leases = markerKey, leasesKey
	}
	replies := b.do(ctx, db, "eval", listKeys, "0", pattern, marker, leases)
	count := map[model.KeyType]int{}
	answered := 0
	for _, r := range replies {
		v, ok := one(r)
		if !ok || v.Kind != backend.KindArray {
			continue
		}
		answered++
		for i := 0; i+1 < len(v.Elems); i += 2 {
			count[model.KeyType{Key: string(v.Elems[i].Str), Type: string(v.Elems[i+1].Str)}]++
		}
	}
	if answered < b.q {
		return nil, b.errNoQuorum(replies)
	}
	var out []model.KeyType
	for k, n := range count {
		if n >= b.q {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b model.KeyType) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
