package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/proxy"
)

func TestSampleConfigIsValid(t *testing.T) {
	cfg, _, err := load([]string{"--config", "../../config.yaml"}, nil, io.Discard)
	if err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if probs := cfg.validate(); len(probs) > 0 {
		t.Fatalf("config.yaml does not validate: %v", probs)
	}
	if len(cfg.Users) == 0 {
		cfg.Users = nil // the sample's "users: []"
	}
	cfg.where = nil // where the file gave each key
	if !reflect.DeepEqual(cfg, defaults()) {
		t.Errorf("config.yaml differs from the defaults it documents:\n file %+v\n code %+v", cfg, defaults())
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	os.WriteFile(file, []byte("listen: 127.0.0.1:1111\nrequirepass: fromfile\nlog-level: debug\n"), 0o600)
	cfg, _, err := load(
		[]string{"--config", file, "--listen", "127.0.0.1:3333"},
		[]string{"LOCKPROXY_LISTEN=127.0.0.1:2222", "LOCKPROXY_REQUIREPASS=fromenv", "LOCKPROXY_MAX_CLIENTS=7"},
		io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, got, want string }{
		{"listen (flag beats env and file)", cfg.Listen, "127.0.0.1:3333"},
		{"requirepass (env beats file)", cfg.RequirePass, "fromenv"},
		{"log-level (file beats default)", cfg.LogLevel, "debug"},
		{"backend (default)", cfg.Backend, "memory"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q; want %q", c.key, c.got, c.want)
		}
	}
	if cfg.MaxClients != 7 {
		t.Errorf("max-clients from env = %d; want 7", cfg.MaxClients)
	}
}

// TestLeaseRowDelayKey: postgres-lease-row-delay defaults to 200ms and is
// set by file, env and flag, 0s included (a row at once). The tests'
// default delay (testsrv) is lockproxy's.
func TestLeaseRowDelayKey(t *testing.T) {
	if d, err := parseDuration(defaults().PostgresRowDelay); err != nil || d != testsrv.DefaultPGRowDelay {
		t.Errorf("default postgres-lease-row-delay %q; testsrv.DefaultPGRowDelay is %v", defaults().PostgresRowDelay, testsrv.DefaultPGRowDelay)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("postgres-lease-row-delay: 1s\n"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"default", nil, nil, "200ms"},
		{"file", []string{"--config", file}, nil, "1s"},
		{"env", []string{"--config", file}, []string{"LOCKPROXY_POSTGRES_LEASE_ROW_DELAY=0s"}, "0s"},
		{"flag", []string{"--config", file, "--postgres-lease-row-delay", "50ms"}, []string{"LOCKPROXY_POSTGRES_LEASE_ROW_DELAY=0s"}, "50ms"},
	} {
		cfg, _, err := load(tc.args, tc.env, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.PostgresRowDelay != tc.want {
			t.Errorf("%s: postgres-lease-row-delay = %q; want %q", tc.name, cfg.PostgresRowDelay, tc.want)
		}
		if probs := cfg.validate(); len(probs) > 0 {
			t.Errorf("%s: %v", tc.name, probs)
		}
	}
}

func TestUnknownKeyIsAnError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("listne: 127.0.0.1:1\n"), 0o600)
	if _, _, err := load([]string{"--config", file}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "listne") {
		t.Fatalf("a misspelt key = %v; want an error naming it", err)
	}
}

