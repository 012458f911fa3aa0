-- The inbox: one row per processed (or dead-lettered) message and consumer.
-- The primary key is the guard: a second claim of (consumer, message_id)
-- conflicts. Keys are bytea: binary-safe and compared byte by byte.
CREATE TABLE {inbox} (
	consumer     bytea       NOT NULL,
	message_id   bytea       NOT NULL,
	received_at  timestamptz NOT NULL DEFAULT now(),
	message_type text        NOT NULL DEFAULT '',
	fingerprint  bytea,
	dead         boolean     NOT NULL DEFAULT false,
	PRIMARY KEY (consumer, message_id)
);
CREATE INDEX "{prefix}inbox_received_at_idx" ON {inbox} USING brin (received_at);

-- Failed attempts, written in their own transaction so that they survive
-- the rollback of the attempt and a crash.
CREATE TABLE {attempts} (
	consumer        bytea       NOT NULL,
	message_id      bytea       NOT NULL,
	attempts        integer     NOT NULL,
	first_failed_at timestamptz NOT NULL DEFAULT now(),
	last_failed_at  timestamptz NOT NULL DEFAULT now(),
	last_error      text        NOT NULL DEFAULT '',
	PRIMARY KEY (consumer, message_id)
);
CREATE INDEX "{prefix}inbox_attempts_last_failed_at_idx" ON {attempts} (last_failed_at);

-- Messages that failed for good, with everything needed to replay them.
-- message_id is not constrained: a dead letter may keep a message whose ID
-- was invalid.
CREATE TABLE {dead_letters} (
	id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	consumer     bytea       NOT NULL,
	message_id   bytea       NOT NULL,
	message_type text        NOT NULL DEFAULT '',
	payload      bytea,
	headers      bytea,
	error        text        NOT NULL DEFAULT '',
	attempts     integer     NOT NULL,
	failed_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX "{prefix}inbox_dead_letters_consumer_idx" ON {dead_letters} (consumer, id);
