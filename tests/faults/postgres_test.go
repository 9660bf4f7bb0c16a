package faults

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/lockcheck"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/internal/testsrv/wait"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
)

// PostgreSQL nemeses under a history checker (docs/safety.md: no two holders of
// one lock at once under PostgreSQL session loss), for both strategies:
// holder or pool sessions ended with pg_terminate_backend while workers
// contend, and PostgreSQL shut down with -m immediate and started again
// under two lockproxy instances with the workers split across them.

// pgCheck runs cfg's workload with fenced go-redis lockers (SET NX PX and
// the fence in one script, the compare-and-delete release) spread over the
// instances at addrs: each key's fences must grow through the nemesis.
func pgCheck(t *testing.T, cfg lockcheck.Config, addrs ...string) *lockcheck.Report {
	t.Helper()
	cfg.NewLocker = func(w int) lockcheck.Locker { return lockcheck.NewFencedLocker(addrs[w%len(addrs)]) }
	rep, err := lockcheck.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// pgCheckUntil runs cfg's workload again, while the nemesis goes on, until
// the runs together made minGrants grants (a busy machine makes few), for
// at most a minute more. Every run ends with its holders' releases, so no
// grant spans two runs and checking each run alone misses no overlap.
func pgCheckUntil(t *testing.T, cfg lockcheck.Config, minGrants int64, addrs ...string) *lockcheck.Report {
	t.Helper()
	total := pgCheck(t, cfg, addrs...)
	for end := time.Now().Add(time.Minute); total.Grants < minGrants && time.Now().Before(end); {
		r := pgCheck(t, cfg, addrs...)
		total.Elapsed += r.Elapsed
		total.Attempts += r.Attempts
		total.Grants += r.Grants
		total.Contended += r.Contended
		total.Late += r.Late
		if total.Errors == nil {
			total.Errors = map[string]int64{}
		}
		for k, v := range r.Errors {
			total.Errors[k] += v
		}
		total.Violations = append(total.Violations, r.Violations...)
		total.FenceViolations = append(total.FenceViolations, r.FenceViolations...)
		total.WorstOverlap = max(total.WorstOverlap, r.WorstOverlap)
	}
	return total
}

// pgVerdict fails the test on a violation, and on a run too thin to mean
// much (errors are allowed: TRYAGAIN while sessions or PostgreSQL are away).
func pgVerdict(t *testing.T, name, strategy string, rep *lockcheck.Report, minGrants int64) {
	t.Helper()
	t.Logf("%s (%s): %s", name, strategy, rep)
	appendRow(t, nemesis{Name: name, Backend: "postgres " + strategy, Client: "fenced"}, rep)
	if !rep.Fenced || len(rep.FenceViolations) > 0 {
		t.Errorf("%s: fenced %v, %d fence violations: a grant's fence was not above an earlier grant's", name, rep.Fenced, len(rep.FenceViolations))
	}
	if len(rep.Violations) > 0 {
		t.Errorf("%s: %d violations: two clients held one lock at once (worst overlap %v)", name, len(rep.Violations), rep.WorstOverlap)
	}
	if rep.Grants < minGrants || rep.Contended == 0 {
		t.Errorf("%s: %d grants and %d contended attempts (want ≥ %d and some): the run proves little", name, rep.Grants, rep.Contended, minGrants)
	}
}

// pgInstance serves one lockproxy instance of strategy on dsn.
func pgInstance(t *testing.T, dsn, strategy string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, Strategy: strategy, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
	if err != nil {
		t.Fatal(err)
	}
	return testsrv.StartLockproxy(t, proxy.Config{BackendName: "postgres"}, b)
}

// pgTerminator ends one session of the database at random every period
// until stop: a holder session in the advisory strategy, a pool session
// in the lease strategy.
func pgTerminator(t *testing.T, dsn, strategy string, period time.Duration, stop <-chan struct{}) *atomic.Int64 {
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
// at once. (Before fences the advisory strategy failed it: 11-12
// violations in 4s.)
func TestPostgresNemesisTerminate(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			a, b := pgInstance(t, dsn, strategy), pgInstance(t, dsn, strategy)
			stop := make(chan struct{})
			killed := pgTerminator(t, dsn, strategy, 300*time.Millisecond, stop)
			rep := pgCheckUntil(t, lockcheck.Config{Workers: 8, Keys: 6, Prefix: "nemesis:", TTL: 500 * time.Millisecond,
				Hold: 30 * time.Millisecond, Duration: runDurationOr(t, 3*time.Second)}, 100, a, b)
			close(stop)
			t.Logf("%d sessions terminated", killed.Load())
			pgVerdict(t, "pg_terminate_backend of a session every 300ms", strategy, rep, 100)
		})
	}
}

