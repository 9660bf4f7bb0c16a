package proxy

import (
	"slices"
	"strings"
	"testing"
)

// TestExecPlan: EXEC declares every key of its queue once, in order of
// first use, and runs command by command exactly when a script cannot
// hold the transaction (a command no script may run, or keys in another
// database than EXEC's).
func TestExecPlan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		start    int
		queue    []string
		keys     []string
		db       int
		asScript bool
	}{
		{"setnx pexpire", 0, []string{"SETNX m mine", "PEXPIRE m 30000"}, []string{"m"}, 0, true},
		{"set nx px", 3, []string{"SET m mine NX PX 30000"}, []string{"m"}, 3, true},
		{"keys once in order", 0, []string{"MSET b 1 a 2", "DEL a c b", "EXISTS d a", "DBSIZE"}, []string{"b", "a", "c", "d"}, 0, true},
		{"no keys", 0, []string{"PING", "ECHO x", "TIME", "DBSIZE"}, nil, 0, true},
		{"select at the end", 0, []string{"SET k v", "SELECT 4"}, []string{"k"}, 4, true},
		{"select there and back", 2, []string{"SELECT 5", "DBSIZE", "SELECT 2", "GET k"}, []string{"k"}, 2, true},
		{"select the same db", 1, []string{"SELECT 1", "GET k"}, []string{"k"}, 1, true},
		{"bad select keeps the db", 0, []string{"SELECT 99", "SELECT x", "GET k"}, []string{"k"}, 0, true},
		{"keys in another db", 0, []string{"SET a 1", "SELECT 1", "SETNX m mine"}, nil, 0, false},
		{"not scriptable", 0, []string{"SET a 1", "INFO"}, nil, 0, false},
	} {
		var queue [][][]byte
		var argc int
		for _, c := range tc.queue {
			var args [][]byte
			for _, a := range strings.Fields(c) {
				args = append(args, []byte(a))
			}
			queue = append(queue, args)
			argc += 1 + len(args)
		}
		keys, argv, db, ok := execPlan(queue, tc.start)
		if ok != tc.asScript {
			t.Errorf("%s: as a script = %v; want %v", tc.name, ok, tc.asScript)
			continue
		}
		if !ok {
			continue
		}
		if !slices.Equal(keys, tc.keys) || db != tc.db || len(argv) != argc {
			t.Errorf("%s: keys %q, db %d, %d ARGV; want %q, %d, %d", tc.name, keys, db, len(argv), tc.keys, tc.db, argc)
		}
	}
}
