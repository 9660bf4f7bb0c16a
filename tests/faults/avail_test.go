package faults

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/lockcheck"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
)

// The availability suite (docs/quorum.md, Availability)
// measures grants, where the nemeses above count violations: with one node
// of three killed, paused, slow or partitioned, every acquire pattern,
// contended or not, must keep at least half the grant rate it had with all
// nodes up in the same run, with no error reply, and never refuse a free
// key; with two of three down, every acquire must be an error. A run that
// misses the bar runs once more on fresh nodes, which must meet it.
//
// One run = one pattern, contended or not, on its own three nodes and
// lockproxy; the load runs without a break while the phases follow one
// another:
//
//	all up → node 1 paused (SIGSTOP) → continued → node 0 slow (latency
//	above the node timeout) → healed → node 0 partitioned (black hole) →
//	healed → node 2 killed (SIGKILL, stays down) → node 1 killed too
//
// Each phase lasts availSettle+availWindow (availMajorityWindow for the
// last). The first availSettle after a
// fault starts is left out (requests caught by the fault's onset: lockproxy
// has not seen it yet); the rest, availWindow, is measured: the requests
// that started and ended inside it. After a fault is healed the next phase
// waits until the node's replies flow again (faultProxy.waitFlowing).
const (
	availSettle = 200 * time.Millisecond
	availWindow = 600 * time.Millisecond
	// availMajorityWindow is the majority-down phase's window: it only
	// needs some acquires, every one an error.
	availMajorityWindow = 300 * time.Millisecond

	// availSlow is the latency added each way to the slow node: its round
	// trip, 300ms, is three times the node timeout the faults run
	// lockproxy with (nodeTimeout, 100ms).
	availSlow = 150 * time.Millisecond

	// availMinFraction is the bar: grants under a minority fault ≥ this
	// fraction of the all-up grants (docs/quorum.md).
	availMinFraction = 0.5
)

// availPattern is an acquire pattern: how its load is started.
type availPattern struct {
	name  string
	start func(t *testing.T, cfg loadConfig) load
}

func goPattern(name string, newLocker func(addr string) lockcheck.Locker) availPattern {
	return availPattern{name: name, start: func(t *testing.T, cfg loadConfig) load {
		return startGoLoad(t, cfg, newLocker)
	}}
}

func nodePattern(name, lib string) availPattern {
	return availPattern{name: name, start: func(t *testing.T, cfg loadConfig) load {
		return startNodeLoad(t, lib, cfg)
	}}
}

var availPatterns = []availPattern{
	goPattern("SET NX PX", func(addr string) lockcheck.Locker { return lockcheck.NewGoRedisLocker(addr) }),
	goPattern("EVAL acquire script", newScriptLocker),
	goPattern("bsm/redislock", func(addr string) lockcheck.Locker { return lockcheck.NewRedislockLocker(addr) }),
	goPattern("redsync", func(addr string) lockcheck.Locker { return lockcheck.NewRedsyncLocker(addr) }),
	nodePattern("node redlock 5", "redlock5"),
	nodePattern("node redis-semaphore Mutex", "semaphore"),
	nodePattern("node redis-semaphore Semaphore (sorted set)", "semaphore-n"),
}

// phaseStats is what one phase's measured window saw.
type phaseStats struct {
	name                       string
	window                     time.Duration
	acquires, grants, refusals int
	errors                     int // acquires and releases
	errKinds                   map[string]int
	errSample                  string
	minority                   bool // a minority fault: the bar applies
	majority                   bool // a majority down: errors only
	rate, fraction             float64
}

// phaseDef is one phase of a run: start applies the fault, heal (nil when
// it stays) ends it.
type phaseDef struct {
	name               string
	minority, majority bool
	start, heal        func()
	healed             *faultProxy // waited for after heal
}

// availResults collects every run's phases for the table TestAvailability
// logs at its end.
type availResults struct {
	mu    sync.Mutex
	order []string                // row keys as the runs ended
	rows  map[string][]phaseStats // "pattern | contention" → phases
}

