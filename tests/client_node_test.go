package tests

import (
	"os"
	"os/exec"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestNodeClients drives node redlock 4.2.0 and 5.0.0-beta.2 and
// redis-semaphore's Mutex, each on ioredis 5 and 6, through tests/node/run.js.
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
		for _, lib := range []string{"redlock4", "redlock5", "semaphore"} {
			for _, io := range []string{"ioredis5", "ioredis6"} {
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
