package model_test

import (
	"testing"

	"github.com/lockproxy/lockproxy/backend/model"
	"github.com/lockproxy/lockproxy/keycmd"
)

// TestReadOnlyAsKeycmd checks model.ReadOnly, which tells the Journal
// what it need not save, against keycmd's Write flags (what EVAL_RO
// refuses): a write taken for a read would escape Undo.
func TestReadOnlyAsKeycmd(t *testing.T) {
	for _, name := range keycmd.Names() {
		if !model.Serves(name) {
			continue
		}
		if cmd := keycmd.Lookup([]byte(name)); model.ReadOnly(name) && cmd.Write {
			t.Errorf("%s writes (keycmd), but model.ReadOnly says it does not", name)
		} else if !model.ReadOnly(name) && !cmd.Write {
			t.Errorf("%s reads only (keycmd), but model.ReadOnly says it writes: the Journal would copy its keys for nothing", name)
		}
	}
}
