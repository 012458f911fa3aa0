-- Counting dead letters per error group also reads each group's least and
-- greatest failed_at. The index of 0005 lacks the column, so the count read
-- every row of the table. Carrying failed_at in the index lets it come from
-- an index-only scan. The keys stay those of 0005, so a search of one group
-- in ID order reads this index as it read that one, which it replaces.
--
-- The build blocks new dead letters for its duration: on a large table, run
-- this beforehand by hand with CREATE INDEX CONCURRENTLY and the same name,
-- which this statement then skips.
CREATE INDEX IF NOT EXISTS "{prefix}inbox_dead_letters_group_at_idx" ON {dead_letters} (error_group, id) INCLUDE (failed_at);

DO $$
BEGIN
	EXECUTE format('DROP INDEX IF EXISTS %I.%I',
		(SELECT relnamespace::regnamespace::name FROM pg_class WHERE oid = '{dead_letters}'::regclass),
		'{prefix}inbox_dead_letters_group_idx');
END $$;
