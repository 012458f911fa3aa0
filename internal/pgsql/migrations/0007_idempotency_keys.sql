-- HTTP requests' Idempotency-Keys (package idempotency): one row per key,
-- inserted in the transaction that runs the request's handler, with the
-- response written into it before that transaction commits. The primary
-- key is the guard: a second request with the same key in the same scope
-- conflicts. scope is a digest of the principal, method and route; method
-- and route are kept for operators, as bytes (a path may be invalid
-- UTF-8). The principal is kept only in the digest.
CREATE TABLE {idempotency_keys} (
	scope       bytea       NOT NULL,
	idem_key    bytea       NOT NULL,
	method      bytea       NOT NULL,
	route       bytea       NOT NULL,
	fingerprint bytea       NOT NULL,
	status      integer     NOT NULL DEFAULT 0,
	header      bytea,
	body        bytea,
	created_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (scope, idem_key)
);
-- Expired keys are pruned oldest first.
CREATE INDEX "{prefix}idempotency_keys_created_at_idx" ON {idempotency_keys} (created_at);
