package pgbridge

import "github.com/lockproxy/lockproxy/backend"

// EvalFast runs the strategy's script fast path alone: done is false when
// the script would take the general path.
func EvalFast(b *Backend, db int, s backend.Script, key string, args [][]byte) (v backend.Value, done bool, err error) {
	return b.store.evalFast(b.ctx, s, []dbKey{{db, key}}, args, false)
}
