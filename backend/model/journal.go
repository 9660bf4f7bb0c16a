package model

import (
	"strings"

	"github.com/lockproxy/lockproxy/backend"
)

// Journal keeps, for each key a View changes, what the key held before
// its first change, so that Undo can put the Spaces back as they were: a
// script that the runner stops (time or memory limit) then leaves no
// trace, where Redis would keep half of it. A View with a Journal saves
// a key before every command that may write it (a whole database before
// FLUSHDB and FLUSHALL); reads save nothing. An Object is saved as a
// clone, once per key and run: a write to a large hash costs its copy
// once. What Undo does not put back is what no client can miss: the
// keys the View found past their deadline stay deleted (and counted as
// expired), and fences given stay given (the Space's counter only grows,
// docs/fencing.md).
//
// The zero Journal is empty and ready; Reset empties it for another run.
// Like a Space, it is not safe for concurrent use.
type Journal struct {
	saved []saved
	seen  map[journalKey]struct{} // once saved grows past journalScan
}

// journalScan is how many saves Journal looks up by scanning.
const journalScan = 8

type journalKey struct {
	sp    *Space
	db    int
	key   string
	whole bool
}

// saved is one key's state before the View changed it, or with whole a
// database's maps before a flush.
type saved struct {
	journalKey
	e    Entry
	o    Object
	had  bool
	dbs  map[string]Entry
	objs map[string]Object
}

// note reports whether k is saved already, and marks it saved.
func (j *Journal) note(k journalKey) bool {
	if j.seen == nil {
		for i := range j.saved {
			if j.saved[i].journalKey == k {
				return true
			}
		}
		if len(j.saved) < journalScan {
			return false
		}
		j.seen = make(map[journalKey]struct{}, 2*journalScan)
		for i := range j.saved {
			j.seen[j.saved[i].journalKey] = struct{}{}
		}
	}
	if _, ok := j.seen[k]; ok {
		return true
	}
	j.seen[k] = struct{}{}
	return false
}

// save keeps what key holds in sp before a write.
func (j *Journal) save(sp *Space, db int, key string) {
	k := journalKey{sp: sp, db: db, key: key}
	if j.note(k) {
		return
	}
	s := saved{journalKey: k}
	s.e, s.had = sp.dbs[db][key]
	if s.had && s.e.Token == nil {
		if o := sp.objs[db][key]; o != nil {
			s.o = o.Clone() // the commands change objects in place
		}
	}
	j.saved = append(j.saved, s)
}

// saveDB keeps db's maps in sp before a flush and gives sp empty ones
// (the flush clears maps in place).
func (j *Journal) saveDB(sp *Space, db int) {
	k := journalKey{sp: sp, db: db, whole: true}
	if j.note(k) {
		return
	}
	j.saved = append(j.saved, saved{journalKey: k, dbs: sp.dbs[db], objs: sp.objs[db]})
	sp.dbs[db], sp.objs[db] = nil, nil
}

// Undo puts every saved key back as it was, last change first, and
// empties the Journal.
func (j *Journal) Undo() {
	for i := len(j.saved) - 1; i >= 0; i-- {
		s := &j.saved[i]
		sp, db := s.sp, s.db
		switch {
		case s.whole:
			sp.dbs[db], sp.objs[db] = s.dbs, s.objs
		case !s.had:
			sp.drop(db, s.key)
		default:
			if sp.dbs[db] == nil {
				sp.dbs[db] = make(map[string]Entry)
			}
			sp.dbs[db][s.key] = s.e
			if s.o != nil {
				if sp.objs[db] == nil {
					sp.objs[db] = make(map[string]Object)
				}
				sp.objs[db][s.key] = s.o
			} else if sp.objs[db] != nil {
				delete(sp.objs[db], s.key)
			}
		}
	}
	j.Reset()
}

// Reset empties the Journal, keeping its changes.
func (j *Journal) Reset() {
	clear(j.saved)
	j.saved = j.saved[:0]
	j.seen = nil
}

// readOnly are the commands of Do that change no key (LOCKPROXY may give
// a key its fence at its first read, which Undo need not take back).
var readOnly = map[string]bool{
	"type": true, "pexpiretime": true, "expiretime": true, "keys": true, "scan": true, "randomkey": true,
	"object": true, "lockproxy": true,
	"hget": true, "hmget": true, "hgetall": true, "hkeys": true, "hvals": true, "hexists": true, "hlen": true, "hstrlen": true,
	"sismember": true, "smismember": true, "scard": true, "smembers": true,
	"lindex": true, "lrange": true, "llen": true,
	"zscore": true, "zmscore": true, "zcard": true, "zcount": true, "zrank": true, "zrevrank": true, "zrange": true,
	"zrangebyscore": true, "zrevrangebyscore": true, "zrevrange": true, "zrangebylex": true, "zrevrangebylex": true,
}

// ReadOnly reports whether Do's command name (lower case) changes no key.
func ReadOnly(name string) bool { return readOnly[name] }

// journal saves what the command of Do named name (lower case) may
// change: its keys, the destination of COPY … DB n, and the databases a
// flush empties.
func (v *View) journal(db int, name string, keys []string, args [][]byte) {
	j := v.Journal
	switch {
	case j == nil || readOnly[name]:
		return
	case name == "flushdb" || name == "flushall":
		if CheckFlush(args) != nil {
			return // refused: it changes nothing (and saveDB does)
		}
		for _, sp := range v.Spaces {
			for d := range sp.dbs {
				if name == "flushall" || d == db {
					j.saveDB(sp, d)
				}
			}
		}
		return
	case name == "copy" && len(args) > 2:
		for i := 3; i+1 < len(args); i++ {
			if strings.EqualFold(string(args[i]), "db") {
				if n, ok := parseDB(args[i+1]); ok {
					j.save(v.space(string(args[2])), n, string(args[2]))
				}
			}
		}
	}
	for _, k := range keys {
		j.save(v.space(k), db, k)
	}
}

// save keeps key's state in the Journal, if the View has one.
func (v *View) save(db int, keys ...string) {
	if v.Journal == nil {
		return
	}
	for _, k := range keys {
		v.Journal.save(v.space(k), db, k)
	}
}

// parseDB reads a database number in range.
func parseDB(b []byte) (int, bool) {
	n, ok := parseStrictInt(string(b))
	if !ok || n < 0 || n >= backend.Databases {
		return 0, false
	}
	return int(n), true
}
