-- The transactional outbox: messages written in a business transaction,
-- published by a relay, and deleted once the broker has them (or marked
-- published_at and deleted later, when the relay keeps them), so that the
-- table holds only the backlog. A row is due when available_at has passed
-- and it is neither parked nor published; a relay leases due rows by
-- moving available_at past its lease and stamping lease_token. Times are
-- UTC by the database's clock (UTC_TIMESTAMP(6)).
--
-- MySQL has no partial index: the claim (published_at IS NULL AND
-- parked_at IS NULL AND available_at <= now, ORDER BY available_at, seq,
-- FOR UPDATE SKIP LOCKED) reads the due rows in order from
-- outbox_due_idx, the two NULLs a constant prefix, without a sort and
-- without passing the published or parked rows. The same index yields the
-- published rows oldest first for their pruning (published_at < ...,
-- after the NULLs). The ordered claim finds a key's older unpublished
-- rows through outbox_key_idx.
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
    published_at DATETIME(6),
    UNIQUE KEY `{prefix}outbox_message_id_key` (message_id),
    INDEX `{prefix}outbox_due_idx` (published_at, parked_at, available_at, seq),
    INDEX `{prefix}outbox_key_idx` (msg_key, published_at, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
