package tests

import (
	"os/exec"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// clientPython runs a python script from tests/python with Debian's
// python3 (which has python3-redis) against addr.
func clientPython(t *testing.T, script, addr string, args ...string) {
	t.Helper()
	py := testsrv.Need(t, "/usr/bin/python3")
	if err := exec.Command(py, "-c", "import redis").Run(); err != nil {
		testsrv.Need(t, "python3-redis (apt-get install python3-redis)")
	}
	out, err := exec.CommandContext(t.Context(), py, append([]string{"python/" + script, addr}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s against %s: %v\n%s", script, addr, err, out)
	}
	t.Logf("%s", out)
}

func TestRedisPyLock(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) { clientPython(t, "redis_py_lock.py", testsrv.StartRedis(t).Addr) })
	t.Run("lockproxy", func(t *testing.T) { clientPython(t, "redis_py_lock.py", testsrv.StartMemoryProxy(t)) })
	t.Run("migrating", func(t *testing.T) {
		addr, _, _ := testsrv.StartMigratingProxy(t, "memory", memory.New(memory.Config{}))
		clientPython(t, "redis_py_lock.py", addr)
	})
	t.Run("quorum3", func(t *testing.T) {
		addr, _ := testsrv.StartQuorumProxy(t, 3)
		clientPython(t, "redis_py_lock.py", addr)
	})
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run("pg-"+strategy, func(t *testing.T) {
			addr, _ := testsrv.StartPostgresProxy(t, strategy)
			clientPython(t, "redis_py_lock.py", addr)
		})
	}
}

// TestRedisPyFence runs docs/fencing.md's Python example on every backend
// (quorum takes a new fence at each read: quorum/fencing.go).
func TestRedisPyFence(t *testing.T) {
	t.Parallel()
	lockproxyTargets(t, func(t *testing.T, name, addr string) {
		if name == "quorum3" {
			clientPython(t, "redis_py_fence.py", addr)
			return
		}
		clientPython(t, "redis_py_fence.py", addr, "keep")
	})
}
