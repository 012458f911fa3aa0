-- Transient failures (a deadlock or lock wait timeout in the handler's own
-- queries) are counted apart from the attempts that lead to a dead letter,
-- so that they space the retries out without using up MaxAttempts.
-- MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB has), and a migration must
-- be idempotent here (DDL commits by itself: a Migrate cut short runs it
-- again), so the column is added only when information_schema lacks it.
SET @inbox_ddl = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE {attempts} ADD COLUMN transient_failures INT NOT NULL DEFAULT 0',
    'DO 0')
  FROM information_schema.COLUMNS
  WHERE TABLE_SCHEMA = {schema_literal} AND TABLE_NAME = '{prefix}inbox_attempts' AND COLUMN_NAME = 'transient_failures');
PREPARE inbox_ddl FROM @inbox_ddl;
EXECUTE inbox_ddl;
DEALLOCATE PREPARE inbox_ddl;
