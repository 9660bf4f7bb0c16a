-- pgbench script: one advisory holder batch of 8 acquires without lease
-- rows (postgres-lease-row-delay > 0): the locks, then the fence check that
-- pgbridge/deferred.go runs after them (a fence row per key, and the ended
-- sessions' rowless_until_ms) in the same pipeline, as the holder sends
-- them, then the 8 releases (unlock only). See tests/bench/README.md.
\set b random(1, 1000000000)
\startpipeline
SELECT ord, pg_try_advisory_lock(hashtextextended(u.ht, u.db::bigint)), hashtextextended(u.ht, u.db::bigint) FROM unnest(ARRAY[0,0,0,0,0,0,0,0]::int[], ARRAY['k::b:0','k::b:1','k::b:2','k::b:3','k::b:4','k::b:5','k::b:6','k::b:7']::text[]) WITH ORDINALITY AS u(db, ht, ord);
SELECT u.ord, GREATEST(CASE WHEN u.d THEN (SELECT f.deadline_ms FROM bench_leases f WHERE f.db = u.db AND f.key = u.key AND COALESCE(f.deadline_ms > floor(extract(epoch from now()) * 1000)::bigint AND f.holder_pid <> pg_backend_pid(), false)) END, g.until) FROM unnest(ARRAY[0,0,0,0,0,0,0,0]::int[], ARRAY[convert_to('k::b:0','UTF8'),convert_to('k::b:1','UTF8'),convert_to('k::b:2','UTF8'),convert_to('k::b:3','UTF8'),convert_to('k::b:4','UTF8'),convert_to('k::b:5','UTF8'),convert_to('k::b:6','UTF8'),convert_to('k::b:7','UTF8')]::bytea[], ARRAY[true,true,true,true,true,true,true,true]::bool[]) WITH ORDINALITY AS u(db, key, d, ord) CROSS JOIN (SELECT (SELECT max(s.rowless_until_ms) FROM bench_sessions s WHERE s.rowless_until_ms > floor(extract(epoch from now()) * 1000)::bigint AND (SELECT count(*) FROM pg_catalog.pg_class c WHERE c.oid = s.marker) = 0) AS until) g ORDER BY u.ord;
\endpipeline
SELECT ord, pg_advisory_unlock(id), id, NULL::boolean FROM unnest(ARRAY[hashtextextended('k::b:0',0),hashtextextended('k::b:1',0),hashtextextended('k::b:2',0),hashtextextended('k::b:3',0),hashtextextended('k::b:4',0),hashtextextended('k::b:5',0),hashtextextended('k::b:6',0),hashtextextended('k::b:7',0)]::bigint[]) WITH ORDINALITY AS u(id, ord) ORDER BY ord;