func TestValidationMessages(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"listen", func(c *Config) { c.Listen = "nope" }, `listen: "nope" is not host:port (e.g. 127.0.0.1:6380)`},
		{"backend unknown", func(c *Config) { c.Backend = "etcd" }, `backend: unknown backend "etcd" (use memory, quorum or postgres)`},
		{"quorum without nodes", func(c *Config) { c.Backend = "quorum" }, `quorum-nodes: empty while backend is quorum (list 3 or more independent Redis nodes, e.g. 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379)`},
		{"quorum bad node", func(c *Config) { c.Backend, c.QuorumNodes = "quorum", "a:1,nope" }, `quorum-nodes: "nope" is not host:port (e.g. 127.0.0.1:6379 or redis://host:port)`},
		{"quorum port range", func(c *Config) { c.Backend, c.QuorumNodes = "quorum", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:70003" }, `quorum-nodes: node 3: port "70003" of "127.0.0.1:70003" is not in 1..65535 (a TCP port is 1 to 65535, e.g. 127.0.0.1:6379)`},
		{"quorum node twice", func(c *Config) { c.Backend, c.QuorumNodes = "quorum", "a:1,a:1,b:1" }, `quorum-nodes: nodes 1 and 2 are both a:1: one Redis would cast two votes (list each node once)`},
		{"quorum node twice as URL", func(c *Config) { c.Backend, c.QuorumNodes = "quorum", "10.0.0.1:6379,redis://u:secret@10.0.0.1,b:1" }, `quorum-nodes: nodes 1 and 2 are both 10.0.0.1:6379: one Redis would cast two votes (list each node once)`},
		{"postgres without dsn", func(c *Config) { c.Backend = "postgres" }, `postgres-dsn: empty while backend is postgres (e.g. postgres://lockproxy@db.internal:5432/locks)`},
		{"schema", func(c *Config) { c.Backend, c.PostgresDSN, c.PostgresSchema = "postgres", "postgres://x", "a-b" }, `postgres-schema: "a-b" is not a plain identifier (letters, digits and _, e.g. lockproxy)`},
		{"quorum timeout", func(c *Config) { c.QuorumTimeout = "x" }, `quorum-node-timeout: "x" is not a positive duration (e.g. 10s or 500ms)`},
		{"quorum max ttl", func(c *Config) { c.Backend, c.QuorumNodes, c.QuorumMaxTTL = "quorum", "a:1,b:1,c:1", "-1s" }, `quorum-max-ttl: "-1s" is not a duration of 0 or more (e.g. 5m, or 0s for no limit)`},
		{"quorum max ttl elsewhere", func(c *Config) { c.QuorumMaxTTL = "5m" }, `quorum-max-ttl: set while backend is memory: it would be ignored (remove it, or set backend: quorum)`},
		{"strategy", func(c *Config) { c.PostgresStrategy = "x" }, `postgres-strategy: unknown strategy "x" (use advisory or lease)`},
		{"admin", func(c *Config) { c.AdminListen = "x" }, `admin-listen: "x" is not host:port (e.g. 127.0.0.1:9121, or empty to disable)`},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, `log-level: unknown level "loud" (use debug, info, warn or error)`},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, `log-format: unknown format "xml" (use text or json)`},
		{"max clients", func(c *Config) { c.MaxClients = 0 }, `max-clients: 0 is not positive (e.g. 10000)`},
		{"request bytes", func(c *Config) { c.MaxRequestBytes = 10 }, `max-request-bytes: 10 is below 1024 (e.g. 8388608)`},
		{"script bytes", func(c *Config) { c.MaxScriptBytes = 10 }, `max-script-bytes: 10 is below 1024 (e.g. 1048576)`},
		{"shutdown", func(c *Config) { c.ShutdownTimeout = "soon" }, `shutdown-timeout: "soon" is not a positive duration (e.g. 10s or 500ms)`},
		{"script limit", func(c *Config) { c.ScriptTimeLimit = "-1s" }, `script-time-limit: "-1s" is not a positive duration (e.g. 10s or 500ms)`},
		{"script memory", func(c *Config) { c.ScriptMemory = "lots" }, `script-memory-limit: "lots" is not a memory size of 1mb or more (e.g. 64mb)`},
		{"script memory small", func(c *Config) { c.ScriptMemory = "1000kb" }, `script-memory-limit: "1000kb" is not a memory size of 1mb or more (e.g. 64mb)`},
		{"protected mode 0.0.0.0", func(c *Config) { c.Listen = "0.0.0.0:6380" }, `protected-mode: listen 0.0.0.0:6380 reaches beyond loopback and clients need no password (set requirepass, users or tls-ca-cert-file, or protected-mode: no to serve without authentication, or listen on 127.0.0.1)`},
		{"protected mode empty host", func(c *Config) { c.Listen = ":6380" }, `protected-mode: listen :6380 reaches beyond loopback and clients need no password (set requirepass, users or tls-ca-cert-file, or protected-mode: no to serve without authentication, or listen on 127.0.0.1)`},
		{"protected mode name", func(c *Config) { c.Listen = "lockproxy.internal:6380" }, `protected-mode: listen lockproxy.internal:6380 reaches beyond loopback and clients need no password (set requirepass, users or tls-ca-cert-file, or protected-mode: no to serve without authentication, or listen on 127.0.0.1)`},
		{"protected mode admin", func(c *Config) { c.AdminListen = "0.0.0.0:9121" }, `protected-mode: admin-listen 0.0.0.0:9121 reaches beyond loopback and its locks and release need no password (set requirepass or users (the admin port asks for the same credentials over HTTP Basic), or protected-mode: no, or admin-listen on 127.0.0.1)`},
		{"protected mode admin with client certificates", func(c *Config) {
			c.AdminListen, c.TLSCACertFile = ":9121", "ca.pem" // certificates guard RESP, not HTTP
		}, `protected-mode: admin-listen :9121 reaches beyond loopback and its locks and release need no password (set requirepass or users (the admin port asks for the same credentials over HTTP Basic), or protected-mode: no, or admin-listen on 127.0.0.1)`},
		{"quorum of two", func(c *Config) { c.Backend, c.QuorumNodes = "quorum", "a:1,b:1" }, `quorum-nodes: 2 node(s): a quorum of fewer than 3 survives no node's failure (list 3 or more independent Redis nodes, or quorum-allow-fewer-nodes: yes for a test rig)`},
		{"quorum of one", func(c *Config) { c.Backend, c.QuorumNodes = "quorum", "a:1" }, `quorum-nodes: 1 node(s): a quorum of fewer than 3 survives no node's failure (list 3 or more independent Redis nodes, or quorum-allow-fewer-nodes: yes for a test rig)`},
		{"nodes without quorum", func(c *Config) { c.QuorumNodes = "a:1,b:1,c:1" }, `quorum-nodes: set while backend is memory: it would be ignored (remove it, or set backend: quorum)`},
		{"dsn without postgres", func(c *Config) { c.Backend, c.QuorumNodes, c.PostgresDSN = "quorum", "a:1,b:1,c:1", "postgres://db/x" }, `postgres-dsn: set while backend is quorum: it would be ignored (remove it, or set backend: postgres)`},
		{"user without password", func(c *Config) { c.Users = userList{{Name: "app"}} }, `users: user "app" has no password (set password, or sha256 to the hex SHA-256 of one: printf %s PASS | sha256sum)`},
		{"user without name", func(c *Config) { c.Users = userList{{Password: "x"}} }, `users: a user has no name (give every user a name)`},
		{"user default", func(c *Config) { c.Users = userList{{Name: "default", Password: "x"}} }, `users: "default" is the requirepass user (set its password with requirepass)`},
		{"user twice", func(c *Config) { c.Users = userList{{Name: "a", Password: "x"}, {Name: "a", Password: "y"}} }, `users: user "a" is listed twice (keep one entry per user)`},
		{"user both", func(c *Config) { c.Users = userList{{Name: "a", Password: "x", SHA256: strings.Repeat("0", 64)}} }, `users: user "a" has both password and sha256 (keep one)`},
		{"user bad sha", func(c *Config) { c.Users = userList{{Name: "a", SHA256: "abc"}} }, `users: user "a": sha256 is not 64 hex digits (printf %s PASS | sha256sum gives it)`},
		{"user space", func(c *Config) { c.Users = userList{{Name: "a b", Password: "x"}} }, `users: user name "a b" has a space or one of > # , (use letters, digits and -_.:@)`},
		{"passthrough scheme", func(c *Config) { c.Passthrough = "http://cache:6379" }, `passthrough: http://cache:6379 is not a redis:// or rediss:// URL (e.g. redis://cache.internal:6379 or rediss://user:pass@host:6380; clients' SELECT picks the database)`},
		{"passthrough host only", func(c *Config) { c.Passthrough = "cache:6379" }, `passthrough: cache:6379 is not a redis:// or rediss:// URL (e.g. redis://cache.internal:6379 or rediss://user:pass@host:6380; clients' SELECT picks the database)`},
		{"passthrough masks", func(c *Config) { c.Passthrough = "http://u:secret@cache:6379" }, `passthrough: http://u:xxxxx@cache:6379 is not a redis:// or rediss:// URL (e.g. redis://cache.internal:6379 or rediss://user:pass@host:6380; clients' SELECT picks the database)`},
		{"passthrough db", func(c *Config) { c.Passthrough = "redis://cache:6379/2" }, `passthrough: a database in the URL ("/2") is not supported (e.g. redis://cache.internal:6379 or rediss://user:pass@host:6380; clients' SELECT picks the database)`},
		{"migrate-from scheme", func(c *Config) { c.MigrateFrom = "http://legacy:6379" }, `migrate-from: http://legacy:6379 is not a redis:// or rediss:// URL (the legacy Redis the applications use today, e.g. redis://redis.internal:6379 or rediss://user:pass@host:6380)`},
		{"migrate-from masks", func(c *Config) { c.MigrateFrom = "redis://u:secret@legacy:6379/3" }, `migrate-from: a database in the URL ("/3") is not supported (the legacy Redis the applications use today, e.g. redis://redis.internal:6379 or rediss://user:pass@host:6380)`},
		{"migrate-from masks scheme", func(c *Config) { c.MigrateFrom = "tcp://u:secret@legacy:6379" }, `migrate-from: tcp://u:xxxxx@legacy:6379 is not a redis:// or rediss:// URL (the legacy Redis the applications use today, e.g. redis://redis.internal:6379 or rediss://user:pass@host:6380)`},
		{"migrate-from host only", func(c *Config) { c.MigrateFrom = "legacy:6379" }, `migrate-from: legacy:6379 is not a redis:// or rediss:// URL (the legacy Redis the applications use today, e.g. redis://redis.internal:6379 or rediss://user:pass@host:6380)`},
		{"migrate-timeout", func(c *Config) { c.MigrateTimeout = "0s" }, `migrate-timeout: "0s" is not a positive duration (e.g. 10s or 500ms)`},
		{"idle timeout", func(c *Config) { c.IdleTimeout = "-5s" }, `idle-timeout: "-5s" is not a duration of 0 or more (e.g. 300s, or 0 to never close idle clients)`},
		{"idle timeout word", func(c *Config) { c.IdleTimeout = "never" }, `idle-timeout: "never" is not a duration of 0 or more (e.g. 300s, or 0 to never close idle clients)`},
		{"data path", func(c *Config) { c.DataPath = "epoll" }, `data-path: unknown data path "epoll" (use goroutines or loops)`},
		{"lease row delay", func(c *Config) { c.PostgresRowDelay = "-1ms" }, `postgres-lease-row-delay: "-1ms" is not a duration of 0 or more (e.g. 200ms, or 0s to write every lease row at once)`},
		{"lease row delay word", func(c *Config) { c.PostgresRowDelay = "soon" }, `postgres-lease-row-delay: "soon" is not a duration of 0 or more (e.g. 200ms, or 0s to write every lease row at once)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaults()
			tt.mod(&c)
			if probs := c.validate(); !slices.Contains(probs, tt.want) {
				t.Errorf("validate() = %q; want it to contain %q", probs, tt.want)
			}
		})
	}
	if probs := defaults().validate(); len(probs) != 0 {
		t.Errorf("the defaults do not validate: %v", probs)
	}
}

// TestProtectedModeAllows lists the configurations protected mode lets
// start: loopback listeners, a password, or protected mode turned off.
func TestProtectedModeAllows(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"127.0.0.1":              func(c *Config) { c.Listen = "127.0.0.1:6380" },
		"127.0.0.2":              func(c *Config) { c.Listen = "127.0.0.2:6380" },
		"::1":                    func(c *Config) { c.Listen = "[::1]:6380" },
		"localhost":              func(c *Config) { c.Listen = "localhost:6380" },
		"password":               func(c *Config) { c.Listen, c.RequirePass = "0.0.0.0:6380", "s3cret" },
		"users":                  func(c *Config) { c.Listen, c.Users = "0.0.0.0:6380", userList{{Name: "app", Password: "x"}} },
		"protected-mode no":      func(c *Config) { c.Listen, c.ProtectedMode = "0.0.0.0:6380", false },
		"quorum of two, allowed": func(c *Config) { c.Backend, c.QuorumNodes, c.QuorumFewerNodes = "quorum", "a:1,b:1", true },
		"admin password":         func(c *Config) { c.Listen, c.AdminListen, c.RequirePass = "0.0.0.0:6380", "0.0.0.0:9121", "s3cret" },
		"admin users":            func(c *Config) { c.AdminListen, c.Users = "[::]:9121", userList{{Name: "app", Password: "x"}} },
		"admin no":               func(c *Config) { c.AdminListen, c.ProtectedMode = "0.0.0.0:9121", false },
		"admin localhost":        func(c *Config) { c.AdminListen = "localhost:9121" },
	} {
		c := defaults()
		mod(&c)
		if probs := c.validate(); len(probs) != 0 {
			t.Errorf("%s: validate() = %q; want no problem", name, probs)
		}
	}
}

func TestBooleanValues(t *testing.T) {
	for v, want := range map[string]bool{"yes": true, "no": false, "true": true, "false": false, "NO": false, "1": true, "0": false} {
		cfg, _, err := load(nil, []string{"LOCKPROXY_PROTECTED_MODE=" + v}, io.Discard)
		if err != nil || cfg.ProtectedMode != want {
			t.Errorf("LOCKPROXY_PROTECTED_MODE=%s: protected-mode = %v, %v; want %v", v, cfg.ProtectedMode, err, want)
		}
	}
	if _, _, err := load([]string{"--protected-mode", "maybe"}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), `--protected-mode: "maybe" is not a boolean (use yes or no)`) {
		t.Errorf("--protected-mode maybe = %v; want an error naming the flag", err)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("protected-mode: no\n"), 0o600)
	if cfg, _, err := load([]string{"--config", file}, nil, io.Discard); err != nil || cfg.ProtectedMode {
		t.Errorf("protected-mode: no in YAML = %v, %v; want false", cfg.ProtectedMode, err)
	}
}

func TestBadEnvAndFlagValues(t *testing.T) {
	if _, _, err := load(nil, []string{"LOCKPROXY_MAX_CLIENTS=many"}, io.Discard); err == nil || !strings.Contains(err.Error(), "LOCKPROXY_MAX_CLIENTS") {
		t.Errorf("a non-integer env value = %v; want an error naming the variable", err)
	}
	if _, _, err := load([]string{"--max-clients", "x"}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "max-clients") {
		t.Errorf("a non-integer flag value = %v; want an error naming the flag", err)
	}
}

// TestUsersForms: the users key from YAML (password or sha256), from the
// flag and environment forms (name>password, name#sha256hex), and names
// only when rendered.
func TestUsersForms(t *testing.T) {
	sum := "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8" // sha256("password")
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("users:\n  - name: app\n    password: s3cret\n  - name: ops\n    sha256: "+sum+"\n    admin: true\n"), 0o600)
	want := userList{{Name: "app", Password: "s3cret"}, {Name: "ops", SHA256: sum, Admin: true}}
	for name, args := range map[string]struct{ args, env []string }{
		"yaml": {args: []string{"--config", file}},
		"flag": {args: []string{"--users", "app>s3cret, ops#" + sum + " +admin"}},
		"env":  {env: []string{"LOCKPROXY_USERS=app>s3cret,ops#" + sum + " +admin"}},
	} {
		cfg, _, err := load(args.args, args.env, io.Discard)
		if err != nil || !reflect.DeepEqual(cfg.Users, want) {
			t.Errorf("%s: users = %+v, %v; want %+v", name, cfg.Users, err, want)
		}
		if probs := cfg.validate(); len(probs) != 0 {
			t.Errorf("%s: validate() = %q", name, probs)
		}
		if s := cfg.Users.String(); s != "app,ops" {
			t.Errorf("%s: users rendered as %q; want names only", name, s)
		}
	}
	cfg, _, _ := load([]string{"--users", "app"}, nil, io.Discard)
	if probs := cfg.validate(); !slices.Contains(probs, `users: user "app" has no password (set password, or sha256 to the hex SHA-256 of one: printf %s PASS | sha256sum)`) {
		t.Errorf("--users app: validate() = %q; want the missing password named", probs)
	}
	pu := want.proxyUsers()
	if len(pu) != 2 || pu[0].PasswordSHA256 != sha256.Sum256([]byte("s3cret")) || hex.EncodeToString(pu[1].PasswordSHA256[:]) != sum || pu[0].Admin || !pu[1].Admin {
		t.Errorf("proxyUsers() = %+v", pu)
	}
}

// TestTLSValidation: the TLS keys' problems, with real PEM files made by
// crypto/x509, and a mutual-TLS listener satisfying protected mode.
func TestTLSValidation(t *testing.T) {
	f := testsrv.NewTLSFiles(t)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"cert without key", func(c *Config) { c.TLSCertFile = f.Cert }, `tls-key-file: empty while tls-cert-file is set (set both, or neither for plain TCP)`},
		{"key without cert", func(c *Config) { c.TLSKeyFile = f.Key }, `tls-cert-file: empty while tls-key-file is set (set both, or neither for plain TCP)`},
		{"ca without cert", func(c *Config) { c.TLSCACertFile = f.CA }, `tls-ca-cert-file: set while tls-cert-file is empty (client certificates need TLS: set tls-cert-file and tls-key-file)`},
		{"missing file", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = "/nonexistent.pem", f.Key }, `tls-cert-file: cannot load the certificate, key or CA: open /nonexistent.pem: no such file or directory (PEM files readable by lockproxy)`},
		{"key of another cert", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = f.Cert, f.ClientKey }, `tls-cert-file: cannot load the certificate, key or CA: tls: private key does not match public key (PEM files readable by lockproxy)`},
		{"ca not pem", func(c *Config) { c.TLSCertFile, c.TLSKeyFile, c.TLSCACertFile = f.Cert, f.Key, "../../config.yaml" }, `tls-cert-file: cannot load the certificate, key or CA: no PEM certificate in ../../config.yaml (PEM files readable by lockproxy)`},
		{"quorum file without quorum-tls", func(c *Config) { c.QuorumTLSCACertFile = f.CA }, `quorum-tls-ca-cert-file: set while quorum-tls is no (set quorum-tls: yes)`},
		{"quorum cert without key", func(c *Config) { c.QuorumTLS, c.QuorumTLSCertFile = true, f.ClientCert }, `quorum-tls-cert-file: quorum-tls-cert-file and quorum-tls-key-file go together (set both, or neither when the nodes do not ask for client certificates)`},
		{"quorum bad ca", func(c *Config) { c.QuorumTLS, c.QuorumTLSCACertFile = true, "/nonexistent.pem" }, `quorum-tls-ca-cert-file: cannot load the node CA or client certificate: open /nonexistent.pem: no such file or directory (PEM files readable by lockproxy)`},
		{"quorum rediss", func(c *Config) { c.Backend, c.QuorumNodes, c.QuorumTLS = "quorum", "rediss://a:1,b:2", true }, `quorum-nodes: "rediss://a:1" is a rediss:// URL while quorum-tls is yes (write redis://… or host:port: quorum-tls makes every node TLS)`},
	} {
		c := defaults()
		tc.mod(&c)
		if probs := c.validate(); !slices.Contains(probs, tc.want) {
			t.Errorf("%s: validate() = %q; want it to contain %q", tc.name, probs, tc.want)
		}
	}
	c := defaults()
	c.Listen, c.TLSCertFile, c.TLSKeyFile, c.TLSCACertFile = "0.0.0.0:6380", f.Cert, f.Key, f.CA
	c.QuorumTLS, c.QuorumTLSCACertFile, c.QuorumTLSCertFile, c.QuorumTLSKeyFile = true, f.CA, f.ClientCert, f.ClientKey
	if probs := c.validate(); len(probs) != 0 {
		t.Errorf("full TLS with client certificates on 0.0.0.0: validate() = %q; want no problem", probs)
	}
}

