package tests

import (
	"debug/elf"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
)

// dockerfile is the repository's Dockerfile as instructions: continuation
// lines joined, comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	cur := ""
	for _, l := range strings.Split(string(src), "\n") {
		l = strings.TrimSpace(l)
		if cur == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur += s + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
}

// instruction returns the arguments of the Dockerfile's instructions
// named name whose arguments start with prefix.
func instruction(t *testing.T, lines []string, name, prefix string) string {
	t.Helper()
	for _, l := range lines {
		if args, ok := strings.CutPrefix(l, name+" "); ok && strings.HasPrefix(args, prefix) {
			return args
		}
	}
	t.Fatalf("the Dockerfile has no %s %s…", name, prefix)
	return ""
}

// TestOpsDockerfile builds lockproxy with the Dockerfile's own build
// command once (VERSION set as --build-arg would; a cold build of every
// package, minutes on a loaded machine) and checks the image and the
// Dockerfile's claims with that binary.
func TestOpsDockerfile(t *testing.T) {
	t.Parallel()
	lines := dockerfile(t)
	build := instruction(t, lines, "RUN", "CGO_ENABLED=0 go build")
	if !strings.Contains(build, "-o /out/lockproxy ") {
		t.Fatalf("the build writes elsewhere than /out/lockproxy: %s", build)
	}
	bin := filepath.Join(t.TempDir(), "lockproxy")
	cmd := exec.CommandContext(t.Context(), "sh", "-c", strings.Replace(build, "/out/lockproxy", bin, 1))
	cmd.Dir, cmd.Env = "..", append(os.Environ(), "VERSION=v1.4.0-claims")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	t.Run("image", func(t *testing.T) { dockerImage(t, lines, bin) })
	t.Run("claims", func(t *testing.T) { dockerClaims(t, bin) })
}

// dockerImage checks what can be checked of the container without a
// container engine (none exists on the CI machines): the Dockerfile's own
// build command makes a static binary (no interpreter, no shared
// libraries: it runs on a distroless static base); with the image's
// environment (listeners on 0.0.0.0) and a password it serves, and the
// image's HEALTHCHECK command answers 0 while it runs and 1 once it is
// gone; the EXPOSEd ports are the ones it listens on.
func dockerImage(t *testing.T, lines []string, bin string) {
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader (PT_INTERP): not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v: not static", libs)
	}
	f.Close()

	// ENV LOCKPROXY_LISTEN=0.0.0.0:6380 LOCKPROXY_ADMIN_LISTEN=0.0.0.0:9121
	env := map[string]string{}
	for _, kv := range strings.Fields(instruction(t, lines, "ENV", "LOCKPROXY_")) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	listenHost, listenPort, err1 := net.SplitHostPort(env["LOCKPROXY_LISTEN"])
	adminHost, adminPort, err2 := net.SplitHostPort(env["LOCKPROXY_ADMIN_LISTEN"])
	if err1 != nil || err2 != nil {
		t.Fatalf("ENV listeners %q, %q", env["LOCKPROXY_LISTEN"], env["LOCKPROXY_ADMIN_LISTEN"])
	}
	if got, want := strings.Fields(instruction(t, lines, "EXPOSE", "")), []string{listenPort, adminPort}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("EXPOSE %v; the image listens on %v", got, want)
	}
	// The same environment on free ports (this machine may use 6380).
	port, admin := strconv.Itoa(testsrv.FreePort(t)), strconv.Itoa(testsrv.FreePort(t))
	run := exec.Command(bin)
	run.Env = append(os.Environ(), "LOCKPROXY_LISTEN="+net.JoinHostPort(listenHost, port),
		"LOCKPROXY_ADMIN_LISTEN="+net.JoinHostPort(adminHost, admin), "LOCKPROXY_REQUIREPASS=s3cret")
	var logs strings.Builder
	run.Stdout, run.Stderr = &logs, &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { run.Wait(); close(exited) }()
	defer func() { run.Process.Kill(); <-exited }()

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, Password: "s3cret"})
	defer c.Close()
	wait.For(t, "lockproxy with the image's environment to answer PING", func() bool {
		select {
		case <-exited:
			t.Fatalf("lockproxy with the image's environment exited:\n%s", logs.String())
		default:
		}
		return c.Ping(t.Context()).Err() == nil
	})
	if ok, err := c.SetNX(t.Context(), "docker:k", "tok", time.Minute).Result(); !ok || err != nil {
		t.Errorf("SET NX = %v, %v", ok, err)
	}

	// HEALTHCHECK … CMD ["/lockproxy", "--healthcheck", "--admin-listen", "127.0.0.1:9121"]
	hc := instruction(t, lines, "HEALTHCHECK", "")
	_, exe, ok := strings.Cut(hc, " CMD ")
	var argv []string
	if !ok || json.Unmarshal([]byte(exe), &argv) != nil || len(argv) == 0 || argv[0] != "/lockproxy" {
		t.Fatalf("HEALTHCHECK %q: want CMD [\"/lockproxy\", …]", hc)
	}
	for i, a := range argv {
		argv[i] = strings.Replace(a, ":"+adminPort, ":"+admin, 1)
	}
	health := func() int {
		out, code := testsrv.RunLockproxy(t, bin, argv[1:]...)
		t.Logf("healthcheck: exit %d %s", code, strings.TrimSpace(out))
		return code
	}
	if code := health(); code != 0 {
		t.Errorf("the image's health check exits %d while lockproxy serves; want 0", code)
	}
	run.Process.Kill()
	<-exited
	if code := health(); code != 1 {
		t.Errorf("the image's health check exits %d once lockproxy is gone; want 1", code)
	}
}
