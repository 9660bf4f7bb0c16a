package pgbridge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// do runs one command of the value types on b, its key the first
// argument.
func do(t *testing.T, b *pgbridge.Backend, args ...string) (backend.Value, error) {
	t.Helper()
	ba := make([][]byte, len(args))
	for i, a := range args {
		ba[i] = []byte(a)
	}
	return b.Do(t.Context(), 0, []string{args[1]}, ba)
}

func mustDo(t *testing.T, b *pgbridge.Backend, want string, args ...string) {
	t.Helper()
	v, err := do(t, b, args...)
	if err != nil || v.String() != want {
		t.Fatalf("%v = %v, %v; want %s", args, v, err, want)
	}
}

// TestTypedAcrossInstances: a value of another type than string lives in
// the lease table with its type, so every instance reads and writes it as
// Redis would: the advisory instance that does not hold its key reaches
// the holder (routed), and a lease instance started after another closed
// reads what that one left. A string release script and GET meet a hash
// as Redis does (WRONGTYPE), on the fast paths too.
func TestTypedAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			dsn := testsrv.SharedPostgres(t).NewDatabase(t)
			a, b := newBackend(t, strategy, dsn), newBackend(t, strategy, dsn)
			mustDo(t, a, ":2", "hset", "h", "f", "1", "g", "2")
			mustDo(t, b, `"1"`, "hget", "h", "f")
			mustDo(t, b, ":1", "hset", "h", "e", "3")
			mustDo(t, a, `{"f" "1" "g" "2" "e" "3"}`, "hgetall", "h")
			mustDo(t, b, ":4", "zadd", "z", "2", "b", "1", "a", "3", "c", "-1.5", "n")
			mustDo(t, a, `["n" ,-1.5 "a" ,1 "b" ,2 "c" ,3]`, "zrange", "z", "0", "-1", "withscores")
			mustDo(t, a, "+zset", "type", "z")
			if _, err := b.Expire(t.Context(), 0, "h", backend.Expiry{At: time.UnixMilli(4102444800123)}, 0); err != nil {
				t.Fatal(err)
			}
			mustDo(t, a, ":4102444800123", "pexpiretime", "h")
			if _, _, err := a.Get(t.Context(), 0, "h"); !backend.IsWrongType(err) {
				t.Errorf("GET of a hash: %v; want WRONGTYPE", err)
			}
			if n, err := b.Exists(t.Context(), 0, []string{"h", "z", "nosuch"}); n != 2 || err != nil {
				t.Errorf("EXISTS h z nosuch = %d, %v; want 2", n, err)
			}
			release := scriptOf(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)
			for _, in := range []*pgbridge.Backend{a, b} {
				_, err := in.Eval(t.Context(), 0, release, []string{"h"}, [][]byte{[]byte("x")}, false)
				if re := (*backend.ReplyError)(nil); !errors.As(err, &re) || !strings.HasPrefix(re.Reply, backend.MsgWrongType+" script: ") {
					t.Errorf("release script on a hash: %v; want WRONGTYPE", err)
				}
			}
			if r, err := a.Set(t.Context(), 0, "h", []byte("v"), backend.SetOptions{Cond: backend.IfAbsent, Expiry: backend.Expiry{TTL: time.Minute}}); err != nil || r.Written {
				t.Errorf("SET NX PX over a hash = %+v, %v; want not written", r, err)
			}
			if strategy != pgbridge.Lease {
				return
			}
			if err := a.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			c := newBackend(t, strategy, dsn)
			mustDo(t, c, `{"f" "1" "g" "2" "e" "3"}`, "hgetall", "h")
		})
	}
}

// TestTypedRowMalformed: a lease row whose value does not decode as its
// kind (written by hand) is an error reply, never a value.
func TestTypedRowMalformed(t *testing.T) {
	t.Parallel()
	dsn := testsrv.SharedPostgres(t).NewDatabase(t)
	b := newBackend(t, pgbridge.Lease, dsn)
	mustDo(t, b, ":1", "sadd", "s", "m")
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `UPDATE lockproxy.leases SET token = '\x07'::bytea WHERE key = 's'::bytea`); err != nil {
		t.Fatal(err)
	}
	v, err := do(t, b, "smembers", "s")
	var re *backend.ReplyError
	if !errors.As(err, &re) {
		t.Fatalf("SMEMBERS of a malformed row = %v, %v; want an error reply", v, err)
	}
}
