-- The confirm phase of a mail: what became of each recipient after the relay
-- took the mail, and whether the mail as a whole was confirmed.
--
-- A job whose every recipient is on a suppression list is never sent: its row
-- ends 'suppressed', a terminal status like sent, failed and dead.
ALTER TABLE postline_messages DROP CONSTRAINT postline_messages_status_check;
ALTER TABLE postline_messages ADD CONSTRAINT postline_messages_status_check
	CHECK (status IN ('pending', 'sending', 'retrying', 'sent', 'failed', 'dead', 'suppressed'));

-- Message level:
--   stream        transactional or bulk (bulk-priority jobs): suppression
--                 lists are per stream, and a report arriving after the
--                 payload was cleared still knows it
--   metadata      the job's metadata, echoed in the events of later reports
--   confirm_by    when the relay first took the mail for a recipient, plus
--                 the confirmation window: a mail with recipients still
--                 unresolved then is 'unconfirmed'
--   confirmation  NULL while recipients are unresolved (or the relay never
--                 took the mail); 'confirmed' once every recipient is
--                 resolved and at least one was delivered (or complained,
--                 which says it arrived); 'cancelled' once every recipient
--                 is resolved and none was delivered; 'unconfirmed' when
--                 confirm_by passed first (a later report still settles it)
--   confirmed_at  when confirmation last changed
ALTER TABLE postline_messages
	ADD COLUMN stream       text CHECK (stream IN ('transactional', 'bulk')),
	ADD COLUMN metadata     jsonb,
	ADD COLUMN confirm_by   timestamptz,
	ADD COLUMN confirmation text CHECK (confirmation IN ('confirmed', 'cancelled', 'unconfirmed')),
	ADD COLUMN confirmed_at timestamptz;

-- For the sweep that marks mail unconfirmed, and for postctl's listing.
CREATE INDEX postline_messages_confirm_by_idx ON postline_messages (confirm_by)
	WHERE confirm_by IS NOT NULL AND (confirmation IS NULL OR confirmation = 'unconfirmed');

-- Retention covers suppressed rows too.
DROP INDEX postline_messages_terminal_updated_idx;
CREATE INDEX postline_messages_terminal_updated_idx ON postline_messages (updated_at)
	WHERE status IN ('sent', 'failed', 'dead', 'suppressed');

-- One row per recipient of a mail (To, then Cc, then Bcc: idx from 0).
--   ref        the first 8 bytes of the SHA-256 of the Message-ID: what a
--              return path's token names, so a report finds its row
--   state      pending    not yet taken by a relay (deferred)
--              accepted   a relay took it (SMTP 250); awaiting a report
--              delivered  a report confirmed delivery
--              bounced    a report, or the relay at RCPT, refused it
--              complained the recipient reported the mail as unwanted
--              suppressed on a suppression list: never sent to it
--              failed     refused permanently before the relay took it
--              dead       given up on (attempts, age, expiry)
--   bounce_type, status, code, diagnostic, rule, source, feedback_type:
--              what the deciding refusal or report said
CREATE TABLE postline_recipients (
	message_id    text COLLATE "C" NOT NULL REFERENCES postline_messages (message_id) ON DELETE CASCADE,
	idx           smallint NOT NULL CHECK (idx >= 0 AND idx < 100),
	ref           bytea    NOT NULL,
	address       text     NOT NULL,
	state         text     NOT NULL
		CHECK (state IN ('pending', 'accepted', 'delivered', 'bounced', 'complained', 'suppressed', 'failed', 'dead')),
	attempt       integer  NOT NULL DEFAULT 0,
	provider      text,
	bounce_type   text CHECK (bounce_type IN ('hard', 'soft', 'policy')),
	status        text,
	code          integer,
	diagnostic    text,
	rule          text,
	source        text,
	feedback_type text,
	accepted_at   timestamptz,
	resolved_at   timestamptz,
	updated_at    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (message_id, idx)
);
CREATE INDEX postline_recipients_ref_idx ON postline_recipients (ref, idx);
