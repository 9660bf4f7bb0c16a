package testsrv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// startAttempts is how many free ports StartRedis tries: another process
// may take a port between FreePort closing it and redis-server binding it.
const startAttempts = 5

// readyTimeout bounds the wait for a started redis-server to answer.
const readyTimeout = 10 * time.Second

// Redis is a real redis-server started for a test. Its methods are safe for
// concurrent use; the process is killed when the test ends.
type Redis struct {
	Addr string // 127.0.0.1:Port
	Port int

	t    testing.TB
	bin  string
	args []string
	dir  string

	mu   sync.Mutex
	proc *process
}

// process is one run of redis-server; exited is closed once it has ended
// and been reaped.
type process struct {
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{}
}

// Need returns the path of bin. When bin is not installed it skips the
// test, or fails it when the CI environment variable is set.
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

// deadPorts is the last port DeadAddr handed out.
var deadPorts atomic.Int32

// DeadAddr returns a loopback address that refuses connections: a node or
// server that is down. It is a privileged port (below 1024), never one of
// the ephemeral ports FreePort hands out, so a test package running at the
// same time cannot start a server there while a test counts it as down (a
// freed ephemeral port was taken by another package's redis-server once,
// and a "down" node answered). Each call returns a different address.
func DeadAddr(t testing.TB) string {
	t.Helper()
	for {
		p := deadPorts.Add(1)
		if p >= 1024 {
			t.Fatal("no loopback port below 1024 refuses connections")
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(p)))
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return addr
		}
	}
}

// StartRedis starts redis-server on a free 127.0.0.1 port with nothing
// persisted (its --dir is a t.TempDir()), waits until that very process
// answers, and kills it when the test ends. extraArgs are appended to the
// command line (e.g. "--appendonly", "yes" overrides the default). A port
// lost to another process is retried with a new one.
func StartRedis(t testing.TB, extraArgs ...string) *Redis {
	t.Helper()
	bin := Need(t, "redis-server")
	var lastErr error
	for range startAttempts {
		port := FreePort(t)
		dir := t.TempDir()
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--daemonize", "no", "--protected-mode", "no"}, extraArgs...)
		r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port,
			t: t, bin: bin, args: args, dir: dir}
		if lastErr = r.start(); lastErr == nil {
			t.Cleanup(r.Kill)
			return r
		}
		r.Kill()
	}
	t.Fatalf("redis-server did not start in %d attempts: %v", startAttempts, lastErr)
	return nil
}

// start runs redis-server with r's arguments and waits until it answers.
func (r *Redis) start() error {
	out, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("redis log: %w", err)
	}
	cmd := exec.Command(r.bin, r.args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	p := &process{cmd: cmd, log: out, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		out.Close()
		close(p.exited)
	}()
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	return r.waitReady(p)
}

// waitReady polls until p answers on r.Addr. It fails at once when p exits
// (a port taken meanwhile), and it checks the answering server's
// process_id, so a stranger on the same port is never taken for p.
func (r *Redis) waitReady(p *process) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		pid, err := serverPID(r.Addr)
		if err == nil && pid == p.cmd.Process.Pid {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%s is served by process %d, not by redis-server %d", r.Addr, pid, p.cmd.Process.Pid)
		}
		select {
		case <-p.exited:
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			return fmt.Errorf("redis-server exited (%v); log:\n%s", p.cmd.ProcessState, log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %v: %w", readyTimeout, err)
		}
		time.Sleep(10 * time.Millisecond) // polling for readiness
	}
}

// ProbeUser is the user StartRedis authenticates as when a server it
// started answers NOAUTH (its extraArgs require AUTH): give such a server
// "--user testsrv on >testsrv +@all" for StartRedis to see it ready.
const ProbeUser = "testsrv"

// serverPID asks the server at addr for its process_id (INFO server), as
// ProbeUser when the server requires AUTH.
func serverPID(addr string) (int, error) {
	pid, err := serverPIDAs(addr, false)
	if err != nil && strings.Contains(err.Error(), "NOAUTH") {
		return serverPIDAs(addr, true)
	}
	return pid, err
}

func serverPIDAs(addr string, auth bool) (int, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	req := "INFO server\r\n"
	if auth {
		req = "AUTH " + ProbeUser + " " + ProbeUser + "\r\n" + req
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return 0, err
	}
	rd := bufio.NewReader(c)
	if auth {
		if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
			return 0, fmt.Errorf("AUTH %s answered %q, %v", ProbeUser, line, err)
		}
	}
	head, err := rd.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if !strings.HasPrefix(head, "$") || err != nil || n < 0 {
		return 0, fmt.Errorf("INFO answered %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rd, body); err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// ping sends an inline PING to addr and expects +PONG.
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

func (r *Redis) current() *process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// Pid returns the process ID of the running server (of its latest run
// after Restart).
func (r *Redis) Pid() int { return r.current().cmd.Process.Pid }

// Stop pauses the server (SIGSTOP): it keeps its connections but answers
// nothing until Cont.
func (r *Redis) Stop() { r.signal(syscall.SIGSTOP) }

// Cont resumes a paused server (SIGCONT).
func (r *Redis) Cont() { r.signal(syscall.SIGCONT) }

func (r *Redis) signal(s os.Signal) {
	if p := r.current(); p != nil {
		p.cmd.Process.Signal(s) // an error means it has exited: nothing to do
	}
}

// Kill ends the server at once (SIGKILL, after SIGCONT in case it was
// paused) and waits until the process is gone. Killing a dead server does
// nothing.
func (r *Redis) Kill() {
	p := r.current()
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.exited
}

// Restart kills the server and starts a new one on the same port with the
// same arguments: a node that crashed and came back, with nothing kept
// unless its arguments persist data. The test fails if it does not come
// back.
func (r *Redis) Restart() {
	r.t.Helper()
	r.Kill()
	if err := r.start(); err != nil {
		r.t.Fatalf("restart redis-server on %s: %v", r.Addr, err)
	}
}
