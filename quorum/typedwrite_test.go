package quorum_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
)

// TestTypedWriteLostIsUndone: a typed write sent alone that lost the vote
// is put back on the nodes that ran it, as a script's is: a ZADD that two
// nodes refuse (the key is a string there) leaves the third node's
// sorted set as it was, and the client gets the majority's error.
func TestTypedWriteLostIsUndone(t *testing.T) {
	nodes := startNodes(t, 3)
	ctx := t.Context()
	direct := directClients(t, nodes)
	direct[0].Set(ctx, "z", "a string", 0)
	direct[1].Set(ctx, "z", "a string", 0)
	direct[2].ZAdd(ctx, "z", redis.Z{Score: 1, Member: "old"})
	b := newBackend(t, addrsOf(nodes))
	_, err := b.Do(ctx, 0, []string{"z"}, bytesOf([]string{"ZADD", "z", "2", "new"}))
	if err == nil || err.Error() != "WRONGTYPE Operation against a key holding the wrong kind of value" {
		t.Fatalf("ZADD = %v; want the majority's WRONGTYPE", err)
	}
	// Put back once its reply came: at once, or just after the answer
	// when the majority answered first (a late reply).
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, _ := direct[2].ZRangeWithScores(ctx, "z", 0, -1).Result()
		if len(got) == 1 && got[0].Member == "old" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the third node's sorted set is %v; want it as it was ([old])", got)
		}
	}
	// A write the majority took answers as the command does, RESP3 kinds
	// kept: ZINCRBY's double, HINCRBY's int64.
	direct[0].Del(ctx, "z")
	direct[1].Del(ctx, "z")
	direct[2].Del(ctx, "z")
	if v, err := b.Do(ctx, 0, []string{"z"}, bytesOf([]string{"ZINCRBY", "z", "1.5", "m"})); err != nil || v.Kind != backend.KindDouble || v.Float != 1.5 {
		t.Fatalf("ZINCRBY = %+v, %v; want the double 1.5", v, err)
	}
	if v, err := b.Do(ctx, 0, []string{"h"}, bytesOf([]string{"HINCRBY", "h", "f", "9223372036854775807"})); err != nil || v.Kind != backend.KindInt || v.Int != 9223372036854775807 {
		t.Fatalf("HINCRBY = %+v, %v; want 9223372036854775807", v, err)
	}
}
