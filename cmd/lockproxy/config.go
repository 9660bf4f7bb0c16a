package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/migrate"
	"github.com/lockproxy/lockproxy/pgbridge"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// Config is lockproxy's configuration. Precedence: defaults < config file <
// LOCKPROXY_* environment < flags. YAML keys are the flag names.
type Config struct {
	Listen           string   `yaml:"listen"`
	InstanceName     string   `yaml:"instance-name"`
	Backend          string   `yaml:"backend"`
	QuorumNodes      string   `yaml:"quorum-nodes"`
	QuorumTimeout    string   `yaml:"quorum-node-timeout"`
	QuorumMaxTTL     string   `yaml:"quorum-max-ttl"`
	PostgresDSN      string   `yaml:"postgres-dsn"`
	PostgresStrategy string   `yaml:"postgres-strategy"`
	PostgresSchema   string   `yaml:"postgres-schema"`
	PostgresRowDelay string   `yaml:"postgres-lease-row-delay"`
	PostgresAdvLocks int      `yaml:"postgres-advisory-locks"`
	AdminListen      string   `yaml:"admin-listen"`
	RequirePass      string   `yaml:"requirepass"`
	Users            userList `yaml:"users"`
	ProtectedMode    bool     `yaml:"protected-mode"`
	AllowFlush       bool     `yaml:"allow-flush"`
	LogLevel         string   `yaml:"log-level"`
	LogFormat        string   `yaml:"log-format"`
	MaxClients       int      `yaml:"max-clients"`
	MaxRequestBytes  int64    `yaml:"max-request-bytes"`
	MaxScriptBytes   int      `yaml:"max-script-bytes"`
	ShutdownTimeout  string   `yaml:"shutdown-timeout"`
	ScriptTimeLimit  string   `yaml:"script-time-limit"`
	ScriptMemory     string   `yaml:"script-memory-limit"`
	IdleTimeout      string   `yaml:"idle-timeout"`
	DataPath         string   `yaml:"data-path"`
	Passthrough      string   `yaml:"passthrough"`
	MigrateFrom      string   `yaml:"migrate-from"`
	MigrateTimeout   string   `yaml:"migrate-timeout"`

	TLSCertFile         string `yaml:"tls-cert-file"`
	TLSKeyFile          string `yaml:"tls-key-file"`
	TLSCACertFile       string `yaml:"tls-ca-cert-file"`
	QuorumTLS           bool   `yaml:"quorum-tls"`
	QuorumTLSCACertFile string `yaml:"quorum-tls-ca-cert-file"`
	QuorumTLSCertFile   string `yaml:"quorum-tls-cert-file"`
	QuorumTLSKeyFile    string `yaml:"quorum-tls-key-file"`
	QuorumFewerNodes    bool   `yaml:"quorum-allow-fewer-nodes"`

	// where is the file position ("config.yaml:12") that gave each key,
	// for the keys the file gave and neither the environment nor a flag
	// overrode: validate names it before the key.
	where map[string]string
}

func defaults() Config {
	return Config{
		Listen: "127.0.0.1:6380", Backend: "memory", PostgresStrategy: "advisory", PostgresSchema: "lockproxy",
		PostgresRowDelay: "200ms",
		AdminListen:      "127.0.0.1:9121", ProtectedMode: true, AllowFlush: true, LogLevel: "info", LogFormat: "text",
		MaxClients: 10000, MaxRequestBytes: 8 << 20, MaxScriptBytes: 1 << 20,
		ShutdownTimeout: "10s", ScriptTimeLimit: "5s", ScriptMemory: "64mb", QuorumTimeout: "50ms", QuorumMaxTTL: "0s", IdleTimeout: "0s",
		MigrateTimeout: "50ms", DataPath: "loops",
	}
}

// options are the command line switches that are not configuration.
type options struct {
	configPath  string
	checkConfig bool
	healthcheck bool
	version     bool
}

