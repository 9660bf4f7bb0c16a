package tests

import (
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/luascripts"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/proxy"
)

// TestOpsFlushPermission: FLUSHDB and FLUSHALL are an admin's: a user
// without the permission gets Redis's own NOPERM reply (the same bytes as
// a real redis-server whose ACL denies the command), in MULTI too; an
// admin and the default user may; allow-flush off refuses them to all;
// and no script runs them, on any user's behalf.
func TestOpsFlushPermission(t *testing.T) {
	t.Parallel()
	redis := testsrv.StartRedis(t)
	admin := dialRESP(t, redis.Addr)
	if r, err := admin.do("ACL", "SETUSER", "app", "on", ">apppw", "~*", "+@all", "-flushall", "-flushdb"); err != nil || r != "+OK\r\n" {
		t.Fatalf("ACL SETUSER = %q, %v", r, err)
	}
	users := []proxy.User{
		{Name: "app", PasswordSHA256: sha256.Sum256([]byte("apppw"))},
		{Name: "ops", PasswordSHA256: sha256.Sum256([]byte("opspw")), Admin: true},
	}
	lp := testsrv.StartLockproxy(t, proxy.Config{Users: users, RequirePass: "s3cret"}, memory.New(memory.Config{}))
	// A user without the permission: byte for byte as Redis.
	for _, cmds := range [][][]string{
		{{"AUTH", "app", "apppw"}, {"SET", "k", "v"}, {"FLUSHALL"}, {"FLUSHDB", "ASYNC"}, {"EXISTS", "k"}},
		{{"AUTH", "app", "apppw"}, {"MULTI"}, {"SET", "k", "v"}, {"FLUSHALL"}, {"EXEC"}, {"EXISTS", "k"}},
	} {
		want, got := dialRESP(t, redis.Addr), dialRESP(t, lp)
		for _, c := range cmds {
			w, _ := want.do(c...)
			g, _ := got.do(c...)
			if w != g {
				t.Errorf("%v: redis %q, lockproxy %q", c, w, g)
			}
		}
	}
	expect := func(addr string, cmds ...[]string) []string {
		c := dialRESP(t, addr)
		var out []string
		for _, cmd := range cmds {
			r, err := c.do(cmd...)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	got := expect(lp, []string{"AUTH", "ops", "opspw"}, []string{"SET", "k", "v"}, []string{"FLUSHALL"}, []string{"EXISTS", "k"},
		[]string{"EVAL", "return redis.call('flushdb')", "0"})
	want := []string{"+OK\r\n", "+OK\r\n", "+OK\r\n", ":0\r\n",
		"-ERR lockproxy does not run 'flushdb' from scripts script: " + luascripts.SHA1("return redis.call('flushdb')") + ", on @user_script:1.\r\n"}
	if !slices.Equal(got, want) {
		t.Errorf("admin: %q; want %q", got, want)
	}
	if got := expect(lp, []string{"AUTH", "s3cret"}, []string{"FLUSHDB"}); got[1] != "+OK\r\n" {
		t.Errorf("default user FLUSHDB = %q", got[1])
	}
	off := testsrv.StartLockproxy(t, proxy.Config{NoFlush: true}, memory.New(memory.Config{}))
	if got := expect(off, []string{"FLUSHALL"}); got[0] != "-ERR lockproxy refuses 'flushall': allow-flush is off in its configuration\r\n" {
		t.Errorf("allow-flush off: FLUSHALL = %q", got[0])
	}
}
