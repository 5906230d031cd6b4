-- Recipient search in time order (internal/mailquery; the console's
-- search benchmark, bench/search, issue 31).
--
-- Migration 0019's index found the recipient rows of an address or domain
-- but not in any time order, so a first page meant reading every match and
-- the creation time of each match's mail: at 10,000,000 mails a company
-- domain with 11,000 mails took 190 ms (11,000 mail rows read by key), and
-- the other plan, walking all mail newest first until 50 match, took
-- 650 ms for a customer with 20,000 mails and seconds for a rare domain.
--
-- So a recipient row records when it was written, and the search walks
-- an address's or a domain's rows newest first. created_at is the
-- database's now() when the row is inserted: no writer names it, so the
-- worker's statement is unchanged, and neither index changes on an update
-- (an update of a recipient row may stay HOT). Rows are written only
-- for a mail row that exists, so a recipient row's created_at is never
-- before its mail's (rows that predate this migration get its time, which
-- is later still): mailquery relies on that to stop its walk once the
-- page is certain (see its findByRecipient), and it holds for anything
-- that writes rows by the clock; a writer that dates mail rows must date
-- their recipients no earlier.
--
-- The two indexes replace 0019's one: an address is an equality on its
-- lowercased form (mailquery compares the local part's case on the rows
-- it reads), a domain one on the lowercased text after the last "@" (an
-- address's domain: a quoted local part may hold an "@", a domain never
-- does), each followed by created_at, the order of the walk. They cost
-- one index entry more per recipient row than 0019's.
ALTER TABLE postline_recipients ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
DROP INDEX postline_recipients_address_idx;
CREATE INDEX postline_recipients_address_idx ON postline_recipients (lower(address), created_at);
CREATE INDEX postline_recipients_domain_idx ON postline_recipients (lower(split_part(address, '@', -1)), created_at);
