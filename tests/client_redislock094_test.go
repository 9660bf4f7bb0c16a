package tests

import (
	"os"
	"os/exec"
	"testing"
)

// TestRedislock094 runs the nested module tests/redislock094, which drives
// bsm/redislock v0.9.4 (same module path as v0.10.0, hence its own go.mod).
func TestRedislock094(t *testing.T) {
	t.Parallel()
	clientTargets(t, func(t *testing.T, addr string) {
		cmd := exec.CommandContext(t.Context(), "go", "test", "-count=1", "./...")
		cmd.Dir = "redislock094"
		cmd.Env = append(os.Environ(), "LOCKPROXY_ADDR="+addr)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go test in tests/redislock094: %v\n%s", err, out)
		}
	})
}
