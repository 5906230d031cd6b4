-- Retention of terminal rows. A row that reaches sent, failed or dead has
-- its payload (the job's body) cleared by the statement recording the
-- outcome; payload_hash stays for deduplication. record_key (the Message-ID
-- by convention) and record_headers (trace context only, see 0003) never
-- hold the body and stay until the row is purged. The reaper deletes
-- terminal rows whose outcome (updated_at) is older than the retention, the
-- dedupe window, oldest first in small batches: this partial index serves
-- that scan without touching in-flight rows.
CREATE INDEX postline_messages_terminal_updated_idx ON postline_messages (updated_at)
	WHERE status IN ('sent', 'failed', 'dead');
