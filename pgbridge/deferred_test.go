package pgbridge_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// deferredDelay is the row delay of the multi-instance tests: long enough
// that a round of commands from every instance ends within it on a busy
// machine (checked: the row must still be missing afterwards).
const deferredDelay = 2 * time.Second

// rowOf reports whether key (database 0) has a lease row.
func rowOf(t *testing.T, sql *pgx.Conn, key string) bool {
	t.Helper()
	var n int
	if err := sql.QueryRow(t.Context(), `SELECT count(*) FROM lockproxy.leases WHERE db = 0 AND key = $1`, []byte(key)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// waitRow waits until key has a lease row.
func waitRow(t *testing.T, sql *pgx.Conn, key string) {
	t.Helper()
	for end := time.Now().Add(deferredDelay + 10*time.Second); !rowOf(t, sql, key); {
		if time.Now().After(end) {
			t.Fatalf("no lease row for %q %v after its grant", key, deferredDelay+10*time.Second)
		}
		time.Sleep(20 * time.Millisecond) // polling for the row timer
	}
}

func evalInt(t *testing.T, be *pgbridge.Backend, src, key string, args ...string) int64 {
	t.Helper()
	bs := make([][]byte, len(args))
	for i, a := range args {
		bs[i] = []byte(a)
	}
	v, err := be.Eval(t.Context(), 0, scriptOf(src), []string{key}, bs, false)
	if err != nil {
		t.Fatalf("EVAL on %q: %v", key, err)
	}
	return v.Int
}

// sees checks what every instance answers for key: GET, EXISTS, PTTL
// (within (0, maxTTL] when present) and SET NX (never written while
// present).
func sees(t *testing.T, name string, bes []*pgbridge.Backend, key, tok string, maxTTL time.Duration) {
	t.Helper()
	ctx := t.Context()
	for i, be := range bes {
		got, ok, err := be.Get(ctx, 0, key)
		if err != nil || ok != (tok != "") || string(got) != tok {
			t.Errorf("%s: instance %d: GET %s = %q, %v, %v; want %q", name, i, key, got, ok, err, tok)
		}
		n, err := be.Exists(ctx, 0, []string{key})
		if want := map[bool]int64{true: 1, false: 0}[tok != ""]; err != nil || n != want {
			t.Errorf("%s: instance %d: EXISTS %s = %d, %v; want %d", name, i, key, n, err, want)
		}
		ms, err := be.PTTL(ctx, 0, key)
		switch {
		case err != nil:
			t.Errorf("%s: instance %d: PTTL %s: %v", name, i, key, err)
		case tok == "" && ms != -2:
			t.Errorf("%s: instance %d: PTTL %s = %d; want -2", name, i, key, ms)
		case tok != "" && (ms <= 0 || ms > maxTTL.Milliseconds()):
			t.Errorf("%s: instance %d: PTTL %s = %d; want in (0, %d]", name, i, key, ms, maxTTL.Milliseconds())
		}
		if tok != "" {
			if r, err := be.Set(ctx, 0, key, []byte("other"), nx(time.Minute)); err != nil || r.Written {
				t.Errorf("%s: instance %d: SET NX %s on a held key = %+v, %v; want not written", name, i, key, r, err)
			}
		}
	}
}

// TestDeferredMultiInstance: with two and with three instances, a lock
// one instance took answers the same from every instance, within the row
// delay (no row: the others ask pg_locks and route to the holder) and
// after it (the row): GET, PTTL, EXISTS, SET NX, a release script (a
// wrong token, then the right one) and an extend script.
func TestDeferredMultiInstance(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("instances=%d", n), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			var bes []*pgbridge.Backend
			for range n {
				bes = append(bes, newBackendStrict(t, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory, LeaseRowDelay: deferredDelay}))
			}
			sql, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer sql.Close(context.Background())
			const ttl = 30 * time.Second
			for _, phase := range []string{"within", "after"} {
				for holder := range n {
					key := fmt.Sprintf("%s:%d", phase, holder)
					tok := "tok-" + key
					if r, err := bes[holder].Set(ctx, 0, key, []byte(tok), nx(ttl)); err != nil || !r.Written {
						t.Fatalf("SET NX %s = %+v, %v", key, r, err)
					}
					if phase == "after" {
						waitRow(t, sql, key)
					}
					sees(t, phase, bes, key, tok, ttl)
					for i, be := range bes {
						if i == holder {
							continue
						}
						if got := evalInt(t, be, releaseSrc, key, "wrong"); got != 0 {
							t.Errorf("%s: instance %d: release of %s with a wrong token = %d; want 0", phase, i, key, got)
						}
					}
					ext := (holder + 1) % n // another instance extends it
					if got := evalInt(t, bes[ext], extendSrc, key, tok, strconv.Itoa(int(2*ttl/time.Millisecond))); got != 1 {
						t.Errorf("%s: instance %d: extend of %s = %d; want 1", phase, ext, key, got)
					}
					sees(t, phase+", extended", bes, key, tok, 2*ttl)
					if ms, err := bes[holder].PTTL(ctx, 0, key); err != nil || ms <= ttl.Milliseconds() {
						t.Errorf("%s: PTTL %s after the extend = %d, %v; want above %d", phase, key, ms, err, ttl.Milliseconds())
					}
					rel := (holder + n - 1) % n // and another (or the same) releases it
					if got := evalInt(t, bes[rel], releaseSrc, key, tok); got != 1 {
						t.Errorf("%s: instance %d: release of %s = %d; want 1", phase, rel, key, got)
					}
					sees(t, phase+", released", bes, key, "", 0)
					if rowOf(t, sql, key) {
						t.Errorf("%s: %s has a row after its release", phase, key)
					}
					if r, err := bes[ext].Set(ctx, 0, key, []byte("again"), nx(time.Second)); err != nil || !r.Written {
						t.Errorf("%s: SET NX %s after its release = %+v, %v; want written", phase, key, r, err)
					}
				}
				// Reads and writes from every instance on a row-less lock,
				// this time without an extend (which writes the row).
				key := phase + ":plain"
				if r, err := bes[0].Set(ctx, 0, key, []byte("p"), nx(ttl)); err != nil || !r.Written {
					t.Fatalf("SET NX %s = %+v, %v", key, r, err)
				}
				if phase == "within" {
					sees(t, phase, bes, key, "p", ttl)
					if got := evalInt(t, bes[n-1], releaseSrc, key, "p"); got != 1 {
						t.Errorf("%s: release of %s from instance %d = %d; want 1", phase, key, n-1, got)
					}
					if rowOf(t, sql, key) {
						t.Errorf("%s: %s has had a row: the round took longer than the row delay", phase, key)
					}
				}
			}
		})
	}
}