// TestPostgresNemesisRestart: PostgreSQL shut down as pg_ctl stop -m
// immediate does (its crash recovery empties the advisory strategy's
// UNLOGGED lease table) and started again, under two instances with the
// workers split across them. Two workloads run at once: long holds (8
// workers on 4 keys, held 1-3s of a 4s TTL: holders that outlive the
// outage, whose locks must not be granted again before their TTL), and
// short ones (8 workers on 6 keys) for the volume. No two clients hold a
// key at once. (Before the restart wait the advisory strategy failed it.)
func TestPostgresNemesisRestart(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel() // own clusters; the wait after the restart is mostly idle
			pg := testsrv.StartPostgres(t)
			dsn := pg.NewDatabase(t)
			a, b := pgInstance(t, dsn, strategy), pgInstance(t, dsn, strategy)
			const longTTL = 4 * time.Second
			d := runDurationOr(t, 10*time.Second)
			stop := make(chan struct{})
			restarts := make(chan int, 1)
			go func() {
				n := 0
				defer func() { restarts <- n }()
				wait := 2 * time.Second // grants before the first restart
				for {
					select {
					case <-stop:
						return
					case <-time.After(wait):
					}
					wait = 3 * longTTL // the advisory strategy's wait after a restart, and grants after it
					down := time.Now()
					pg.Immediate()
					if err := pg.Start(); err != nil {
						t.Error(err)
						return
					}
					n++
					t.Logf("PostgreSQL was down for %v", time.Since(down).Round(time.Millisecond))
					if os.Getenv("LOCKPROXY_SOAK") == "" {
						return
					}
				}
			}()
			var long, short *lockcheck.Report
			var wg sync.WaitGroup
			wg.Go(func() {
				long = pgCheck(t, lockcheck.Config{Workers: 8, Keys: 4, Prefix: "long:", TTL: longTTL,
					Hold: 2 * time.Second, Duration: d}, a, b)
			})
			wg.Go(func() {
				short = pgCheck(t, lockcheck.Config{Workers: 8, Keys: 6, Prefix: "short:", TTL: time.Second,
					Hold: 20 * time.Millisecond, Duration: d}, a, b)
			})
			wg.Wait()
			close(stop)
			t.Logf("%d restarts", <-restarts)
			pgVerdict(t, "restart -m immediate, long holds (1-3s of a 4s TTL)", strategy, long, 3)
			pgVerdict(t, "restart -m immediate, short holds", strategy, short, 50)
		})
	}
}

// TestPostgresNemesisRestartModes: PostgreSQL restarted each way an
// operator or a failure restarts it (pg_ctl restart -m fast, -m
// immediate, a SIGKILL of the postmaster) under two advisory instances,
// with the workers split across them: long holds that outlive the restart
// and short ones for the volume, as TestPostgresNemesisRestart. No two
// clients hold a key at once, and a key nobody held is granted again,
// through either instance, within 5 s of PostgreSQL accepting connections
// (the instances fence again exactly the leases they held), while a lock
// with a minute's TTL held through the restart keeps its key fenced.
// Before, a restart stopped every grant for the longest TTL granted (that
// minute), after a clean restart as after a crash.
func TestPostgresNemesisRestartModes(t *testing.T) {
	for _, mode := range []string{"fast", "immediate", "kill"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // own clusters
			pg := testsrv.StartPostgres(t)
			dsn := pg.NewDatabase(t)
			a, b := pgInstance(t, dsn, pgbridge.Advisory), pgInstance(t, dsn, pgbridge.Advisory)
			const longTTL = 4 * time.Second
			d := runDurationOr(t, 9*time.Second)
			var resumed [2]time.Duration
			var restartErr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				select {
				case <-t.Context().Done():
					return
				case <-time.After(2 * time.Second): // grants before the restart
				}
				// One lock with a long TTL, held through the restart: its
				// key alone waits for it.
				c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
				defer c.Close()
				if restartErr = c.SetArgs(t.Context(), "held:long", "tok", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); restartErr != nil {
					return
				}
				switch mode {
				case "fast":
					pg.Stop()
				case "immediate":
					pg.Immediate()
				case "kill":
					pg.Kill()
				}
				if restartErr = pg.Start(); restartErr != nil {
					return
				}
				back := time.Now()
				var wg sync.WaitGroup
				for i, addr := range []string{a, b} {
					wg.Go(func() {
						c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
						defer c.Close()
						n := 0
						if !wait.Poll(30*time.Second, func() bool {
							n++
							key := fmt.Sprintf("probe:%d:%d", i, n) // never held: a fresh key each time
							return c.SetArgs(t.Context(), key, "tok", redis.SetArgs{Mode: "NX", TTL: time.Second}).Err() == nil
						}) {
							resumed[i] = -1
							return
						}
						resumed[i] = time.Since(back)
					})
				}
				wg.Wait()
				if err := c.SetArgs(t.Context(), "held:long", "new", redis.SetArgs{Mode: "NX", TTL: time.Second}).Err(); err != redis.Nil {
					t.Errorf("SET NX of the key held through the restart = %v; want nil (fenced until its TTL)", err)
				}
			}()
			var long, short *lockcheck.Report
			var wg sync.WaitGroup
			wg.Go(func() {
				long = pgCheck(t, lockcheck.Config{Workers: 8, Keys: 4, Prefix: "long:", TTL: longTTL,
					Hold: 2 * time.Second, Duration: d}, a, b)
			})
			wg.Go(func() {
				// Runs again after the restart until 50 grants in all: a
				// loaded machine grants few around the restart itself.
				short = pgCheckUntil(t, lockcheck.Config{Workers: 8, Keys: 6, Prefix: "short:", TTL: time.Second,
					Hold: 20 * time.Millisecond, Duration: d}, 50, a, b)
			})
			wg.Wait()
			<-done
			if restartErr != nil {
				t.Fatal(restartErr)
			}
			name := "restart -m " + mode
			if mode == "kill" {
				name = "SIGKILL of the postmaster, start"
			}
			pgVerdict(t, name+", long holds (1-3s of a 4s TTL)", pgbridge.Advisory, long, 3)
			pgVerdict(t, name+", short holds", pgbridge.Advisory, short, 50)
			for i, took := range resumed {
				if took < 0 {
					t.Errorf("instance %d: a key nobody held was not granted within 30 s of PostgreSQL's return", i)
					continue
				}
				t.Logf("instance %d granted a free key %v after PostgreSQL was back", i, took.Round(time.Millisecond))
				if took > 5*time.Second {
					t.Errorf("instance %d: a key nobody held was granted %v after PostgreSQL was back; want within 5 s", i, took)
				}
			}
		})
	}
}
