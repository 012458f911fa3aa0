-- The transactional outbox: messages written in a business transaction,
-- published by a relay, and deleted once the broker has them, so that the
-- table holds only the backlog. A row is due when available_at has passed
-- and it is not parked; a relay leases due rows by moving available_at
-- past its lease and stamping lease_token. Times are UTC by the database's
-- clock (UTC_TIMESTAMP(6)).
--
-- MySQL has no partial index: the claim (parked_at IS NULL AND
-- available_at <= now, ORDER BY available_at, seq, FOR UPDATE SKIP
-- LOCKED) reads the due rows in order from outbox_due_idx, whose NULL
-- parked_at entries come first, without a sort. The ordered claim finds a
-- key's older rows through outbox_key_idx.
CREATE TABLE IF NOT EXISTS {outbox} (
    seq          BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
    message_id   VARBINARY(1024) NOT NULL,
    destination  VARCHAR(1024)   NOT NULL,
    msg_key      VARBINARY(1024),
    message_type VARCHAR(255)    NOT NULL DEFAULT '',
    headers      LONGBLOB,
    payload      LONGBLOB,
    created_at   DATETIME(6)     NOT NULL,
    available_at DATETIME(6)     NOT NULL,
    attempts     INT             NOT NULL DEFAULT 0,
    last_error   TEXT            NOT NULL,
    lease_token  VARBINARY(255),
    parked_at    DATETIME(6),
    UNIQUE KEY `{prefix}outbox_message_id_key` (message_id),
    INDEX `{prefix}outbox_due_idx` (parked_at, available_at, seq),
    INDEX `{prefix}outbox_key_idx` (msg_key, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
