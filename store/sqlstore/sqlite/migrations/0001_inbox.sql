-- Every statement is idempotent (IF NOT EXISTS): SQLite cannot run a
-- statement conditionally, so the printed script (MigrationScript) runs
-- them all again when it is applied twice.
--
-- The inbox: one row per claimed (consumer, message ID). IDs are BLOBs,
-- compared bytewise; STRICT makes SQLite refuse an ID bound as TEXT.
-- Times are unix milliseconds by the database's clock.
CREATE TABLE IF NOT EXISTS {inbox} (
    consumer     BLOB    NOT NULL,
    message_id   BLOB    NOT NULL,
    received_at  INTEGER NOT NULL,
    message_type TEXT    NOT NULL DEFAULT '',
    fingerprint  BLOB,
    dead         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer, message_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS "{prefix}inbox_received_at_idx" ON {inbox} (received_at);

-- Failed attempts, written in a transaction of their own so that the count
-- survives the rollback of the handler's.
CREATE TABLE IF NOT EXISTS {attempts} (
    consumer        BLOB    NOT NULL,
    message_id      BLOB    NOT NULL,
    attempts        INTEGER NOT NULL,
    first_failed_at INTEGER NOT NULL,
    last_failed_at  INTEGER NOT NULL,
    last_error      TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (consumer, message_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS "{prefix}inbox_attempts_last_failed_at_idx" ON {attempts} (last_failed_at);

-- Dead letters keep everything needed to replay the message. AUTOINCREMENT:
-- an ID is never reused after a dead letter is taken.
CREATE TABLE IF NOT EXISTS {dead_letters} (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer     BLOB    NOT NULL,
    message_id   BLOB    NOT NULL,
    message_type TEXT    NOT NULL DEFAULT '',
    payload      BLOB,
    headers      BLOB,
    error        TEXT    NOT NULL DEFAULT '',
    attempts     INTEGER NOT NULL DEFAULT 0,
    failed_at    INTEGER NOT NULL
) STRICT;

CREATE INDEX IF NOT EXISTS "{prefix}inbox_dead_letters_consumer_id_idx" ON {dead_letters} (consumer, id);