func TestPassthroughURL(t *testing.T) {
	for in, want := range map[string]proxy.Upstream{
		"redis://cache:6379":           {Addr: "cache:6379"},
		"redis://cache":                {Addr: "cache:6379"},
		"redis://:pw@cache:1/":         {Addr: "cache:1", Password: "pw"},
		"redis://app:pw@10.0.0.1:6380": {Addr: "10.0.0.1:6380", Username: "app", Password: "pw"},
		"redis://pw@cache:1":           {Addr: "cache:1", Password: "pw"},
	} {
		c := defaults()
		c.Passthrough = in
		up, err := c.upstream()
		if err != nil || up.Addr != want.Addr || up.Username != want.Username || up.Password != want.Password || up.Dial != nil {
			t.Errorf("passthrough %s = %+v, %v; want %+v", in, up, err, want)
		}
	}
	c := defaults()
	c.Passthrough = "rediss://cache:6380"
	if up, err := c.upstream(); err != nil || up.Dial == nil {
		t.Errorf("rediss:// = %+v, %v; want a TLS dialer", up, err)
	}
	if got := maskURL("redis://app:secret@cache:1"); strings.Contains(got, "secret") {
		t.Errorf("maskURL = %q; want the password hidden", got)
	}
}

// TestProblemsAllAtOnce: every mistake of the file, the environment and
// the flags is reported in one run, one line per key with its fix, with a
// suggestion for a misspelt key, and nothing secret in the text.
func TestProblemsAllAtOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("backedn: quorum\nmax-clients: lots\nlisten: [a, b]\nprotected-mode: maybe\nlog-level: debug\n"), 0o600)
	var stderr strings.Builder
	err := run(t.Context(), []string{"--config", file, "--max-clients", "abc", "--idle-timeout", "-1s",
		"--backend", "quorum", "--quorum-nodes", "redis://u:s3cret@x:bad,a:1,b:2", "--check-config"},
		[]string{"LOCKPROXY_BACKNED=quorum", "LOCKPROXY_TEST_PG_DSN=postgres://x", "LOCKPROXY_DEPLOYMENT_COLOR=blue", "LOCKPROXY_SHUTDOWN_TIMEOUT=soon"},
		io.Discard, &stderr)
	if !errors.Is(err, errInvalidConfig) {
		t.Fatalf("run = %v; want errInvalidConfig", err)
	}
	want := []string{
		file + `:1: backedn: unknown key (did you mean backend?)`,
		file + `:2: max-clients: "lots" is not an integer (e.g. 10000)`,
		file + `:3: listen: expects a single value, not a list or mapping (e.g. 127.0.0.1:6380)`,
		file + `:4: protected-mode: "maybe" is not a boolean (use yes or no)`,
		`LOCKPROXY_BACKNED: unknown variable (did you mean LOCKPROXY_BACKEND?)`,
		`--max-clients: "abc" is not an integer (e.g. 10000)`,
		`idle-timeout: "-1s" is not a duration of 0 or more (e.g. 300s, or 0 to never close idle clients)`,
		`shutdown-timeout: "soon" is not a positive duration (e.g. 10s or 500ms)`,
		`quorum-nodes: node 1 is not a valid redis:// or rediss:// URL: invalid port ":bad" after host (e.g. redis://host:6379 or rediss://user:pass@host:6380)`,
	}
	got := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(stderr.String(), "s3cret") {
		t.Errorf("a problem shows the node's password: %s", stderr.String())
	}
}

