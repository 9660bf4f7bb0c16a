package tests

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
)

// commandGroupsNotServed says why a group of Redis commands, or the rest
// of one, is not served: what lock libraries and the clients of SPEC §5 do
// not send.
var commandGroupsNotServed = map[string]string{
	"bitmap":       "no lock library keeps bitmaps",
	"cluster":      "lockproxy answers as one node (cluster_enabled:0)",
	"geo":          "no lock library keeps geo indexes",
	"hyperloglog":  "no lock library keeps HyperLogLogs",
	"sentinel":     "lockproxy is not a Sentinel",
	"stream":       "no lock library keeps streams",
	"server":       "lockproxy is configured by its own flags and file; persistence, replication and the other server commands are the backend's business",
	"connection":   "served as far as clients send them",
	"generic":      notUsed,
	"string":       notUsed,
	"list":         notUsed,
	"hash":         notUsed,
	"set":          notUsed,
	"sorted-set":   notUsed,
	"pubsub":       "sharded pub/sub (SSUBSCRIBE …) is a cluster's",
	"transactions": "optimistic transactions are not served: no lock library lockproxy serves watches keys",
}

// notUsed is the reason for the rest of a group lockproxy serves in part.
const notUsed = "not sent by the lock libraries, rate limiters and harnesses lockproxy serves"

// commandDifferences are the served commands whose answers differ from
// Redis's in a documented way.
var commandDifferences = map[string]string{
	"keys":      "listed one shard at a time on the memory backend: a key written meanwhile may or may not be listed (Redis stops the world)",
	"config":    "GET answers the settings clients ask for; SET accepts only Redis's encoding settings, with no effect",
	"debug":     "refused with Redis's text for enable-debug-command no",
	"memory":    "USAGE is an estimate in Redis's terms; PURGE gives freed memory back; STATS and DOCTOR are not served",
	"info":      "lockproxy's own section besides Redis's; figures are lockproxy's process",
	"fcall":     "a function's library runs afresh on every call: its local variables start over, where Redis keeps them until the library is replaced; on quorum it runs once in lockproxy, as a script does",
	"function":  "libraries are each lockproxy instance's own (not shared through the backend, gone on restart); DUMP's payload is lockproxy's and restores in lockproxy only; KILL answers NOTBUSY: a running function blocks no other client",
	"eval":      "a script's memory is bounded (script-memory-limit) and a script stopped at a limit leaves no write; on quorum it runs once in lockproxy",
	"blpop":     "blocked clients are served in order within one instance; across instances the first pop wins",
	"subscribe": "a message reaches subscribers of every instance sharing the backend",
}

// TestCommandsDoc: docs/commands.md is the table of what lockproxy serves,
// made from its COMMAND list and redis-server 7.0's COMMAND DOCS, so it
// cannot drift from the code. LOCKPROXY_UPDATE_DOCS=1 writes it anew.
func TestCommandsDoc(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rc := redis.NewClient(&redis.Options{Addr: testsrv.StartRedis(t).Addr, Protocol: 2})
	defer rc.Close()
	docs, err := rc.Do(ctx, "COMMAND", "DOCS").Slice()
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string][]string{}
	redisHas := map[string]bool{}
	for i := 0; i+1 < len(docs); i += 2 {
		name, _ := docs[i].(string)
		fields, _ := docs[i+1].([]any)
		for j := 0; j+1 < len(fields); j += 2 {
			if fields[j] == "group" {
				g, _ := fields[j+1].(string)
				groups[g] = append(groups[g], name)
				redisHas[name] = true
			}
		}
	}
	lc := redis.NewClient(&redis.Options{Addr: testsrv.StartMemoryProxy(t), Protocol: 2})
	defer lc.Close()
	list, err := lc.Do(ctx, "COMMAND", "LIST").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, n := range list {
		served[n] = true
	}
	for name := range commandDifferences {
		if !served[name] {
			t.Errorf("commandDifferences names %s, which lockproxy does not serve", name)
		}
	}
	var b strings.Builder
	b.WriteString("# Commands\n\n")
	b.WriteString("What lockproxy serves of Redis 7.0's commands, by Redis's own groups (COMMAND DOCS), on every\n")
	b.WriteString("backend. Made by `TestCommandsDoc` from lockproxy's COMMAND list and redis-server's, so it\n")
	b.WriteString("cannot drift from the code (`LOCKPROXY_UPDATE_DOCS=1 go test -run TestCommandsDoc ./tests/`\n")
	b.WriteString("writes it anew). Served commands answer as redis-server 7.0.15 does, byte for byte, checked by\n")
	b.WriteString("the differential corpus, except the differences listed.\n\n")
	b.WriteString("| group | served | not served, and why |\n|---|---|---|\n")
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		var yes, no []string
		for _, n := range slices.Sorted(slices.Values(groups[g])) {
			if served[n] {
				yes = append(yes, "`"+n+"`")
			} else {
				no = append(no, "`"+n+"`")
			}
		}
		why := commandGroupsNotServed[g]
		if why == "" && len(no) > 0 {
			t.Errorf("group %s has commands not served (%v) and no reason in commandGroupsNotServed", g, no)
		}
		notServed := "—"
		if len(no) > 0 {
			notServed = strings.Join(no, " ") + ": " + why
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", g, orDash(strings.Join(yes, " ")), notServed)
	}
	var own []string
	for _, n := range slices.Sorted(maps.Keys(served)) {
		if !redisHas[n] {
			own = append(own, "`"+n+"`")
		}
	}
	b.WriteString("\nServed beyond Redis 7.0: " + strings.Join(own, " ") + " (lockproxy's own command, and the\n")
	b.WriteString("native lock commands of Redis 8.4 and Valkey 9).\n\n")
	b.WriteString("## Documented differences\n\n")
	for _, n := range slices.Sorted(maps.Keys(commandDifferences)) {
		fmt.Fprintf(&b, "- `%s`: %s.\n", n, commandDifferences[n])
	}
	const path = "../docs/commands.md"
	if os.Getenv("LOCKPROXY_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(path); string(got) != b.String() {
		t.Errorf("%s is not the table the code gives: run LOCKPROXY_UPDATE_DOCS=1 go test -run TestCommandsDoc ./tests/", path)
	}
}

// orDash is s, or a dash when s is empty.
func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