// load builds the configuration from args and env (os.Environ form). A
// configuration that cannot be read comes back as problems: every bad key
// of the file, the environment and the flags at once, each on its own line
// as "key: problem (fix)".
func load(args []string, env []string, stderr io.Writer) (Config, options, error) {
	var o options
	fs := flag.NewFlagSet("lockproxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse errors are reported once, as problems; --help prints the usage below
	fs.StringVar(&o.configPath, "config", "", "YAML config `file` (default: config.yaml in the working directory if present)")
	fs.BoolVar(&o.checkConfig, "check-config", false, "validate the configuration and exit (0 when valid, 2 when not)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.BoolVar(&o.healthcheck, "healthcheck", false, "ask the running lockproxy's admin endpoint (admin-listen) whether it is alive; exit 0 if so")
	d := defaults()
	flagVals := map[string]*string{}
	for _, f := range fields(&d) {
		v := new(string)
		flagVals[f.name] = v
		fs.StringVar(v, f.name, "", f.help())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "Usage: lockproxy [flags]  (every flag is also a config.yaml key and a LOCKPROXY_* variable)")
			fs.PrintDefaults()
			return Config{}, o, err
		}
		return Config{}, o, problems{flagProblem(err, fields(&d))}
	}
	if fs.NArg() > 0 {
		return Config{}, o, problems{fmt.Sprintf("%s: unexpected argument (lockproxy takes flags only, e.g. --backend quorum)", fs.Arg(0))}
	}

	cfg := defaults()
	var probs problems
	path := o.configPath
	if path == "" {
		if _, err := os.Stat("config.yaml"); err == nil {
			path = "config.yaml"
		}
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, o, problems{fmt.Sprintf("config: %v (give a readable YAML file, or no --config)", err)}
		}
		var fileProbs problems
		fileProbs, cfg.where = loadYAML(path, data, fields(&cfg))
		probs = append(probs, fileProbs...)
	}
	probs = append(probs, loadEnv(env, fields(&cfg))...)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, f := range fields(&cfg) {
		if _, ok := lookupEnv(env, envName(f.name)); ok || set[f.name] {
			delete(cfg.where, f.name) // the file did not give the value in force
		}
		if set[f.name] {
			if err := f.set(*flagVals[f.name]); err != nil {
				probs = append(probs, f.problem("--"+f.name, err))
			}
		}
	}
	if len(probs) > 0 {
		return cfg, o, probs
	}
	return cfg, o, nil
}

// validate returns every problem, each as "key: problem (fix)".
func (c Config) validate() []string {
	var probs []string
	add := func(key, problem, fix string) {
		if w := c.where[key]; w != "" {
			key = w + ": " + key
		}
		probs = append(probs, key+": "+problem+" ("+fix+")")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		add("listen", fmt.Sprintf("%q is not host:port", c.Listen), "e.g. 127.0.0.1:6380")
	} else if c.ProtectedMode && c.open() {
		add("protected-mode", fmt.Sprintf("listen %s reaches beyond loopback and clients need no password", c.Listen),
			"set requirepass, users or tls-ca-cert-file, or protected-mode: no to serve without authentication, or listen on 127.0.0.1")
	}
	c.Users.validate(add)
	c.validateTLS(add)
	if _, err := c.upstream(); err != nil {
		add("passthrough", err.Error(), "e.g. redis://cache.internal:6379 or rediss://user:pass@host:6380; clients' SELECT picks the database")
	}
	if c.MigrateFrom != "" {
		if _, err := migrate.ParseURL(c.MigrateFrom); err != nil {
			add("migrate-from", err.Error(), "the legacy Redis the applications use today, e.g. redis://redis.internal:6379 or rediss://user:pass@host:6380")
		}
	}
	c.validateBackend(add)
	if c.PostgresStrategy != "advisory" && c.PostgresStrategy != "lease" {
		add("postgres-strategy", fmt.Sprintf("unknown strategy %q", c.PostgresStrategy), "use advisory or lease")
	}
	if c.AdminListen != "" {
		if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
			add("admin-listen", fmt.Sprintf("%q is not host:port", c.AdminListen), "e.g. 127.0.0.1:9121, or empty to disable")
		} else if c.ProtectedMode && c.RequirePass == "" && len(c.Users) == 0 && !loopback(c.AdminListen) {
			// The admin port lists every lock's token and force-releases:
			// no more open to the network than the RESP port.
			add("protected-mode", fmt.Sprintf("admin-listen %s reaches beyond loopback and its locks and release need no password", c.AdminListen),
				"set requirepass or users (the admin port asks for the same credentials over HTTP Basic), or protected-mode: no, or admin-listen on 127.0.0.1")
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("log-level", fmt.Sprintf("unknown level %q", c.LogLevel), "use debug, info, warn or error")
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		add("log-format", fmt.Sprintf("unknown format %q", c.LogFormat), "use text or json")
	}
	c.validateLimits(add)
	if c.DataPath != proxy.DataPathGoroutines && c.DataPath != proxy.DataPathLoops {
		add("data-path", fmt.Sprintf("unknown data path %q", c.DataPath), "use goroutines or loops")
	}
	return probs
}

