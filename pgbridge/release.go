package pgbridge

import "context"

// Force-releasing a lock from SQL (docs/postgres.md, "Force-releasing a
// lock"). A lease row must never go while its lock stays held, so a
// trigger refuses to delete a live row from any session but lockproxy's
// own (which connect with lockproxy.internal = on) and the function
// lockproxy.force_release, which ends the lock first:
//
//   - lease: the row is the lock. The function takes the key's advisory
//     lock (as every lease operation does, so it waits for one running)
//     and deletes the row.
//   - advisory: the lock is a holder session's advisory lock, which only
//     that session can let go. The function finds the holding instance
//     (pg_locks, lockproxy.sessions) and asks it, by NOTIFY on its routing
//     channel (route.go), to delete the key as DEL does; that happens once
//     the calling transaction commits, within a round trip. A fence row
//     (a lost holder session's lock, held by nobody until its deadline)
//     is deleted at once, ending the fence.
//
// A lock held from SQL by a session that is not lockproxy's is not
// lockproxy's to end: the function refuses it, naming the pid.

// internalParam marks lockproxy's own sessions, whose deletes of lease
// rows the guard lets through (they hold the key's lock, or the row is
// dead): a startup parameter, so it costs no statement.
const internalParam = "lockproxy.internal"

// releaseDDL creates the guard and the functions; advisory says which
// strategy's force_release to create (the last instance started decides,
// and instances sharing a schema share a strategy).
func releaseDDL(schema, table string, advisory bool) []string {
	lockOf := `p.locktype = 'advisory' AND p.granted AND p.objsubid = 1
			AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND p.classid = ((id >> 32) & 4294967295)::oid AND p.objid = (id & 4294967295)::oid`
	guard := `CREATE OR REPLACE FUNCTION ` + schema + `.leases_guard() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
	id bigint;
	pid integer;
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		RAISE EXCEPTION 'lockproxy: TRUNCATE of ` + table + ` would leave its locks held'
			USING ERRCODE = 'P0001', HINT = 'release each lock with SELECT ` + schema + `.force_release(key, db)';
	END IF;
	id := OLD.lock_id;
	SELECT p.pid INTO pid FROM pg_locks p WHERE ` + lockOf + ` AND p.pid <> pg_backend_pid() LIMIT 1;
	IF pid IS NOT NULL OR OLD.deadline_ms IS NULL AND OLD.holder = 'lease'
			OR OLD.deadline_ms > floor(extract(epoch from clock_timestamp()) * 1000)::bigint THEN
		RAISE EXCEPTION 'lockproxy: the lock of key % in database % is held; deleting its row would not release it', encode(OLD.key, 'escape'), OLD.db
			USING ERRCODE = 'P0001', HINT = 'release it with SELECT ` + schema + `.force_release(key, db)';
	END IF;
	RETURN OLD;
END $f$`
	trigger := func(name, when string) string {
		return `DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '` + name + `' AND tgrelid = '` + table + `'::regclass) THEN
				CREATE TRIGGER ` + name + ` ` + when + ` ON ` + table + ` FOR EACH ROW
					WHEN (coalesce(current_setting('` + internalParam + `', true), '') <> 'on'
						AND coalesce(current_setting('lockproxy.force_release', true), '') <> 'on')
					EXECUTE FUNCTION ` + schema + `.leases_guard();
			END IF;
		END $$`
	}
	// hashtext is how lockproxy names a key to hashtextextended (hashText).
	hashtext := `CREATE OR REPLACE FUNCTION ` + schema + `.lock_text(key bytea) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN
	IF position('\x00'::bytea IN key) = 0 THEN
		RETURN convert_from(key, 'UTF8');
	END IF;
	RETURN '\x' || encode(key, 'hex');
EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN
	RETURN '\x' || encode(key, 'hex');
END $f$`
	head := `CREATE OR REPLACE FUNCTION ` + schema + `.force_release(key bytea, db integer DEFAULT 0) RETURNS boolean
LANGUAGE plpgsql AS $f$
DECLARE
	id bigint := hashtextextended(` + schema + `.lock_text(key), db);
	pid integer;
	inst text;
	n integer;
BEGIN
	PERFORM set_config('lockproxy.force_release', 'on', true);
`
	var body string
	if advisory {
		body = `	SELECT p.pid, split_part(s.holder, '/', 1) INTO pid, inst FROM pg_locks p
		LEFT JOIN ` + schema + `.sessions s ON s.pid = p.pid WHERE ` + lockOf + ` LIMIT 1;
	IF inst IS NOT NULL THEN
		PERFORM pg_notify('lockproxy_' || inst, json_build_object('q', json_build_object(
			'id', 0, 'from', 'sql', 'op', 'release', 'db', db,
			'key', translate(encode(key, 'base64'), E'\n', '')))::text);
		RETURN true;
	END IF;
	IF pid IS NOT NULL THEN
		RAISE EXCEPTION 'lockproxy: the lock of key % in database % is held by PostgreSQL session % (pg_advisory_lock), not by lockproxy', encode(key, 'escape'), db, pid
			USING ERRCODE = 'P0001', HINT = 'end it in that session, or with pg_terminate_backend(' || pid || ')';
	END IF;
	DELETE FROM ` + table + ` l WHERE l.db = force_release.db AND l.key = force_release.key
		AND l.deadline_ms > floor(extract(epoch from clock_timestamp()) * 1000)::bigint;
	GET DIAGNOSTICS n = ROW_COUNT;
	DELETE FROM ` + table + ` l WHERE l.db = force_release.db AND l.key = force_release.key;
	RETURN n > 0;
END $f$`
	} else {
		body = `	PERFORM pg_advisory_xact_lock(id);
	DELETE FROM ` + table + ` l WHERE l.db = force_release.db AND l.key = force_release.key
		AND (l.deadline_ms IS NULL OR l.deadline_ms > ` + pgNowMS + `);
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n > 0;
END $f$`
	}
	text := `CREATE OR REPLACE FUNCTION ` + schema + `.force_release(key text, db integer DEFAULT 0) RETURNS boolean
LANGUAGE sql AS $f$ SELECT ` + schema + `.force_release(convert_to(key, 'UTF8'), db) $f$`
	return []string{guard, trigger("leases_guard", "BEFORE DELETE"), hashtext, head + body, text,
		`DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'leases_guard_truncate' AND tgrelid = '` + table + `'::regclass) THEN
				CREATE TRIGGER leases_guard_truncate BEFORE TRUNCATE ON ` + table + ` FOR EACH STATEMENT
					WHEN (coalesce(current_setting('` + internalParam + `', true), '') <> 'on')
					EXECUTE FUNCTION ` + schema + `.leases_guard();
			END IF;
		END $$`}
}

// forceRelease serves the routed "release" a force_release sent (the
// advisory strategy): the key is deleted here as DEL deletes it, and the
// release logged as LOCKPROXY RELEASE's is.
func (b *Backend) forceRelease(ctx context.Context, db int, key string) (int64, error) {
	n, err := b.Del(ctx, db, []string{key})
	b.log.Warn("lock force-released from SQL", "key", key, "db", db, "held", n == 1, "err", err)
	return n, err
}
