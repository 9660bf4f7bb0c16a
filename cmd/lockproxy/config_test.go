package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSampleConfigIsValid(t *testing.T) {
	cfg, _, err := load([]string{"--config", "../../config.yaml"}, nil, io.Discard)
	if err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if probs := cfg.validate(); len(probs) > 0 {
		t.Fatalf("config.yaml does not validate: %v", probs)
	}
	if cfg != defaults() {
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
		{"postgres without dsn", func(c *Config) { c.Backend = "postgres" }, `postgres-dsn: empty while backend is postgres (e.g. postgres://lockproxy@db.internal:5432/locks)`},
		{"schema", func(c *Config) { c.Backend, c.PostgresDSN, c.PostgresSchema = "postgres", "postgres://x", "a-b" }, `postgres-schema: "a-b" is not a plain identifier (letters, digits and _, e.g. lockproxy)`},
		{"quorum timeout", func(c *Config) { c.QuorumTimeout = "x" }, `quorum-node-timeout: "x" is not a positive duration (e.g. 10s or 500ms)`},
		{"strategy", func(c *Config) { c.PostgresStrategy = "x" }, `postgres-strategy: unknown strategy "x" (use advisory or lease)`},
		{"admin", func(c *Config) { c.AdminListen = "x" }, `admin-listen: "x" is not host:port (e.g. 127.0.0.1:9121, or empty to disable)`},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, `log-level: unknown level "loud" (use debug, info, warn or error)`},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, `log-format: unknown format "xml" (use text or json)`},
		{"max clients", func(c *Config) { c.MaxClients = 0 }, `max-clients: 0 is not positive (e.g. 10000)`},
		{"request bytes", func(c *Config) { c.MaxRequestBytes = 10 }, `max-request-bytes: 10 is below 1024 (e.g. 8388608)`},
		{"script bytes", func(c *Config) { c.MaxScriptBytes = 10 }, `max-script-bytes: 10 is below 1024 (e.g. 1048576)`},
		{"shutdown", func(c *Config) { c.ShutdownTimeout = "soon" }, `shutdown-timeout: "soon" is not a positive duration (e.g. 10s or 500ms)`},
		{"script limit", func(c *Config) { c.ScriptTimeLimit = "-1s" }, `script-time-limit: "-1s" is not a positive duration (e.g. 10s or 500ms)`},
		{"protected mode 0.0.0.0", func(c *Config) { c.Listen = "0.0.0.0:6380" }, `protected-mode: listen 0.0.0.0:6380 reaches beyond loopback and clients need no password (set requirepass, or protected-mode: no to serve without authentication, or listen on 127.0.0.1)`},
		{"protected mode empty host", func(c *Config) { c.Listen = ":6380" }, `protected-mode: listen :6380 reaches beyond loopback and clients need no password (set requirepass, or protected-mode: no to serve without authentication, or listen on 127.0.0.1)`},
		{"protected mode name", func(c *Config) { c.Listen = "lockproxy.internal:6380" }, `protected-mode: listen lockproxy.internal:6380 reaches beyond loopback and clients need no password (set requirepass, or protected-mode: no to serve without authentication, or listen on 127.0.0.1)`},
		{"idle timeout", func(c *Config) { c.IdleTimeout = "-5s" }, `idle-timeout: "-5s" is not a duration of 0 or more (e.g. 300s, or 0 to never close idle clients)`},
		{"idle timeout word", func(c *Config) { c.IdleTimeout = "never" }, `idle-timeout: "never" is not a duration of 0 or more (e.g. 300s, or 0 to never close idle clients)`},
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
		"127.0.0.1":         func(c *Config) { c.Listen = "127.0.0.1:6380" },
		"127.0.0.2":         func(c *Config) { c.Listen = "127.0.0.2:6380" },
		"::1":               func(c *Config) { c.Listen = "[::1]:6380" },
		"localhost":         func(c *Config) { c.Listen = "localhost:6380" },
		"password":          func(c *Config) { c.Listen, c.RequirePass = "0.0.0.0:6380", "s3cret" },
		"protected-mode no": func(c *Config) { c.Listen, c.ProtectedMode = "0.0.0.0:6380", false },
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
