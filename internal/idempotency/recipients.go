package idempotency

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// RecipientState is where one recipient of a mail stands.
type RecipientState string

// The recipient states. Pending and accepted are open; the others are
// resolutions.
const (
	// RecipientPending: no relay has taken the mail for it yet.
	RecipientPending RecipientState = "pending"
	// RecipientAccepted: a relay took it (SMTP 250); a report is awaited.
	RecipientAccepted RecipientState = "accepted"
	// RecipientDelivered: a report confirmed delivery.
	RecipientDelivered RecipientState = "delivered"
	// RecipientBounced: a report, or the relay at RCPT, refused it.
	RecipientBounced RecipientState = "bounced"
	// RecipientComplained: the recipient reported the mail as unwanted.
	RecipientComplained RecipientState = "complained"
	// RecipientSuppressed: on a suppression list, never sent to.
	RecipientSuppressed RecipientState = "suppressed"
	// RecipientFailed: refused permanently before a relay took it.
	RecipientFailed RecipientState = "failed"
	// RecipientDead: given up on before a relay took it.
	RecipientDead RecipientState = "dead"
)

// RecipientStates lists every recipient state.
var RecipientStates = []RecipientState{RecipientPending, RecipientAccepted, RecipientDelivered, RecipientBounced,
	RecipientComplained, RecipientSuppressed, RecipientFailed, RecipientDead}

// Valid reports whether s is one of RecipientStates.
func (s RecipientState) Valid() bool { return slices.Contains(RecipientStates, s) }

// Resolved reports whether s is a resolution: neither pending nor
// accepted.
func (s RecipientState) Resolved() bool {
	return s.Valid() && s != RecipientPending && s != RecipientAccepted
}

// CanBecome reports whether a report may move a recipient from s to next:
// an accepted recipient may be delivered, bounced or complained of; a
// delivered one may still bounce (a relay passed it on, the next hop
// refused it) or be complained of; a bounced one may be complained of.
// Nothing follows a complaint, and nothing moves a recipient back.
func (s RecipientState) CanBecome(next RecipientState) bool {
	switch s {
	case RecipientAccepted:
		return next == RecipientDelivered || next == RecipientBounced || next == RecipientComplained
	case RecipientDelivered:
		return next == RecipientBounced || next == RecipientComplained
	case RecipientBounced:
		return next == RecipientComplained
	}
	return false
}

// RecipientFate is what one attempt decided for one recipient.
type RecipientFate struct {
	// Index is the recipient's place in the job (job.Job.Recipients).
	Index int
	// Address is the bare address.
	Address string
	// State is pending (deferred), accepted, bounced (refused at RCPT),
	// suppressed, failed or dead.
	State RecipientState
	// Attempt and Provider are the attempt and relay that decided it.
	Attempt  int
	Provider string
	// BounceType, Status, Code, Diagnostic and Rule describe a refusal;
	// Source is where the decision came from ("smtp" for the relay's
	// reply, "suppression").
	BounceType, Status string
	Code               int
	Diagnostic, Rule   string
	Source             string
}

// refSQL computes a recipient row's ref from its message ID: the first 8
// bytes of the ID's SHA-256, as package returnpath makes them.
const refSQL = `substring(sha256(convert_to(r.message_id, 'UTF8')) FROM 1 FOR 8)`

// settleSQL confirms or cancels mail whose every recipient is resolved
// (see the confirmation column in migration 0007).
const settleSQL = `
UPDATE postline_messages m SET
	confirmation = CASE WHEN EXISTS (
			SELECT 1 FROM postline_recipients r
			WHERE r.message_id = m.message_id AND r.state IN ('delivered', 'complained'))
		THEN 'confirmed' ELSE 'cancelled' END,
	confirmed_at = now()
WHERE m.message_id = ANY($1::text[]) AND m.confirm_by IS NOT NULL
	AND (m.confirmation IS NULL OR m.confirmation = 'unconfirmed')
	AND NOT EXISTS (
		SELECT 1 FROM postline_recipients r
		WHERE r.message_id = m.message_id AND r.state IN ('pending', 'accepted'))`

// recipientColumns gathers RecipientFates into the columns recordSQL
// unnests. A recipient names its mail by the mail's position in the
// fate columns (1-based, unnest's ordinality), not by its Message-ID:
// the ID is already sent once, and was most of a recipient's bytes.
type recipientColumns struct {
	positions                []int32
	addrs, states, providers []string
	idxs                     []int16
	attempts                 []int32
	detailColumns
	// resolves is whether a recipient's state is one that ends its part
	// (neither pending nor accepted): only then can the batch leave a mail
	// with no recipient open, for settleSQL to confirm or cancel.
	resolves bool
}

