package quorum_test

import (
	"math"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
)

// TestNaNDoubleReply: Redis 7 sends a script's {double=0/0} to a RESP3
// connection as ",-nan", which Go's ParseFloat refuses. It is a reply
// like any other: the majority agrees on it, and the node connections
// serve on.
func TestNaNDoubleReply(t *testing.T) {
	nodes := startNodes(t, 3)
	b := newBackend(t, addrsOf(nodes))
	ctx := t.Context()
	v, err := b.Eval(ctx, 0, script(`return {double=0/0}`), nil, nil, false)
	if err != nil || v.Kind != backend.KindDouble || !math.IsNaN(v.Float) {
		t.Fatalf("{double=0/0} = %v, %v; want a NaN double", v, err)
	}
	if res, err := b.Set(ctx, 0, "after", []byte("tok"), acq(time.Minute)); err != nil || !res.Written {
		t.Fatalf("acquire after the NaN reply = %v, %v; want OK", res, err)
	}
}
