package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
)

// TestShutdownWithIdleTimeout: the per-read idle deadline never outlives
// a drain's wake-up, so Shutdown closes clients at once even with an
// hour's idle timeout: an idle one, and one whose command was running when
// the drain began (its next read sets the idle deadline after the wake-up).
func TestShutdownWithIdleTimeout(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	b := &hookBackend{Backend: memory.New(memory.Config{}), hook: func(ctx context.Context, key string) error {
		if key == "slow" {
			close(entered)
			<-release
		}
		return nil
	}}
	s := start(t, proxy.Config{IdleTimeout: time.Hour}, b)
	idle, busy := dial(t, s.addr), dial(t, s.addr)
	idle.send("PING\r\n")
	if got := idle.line(t); got != "+PONG\r\n" {
		t.Fatalf("PING = %q", got)
	}
	busy.send("GET slow\r\n")
	<-entered
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- s.srv.Shutdown(ctx)
	}()
	if !idle.closed() {
		t.Error("the idle client was not closed by the drain")
	}
	close(release)
	if got := busy.line(t); got != "$-1\r\n" {
		t.Errorf("the running GET's reply = %q; want $-1", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown with IdleTimeout 1h = %v; want nil (both clients closed by the drain)", err)
	}
}
