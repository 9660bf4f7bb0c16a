package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockproxy/lockproxy/internal/testsrv"
	"github.com/lockproxy/lockproxy/memory"
	"github.com/lockproxy/lockproxy/pgbridge"
)

// functionBackends start a lockproxy on each backend, for the function
// tests that the differential corpus cannot script (a reply fed back as
// a command's argument, concurrent clients).
var functionBackends = []struct {
	name  string
	start func(t *testing.T) string
}{
	{"memory", func(t *testing.T) string { return testsrv.StartMemoryProxy(t) }},
	{"quorum", func(t *testing.T) string { addr, _ := testsrv.StartQuorumProxy(t, 3); return addr }},
	{"postgres", func(t *testing.T) string { addr, _ := testsrv.StartPostgresProxy(t, pgbridge.Advisory); return addr }},
}

const (
	fnLib1 = "#!lua name=lib1\nlocal function add1(a) return a + 1 end\n" +
		"redis.register_function('f1', function(keys, args) return add1(1) end)\n" +
		"redis.register_function('f2', function(keys, args) return add1(2) end)\n" +
		"redis.register_function('f3', function(keys, args) return add1(3) end)"
	fnLib1Other = "#!lua name=lib1\nredis.register_function('f6', function(keys, args) return 7 end)"
	fnLib2      = "#!lua name=lib2\nlocal function add1(a) return a + 1 end\n" +
		"redis.register_function('f4', function(keys, args) return add1(4) end)\n" +
		"redis.register_function('f5', function(keys, args) return add1(5) end)\n" +
		"redis.register_function('f3', function(keys, args) return add1(3) end)"
)

