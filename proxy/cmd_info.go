package proxy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/keycmd"
	"github.com/lockproxy/lockproxy/luascripts"
)

// cmdInfo answers INFO [section ...] with the fields clients read
// (redis_version, loading; ioredis will not connect without them) and
// lockproxy's own section.
func cmdInfo(cl *client, args [][]byte) backend.Value {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[lower(a)] = true
	}
	all := len(want) == 0 || want["all"] || want["default"] || want["everything"]
	s := cl.s
	var b strings.Builder
	section := func(name string, lines ...string) {
		if !all && !want[strings.ToLower(name)] {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + name + "\r\n")
		for _, l := range lines {
			b.WriteString(l + "\r\n")
		}
	}
	up := time.Since(s.started)
	port := ""
	if a := s.Addr(); a != nil {
		_, port, _ = strings.Cut(a.String(), "]:")
		if port == "" {
			_, port, _ = strings.Cut(a.String(), ":")
		}
	}
	section("Server",
		"redis_version:"+luascripts.RedisVersion,
		"redis_mode:standalone",
		"os:"+runtime.GOOS,
		"arch_bits:64",
		"process_id:"+strconv.Itoa(os.Getpid()),
		"tcp_port:"+port,
		"uptime_in_seconds:"+strconv.FormatInt(int64(up/time.Second), 10),
		"uptime_in_days:"+strconv.FormatInt(int64(up/(24*time.Hour)), 10),
		"executable:lockproxy",
	)
	section("Clients",
		"connected_clients:"+strconv.Itoa(s.clientCount()),
		"maxclients:"+strconv.Itoa(s.cfg.MaxClients),
		"blocked_clients:"+strconv.Itoa(s.blockers.count()),
	)
	if all || want["memory"] {
		section("Memory", memoryLines(s.scripts.len())...)
	}
	section("Persistence", "loading:0", "async_loading:0", "rdb_bgsave_in_progress:0", "aof_enabled:0")
	section("Stats",
		"total_connections_received:"+strconv.FormatInt(s.stats.connections.Load(), 10),
		"total_commands_processed:"+strconv.FormatInt(s.stats.commands.Load(), 10),
		"total_error_replies:"+strconv.FormatInt(s.stats.errors.total.Load(), 10),
	)
	section("Replication", "role:master", "connected_slaves:0")
	section("CPU", cpuLines()...)
	section("Errorstats", s.stats.errors.lines()...)
	// Test harnesses read it to tell a cluster from a single server
	// (redis-py's conftest: cluster_enabled).
	section("Cluster", "cluster_enabled:0")
	section("Keyspace", s.keyspaceLines(cl.ctx)...)
	if all || want["lockproxy"] { // its lines ask the backend: only when wanted
		section("Lockproxy", s.infoLockproxy(cl)...)
	}
	return backend.Value{Kind: backend.KindVerbatim, Str: []byte(b.String())}
}

// infoLockproxy is INFO's lockproxy section: the backend, whether it can
// serve, the locks, and the settings an operator checks first; the same
// essentials as /metrics and /readyz.
func (s *Server) infoLockproxy(cl *client) []string {
	ready, why := 1, ""
	if err := checkReady(cl.ctx, s.b, time.Second); err != nil {
		ready, why = 0, strings.NewReplacer("\r", " ", "\n", " ").Replace(err.Error())
	}
	lines := []string{
		"lockproxy_backend:" + s.cfg.BackendName,
		"lockproxy_ready:" + strconv.Itoa(ready),
	}
	if why != "" {
		lines = append(lines, "lockproxy_not_ready_reason:"+why)
	}
	switch c, ok := s.b.(HeldLocksCounter); {
	case s.metrics != nil && s.metrics.locks.held != nil:
		lines = append(lines, "lockproxy_locks_held:"+strconv.FormatInt(s.metrics.locks.held.get(), 10))
	case ok:
		lines = append(lines, "lockproxy_locks_held:"+strconv.FormatInt(c.HeldLocks(), 10))
	}
	if c, ok := s.b.(ExpiryCounter); ok {
		lines = append(lines, "lockproxy_lock_expiries:"+strconv.FormatUint(c.ExpiredLocks(), 10))
	}
	if m := s.metrics; m != nil {
		for o, name := range outcomeNames {
			lines = append(lines, "lockproxy_lock_"+name+":"+strconv.FormatInt(m.locks.counts[o].Load(), 10))
		}
	}
	if r, ok := s.b.(InfoReporter); ok {
		lines = append(lines, r.InfoLines()...)
	}
	return append(lines,
		"lockproxy_script_cache_entries:"+strconv.Itoa(s.scripts.len()),
		"lockproxy_requirepass:"+strconv.FormatBool(s.cfg.RequirePass != ""),
		"lockproxy_users:"+strconv.Itoa(len(s.cfg.Users)),
		"lockproxy_passthrough:"+strconv.FormatBool(s.cfg.Passthrough != nil),
		"lockproxy_idle_timeout_seconds:"+strconv.FormatFloat(s.cfg.IdleTimeout.Seconds(), 'f', -1, 64),
	)
}

