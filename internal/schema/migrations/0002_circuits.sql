-- One row per SMTP provider: its circuit breaker, shared by every worker
-- replica (internal/circuit owns the queries). Rows are created closed by the
-- workers at start; every change takes the row lock and bumps version.
CREATE TABLE postline_circuits (
	provider    text COLLATE "C" PRIMARY KEY,
	state       text        NOT NULL DEFAULT 'closed'
		CHECK (state IN ('closed', 'open', 'half_open')),
	failures    integer     NOT NULL DEFAULT 0 CHECK (failures >= 0), -- consecutive provider faults
	cooldown    interval    NOT NULL,                                 -- current (or next) open period
	opened_at   timestamptz,
	open_until  timestamptz,                                          -- a probe may be claimed from then
	probe_owner text,                                                 -- worker holding the half-open probe
	probe_until timestamptz,                                          -- the probe may be claimed again from then
	last_class  text,                                                 -- failure class of the last counted fault
	updated_at  timestamptz NOT NULL DEFAULT now(),
	version     bigint      NOT NULL DEFAULT 1 CHECK (version > 0),
	CHECK (state = 'closed' OR (opened_at IS NOT NULL AND open_until IS NOT NULL)),
	CHECK (state <> 'half_open' OR (probe_owner IS NOT NULL AND probe_until IS NOT NULL))
);
