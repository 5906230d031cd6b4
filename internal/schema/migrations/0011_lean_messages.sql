-- A lean, HOT-friendly message row.
--
-- Each mail inserts a row and updates it once or more (sending -> sent, or
-- sending -> retrying -> sending -> sent). Until now the row carried a copy
-- of the Kafka record, and its status and lease columns were indexed, so no
-- update was HOT: every one wrote a new row version elsewhere in the table
-- and an entry in every index. On PostgreSQL 15 an update is HOT only when
-- no indexed column changes, a partial index's predicate columns included
-- (BRIN too, until 16). After this migration postline_messages has two
-- indexes, on message_id and created_at, neither of which an update
-- changes, and room on each page for the new versions.

-- 1. The record copy moves to a side table, written only where Kafka cannot
-- re-publish the job: a replay (postctl dlq replay resets the row and then
-- publishes; if the publish fails nothing is on its way), or a caller that
-- passes the record to Claim. The worker does not: until its outcome is
-- recorded the record's offset is not committed, so Kafka redelivers it and
-- the copy re-claims the row once the lease has expired. A row loses its
-- copy in the statement that records a terminal outcome.
--   payload         the record value, byte for byte
--   record_key      the record key (NULL: use the message ID)
--   record_headers  the W3C trace context headers only (traceparent,
--                   tracestate) as a JSON object of strings; never credentials
CREATE TABLE postline_message_records (
	message_id     text COLLATE "C" PRIMARY KEY REFERENCES postline_messages (message_id) ON DELETE CASCADE,
	payload        bytea NOT NULL,
	record_key     bytea,
	record_headers jsonb
);
INSERT INTO postline_message_records (message_id, payload, record_key, record_headers)
	SELECT message_id, payload, record_key, record_headers FROM postline_messages
	WHERE payload IS NOT NULL AND status NOT IN ('sent', 'failed', 'dead', 'suppressed');
ALTER TABLE postline_messages
	DROP COLUMN payload,
	DROP COLUMN record_key,
	DROP COLUMN record_headers;

-- 2. The indexes an update would change go.
--
-- (status, lease_expires_at) served the reaper's scan for rows stuck in
-- sending. Only rows with a stored record can be re-published, so that scan
-- now starts from postline_message_records, which holds few rows.
DROP INDEX postline_messages_status_lease_idx;

-- The retention purge scanned terminal rows by updated_at. It now scans by
-- created_at, which no update changes: a row's outcome is never older than
-- the row, so every row due for purging was created before the cut-off too,
-- and the rows created before it that are not due (still in flight, or an
-- outcome recorded later) are few.
DROP INDEX postline_messages_terminal_updated_idx;
CREATE INDEX postline_messages_created_idx ON postline_messages (created_at);

-- The confirmation sweep scanned postline_messages by confirm_by, which the
-- update recording a sent mail sets. It now scans the accepted recipients,
-- which carry their mail's confirm_by (written with the recipient row, in
-- the same statement as the message's).
DROP INDEX postline_messages_confirm_by_idx;
ALTER TABLE postline_recipients ADD COLUMN confirm_by timestamptz;
UPDATE postline_recipients r SET confirm_by = m.confirm_by
	FROM postline_messages m
	WHERE m.message_id = r.message_id AND r.state = 'accepted' AND m.confirm_by IS NOT NULL;
CREATE INDEX postline_recipients_confirm_by_idx ON postline_recipients (confirm_by)
	WHERE state = 'accepted';

-- 3. Room on each page for the updated versions of its rows: a HOT update
-- must find space on the row's own page. The worker claims a batch of rows
-- together (they share pages) and records their outcomes together, before
-- the old versions can be pruned, and a recorded row is about half as large
-- again as a claimed one (provider, stream, metadata, sent_at, confirm_by).
-- At 40 % every row of a page fits its first new version
-- (TestStatusTransitionsAreHOT); pages written from now on keep 60 % free
-- for that, existing pages fill as before until they are rewritten.
ALTER TABLE postline_messages SET (fillfactor = 40);