// TestFlagProblems: an unknown flag is reported once, with a suggestion
// when it is a typo; --help shows defaults as config.yaml spells them.
func TestFlagProblems(t *testing.T) {
	for args, want := range map[string]string{
		"--listne x":   "--listne: unknown flag (did you mean --listen?)\n",
		"--frobnicate": "--frobnicate: unknown flag (lockproxy --help lists the flags)\n",
		"extra":        "extra: unexpected argument (lockproxy takes flags only, e.g. --backend quorum)\n",
	} {
		var stderr strings.Builder
		if err := run(t.Context(), strings.Fields(args), nil, io.Discard, &stderr); !errors.Is(err, errInvalidConfig) || stderr.String() != want {
			t.Errorf("lockproxy %s: %v, %q; want %q", args, err, stderr.String(), want)
		}
	}
	var help strings.Builder
	if err := run(t.Context(), []string{"--help"}, nil, io.Discard, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help = %v", err)
	}
	for _, bad := range []string{"(default )", "(default true)", "(default false)"} {
		if strings.Contains(help.String(), bad) {
			t.Errorf("--help shows %q:\n%s", bad, help.String())
		}
	}
	for _, good := range []string{"(default yes)", "redis:// URLs", "(default memory)"} {
		if !strings.Contains(help.String(), good) {
			t.Errorf("--help lacks %q", good)
		}
	}
}