// TestAvailability runs every pattern contended (10 workers on 4 keys) and
// uncontended (a fresh key per attempt) through the phases above and logs
// the grants under each fault as a fraction of the all-up grants.
func TestAvailability(t *testing.T) {
	res := &availResults{rows: map[string][]phaseStats{}}
	for _, p := range availPatterns {
		for _, contended := range []bool{true, false} {
			mode := "uncontended"
			if contended {
				mode = "contended"
			}
			t.Run(strings.ReplaceAll(p.name, " ", "_")+"/"+mode, func(t *testing.T) {
				phases, problems := availRun(t, p, contended)
				if len(problems) > 0 {
					// A rate measured in 600 ms windows on a shared
					// two-core machine: another process's burst can
					// starve one window. A real loss of availability
					// misses the bar again on fresh nodes.
					t.Logf("missed the bar, running again on fresh nodes:\n%s", strings.Join(problems, "\n"))
					if phases, problems = availRun(t, p, contended); len(problems) > 0 {
						t.Error("missed the bar twice:\n" + strings.Join(problems, "\n"))
					}
				}
				res.mu.Lock()
				res.order = append(res.order, p.name+" | "+mode)
				res.rows[p.name+" | "+mode] = phases
				res.mu.Unlock()
			})
		}
	}
	t.Log("grants under each fault as a fraction of all-up (availWindow " + availWindow.String() + " each, first " + availSettle.String() + " after the fault excluded):\n" + res.table())
}

// availRun runs pattern p on fresh nodes through every phase and checks
// each phase's window: it returns the phases and what missed the bar.
func availRun(t *testing.T, p availPattern, contended bool) ([]phaseStats, []string) {
	t.Helper()
	nodes := quorumNodes(t, 3)
	px := make([]*faultProxy, len(nodes))
	for i, n := range nodes {
		px[i] = startFaultProxy(t, n.Addr)
	}
	lp := startQuorumBinary(t, []string{px[0].Addr, px[1].Addr, px[2].Addr})
	cfg := loadConfig{
		Addr: lp.Addr, Prefix: "avail:", Contended: contended,
		Workers: 10, Keys: 4, TTL: 2 * time.Second, Hold: time.Millisecond, OpTimeout: 500 * time.Millisecond,
	}
	ld := p.start(t, cfg)
	stopped := false
	defer func() {
		if !stopped {
			ld.stop(t)
		}
	}()
	for _, x := range px {
		x.waitFlowing(t, 10*time.Second)
	}

	kill := func(i int) func() {
		return func() {
			nodes[i].Kill()
			px[i].refuse()
		}
	}
	defs := []phaseDef{
		{name: "all up"},
		{name: "paused", minority: true, start: nodes[1].Stop, heal: nodes[1].Cont, healed: px[1]},
		{name: "slow", minority: true, start: func() { px[0].setDelay(availSlow) }, heal: func() { px[0].setDelay(0) }, healed: px[0]},
		{name: "partitioned", minority: true, start: px[0].blackhole, heal: px[0].heal, healed: px[0]},
		{name: "killed", minority: true, start: kill(2)},
		{name: "majority down", majority: true, start: kill(1)},
	}
	type span struct{ from, to time.Time }
	spans := make([]span, len(defs))
	for i, d := range defs {
		if d.start != nil {
			d.start()
		}
		w := availWindow
		if d.majority {
			w = availMajorityWindow
		}
		t0 := time.Now()
		time.Sleep(availSettle + w) // the measurement window
		spans[i] = span{t0.Add(availSettle), time.Now()}
		if d.heal != nil {
			d.heal()
			d.healed.waitFlowing(t, 10*time.Second)
			// Each phase measures one fault from a settled state: what
			// the last one left to repair (late writes, lost replies) is
			// repaired first. Left for the next fault, such a key is a
			// second fault of its own: with another node down, the repair
			// must keep it (that node may hold it too), and it splits the
			// two live nodes' votes until its TTL ends (docs/quorum.md).
			waitRepaired(t, lp.Admin, 10*time.Second)
		}
	}
	events := ld.stop(t)
	stopped = true

	stats := make([]phaseStats, len(defs))
	for i, d := range defs {
		s := phaseStats{name: d.name, window: spans[i].to.Sub(spans[i].from), minority: d.minority, majority: d.majority, errKinds: map[string]int{}}
		for _, e := range events {
			if e.start.Before(spans[i].from) || e.end.After(spans[i].to) {
				continue
			}
			if e.op == 'a' {
				s.acquires++
				switch e.out {
				case granted:
					s.grants++
				case refused:
					s.refusals++
				}
			}
			if e.out == failed {
				s.errors++
				s.errKinds[errKind(e.err)]++
				if s.errSample == "" {
					s.errSample = e.err
				}
			}
		}
		s.rate = float64(s.grants) / s.window.Seconds()
		stats[i] = s
	}
	base := stats[0]
	for i := range stats {
		stats[i].fraction = stats[i].rate / base.rate
	}
	return stats, checkAvail(t, stats, contended)
}