// newRecipientColumns returns columns with room for n recipients, cut from
// one array per type.
func newRecipientColumns(n int) recipientColumns {
	if n == 0 {
		return recipientColumns{}
	}
	strs := make([]string, 8*n)
	col := func(k int) []string { return strs[k*n : k*n : (k+1)*n] }
	ints := make([]int32, 3*n)
	return recipientColumns{
		positions: ints[0:0:n], attempts: ints[n : n : 2*n],
		idxs:  make([]int16, 0, n),
		addrs: col(0), states: col(1), providers: col(2),
		detailColumns: detailColumns{bounceTypes: col(3), statuses: col(4), codes: ints[2*n : 2*n : 3*n],
			diags: col(5), rules: col(6), sources: col(7)},
	}
}

// detailColumns are the columns that say what decided a recipient's state,
// each value cut to its column: what Record (RecipientFate) and Resolve
// (Resolution) both write.
type detailColumns struct {
	bounceTypes, statuses, diags, rules, sources []string
	codes                                        []int32
}

// add appends one recipient's detail, cut to the columns.
func (d *detailColumns) add(bounceType, status string, code int, diagnostic, rule, source string) {
	d.bounceTypes = append(d.bounceTypes, bounceType)
	d.statuses = append(d.statuses, cleanText(status, 32))
	d.codes = append(d.codes, int32(min(max(code, 0), 999)))
	d.diags = append(d.diags, cleanText(diagnostic, MaxErrorBytes))
	d.rules = append(d.rules, cleanText(rule, 128))
	d.sources = append(d.sources, cleanText(source, 32))
}

// add appends the recipients of the fate at position, checked by
// ValidateFates.
func (c *recipientColumns) add(position int, rs []RecipientFate) {
	for _, r := range rs {
		c.positions = append(c.positions, int32(position))
		c.idxs = append(c.idxs, int16(r.Index))
		c.addrs = append(c.addrs, cleanText(r.Address, MaxErrorBytes))
		c.states = append(c.states, string(r.State))
		c.attempts = append(c.attempts, int32(min(max(r.Attempt, 0), 1<<30)))
		c.providers = append(c.providers, cleanText(r.Provider, MaxErrorBytes))
		c.detailColumns.add(r.BounceType, r.Status, r.Code, r.Diagnostic, r.Rule, r.Source)
		c.resolves = c.resolves || (r.State != RecipientPending && r.State != RecipientAccepted)
	}
}

func (c *recipientColumns) any() bool { return len(c.positions) > 0 }

func (c *recipientColumns) args() []any {
	// The columns recordSQL reads through NULLIF go padded (see padded).
	return []any{nonNilInt32(c.positions), nonNilInt16(c.idxs), nonNilStrings(c.addrs), nonNilStrings(c.states),
		nonNilInt32(c.attempts), nonNilStrings(padded(c.providers)), nonNilStrings(padded(c.bounceTypes)),
		nonNilStrings(padded(c.statuses)), nonNilInt32(padded(c.codes)), nonNilStrings(padded(c.diags)),
		nonNilStrings(padded(c.rules)), nonNilStrings(padded(c.sources))}
}

// pgx sends a nil slice as NULL, which unnest refuses; these send empty
// arrays.
func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilInt16(s []int16) []int16 {
	if s == nil {
		return []int16{}
	}
	return s
}

func nonNilInt32(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

// metadataJSON is the JSON text of a job's metadata, "" for none.
func metadataJSON(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "" // a map of strings always marshals
	}
	return string(b)
}

// Recipient is one recipient row with what its mail's row says.
type Recipient struct {
	MessageID string
	Index     int
	Address   string
	State     RecipientState
	Attempt   int
	Provider  string
	// BounceType, Status, Code, Diagnostic, Rule, Source and FeedbackType
	// are what decided a resolution.
	BounceType, Status string
	Code               int
	Diagnostic, Rule   string
	Source             string
	FeedbackType       string
	AcceptedAt         time.Time // zero if never accepted
	ResolvedAt         time.Time // zero while open
	UpdatedAt          time.Time

	// Of the mail's row.
	Tenant, Stream string
	Metadata       map[string]string
	ConfirmBy      time.Time // zero: the relay never took the mail
	Confirmation   string    // "", confirmed, cancelled or unconfirmed
	// Life is the mail's life (Claim.Life): what its events' IDs hash in
	// (event.NewLifeID). 0 for a row written before lives were recorded.
	Life int64
}

