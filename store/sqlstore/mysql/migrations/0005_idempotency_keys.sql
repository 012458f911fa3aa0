-- HTTP requests' Idempotency-Keys (package idempotency): one row per key,
-- inserted in the transaction that runs the request's handler, with the
-- response written into it before that transaction commits. The primary
-- key is the guard: a second request with the same key in the same scope
-- conflicts. scope is a digest of the principal, method and route; method
-- and route are kept for operators, as bytes (a path may be invalid
-- UTF-8). The principal is kept only in the digest. Keys are VARBINARY,
-- compared byte by byte: 'a', 'A' and 'a ' are three keys. created_at is
-- UTC by the database's clock (UTC_TIMESTAMP(6)); expired keys are pruned
-- oldest first, through its index.
CREATE TABLE IF NOT EXISTS {idempotency_keys} (
    scope       VARBINARY(32)  NOT NULL,
    idem_key    VARBINARY(255) NOT NULL,
    method      BLOB           NOT NULL,
    route       BLOB           NOT NULL,
    fingerprint VARBINARY(255) NOT NULL,
    status      INT            NOT NULL DEFAULT 0,
    header      LONGBLOB,
    body        LONGBLOB,
    created_at  DATETIME(6)    NOT NULL,
    PRIMARY KEY (scope, idem_key),
    INDEX `{prefix}idempotency_keys_created_at_idx` (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
