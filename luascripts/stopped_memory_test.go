package luascripts

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestTimeLimitGivesMemoryBack: a script stopped by the time limit while
// it holds a large heap (under its budget) gives that memory back within
// seconds, as one stopped for memory does (issue 40: a killed script's
// memory comes back). Dropped with the Lua state, it is garbage the
// runtime would keep until its next collection, which an idle process
// may not reach for minutes. Not parallel: another test's allocations
// would collect it anyway.
func TestTimeLimitGivesMemoryBack(t *testing.T) {
	r := New(Config{TimeLimit: 200 * time.Millisecond})
	runtime.GC()
	base := heapBytes()
	_, err := run(t, r, "local s = string.rep('x', 48 * 2^20) while true do end", nil)
	if err == nil || !strings.Contains(err.Error(), "ran longer than the script time limit") {
		t.Fatalf("got %v; want the time limit's error", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		heap := heapBytes()
		if heap < base+16<<20 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("heap %d MiB 5 s after the script was stopped; %d MiB before it", heap>>20, base>>20)
		}
		time.Sleep(20 * time.Millisecond) // polls the runtime's state, with a deadline
	}
}
