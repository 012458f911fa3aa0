-- MySQL commits each DDL statement by itself, so a migration cannot be
-- atomic: every statement here is idempotent (IF NOT EXISTS, indexes inside
-- CREATE TABLE), and a migration cut short runs again cleanly. Statements
-- end with ";" at the end of a line, and only there.
--
-- Keys are VARBINARY: compared byte by byte, without case folding or PAD
-- SPACE, so 'a', 'A' and 'a ' are three IDs, and NUL bytes and invalid
-- UTF-8 are kept. Times are UTC by the database's clock (UTC_TIMESTAMP(6)).

-- The inbox: one row per processed (or dead-lettered) message and consumer.
-- The primary key is the guard: a second claim of (consumer, message_id)
-- finds the row.
CREATE TABLE IF NOT EXISTS {inbox} (
    consumer     VARBINARY(128)  NOT NULL,
    message_id   VARBINARY(1024) NOT NULL,
    received_at  DATETIME(6)     NOT NULL,
    message_type VARCHAR(255)    NOT NULL DEFAULT '',
    fingerprint  VARBINARY(32),
    dead         BOOLEAN         NOT NULL DEFAULT FALSE,
    PRIMARY KEY (consumer, message_id),
    INDEX `{prefix}inbox_received_at_idx` (received_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Failed attempts, written in their own transaction so that they survive
-- the rollback of the attempt and a crash.
CREATE TABLE IF NOT EXISTS {attempts} (
    consumer        VARBINARY(128)  NOT NULL,
    message_id      VARBINARY(1024) NOT NULL,
    attempts        INT             NOT NULL,
    first_failed_at DATETIME(6)     NOT NULL,
    last_failed_at  DATETIME(6)     NOT NULL,
    last_error      TEXT            NOT NULL,
    PRIMARY KEY (consumer, message_id),
    INDEX `{prefix}inbox_attempts_last_failed_at_idx` (last_failed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Messages that failed for good, with everything needed to replay them.
-- message_id is a BLOB: a dead letter may keep a message whose ID was
-- invalid (longer than a key allows).
CREATE TABLE IF NOT EXISTS {dead_letters} (
    id           BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer     VARBINARY(128) NOT NULL,
    message_id   LONGBLOB     NOT NULL,
    message_type VARCHAR(255) NOT NULL DEFAULT '',
    payload      LONGBLOB,
    headers      LONGBLOB,
    error        TEXT         NOT NULL,
    attempts     INT          NOT NULL,
    failed_at    DATETIME(6)  NOT NULL,
    INDEX `{prefix}inbox_dead_letters_consumer_idx` (consumer, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
