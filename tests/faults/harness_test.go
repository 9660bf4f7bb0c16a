package faults

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/lockcheck"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
)

// shortRun is how long each nemesis runs in the suite; LOCKPROXY_SOAK (a Go
// duration) overrides it for the long form.
const shortRun = 5 * time.Second

// lockproxyBin is the lockproxy binary built once for the package by
// TestMain (nemeses that kill lockproxy need the real process).
var lockproxyBin string

func TestMain(m *testing.M) {
	// go-redis logs every failed dial of its pools; a nemesis that kills
	// lockproxy makes thousands. The Report counts them instead.
	redis.SetLogger(quietLogger{})
	dir, err := os.MkdirTemp("", "faults-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lockproxyBin = filepath.Join(dir, "lockproxy")
	if out, err := exec.Command("go", "build", "-o", lockproxyBin, "github.com/lockproxy/lockproxy/cmd/lockproxy").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build lockproxy: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// quietLogger drops go-redis's internal log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// nemesis describes one checked run under a fault.
type nemesis struct {
	Name    string   // table row name, e.g. "kill -9 one node"
	Backend string   // memory, quorum, postgres
	Client  string   // goredis, redsync, redislock, fenced or fence-read (lockcheck.Clients)
	Addrs   []string // lockproxy addresses; worker w talks to Addrs[w%len(Addrs)]

	Workers, Keys int           // default: 12 workers on 3 keys
	TTL, Hold     time.Duration // default: 500ms, 3ms
	MinGrants     int64         // default: 200
}

// runDuration is shortRun, or LOCKPROXY_SOAK when set.
func runDuration(t *testing.T) time.Duration {
	t.Helper()
	return runDurationOr(t, shortRun)
}

// runDurationOr is short, or LOCKPROXY_SOAK when set.
func runDurationOr(t *testing.T, short time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv("LOCKPROXY_SOAK")
	if s == "" {
		return short
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("LOCKPROXY_SOAK=%q: want a positive Go duration such as 2m", s)
	}
	return d
}

// runNemesis runs the checker described by n while fault runs beside it.
// fault gets a context that ends when the checker's run ends; it must
// return soon after and leave the system repaired (nodes running, processes
// continued). runNemesis asserts no violations, at least n.MinGrants grants
// and some contention, logs the report and appends a table row when
// LOCKPROXY_FAULTS_TABLE is set.
func runNemesis(t *testing.T, n nemesis, fault func(ctx context.Context)) *lockcheck.Report {
	t.Helper()
	n = n.withDefaults()
	cfg := lockcheck.Config{
		Workers: n.Workers, Keys: n.Keys, TTL: n.TTL, Hold: n.Hold,
		Duration: runDuration(t),
		Prefix:   "lockcheck:" + strings.ReplaceAll(t.Name(), "/", ":") + ":",
		NewLocker: func(w int) lockcheck.Locker {
			l, err := lockcheck.NewLocker(n.Client, n.Addrs[w%len(n.Addrs)])
			if err != nil {
				panic(err) // n.Client was checked below
			}
			return l
		},
	}
	if !slices.Contains(lockcheck.Clients, n.Client) {
		t.Fatalf("unknown client %q", n.Client)
	}
	faultCtx, stopFault := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	if fault != nil {
		wg.Go(func() { fault(faultCtx) })
	}
	rep, err := lockcheck.Run(t.Context(), cfg)
	stopFault()
	wg.Wait()
	if err != nil {
		t.Fatalf("lockcheck: %v", err)
	}
	t.Logf("%s (%s, %s): %s", n.Name, n.Backend, n.Client, rep)
	appendRow(t, n, rep)
	if len(rep.FenceViolations) > 0 {
		t.Errorf("%d fence violations: a grant's fence was not above an earlier grant's", len(rep.FenceViolations))
	}
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations: two clients held one lock at once (worst overlap %v)", len(rep.Violations), rep.WorstOverlap)
	}
	if rep.Grants < n.MinGrants || rep.Contended == 0 {
		t.Errorf("grants %d (want ≥ %d), contended %d (want > 0): too little contention to judge", rep.Grants, n.MinGrants, rep.Contended)
	}
	return rep
}

func (n nemesis) withDefaults() nemesis {
	if n.Workers == 0 {
		n.Workers = 12
	}
	if n.Keys == 0 {
		n.Keys = 3
	}
	if n.TTL == 0 {
		n.TTL = 500 * time.Millisecond
	}
	if n.Hold == 0 {
		n.Hold = 3 * time.Millisecond
	}
	if n.MinGrants == 0 {
		n.MinGrants = 200
	}
	return n
}

// tableHeader is the header of the rows appendRow writes (markdown).
const tableHeader = "| nemesis | backend | client | attempts | grants | contended | errors | violations | worst overlap |\n|---|---|---|---|---|---|---|---|---|\n"

// appendRow appends rep as a markdown table row to the file named by
// LOCKPROXY_FAULTS_TABLE, if set.
func appendRow(t *testing.T, n nemesis, rep *lockcheck.Report) {
	t.Helper()
	path := os.Getenv("LOCKPROXY_FAULTS_TABLE")
	if path == "" {
		return
	}
	errs := fmt.Sprint(rep.ErrorCount())
	if len(rep.Errors) > 0 {
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(rep.Errors)) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, rep.Errors[k]))
		}
		errs += " (" + strings.Join(kinds, ", ") + ")"
	}
	worst := "—"
	if len(rep.Violations) > 0 {
		worst = rep.WorstOverlap.String()
	}
	row := fmt.Sprintf("| %s | %s | %s | %d | %d | %d | %s | %d | %s |\n",
		n.Name, n.Backend, n.Client, rep.Attempts, rep.Grants, rep.Contended, errs, len(rep.Violations), worst)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("table: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(row); err != nil {
		t.Errorf("table: %v", err)
	}
}

