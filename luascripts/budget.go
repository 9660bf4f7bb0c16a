package luascripts

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// The memory budget of a script (Config.MemoryLimit).
//
// gopher-lua counts no memory, and what grows fastest (`..`, which copies
// both operands, and a table's growth) is inside its VM, out of reach of
// a wrapper. So the budget is checked from the only hook the VM offers:
// it asks its context for the Done channel before every instruction. The
// context a script runs under (watch) answers from a field, and compares
// a global tick count with the one it saw last; a ticker goroutine moves
// the count every millisecond while scripts run. On a new tick the script
// reads the process's heap (runtime/metrics, ~200 ns); when the heap grew
// by the budget since the script started (or since its last check), a
// collection tells what of it is live, and a script whose growth of the
// live heap passes the budget (times the scripts running at once, whose
// growth it cannot tell apart) is stopped. Garbage alone (a script that
// builds and drops strings) costs a collection per budget allocated,
// never a stop.
//
// A sample a millisecond (and every few thousand instructions, for a
// machine so busy that the ticker waits) bounds what a script can build
// between two checks by what the process copies in a millisecond (~10
// MB); doubling
// a string (s = s .. s) is caught at the first tick after it passes the
// budget, at most twice the budget. The Go functions that build a string
// of a size known beforehand (string.rep, table.concat, redis.call's
// arguments and replies) check that size first and stop a script before
// allocating past the budget.

// tickEvery is the period of the ticks that make running scripts look at
// the heap.
const tickEvery = time.Millisecond

// idleTicks is how long the ticker runs on with no script started.
const idleTicks = 1000

var clock struct {
	tick    atomic.Uint64 // moved by the ticker every tickEvery
	on      atomic.Bool   // the ticker runs
	used    atomic.Bool   // a script started since the ticker last looked
	running atomic.Int64  // scripts that lasted past a tick and are not done
	freeing atomic.Bool   // a FreeOSMemory is under way
}

// startClock makes sure the ticker runs for a script about to start.
func startClock() {
	if !clock.used.Load() {
		clock.used.Store(true)
	}
	if !clock.on.Load() && clock.on.CompareAndSwap(false, true) {
		go ticker()
	}
}

