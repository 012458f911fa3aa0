-- Pruning deletes the oldest rows first, a batch at a time. The BRIN index
-- of 0001 cannot give rows in received_at order, so every batch read and
-- sorted every expired row: its cost grew with the table. A btree hands
-- out the oldest batch directly, whatever the table's size.
--
-- Building the index locks out claims for its duration (1.7 s per million
-- rows measured): on a large inbox, run this beforehand by hand with
-- CREATE INDEX CONCURRENTLY and the same name, which this statement then
-- skips.
CREATE INDEX IF NOT EXISTS "{prefix}inbox_received_at_btree_idx" ON {inbox} (received_at);

-- The BRIN index serves nothing else now.
DO $$
BEGIN
	EXECUTE format('DROP INDEX IF EXISTS %I.%I',
		(SELECT relnamespace::regnamespace::name FROM pg_class WHERE oid = '{inbox}'::regclass),
		'{prefix}inbox_received_at_idx');
END $$;
