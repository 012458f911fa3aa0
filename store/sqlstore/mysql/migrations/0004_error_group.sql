-- Each dead letter and failed attempt keeps its error's group: the error
-- with IDs, numbers, UUIDs and hex replaced (internal/failgroup). The
-- command and the console count dead letters per group from an index,
-- whatever the table's size. Rows written before have '' until Migrate
-- fills them in, after this migration.
-- As in 0002: no ADD COLUMN IF NOT EXISTS in MySQL, so each ALTER runs only
-- when information_schema lacks its column. One ALTER adds the column and
-- its indexes, so that a Migrate cut short leaves all or none of them.
SET @inbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE {dead_letters} ADD COLUMN error_group VARCHAR(255) NOT NULL DEFAULT '''',
        ADD INDEX `{prefix}inbox_dead_letters_group_idx` (error_group, id),
        ADD INDEX `{prefix}inbox_dead_letters_message_idx` (message_id(255))',
    'DO 0')
  FROM information_schema.COLUMNS
  WHERE TABLE_SCHEMA = {schema_literal} AND TABLE_NAME = '{prefix}inbox_dead_letters' AND COLUMN_NAME = 'error_group');
PREPARE inbox_ddl FROM @inbox_ddl;
EXECUTE inbox_ddl;
DEALLOCATE PREPARE inbox_ddl;
SET @inbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE {attempts} ADD COLUMN error_group VARCHAR(255) NOT NULL DEFAULT ''''',
    'DO 0')
  FROM information_schema.COLUMNS
  WHERE TABLE_SCHEMA = {schema_literal} AND TABLE_NAME = '{prefix}inbox_attempts' AND COLUMN_NAME = 'error_group');
PREPARE inbox_ddl FROM @inbox_ddl;
EXECUTE inbox_ddl;
DEALLOCATE PREPARE inbox_ddl;
