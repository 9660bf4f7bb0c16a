package pgbridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// fencing reads LOCKPROXY FENCE key token through b: 0 for nil.
func fencing(t *testing.T, b *pgbridge.Backend, key, token string) int64 {
	t.Helper()
	v, err := b.Do(t.Context(), 0, []string{key}, [][]byte{[]byte("lockproxy"), []byte("fence"), []byte(key), []byte(token)})
	if err != nil {
		t.Fatalf("LOCKPROXY FENCE %s: %v", key, err)
	}
	if v.Kind == backend.KindNil {
		return 0
	}
	return v.Int
}

// TestFencesRaisedOnNewIncarnation: a crash of PostgreSQL can set the
// fencing tokens' sequence back (an advance no commit flushed), so the
// statement that sees a new incarnation first raises it to PostgreSQL's
// clock in microseconds. Emptying the incarnation mark and setting the
// sequence back stand in for the crash here.
func TestFencesRaisedOnNewIncarnation(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	a := newBackendCfg(t, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory})
	if r, err := a.Set(ctx, 0, "k", []byte("tok"), nx(200*time.Millisecond)); err != nil || !r.Written {
		t.Fatalf("SET NX = %+v, %v", r, err)
	}
	before := fencing(t, a, "k", "tok")
	if before <= 0 {
		t.Fatalf("fence %d; want one", before)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `DELETE FROM lockproxy.horizon_alive; SELECT setval('lockproxy.fencing_tokens', 1)`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := newBackendCfg(t, pgbridge.Config{DSN: dsn, Strategy: pgbridge.Advisory}) // its holder sessions carry, and raise
	for {
		r, err := c.Set(ctx, 0, "k2", []byte("tok"), nx(time.Minute))
		if err == nil && r.Written {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("SET NX after the carry = %+v, %v; never granted", r, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for the quarantine's end (a's 200 ms lease)
	}
	after := fencing(t, c, "k2", "tok")
	if floor := start.UnixMicro(); after < floor || after <= before {
		t.Errorf("fence after the new incarnation %d; want above %d and at least the clock's %d µs", after, before, floor)
	}
	if after >= 1<<53 {
		t.Errorf("fence %d is beyond 2^53: a script's Lua number would round it", after)
	}
}