// TestCheckConfigParsesAddresses: --check-config refuses a DSN or a node
// URL that cannot be parsed, before any connection is tried.
func TestCheckConfigParsesAddresses(t *testing.T) {
	c := defaults()
	c.Backend, c.PostgresDSN = "postgres", "notadsn"
	want := `postgres-dsn: it does not parse as a postgres:// URL or key=value connection string (e.g. postgres://lockproxy@db.internal:5432/locks or host=db.internal user=lockproxy dbname=locks)`
	if probs := c.validate(); !slices.Contains(probs, want) {
		t.Errorf("validate() = %q; want %q", probs, want)
	}
	c.PostgresDSN = "host=db user=lockproxy dbname=locks"
	if probs := c.validate(); len(probs) != 0 {
		t.Errorf("a key=value DSN: validate() = %q", probs)
	}
}

// TestDataPathTLS: loops is the default; a TLS listener keeps the
// goroutine front end whatever data-path says. That is documented
// behaviour, not a misconfiguration: the start line's data_path names the
// front end in use and no warning is added (one would fire for every TLS
// set-up on the default).
func TestDataPathTLS(t *testing.T) {
	c := defaults()
	if got := c.dataPath(); got != "loops" {
		t.Fatalf("dataPath by default = %q; want loops", got)
	}
	c.TLSCertFile, c.TLSKeyFile = "cert.pem", "key.pem"
	if got := c.dataPath(); got != "goroutines" {
		t.Fatalf("dataPath with TLS = %q; want goroutines", got)
	}
	if w := c.warnings(); len(w) != 0 {
		t.Fatalf("warnings with TLS on the default data path = %q; want none", w)
	}
}

