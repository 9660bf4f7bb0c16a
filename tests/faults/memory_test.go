package faults

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestMemoryBaseline: the memory backend under plain contention, no fault:
// the baseline row of the table.
func TestMemoryBaseline(t *testing.T) {
	addr := testsrv.StartMemoryProxy(t)
	runNemesis(t, nemesis{Name: "none (baseline)", Backend: "memory", Client: "fenced", Addrs: []string{addr}}, nil)
}
