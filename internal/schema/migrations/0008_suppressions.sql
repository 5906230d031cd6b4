-- Suppression lists (internal/suppression owns the queries): one row per
-- tenant, normalized address and stream that mail must not be sent to.
-- tenant '' is mail without a tenant; stream '*' suppresses the address on
-- every stream. Addresses are stored normalized (bare addr-spec,
-- lowercased) by the package, so equality is byte equality (COLLATE "C").
CREATE TABLE postline_suppressions (
	tenant     text COLLATE "C" NOT NULL,
	address    text COLLATE "C" NOT NULL CHECK (address <> ''),
	stream     text COLLATE "C" NOT NULL CHECK (stream IN ('transactional', 'bulk', '*')),
	reason     text COLLATE "C" NOT NULL
		CHECK (reason IN ('hard_bounce', 'complaint', 'manual', 'unsubscribe', 'soft_bounce')),
	source     text             NOT NULL,          -- what added it: dsn, ses, postctl, import, ...
	message_id text,                               -- the mail it came from; NULL = none
	note       text,                               -- an operator's note; NULL = none
	created_at timestamptz      NOT NULL,
	expires_at timestamptz,                        -- NULL = never
	-- Serves the sending path's check of a batch of (tenant, address) keys
	-- (both streams of a key are neighbours), removal by address, and the
	-- keyset paging of listings.
	PRIMARY KEY (tenant, address, stream),
	CHECK (expires_at IS NULL OR expires_at > created_at)
);

-- Serves the purge of expired entries.
CREATE INDEX postline_suppressions_expires_idx ON postline_suppressions (expires_at)
	WHERE expires_at IS NOT NULL;
