package testsrv

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildLockproxy builds the lockproxy binary (./cmd/lockproxy) into
// t.TempDir() and returns its path. Go's build cache makes a rebuild cheap.
func BuildLockproxy(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lockproxy")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/lockproxy/lockproxy/cmd/lockproxy").CombinedOutput(); err != nil {
		t.Fatalf("go build lockproxy: %v\n%s", err, out)
	}
	return bin
}

// Binary is a lockproxy process run from the real binary. Its methods are
// safe for concurrent use; the process is killed when the test ends.
type Binary struct {
	Addr  string // the RESP listener, 127.0.0.1:port
	Admin string // the admin listener, 127.0.0.1:port

	cmd    *exec.Cmd
	logs   *SyncBuffer
	exited chan struct{}
	err    error // the exit status, once exited is closed
}

// StartBinary runs bin with --listen and --admin-listen on free loopback
// ports followed by args (a later flag wins, so args may override them),
// and waits until it accepts connections. It fails the test when the
// process exits first, with its log.
func StartBinary(t testing.TB, bin string, args ...string) *Binary {
	t.Helper()
	return StartBinaryEnv(t, bin, nil, args...)
}

// StartBinaryEnv is StartBinary with env (KEY=value) added to the
// process's environment. DataPathEnv, when set, becomes the process's
// LOCKPROXY_DATA_PATH (env and args may still override it).
func StartBinaryEnv(t testing.TB, bin string, env []string, args ...string) *Binary {
	t.Helper()
	if p := os.Getenv(DataPathEnv); p != "" {
		env = append([]string{"LOCKPROXY_DATA_PATH=" + p}, env...)
	}
	b := &Binary{
		Addr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t))),
		Admin: net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t))),
		logs:  &SyncBuffer{}, exited: make(chan struct{}),
	}
	b.cmd = exec.Command(bin, append([]string{"--listen", b.Addr, "--admin-listen", b.Admin}, args...)...)
	for i := 0; i+1 < len(args); i++ { // a --listen or --admin-listen in args wins: dial that one
		switch args[i] {
		case "--listen":
			b.Addr = dialable(args[i+1])
		case "--admin-listen":
			b.Admin = dialable(args[i+1])
		}
	}
	b.cmd.Stdout, b.cmd.Stderr = b.logs, b.logs
	b.cmd.Env = append(os.Environ(), env...)
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start lockproxy: %v", err)
	}
	go func() {
		b.err = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.exited
	})
	for deadline := time.Now().Add(readyTimeout); ; {
		c, err := net.DialTimeout("tcp", b.Addr, time.Second)
		if err == nil {
			c.Close()
			return b
		}
		select {
		case <-b.exited:
			t.Fatalf("lockproxy exited before listening: %v\n%s", b.err, b.Logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lockproxy did not listen on %s: %v\n%s", b.Addr, err, b.Logs())
		}
		time.Sleep(20 * time.Millisecond) // polling for the listener
	}
}

// dialable turns a listen address into one to dial: an unspecified host
// (0.0.0.0, ::, empty) becomes 127.0.0.1.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// Logs returns what the process wrote to stdout and stderr so far.
func (b *Binary) Logs() string { return b.logs.String() }

// Pid returns the process id.
func (b *Binary) Pid() int { return b.cmd.Process.Pid }

// Terminate sends SIGTERM and waits up to timeout for the process to exit;
// it returns the exit status, or an error when the process is still
// running.
func (b *Binary) Terminate(timeout time.Duration) error {
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
		return b.err
	case <-time.After(timeout):
		return errors.New("lockproxy still running after SIGTERM")
	}
}

// RunLockproxy runs bin with args to completion (for --check-config and
// refused starts) and returns its combined output and exit code.
func RunLockproxy(t testing.TB, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("run lockproxy: %v\n%s", err, out)
	return "", -1
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers:
// a log that a test reads while the process or goroutines write it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
