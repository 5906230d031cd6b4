-- One row per Message-ID: the idempotency record of a mail job.
-- message_id uses the "C" collation so that every statement locks rows in
-- the same byte order as the others (no deadlocks between batches).
CREATE TABLE postline_messages (
	message_id       text COLLATE "C" PRIMARY KEY,
	status           text        NOT NULL
		CHECK (status IN ('pending', 'sending', 'retrying', 'sent', 'failed', 'dead')),
	version          bigint      NOT NULL CHECK (version > 0),
	attempt          integer     NOT NULL CHECK (attempt >= 0),
	payload_hash     bytea       NOT NULL,
	lease_owner      text,
	lease_expires_at timestamptz,
	provider         text,
	error_class      text,
	last_error       text,
	priority         text,
	tenant           text,
	conflicts        integer     NOT NULL DEFAULT 0,
	enqueued_at      timestamptz,
	created_at       timestamptz NOT NULL DEFAULT now(),
	updated_at       timestamptz NOT NULL DEFAULT now(),
	sent_at          timestamptz
);

-- For the reaper: rows stuck in 'sending' past their lease.
CREATE INDEX postline_messages_status_lease_idx ON postline_messages (status, lease_expires_at);