const recipientColumnsSQL = `r.message_id, r.idx, r.address, r.state, r.attempt, COALESCE(r.provider, ''),
	COALESCE(r.bounce_type, ''), COALESCE(r.status, ''), COALESCE(r.code, 0), COALESCE(r.diagnostic, ''),
	COALESCE(r.rule, ''), COALESCE(r.source, ''), COALESCE(r.feedback_type, ''),
	r.accepted_at, r.resolved_at, r.updated_at,
	COALESCE(m.tenant, ''), COALESCE(m.stream, ''), m.metadata, m.confirm_by, COALESCE(m.confirmation, ''),
	COALESCE(m.life, 0)`

func scanRecipients(rows pgx.Rows) ([]Recipient, error) {
	var (
		out                           []Recipient
		r                             Recipient
		idx                           int16
		attempt, code                 int32
		state                         string
		accepted, resolved, confirmBy pgtype.Timestamptz
		metadata                      []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&r.MessageID, &idx, &r.Address, &state, &attempt, &r.Provider,
		&r.BounceType, &r.Status, &code, &r.Diagnostic, &r.Rule, &r.Source, &r.FeedbackType,
		&accepted, &resolved, &r.UpdatedAt, &r.Tenant, &r.Stream, &metadata, &confirmBy, &r.Confirmation, &r.Life}, func() error {
		row := r
		row.Index, row.Attempt, row.Code, row.State = int(idx), int(attempt), int(code), RecipientState(state)
		row.AcceptedAt, row.ResolvedAt, row.ConfirmBy = timeOf(accepted), timeOf(resolved), timeOf(confirmBy)
		row.Metadata = nil
		if len(metadata) > 0 {
			if err := json.Unmarshal(metadata, &row.Metadata); err != nil {
				return fmt.Errorf("metadata of %s: %w", row.MessageID, err)
			}
		}
		out = append(out, row)
		return nil
	})
	return out, err
}

// Recipients returns the recipient rows of the given messages, by message
// and index, in one round trip. Messages without rows are absent.
func (s *Store) Recipients(ctx context.Context, messageIDs []string) (map[string][]Recipient, error) {
	if len(messageIDs) == 0 {
		return nil, nil
	}
	start := time.Now()
	rows, err := s.pool.Query(ctx, `SELECT `+recipientColumnsSQL+`
		FROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id
		WHERE r.message_id = ANY($1::text[]) ORDER BY r.message_id, r.idx`, messageIDs)
	var list []Recipient
	if err == nil {
		list, err = scanRecipients(rows)
	}
	s.observe(ctx, opRecipients, start, err)
	if err != nil {
		return nil, fmt.Errorf("recipients of %d messages: %w", len(messageIDs), err)
	}
	out := make(map[string][]Recipient)
	for _, r := range list {
		out[r.MessageID] = append(out[r.MessageID], r)
	}
	return out, nil
}

// RecipientsByRef returns the recipient rows a return path token names:
// index idx of the messages whose reference is ref (normally one; two
// Message-IDs sharing 8 bytes of their hash are told apart by the caller).
func (s *Store) RecipientsByRef(ctx context.Context, ref []byte, idx int) ([]Recipient, error) {
	start := time.Now()
	rows, err := s.pool.Query(ctx, `SELECT `+recipientColumnsSQL+`
		FROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id
		WHERE r.ref = $1 AND r.idx = $2 ORDER BY r.message_id`, ref, int16(idx))
	var list []Recipient
	if err == nil {
		list, err = scanRecipients(rows)
	}
	s.observe(ctx, opRecipients, start, err)
	if err != nil {
		return nil, fmt.Errorf("recipients by ref: %w", err)
	}
	return list, nil
}

// RecipientByAddress returns the row of address among messageID's
// recipients (the first if it appears twice), for reports that name the
// mail and the address rather than a token. ok is false when there is none.
func (s *Store) RecipientByAddress(ctx context.Context, messageID, address string) (Recipient, bool, error) {
	start := time.Now()
	rows, err := s.pool.Query(ctx, `SELECT `+recipientColumnsSQL+`
		FROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id
		WHERE r.message_id = $1 AND lower(r.address) = lower($2) ORDER BY r.idx LIMIT 1`, messageID, address)
	var list []Recipient
	if err == nil {
		list, err = scanRecipients(rows)
	}
	s.observe(ctx, opRecipients, start, err)
	if err != nil {
		return Recipient{}, false, fmt.Errorf("recipient of %s by address: %w", messageID, err)
	}
	if len(list) == 0 {
		return Recipient{}, false, nil
	}
	return list[0], true, nil
}

