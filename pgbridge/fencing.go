package pgbridge

import "context"

// Fencing tokens (docs/fencing.md). Every grant — a key going from absent
// to present, or a string's token replaced — takes the next value of the
// sequence <schema>.fencing_tokens in the statement or transaction that grants
// it, and keeps it in its lease (the row's fencing_token column, and the
// advisory strategy's lease in memory); everything else keeps the fence.
// A sequence never hands out a value twice while PostgreSQL runs, across
// sessions and instances, so a later grant of a key has a greater fence.
//
// Across a crash of PostgreSQL a sequence can go back: nextval logs its
// advance ahead in WAL, but a statement that writes nothing else (the
// advisory strategy's acquire of a deferred lease) commits without
// flushing it. So the first statement of a new incarnation — the one that
// fills the incarnation mark and carries the horizon (horizon.go), before
// any holder session takes a lock — also raises the sequence to at least
// PostgreSQL's clock in Unix microseconds (raiseFences). The fences before
// the crash were below the raise of their own incarnation plus one per
// grant since, below the clock of the next one unless a thousand grants
// were made per millisecond on average, or PostgreSQL's clock stepped back
// over the crash. (Microseconds keep fences below 2^53, which a script's
// Lua number holds exactly.) The lease strategy needs no raise: its grants are
// write transactions, whose commit flushes the sequence's advance.
//
// Rows written before fences existed have none (NULL, 0 here): LOCKPROXY
// FENCE answers nil for them until their next grant.

// raiseFences is a SELECT of a WITH clause (fillMark's mark) that raises
// the fencing tokens' sequence when the statement filled the mark; it yields one row
// then, none otherwise.
func raiseFences(seq string) string {
	return `SELECT setval('` + seq + `', GREATEST((SELECT last_value FROM ` + seq + `),
		(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)) FROM mark`
}

// nextFenceSQL takes one fence.
func nextFenceSQL(seq string) string { return `SELECT nextval('` + seq + `')` }

func (t *advTx) newFence(ctx context.Context) (int64, error) {
	var f int64
	err := t.a.b.pool.QueryRow(ctx, nextFenceSQL(t.a.b.fencing)).Scan(&f)
	return f, err
}

func (t *leaseTx) newFence(ctx context.Context) (int64, error) {
	var f int64
	err := t.conn.QueryRow(ctx, nextFenceSQL(t.s.b.fencing)).Scan(&f)
	return f, err
}

// fencingParam is a fencing token as a statement's argument: NULL for none.
func fencingParam(f int64) any {
	if f == 0 {
		return nil
	}
	return f
}