// ticker moves clock.tick until no script started for idleTicks ticks.
func ticker() {
	idle := 0
	for {
		time.Sleep(tickEvery)
		clock.tick.Add(1)
		if clock.used.Swap(false) || clock.running.Load() > 0 {
			idle = 0
			continue
		}
		if idle++; idle < idleTicks {
			continue
		}
		clock.on.Store(false)
		// A script that started meanwhile saw the ticker on, and set used
		// before it looked: take the ticker back for it.
		if !clock.used.Load() || !clock.on.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}

// watch is the context a script's Lua state runs under: the run's
// context, whose Done channel it answers from a field, checking the
// script's memory on every new tick.
type watch struct {
	context.Context
	done <-chan struct{}
	seen uint64 // the tick of the last check
	n    uint32 // instructions run
	v    *vm
}

// watchRun makes v's watch the context of a run under ctx.
func (v *vm) watchRun(ctx context.Context) *watch {
	v.w = watch{Context: ctx, done: ctx.Done(), seen: clock.tick.Load(), v: v}
	return &v.w
}

// Done is called by the VM before each instruction.
func (w *watch) Done() <-chan struct{} {
	w.n++
	if t := clock.tick.Load(); t != w.seen || w.n%checkInstructions == 0 {
		w.seen = t
		w.v.checkMemory()
	}
	return w.done
}

// checkInstructions is how many instructions run between two checks at
// most, ticks or not: the ticker may wait for a CPU on a busy machine,
// and a loop building a table fills ~100 KB in that many.
const checkInstructions = 1 << 14

// errMemory is why a script over its memory budget was stopped.
var errMemory = errors.New("luascripts: script over its memory budget")

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// heapBytes is the heap's objects, live and not yet swept.
func heapBytes() uint64 {
	metrics.Read(heapSample)
	if heapSample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return heapSample[0].Value.Uint64()
}

// checkMemory is the check of one tick (the top of this file).
func (v *vm) checkMemory() {
	if v.budget <= 0 || v.stopped != nil {
		return
	}
	heap := heapBytes()
	if !v.watched {
		// The script lasted past a tick: from now on it counts.
		v.watched = true
		clock.running.Add(1)
		v.heapStart, v.heapNext = heap, heap+uint64(v.budget)
		return
	}
	if heap <= v.heapNext || v.w.Context != nil && v.w.Err() != nil {
		// Within its budget's step; or past its time limit (or its
		// client gone): it stops at its next instruction, and a collection
		// now (hundreds of milliseconds on a loaded machine, with a heap
		// of its budget's size) would only keep everyone waiting longer.
		return
	}
	runtime.GC()
	live := heapBytes() // swept: what the collection found live, and what came since
	grown := int64(0)
	if live > v.heapStart {
		grown = int64(live - v.heapStart)
	}
	allowed := v.budget * max(clock.running.Load(), 1)
	if grown > allowed {
		v.stop(errMemory)
		return
	}
	// Look again once the heap grew by what is left of the budget (a
	// quarter of it at least, so that garbage does not make a collection
	// at every tick).
	v.heapNext = live + uint64(max(v.budget/4, allowed-grown))
}

// charge checks a string or value of n bytes the script is about to build
// with Go code: larger than the whole budget, it stops the script (and
// raises, ending the Go function that asked).
func (v *vm) charge(n int64) {
	if v.budget <= 0 {
		return
	}
	if n > v.budget {
		v.stop(errMemory)
		v.L.RaiseError("%s", msgOutOfMemory)
	}
	if n >= v.budget/8 {
		// A large string: look at the heap now rather than at the next
		// tick, which a busy machine may delay.
		v.checkMemory()
		if v.stopped != nil {
			v.L.RaiseError("%s", msgOutOfMemory)
		}
	}
}

// msgOutOfMemory is the error a script's pcall sees when it is stopped
// for memory (it cannot go on: its next instruction fails again).
const msgOutOfMemory = "not enough memory"

// stop ends the run for why: the VM finds its context done at its next
// instruction, under pcall too.
func (v *vm) stop(why error) {
	if v.stopped == nil {
		v.stopped = why
	}
	v.cancel()
}

// endWatch ends a run's part in the memory checks.
func (v *vm) endWatch() {
	if v.watched {
		clock.running.Add(-1)
		v.watched = false
	}
}

// freeMemory gives the memory of a stopped script back to the
// system, in the background (a full collection: not on the caller's
// time, which may hold what other clients wait for).
func freeMemory() {
	if clock.freeing.CompareAndSwap(false, true) {
		go func() {
			defer clock.freeing.Store(false)
			debug.FreeOSMemory()
		}()
	}
}

// memoryText renders a memory limit for an error reply.
func memoryText(n int64) string {
	const mib = 1 << 20
	if n%mib == 0 {
		return fmt.Sprintf("%d MiB", n/mib)
	}
	return fmt.Sprintf("%d bytes", n)
}

// The string building functions whose result size is known before they
// build it, wrapped to charge it first.

// strRep is string.rep with its result charged.
func (v *vm) strRep(fn lua.LValue) *lua.LFunction {
	return v.L.NewFunction(func(L *lua.LState) int {
		s := L.CheckString(1)
		n := L.CheckInt(2)
		if n > 0 && len(s) > 0 {
			if int64(n) > (1<<62)/int64(len(s)) {
				v.charge(1 << 62)
			}
			v.charge(int64(len(s)) * int64(n))
		}
		L.Insert(fn, 1)
		L.Call(L.GetTop()-1, lua.MultRet)
		return L.GetTop()
	})
}

// tableConcat is table.concat with its result charged.
func (v *vm) tableConcat(fn lua.LValue) *lua.LFunction {
	return v.L.NewFunction(func(L *lua.LState) int {
		if t, ok := L.Get(1).(*lua.LTable); ok {
			sep := int64(len(L.OptString(2, "")))
			i, j := L.OptInt(3, 1), L.OptInt(4, t.Len())
			i, j = max(i, 1), min(j, t.Len())
			var n int64
			for k := i; k <= j; k++ {
				switch e := t.RawGetInt(k).(type) {
				case lua.LString:
					n += int64(len(e)) + sep
				case lua.LNumber:
					n += 24 + sep
				}
				if n > v.budget && v.budget > 0 {
					v.charge(n)
				}
			}
		}
		L.Insert(fn, 1)
		L.Call(L.GetTop()-1, lua.MultRet)
		return L.GetTop()
	})
}