// Resolution moves one recipient on after a report.
type Resolution struct {
	MessageID string
	Index     int
	// Life is the life of the mail the decision was made in
	// (Recipient.Life): the compare-and-set is on it too, so a decision
	// read before a replay re-opened the mail moves nothing of its new
	// life. 0 leaves the life unchecked (a row from before lives, or a
	// caller that read no row).
	Life int64
	// From is the state the decision was made on: the write is a
	// compare-and-set on it.
	From RecipientState
	To   RecipientState
	// BounceType, Status, Code, Diagnostic, Rule, Source and FeedbackType
	// describe the report.
	BounceType, Status string
	Code               int
	Diagnostic, Rule   string
	Source             string
	FeedbackType       string
	// EventID and Effect are the transition's outbox entry (see Outbox):
	// what it owes once made, its event and suppression entry, opaque to
	// the store. The entry is written in the compare-and-set's
	// transaction, only if it wins; an empty EventID writes none.
	EventID string
	Effect  []byte
}

// lockMessagesSQL locks the rows of mails about to be settled.
const lockMessagesSQL = `SELECT 1 FROM postline_messages WHERE message_id = ANY($1::text[])
	ORDER BY message_id COLLATE "C" FOR UPDATE`

const resolveSQL = `
WITH u AS (
	SELECT * FROM unnest($1::text[], $2::int2[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int4[],
			$8::text[], $9::text[], $10::text[], $11::text[], $12::int8[], $13::text[], $14::bytea[])
		AS u(message_id, idx, from_state, to_state, bounce_type, status, code, diagnostic, rule, source, feedback_type,
			life, event_id, effect)
), moved AS (
	UPDATE postline_recipients p SET
		state = u.to_state,
		bounce_type = COALESCE(NULLIF(u.bounce_type, ''), p.bounce_type),
		status = COALESCE(NULLIF(u.status, ''), p.status),
		code = COALESCE(NULLIF(u.code, 0), p.code),
		diagnostic = COALESCE(NULLIF(u.diagnostic, ''), p.diagnostic),
		rule = COALESCE(NULLIF(u.rule, ''), p.rule),
		source = NULLIF(u.source, ''),
		feedback_type = COALESCE(NULLIF(u.feedback_type, ''), p.feedback_type),
		resolved_at = now(),
		updated_at = now()
	FROM u JOIN postline_messages m ON m.message_id = u.message_id
	WHERE p.message_id = u.message_id AND p.idx = u.idx AND p.state = u.from_state
		AND (u.life = 0 OR m.life = u.life)
	RETURNING p.message_id, p.idx, u.event_id, u.effect
), outbox AS (
	-- What the transitions made here owe, in their transaction: a
	-- transition that lost writes nothing (migration 0017).
	INSERT INTO postline_event_outbox (event_id, message_id, body)
	SELECT moved.event_id, moved.message_id, moved.effect FROM moved
	WHERE moved.event_id <> '' AND moved.effect IS NOT NULL
	ORDER BY moved.event_id
	ON CONFLICT (event_id) DO NOTHING
)
SELECT message_id, idx FROM moved`

