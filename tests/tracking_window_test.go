package tests

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
)

// heldEval is a memory backend whose scripts with ARGV[1] "hold" wait,
// once run, until the test lets their reply go: the window between a
// script's read and the proxy's tracking of its keys.
type heldEval struct {
	*memory.Backend
	ran, release chan struct{}
}

func (h heldEval) Eval(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	v, err := h.Backend.Eval(ctx, db, s, keys, args, ro)
	if len(args) > 0 && string(args[0]) == "hold" {
		h.ran <- struct{}{}
		<-h.release
	}
	return v, err
}

// TestTrackingScriptWindow: a key a tracking client's script reads is
// tracked from before the script runs, so that a write landing after the
// script's read and before its reply still reaches the client as an
// invalidation. rueidislock's waiter reads the holder's key in its
// acquire script and then waits for that invalidation alone: missed, it
// waited for ever.
func TestTrackingScriptWindow(t *testing.T) {
	t.Parallel()
	b := heldEval{Backend: memory.New(memory.Config{}), ran: make(chan struct{}), release: make(chan struct{})}
	addr := testsrv.StartLockproxy(t, proxy.Config{DataPath: proxy.DataPathGoroutines}, b)
	waiter, holder := dialRESP(t, addr), dialRESP(t, addr)
	for _, cmd := range [][]string{{"HELLO", "3"}, {"CLIENT", "TRACKING", "ON"}} {
		if _, err := waiter.do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	holder.do("SET", "win:k", "holder")
	acquire := `local r = redis.call('set', KEYS[1], 'waiter', 'NX') redis.call('get', KEYS[1]) return r`
	go waiter.c.Write(encodeCommand([]string{"EVAL", acquire, "1", "win:k", "hold"}))
	<-b.ran // the script found the key held
	if r, err := holder.do("DEL", "win:k"); err != nil || r != ":1\r\n" {
		t.Fatalf("DEL = %q, %v", r, err)
	}
	close(b.release)
	// The script's reply (nil: held) and the key's invalidation, in either
	// order: the push may come while the script is still out.
	want := map[string]bool{"_\r\n": true, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$5\r\nwin:k\r\n": true}
	waiter.c.SetDeadline(time.Now().Add(3 * time.Second))
	for len(want) > 0 {
		got, err := waiter.reply()
		if err != nil || !want[got] {
			t.Fatalf("the waiter read %q, %v; still waiting for %v", got, err, want)
		}
		delete(want, got)
	}
}
