package migrate

import (
	"context"
	"slices"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// sandbox is a key space that starts empty and lives for one script run:
// running a script on it tells which keys the script names and what it
// creates from nothing (an acquire creates its lock key, its hash field or
// its sorted-set member from an empty key space; a release, an extend or
// a reacquire creates none). It is the lock model (backend/model) at a
// stopped clock, so every command a backend serves runs there with
// Redis's rules, and a TTL never elapses during the run. Not safe for
// concurrent use (one script run at a time).
type sandbox struct {
	model.View
	db      int // the script's database: only its keys are watched
	space   model.Space
	touched []string // keys of db the script named, first use first
}

func newSandbox(db int) *sandbox {
	s := &sandbox{db: db}
	s.Now = time.Now().UnixMilli()
	s.Spaces = []*model.Space{&s.space}
	s.Admit = func(db int, key string) error {
		if db == s.db {
			s.name(key)
		}
		return nil
	}
	return s
}

// name records key of the script's database as touched.
func (s *sandbox) name(key string) {
	if !slices.Contains(s.touched, key) {
		s.touched = append(s.touched, key)
	}
}

// The kinds of element a script can create (element.kind).
const (
	elemString = 's' // a string key holding a token (name is empty)
	elemField  = 'h' // a hash's field
	elemMember = 'z' // a sorted set's member
	elemSetMem = 'S' // a set's member
)

// element is one thing a script creates from nothing: a string key with
// its token, or a hash field, sorted-set member or set member. A side
// holds it when the string holds that token, or when the field or member
// is there, whatever its value: a reentrant lock's HINCRBY changes the
// value, and a semaphore's score is a time. Field and member names are
// what lock libraries make per client (Redisson's client id and thread,
// a semaphore's identifier), as tokens are.
type element struct {
	key  string
	kind byte
	name string // the field or member
	tok  string // the string's token
}

// created lists what the run left in the script's database, key by key
// in the order the script named them: the elements it creates from an
// empty key space. A list is not one: lock libraries push to lists to
// signal, not to hold.
func (s *sandbox) created(ctx context.Context) []element {
	var out []element
	for _, k := range s.touched {
		e, o, ok := s.space.Lookup(s.db, k, s.Now)
		switch {
		case !ok:
		case o == nil:
			out = append(out, element{key: k, kind: elemString, tok: string(e.Token)})
		case o.Type() == "hash":
			fields, _ := o.(*model.Hash).Fields()
			for _, f := range fields {
				out = append(out, element{key: k, kind: elemField, name: f})
			}
		case o.Type() == "set":
			for _, m := range o.(*model.Set).Members() {
				out = append(out, element{key: k, kind: elemSetMem, name: m})
			}
		case o.Type() == "zset":
			v, err := s.Do(ctx, s.db, []string{k}, [][]byte{[]byte("zrange"), []byte(k), []byte("0"), []byte("-1")})
			if err != nil {
				continue
			}
			for _, m := range v.Elems {
				out = append(out, element{key: k, kind: elemMember, name: string(m.Str)})
			}
		}
	}
	return out
}

var _ backend.KeySpace = (*sandbox)(nil)
