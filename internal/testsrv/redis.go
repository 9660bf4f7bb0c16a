package testsrv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Redis is a real redis-server started for a test.
type Redis struct {
	Addr string
	Port int
	cmd  *exec.Cmd
	dir  string
	bin  string
	args []string
	t    testing.TB
}

// Need skips the test when bin is not installed, or fails it under CI.
func Need(t testing.TB, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (./test.sh installs it)", bin)
		}
		t.Skipf("%s is not installed (./test.sh installs it)", bin)
	}
	return p
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// StartRedis starts redis-server on a free 127.0.0.1 port with nothing
// persisted, waits until it answers PING, and stops it when the test ends.
func StartRedis(t testing.TB, extraArgs ...string) *Redis {
	t.Helper()
	bin := Need(t, "redis-server")
	var lastErr error
	for range 5 {
		port := FreePort(t)
		dir := t.TempDir()
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", dir, "--daemonize", "no", "--protected-mode", "no"}, extraArgs...)
		cmd := exec.Command(bin, args...)
		out, err := os.Create(dir + "/redis.log")
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		r := &Redis{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, cmd: cmd, dir: dir, bin: bin, args: args, t: t}
		if lastErr = r.waitReady(10 * time.Second); lastErr == nil {
			t.Cleanup(func() { r.Kill(); out.Close() })
			return r
		}
		r.Kill()
		out.Close()
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

func (r *Redis) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := ping(r.Addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || r.cmd.ProcessState != nil {
			log, _ := os.ReadFile(r.dir + "/redis.log")
			return fmt.Errorf("%v; log: %s", err, log)
		}
		time.Sleep(10 * time.Millisecond) // polling for readiness
	}
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Pid returns the server's process ID.
func (r *Redis) Pid() int { return r.cmd.Process.Pid }

// Stop pauses the server (SIGSTOP): it keeps its connections but answers
// nothing until Cont.
func (r *Redis) Stop() { r.cmd.Process.Signal(syscall.SIGSTOP) }

// Cont resumes a paused server (SIGCONT).
func (r *Redis) Cont() { r.cmd.Process.Signal(syscall.SIGCONT) }

// Kill ends the server at once (SIGKILL) and waits for it.
func (r *Redis) Kill() {
	if r.cmd.ProcessState != nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGCONT)
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

// Restart kills the server and starts a new one on the same port with the
// same arguments: a node that crashed and came back, with nothing kept
// unless its arguments persist data.
func (r *Redis) Restart() {
	r.t.Helper()
	r.Kill()
	cmd := exec.Command(r.bin, r.args...)
	out, err := os.OpenFile(r.dir+"/redis.log", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { out.Close() })
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("restart redis-server: %v", err)
	}
	r.cmd = cmd
	if err := r.waitReady(10 * time.Second); err != nil {
		r.t.Fatalf("restarted redis-server: %v", err)
	}
}
