package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// The lock libraries' own test suites, run against lockproxy: those of
// bsm/redislock and go-redsync/redsync at the versions of go.mod, from the
// module cache (Go modules carry their tests). Each runs in a temporary
// copy whose server addresses are patched at run time; nothing of theirs
// is kept in this repository. Both suites pass on a real redis-server.

// TestPeerRedislock runs bsm/redislock's suite (one Redis at
// 127.0.0.1:6379, database 9) on every target: redis-server first, which
// proves the copy, then every backend and a migrating proxy (each without
// three timing tests, below).
func TestPeerRedislock(t *testing.T) {
	t.Parallel()
	goBin := testsrv.Need(t, "go")
	src := moduleDir(t, goBin, "github.com/bsm/redislock")
	clientTargets(t, func(t *testing.T, addr string) {
		dir := peerCopy(t, src, map[*regexp.Regexp]string{regexp.MustCompile(`127\.0\.0\.1:6379`): addr})
		// Two of its retry tests and its package example time the server:
		// one gives Obtain 20 ms (a first attempt slower than that ends
		// with the deadline alone, not ErrNotObtained), the other holds a
		// lock for 50 ms and expects three more attempts within it
		// (slower, the lock has expired and the last attempt rightly takes
		// it), and Example takes a 100 ms lock, sleeps 50 ms, reads its TTL
		// and refreshes it (three commands slower than 50 ms in all, and
		// the lock has expired: the refresh rightly answers "not
		// obtained"). On a loaded two-core machine they fail so on
		// redis-server itself (seen in a full run), so no target runs them.
		args := []string{"-skip", "^(TestObtain_retry_(context_deadline|failure)|Example)$"}
		peerRun(t, goBin, dir, nil, args...)
	})
}

// TestPeerRedsync runs go-redsync/redsync's suite: Redlock over 8
// independent nodes, for each of its six client drivers, 48 nodes in all
// (it starts them as redis-servers on Unix sockets and ports 51200 on;
// here each is a lockproxy on the memory backend). Quorum and postgres are
// left out: 48 independent quorum backends take 144 redis-servers, 48
// postgres ones 48 databases and their sessions, and the suite takes a
// minute per run; bsm/redislock's suite runs on every backend instead.
func TestPeerRedsync(t *testing.T) {
	t.Parallel()
	goBin := testsrv.Need(t, "go")
	src := moduleDir(t, goBin, "github.com/go-redsync/redsync/v4")
	addrs := make([]string, 48)
	for i := range addrs {
		addrs[i] = testsrv.StartMemoryProxy(t)
	}
	dir := peerCopy(t, src, map[*regexp.Regexp]string{
		// The servers the suite would start are not started; its clients
		// dial the lockproxy instances instead.
		regexp.MustCompile(`(?s)for i := range ServerPoolSize \* ServerPools \{.*?servers = append\(servers, server\)\s*\}`): "_ = strconv.Itoa // its other use is edited out below",
		regexp.MustCompile(`server := servers\[i\+offset\]`):                                                                 "server := peerAddrs[i+offset]",
		regexp.MustCompile(`redigolib\.Dial\("unix", server\.Socket\(\)\)`):                                                  `redigolib.Dial("tcp", server)`,
		regexp.MustCompile(`Network: "unix",(\s+)Addr:\s+servers\[i\+offset\]\.Socket\(\),`):                                 `Network: "tcp",${1}Addr: peerAddrs[i+offset],`,
		regexp.MustCompile(`"127\.0\.0\.1:" \+ strconv\.Itoa\(51200\+i\+offset\)`):                                           "peerAddrs[i+offset]",
		regexp.MustCompile(`Network: "unix",(\s+)Addr:\s+server\.Socket\(\),`):                                               `Network: "tcp",${1}Addr: peerAddrs[0],`,
		// TestTryLock retries a failed TryLock in a loop that never calls
		// it again: one TryLock that fails (a timeout on a loaded machine)
		// hung the suite for its 10 minutes (seen in a full run). The loop
		// tries again, as its sleep means it to.
		regexp.MustCompile(`(time\.Sleep\(100 \* time\.Millisecond\) // 1ms)`): "${1}\n\t\t\t\t\t\terr = mutex.TryLockContext(context.Background())",
	})
	peer := "package redsync\n\nimport (\n\t\"os\"\n\t\"strings\"\n)\n\n" +
		"// peerAddrs are lockproxy's instances (lockproxy's TestPeerRedsync).\n" +
		"var peerAddrs = strings.Split(os.Getenv(\"LOCKPROXY_PEER_ADDRS\"), \",\")\n"
	if err := os.WriteFile(filepath.Join(dir, "peer_addrs_test.go"), []byte(peer), 0o644); err != nil {
		t.Fatal(err)
	}
	peerRun(t, goBin, dir, []string{"LOCKPROXY_PEER_ADDRS=" + strings.Join(addrs, ",")})
}

// moduleDir is where the module cache holds module at go.mod's version.
func moduleDir(t *testing.T, goBin, module string) string {
	t.Helper()
	out, err := exec.Command(goBin, "list", "-m", "-f", "{{.Dir}}", module).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("go list -m %s: %q, %v", module, out, err)
	}
	return dir
}

// peerCopy copies the module at src to a temporary directory, applying
// edits to its test files; each edit must match.
func peerCopy(t *testing.T, src string, edits map[*regexp.Regexp]string) string {
	t.Helper()
	dir := t.TempDir()
	matched := map[*regexp.Regexp]bool{}
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			for re, repl := range edits {
				if re.Match(data) {
					matched[re] = true
					data = re.ReplaceAll(data, []byte(repl))
				}
			}
		}
		return os.WriteFile(to, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for re := range edits {
		if !matched[re] {
			t.Fatalf("%s: the edit %q matched nothing: a new version of its tests?", src, re)
		}
	}
	return dir
}

// peerRun runs the suite of the module copied to dir, with more go test
// flags.
func peerRun(t *testing.T, goBin, dir string, env []string, flags ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), goBin, append(append([]string{"test", "-count=1"}, flags...), ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(env, "GOFLAGS=-mod=mod", "GOWORK=off")...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}
