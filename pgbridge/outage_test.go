package pgbridge_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// TestOutageLogged: while PostgreSQL is down, each strategy logs the
// outage with a growing interval (not a line per reconnect attempt), every
// line on one line, and logs the recovery once; clients get a one-line
// TRYAGAIN without tabs that names the failure once.
func TestOutageLogged(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			pg := testsrv.StartPostgres(t)
			dsn := pg.NewDatabase(t)
			var logs testsrv.SyncBuffer
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			b, err := pgbridge.New(ctx, pgbridge.Config{DSN: dsn, Strategy: strategy,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(context.Background())
			// Short TTLs: after a restart the advisory strategy takes no lock
			// until the leases granted before it have ended.
			acquire := func(key string) error {
				_, err := b.Set(ctx, 0, key, []byte("t"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: 500 * time.Millisecond}})
				return err
			}
			if err := acquire("before"); err != nil {
				t.Fatal(err)
			}
			pg.Stop()
			down := time.Now()
			var reply string
			for time.Since(down) < 3*time.Second { // clients keep trying for 3 s
				var re *backend.ReplyError
				if err := acquire("during"); errors.As(err, &re) {
					reply = re.Reply // what the client reads
				} else if err != nil {
					t.Fatalf("acquire during the outage: %v; want a reply error", err)
				}
				time.Sleep(50 * time.Millisecond) // a client's retry pace
			}
			if err := pg.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for acquire("after") != nil {
				if time.Now().After(deadline) {
					t.Fatalf("no acquire within 20 s of PostgreSQL's start:\n%s", logs.String())
				}
				time.Sleep(50 * time.Millisecond) // polling the reconnect
			}
			for !strings.Contains(logs.String(), "PostgreSQL reachable again") {
				if time.Now().After(deadline) {
					t.Fatalf("the recovery was not logged:\n%s", logs.String())
				}
				time.Sleep(20 * time.Millisecond) // polling the reconnect
			}
			out := logs.String()
			t.Logf("logs:\n%s\nlast reply: %s", out, reply)
			if n := strings.Count(out, "PostgreSQL unreachable"); n < 1 || n > 4 {
				t.Errorf("the 3 s outage was logged %d times; want 1 to 4 (first failure, then backing off)", n)
			}
			if n := strings.Count(out, "PostgreSQL reachable again"); n != 1 {
				t.Errorf("the recovery was logged %d times; want once", n)
			}
			if !strings.HasPrefix(reply, "TRYAGAIN postgres: ") || strings.ContainsAny(reply, "\t\n\r") {
				t.Errorf("the reply during the outage = %q; want one TRYAGAIN line without tabs", reply)
			}
			if strings.Count(reply, "refused") > 1 || strings.Contains(reply, "user=") {
				t.Errorf("the reply repeats the failure or names the user: %q", reply)
			}
		})
	}
}
