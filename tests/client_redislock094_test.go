package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestRedislock094 builds the nested module tests/redislock094 (bsm/redislock
// v0.9.4 shares its module path with v0.10.0, hence its own go.mod) into a
// test binary once and runs it against each target with LOCKPROXY_ADDR set.
func TestRedislock094(t *testing.T) {
	t.Parallel()
	goTool := testsrv.Need(t, "go")
	bin := filepath.Join(t.TempDir(), "redislock094.test")
	build := exec.CommandContext(t.Context(), goTool, "test", "-c", "-o", bin, ".")
	build.Dir = "redislock094"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c in tests/redislock094: %v\n%s", err, out)
	}
	clientTargets(t, func(t *testing.T, addr string) {
		cmd := exec.CommandContext(t.Context(), bin, "-test.count=1")
		cmd.Dir = "redislock094"
		cmd.Env = append(os.Environ(), "LOCKPROXY_ADDR="+addr)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tests/redislock094 against %s: %v\n%s", addr, err, out)
		}
		t.Logf("%s", out)
	})
}
