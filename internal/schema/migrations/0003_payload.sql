-- The original job record on its row, so that a row stuck in 'sending' can be
-- re-published by the reaper without its Kafka record, and the replay marker
-- of postctl dlq replay.
--   payload         the record value, byte for byte (stored on insert only)
--   record_key      the record key (NULL: use the message ID)
--   record_headers  the W3C trace context headers only (traceparent,
--                   tracestate) as a JSON object of strings; never credentials
--   first_seen      when the job was first published (the first-seen header,
--                   else the record timestamp, else the insert time)
--   replayed_at     when postctl dlq replay last reset the row to 'pending';
--                   error_class and last_error keep the failure it replayed
ALTER TABLE postline_messages
	ADD COLUMN payload        bytea,
	ADD COLUMN record_key     bytea,
	ADD COLUMN record_headers jsonb,
	ADD COLUMN first_seen     timestamptz,
	ADD COLUMN replayed_at    timestamptz;
