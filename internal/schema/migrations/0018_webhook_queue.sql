-- The webhook dispatcher's durable per-endpoint queue. An event an endpoint
-- did not take at once waits here for its next attempt, so pending retries
-- survive restarts; a row an endpoint gave up on stays as a dead letter
-- that postctl webhooks replay can queue again. An endpoint that takes
-- every event at once writes nothing here.
CREATE TABLE postline_webhook_queue (
	endpoint     text COLLATE "C" NOT NULL,
	event_id     text COLLATE "C" NOT NULL,
	event_type   text        NOT NULL,
	tenant       text        NOT NULL DEFAULT '',
	event_at     timestamptz NOT NULL,
	payload      bytea       NOT NULL,
	src_topic    text        NOT NULL DEFAULT '',
	src_partition integer    NOT NULL DEFAULT 0,
	src_offset   bigint      NOT NULL DEFAULT -1,
	status       text        NOT NULL CHECK (status IN ('pending', 'dead')),
	attempts     integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
	-- first_at starts the retry horizon; next_at is when a pending row is
	-- due (a claim pushes it past its lease, so a crashed claimer's rows
	-- come due again).
	first_at     timestamptz NOT NULL,
	next_at      timestamptz NOT NULL,
	last_status  integer     NOT NULL DEFAULT 0,
	last_error   text        NOT NULL DEFAULT '',
	dead_at      timestamptz,
	dead_reason  text,
	PRIMARY KEY (endpoint, event_id)
);

CREATE INDEX postline_webhook_queue_due_idx ON postline_webhook_queue (endpoint, next_at)
	WHERE status = 'pending';
CREATE INDEX postline_webhook_queue_dead_idx ON postline_webhook_queue (endpoint, dead_at)
	WHERE status = 'dead';

-- One row per endpoint the dispatcher has heard from: its health, shared
-- by every dispatcher replica, and whether it is disabled.
CREATE TABLE postline_webhook_endpoints (
	endpoint        text COLLATE "C" PRIMARY KEY,
	last_success_at timestamptz,
	last_failure_at timestamptz,
	last_status     integer NOT NULL DEFAULT 0,
	last_error      text    NOT NULL DEFAULT '',
	-- The first failure with no success after it; NULL while healthy.
	failing_since   timestamptz,
	disabled_at     timestamptz,
	disabled_reason text    NOT NULL DEFAULT ''
);

-- What happened to an endpoint: disabled (by the dispatcher or an
-- operator), enabled, replayed.
CREATE TABLE postline_webhook_endpoint_log (
	endpoint text        COLLATE "C" NOT NULL,
	at       timestamptz NOT NULL,
	action   text        NOT NULL,
	actor    text        NOT NULL,
	detail   text        NOT NULL DEFAULT ''
);
CREATE INDEX postline_webhook_endpoint_log_idx ON postline_webhook_endpoint_log (endpoint, at);