// validateBackend checks the chosen backend's own keys.
func (c Config) validateBackend(add func(key, problem, fix string)) {
	if c.Backend != "quorum" && c.QuorumNodes != "" {
		add("quorum-nodes", "set while backend is "+c.Backend+": it would be ignored", "remove it, or set backend: quorum")
	}
	if c.Backend != "quorum" && c.QuorumMaxTTL != "0s" && c.QuorumMaxTTL != "" {
		add("quorum-max-ttl", "set while backend is "+c.Backend+": it would be ignored", "remove it, or set backend: quorum")
	}
	if c.Backend != "postgres" && c.PostgresDSN != "" {
		add("postgres-dsn", "set while backend is "+c.Backend+": it would be ignored", "remove it, or set backend: postgres")
	}
	switch c.Backend {
	case "memory":
	case "quorum":
		switch n := len(c.nodes()); {
		case n == 0:
			add("quorum-nodes", "empty while backend is quorum", "list 3 or more independent Redis nodes, e.g. 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379")
		case n < 3 && !c.QuorumFewerNodes:
			add("quorum-nodes", fmt.Sprintf("%d node(s): a quorum of fewer than 3 survives no node's failure", n),
				"list 3 or more independent Redis nodes, or quorum-allow-fewer-nodes: yes for a test rig")
		}
		c.validateQuorumNodes(add)
	case "postgres":
		if c.PostgresDSN == "" {
			add("postgres-dsn", "empty while backend is postgres", "e.g. postgres://lockproxy@db.internal:5432/locks")
		} else if err := pgbridge.CheckDSN(c.PostgresDSN); err != nil {
			add("postgres-dsn", err.Error(), "e.g. postgres://lockproxy@db.internal:5432/locks or host=db.internal user=lockproxy dbname=locks")
		}
		if !pgbridge.ValidSchema(c.PostgresSchema) {
			add("postgres-schema", fmt.Sprintf("%q is not a plain identifier", c.PostgresSchema), "letters, digits and _, e.g. lockproxy")
		}
	default:
		add("backend", fmt.Sprintf("unknown backend %q", c.Backend), "use memory, quorum or postgres")
	}
}

// validateQuorumNodes checks each quorum node: its form, its port's range,
// and that no node is listed twice (one Redis would cast two votes).
func (c Config) validateQuorumNodes(add func(key, problem, fix string)) {
	seen := map[string]int{} // node index by the address it reaches
	for i, n := range c.nodes() {
		if strings.Contains(n, "://") {
			if _, err := redis.ParseURL(n); err != nil {
				var ue *url.Error // its text repeats the URL, password included: keep only the reason
				if errors.As(err, &ue) {
					err = ue.Err
				}
				add("quorum-nodes", fmt.Sprintf("node %d is not a valid redis:// or rediss:// URL: %v", i+1, err), "e.g. redis://host:6379 or rediss://user:pass@host:6380")
				continue
			}
		} else if _, _, err := net.SplitHostPort(n); err != nil {
			add("quorum-nodes", fmt.Sprintf("%q is not host:port", n), "e.g. 127.0.0.1:6379 or redis://host:port")
			continue
		}
		a, err := quorum.NodeAddr(n) // the port's range; the form two entries for one address share
		if err != nil {
			add("quorum-nodes", fmt.Sprintf("node %d: %v", i+1, err), "a TCP port is 1 to 65535, e.g. 127.0.0.1:6379")
			continue
		}
		if j, dup := seen[a]; dup {
			add("quorum-nodes", fmt.Sprintf("nodes %d and %d are both %s: one Redis would cast two votes", j+1, i+1, a), "list each node once")
			continue
		}
		seen[a] = i
	}
}

