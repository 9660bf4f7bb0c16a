package tests

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestSymfonyLock drives Symfony Lock 5.4's RedisStore (Debian
// php-symfony-lock) on phpredis and predis through tests/php/run.php:
// exclusive and shared locks, a forked 8-worker counter and a forked
// reader/writer holder table, on every target.
func TestSymfonyLock(t *testing.T) {
	t.Parallel()
	php := testsrv.Need(t, "php")
	deps := "exit(is_file('/usr/share/php/Symfony/Component/Lock/Store/RedisStore.php') && " +
		"is_file('/usr/share/php/Predis/autoload.php') && extension_loaded('redis') && function_exists('pcntl_fork') ? 0 : 1);"
	if err := exec.Command(php, "-r", deps).Run(); err != nil {
		testsrv.Need(t, "php-symfony-lock, php-redis and php-predis (apt-get install them)")
	}
	clientTargets(t, func(t *testing.T, addr string) {
		for _, client := range []string{"phpredis", "predis"} {
			t.Run(client, func(t *testing.T) {
				t.Parallel() // each client has keys of its own
				out, err := exec.CommandContext(t.Context(), php, "php/run.php", addr, client).CombinedOutput()
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				if !strings.Contains(string(out), "OK symfony/lock") {
					t.Fatalf("run.php ended without its OK line:\n%s", out)
				}
				t.Logf("%s", out)
			})
		}
	})
}
