package quorum_test

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// hubRecord is a Hub that records what is delivered to it.
type hubRecord struct {
	mu  sync.Mutex
	got []string
}

func (h *hubRecord) Receivers([]byte) int64 { return 0 }

func (h *hubRecord) Rewake() {}

func (h *hubRecord) Deliver(channel, msg []byte) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, string(channel)+"="+string(msg))
	return 1
}

// take returns what was delivered since the last take.
func (h *hubRecord) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := h.got
	h.got = nil
	return got
}

// TestScriptPublish: a script that publishes answers what Redis answers
// (PUBLISH itself 0, errors naming the client's script), its messages are
// delivered once, in order, after the vote decided it, and only then: none
// for a script that was not decided or that failed, and none reach the
// nodes' own subscribers.
func TestScriptPublish(t *testing.T) {
	nodes := startNodes(t, 3)
	ref := redis.NewClient(&redis.Options{Addr: testsrv.StartRedis(t).Addr})
	defer ref.Close()
	b := newBackend(t, addrsOf(nodes))
	hub := &hubRecord{}
	b.SetHub(hub)
	ctx := t.Context()

	direct := redis.NewClient(&redis.Options{Addr: nodes[0].Addr})
	defer direct.Close()
	onNode := direct.PSubscribe(ctx, "*")
	defer onNode.Close()
	if _, err := onNode.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	release := "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) " +
		"redis.call('publish', KEYS[2], ARGV[2]) return 1 end return 0"
	for _, tc := range []struct {
		name, src string
		keys      []string
		args      []string
		before    func()
		want      backend.Value
		wantErr   bool // the error is compared with the reference Redis's
		line1     bool // … which names the call's line, where a command named at run time names 1 (scriptpub.go)
		msgs      []string
	}{
		{name: "release", src: release, keys: []string{"k", "ch"}, args: []string{"tok", "free"},
			before: func() { b.Set(ctx, 0, "k", []byte("tok"), acq(time.Minute)) },
			want:   backend.Int(1), msgs: []string{"ch=free"}},
		{name: "not the holder", src: release, keys: []string{"k", "ch"}, args: []string{"tok", "free"},
			before: func() { b.Set(ctx, 0, "k", []byte("other"), acq(time.Minute)) },
			want:   backend.Int(0)},
		{name: "two messages, in order, the reply nil", keys: []string{"k", "ch"},
			src:  "redis.call('publish', KEYS[2], 'a') redis.pcall('PUBLISH', KEYS[2], 2.5) return nil",
			want: backend.Value{Kind: backend.KindNil}, msgs: []string{"ch=a", "ch=2.5"}},
		{name: "publish answers 0", keys: []string{"k", "ch"},
			src:  "return {redis.call('publish', KEYS[2], 'x'), false, 'after'}",
			want: backend.Array(backend.Int(0), backend.Value{Kind: backend.KindNil}, backend.BulkString("after")), msgs: []string{"ch=x"}},
		{name: "named at run time", keys: []string{"k", "ch"}, args: []string{"Publish", "m"},
			src:  "return redis.call(ARGV[1], KEYS[2], ARGV[2])",
			want: backend.Int(0), msgs: []string{"ch=m"}},
		{name: "wrong arity", keys: []string{"k"},
			src: "return redis.pcall('publish', 'ch')", wantErr: true},
		{name: "an error after publishing", keys: []string{"k", "ch"},
			src: "redis.call('publish', KEYS[2], 'lost')\nlocal x\nreturn error('boom')", wantErr: true},
		{name: "a command's error", keys: []string{"k", "ch"},
			src: "redis.call('publish', KEYS[2], 'lost')\nreturn redis.call('nosuchcommand')", wantErr: true},
		{name: "the error of a command named at run time", keys: []string{"k", "ch"}, args: []string{"nosuchcommand"},
			src: "redis.call('publish', KEYS[2], 'lost')\nreturn redis.call(ARGV[1])", wantErr: true},
		{name: "calls over lines, in comments and strings", keys: []string{"k", "ch"}, args: []string{"publish"},
			src:  "--[[ redis.call('publish', 'no', 'no') ]] local s = \"redis.call(ARGV[1])\"\nlocal f = redis\n.\npcall\nf(ARGV[1], KEYS[2], 'a')\nreturn {redis . call ( 'PUBLISH', KEYS[2], 'b' ), s}",
			want: backend.Array(backend.Int(0), backend.BulkString("redis.call(ARGV[1])")), msgs: []string{"ch=a", "ch=b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				b.Del(ctx, 0, []string{"k"})
				tc.before()
			}
			args := make([][]byte, len(tc.args))
			for i, a := range tc.args {
				args[i] = []byte(a)
			}
			v, err := b.Eval(ctx, 0, script(tc.src), tc.keys, args, false)
			if tc.wantErr {
				refArgs := []any{"EVAL", tc.src, len(tc.keys)}
				for _, k := range tc.keys {
					refArgs = append(refArgs, k)
				}
				for _, a := range tc.args {
					refArgs = append(refArgs, a)
				}
				_, want := ref.Do(ctx, refArgs...).Result()
				if want == nil {
					t.Fatal("no error from Redis")
				}
				wantText := want.Error()
				if tc.line1 {
					wantText = regexp.MustCompile(`@user_script:\d+\.$`).ReplaceAllString(wantText, "@user_script:1.")
				}
				var re *backend.ReplyError
				if !errors.As(err, &re) || re.Reply != wantText {
					t.Fatalf("error %v; want %s", err, wantText)
				}
			} else if err != nil || !sameVal(v, tc.want) {
				t.Fatalf("reply %v, %v; want %v", v, err, tc.want)
			}
			if got := hub.take(); !slices.Equal(got, tc.msgs) {
				t.Fatalf("delivered %q; want %q", got, tc.msgs)
			}
		})
	}

	// Nodes that agree on the reply may differ in what they did:
	// simple-redis-mutex's release answers nil whether or not it found its
	// token. Here the holder's key is on nodes 1 and 2 only (node 0 missed
	// the acquire) and node 2 is paused, so nodes 0 and 1 decide: node 0
	// found nothing, node 1 released, and its message is the one that
	// goes out.
	nilRelease := "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) " +
		"redis.call('publish', KEYS[2], ARGV[2]) end"
	b.Del(ctx, 0, []string{"k"})
	one := redis.NewClient(&redis.Options{Addr: nodes[1].Addr})
	defer one.Close()
	if err := one.Set(ctx, "k", "tok", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	nodes[2].Stop()
	v, err := b.Eval(ctx, 0, script(nilRelease), []string{"k", "ch"}, [][]byte{[]byte("tok"), []byte("free")}, false)
	nodes[2].Cont()
	if err != nil || v.Kind != backend.KindNil {
		t.Fatalf("release that answers nil = %v, %v", v, err)
	}
	if got := hub.take(); !slices.Equal(got, []string{"ch=free"}) {
		t.Fatalf("delivered %q; want the message of the node that released", got)
	}

	// Not decided: with two nodes of three paused the release is a
	// TRYAGAIN, and nothing is delivered, then or when they come back.
	b.Set(ctx, 0, "k", []byte("tok"), acq(time.Minute))
	nodes[1].Stop()
	nodes[2].Stop()
	_, err = b.Eval(ctx, 0, script(release), []string{"k", "ch"}, [][]byte{[]byte("tok"), []byte("free")}, false)
	nodes[1].Cont()
	nodes[2].Cont()
	if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("release with two of three nodes paused: %v; want TRYAGAIN", err)
	}
	time.Sleep(300 * time.Millisecond) // the paused nodes' late replies
	if got := hub.take(); len(got) != 0 {
		t.Fatalf("an undecided release delivered %q", got)
	}
	// With one node down, the majority decides, and the message comes once.
	nodes[2].Kill()
	b.Del(ctx, 0, []string{"k"})
	b.Set(ctx, 0, "k", []byte("tok"), acq(time.Minute))
	if v, err := b.Eval(ctx, 0, script(release), []string{"k", "ch"}, [][]byte{[]byte("tok"), []byte("free")}, false); err != nil || v.Int != 1 {
		t.Fatalf("release with a node down = %v, %v", v, err)
	}
	if got := hub.take(); !slices.Equal(got, []string{"ch=free"}) {
		t.Fatalf("delivered %q; want the release's message once", got)
	}
	// The nodes' own subscribers heard none of it (only the instances' bus).
	for {
		m, err := onNode.ReceiveTimeout(ctx, 100*time.Millisecond)
		if err != nil {
			break
		}
		if msg, ok := m.(*redis.Message); ok && msg.Channel != "lockproxy:pubsub" {
			t.Fatalf("a node's own subscriber heard %q on %q", msg.Payload, msg.Channel)
		}
	}
}

// sameVal compares two replies (the kind and, for an error, no text).
func sameVal(a, b backend.Value) bool {
	if a.Kind != b.Kind || a.Int != b.Int || len(a.Elems) != len(b.Elems) {
		return false
	}
	if a.Kind != backend.KindError && string(a.Str) != string(b.Str) {
		return false
	}
	for i := range a.Elems {
		if !sameVal(a.Elems[i], b.Elems[i]) {
			return false
		}
	}
	return true
}
