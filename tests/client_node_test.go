package tests

import (
	"os"
	"os/exec"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestNodeClients drives node redlock 4.2.0 and 5.0.0-beta.2 and
// redis-semaphore 5.8.0's Mutex, Semaphore (semaphore-n) and
// MultiSemaphore, each on ioredis 5 and 6, simple-redis-mutex 3.0.0 on
// node-redis 5 and node-redisson 1.0.4 (both woken by pub/sub; their
// release-to-grant times are logged, with a polling library's beside
// them), through tests/node/run.js, with the same checks on every target.
func TestNodeClients(t *testing.T) {
	t.Parallel()
	node := testsrv.Need(t, "node")
	needNodeModules(t)
	clientTargets(t, func(t *testing.T, addr string) {
		for _, lib := range []string{"redlock4", "redlock5", "semaphore", "semaphore-n", "multisemaphore", "simple-redis-mutex", "node-redisson", "polling"} {
			ios := []string{"ioredis5", "ioredis6"}
			switch lib {
			case "simple-redis-mutex":
				ios = []string{"node-redis"} // it takes a node-redis client
			case "node-redisson":
				ios = []string{"ioredis"} // it requires ioredis itself (5)
			case "polling":
				ios = []string{"ioredis5"} // a figure, not a client check
			}
			for _, io := range ios {
				t.Run(lib+"/"+io, func(t *testing.T) {
					t.Parallel() // each combination has keys of its own; redlock5 mostly waits in using()
					out, err := exec.CommandContext(t.Context(), node, "node/run.js", addr, lib, io).CombinedOutput()
					if err != nil {
						t.Fatalf("%v\n%s", err, out)
					}
					t.Logf("%s", out)
				})
			}
		}
	})
}

// needNodeModules skips a test of the node libraries where tests/node's
// modules are not installed, and fails it in CI.
func needNodeModules(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("node/node_modules/node-redisson"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tests/node/node_modules is missing: run npm ci in tests/node (./test.sh does)")
		}
		t.Skip("tests/node/node_modules is missing: run npm ci in tests/node (./test.sh does)")
	}
}

// TestNodeFence runs docs/fencing.md's Node example (ioredis) on every
// backend.
func TestNodeFence(t *testing.T) {
	t.Parallel()
	node := testsrv.Need(t, "node")
	needNodeModules(t)
	lockproxyTargets(t, func(t *testing.T, _, addr string) {
		out, err := exec.CommandContext(t.Context(), node, "node/run.js", addr, "fence", "ioredis5").CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("%s", out)
	})
}
