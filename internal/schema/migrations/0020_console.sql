-- The operator console's accounts, sessions, login throttle and audit log
-- (package operator).
--
-- Accounts: a name, a role (viewer reads, operator also acts) and an
-- argon2id hash of the password (PHC string). A disabled account keeps its
-- row, so its audit entries still name someone, and cannot log in.
CREATE TABLE postline_console_operators (
	name          text COLLATE "C" PRIMARY KEY,
	role          text        NOT NULL CHECK (role IN ('viewer', 'operator')),
	password_hash text        NOT NULL,
	created_at    timestamptz NOT NULL DEFAULT now(),
	updated_at    timestamptz NOT NULL DEFAULT now(),
	disabled_at   timestamptz
);

-- Sessions live here, not in a signed cookie, so that logout, disabling an
-- account and a password change end them at once on every replica. Only the
-- SHA-256 of the session token is stored: a copy of the table does not let
-- anyone in. The CSRF token is per session and is no credential by itself.
CREATE TABLE postline_console_sessions (
	token_hash  bytea PRIMARY KEY,
	operator    text COLLATE "C" NOT NULL REFERENCES postline_console_operators (name) ON DELETE CASCADE,
	csrf_token  text        NOT NULL,
	client      text        NOT NULL DEFAULT '',
	created_at  timestamptz NOT NULL DEFAULT now(),
	expires_at  timestamptz NOT NULL
);
CREATE INDEX postline_console_sessions_operator_idx ON postline_console_sessions (operator);
CREATE INDEX postline_console_sessions_expires_idx ON postline_console_sessions (expires_at);

-- Wrong passwords per account name ('account:<name>') and per client
-- address ('client:<address>'), shared by every console replica: past a
-- few, a key is blocked until blocked_until, for longer after each.
CREATE TABLE postline_console_login_failures (
	key             text COLLATE "C" PRIMARY KEY,
	failures        integer     NOT NULL CHECK (failures > 0),
	last_failure_at timestamptz NOT NULL,
	blocked_until   timestamptz NOT NULL
);

-- What operators did and looked at: who, what, on what (the target or the
-- search filter, as JSON), when and how it ended. Never a password, token
-- or mail body.
CREATE TABLE postline_console_audit (
	id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at     timestamptz NOT NULL DEFAULT now(),
	actor  text        NOT NULL,
	action text        NOT NULL,
	target jsonb       NOT NULL DEFAULT '{}',
	result text        NOT NULL,
	client text        NOT NULL DEFAULT ''
);
-- The log is read newest first (by id), whole or one actor's.
CREATE INDEX postline_console_audit_actor_idx ON postline_console_audit (actor, id);
