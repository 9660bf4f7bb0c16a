package pgbridge_test

import (
	"testing"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// TestEngineRound covers what a round adds to the model (engine.go): a
// script that touches keys it did not declare runs again with them
// prepared and its writes reach the table, and DBSIZE inside a script
// counts the table's other keys plus the script's own as it left them.
func TestEngineRound(t *testing.T) {
	for _, strategy := range []string{pgbridge.Advisory, pgbridge.Lease} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := newBackend(t, strategy, testsrv.SharedPostgres(t).NewDatabase(t))
			eval := func(src string, keys []string, args ...string) backend.Value {
				t.Helper()
				a := make([][]byte, len(args))
				for i, s := range args {
					a[i] = []byte(s)
				}
				v, err := b.Eval(ctx, 0, backend.Script{SHA1: luascripts.SHA1(src), Src: src}, keys, a, false)
				if err != nil {
					t.Fatalf("%s: %v", src, err)
				}
				return v
			}
			for _, k := range []string{"other1", "other2", "mine"} {
				if _, err := b.Set(ctx, 0, k, []byte("t"), backend.SetOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if v := eval(`redis.call('set', ARGV[1], 'u') redis.call('set', ARGV[2], 'u') return 1`, nil, "und1", "und2"); v.Int != 1 {
				t.Fatalf("script over undeclared keys = %v", v)
			}
			for _, k := range []string{"und1", "und2"} {
				if tok, ok, err := b.Get(ctx, 0, k); err != nil || !ok || string(tok) != "u" {
					t.Errorf("GET %s after the script = %q, %v, %v; want u", k, tok, ok, err)
				}
			}
			// 5 keys: the script deletes mine and writes fresh, so it sees 5.
			src := `redis.call('del', KEYS[1]) redis.call('set', KEYS[2], 'f') return redis.call('dbsize')`
			if v := eval(src, []string{"mine", "fresh"}); v.Int != 5 {
				t.Errorf("DBSIZE inside the script = %v; want 5", v)
			}
			if n, err := b.DBSize(ctx, 0); err != nil || n != 5 {
				t.Errorf("DBSIZE after the script = %d, %v; want 5", n, err)
			}
		})
	}
}
