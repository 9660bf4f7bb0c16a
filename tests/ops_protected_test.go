package tests

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// TestOpsProtectedMode runs the real binary listening on 0.0.0.0: without
// a password it refuses to start (exit 2, the key, the problem and the
// fix), for the RESP port and for the admin port (which lists tokens and
// force-releases); with requirepass, or protected-mode off, it serves, and redis-cli
// sees Redis's NOAUTH until it authenticates. The Dockerfile's own
// environment (LOCKPROXY_LISTEN=0.0.0.0:…) is tried as the container runs it.
func TestOpsProtectedMode(t *testing.T) {
	t.Parallel()
	cli := testsrv.Need(t, "redis-cli")
	bin := testsrv.BuildLockproxy(t)
	anyAddr := func() (string, string) {
		p := strconv.Itoa(testsrv.FreePort(t))
		return "0.0.0.0:" + p, p
	}
	const refusal = "reaches beyond loopback and clients need no password (set requirepass, users or tls-ca-cert-file, or protected-mode: no to serve without authentication, or listen on 127.0.0.1)"

	t.Run("refused by flag", func(t *testing.T) {
		addr, _ := anyAddr()
		out, code := testsrv.RunLockproxy(t, bin, "--listen", addr, "--admin-listen", "")
		if want := "protected-mode: listen " + addr + " " + refusal; code != 2 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output %q; want exit 2 and %q", code, out, want)
		}
	})
	t.Run("refused as the Dockerfile runs it", func(t *testing.T) {
		addr, _ := anyAddr()
		cmd := exec.CommandContext(t.Context(), bin)
		cmd.Env = append(os.Environ(), "LOCKPROXY_LISTEN="+addr, "LOCKPROXY_ADMIN_LISTEN=")
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "protected-mode: listen "+addr) {
			t.Errorf("%v, output %q; want exit 2 and the protected-mode problem", err, out)
		}
	})
	t.Run("admin port refused", func(t *testing.T) {
		addr, _ := anyAddr()
		out, code := testsrv.RunLockproxy(t, bin, "--admin-listen", addr)
		if want := "protected-mode: admin-listen " + addr + " reaches beyond loopback and its locks and release need no password"; code != 2 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output %q; want exit 2 and %q", code, out, want)
		}
	})
	t.Run("requirepass from the environment", func(t *testing.T) {
		addr, port := anyAddr()
		testsrv.StartBinaryEnv(t, bin, []string{"LOCKPROXY_REQUIREPASS=s3cret"}, "--listen", addr)
		if out, _ := exec.Command(cli, "-h", "127.0.0.1", "-p", port, "SET", "k", "v", "NX").CombinedOutput(); !strings.Contains(string(out), "NOAUTH Authentication required.") {
			t.Errorf("redis-cli without a password: %q; want NOAUTH Authentication required.", out)
		}
		out, err := exec.Command(cli, "-h", "127.0.0.1", "-p", port, "--no-auth-warning", "-a", "s3cret", "SET", "k", "v", "NX").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "OK" {
			t.Errorf("redis-cli -a s3cret SET: %v %q; want OK", err, out)
		}
	})
	t.Run("protected-mode no", func(t *testing.T) {
		addr, port := anyAddr()
		b := testsrv.StartBinary(t, bin, "--listen", addr, "--protected-mode", "no")
		out, err := exec.Command(cli, "-h", "127.0.0.1", "-p", port, "SET", "k", "v", "NX").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "OK" {
			t.Errorf("redis-cli SET: %v %q; want OK", err, out)
		}
		if !strings.Contains(b.Logs(), "protected-mode is off: clients from the network are served without a password") {
			t.Errorf("the start line lacks the protected-mode warning:\n%s", b.Logs())
		}
	})
}
