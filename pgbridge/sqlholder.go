package pgbridge

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lockproxy/lockproxy/backend"
	"github.com/lockproxy/lockproxy/backend/model"
)

// sqlHolder answers LOCKPROXY LOCK key (args) for a key whose advisory
// lock a PostgreSQL session that is not a lockproxy holder has (h, from
// pg_advisory_lock in SQL): [nil, nil, -1, holder], the lock having no
// token, no fence and no TTL (it lasts until that session unlocks it or
// ends), and holder the map model.HolderValue describes with what
// pg_stat_activity says of that session: client_addr its client's
// address, client_name its application_name, client_user its role,
// granted_ms when the session began (PostgreSQL does not record when a
// lock was taken), and the field postgres_pid its backend pid. ok is
// false for another command, a key another lockproxy instance holds, or
// a lock let go meanwhile: the caller answers as before.
func (b *Backend) sqlHolder(ctx context.Context, h *heldError, args [][]byte) (v backend.Value, ok bool, err error) {
	if len(args) != 3 || !strings.EqualFold(string(args[0]), "lockproxy") || !strings.EqualFold(string(args[1]), "lock") ||
		len(h.keys) != 1 || h.instances[0] != "" {
		return backend.Value{}, false, nil
	}
	k := h.keys[0]
	notOurs := "true"
	if b.cfg.Strategy == Advisory {
		notOurs = `NOT EXISTS (SELECT FROM ` + b.cfg.Schema + `.sessions s WHERE s.pid = p.pid)`
	}
	var pid int32
	var since int64
	var addr, name, user string
	err = b.retryRead(ctx, func() error {
		return b.pool.QueryRow(ctx, `SELECT p.pid, COALESCE(host(a.client_addr) || ':' || a.client_port, CASE WHEN a.pid IS NOT NULL THEN 'local' END, ''),
				COALESCE(a.application_name, ''), COALESCE(a.usename::text, ''),
				COALESCE((extract(epoch FROM a.backend_start) * 1000)::bigint, 0)
			FROM (SELECT hashtextextended($1::text, $2::int::bigint) AS id) x
			JOIN pg_locks p ON p.locktype = 'advisory' AND p.granted AND p.objsubid = 1
				AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND p.classid = ((x.id >> 32) & 4294967295)::oid AND p.objid = (x.id & 4294967295)::oid
			LEFT JOIN pg_stat_activity a ON a.pid = p.pid
			WHERE p.pid <> pg_backend_pid() AND `+notOurs+`
			ORDER BY p.mode = 'ExclusiveLock' DESC, p.pid LIMIT 1`, hashText(k.key), k.db).Scan(&pid, &addr, &name, &user, &since)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return backend.Value{}, false, nil
	case err != nil:
		return backend.Value{}, true, tryAgain(err)
	}
	holder := model.HolderValue(backend.Grant{At: since, Holder: &backend.Holder{Addr: addr, Name: name, User: user}}, nil)
	holder.Elems = append(holder.Elems, backend.BulkString("postgres_pid"), backend.Int(int64(pid)))
	return backend.Array(backend.NilValue, backend.NilValue, backend.Int(-1), holder), true, nil
}
