package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// outsideViews reads key's holder in the three places an operator looks:
// LOCKPROXY LOCK over RESP (its reply, redis.Nil when free), GET
// /locks/{key} (status and JSON) and the status page searched for the key
// (its HTML, unescaped).
type outsideViews struct {
	lock     []any
	lockErr  error
	code     int
	entry    map[string]any
	page     string
	holderOf map[string]any
}

func readOutside(t *testing.T, c *redis.Client, admin, key string) outsideViews {
	t.Helper()
	var v outsideViews
	v.lock, v.lockErr = c.Do(t.Context(), "LOCKPROXY", "LOCK", key).Slice()
	if v.lockErr == nil && len(v.lock) == 4 {
		v.holderOf, _ = holderFields(t, v.lock[3])
	}
	var body string
	v.code, body = httpGet(t, "http://"+admin+"/locks/"+url.PathEscape(key))
	if err := json.Unmarshal([]byte(body), &v.entry); err != nil {
		t.Fatalf("GET /locks/%s: %q: %v", key, body, err)
	}
	_, page := httpGet(t, "http://"+admin+"/?match="+url.QueryEscape(key))
	v.page = html.UnescapeString(page)
	return v
}

// TestHoldersOutside: a lock held outside lockproxy is named, not answered
// with an error or "free", by LOCKPROXY LOCK, /locks/{key} and the status
// page: a PostgreSQL session's advisory lock taken from SQL (its pid,
// application_name and role; both strategies), and during a migration a
// key only the legacy Redis holds (its value, TTL and the legacy Redis).
// Once let go, each says free again.
func TestHoldersOutside(t *testing.T) {
	t.Parallel()
	bin := testsrv.BuildLockproxy(t)
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run("pg-"+strategy, func(t *testing.T) {
			t.Parallel()
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			lp := testsrv.StartBinary(t, bin, "--backend", "postgres", "--postgres-dsn", dsn, "--postgres-strategy", strategy,
				"--postgres-lease-row-delay", testsrv.PostgresRowDelay(t).String())
			checkSQLHolder(t, dsn, pgClient(t, lp.Addr), lp.Admin)
		})
	}
	t.Run("migrating", func(t *testing.T) {
		t.Parallel()
		legacy := testsrv.StartRedis(t)
		lp := testsrv.StartBinary(t, bin, "--migrate-from", "redis://"+legacy.Addr)
		c := pgClient(t, lp.Addr)
		direct := redis.NewClient(&redis.Options{Addr: legacy.Addr})
		defer direct.Close()
		ctx := t.Context()
		if err := direct.SetArgs(ctx, "legacy:only", "tok-legacy", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.SetArgs(ctx, "legacy:only", "other", redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("SET NX through lockproxy of a key the legacy Redis holds = %v; want nil", err)
		}
		v := readOutside(t, c, lp.Admin, "legacy:only")
		var ttl int64
		if len(v.lock) == 4 {
			ttl, _ = v.lock[2].(int64)
		}
		if v.lockErr != nil || ttl == 0 || v.lock[0] != "tok-legacy" || v.lock[1] != nil || ttl <= 0 || ttl > 60000 || v.holderOf["legacy"] != legacy.Addr {
			t.Errorf("LOCKPROXY LOCK legacy:only = %#v, %v; want [tok-legacy, nil, PTTL ≤ 60000, holder with legacy %s]", v.lock, v.lockErr, legacy.Addr)
		}
		if h, _ := v.entry["holder"].(map[string]any); v.code != 200 || v.entry["token"] != "tok-legacy" || h["legacy"] != legacy.Addr {
			t.Errorf("GET /locks/legacy:only = %d %v; want 200 naming the legacy Redis", v.code, v.entry)
		}
		if want := "a client of the legacy Redis " + legacy.Addr; !strings.Contains(v.page, want) {
			t.Errorf("the page searched for legacy:only lacks %q", want)
		}
		if err := direct.Del(ctx, "legacy:only").Err(); err != nil {
			t.Fatal(err)
		}
		if v := readOutside(t, c, lp.Admin, "legacy:only"); !errors.Is(v.lockErr, redis.Nil) || v.code != 404 {
			t.Errorf("once deleted on the legacy Redis: LOCKPROXY LOCK = %v, /locks = %d; want nil and 404", v.lockErr, v.code)
		}
	})
}

// checkSQLHolder takes a key's advisory lock from an SQL session named
// billing-sql and reads its holder through lockproxy (c, admin).
func checkSQLHolder(t *testing.T, dsn string, c *redis.Client, admin string) {
	t.Helper()
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "billing-sql"
	sql, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sql.Close(ctx)
	var pid int64
	var user string
	if err := sql.QueryRow(ctx, `SELECT pg_backend_pid(), current_user::text FROM (SELECT pg_advisory_lock(hashtextextended('sql:held', 0))) l`).Scan(&pid, &user); err != nil {
		t.Fatal(err)
	}
	if err := c.SetArgs(ctx, "sql:held", "tok", redis.SetArgs{Mode: "NX", TTL: 10 * time.Second}).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("SET NX of a key locked from SQL = %v; want nil", err)
	}
	v := readOutside(t, c, admin, "sql:held")
	if v.lockErr != nil || len(v.lock) != 4 || v.lock[0] != nil || v.lock[1] != nil || v.lock[2] != int64(-1) ||
		v.holderOf["postgres_pid"] != pid || v.holderOf["client_name"] != "billing-sql" || v.holderOf["client_user"] != user {
		t.Errorf("LOCKPROXY LOCK sql:held = %#v, %v; want [nil, nil, -1, holder with postgres_pid %d, client_name billing-sql, client_user %s]",
			v.lock, v.lockErr, pid, user)
	}
	if granted, _ := v.holderOf["granted_ms"].(int64); granted <= 0 || granted > time.Now().UnixMilli() {
		t.Errorf("LOCKPROXY LOCK sql:held's granted_ms = %v; want when the session began", v.holderOf["granted_ms"])
	}
	if h, _ := v.entry["holder"].(map[string]any); v.code != 200 || h["postgres_pid"] != float64(pid) || h["client_name"] != "billing-sql" {
		t.Errorf("GET /locks/sql:held = %d %v; want 200 naming pid %d, billing-sql", v.code, v.entry, pid)
	}
	if want := fmt.Sprintf("PostgreSQL session pid %d (SQL, not lockproxy): application_name billing-sql, user %s", pid, user); !strings.Contains(v.page, want) {
		t.Errorf("the page searched for sql:held lacks %q", want)
	}
	if _, err := sql.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended('sql:held', 0))`); err != nil {
		t.Fatal(err)
	}
	if v := readOutside(t, c, admin, "sql:held"); !errors.Is(v.lockErr, redis.Nil) || v.code != 404 {
		t.Errorf("once SQL unlocked: LOCKPROXY LOCK = %v, /locks = %d; want nil and 404", v.lockErr, v.code)
	}
}
