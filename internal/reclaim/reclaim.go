// Package reclaim gives memory back to the operating system soon after a
// large free: a big value deleted or overwritten, a flush, a big request
// or reply, a stopped script. Go's runtime returns freed memory only after
// a garbage collection has found it free and its scavenger has released
// it, which after a single large free can take minutes (the next
// collection may not come before the periodic one); meanwhile the process
// keeps its peak resident size, as if the memory were still in use.
//
// A Reclaimer is told of large frees (Freed) and answers them with one
// debug.FreeOSMemory (a collection, then every free page released) on a
// goroutine of its own, after a short pause that lets a burst of frees
// come together, and at most once per interval, so that its cost (one
// collection) stays bounded however often frees come. A nil *Reclaimer
// ignores every call, for callers that run without one.
package reclaim

import (
	"runtime/debug"
	"sync"
	"time"
)

// Large is the size from which a free is worth giving back: a value of a
// MiB or more.
const Large = 1 << 20

// Reclaimer gives memory back after large frees. It is safe for
// concurrent use; its goroutine runs from New until Close.
type Reclaimer struct {
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	pause    time.Duration
	interval time.Duration
	free     func()
}

// New starts a Reclaimer that waits pause after a large free before it
// gives memory back, and gives it back at most once per interval.
func New(pause, interval time.Duration) *Reclaimer {
	return start(pause, interval, debug.FreeOSMemory)
}

func start(pause, interval time.Duration, free func()) *Reclaimer {
	r := &Reclaimer{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		pause: pause, interval: interval, free: free}
	go r.run()
	return r
}

// Freed tells r that n bytes were freed; n below Large is ignored.
func (r *Reclaimer) Freed(n int) {
	if r == nil || n < Large {
		return
	}
	select {
	case r.kick <- struct{}{}:
	default: // one is already due
	}
}

// Close stops r's goroutine and waits for it.
func (r *Reclaimer) Close() {
	if r == nil {
		return
	}
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

func (r *Reclaimer) run() {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
		}
		if !r.wait(r.pause) {
			return
		}
		r.free()
		if !r.wait(r.interval) {
			return
		}
	}
}

// wait waits d, or until Close: false then.
func (r *Reclaimer) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stop:
		return false
	}
}
