-- Lives of a mail, and the outbox of the report applier's transitions.
--
-- 1. life: one journey of a Message-ID from its first claim to its outcome.
-- A replay of a dead letter (postctl dlq replay re-opens the row) and a mail
-- sent again under its Message-ID after its row was purged are new lives of
-- the same ID, and their events must not carry the IDs of the first life's
-- (consumers dedupe by ID: they would drop them). Event IDs hash the life in
-- (event.NewLifeID).
--
-- The value is a random positive number, drawn by the column's default when
-- the row is inserted, and drawn again (SET life = DEFAULT) when a replay
-- re-opens a failed or dead row. No update of the worker writes it and no
-- index covers it, so the row's updates stay HOT (migration 0011).
--
-- The column is added without a default and the default set after: a
-- volatile default in ADD COLUMN would rewrite the table and give every
-- existing row a life. Rows from before stay NULL, read as life 0, which
-- derives the IDs as before, so mail in flight across the upgrade keeps the
-- IDs its first events had.
ALTER TABLE postline_messages ADD COLUMN life bigint;
ALTER TABLE postline_messages ALTER COLUMN life SET DEFAULT (1 + floor(random() * 9007199254740991))::bigint;

-- 2. The report applier's outbox. A report moves a recipient by
-- compare-and-set; the event it publishes and the suppression entry it adds
-- must follow the compare-and-set (a report that loses to a concurrent one
-- must not announce a transition that never happened) and must not be lost
-- if the applier dies between the two. The compare-and-set's statement
-- writes what the transition owes here, in its own transaction, for the
-- rows it moved; the applier deletes the entry once it has published and
-- suppressed, and a drain performs the entries left behind.
--   event_id    the transition's event ID: one entry per transition
--   message_id  the mail, for operators
--   body        what to publish and suppress, as package outcome encodes it
--   created_at  when the transition was made: the drain takes entries older
--               than its grace, which the applier itself did not finish
CREATE TABLE postline_event_outbox (
	event_id   text COLLATE "C" PRIMARY KEY,
	message_id text        NOT NULL,
	body       bytea       NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX postline_event_outbox_created_idx ON postline_event_outbox (created_at);
