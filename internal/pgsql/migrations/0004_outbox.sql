-- The transactional outbox: messages written in a business transaction,
-- published by a relay, and deleted once the broker has them (or marked
-- published_at and deleted later, when the relay keeps them), so that the
-- table holds only the backlog. A row is due when available_at has passed
-- and it is not parked; a relay leases due rows by moving available_at
-- past its lease and stamping lease_token. The relay's claim reads the
-- partial index of due rows in order (FOR UPDATE SKIP LOCKED), never a
-- scan, and no cursor that could skip a row whose sequence number
-- committed late.
CREATE TABLE {outbox} (
	seq          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	message_id   bytea       NOT NULL,
	destination  text        NOT NULL,
	msg_key      bytea,
	message_type text        NOT NULL DEFAULT '',
	headers      bytea,
	payload      bytea,
	created_at   timestamptz NOT NULL DEFAULT now(),
	available_at timestamptz NOT NULL DEFAULT now(),
	attempts     integer     NOT NULL DEFAULT 0,
	last_error   text        NOT NULL DEFAULT '',
	lease_token  bytea,
	parked_at    timestamptz,
	published_at timestamptz,
	CONSTRAINT "{prefix}outbox_message_id_key" UNIQUE (message_id)
);
CREATE INDEX "{prefix}outbox_due_idx" ON {outbox} (available_at, seq) WHERE parked_at IS NULL AND published_at IS NULL;
-- Per-key order: a row waits while its key has an older unpublished row.
CREATE INDEX "{prefix}outbox_key_idx" ON {outbox} (msg_key, seq) WHERE msg_key IS NOT NULL AND published_at IS NULL;
-- Published rows kept for a while, deleted oldest first.
CREATE INDEX "{prefix}outbox_published_idx" ON {outbox} (published_at) WHERE published_at IS NOT NULL;