// validateLimits checks the numeric limits and the durations.
func (c Config) validateLimits(add func(key, problem, fix string)) {
	if c.MaxClients <= 0 {
		add("max-clients", fmt.Sprintf("%d is not positive", c.MaxClients), "e.g. 10000")
	}
	if c.MaxRequestBytes < 1024 {
		add("max-request-bytes", fmt.Sprintf("%d is below 1024", c.MaxRequestBytes), "e.g. 8388608")
	}
	if c.MaxScriptBytes < 1024 {
		add("max-script-bytes", fmt.Sprintf("%d is below 1024", c.MaxScriptBytes), "e.g. 1048576")
	}
	for key, v := range map[string]string{"shutdown-timeout": c.ShutdownTimeout, "script-time-limit": c.ScriptTimeLimit, "quorum-node-timeout": c.QuorumTimeout, "migrate-timeout": c.MigrateTimeout} {
		if d, err := parseDuration(v); err != nil || d <= 0 {
			add(key, fmt.Sprintf("%q is not a positive duration", v), "e.g. 10s or 500ms")
		}
	}
	if n, err := parseMemory(c.ScriptMemory); err != nil || n < 1<<20 {
		add("script-memory-limit", fmt.Sprintf("%q is not a memory size of 1mb or more", c.ScriptMemory), "e.g. 64mb")
	}
	if d, err := parseDuration(c.IdleTimeout); err != nil || d < 0 {
		add("idle-timeout", fmt.Sprintf("%q is not a duration of 0 or more", c.IdleTimeout), "e.g. 300s, or 0 to never close idle clients")
	}
	if d, err := parseDuration(c.QuorumMaxTTL); err != nil || d < 0 {
		add("quorum-max-ttl", fmt.Sprintf("%q is not a duration of 0 or more", c.QuorumMaxTTL), "e.g. 5m, or 0s for no limit")
	}
	if c.PostgresAdvLocks < 0 {
		add("postgres-advisory-locks", fmt.Sprintf("%d is negative", c.PostgresAdvLocks), "e.g. 0, for 3/4 of PostgreSQL's lock table")
	}
	if d, err := parseDuration(c.PostgresRowDelay); err != nil || d < 0 {
		add("postgres-lease-row-delay", fmt.Sprintf("%q is not a duration of 0 or more", c.PostgresRowDelay), "e.g. 200ms, or 0s to write every lease row at once")
	}
}

// dataPath is the front end Serve runs: data-path, except that a TLS
// listener always keeps the goroutine front end (the event loops read raw
// sockets and have no TLS).
// instanceName is instance-name, or the host name and the listen port.
func (c Config) instanceName() string {
	if c.InstanceName != "" {
		return c.InstanceName
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	_, port, _ := net.SplitHostPort(c.Listen)
	return net.JoinHostPort(host, port)
}

func (c Config) dataPath() string {
	if c.TLSCertFile != "" {
		return proxy.DataPathGoroutines
	}
	return c.DataPath
}

// open reports whether clients from beyond loopback could connect without
// authenticating: the listen address is not a loopback one, no password
// is required and no client certificate either.
func (c Config) open() bool {
	return c.RequirePass == "" && len(c.Users) == 0 && c.TLSCACertFile == "" && !loopback(c.Listen)
}

// loopback reports whether addr (host:port) listens on loopback only: an
// IP of 127.0.0.0/8 or ::1, or "localhost". An empty host, 0.0.0.0, any
// other IP or name counts as reachable from the network.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// nodes returns the quorum nodes listed in QuorumNodes.
func (c Config) nodes() []string {
	var out []string
	for _, n := range strings.Split(c.QuorumNodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}
