package tests

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// dockerClaims checks what the Dockerfile's comments say of the image,
// with the binary its own build command makes (TestOpsDockerfile) and its
// environment: --version names the release; without a password it refuses
// to start with the exit code and message quoted;
// LOCKPROXY_PROTECTED_MODE=no serves without one; with
// LOCKPROXY_REQUIREPASS the admin port serves /metrics, /healthz and
// /readyz to anyone, the locks and the page only over HTTP Basic, and
// force-release to the default user.
func dockerClaims(t *testing.T, bin string) {
	src, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if out, code := testsrv.RunLockproxy(t, bin, "--version"); code != 0 || !strings.Contains(out, "v1.4.0-claims") {
		t.Errorf("--version of a build with VERSION=v1.4.0-claims = %d %q; want it named", code, out)
	}

	// "it refuses to start (exit 2, "protected-mode: listen 0.0.0.0:6380 … no password …")"
	comments := strings.Join(regexp.MustCompile(`(?m)^# ?`).Split(string(src), -1), " ")
	claim := regexp.MustCompile(`\(exit (\d+), "([^"…]+?)\s*…"\)`).FindStringSubmatch(strings.Join(strings.Fields(comments), " "))
	if claim == nil {
		t.Fatal("the Dockerfile's comment no longer quotes the refusal (exit N, \"…\")")
	}
	port, admin := strconv.Itoa(testsrv.FreePort(t)), strconv.Itoa(testsrv.FreePort(t))
	env := []string{"LOCKPROXY_LISTEN=0.0.0.0:" + port, "LOCKPROXY_ADMIN_LISTEN=0.0.0.0:" + admin}
	refuse := exec.CommandContext(t.Context(), bin)
	refuse.Env = append(os.Environ(), env...)
	out, err := refuse.CombinedOutput()
	want := strings.Replace(claim[2], "0.0.0.0:6380", "0.0.0.0:"+port, 1)
	if ee, _ := err.(*exec.ExitError); ee == nil || strconv.Itoa(ee.ExitCode()) != claim[1] || !strings.Contains(string(out), want) {
		t.Errorf("the image's environment without a password: %v %q; want exit %s with %q", err, out, claim[1], want)
	}

	serveImage(t, bin, append(env, "LOCKPROXY_PROTECTED_MODE=no"), port, "")
	port, admin = strconv.Itoa(testsrv.FreePort(t)), strconv.Itoa(testsrv.FreePort(t))
	serveImage(t, bin, []string{"LOCKPROXY_LISTEN=0.0.0.0:" + port, "LOCKPROXY_ADMIN_LISTEN=0.0.0.0:" + admin, "LOCKPROXY_REQUIREPASS=s3cret"}, port, "s3cret")
	base := "http://127.0.0.1:" + admin
	call := func(method, path string, creds bool) int {
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, nil)
		if creds {
			req.SetBasicAuth("default", "s3cret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		if code := call("GET", p, false); code != 200 {
			t.Errorf("GET %s without credentials = %d; want 200 (served to anyone)", p, code)
		}
	}
	for _, p := range []string{"/locks", "/", "/locks/docker:k"} {
		if code, with := call("GET", p, false), call("GET", p, true); code != 401 || with != 200 {
			t.Errorf("GET %s = %d without credentials, %d with; want 401, 200", p, code, with)
		}
	}
	if code, with := call("POST", "/locks/docker:k/release", false), call("POST", "/locks/docker:k/release", true); code != 401 || with != 200 {
		t.Errorf("POST release = %d without credentials, %d as the default user; want 401, 200", code, with)
	}
}

// serveImage runs bin with env until the test ends, waits until it
// answers PING on port (with password, "" for none) and takes docker:k.
func serveImage(t *testing.T, bin string, env []string, port, password string) {
	t.Helper()
	run := exec.Command(bin)
	run.Env = append(os.Environ(), env...)
	logs := &testsrv.SyncBuffer{}
	run.Stdout, run.Stderr = logs, logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { run.Wait(); close(exited) }()
	t.Cleanup(func() { run.Process.Kill(); <-exited })
	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", port), Password: password, MaxRetries: -1})
	defer c.Close()
	for end := time.Now().Add(20 * time.Second); c.Ping(t.Context()).Err() != nil; {
		select {
		case <-exited:
			t.Fatalf("lockproxy with %q exited:\n%s", env, logs.String())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("lockproxy with %q does not answer PING:\n%s", env, logs.String())
		}
		time.Sleep(20 * time.Millisecond) // waiting for the listener
	}
	if err := c.SetNX(t.Context(), "docker:k", "tok", time.Minute).Err(); err != nil {
		t.Fatalf("SET NX with %q: %v", env, err)
	}
}
