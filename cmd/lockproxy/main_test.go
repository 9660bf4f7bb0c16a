package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

func TestCheckConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"--config", "../../config.yaml", "--check-config"}, nil, &out, &errOut); err != nil {
		t.Fatalf("--check-config on the sample: %v\n%s", err, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	err := run(t.Context(), []string{"--check-config", "--backend", "nope", "--max-clients", "0"}, nil, &out, &errOut)
	if !errors.Is(err, errInvalidConfig) {
		t.Fatalf("--check-config with bad values = %v", err)
	}
	for _, want := range []string{"backend: unknown backend", "max-clients: 0 is not positive"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr %q lacks %q", errOut.String(), want)
		}
	}
}

// TestBinary builds and runs the real binary: it serves, answers a lock
// cycle and exits 0 on SIGTERM.
func TestBinary(t *testing.T) {
	runBinary(t, nil, "backend=memory", "not HA")
}

// TestBinaryQuorum does the same with the quorum backend over three real
// redis-servers.
func TestBinaryQuorum(t *testing.T) {
	var nodes []string
	for range 3 {
		nodes = append(nodes, testsrv.StartRedis(t).Addr)
	}
	runBinary(t, []string{"--backend", "quorum", "--quorum-nodes", strings.Join(nodes, ",")}, "backend=quorum", "appendonly no")
}

// TestBinaryMigrate runs the binary with --migrate-from a legacy Redis
// that needs a password: the lock cycle works through both, and the start
// line names the legacy Redis with its password masked.
func TestBinaryMigrate(t *testing.T) {
	legacy := testsrv.StartRedis(t, "--user", "default", "off", "--user", testsrv.ProbeUser, "on", ">"+testsrv.ProbeUser, "+@all",
		"--user", "app", "on", ">sekret", "~*", "+@all")
	logs := runBinary(t, []string{"--migrate-from", "redis://app:sekret@" + legacy.Addr},
		"backend=memory", "migrate_from=redis://app:xxxxx@"+legacy.Addr, "migrating: every lock is also taken in")
	if strings.Contains(logs, "sekret") {
		t.Errorf("the log shows the legacy password:\n%s", logs)
	}
}

func runBinary(t *testing.T, extra []string, wantLog ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lockproxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := "127.0.0.1:" + strconv.Itoa(testsrv.FreePort(t))
	admin := "127.0.0.1:" + strconv.Itoa(testsrv.FreePort(t))
	var logs bytes.Buffer
	cmd := exec.Command(bin, append([]string{"--listen", addr, "--admin-listen", admin, "--config", "../../config.yaml"}, extra...)...)
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lockproxy did not listen on %s: %v\n%s", addr, err, logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling for the listener
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	rd := bufio.NewReader(c)
	for _, step := range []struct{ req, want string }{
		{"SET lock tok NX PX 30000\r\n", "+OK\r\n"},
		{"SET lock other NX PX 30000\r\n", "$-1\r\n"},
		{"EVAL \"if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end\" 1 lock tok\r\n", ":1\r\n"},
	} {
		c.Write([]byte(step.req))
		if got, _ := rd.ReadString('\n'); got != step.want {
			t.Fatalf("%q = %q; want %q", step.req, got, step.want)
		}
	}
	for path, want := range map[string]string{
		"/healthz": "ok",
		"/readyz":  "ready",
		"/metrics": `lockproxy_commands_total{command="set",outcome="nil"} 1`,
	} {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d %q; want it to contain %q", path, resp.StatusCode, body, want)
		}
	}
	if out, err := exec.Command(bin, "--healthcheck", "--admin-listen", admin, "--config", "../../config.yaml").CombinedOutput(); err != nil {
		t.Errorf("--healthcheck against a running lockproxy: %v\n%s", err, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("lockproxy did not exit after SIGTERM\n%s", logs.String())
	}
	for _, want := range append([]string{"lockproxy started", "stopped"}, wantLog...) {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	return logs.String()
}

// TestJSONLogsWithNodeDown: under --log-format json every line lockproxy
// writes is a JSON object, also while a quorum node refuses connections
// (go-redis's own messages go through lockproxy's logger), and the start
// line names the admin address and keeps its warnings apart.
func TestJSONLogsWithNodeDown(t *testing.T) {
	bin := testsrv.BuildLockproxy(t)
	dead := testsrv.DeadAddr(t)
	nodes := []string{testsrv.StartRedis(t).Addr, testsrv.StartRedis(t).Addr, dead}
	p := testsrv.StartBinary(t, bin, "--backend", "quorum", "--quorum-nodes", strings.Join(nodes, ","),
		"--log-format", "json", "--log-level", "info")
	if err := p.Terminate(10 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, p.Logs())
	}
	var start map[string]any
	for line := range strings.Lines(p.Logs()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("a log line is not JSON: %q", line)
			continue
		}
		if m["msg"] == "lockproxy started" {
			start = m
		}
	}
	if start == nil {
		t.Fatalf("no start line in:\n%s", p.Logs())
	}
	if start["admin"] != p.Admin {
		t.Errorf("start line admin = %v; want %s", start["admin"], p.Admin)
	}
	if w, _ := start["warnings"].(string); !strings.Contains(w, "; ") || !strings.Contains(w, dead) {
		t.Errorf("start line warnings = %q; want the dead node named, warnings separated by '; '", w)
	}
}

// TestVersion: --version prints the version and exits 0 without serving;
// lockproxy_build_info carries the same version; a version set at build
// time wins over the toolchain's.
func TestVersion(t *testing.T) {
	var out, errs strings.Builder
	if err := run(t.Context(), []string{"--version"}, nil, &out, &errs); err != nil {
		t.Fatalf("--version: %v (%s)", err, errs.String())
	}
	if want := "lockproxy " + versionString() + " (" + runtime.Version(); !strings.HasPrefix(out.String(), want) {
		t.Errorf("--version printed %q; want it to start with %q", out.String(), want)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfo())
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "lockproxy_build_info" || mfs[0].Metric[0].GetGauge().GetValue() != 1 {
		t.Fatalf("build info metric = %v, %v", mfs, err)
	}
	labels := map[string]string{}
	for _, l := range mfs[0].Metric[0].Label {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != versionString() || labels["goversion"] != runtime.Version() {
		t.Errorf("lockproxy_build_info labels %v; want version %q, goversion %q", labels, versionString(), runtime.Version())
	}
	defer func(v string) { version = v }(version)
	version = "v9.9.9"
	if versionString() != "v9.9.9" {
		t.Errorf("with -X main.version=v9.9.9 the version is %q", versionString())
	}
}
