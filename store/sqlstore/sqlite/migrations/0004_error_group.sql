-- Each dead letter and failed attempt keeps its error's group: the error
-- with IDs, numbers, UUIDs and hex replaced (internal/failgroup). The
-- command and the console count dead letters per group from an index,
-- whatever the table's size. Rows written before have '' until Migrate
-- fills them in, after this migration.
ALTER TABLE {dead_letters} ADD COLUMN error_group TEXT NOT NULL DEFAULT '';
ALTER TABLE {attempts} ADD COLUMN error_group TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS "{prefix}inbox_dead_letters_group_idx" ON {dead_letters} (error_group, id);
-- A dead letter looked up by its message's ID, of any consumer.
CREATE INDEX IF NOT EXISTS "{prefix}inbox_dead_letters_message_idx" ON {dead_letters} (message_id);
