-- HTTP requests' Idempotency-Keys (package idempotency): one row per key,
-- inserted in the transaction that runs the request's handler, with the
-- response written into it before that transaction commits. The primary
-- key is the guard: a second request with the same key in the same scope
-- conflicts. scope is a digest of the principal, method and route; method
-- and route are kept for operators, as bytes (a path may be invalid
-- UTF-8). The principal is kept only in the digest. Keys are BLOBs,
-- compared bytewise. created_at is unix milliseconds by the database's
-- clock. A rowid table, unlike the inbox: a row holds a whole response,
-- too large for WITHOUT ROWID's b-tree to pay.
CREATE TABLE IF NOT EXISTS {idempotency_keys} (
    scope       BLOB    NOT NULL,
    idem_key    BLOB    NOT NULL,
    method      BLOB    NOT NULL,
    route       BLOB    NOT NULL,
    fingerprint BLOB    NOT NULL,
    status      INTEGER NOT NULL DEFAULT 0,
    header      BLOB,
    body        BLOB,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, idem_key)
) STRICT;

-- Expired keys are pruned oldest first.
CREATE INDEX IF NOT EXISTS "{prefix}idempotency_keys_created_at_idx" ON {idempotency_keys} (created_at);
