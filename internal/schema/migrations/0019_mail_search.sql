-- Finding mail, and the events of its life (internal/mailquery owns the
-- queries).
--
-- 1. Recipient search. Operators look mail up by an address, matched
-- exactly in its local part and case-insensitively in its domain, or by a
-- whole domain ("@example.com"). One expression index serves both: the
-- address lowercased and reversed, so that a domain is a prefix
-- ("moc.elpmaxe@..."). An exact address is an equality on it (the local
-- part's case is rechecked on the row), a domain a range of it; the
-- text_pattern_ops class compares bytes, so the range's bounds hold
-- whatever the database's collation, and the ~>=~ ~<~ operators take the
-- bounds as parameters (LIKE 'prefix%' would need them as constants).
--
-- The cost is one index entry per recipient row the worker inserts. The
-- address never changes after the insert, so an update of a recipient row
-- (accepted, then a report) that could be HOT still is. It is the only
-- index this migration adds to the tables the worker writes: the tenant,
-- state, reason and time filters walk postline_messages_created_idx (the
-- listing is newest first, so the walk is the order) and check the rest on
-- each row; an index on postline_messages(tenant, created_at) would serve
-- a rare tenant without a time range better, at an index entry on every
-- claim, which the console's time ranges do not justify.
CREATE INDEX postline_recipients_address_idx ON postline_recipients (reverse(lower(address)) text_pattern_ops);

-- 2. The events of each mail, from the mail.events topic: the
-- transitions of its recipients (deferrals with their relay and class,
-- acceptance, reports, suppression, dead letters) that the rows keep only
-- the last of. mailquery's Indexer writes them, once per event ID,
-- in its own consumer group; nothing on the sending path reads or writes
-- them.
--   event_id         the event's ID: a copy of an event is written once
--   message_id, at   the mail and the transition's time: a mail's life
--                    reads its events in this order
--   type, recipient_index  for operators reading the table by hand
--   doc              the event document as published, without its
--                    metadata (the job's, which is the customer's data and
--                    which no page shows)
--   indexed_at       when the Indexer wrote it
CREATE TABLE postline_mail_events (
	event_id        text COLLATE "C" PRIMARY KEY,
	message_id      text COLLATE "C" NOT NULL,
	at              timestamptz NOT NULL,
	type            text        NOT NULL,
	recipient_index integer     NOT NULL,
	doc             jsonb       NOT NULL,
	indexed_at      timestamptz NOT NULL DEFAULT now()
);
-- A mail's life: its events, oldest first.
CREATE INDEX postline_mail_events_message_idx ON postline_mail_events (message_id, at);
-- The retention purge: the oldest events first, in small batches.
CREATE INDEX postline_mail_events_at_idx ON postline_mail_events (at);

-- 3. A mail's webhook deliveries are the queue rows of its events. The
-- queue is keyed by endpoint first, so finding the rows of some event IDs
-- would read the whole queue, which grows to millions of rows while an
-- endpoint is down. Queue rows are written only for events an endpoint
-- did not take at once, so this index costs nothing on the dispatcher's
-- path of an endpoint that answers.
CREATE INDEX postline_webhook_queue_event_idx ON postline_webhook_queue (event_id);