// TestCheckConfigQuorumNodes: --check-config refuses a port out of range
// and a node listed twice, naming the key and the fix (issue 23).
func TestCheckConfigQuorumNodes(t *testing.T) {
	for nodes, want := range map[string]string{
		"127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:70003": `quorum-nodes: node 3: port "70003" of "127.0.0.1:70003" is not in 1..65535 (a TCP port is 1 to 65535, e.g. 127.0.0.1:6379)`,
		"a:1,a:1,b:1": `quorum-nodes: nodes 1 and 2 are both a:1: one Redis would cast two votes (list each node once)`,
	} {
		var stderr strings.Builder
		err := run(t.Context(), []string{"--backend", "quorum", "--quorum-nodes", nodes, "--check-config"}, nil, io.Discard, &stderr)
		if !errors.Is(err, errInvalidConfig) || strings.TrimSpace(stderr.String()) != want {
			t.Errorf("--quorum-nodes %s --check-config = %v\n%s\nwant %s", nodes, err, stderr.String(), want)
		}
	}
}

// TestFileProblemsNameTheLine: a value the file gave that validation
// refuses is named with the file and its line; the YAML list form of
// quorum-nodes is read and checked like the comma-separated one; a value
// the environment or a flag overrides is named without the file.
func TestFileProblemsNameTheLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("backend: quorum\nquorum-nodes:\n  - 127.0.0.1:7001\n  - 127.0.0.1:7002\n  - 127.0.0.1:99999\nlog-level: loud\n"), 0o600)
	cfg, _, err := load([]string{"--config", file}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	probs := cfg.validate()
	for _, want := range []string{
		file + `:2: quorum-nodes: node 3: port "99999" of "127.0.0.1:99999" is not in 1..65535 (a TCP port is 1 to 65535, e.g. 127.0.0.1:6379)`,
		file + `:6: log-level: unknown level "loud" (use debug, info, warn or error)`,
	} {
		if !slices.Contains(probs, want) {
			t.Errorf("validate() = %q; want it to contain %q", probs, want)
		}
	}
	cfg, _, err = load([]string{"--config", file, "--log-level", "noisy"}, []string{"LOCKPROXY_QUORUM_NODES=a:1,b:1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	probs = cfg.validate()
	for _, want := range []string{
		`log-level: unknown level "noisy" (use debug, info, warn or error)`,
		`quorum-nodes: 2 node(s): a quorum of fewer than 3 survives no node's failure (list 3 or more independent Redis nodes, or quorum-allow-fewer-nodes: yes for a test rig)`,
	} {
		if !slices.Contains(probs, want) {
			t.Errorf("overridden: validate() = %q; want it to contain %q", probs, want)
		}
	}
}

// TestParseMemory checks the memory sizes script-memory-limit takes, in
// Redis's units (memtoull).
func TestParseMemory(t *testing.T) {
	for in, want := range map[string]int64{"67108864": 64 << 20, "64mb": 64 << 20, "64MB": 64 << 20, "1gb": 1 << 30,
		"2m": 2e6, "3k": 3000, "5kb": 5 << 10, "7b": 7, "1G": 1e9} {
		if got, err := parseMemory(in); err != nil || got != want {
			t.Errorf("parseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "mb", "-1mb", "1.5gb", "1tb", "99999999999gb"} {
		if got, err := parseMemory(in); err == nil {
			t.Errorf("parseMemory(%q) = %d; want an error", in, got)
		}
	}
	if n := defaults().scriptMemory(); n != 64<<20 {
		t.Errorf("the default script-memory-limit is %d bytes; want 64 MiB", n)
	}
}
