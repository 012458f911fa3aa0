-- The transactional outbox: messages written in a business transaction,
-- published by a relay, and deleted once the broker has them (or marked
-- published_at and deleted later, when the relay keeps them), so that the
-- table holds only the backlog. A row is due when available_at has passed
-- and it is neither parked nor published; a relay leases due rows by
-- moving available_at past its lease and stamping lease_token. Times are
-- unix milliseconds by the database's clock. AUTOINCREMENT: a sequence
-- number is never reused after its row is published.
CREATE TABLE IF NOT EXISTS {outbox} (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id   BLOB    NOT NULL UNIQUE,
    destination  TEXT    NOT NULL,
    msg_key      BLOB,
    message_type TEXT    NOT NULL DEFAULT '',
    headers      BLOB,
    payload      BLOB,
    created_at   INTEGER NOT NULL,
    available_at INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT    NOT NULL DEFAULT '',
    lease_token  BLOB,
    parked_at    INTEGER,
    published_at INTEGER
) STRICT;

-- The claim reads the due rows in order from this partial index, never a
-- scan of the parked or kept published ones.
CREATE INDEX IF NOT EXISTS "{prefix}outbox_due_idx" ON {outbox} (available_at, seq) WHERE parked_at IS NULL AND published_at IS NULL;
-- Per-key order: a row waits while its key has an older unpublished row.
CREATE INDEX IF NOT EXISTS "{prefix}outbox_key_idx" ON {outbox} (msg_key, seq) WHERE msg_key IS NOT NULL AND published_at IS NULL;
-- Published rows kept for a while, deleted oldest first.
CREATE INDEX IF NOT EXISTS "{prefix}outbox_published_idx" ON {outbox} (published_at) WHERE published_at IS NOT NULL;
