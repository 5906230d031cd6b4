-- One row per worker and relay: the worker's send control for that relay as
-- it last published it (internal/relaystate owns the queries). Each worker
-- upserts its rows every few seconds, and deletes the rows of workers that
-- stopped publishing long ago, so the table holds the live fleet and the
-- recently dead. It is an observability side channel (postctl relays) and
-- the source of the fleet's learned rates that seed a joining worker's
-- pacer; nothing sends or refuses mail on it.
CREATE TABLE postline_relay_state (
	worker_id           text COLLATE "C" NOT NULL,
	provider            text COLLATE "C" NOT NULL,                          -- the relay's name, never its URL
	priority            integer          NOT NULL,
	concurrency_limit   integer          NOT NULL CHECK (concurrency_limit >= 0),
	in_flight           integer          NOT NULL CHECK (in_flight >= 0),
	rate                double precision CHECK (rate >= 0),                 -- learned sends/s; NULL = unpaced
	fleet_share         double precision CHECK (fleet_share >= 0),          -- share of the fleet rate; NULL = none configured
	members             integer          NOT NULL CHECK (members >= 0),     -- live workers the fleet rate is shared by
	concurrency_cuts    bigint           NOT NULL CHECK (concurrency_cuts >= 0),
	rate_cuts           bigint           NOT NULL CHECK (rate_cuts >= 0),
	last_cut_controller text,                                               -- concurrency or rate; NULL = never cut
	last_cut_reason     text,                                               -- the failure rule and reply code
	last_cut_at         timestamptz,
	updated_at          timestamptz      NOT NULL,                          -- the publishing worker's clock
	PRIMARY KEY (worker_id, provider),
	CHECK ((last_cut_controller IS NULL) = (last_cut_at IS NULL))
);

-- Serves the prune of dead workers' rows and the freshness filter.
CREATE INDEX postline_relay_state_updated_idx ON postline_relay_state (updated_at);