// Resolve applies resolutions, each a compare-and-set on the recipient's
// state and its mail's life, writes the outbox entry of each that was
// applied, and then confirms or cancels the mail of every recipient that
// moved if none of its recipients is open any more, in one transaction. It
// returns, in input order, whether each resolution was applied (false: the
// state had moved on, the mail is in another life, there is no such row, or
// an earlier resolution in res is about the same recipient) and the
// confirmation each settled mail got.
func (s *Store) Resolve(ctx context.Context, res []Resolution) (applied []bool, settled map[string]string, err error) {
	if len(res) == 0 {
		return nil, nil, nil
	}
	var (
		ids, froms, tos, feedback, eventIDs []string
		details                             detailColumns
		effects                             [][]byte
		idxs                                []int16
		lives                               []int64
	)
	type key struct {
		id  string
		idx int16
	}
	if err := ValidateResolutions(res); err != nil {
		return nil, nil, err
	}
	firstAt := make(map[key]int, len(res))
	for i, r := range res {
		// One UPDATE changes a row once: a second resolution of the same
		// recipient in the batch is decided on a state that is gone.
		if _, dup := firstAt[key{r.MessageID, int16(r.Index)}]; dup {
			continue
		}
		firstAt[key{r.MessageID, int16(r.Index)}] = i
		ids = append(ids, r.MessageID)
		idxs = append(idxs, int16(r.Index))
		froms = append(froms, string(r.From))
		tos = append(tos, string(r.To))
		details.add(r.BounceType, r.Status, r.Code, r.Diagnostic, r.Rule, r.Source)
		feedback = append(feedback, cleanText(r.FeedbackType, 64))
		lives = append(lives, r.Life)
		eventIDs = append(eventIDs, r.EventID)
		effects = append(effects, r.Effect)
	}
	start := time.Now()
	moved := map[key]bool{}
	settled = map[string]string{}
	b := &pgx.Batch{}
	// The mails' rows are locked first, in the order every statement locks
	// them: two transactions resolving recipients of one mail take turns,
	// so the second one's settling sees the first one's recipient resolved
	// (under read committed, a statement sees what committed before it
	// started; without the lock, each would still see the other's
	// recipient open and neither would settle the mail). The worker's
	// record locks the same rows before it settles.
	b.Queue(lockMessagesSQL, ids).Exec(func(pgconn.CommandTag) error { return nil })
	b.Queue(resolveSQL, ids, idxs, froms, tos, details.bounceTypes, details.statuses, details.codes, details.diags,
		details.rules, details.sources, feedback, lives, padded(eventIDs), paddedBytes(effects)).
		Query(func(rows pgx.Rows) error {
			var k key
			_, err := pgx.ForEachRow(rows, []any{&k.id, &k.idx}, func() error { moved[k] = true; return nil })
			return err
		})
	b.Queue(settleSQL+` RETURNING m.message_id, m.confirmation`, ids).Query(func(rows pgx.Rows) error {
		var id, c string
		_, err := pgx.ForEachRow(rows, []any{&id, &c}, func() error { settled[id] = c; return nil })
		return err
	})
	err = s.pool.SendBatch(ctx, b).Close()
	s.observe(ctx, opResolve, start, err)
	if err != nil {
		return nil, nil, fmt.Errorf("resolve %d recipients: %w", len(res), err)
	}
	applied = make([]bool, len(res))
	for i, r := range res {
		k := key{r.MessageID, int16(r.Index)}
		applied[i] = moved[k] && firstAt[k] == i
	}
	return applied, settled, nil
}

// MarkUnconfirmed marks the given mail unconfirmed if it still awaits
// confirmation past its window, and returns how many rows it marked. The
// sweep marks the mail it finds itself (SweepUnconfirmed).
func (s *Store) MarkUnconfirmed(ctx context.Context, messageIDs []string) (int, error) {
	if len(messageIDs) == 0 {
		return 0, nil
	}
	start := time.Now()
	tag, err := s.pool.Exec(ctx, markUnconfirmedSQL, messageIDs)
	s.observe(ctx, opUnconfirmed, start, err)
	if err != nil {
		return 0, fmt.Errorf("mark %d mails unconfirmed: %w", len(messageIDs), err)
	}
	return int(tag.RowsAffected()), nil
}

// Unconfirmed lists mail marked unconfirmed (or past its window and not
// yet marked), oldest window first, with its open recipients: the mail a
// person should look at. It returns at most limit recipients.
func (s *Store) Unconfirmed(ctx context.Context, limit int) ([]Recipient, error) {
	start := time.Now()
	rows, err := s.pool.Query(ctx, `SELECT `+recipientColumnsSQL+`
		FROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id
		WHERE r.state = 'accepted' AND r.confirm_by < now()
			AND m.confirm_by IS NOT NULL AND m.confirm_by < now()
			AND (m.confirmation IS NULL OR m.confirmation = 'unconfirmed')
		ORDER BY r.confirm_by, r.message_id, r.idx LIMIT $1`, limit)
	var list []Recipient
	if err == nil {
		list, err = scanRecipients(rows)
	}
	s.observe(ctx, opUnconfirmed, start, err)
	if err != nil {
		return nil, fmt.Errorf("unconfirmed mail: %w", err)
	}
	return list, nil
}

// MessageExists reports whether messageID has a row.
func (s *Store) MessageExists(ctx context.Context, messageID string) (bool, error) {
	start := time.Now()
	var exists bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM postline_messages WHERE message_id = $1)`, messageID).Scan(&exists)
	s.observe(ctx, opRecipients, start, err)
	if err != nil {
		return false, fmt.Errorf("message %s exists: %w", messageID, err)
	}
	return exists, nil
}
