package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
)

// PostgreSQL nemeses under a history checker (SPEC §6: no two holders of
// one lock at once under PostgreSQL session loss), for both strategies:
// holder or pool sessions ended with pg_terminate_backend while workers
// contend, and PostgreSQL shut down with -m immediate and started again
// under two lockproxy instances with the workers split across them.

// pgRelease is the compare-and-delete release every lock library sends.
const pgRelease = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// pgHistory is the config of one checked run.
type pgHistory struct {
	addrs    []string // lockproxy instances; worker w uses addrs[w%len]
	workers  int
	keys     int
	ttl      time.Duration
	hold     time.Duration // each grant is held for a random time up to this
	long     time.Duration // if set, one grant in four is held up to this instead
	duration time.Duration
	// minGrants lengthens a run on a busy machine (by up to 20s) until
	// this many grants were made: a run with few proves little.
	minGrants int64
}

// pgGrant is one lock a worker believed it held: from the reply to its
// acquire to min(the start of its release, acquire start + TTL − drift).
type pgGrant struct {
	key        int
	worker     int
	start, end time.Time
}

// pgReport is what a run saw.
type pgReport struct {
	attempts, grants, contended int64
	errors                      map[string]int64
	violations                  int
	worst                       time.Duration
	example                     string
}

// soak returns the run length: LOCKPROXY_SOAK when set (a long run), else
// short.
func soak(t *testing.T, short time.Duration) time.Duration {
	t.Helper()
	if v := os.Getenv("LOCKPROXY_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LOCKPROXY_SOAK=%q: %v", v, err)
		}
		return d
	}
	return short
}

// run runs the workers for h.duration and checks the history. The
// validity of a grant is SPEC §3's: TTL less the drift allowance
// (TTL·0.01 + 2ms), counted from the start of the acquire.
func (h pgHistory) run(t *testing.T) pgReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), h.duration+50*time.Second)
	defer cancel()
	drift := h.ttl/100 + 2*time.Millisecond
	var mu sync.Mutex
	var grants []pgGrant
	rep := pgReport{errors: map[string]int64{}}
	var attempts, contended, grantsMade atomic.Int64
	stopAt := time.Now().Add(h.duration)
	hardStop := stopAt.Add(20 * time.Second)
	running := func() bool {
		now := time.Now()
		return now.Before(stopAt) || grantsMade.Load() < h.minGrants && now.Before(hardStop)
	}
	var wg sync.WaitGroup
	for w := range h.workers {
		c := redis.NewClient(&redis.Options{Addr: h.addrs[w%len(h.addrs)], Protocol: 2, MaxRetries: -1,
			ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
		defer c.Close()
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for n := 0; running(); n++ {
				key := rng.IntN(h.keys)
				name := fmt.Sprintf("nemesis:%d", key)
				tok := fmt.Sprintf("w%d-%d", w, n)
				attempts.Add(1)
				start := time.Now()
				err := c.SetArgs(ctx, name, tok, redis.SetArgs{Mode: "NX", TTL: h.ttl}).Err()
				granted := time.Now()
				switch {
				case errors.Is(err, redis.Nil):
					contended.Add(1)
					time.Sleep(time.Millisecond) // contended: let the holder work
					continue
				case err != nil:
					mu.Lock()
					rep.errors[errClass(err)]++
					mu.Unlock()
					time.Sleep(10 * time.Millisecond) // the backend is away
					continue
				}
				hold := h.hold
				if h.long > 0 && rng.IntN(4) == 0 {
					hold = h.long
				}
				grantsMade.Add(1)
				time.Sleep(time.Duration(rng.Int64N(int64(hold) + 1))) // the critical section
				released := time.Now()
				end := start.Add(h.ttl - drift)
				if released.Before(end) {
					end = released
				}
				mu.Lock()
				grants = append(grants, pgGrant{key, w, granted, end})
				mu.Unlock()
				if err := c.Eval(ctx, pgRelease, []string{name}, tok).Err(); err != nil {
					mu.Lock()
					rep.errors["release: "+errClass(err)]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	rep.attempts, rep.contended, rep.grants = attempts.Load(), contended.Load(), int64(len(grants))
	rep.violations, rep.worst, rep.example = overlaps(grants)
	return rep
}

func errClass(err error) string {
	s := err.Error()
	if i := strings.IndexAny(s, ": "); i > 0 {
		return s[:i]
	}
	return s
}

// overlaps counts the grants of a key that began before an earlier grant
// of that key had ended.
func overlaps(gs []pgGrant) (n int, worst time.Duration, example string) {
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].key != gs[j].key {
			return gs[i].key < gs[j].key
		}
		return gs[i].start.Before(gs[j].start)
	})
	for i := 1; i < len(gs); i++ {
		var prev *pgGrant
		for j := i - 1; j >= 0 && gs[j].key == gs[i].key; j-- {
			if prev == nil || gs[j].end.After(prev.end) {
				prev = &gs[j]
			}
		}
		if prev == nil || !gs[i].start.Before(prev.end) {
			continue
		}
		n++
		if d := prev.end.Sub(gs[i].start); d > worst {
			worst = d
			example = fmt.Sprintf("key %d: worker %d held it until %s, worker %d was granted it %v before that",
				gs[i].key, prev.worker, prev.end.Format("15:04:05.000"), gs[i].worker, d)
		}
	}
	return n, worst, example
}

func (r pgReport) String() string {
	return fmt.Sprintf("%d attempts, %d grants, %d contended, errors %v, %d violations (worst overlap %v)",
		r.attempts, r.grants, r.contended, r.errors, r.violations, r.worst)
}

// check fails the test on a violation and on a run too thin to mean much.
func (r pgReport) check(t *testing.T, minGrants, minContended int64) {
	t.Helper()
	t.Log(r)
	if r.violations > 0 {
		t.Errorf("%d violations: two clients held one lock at once; worst: %s", r.violations, r.example)
	}
	if r.grants < minGrants || r.contended < minContended {
		t.Errorf("only %d grants and %d contended attempts (want ≥ %d and ≥ %d): the run proves little",
			r.grants, r.contended, minGrants, minContended)
	}
}

// startInstance serves one lockproxy instance of strategy on dsn.
func startInstance(t *testing.T, dsn, strategy string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, Strategy: strategy})
	if err != nil {
		t.Fatal(err)
	}
	return testsrv.StartLockproxy(t, proxy.Config{BackendName: "postgres"}, b)
}

