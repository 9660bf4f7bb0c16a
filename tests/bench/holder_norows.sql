-- pgbench script: one advisory holder batch of 8 acquires and then of 8
-- releases, merged as pgbridge/holder.go merges them, without lease rows.
-- See tests/bench/README.md.
\set b random(1, 1000000000)
SELECT ord, pg_try_advisory_lock(hashtextextended(u.ht, u.db::bigint)), hashtextextended(u.ht, u.db::bigint) FROM unnest(ARRAY[0,0,0,0,0,0,0,0]::int[], ARRAY['k::b:0','k::b:1','k::b:2','k::b:3','k::b:4','k::b:5','k::b:6','k::b:7']::text[]) WITH ORDINALITY AS u(db, ht, ord);
SELECT ord, pg_advisory_unlock(id), id FROM unnest(ARRAY[hashtextextended('k::b:0',0),hashtextextended('k::b:1',0),hashtextextended('k::b:2',0),hashtextextended('k::b:3',0),hashtextextended('k::b:4',0),hashtextextended('k::b:5',0),hashtextextended('k::b:6',0),hashtextextended('k::b:7',0)]::bigint[]) WITH ORDINALITY AS u(id, ord);
