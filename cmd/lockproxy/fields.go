package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// field is one configuration key with its flag name, usage and accessors.
type field struct {
	name, usage string
	get         func() string
	set         func(string) error
	example     string                 // a valid value, for the fix of a problem
	yaml        func(*yaml.Node) error // set from a YAML node that is not a plain scalar; nil: scalars only
}

// help is the flag's line of --help: its usage and its default, when it
// has one.
func (f field) help() string {
	if d := f.get(); d != "" {
		return f.usage + " (default " + d + ")"
	}
	return f.usage
}

func str(name, usage string, p *string) field {
	return field{name: name, usage: usage, get: func() string { return *p }, set: func(v string) error { *p = v; return nil }, example: *p}
}

func integer[T int | int64](name, usage string, p *T) field {
	return field{name: name, usage: usage, get: func() string { return strconv.FormatInt(int64(*p), 10) }, set: func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		*p = T(n)
		return nil
	}, example: strconv.FormatInt(int64(*p), 10)}
}

// boolean accepts what Redis's config does (yes/no) and Go's forms
// (true/false, 1/0).
func boolean(name, usage string, p *bool) field {
	return field{name: name, usage: usage, get: func() string { return yesNo(*p) }, set: func(v string) error {
		b, ok := parseBool(v)
		if !ok {
			return fmt.Errorf("%q is not a boolean (use yes or no)", v)
		}
		*p = b
		return nil
	}, example: "yes"}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func parseBool(v string) (bool, bool) {
	switch strings.ToLower(v) {
	case "yes", "true", "1", "on":
		return true, true
	case "no", "false", "0", "off":
		return false, true
	}
	return false, false
}

// fields lists every configuration key of c, in a fixed order: the order
// validation reports problems in.
func fields(c *Config) []field {
	return []field{
		str("listen", "RESP listener address", &c.Listen),
		str("instance-name", "this instance's name in LOCKPROXY LOCK's holder and the lease rows (default: the host name and the listen port, host:port)", &c.InstanceName),
		str("backend", "memory, quorum or postgres", &c.Backend),
		nodesField(c),
		str("quorum-node-timeout", "how long one operation may take on one quorum node", &c.QuorumTimeout),
		str("quorum-max-ttl", "the longest TTL quorum grants (longer ones are refused); it bounds a restarted node's quarantine; 0s: none", &c.QuorumMaxTTL),
		str("postgres-dsn", "PostgreSQL connection string", &c.PostgresDSN),
		str("postgres-strategy", "advisory or lease", &c.PostgresStrategy),
		str("postgres-schema", "schema of the lease table (created if missing)", &c.PostgresSchema),
		str("postgres-lease-row-delay", "advisory: write a lock's lease row only once it is held this long; 0s writes it at once", &c.PostgresRowDelay),
		integer("postgres-advisory-locks", "advisory: the most advisory locks this instance holds (a command needing one more answers OOM); 0 is 3/4 of PostgreSQL's lock table, and more fails at start", &c.PostgresAdvLocks),
		str("admin-listen", "HTTP admin address (/metrics, /healthz, /readyz); empty disables", &c.AdminListen),
		str("requirepass", "password clients must AUTH with", &c.RequirePass),
		usersField(c),
		boolean("protected-mode", "refuse to listen beyond loopback without a password", &c.ProtectedMode),
		boolean("allow-flush", "serve FLUSHDB and FLUSHALL to admin users (no: to nobody)", &c.AllowFlush),
		str("log-level", "debug, info, warn or error", &c.LogLevel),
		str("log-format", "text or json", &c.LogFormat),
		integer("max-clients", "maximum concurrent clients", &c.MaxClients),
		integer("max-request-bytes", "maximum bytes of one request", &c.MaxRequestBytes),
		integer("max-script-bytes", "maximum bytes of one script", &c.MaxScriptBytes),
		str("shutdown-timeout", "how long SIGTERM waits for in-flight commands", &c.ShutdownTimeout),
		str("script-time-limit", "how long one script may run", &c.ScriptTimeLimit),
		str("script-memory-limit", "how much memory one script may hold (bytes, or with Redis's units: 64mb, 1gb)", &c.ScriptMemory),
		str("tls-cert-file", "serve clients TLS with this certificate (PEM)", &c.TLSCertFile),
		str("tls-key-file", "the key of tls-cert-file (PEM)", &c.TLSKeyFile),
		str("tls-ca-cert-file", "require client certificates signed by this CA (PEM)", &c.TLSCACertFile),
		boolean("quorum-tls", "connect to the quorum nodes with TLS", &c.QuorumTLS),
		str("quorum-tls-ca-cert-file", "CA that signed the quorum nodes' certificates (PEM; default: system roots)", &c.QuorumTLSCACertFile),
		str("quorum-tls-cert-file", "client certificate for the quorum nodes (PEM)", &c.QuorumTLSCertFile),
		str("quorum-tls-key-file", "the key of quorum-tls-cert-file (PEM)", &c.QuorumTLSKeyFile),
		boolean("quorum-allow-fewer-nodes", "let a quorum of 1 or 2 nodes start (a test rig: it survives no node's failure)", &c.QuorumFewerNodes),
		str("passthrough", "redis:// or rediss:// URL of a Redis that receives every command lockproxy does not serve", &c.Passthrough),
		str("idle-timeout", "close a client connection idle this long; 0 never", &c.IdleTimeout),
		str("data-path", "loops (a few event loops own the connections) or goroutines (one per connection); a TLS listener is always served on goroutines", &c.DataPath),
		str("migrate-from", "redis:// or rediss:// URL of the legacy Redis: every lock is also taken there while the fleet moves to lockproxy", &c.MigrateFrom),
		str("migrate-timeout", "how long one operation may take on the legacy Redis (far below the TTLs)", &c.MigrateTimeout),
	}
}

func parseDuration(s string) (time.Duration, error) { return time.ParseDuration(s) }

// nodesField is quorum-nodes: comma-separated, or in YAML a list.
func nodesField(c *Config) field {
	f := str("quorum-nodes", "comma-separated host:port or redis:// URLs of the quorum nodes", &c.QuorumNodes)
	f.example = "10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379"
	f.yaml = func(n *yaml.Node) error {
		switch n.Kind {
		case yaml.ScalarNode:
			return f.set(n.Value)
		case yaml.SequenceNode:
			var nodes []string
			for _, e := range n.Content {
				if e.Kind != yaml.ScalarNode {
					return fmt.Errorf("line %d: a node is host:port or a URL, not a list or mapping", e.Line)
				}
				nodes = append(nodes, e.Value)
			}
			return f.set(strings.Join(nodes, ","))
		}
		return fmt.Errorf("expects host:port values, as a list or comma-separated")
	}
	return f
}

// parseMemory reads a memory size as Redis's config does (memtoull): a
// number of bytes, or one with a unit in any letter case, k/m/g powers of
// 1000 and kb/mb/gb powers of 1024.
func parseMemory(s string) (int64, error) {
	units := []struct {
		suffix string
		mul    int64
	}{{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"b", 1}}
	num, mul := strings.ToLower(s), int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mul = n, u.mul
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mul {
		return 0, fmt.Errorf("%q is not a memory size", s)
	}
	return n * mul, nil
}