// terminator ends one session of the database at random every period
// until stop: a holder session in the advisory strategy, a pool session
// in the lease strategy.
func terminator(t *testing.T, dsn, strategy string, period time.Duration, stop <-chan struct{}) *atomic.Int64 {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	who := `application_name NOT LIKE 'lockproxy holder %'` // the pool's sessions
	if strategy == pgbridge.Advisory {
		who = `application_name LIKE 'lockproxy holder %'`
	}
	sql := `SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND ` + who + ` ORDER BY random() LIMIT 1) s`
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var k int64
			if err := conn.QueryRow(context.Background(), sql).Scan(&k); err == nil {
				n.Add(k)
			}
		}
	}()
	t.Cleanup(func() {
		<-done
		conn.Close(context.Background())
	})
	return &n
}

// TestPostgresNemesisTerminate: holder sessions (advisory) or pool
// sessions (lease) ended with pg_terminate_backend every 300ms while 8
// workers split over two instances contend for 6 keys: no two hold a key
// at once.
func TestPostgresNemesisTerminate(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			a, b := startInstance(t, dsn, strategy), startInstance(t, dsn, strategy)
			stop := make(chan struct{})
			killed := terminator(t, dsn, strategy, 300*time.Millisecond, stop)
			rep := pgHistory{addrs: []string{a, b}, workers: 8, keys: 6, ttl: 500 * time.Millisecond,
				hold: 50 * time.Millisecond, duration: soak(t, 4*time.Second), minGrants: 200}.run(t)
			close(stop)
			t.Logf("%d sessions terminated", killed.Load())
			rep.check(t, 200, 100)
		})
	}
}

// TestPostgresNemesisRestart: PostgreSQL shut down with -m immediate (its
// crash recovery empties the advisory strategy's UNLOGGED lease table) and
// started again while 8 workers split over two instances contend for 6
// keys: no two hold a key at once, across the restart.
func TestPostgresNemesisRestart(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			pg := testsrv.StartPostgres(t)
			dsn := pg.NewDatabase(t)
			a, b := startInstance(t, dsn, strategy), startInstance(t, dsn, strategy)
			h := pgHistory{addrs: []string{a, b}, workers: 8, keys: 6, ttl: 2 * time.Second,
				hold: 50 * time.Millisecond, long: 1500 * time.Millisecond, duration: soak(t, 7*time.Second), minGrants: 150}
			stop := make(chan struct{})
			restarts := make(chan int, 1)
			go func() {
				n := 0
				defer func() { restarts <- n }()
				wait := 1500 * time.Millisecond // grants before the first restart
				for {
					select {
					case <-stop:
						return
					case <-time.After(wait):
					}
					wait = 3 * h.ttl // the advisory strategy's wait after a restart, and grants after it
					down := time.Now()
					pg.Immediate()
					if err := pg.Start(); err != nil {
						t.Error(err)
						return
					}
					t.Logf("PostgreSQL was down for %v", time.Since(down).Round(time.Millisecond))
					n++
					if os.Getenv("LOCKPROXY_SOAK") == "" {
						return
					}
				}
			}()
			rep := h.run(t)
			close(stop)
			t.Logf("%d restarts", <-restarts)
			rep.check(t, 150, 100)
		})
	}
}