// faultRan fails the test when the fault never completed a cycle: a run
// with no fault proves nothing about it.
func faultRan(t *testing.T, cycles int) {
	t.Helper()
	if cycles == 0 {
		t.Error("the fault never completed a cycle: the run is too short to judge it")
	}
}

// pause waits d, or until ctx ends; it reports whether the whole of d passed.
// Faults use it to pace themselves (their schedule, not a synchronisation).
func pause(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// quorumNodes starts n real redis-servers (nothing persisted).
func quorumNodes(t *testing.T, n int) []*testsrv.Redis {
	t.Helper()
	nodes := make([]*testsrv.Redis, n)
	for i := range nodes {
		nodes[i] = testsrv.StartRedis(t)
	}
	return nodes
}

// addrs returns the nodes' addresses.
func addrs(nodes []*testsrv.Redis) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr
	}
	return out
}

// nodeTimeout is the quorum node timeout the nemeses run lockproxy with:
// above the default 50ms, as the tests share two cores under -race.
const nodeTimeout = "100ms"

// startQuorumBinary runs the lockproxy binary as a quorum backend over
// nodeAddrs; extra flags are appended (e.g. --listen to reuse a port).
func startQuorumBinary(t *testing.T, nodeAddrs []string, extra ...string) *testsrv.Binary {
	t.Helper()
	args := append([]string{"--backend", "quorum", "--quorum-nodes", strings.Join(nodeAddrs, ","),
		"--quorum-node-timeout", nodeTimeout}, extra...)
	return testsrv.StartBinary(t, lockproxyBin, args...)
}

// killBinary sends SIGKILL to b and waits until the process is gone.
func killBinary(t *testing.T, b *testsrv.Binary) {
	t.Helper()
	pid := b.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Errorf("kill lockproxy %d: %v", pid, err)
		return
	}
	if !wait.Poll(10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		t.Errorf("lockproxy %d still there 10s after SIGKILL", pid)
	}
}
