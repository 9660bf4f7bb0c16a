package pgbridge

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Fencing tokens (docs/fencing.md). A grant — a key going from absent to
// present, or a string's token replaced — takes the next value of the
// sequence <schema>.fencing_tokens when its fence is first read (LOCKPROXY
// FENCE or LOCK, model.Space.ReadFence), and keeps it in its lease (the
// row's fencing_token column, and the advisory strategy's lease in
// memory); a new grant clears it. So a lock nobody asks the fence of costs
// nothing more: taking one in every acquire cost the advisory strategy
// about an eighth of its lock rate (the sequence is one buffer every
// grant of every session locks). A read happens while its grant is live:
// after every earlier grant of the key ended and before any later one,
// and a sequence never hands out a value twice while PostgreSQL runs,
// across sessions and instances, so a later grant reads a greater fence.
//
// Across a crash of PostgreSQL a sequence can go back: nextval logs its
// advance ahead in WAL, but a statement that writes nothing else (the
// advisory strategy's read of a fence) commits without flushing it. So the
// first statement of a new incarnation — the one that fills the
// incarnation mark and carries the horizon (horizon.go), before any holder
// session takes a lock — also raises the sequence to at least PostgreSQL's
// clock in Unix microseconds (raiseFences). The fences before the crash
// were below the raise of their own incarnation plus one per fence since,
// below the clock of the next one unless a thousand were read per
// millisecond on average, or PostgreSQL's clock stepped back over the
// crash. (Microseconds keep fences below 2^53, which a script's Lua number
// holds exactly.) The lease strategy's reads write their row in the same
// transaction, whose commit flushes the advance; the raise costs nothing
// there either way.
//
// Rows written before fences existed have none (NULL, 0 here) and get one
// at their first read, as a new grant's.

// raiseFences is a SELECT of a WITH clause (fillMark's mark) that raises
// the fencing tokens' sequence when the statement filled the mark; it yields one row
// then, none otherwise.
func raiseFences(seq string) string {
	return `SELECT setval('` + seq + `', GREATEST((SELECT last_value FROM ` + seq + `),
		(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)) FROM mark`
}

// nextFenceSQL takes one fence.
func nextFenceSQL(seq string) string { return `SELECT nextval('` + seq + `')` }

// The advisory strategy takes a fence on the pool, the lease strategy in
// its transaction (whose commit flushes the advance).
// A fenced key is held by nobody: its fence is none (LOCKPROXY LOCK
// answers nil for it, and nothing is written).
func (t *advTx) newFence(ctx context.Context, k dbKey) (int64, error) {
	if t.fenced[k] {
		return 0, nil
	}
	return takeFence(ctx, t.a.b.pool, t.a.b.fencing)
}

func (t *leaseTx) newFence(ctx context.Context, _ dbKey) (int64, error) {
	return takeFence(ctx, t.conn, t.s.b.fencing)
}

func takeFence(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, seq string) (int64, error) {
	var f int64
	err := q.QueryRow(ctx, nextFenceSQL(seq)).Scan(&f)
	return f, err
}

// fencingParam is a fencing token as a statement's argument: NULL for none.
func fencingParam(f int64) any {
	if f == 0 {
		return nil
	}
	return f
}
