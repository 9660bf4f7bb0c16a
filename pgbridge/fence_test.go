package pgbridge_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

const (
	releaseSrc = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	extendSrc  = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
	// acquireSrc is node redlock's kind of acquire: a script that sets
	// the key when it is absent.
	acquireSrc = `if redis.call("exists", KEYS[1]) == 0 then redis.call("set", KEYS[1], ARGV[1], "PX", 60000) return 1 end return 0`
)

func nx(ttl time.Duration) backend.SetOptions {
	return backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: ttl}}
}

// newBackendCfg is newBackend with a Config of the test's.
func newBackendCfg(t *testing.T, cfg pgbridge.Config) *pgbridge.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cfg.LeaseRowDelay == 0 {
		cfg.LeaseRowDelay = rowDelay(t)
	}
	b, err := pgbridge.New(ctx, cfg)
	if err != nil {
		t.Fatalf("pgbridge.New: %v", err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

// TestFence: the lease of a holder session ended with pg_terminate_backend
// fences its key until its deadline, on the instance that lost it and on
// another, even with the reapers running every 20ms: SET NX answers nil,
// GET the fence token, a release or extend script 0, an acquiring script
// 0, a DEL TRYAGAIN; once the deadline has passed the key is free. A lost
// lock without a TTL fences nothing. (Without fences the other instance
// took the key at once.)
//
// With deferred rows (LeaseRowDelay 200ms) the lease ends before its row
// is written: the session's rowless_until_ms fences every key instead, the
// lock without a TTL's too, until the losing instance notices the loss
// and writes the fence rows of its row-less leases (deferred.go).
func TestFence(t *testing.T) {
	for _, delay := range []time.Duration{0, 200 * time.Millisecond} {
		t.Run(fmt.Sprintf("row-delay=%v", delay), func(t *testing.T) {
			t.Parallel()
			testFence(t, delay)
		})
	}
}

// killHolders ends, with pg_terminate_backend, the sessions holding the
// advisory locks of keys (database 0), and waits until they are gone.
func killHolders(t *testing.T, dsn string, keys ...string) {
	t.Helper()
	ctx := t.Context()
	sql, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sql.Close(context.Background())
	const holders = `SELECT p.pid FROM pg_locks p JOIN unnest($1::text[]) k ON p.locktype = 'advisory' AND p.granted AND p.objsubid = 1
		AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND p.classid = ((hashtextextended(k, 0) >> 32) & 4294967295)::oid AND p.objid = (hashtextextended(k, 0) & 4294967295)::oid`
	var pids []int32
	rows, err := sql.Query(ctx, holders, keys)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if rows.Close(); rows.Err() != nil || len(pids) == 0 {
		t.Fatalf("holders of %q: %v, %v", keys, pids, rows.Err())
	}
	if _, err := sql.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid`, pids); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; {
		var n int
		if err := sql.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatal("the terminated holder sessions are still there after 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling for the sessions' exit
	}
}

func testFence(t *testing.T, delay time.Duration) {
	ctx := t.Context()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	cfg := pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory, ReapInterval: 20 * time.Millisecond, LeaseRowDelay: delay}
	a, b := newBackendStrict(t, cfg), newBackendStrict(t, cfg)
	// A deferred lease's fence lasts until the session's rowless_until_ms:
	// its deadline plus up to a second.
	maxLeft := ttlOf(delay, 5*time.Second)
	const ttl = 5 * time.Second
	start := time.Now() // validity counts from the acquire's start
	if r, err := a.Set(ctx, 0, "f", []byte("tok"), nx(ttl)); err != nil || !r.Written {
		t.Fatalf("SET NX = %+v, %v", r, err)
	}
	if r, err := a.Set(ctx, 0, "forever", []byte("tok"), backend.SetOptions{Cond: backend.IfAbsent}); err != nil || !r.Written {
		t.Fatalf("SET NX without TTL = %+v, %v", r, err)
	}
	// End a's holder sessions and wait until PostgreSQL has let go of them.
	killHolders(t, dsn, "f", "forever")
	// The lock without a TTL is lost: the other instance takes it (with
	// deferred rows once the losing instance has noticed the loss and
	// written the row-less leases' fence rows, before f's deadline).
	for {
		r, err := b.Set(ctx, 0, "forever", []byte("b"), nx(time.Minute))
		if err == nil && r.Written {
			break
		}
		if err != nil || delay == 0 || time.Since(start) > ttl-time.Second {
			t.Fatalf("SET NX of a lost lock without TTL %v after the grants = %+v, %v; want written", time.Since(start), r, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for the losing instance's fence rows
	}
	for _, tc := range []struct {
		name string
		be   *pgbridge.Backend
	}{{"other instance", b}, {"losing instance", a}} {
		be := tc.be
		r, err := be.Set(ctx, 0, "f", []byte("new"), nx(time.Minute))
		if err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") && tc.be == a {
			r, err = be.Set(ctx, 0, "f", []byte("new"), nx(time.Minute)) // a may learn of its loss on this statement
		}
		if err != nil || r.Written {
			t.Errorf("%s: SET NX on a fence = %+v, %v; want not written", tc.name, r, err)
		}
		ev := func(src string, args ...string) (backend.Value, error) {
			bs := make([][]byte, len(args))
			for i, s := range args {
				bs[i] = []byte(s)
			}
			return be.Eval(ctx, 0, scriptOf(src), []string{"f"}, bs, false)
		}
		for _, s := range []struct {
			name, src string
			args      []string
		}{{"release", releaseSrc, []string{"tok"}}, {"extend", extendSrc, []string{"tok", "60000"}}, {"acquire", acquireSrc, []string{"new"}}} {
			v, err := ev(s.src, s.args...)
			if err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") && tc.be == a {
				v, err = ev(s.src, s.args...) // a may learn of its loss on this statement
			}
			if err != nil || v.Int != 0 {
				t.Errorf("%s: %s script on a fence = %+v, %v; want 0", tc.name, s.name, v, err)
			}
		}
		if tok, ok, err := be.Get(ctx, 0, "f"); err != nil || !ok || string(tok) != "lockproxy:lost-lease" {
			t.Errorf("%s: GET of a fence = %q, %v, %v; want the fence token", tc.name, tok, ok, err)
		}
		if ms, err := be.PTTL(ctx, 0, "f"); err != nil || ms <= 0 || ms > maxLeft.Milliseconds() {
			t.Errorf("%s: PTTL of a fence = %d, %v; want the time left", tc.name, ms, err)
		}
		if _, err := be.Del(ctx, 0, []string{"f"}); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Errorf("%s: DEL of a fence = %v; want TRYAGAIN", tc.name, err)
		}
	}
	for end := time.Now().Add(20 * time.Second); ; {
		r, err := b.Set(ctx, 0, "f", []byte("after"), nx(time.Minute))
		if err == nil && r.Written {
			if took := time.Since(start); took < ttl-ttl/100-2*time.Millisecond {
				t.Fatalf("the fenced key was granted again %v after the lost lease's grant, before its %v TTL", took, ttl)
			}
			break
		}
		if err != nil || time.Now().After(end) {
			t.Fatalf("SET NX after the fence = %+v, %v", r, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for the deadline
	}
}

// ttlOf is the longest PTTL TestFence's fence of a lease of ttl may show.
func ttlOf(delay, ttl time.Duration) time.Duration {
	if delay == 0 {
		return ttl
	}
	return ttl + time.Second + delay
}

// TestRestartQuarantine: PostgreSQL restarted under two instances, each
// holding a lease (one with its row, one row-less): a clean restart (-m
// fast) keeps the lease table, a crash (-m immediate, SIGKILL of the
// postmaster) empties it. Either way the instances that granted the
// leases fence exactly their keys again: until the leases' TTLs, SET NX
// of those keys answers nil on every instance, one started after the
// restart included, and the owners' releases 0; every other key is
// granted within 5 s of PostgreSQL's return. (Before, every key waited
// for the longest TTL: 8 s here, 5 minutes in the field.)
func TestRestartQuarantine(t *testing.T) {
	for _, mode := range []string{"fast", "immediate", "kill"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pg := testsrv.StartPostgres(t)
			dsn := pg.NewDatabase(t)
			a := newBackendCfg(t, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory})
			b := newBackendCfg(t, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory})
			const ttl = 8 * time.Second // far beyond a restart's few seconds
			start := time.Now()         // validity counts from the acquire's start
			// q: row-less at first (deferred.go) on a; r: a row at once
			// (a TTL beyond maxDeferredTTL, then shortened by PEXPIRE) on b.
			if r, err := a.Set(ctx, 0, "q", []byte("tok"), nx(ttl)); err != nil || !r.Written {
				t.Fatalf("SET NX = %+v, %v", r, err)
			}
			if r, err := b.Set(ctx, 0, "r", []byte("tok"), nx(2*time.Minute)); err != nil || !r.Written {
				t.Fatalf("SET NX = %+v, %v", r, err)
			}
			if v, err := b.Eval(ctx, 0, scriptOf(extendSrc), []string{"r"}, [][]byte{[]byte("tok"), []byte(strconv.Itoa(int(ttl.Milliseconds())))}, false); err != nil || v.Int != 1 {
				t.Fatalf("extend = %+v, %v", v, err)
			}
			switch mode {
			case "fast":
				pg.Stop()
			case "immediate":
				pg.Immediate()
			case "kill":
				pg.Kill()
			}
			if err := pg.Start(); err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			c := newBackendCfg(t, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory})
			if time.Since(start) > ttl-2*time.Second {
				t.Fatalf("the restart took %v: too long for a %v lease to tell", time.Since(start), ttl)
			}
			var wg sync.WaitGroup
			for _, be := range []struct {
				name string
				b    *pgbridge.Backend
			}{{"a", a}, {"b", b}, {"c (started after)", c}} {
				wg.Go(func() {
					for _, key := range []string{"q", "r"} {
						for end := time.Now().Add(30 * time.Second); ; {
							r, err := be.b.Set(ctx, 0, key, []byte("new"), nx(100*time.Millisecond)) // short: the others get it after
							if err == nil && r.Written {
								if took := time.Since(start); took < ttl-ttl/100-2*time.Millisecond {
									t.Errorf("%s: %s granted %v after a %v lease from before the restart was asked for", be.name, key, took, ttl)
								}
								break
							}
							if err != nil && !strings.HasPrefix(err.Error(), "TRYAGAIN") || time.Now().After(end) {
								t.Errorf("%s: SET NX %s after the restart = %+v, %v", be.name, key, r, err)
								return
							}
							time.Sleep(20 * time.Millisecond) // polling for the lease's end
						}
					}
				})
				wg.Go(func() {
					key := "free:" + be.name
					for {
						r, err := be.b.Set(ctx, 0, key, []byte("new"), nx(time.Minute))
						if err == nil && r.Written {
							if took := time.Since(back); took > 5*time.Second {
								t.Errorf("%s: a key nobody held was granted %v after PostgreSQL was back; want within 5 s", be.name, took)
							}
							return
						}
						if err != nil && !strings.HasPrefix(err.Error(), "TRYAGAIN") || time.Since(back) > 30*time.Second {
							t.Errorf("%s: SET NX of a free key after the restart = %+v, %v", be.name, r, err)
							return
						}
						time.Sleep(20 * time.Millisecond) // polling for the reconnect
					}
				})
			}
			wg.Wait()
			// The owners lost their leases: their releases answer 0.
			for _, o := range []struct {
				b   *pgbridge.Backend
				key string
			}{{a, "q"}, {b, "r"}} {
				if v, err := o.b.Eval(ctx, 0, scriptOf(releaseSrc), []string{o.key}, [][]byte{[]byte("tok")}, false); err != nil || v.Int != 0 {
					t.Errorf("release of %s by its lost owner = %+v, %v; want 0", o.key, v, err)
				}
			}
		})
	}
}

// TestLostLockWithoutTTLFreesKey: the row of a lock without a TTL whose
// holder session is gone (an instance that crashed: its session ended,
// its row stays until a reaper deletes it) fences nothing, so another
// instance takes the key at once rather than answering nil until the next
// reap. (fencedBy was NULL, not false, for a NULL deadline, and the
// acquire's ON CONFLICT … WHERE NOT NULL left the row and refused.)
func TestLostLockWithoutTTLFreesKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	cfg := pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory, ReapInterval: time.Hour}
	b := newBackendCfg(t, cfg)
	sql, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sql.Close(context.Background())
	// The crashed instance's row: no deadline, a holder session that no
	// longer exists (pid 0 is never a backend's).
	if _, err := sql.Exec(ctx, `INSERT INTO lockproxy.leases (db, key, lock_id, token, deadline_ms, holder, holder_pid)
		VALUES (0, 'gone', hashtextextended('gone', 0), 'old', NULL, 'crashed-instance', 0),
			(0, 'gone-script', hashtextextended('gone-script', 0), 'old', NULL, 'crashed-instance', 0)`); err != nil {
		t.Fatal(err)
	}
	if tok, ok, err := b.Get(ctx, 0, "gone"); err != nil || ok {
		t.Fatalf("GET of a lost lock = %q, %v, %v; want absent", tok, ok, err)
	}
	if r, err := b.Set(ctx, 0, "gone", []byte("new"), backend.SetOptions{Cond: backend.IfAbsent}); err != nil || !r.Written {
		t.Fatalf("SET NX over a lost lock without TTL = %+v, %v; want written", r, err)
	}
	// An acquiring script writes its row on the general path (advTx.commit).
	if v, err := b.Eval(ctx, 0, scriptOf(acquireSrc), []string{"gone-script"}, [][]byte{[]byte("new")}, false); err != nil || v.Int != 1 {
		t.Fatalf("acquiring script over a lost lock without TTL = %+v, %v; want 1", v, err)
	}
	if tok, ok, err := b.Get(ctx, 0, "gone"); err != nil || !ok || string(tok) != "new" {
		t.Fatalf("GET = %q, %v, %v; want new", tok, ok, err)
	}
}

// TestBackendCrashQuarantine: one PostgreSQL backend killed (as the OOM
// killer would) makes the postmaster reinitialise: every session ends and
// the UNLOGGED tables are emptied, but pg_postmaster_start_time() stays.
// No instance may grant a lock that was held before it until that lock's
// lease has ended (a second instance did, before the incarnation mark).
func TestBackendCrashQuarantine(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg := testsrv.StartPostgres(t)
	dsn := pg.NewDatabase(t)
	a := newBackendCfg(t, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory})
	b := newBackendCfg(t, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory})
	const ttl = 6 * time.Second
	start := time.Now()
	if r, err := a.Set(ctx, 0, "crash", []byte("tok"), nx(ttl)); err != nil || !r.Written {
		t.Fatalf("SET NX = %+v, %v", r, err)
	}
	victim, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := victim.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(30 * time.Second); ; {
		r, err := b.Set(ctx, 0, "crash", []byte("other"), nx(time.Second))
		if err == nil && r.Written {
			if took := time.Since(start); took < ttl-ttl/100-2*time.Millisecond {
				t.Fatalf("granted %v after a %v lease from before the backend crash", took, ttl)
			}
			return
		}
		if time.Now().After(end) {
			t.Fatalf("SET NX after the crash = %+v, %v; never granted", r, err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the reconnect and the quarantine's end
	}
}
