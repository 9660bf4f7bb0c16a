package proxy

import (
	"runtime"
	"testing"

	"github.com/lockproxy/lockproxy/backend"
)

// TestWriterWaitsForRunningServe: a write whose key a serve already runs
// for (a blocked client's own look, every blockPoll) returns only once
// that serve has gone round again for it, so the writer's next command
// sees the clients it woke served (Redis serves them before the next
// command). Before, the writer returned at once and its LLEN could see
// an element a blocked client was about to take.
func TestWriterWaitsForRunningServe(t *testing.T) {
	var bs blockers
	bk := blockKey{0, "k"}
	keys := [][]byte{[]byte("k")}
	started, release := make(chan struct{}), make(chan struct{})
	first, _ := bs.block(&client{id: 1}, keys, func(bool) (backend.Value, bool) {
		close(started)
		<-release
		return backend.Bulk([]byte("a")), true
	})
	// The second has something to take only once the write has come.
	written := false
	second, _ := bs.block(&client{id: 2}, keys, func(bool) (backend.Value, bool) {
		if !written {
			return backend.Value{}, false
		}
		return backend.Bulk([]byte("b")), true
	})
	go bs.serveKey(bk, false) // the look, held inside the first's try
	<-started

	written = true
	served := make(chan int32, 1)
	go func() {
		bs.serveKey(bk, true) // the write's
		served <- second.state.Load()
	}()
	for !again(&bs, bk) {
		runtime.Gosched()
	}
	close(release)
	if got := <-served; got != blockDone {
		t.Fatalf("the write returned with the second client in state %d, not served", got)
	}
	if first.state.Load() != blockDone || string(second.v.Str) != "b" {
		t.Fatalf("first state %d, second took %q", first.state.Load(), second.v.Str)
	}
}

// again reports whether the serve running for bk was asked to go round
// again.
func again(bs *blockers, bk blockKey) bool {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	run := bs.serving[bk]
	return run != nil && run.again
}
