-- Transient failures (SQLITE_BUSY in the handler's own queries) are counted
-- apart from the attempts that lead to a dead letter, so that they space
-- the retries out without using up MaxAttempts.
ALTER TABLE {attempts} ADD COLUMN transient_failures INTEGER NOT NULL DEFAULT 0;
