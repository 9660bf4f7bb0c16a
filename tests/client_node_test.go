package tests

import (
	"os"
	"os/exec"
	"path"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestNodeClients drives node redlock 4.2.0 and 5.0.0-beta.2 and
// redis-semaphore 5.8.0's Mutex, Semaphore (semaphore-n) and
// MultiSemaphore, each on ioredis 5 and 6, and simple-redis-mutex 3.0.0
// on node-redis 5 (woken by pub/sub), through tests/node/run.js. The
// target's name goes to run.js: where a target serves string values only
// (a migrating proxy, for now), the semaphores' sorted-set scripts must be refused
// with lockproxy's error, and leave nothing behind.
func TestNodeClients(t *testing.T) {
	t.Parallel()
	node := testsrv.Need(t, "node")
	if _, err := os.Stat("node/node_modules/redlock5"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tests/node/node_modules is missing: run npm ci in tests/node (./test.sh does)")
		}
		t.Skip("tests/node/node_modules is missing: run npm ci in tests/node (./test.sh does)")
	}
	clientTargets(t, func(t *testing.T, addr string) {
		target := path.Base(t.Name())
		for _, lib := range []string{"redlock4", "redlock5", "semaphore", "semaphore-n", "multisemaphore", "simple-redis-mutex"} {
			ios := []string{"ioredis5", "ioredis6"}
			if lib == "simple-redis-mutex" {
				ios = []string{"node-redis"} // it takes a node-redis client
			}
			for _, io := range ios {
				t.Run(lib+"/"+io, func(t *testing.T) {
					t.Parallel() // each combination has keys of its own; redlock5 mostly waits in using()
					out, err := exec.CommandContext(t.Context(), node, "node/run.js", addr, lib, io, target).CombinedOutput()
					if err != nil {
						t.Fatalf("%v\n%s", err, out)
					}
					t.Logf("%s", out)
				})
			}
		}
	})
}