// errKind is lockcheck's error kind, or the error's first word for the
// texts only a node client prints.
func errKind(text string) string {
	switch {
	case strings.Contains(text, "TRYAGAIN"):
		return lockcheck.KindTryAgain
	case strings.Contains(text, "timeout"), strings.Contains(text, "Timeout"), strings.Contains(text, "deadline"):
		return lockcheck.KindTimeout
	}
	w, _, _ := strings.Cut(text, " ")
	return w
}

// checkAvail logs a run's phases and returns where they miss the
// availability bar.
func checkAvail(t *testing.T, stats []phaseStats, contended bool) []string {
	t.Helper()
	base := stats[0]
	if base.grants < 20 {
		return []string{fmt.Sprintf("all up: %d grants in %v: too few to judge", base.grants, base.window)}
	}
	var problems []string
	miss := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, s := range stats {
		t.Logf("%-13s acquires %5d grants %5d (%.2f of all up) refusals %5d errors %4d %v %s",
			s.name, s.acquires, s.grants, s.fraction, s.refusals, s.errors, s.errKinds, s.errSample)
		switch {
		case s.majority:
			if s.acquires == 0 {
				miss("%s: no acquire completed in %v", s.name, s.window)
			}
			if s.grants > 0 || s.refusals > 0 {
				miss("%s: %d grants and %d refusals of %d acquires; want errors only (no majority can grant or refuse)",
					s.name, s.grants, s.refusals, s.acquires)
			}
			continue
		case s.minority && s.fraction < availMinFraction:
			miss("%s: %d grants, %.2f of the all-up rate (%d); want ≥ %.1f", s.name, s.grants, s.fraction, base.grants, availMinFraction)
		}
		if s.errors > 0 {
			miss("%s: %d error replies once the fault was steady; want none (%v; first: %s)", s.name, s.errors, s.errKinds, s.errSample)
		}
		if !contended && s.refusals > 0 {
			miss("%s: %d refusals of a free key (each attempt is on a fresh key); want none", s.name, s.refusals)
		}
	}
	return problems
}

// table renders the collected runs as markdown: one row per pattern and
// contention, one column per fault, each cell the grants as a fraction of
// that run's all-up grants (with the errors, when there were any).
func (r *availResults) table() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString("| pattern | contention | all up (grants/s) | paused | slow | partitioned | killed | majority down |\n|---|---|---|---|---|---|---|---|\n")
	for _, k := range r.order {
		ph := r.rows[k]
		fmt.Fprintf(&b, "| %s | %.0f |", k, ph[0].rate)
		for _, s := range ph[1:] {
			switch {
			case s.majority && s.grants == 0 && s.refusals == 0:
				fmt.Fprintf(&b, " errors only (%d) |", s.errors)
			case s.majority:
				fmt.Fprintf(&b, " %d OK, %d nil of %d |", s.grants, s.refusals, s.acquires)
			case s.errors > 0:
				fmt.Fprintf(&b, " %.2f (%d errors) |", s.fraction, s.errors)
			default:
				fmt.Fprintf(&b, " %.2f |", s.fraction)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// waitRepaired polls lockproxy's metrics at admin until no key waits for a
// repair (lockproxy_quorum_repairs_pending 0).
func waitRepaired(t *testing.T, admin string, timeout time.Duration) {
	t.Helper()
	var err error
	if !wait.Poll(timeout, func() bool {
		var resp *http.Response
		if resp, err = http.Get("http://" + admin + "/metrics"); err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), "\nlockproxy_quorum_repairs_pending 0\n")
	}) {
		t.Fatalf("lockproxy still has keys to repair %v after the fault ended (%v)", timeout, err)
	}
}
