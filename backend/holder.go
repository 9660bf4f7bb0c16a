package backend

import (
	"context"
	"sync/atomic"
)

// Holder is who a lock was granted to and where (docs/operations.md, "Who
// holds what"): the client's address, its CLIENT SETNAME name and ACL
// user, and the lockproxy instance that granted it, as they were at the
// grant. A Holder is never changed once made, so a backend keeps a
// pointer to it beside each grant (one per connection state, shared by
// all its grants). An empty field is unknown.
type Holder struct {
	Addr     string
	Name     string
	User     string
	Instance string
}

// HolderSlot is a connection's current Holder: the front end stores a new
// one when the connection's name or user changes, and a backend loads it
// at a grant. It is safe for concurrent use.
type HolderSlot struct{ p atomic.Pointer[Holder] }

// Store makes h the slot's current Holder.
func (s *HolderSlot) Store(h *Holder) { s.p.Store(h) }

// Load returns the slot's current Holder; nil for a nil slot or none.
func (s *HolderSlot) Load() *Holder {
	if s == nil {
		return nil
	}
	return s.p.Load()
}

type holderKey struct{}

// WithHolder returns ctx carrying slot: the front end derives each
// connection's context from it once, so that every command's context,
// and a script's run, carries it at no cost per command.
func WithHolder(ctx context.Context, slot *HolderSlot) context.Context {
	return context.WithValue(ctx, holderKey{}, slot)
}

// HolderOf returns the Holder ctx carries (WithHolder), nil when none: a
// grant made for no client (a routed operation's, a test's).
func HolderOf(ctx context.Context) *Holder {
	s, _ := ctx.Value(holderKey{}).(*HolderSlot)
	return s.Load()
}

// Grant is what a backend knows of a lock's grant besides its token,
// fence and TTL: when it was made (Unix ms, 0 unknown) and for whom (nil
// unknown: a grant by another instance or from before this process, which
// the backend could not learn).
type Grant struct {
	At     int64
	Holder *Holder
}
