package quorum

import (
	"context"

	"github.com/lockproxy/lockproxy/backend"
)

// MaxSplits is maxSplits, for the external tests.
const MaxSplits = maxSplits

// RepairsPending is how many keys wait for a repair (repair.go).
func (b *Backend) RepairsPending() int { return b.repairs.len() }

// Stripe is stripe, for the external tests.
func Stripe(key string) uint8 { return stripe(key) }

// EvalModel is evalModel: a client's script run on the model, its keys
// read from the nodes and its changes committed (evalmodel.go).
func (b *Backend) EvalModel(ctx context.Context, db int, s backend.Script, keys []string, args [][]byte, ro bool) (backend.Value, error) {
	return b.evalModel(ctx, db, s, keys, args, ro)
}

// CheckAll is checkAll: one round of the monitor, now.
func (b *Backend) CheckAll() { b.checkAll() }

// Acquires counts the blocking acquires run through StartSet.
func (b *Backend) Acquires() int64 { return b.acquires.Load() }
