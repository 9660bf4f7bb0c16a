package tests

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/migrate"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// readyViews is a backend served with every view of its readiness: the
// RESP port (INFO lockproxy), /readyz, /metrics (lockproxy_ready) and the
// status page's header.
type readyViews struct {
	c     *redis.Client
	admin string
}

// serveViews serves b in process with a registry and the admin handler.
func serveViews(t *testing.T, name string, b backend.Backend) readyViews {
	t.Helper()
	reg := prometheus.NewRegistry()
	if c, ok := b.(prometheus.Collector); ok {
		reg.MustRegister(c)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := proxy.New(proxy.Config{Registerer: reg, BackendName: name}, b)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	a := proxy.NewAdmin(srv, proxy.AdminConfig{Gatherer: reg})
	hs := httptest.NewServer(a)
	t.Cleanup(func() {
		hs.Close()
		a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-served
		b.Close(ctx)
	})
	return readyViews{c: pgClient(t, ln.Addr().String()), admin: hs.URL}
}

// check asserts that every view says ready (want true) or not granting,
// with a reason containing why.
func (v readyViews) check(t *testing.T, want bool, why string) {
	t.Helper()
	code, body := httpGet(t, v.admin+"/readyz")
	_, metrics := httpGet(t, v.admin+"/metrics")
	info := opsInfo(t, v.c)
	_, page := httpGet(t, v.admin+"/")
	if want {
		if code != 200 || !strings.Contains(metrics, "lockproxy_ready 1\n") || info["lockproxy_ready"] != "1" || !strings.Contains(page, `<span class="ok">ready</span>`) {
			t.Errorf("want ready: /readyz %d %q, INFO lockproxy_ready %q, lockproxy_ready 1 in /metrics %v, page header ready %v",
				code, body, info["lockproxy_ready"], strings.Contains(metrics, "lockproxy_ready 1\n"), strings.Contains(page, `<span class="ok">ready</span>`))
		}
		return
	}
	if code != 503 || !strings.Contains(body, why) {
		t.Errorf("/readyz = %d %q; want 503 naming %q", code, body, why)
	}
	if !strings.Contains(metrics, "lockproxy_ready 0\n") {
		t.Errorf("/metrics lacks lockproxy_ready 0")
	}
	if info["lockproxy_ready"] != "0" || !strings.Contains(info["lockproxy_not_ready_reason"], why) {
		t.Errorf("INFO lockproxy: ready %q, reason %q; want 0 naming %q", info["lockproxy_ready"], info["lockproxy_not_ready_reason"], why)
	}
	if !strings.Contains(page, `class="bad"`) || !strings.Contains(page, why) {
		t.Errorf("the status page's header does not say not ready naming %q", why)
	}
}

// refusedFresh reports whether SET NX of a key nobody holds answers
// TRYAGAIN containing why (and fails the test on another error).
func refusedFresh(t *testing.T, c *redis.Client, key, why string) bool {
	t.Helper()
	err := c.SetArgs(t.Context(), key, "tok", redis.SetArgs{Mode: "NX", TTL: 100 * time.Millisecond}).Err()
	return err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") && strings.Contains(err.Error(), why)
}

// TestReadinessTellsTheTruth: whenever a backend answers TRYAGAIN to the
// acquire of a key nobody holds, /readyz answers 503, lockproxy_ready is
// 0, INFO says lockproxy_ready:0 and the page's header is red, each with
// the reason; once it grants again, all four say ready.
func TestReadinessTellsTheTruth(t *testing.T) {
	t.Run("postgres restart wait", func(t *testing.T) {
		t.Parallel()
		pg := testsrv.StartPostgres(t)
		dsn := pg.NewDatabase(t)
		// An instance that grants a lease and is gone when PostgreSQL
		// crashes: nobody knows its keys, so every instance waits for
		// its lease to end.
		gone, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
		if err != nil {
			t.Fatal(err)
		}
		v := serveViews(t, "postgres", b)
		v.check(t, true, "")
		const ttl = 6 * time.Second
		if r, err := gone.Set(t.Context(), 0, "gone:k", []byte("tok"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: ttl}}); err != nil || !r.Written {
			t.Fatalf("SET NX = %+v, %v", r, err)
		}
		gone.Close(t.Context())
		pg.Immediate()
		if err := pg.Start(); err != nil {
			t.Fatal(err)
		}
		const why = "no lock is granted"
		for end := time.Now().Add(ttl); !refusedFresh(t, v.c, "fresh", why); {
			if time.Now().After(end) {
				t.Fatal("no restart wait seen after the crash")
			}
			time.Sleep(20 * time.Millisecond) // polling for the holders' reconnect
		}
		v.check(t, false, why)
		for end := time.Now().Add(2 * ttl); refusedFresh(t, v.c, "fresh", ""); {
			if time.Now().After(end) {
				t.Fatal("the restart wait did not end")
			}
			time.Sleep(20 * time.Millisecond) // polling for the wait's end
		}
		v.check(t, true, "")
	})
	t.Run("quorum without a majority", func(t *testing.T) {
		t.Parallel()
		nodes := []*testsrv.Redis{testsrv.StartRedis(t), testsrv.StartRedis(t), testsrv.StartRedis(t)}
		// The default check interval (5 s): readiness must not wait for it.
		b, err := quorum.New(quorum.Config{Nodes: []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr}, NodeTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		v := serveViews(t, "quorum", b)
		v.check(t, true, "")
		nodes[0].Kill()
		nodes[1].Kill()
		if !refusedFresh(t, v.c, "fresh", "") {
			t.Fatal("SET NX with one node of three did not answer TRYAGAIN")
		}
		v.check(t, false, "nodes usable")
	})
	t.Run("migration's legacy Redis down", func(t *testing.T) {
		t.Parallel()
		legacy := testsrv.StartRedis(t)
		b, err := migrate.New(memory.New(memory.Config{}), migrate.Config{URL: "redis://" + legacy.Addr, Timeout: 300 * time.Millisecond, StatusInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		v := serveViews(t, "memory", b)
		v.check(t, true, "")
		legacy.Kill()
		if !refusedFresh(t, v.c, "fresh", "legacy Redis") {
			t.Fatal("SET NX with the legacy Redis down did not answer TRYAGAIN")
		}
		v.check(t, false, "legacy Redis")
	})
}

// TestLocksListFencedKeys: a key fenced by a lost holder session is listed
// by LOCKPROXY LOCKS, /locks and the status page as fenced until its
// deadline, beside the held keys, on the instance that lost it and on
// another; the listing does not fail.
func TestLocksListFencedKeys(t *testing.T) {
	t.Parallel()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	a, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pgbridge.New(t.Context(), pgbridge.Config{DSN: dsn, LeaseRowDelay: testsrv.PostgresRowDelay(t)})
	if err != nil {
		t.Fatal(err)
	}
	va, vb := serveViews(t, "postgres", a), serveViews(t, "postgres", b)
	ctx := t.Context()
	// A long TTL: the lease gets its row (deferred.go), which fences its
	// key on every instance once its session is lost.
	if err := va.c.SetArgs(ctx, "list:fenced", "tok", redis.SetArgs{Mode: "NX", TTL: 2 * time.Minute}).Err(); err != nil {
		t.Fatal(err)
	}
	sql := pgConn(t, dsn)
	if _, err := sql.Exec(ctx, `SELECT pg_terminate_backend(holder_pid) FROM lockproxy.leases WHERE key = 'list:fenced'`); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; {
		err := va.c.SetArgs(ctx, "list:fenced", "other", redis.SetArgs{Mode: "NX", TTL: time.Second}).Err()
		var n int
		qerr := sql.QueryRow(ctx, `SELECT count(*) FROM lockproxy.leases l JOIN pg_stat_activity s ON s.pid = l.holder_pid WHERE key = 'list:fenced'`).Scan(&n)
		if err == redis.Nil && qerr == nil && n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the key was not fenced: SET NX = %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the holder's reconnect
	}
	if err := vb.c.SetArgs(ctx, "list:held", "tok", redis.SetArgs{Mode: "NX", TTL: 2 * time.Minute}).Err(); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]readyViews{"the instance that lost it": va, "another instance": vb} {
		res, err := v.c.Do(ctx, "LOCKPROXY", "LOCKS", "0", "MATCH", "list:*").Slice()
		for end := time.Now().Add(10 * time.Second); err != nil && strings.Contains(err.Error(), "terminating connection due to administrator command") && time.Now().Before(end); {
			// The instance learns its holder session is gone when it next
			// uses it: that one use answers TRYAGAIN, as it must; the
			// listing after it is the test's.
			time.Sleep(50 * time.Millisecond) // polling for the loss to be noticed
			res, err = v.c.Do(ctx, "LOCKPROXY", "LOCKS", "0", "MATCH", "list:*").Slice()
		}
		if err != nil {
			t.Fatalf("%s: LOCKPROXY LOCKS = %v", name, err)
		}
		got := map[string]string{}
		for _, e := range res[1].([]any) {
			f := e.([]any)
			tok, _ := f[1].(string)
			got[f[0].(string)] = tok
		}
		if got["list:held"] != "tok" || got["list:fenced"] != backend.FenceToken {
			t.Errorf("%s: LOCKPROXY LOCKS = %v; want list:held with tok and list:fenced with %s", name, got, backend.FenceToken)
		}
		_, body := httpGet(t, v.admin+"/locks?match=list:*")
		var page proxy.LockPage
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("%s: /locks = %q: %v", name, body, err)
		}
		fenced := 0
		for _, l := range page.Locks {
			switch {
			case l.Key == "list:fenced" && l.FencedUntilMillis != nil && *l.FencedUntilMillis > time.Now().UnixMilli():
				fenced++
			case l.Key == "list:held" && l.FencedUntilMillis == nil:
			default:
				t.Errorf("%s: /locks lists %+v", name, l)
			}
		}
		if len(page.Locks) != 2 || fenced != 1 {
			t.Errorf("%s: /locks = %s; want list:held and list:fenced (fenced)", name, body)
		}
		_, html := httpGet(t, v.admin+"/?match=list:*")
		if !strings.Contains(html, "list:held") || !strings.Contains(html, "fenced until") || strings.Contains(html, `<p class="bad">`) || strings.Contains(html, "No held lock") {
			t.Errorf("%s: the status page does not list list:held and list:fenced as fenced until …", name)
		}
	}
}
