-- A recipient row no longer references its message row through a foreign
-- key. The key cost a trigger per recipient inserted, a lookup of the
-- message row it had just updated in the same statement (about a fifth of
-- the outcome statement's time), and bought nothing a statement of the
-- store does not already guarantee: recipients are only written for a
-- message row the statement has locked, and the one statement that deletes
-- message rows, the retention purge, deletes their recipients too. ON
-- DELETE CASCADE went with the key, so the purge now names them.
ALTER TABLE postline_recipients DROP CONSTRAINT postline_recipients_message_id_fkey;