// TestDeferredHolderKilled: the instance holding a lock is closed (its
// holder sessions end) before and after the lock's row is written. Either
// way, every other instance keeps the key fenced until the lock's deadline
// (SET NX nil, GET the fence token), then grants it, and other keys are
// free at once: before the row, Close writes it (drain) and its sessions
// lower their rowless_until_ms; after the row, the sessions lowered it at
// their ping. (A SIGKILL skips the drain: TestPostgresInstanceKilled.)
// With three instances, one of the others runs with a row delay of 0s.
func TestDeferredHolderKilled(t *testing.T) {
	for _, phase := range []string{"within", "after"} {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/instances=%d", phase, n), func(t *testing.T) {
				t.Parallel()
				testHolderKilled(t, phase, n)
			})
		}
	}
}

func testHolderKilled(t *testing.T, phase string, n int) {
	ctx := t.Context()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	cfg := pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory, LeaseRowDelay: 300 * time.Millisecond, ReapInterval: 20 * time.Millisecond}
	killed, err := pgbridge.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// With three instances the third writes its rows at once (0s): it
	// must honour the ended session's rowless_until_ms all the same.
	var others []*pgbridge.Backend
	for i := range n - 1 {
		c := cfg
		if i == 1 {
			c.LeaseRowDelay = 0
		}
		others = append(others, newBackendStrict(t, c))
	}
	sql, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sql.Close(context.Background())
	const ttl = 3 * time.Second
	start := time.Now()
	if r, err := killed.Set(ctx, 0, "k", []byte("tok"), nx(ttl)); err != nil || !r.Written {
		t.Fatalf("SET NX = %+v, %v", r, err)
	}
	raised := func() int {
		var n int
		if err := sql.QueryRow(ctx, `SELECT count(*) FROM lockproxy.sessions WHERE rowless_until_ms > 0`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if phase == "after" {
		waitRow(t, sql, "k")
		// Its session has no row-less lock left: it lowers its
		// rowless_until_ms (within a second, at its next ping).
		for end := time.Now().Add(5 * time.Second); raised() > 0; {
			if time.Now().After(end) {
				t.Fatal("the holder session's rowless_until_ms was not lowered within 5s of its last row-less lock's row")
			}
			time.Sleep(20 * time.Millisecond) // polling for the holder's ping
		}
	} else if rowOf(t, sql, "k") || raised() != 1 {
		t.Fatalf("after the grant: row %v, raised sessions %d; want no row and one raised session", rowOf(t, sql, "k"), raised())
	}
	if phase == "within" && rowOf(t, sql, "k") {
		t.Fatal("the lock had a row before its holder was closed: not within the row delay")
	}
	killed.Close(context.Background())
	if !rowOf(t, sql, "k") || raised() != 0 {
		t.Fatalf("after Close: row %v, raised sessions %d; want the row (written by the drain) and none raised", rowOf(t, sql, "k"), raised())
	}
	maxLeft := ttl
	for i, be := range others {
		if r, err := be.Set(ctx, 0, "k", []byte("new"), nx(time.Minute)); err != nil || r.Written {
			t.Errorf("instance %d: SET NX on the killed holder's key = %+v, %v; want not written", i, r, err)
		}
		if tok, ok, err := be.Get(ctx, 0, "k"); err != nil || !ok || string(tok) != "lockproxy:lost-lease" {
			t.Errorf("instance %d: GET = %q, %v, %v; want the fence token", i, tok, ok, err)
		}
		if ms, err := be.PTTL(ctx, 0, "k"); err != nil || ms <= 0 || ms > maxLeft.Milliseconds() {
			t.Errorf("instance %d: PTTL = %d, %v; want in (0, %d]", i, ms, err, maxLeft.Milliseconds())
		}
		if got := evalInt(t, be, releaseSrc, "k", "tok"); got != 0 {
			t.Errorf("instance %d: release by the lost owner = %d; want 0", i, got)
		}
		if _, err := be.Del(ctx, 0, []string{"k"}); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Errorf("instance %d: DEL = %v; want TRYAGAIN", i, err)
		}
		if r, err := be.Set(ctx, 0, fmt.Sprintf("unrelated:%d", i), []byte("x"), nx(time.Minute)); err != nil || !r.Written {
			t.Errorf("instance %d: SET NX of another key = %+v, %v; want written", i, r, err)
		}
	}
	for end := time.Now().Add(20 * time.Second); ; {
		r, err := others[len(others)-1].Set(ctx, 0, "k", []byte("after"), nx(time.Minute))
		if err == nil && r.Written {
			if took := time.Since(start); took < ttl-ttl/100-2*time.Millisecond {
				t.Fatalf("the key was granted again %v after the killed holder's grant, before its %v TTL", took, ttl)
			}
			break
		}
		if err != nil || time.Now().After(end) {
			t.Fatalf("SET NX after the fence = %+v, %v", r, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for the deadline
	}
	for i, be := range others {
		if tok, ok, err := be.Get(ctx, 0, "k"); err != nil || !ok || string(tok) != "after" {
			t.Errorf("instance %d: GET after the fence = %q, %v, %v; want after", i, tok, ok, err)
		}
	}
}

// TestLateRowWriteStillExpires: a deferred lease whose row write comes
// only after its deadline (its stripe busy, the process starved) still
// ends at its deadline: the late write arms the expiry instead of itself
// (re-arming the row write instead would loop for ever, and the advisory
// lock would never expire).
func TestLateRowWriteStillExpires(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg := pgbridge.Config{DSN: testsrv.SharedPostgres(t).NewDatabase(t), Strategy: pgbridge.Advisory,
		LeaseRowDelay: 100 * time.Millisecond}
	b, other := newBackendCfg(t, cfg), newBackendCfg(t, cfg)
	if r, err := b.Set(ctx, 0, "late", []byte("tok"), nx(300*time.Millisecond)); err != nil || !r.Written {
		t.Fatalf("SET NX = %+v, %v", r, err)
	}
	time.Sleep(50 * time.Millisecond)
	unlock := pgbridge.HoldStripe(b, 0, "late") // past the row time (100ms) and the deadline (300ms)
	time.Sleep(350 * time.Millisecond)
	unlock()
	for end := time.Now().Add(3 * time.Second); ; {
		// Another instance: the holder's own next command on the key
		// would end the lease anyway.
		r, err := other.Set(ctx, 0, "late", []byte("next"), nx(time.Second))
		if err == nil && r.Written {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("another instance's SET NX 3 s after a 300 ms lease = %+v, %v: the lease never ended", r, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for the expiry
	}
}

// TestRowlessFenceClockSkew: an instance whose clock is 30 s behind
// PostgreSQL's grants a 20 s lock without a row, and its holder session
// is lost before the instance can write the fence row (its stripe is held
// here, so fenceRowless waits): another instance must still find the key
// fenced by the session's rowless_until_ms, which is on PostgreSQL's
// clock. (Written as the instance's clock plus the TTL, it had passed
// already by PostgreSQL's, and the other instance took the lock while its
// owner still held it.) Not parallel: the clock is the process's.
func TestRowlessFenceClockSkew(t *testing.T) {
	ctx := t.Context()
	pgbridge.SkewClock(t, -30*time.Second)
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	// The row would be written a minute after the grant: never, for a 20 s lock.
	cfg := pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory, LeaseRowDelay: time.Minute}
	a, b := newBackendStrict(t, cfg), newBackendStrict(t, cfg)
	if r, err := a.Set(ctx, 0, "k", []byte("tok"), nx(20*time.Second)); err != nil || !r.Written {
		t.Fatalf("SET NX = %+v, %v", r, err)
	}
	unlock := pgbridge.HoldStripe(a, 0, "k")
	defer unlock()
	killHolders(t, dsn, "k")
	if r, err := b.Set(ctx, 0, "k", []byte("other"), nx(time.Minute)); err != nil || r.Written {
		t.Fatalf("another instance's SET NX on the lost row-less lock = %+v, %v; want not written (fenced)", r, err)
	}
	if tok, ok, err := b.Get(ctx, 0, "k"); err != nil || !ok || string(tok) != "lockproxy:lost-lease" {
		t.Errorf("another instance's GET = %q, %v, %v; want the fence token", tok, ok, err)
	}
}

// TestDeferredDBSize: DBSIZE answers the same on every instance, within
// the row delay (locks without rows, which only their instance knows) and
// after it (their rows, once the sessions have lowered rowless_until_ms),
// and after a release routed to the holder; so does DBSIZE in a script,
// also one over a key its own instance holds without a row. The third
// instance writes its rows at once. (Before, an instance counted only its
// own row-less locks: the third answered 6 for 12.)
func TestDeferredDBSize(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	var bes []*pgbridge.Backend
	for _, d := range []time.Duration{deferredDelay, deferredDelay, 0} {
		bes = append(bes, newBackendStrict(t, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory, LeaseRowDelay: d}))
	}
	sql, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sql.Close(context.Background())
	dbsizes := func(phase string, want int64) {
		t.Helper()
		for i, be := range bes {
			if n, err := be.DBSize(ctx, 0); err != nil || n != want {
				t.Errorf("%s: instance %d: DBSIZE = %d, %v; want %d", phase, i, n, err, want)
			}
			v, err := be.Eval(ctx, 0, scriptOf(`return redis.call("dbsize")`), nil, nil, true)
			if err != nil || v.Int != want {
				t.Errorf("%s: instance %d: DBSIZE in a script = %+v, %v; want %d", phase, i, v, err, want)
			}
		}
		// Over a key of its own instance: the script's round counts it.
		v, err := bes[0].Eval(ctx, 0, scriptOf(`redis.call("get", KEYS[1]) return redis.call("dbsize")`), []string{"0:0"}, nil, true)
		if err != nil || v.Int != want {
			t.Errorf("%s: instance 0: DBSIZE in a script over its key 0:0 = %+v, %v; want %d", phase, v, err, want)
		}
	}
	var keys []string
	for i, be := range bes {
		for j := range 3 {
			key := fmt.Sprintf("%d:%d", i, j)
			if r, err := be.Set(ctx, 0, key, []byte("tok-"+key), nx(30*time.Second)); err != nil || !r.Written {
				t.Fatalf("SET NX %s = %+v, %v", key, r, err)
			}
			keys = append(keys, key)
		}
		key := fmt.Sprintf("%d:forever", i) // no TTL: its row at once
		if r, err := be.Set(ctx, 0, key, []byte("f"), backend.SetOptions{Cond: backend.IfAbsent}); err != nil || !r.Written {
			t.Fatalf("SET NX %s = %+v, %v", key, r, err)
		}
	}
	dbsizes("within", 12)
	if rowOf(t, sql, "0:2") || rowOf(t, sql, "1:2") { // (a script over 0:0 writes its row)
		t.Fatal("a lock had its row before DBSIZE was asked everywhere: the round took longer than the row delay")
	}
	for _, key := range keys {
		waitRow(t, sql, key)
	}
	for end := time.Now().Add(10 * time.Second); ; {
		var n int
		if err := sql.QueryRow(ctx, `SELECT count(*) FROM lockproxy.sessions WHERE rowless_until_ms > 0`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the holder sessions did not lower rowless_until_ms within 10s of the last row")
		}
		time.Sleep(20 * time.Millisecond) // polling for the holders' pings
	}
	dbsizes("after", 12)
	if got := evalInt(t, bes[1], releaseSrc, "0:1", "tok-0:1"); got != 1 {
		t.Fatalf("release of 0:1 from instance 1 = %d; want 1", got)
	}
	dbsizes("after a release", 11)
}

// TestFenceRowlessRetried: the transaction that turns a lost session's
// row-less locks into fence rows fails (its connection is ended while it
// waits for a lock on the sessions table); the instance tries again, the
// key gets its fence row and every other key is free again. (Tried once,
// the lost session's rowless_until_ms held every key for its 20 s.)
func TestFenceRowlessRetried(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	cfg := pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory, LeaseRowDelay: time.Minute}
	a, b := newBackendStrict(t, cfg), newBackendStrict(t, cfg)
	if r, err := a.Set(ctx, 0, "k", []byte("tok"), nx(20*time.Second)); err != nil || !r.Written {
		t.Fatalf("SET NX = %+v, %v", r, err)
	}
	sql, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sql.Close(context.Background())
	locker, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(context.Background())
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	// Reads go on; fenceRowless's UPDATE waits.
	if _, err := tx.Exec(ctx, `LOCK TABLE lockproxy.sessions IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	killHolders(t, dsn, "k")
	var pid int32
	for end := time.Now().Add(10 * time.Second); ; {
		err := sql.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE 'UPDATE lockproxy.sessions SET rowless_until_ms = 0 WHERE pid = $1 AND marker = $2%'`).Scan(&pid)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) || time.Now().After(end) {
			t.Fatalf("waiting for the fence transaction to wait for the lock: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling for the lost session's notice
	}
	if _, err := sql.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(15 * time.Second); !rowOf(t, sql, "k"); {
		if time.Now().After(end) {
			t.Fatal("the lost row-less lock has no fence row 15 s after its session's end: fenceRowless was not tried again")
		}
		time.Sleep(20 * time.Millisecond) // polling for the retry
	}
	if r, err := b.Set(ctx, 0, "unrelated", []byte("x"), nx(time.Minute)); err != nil || !r.Written {
		t.Errorf("SET NX of another key once the fence rows are written = %+v, %v; want written", r, err)
	}
	if r, err := b.Set(ctx, 0, "k", []byte("x"), nx(time.Minute)); err != nil || r.Written {
		t.Errorf("SET NX of the fenced key = %+v, %v; want not written", r, err)
	}
}

// TestCloseUnderLateGrants: a client keeps taking locks while its
// instance closes. Every lock it was granted has its row once Close
// returns, no session of the instance is left with rowless_until_ms
// raised (which would fence every key of the database until then), and
// no lease timer is left armed. (Before, the locks granted row-less after
// the drain's pass kept their sessions raised, and the drain gave up.)
func TestCloseUnderLateGrants(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	b, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory, LeaseRowDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sql, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sql.Close(context.Background())
	var granted []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			key := fmt.Sprintf("late:%d", i)
			r, err := b.Set(ctx, 0, key, []byte("t"), nx(30*time.Second))
			if err != nil {
				return // closed
			}
			if r.Written {
				granted = append(granted, key)
			}
		}
	}()
	for end := time.Now().Add(10 * time.Second); ; { // until some locks are held
		var n int
		if err := sql.QueryRow(ctx, `SELECT count(*) FROM lockproxy.sessions WHERE rowless_until_ms > 0`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("no session raised its rowless_until_ms within 10s of grants")
		}
		time.Sleep(10 * time.Millisecond) // polling for the first grants
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-done
	var raised int
	if err := sql.QueryRow(ctx, `SELECT count(*) FROM lockproxy.sessions WHERE rowless_until_ms > 0`).Scan(&raised); err != nil {
		t.Fatal(err)
	}
	if raised != 0 {
		t.Errorf("%d holder sessions ended with rowless_until_ms raised after Close", raised)
	}
	var rows int
	if err := sql.QueryRow(ctx, `SELECT count(*) FROM lockproxy.leases WHERE db = 0 AND key = ANY($1)`, func() [][]byte {
		bs := make([][]byte, len(granted))
		for i, k := range granted {
			bs[i] = []byte(k)
		}
		return bs
	}()).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(granted) {
		t.Errorf("%d of the %d locks granted before Close have a row", rows, len(granted))
	}
	if n := pgbridge.ArmedTimers(b); n != 0 {
		t.Errorf("%d lease timers armed after Close", n)
	}
}