// cmdCommand answers COMMAND, COMMAND COUNT, COMMAND INFO and COMMAND DOCS
// with enough for redis-cli and client libraries that ask.
func cmdCommand(cl *client, args [][]byte) backend.Value {
	if len(args) == 1 {
		var out []backend.Value
		for _, n := range commandNames() {
			out = append(out, commandInfo(n))
		}
		return backend.Array(out...)
	}
	sub := lower(args[1])
	if arity, ok := commandSubArity[sub]; ok && !arityOK(arity, len(args)) {
		return backend.ErrorValue(backend.ErrWrongArgs("command|" + sub))
	}
	switch sub {
	case "count":
		return backend.Int(int64(len(commandNames())))
	case "info":
		if len(args) == 2 {
			return cmdCommand(cl, args[:1])
		}
		var out []backend.Value
		for _, a := range args[2:] {
			out = append(out, commandInfo(lower(a)))
		}
		return backend.Array(out...)
	case "docs":
		return backend.Value{Kind: backend.KindMap, Elems: []backend.Value{}}
	case "list":
		var out []backend.Value
		for _, n := range commandNames() {
			out = append(out, backend.BulkString(n))
		}
		return backend.Array(out...)
	case "help":
		return backend.Array(backend.Status("COMMAND [COUNT | DOCS | INFO | LIST]"))
	default:
		return backend.ErrorValue(backend.ErrUnknownSubcommand("command", string(args[1])))
	}
}

// commandSubArity are the arities of COMMAND's subcommands, as Redis's.
var commandSubArity = map[string]int{"count": 2, "info": -2, "docs": -2, "list": -2, "help": 2}

func commandNames() []string {
	names := keycmd.Names()
	for n := range commands {
		names = append(names, n)
	}
	return names
}

// commandInfo is one COMMAND INFO entry: name, arity, flags, first key,
// last key, step, ACL categories, tips, key specs, subcommands.
func commandInfo(name string) backend.Value {
	arity, first, last, step := 0, 0, 0, 0
	var flags []backend.Value
	if kc := keycmd.Lookup([]byte(name)); kc != nil {
		arity = kc.Arity
		first, last, step = kc.KeySpec()
		if kc.Write {
			flags = append(flags, backend.Status("write"))
		} else {
			flags = append(flags, backend.Status("readonly"))
		}
	} else if c, ok := commands[name]; ok {
		arity = c.arity
	} else {
		return backend.NilValue
	}
	return backend.Array(backend.BulkString(name), backend.Int(int64(arity)), backend.Array(flags...),
		backend.Int(int64(first)), backend.Int(int64(last)), backend.Int(int64(step)),
		backend.Array(), backend.Array(), backend.Array(), backend.Array())
}

// configParams are the parameters CONFIG GET reports (redis-benchmark asks
// for save and appendonly).
var configParams = [][2]string{
	{"save", ""}, {"appendonly", "no"}, {"databases", strconv.Itoa(keycmd.Databases)},
	{"maxmemory-policy", "noeviction"}, {"maxmemory", "0"}, {"appendfsync", "everysec"},
	{"timeout", "0"}, {"lua-time-limit", "5000"}, {"busy-reply-threshold", "5000"},
}

func cmdConfig(cl *client, args [][]byte) backend.Value {
	switch sub := lower(args[1]); sub {
	case "get":
		if len(args) < 3 {
			return backend.ErrorValue(backend.ErrWrongArgs("config|get"))
		}
		var out []backend.Value
		seen := map[string]bool{}
		params := append(configParams[:len(configParams):len(configParams)], cl.s.tuned.params()...)
		for _, pat := range args[2:] {
			for _, p := range params {
				if model.Match(bytes.ToLower(pat), []byte(p[0])) && !seen[p[0]] {
					seen[p[0]] = true
					out = append(out, backend.BulkString(p[0]), backend.BulkString(p[1]))
				}
			}
		}
		return backend.Value{Kind: backend.KindMap, Elems: append([]backend.Value{}, out...)}
	case "set":
		if len(args) < 4 {
			return backend.ErrorValue(backend.ErrWrongArgs("config|set"))
		}
		return cl.configSet(args)
	case "resetstat":
		if len(args) != 2 {
			return backend.ErrorValue(backend.ErrWrongArgs("config|resetstat"))
		}
		return backend.OKValue
	case "help":
		if len(args) != 2 {
			return backend.ErrorValue(backend.ErrWrongArgs("config|help"))
		}
		return backend.Array(backend.Status("CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"),
			backend.Status("GET <pattern>"),
			backend.Status("    Return parameters matching the glob-like <pattern> and their values."),
			backend.Status("SET <directive> <value>"),
			backend.Status("    Accepted for Redis's encoding settings (no effect); refused otherwise: lockproxy is configured by its own flags and file."),
			backend.Status("RESETSTAT"),
			backend.Status("    Accepted; lockproxy keeps its statistics in Prometheus metrics."))
	}
	return backend.ErrorValue(backend.ErrUnknownSubcommand("config", string(args[1])))
}

func cmdTime(cl *client, args [][]byte) backend.Value {
	now := time.Now()
	return backend.Array(backend.BulkString(strconv.FormatInt(now.Unix(), 10)),
		backend.BulkString(strconv.Itoa(now.Nanosecond()/1000)))
}

// keyspaceLines is INFO's Keyspace section: each database's DBSIZE, asked
// of the backend for all databases at once. One after another, a quorum
// node that is paused cost a node timeout per database, 16 in all, on
// every INFO — and ioredis sends INFO before each new connection's first
// command.
func (s *Server) keyspaceLines(ctx context.Context) []string {
	var sizes [keycmd.Databases]int64
	var wg sync.WaitGroup
	for db := range keycmd.Databases {
		wg.Go(func() {
			if n, err := s.b.DBSize(ctx, db); err == nil {
				sizes[db] = n
			}
		})
	}
	wg.Wait()
	var ks []string
	for db, n := range sizes {
		if n > 0 {
			ks = append(ks, fmt.Sprintf("db%d:keys=%d,expires=0,avg_ttl=0", db, n))
		}
	}
	return ks
}
