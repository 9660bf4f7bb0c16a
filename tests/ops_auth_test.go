package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// opsAuthCases are connection scripts about authentication; each runs on
// a fresh connection, against a real redis-server and lockproxy configured
// alike, and the raw replies must be identical.
var opsAuthCases = [][][]string{
	{{"PING"}},
	{{"SET", "k", "v", "NX"}},
	{{"AUTH", "alicepw"}, {"PING"}},
	{{"AUTH", "alice", "wrong"}, {"PING"}},
	{{"AUTH", "alice", "alicepw"}, {"PING"}, {"SET", "k", "v", "NX", "PX", "10000"}, {"DEL", "k"}},
	{{"AUTH", "bob", "bobpw"}, {"ECHO", "x"}},
	{{"AUTH", "Alice", "alicepw"}},
	{{"AUTH", "nobody", "x"}},
	{{"AUTH", "default", "x"}},
	{{"AUTH", "default", "s3cret"}, {"PING"}},
	{{"AUTH", "s3cret"}, {"PING"}},
	{{"AUTH", "a", "b", "c"}},
	{{"AUTH"}},
	{{"HELLO", "3", "AUTH", "alice", "wrong"}},
	{{"HELLO", "3", "AUTH", "alice"}},
	{{"HELLO", "2", "AUTH", "nobody", "x", "SETNAME", "n"}},
	{{"AUTH", "alice", "alicepw"}, {"RESET"}, {"PING"}},
	{{"AUTH", "alice", "alicepw"}, {"AUTH", "alice", "bad"}, {"PING"}},
	{{"AUTH", "alice", "alicepw"}, {"AUTH", "bob", "bobpw"}, {"PING"}},
	{{"MULTI"}, {"AUTH", "alice", "alicepw"}},
}

// TestOpsAuthUsers compares named users with a real redis-server 7.0 that
// has the same users as ACL lines ("user alice on >alicepw ~* +@all", bob
// by his password's sha256 "#…"), in two setups: users only (the default
// user disabled, as "user default off") and users beside requirepass.
// Then redis-cli --user/--pass and go-redis (RESP2: AUTH user pass; RESP3:
// HELLO 3 AUTH user pass) are accepted and refused, and no password
// appears in lockproxy's log.
func TestOpsAuthUsers(t *testing.T) {
	t.Parallel()
	cli := testsrv.Need(t, "redis-cli")
	bin := testsrv.BuildLockproxy(t)
	sum := sha256.Sum256([]byte("bobpw"))
	bobHash := hex.EncodeToString(sum[:])
	acl := []string{"--user", testsrv.ProbeUser, "on", ">" + testsrv.ProbeUser, "+@all", "--user", "alice", "on", ">alicepw", "~*", "+@all", "--user", "bob", "on", "#" + bobHash, "~*", "+@all"}
	users := "alice>alicepw,bob#" + bobHash

	for _, setup := range []struct {
		name        string
		redis, args []string
	}{
		{"users only", append([]string{"--user", "default", "off", "resetpass"}, acl...), []string{"--users", users}},
		{"users and requirepass", append([]string{"--requirepass", "s3cret"}, acl...), []string{"--users", users, "--requirepass", "s3cret"}},
	} {
		t.Run(setup.name, func(t *testing.T) {
			t.Parallel()
			real := testsrv.StartRedis(t, setup.redis...)
			lp := testsrv.StartBinary(t, bin, setup.args...)
			for _, script := range opsAuthCases {
				want, got := dialRESP(t, real.Addr), dialRESP(t, lp.Addr)
				for _, cmd := range script {
					w, werr := want.do(cmd...)
					g, gerr := got.do(cmd...)
					if w != g || (werr == nil) != (gerr == nil) {
						t.Errorf("%v, then %q:\n redis     %q %v\n lockproxy %q %v", script, cmd, w, werr, g, gerr)
					}
				}
			}
			host, port := clientSplitAddr(lp.Addr)
			run := func(args ...string) string {
				out, _ := exec.CommandContext(t.Context(), cli, append([]string{"-h", host, "-p", port, "--no-auth-warning"}, args...)...).CombinedOutput()
				return strings.TrimSpace(string(out))
			}
			if out := run("--user", "alice", "--pass", "alicepw", "SET", "cli", "tok", "NX", "PX", "10000"); out != "OK" {
				t.Errorf("redis-cli --user alice --pass alicepw SET = %q; want OK", out)
			}
			if out := run("--user", "bob", "--pass", "bobpw", "-3", "GET", "cli"); out != "tok" {
				t.Errorf("redis-cli -3 --user bob GET = %q; want tok", out)
			}
			if out := run("--user", "alice", "--pass", "nope", "GET", "cli"); !strings.Contains(out, "WRONGPASS invalid username-password pair or user is disabled.") {
				t.Errorf("redis-cli with a wrong password = %q; want WRONGPASS", out)
			}
			ctx := t.Context()
			for _, proto := range []int{2, 3} {
				c := redis.NewClient(&redis.Options{Addr: lp.Addr, Protocol: proto, Username: "bob", Password: "bobpw"})
				if err := c.SetArgs(ctx, "gr", "tok", redis.SetArgs{Mode: "NX"}).Err(); err != nil {
					t.Errorf("go-redis RESP%d as bob: SET = %v", proto, err)
				}
				if info, err := c.Info(ctx).Result(); err != nil || !strings.Contains(info, "lockproxy_users:2\r\n") {
					t.Errorf("INFO lacks lockproxy_users:2 (%v)", err)
				}
				c.Del(ctx, "gr")
				c.Close()
				bad := redis.NewClient(&redis.Options{Addr: lp.Addr, Protocol: proto, Username: "bob", Password: "alicepw", MaxRetries: -1})
				if err := bad.Ping(ctx).Err(); err == nil || err.Error() != "WRONGPASS invalid username-password pair or user is disabled." {
					t.Errorf("go-redis RESP%d with alice's password for bob: %v; want WRONGPASS", proto, err)
				}
				bad.Close()
			}
			logs := lp.Logs()
			if !strings.Contains(logs, "users=\"[alice bob]\"") && !strings.Contains(logs, "users=[alice bob]") {
				t.Errorf("the start line does not name the users:\n%s", logs)
			}
			for _, secret := range []string{"alicepw", "bobpw", "s3cret", bobHash} {
				if strings.Contains(logs, secret) {
					t.Errorf("the log holds a secret %q:\n%s", secret, logs)
				}
			}
		})
	}
}