// TestFunctionDumpRestore ports functions.tcl's DUMP and RESTORE tests:
// a payload of FUNCTION DUMP restores through FUNCTION RESTORE under each
// policy, collisions leave the libraries as they were, and payloads are
// lockproxy's own: Redis's are refused with Redis's words, as Redis
// refuses lockproxy's.
func TestFunctionDumpRestore(t *testing.T) {
	for _, be := range functionBackends {
		t.Run(be.name, func(t *testing.T) {
			ctx := t.Context()
			c := redis.NewClient(&redis.Options{Addr: be.start(t), Protocol: 2})
			defer c.Close()
			must := func(cmd redis.Cmder) {
				t.Helper()
				if err := cmd.Err(); err != nil {
					t.Fatalf("%v: %v", cmd.Args(), err)
				}
			}
			wantErr := func(cmd redis.Cmder, want string) {
				t.Helper()
				if err := cmd.Err(); err == nil || err.Error() != want {
					t.Fatalf("%v: %v, want %s", cmd.Args(), err, want)
				}
			}
			calls := func(want map[string]int64) {
				t.Helper()
				for fn, n := range want {
					if got, err := c.FCall(ctx, fn, nil).Int64(); err != nil || got != n {
						t.Fatalf("FCALL %s = %d, %v; want %d", fn, got, err, n)
					}
				}
			}
			must(c.FunctionLoad(ctx, fnLib1))
			dump, err := c.FunctionDump(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			must(c.FunctionFlush(ctx))
			must(c.FunctionRestore(ctx, dump))
			calls(map[string]int64{"f1": 2, "f2": 3, "f3": 4})
			wantErr(c.FunctionRestore(ctx, dump), "ERR Library lib1 already exists")

			// functions.tcl "test function restore with function name collision"
			must(c.FunctionFlush(ctx))
			must(c.FunctionLoad(ctx, fnLib1Other))
			must(c.FunctionLoad(ctx, fnLib2))
			wantErr(c.FunctionRestore(ctx, dump), "ERR Library lib1 already exists")
			calls(map[string]int64{"f3": 4, "f4": 5, "f5": 6, "f6": 7})
			wantErr(c.Do(ctx, "FUNCTION", "RESTORE", dump, "REPLACE"), "ERR Function f3 already exists")
			calls(map[string]int64{"f3": 4, "f4": 5, "f5": 6, "f6": 7})

			must(c.Do(ctx, "FUNCTION", "RESTORE", dump, "FLUSH"))
			calls(map[string]int64{"f1": 2, "f3": 4})
			wantErr(c.FCall(ctx, "f4", nil), "ERR Function not found")
			libs, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result()
			if err != nil || len(libs) != 1 || libs[0].Name != "lib1" || len(libs[0].Functions) != 3 {
				t.Fatalf("FUNCTION LIST = %+v, %v", libs, err)
			}
			// REPLACE swaps a library of the same name.
			must(c.FunctionFlush(ctx))
			must(c.FunctionLoad(ctx, fnLib1Other))
			must(c.Do(ctx, "FUNCTION", "RESTORE", dump, "REPLACE"))
			calls(map[string]int64{"f1": 2})
			wantErr(c.FCall(ctx, "f6", nil), "ERR Function not found")

			const badPayload = "ERR DUMP payload version or checksum are wrong"
			corrupt := []byte(dump)
			corrupt[len(corrupt)/2] ^= 1
			wantErr(c.FunctionRestore(ctx, string(corrupt)), badPayload)
			rc := redis.NewClient(&redis.Options{Addr: testsrv.StartRedis(t).Addr, Protocol: 2})
			defer rc.Close()
			must(rc.FunctionLoad(ctx, fnLib2))
			theirs, err := rc.FunctionDump(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			wantErr(c.FunctionRestore(ctx, theirs), badPayload)
			wantErr(rc.FunctionRestore(ctx, dump), badPayload)
			calls(map[string]int64{"f1": 2})
		})
	}
}

// TestFunctionReplaceWhileCalled: clients calling a function while its
// library is replaced get the old or the new one, whole, and every write
// a call reports is there.
func TestFunctionReplaceWhileCalled(t *testing.T) {
	for _, be := range functionBackends {
		t.Run(be.name, func(t *testing.T) {
			ctx := t.Context()
			addr := be.start(t)
			c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
			defer c.Close()
			lib := func(v int) string {
				return fmt.Sprintf("#!lua name=ctr\nredis.register_function('bump', function(keys) redis.call('incr', keys[1]) return %d end)", v)
			}
			if err := c.FunctionLoad(ctx, lib(0)).Err(); err != nil {
				t.Fatal(err)
			}
			const clients, calls = 3, 20
			var wg sync.WaitGroup
			errs := make(chan error, clients*calls+calls)
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range calls {
						v, err := c.FCall(ctx, "bump", []string{"fn:ctr"}).Int64()
						if err == nil && (v < 0 || v >= calls) {
							err = fmt.Errorf("bump = %d", v)
						}
						if err != nil {
							errs <- err
						}
					}
				}()
			}
			for i := range calls {
				if err := c.Do(ctx, "FUNCTION", "LOAD", "REPLACE", lib(i)).Err(); err != nil {
					errs <- err
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if n, err := c.Get(context.Background(), "fn:ctr").Int64(); err != nil || n != clients*calls {
				t.Fatalf("fn:ctr = %d, %v; want %d", n, err, clients*calls)
			}
		})
	}
}

// TestFunctionRefusedCommand: a function whose library can send a command
// lockproxy does not serve is refused before it runs, as a script is, in
// a function's words (its name, user_function), on every backend.
func TestFunctionRefusedCommand(t *testing.T) {
	for _, be := range functionBackends {
		t.Run(be.name, func(t *testing.T) {
			ctx := t.Context()
			c := redis.NewClient(&redis.Options{Addr: be.start(t), Protocol: 2})
			defer c.Close()
			lib := "#!lua name=streams\nredis.register_function('put', function(keys)\n redis.call('set', keys[1], 'v')\n return redis.call('xadd', keys[1], '*', 'f', 'v')\nend)"
			if err := c.FunctionLoad(ctx, lib).Err(); err != nil {
				t.Fatal(err)
			}
			err := c.FCall(ctx, "put", []string{"fn:s"}).Err()
			const want = "ERR lockproxy serves lock commands only: 'xadd' is not supported script: put, on @user_function:4."
			if err == nil || err.Error() != want {
				t.Fatalf("FCALL put = %v, want %s", err, want)
			}
			if n, err := c.Exists(ctx, "fn:s").Result(); err != nil || n != 0 {
				t.Fatalf("EXISTS fn:s = %d, %v: a refused function wrote", n, err)
			}
		})
	}
}

// TestFunctionMigratingRefused: while a proxy migrates from a legacy
// Redis, which lacks this instance's libraries, a function is refused in
// plain words and reaches neither store.
func TestFunctionMigratingRefused(t *testing.T) {
	ctx := t.Context()
	addr, legacy, _ := testsrv.StartMigratingProxy(t, "memory", memory.New(memory.Config{}))
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer c.Close()
	if err := c.FunctionLoad(ctx, "#!lua name=m\nredis.register_function('put', function(keys) return redis.call('set', keys[1], 'v') end)").Err(); err != nil {
		t.Fatal(err)
	}
	const want = "ERR lockproxy does not run functions (FCALL) while it migrates from a legacy Redis"
	if err := c.FCall(ctx, "put", []string{"fn:m"}).Err(); err == nil || err.Error() != want {
		t.Fatalf("FCALL put = %v, want %s", err, want)
	}
	lc := redis.NewClient(&redis.Options{Addr: legacy.Addr, Protocol: 2})
	defer lc.Close()
	for name, cl := range map[string]*redis.Client{"lockproxy": c, "legacy": lc} {
		if n, err := cl.Exists(ctx, "fn:m").Result(); err != nil || n != 0 {
			t.Fatalf("%s: EXISTS fn:m = %d, %v", name, n, err)
		}
	}
}
