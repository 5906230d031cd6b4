-- The unconfirmed sweep reads only what came due since its last pass, and
-- one worker of the fleet makes each pass.
--
-- Until now every worker's sweep read the accepted recipients in the order
-- of their confirm_by from the oldest, every minute, and skipped those of
-- mail already marked unconfirmed: through relays that send no success
-- notices that is nearly every recipient of the retention, so each pass cost
-- in proportion to the backlog, not to what had come due.
--
-- 1. The sweep's place, in a table of one row. A pass locks the row (FOR
-- UPDATE SKIP LOCKED: the workers that find it locked skip their pass), reads
-- the accepted recipients after the place, marks their mail and moves the
-- place past them in the same transaction. Two walks:
--   due_*   the order of postline_recipients_confirm_by_idx: (confirm_by,
--           message_id, idx) of the last recipient read. Once a pass reads
--           everything due it moves to the pass's start (due_message_id
--           '', due_idx -1 come before every row of that instant).
--   late_*  (accepted_at, message_id, idx) in the order of the index below,
--           the same way.
--   swept_at  when a pass last committed; NULL before the first.
CREATE TABLE postline_unconfirmed_sweep (
	one             boolean PRIMARY KEY DEFAULT true CHECK (one),
	due_by          timestamptz NOT NULL,
	due_message_id  text COLLATE "C" NOT NULL,
	due_idx         smallint NOT NULL,
	late_at         timestamptz NOT NULL,
	late_message_id text COLLATE "C" NOT NULL,
	late_idx        smallint NOT NULL,
	swept_at        timestamptz
);

-- The walk starts at the earliest recipient still awaiting its mail's mark
-- (or now, if that one is not due yet), so the first pass does not read the
-- mail already marked either: one scan here, as one pass of the old sweep.
-- With none, after the latest accepted recipient: all of them were marked.
-- An empty table starts at the beginning.
INSERT INTO postline_unconfirmed_sweep (due_by, due_message_id, due_idx, late_at, late_message_id, late_idx)
SELECT CASE WHEN unmarked IS NOT NULL THEN least(unmarked, now()) ELSE COALESCE(latest, '-infinity') END,
	'', -1, now(), '', -1
FROM (SELECT
	(SELECT min(r.confirm_by) FROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id
		WHERE r.state = 'accepted' AND r.confirm_by IS NOT NULL AND m.confirmation IS NULL) AS unmarked,
	(SELECT max(confirm_by) FROM postline_recipients WHERE state = 'accepted') AS latest) AS start;

-- 2. Recipients a relay took after their mail's window had already passed:
-- another recipient of the mail was accepted first (the window starts then
-- and is the mail's), this one was deferred, and its retries outlasted the
-- window (bulk mail may be retried for 48 hours, the window is 24). They
-- carry a confirm_by the first walk has already passed; the second walk
-- reads them by when they were accepted.
--
-- The predicate is false for every recipient written in its window, so the
-- worker's inserts of recipient rows add no entry here; it names only
-- columns the existing index already names (state, confirm_by) and
-- accepted_at, which an update that keeps a recipient pending leaves NULL:
-- what could be a HOT update of a recipient row before still can be.
CREATE INDEX postline_recipients_late_idx ON postline_recipients (accepted_at)
	WHERE state = 'accepted' AND accepted_at >= confirm_by;
