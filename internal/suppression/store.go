package suppression

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultSoftBounceTTL = 72 * time.Hour
	DefaultListLimit     = 100
	DefaultPurgeBatch    = 5000
)

// MaxListLimit bounds Filter.Limit in List.
const MaxListLimit = 10000

// Config configures a Store.
type Config struct {
	// SoftBounceTTL is the lifetime Add gives a soft bounce entry that has
	// no expiry. Defaults to DefaultSoftBounceTTL (72h).
	SoftBounceTTL time.Duration
	// PurgeBatch is how many expired entries one PurgeExpired call deletes
	// at most. Defaults to DefaultPurgeBatch (5000).
	PurgeBatch int
	// NowFunc is the clock entries expire and are created on. Defaults to
	// time.Now.
	NowFunc func() time.Time
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	cfg.SoftBounceTTL = cmp.Or(cfg.SoftBounceTTL, DefaultSoftBounceTTL)
	cfg.PurgeBatch = cmp.Or(cfg.PurgeBatch, DefaultPurgeBatch)
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg Config) Validate() error {
	if cfg.SoftBounceTTL < time.Second {
		return fmt.Errorf("suppression config: SoftBounceTTL %v is shorter than 1s", cfg.SoftBounceTTL)
	}
	if cfg.PurgeBatch < 1 {
		return fmt.Errorf("suppression config: PurgeBatch %d is not positive", cfg.PurgeBatch)
	}
	return nil
}

// DB is what a Store runs its statements on: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Store reads and writes postline_suppressions. Every method is one round
// trip. It is safe for concurrent use (when its DB is, as a pool is).
type Store struct {
	cfg    Config
	db     DB
	logger *slog.Logger
	m      *metrics
}

// New returns a Store on db, whose schema must be migrated (see
// schema.Migrate). A nil logger discards logs; a nil reg leaves the metrics
// unregistered. Several stores may register on one registry: they share
// the collectors.
func New(cfg Config, db DB, logger *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("suppression: nil database")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, db: db, logger: logger, m: m}, nil
}

// InTx runs fn with a Store whose calls all run in one transaction,
// committed when fn returns nil and rolled back otherwise.
func (s *Store) InTx(ctx context.Context, fn func(tx *Store) error) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		in := *s
		in.db = tx
		return fn(&in)
	})
	if err != nil {
		return fmt.Errorf("suppression transaction: %w", err)
	}
	return nil
}

// observe records one round trip of op and counts its failure, unless the
// failure is the caller's context ending.
func (s *Store) observe(ctx context.Context, op string, start time.Time, err error) {
	s.m.db.Observe(ctx, op, start, err)
}

// compareKeys orders keys as the primary key does: tenant, address,
// stream (bytewise, as COLLATE "C").
func compareKeys(a, b Key) int {
	return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Address, b.Address),
		strings.Compare(string(a.Stream), string(b.Stream)))
}

// rankSQL is Reason.rank as a SQL expression of col, so the statement and
// Supersedes rank reasons alike.
func rankSQL(col string) string {
	var b strings.Builder
	b.WriteString("CASE " + col)
	for _, r := range Reasons() {
		fmt.Fprintf(&b, " WHEN '%s' THEN %d", r, r.rank())
	}
	b.WriteString(" ELSE 0 END")
	return b.String()
}

const entryColumns = `tenant, stream, address, reason, source, coalesce(message_id, ''), coalesce(note, ''), created_at, expires_at`

// scanEntry reads a row of entryColumns.
func scanEntry(r pgx.CollectableRow) (Entry, error) {
	var (
		e       Entry
		expires *time.Time
	)
	err := r.Scan(&e.Tenant, &e.Stream, &e.Address, &e.Reason, &e.Source, &e.MessageID, &e.Note, &e.CreatedAt, &expires)
	if expires != nil {
		e.ExpiresAt = *expires
	}
	return e, err
}

// checkSQL matches each key (by ordinal) with the live entries of its
// tenant and address on its stream or every stream: index lookups on the
// primary key.
const checkSQL = `SELECT k.i, s.tenant, s.stream, s.address, s.reason, s.source, coalesce(s.message_id, ''),
		coalesce(s.note, ''), s.created_at, s.expires_at
	FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS k(tenant, stream, address, i)
	JOIN postline_suppressions s
		ON s.tenant = k.tenant AND s.address = k.address AND s.stream IN (k.stream, '*')
	WHERE s.expires_at IS NULL OR s.expires_at > $4`

// Check returns the entries that suppress keys now, keyed by the keys as
// given: a key matches the live entry of its tenant and normalized address
// on its stream or on StreamAll, and when both exist the stronger is
// returned (the stronger reason, then the longer lifetime, then the key's
// own stream). A key whose address does not normalize cannot be suppressed
// and is left out; a key with an invalid tenant or stream fails the call.
// It is one statement however many keys there are.
func (s *Store) Check(ctx context.Context, keys []Key) (map[Key]Entry, error) {
	out := make(map[Key]Entry)
	if len(keys) == 0 {
		return out, nil
	}
	// Distinct normalized keys go to the database once; of[j] is the
	// distinct key that keys[j] asks about (-1: not an address). No slice
	// per key: this runs for every recipient of every mail.
	idx := make(map[Key]int, len(keys))
	of := make([]int, len(keys))
	cols := make([]string, 3*len(keys)) // the distinct keys' columns, cut from one array
	n := len(keys)
	tenants, streams, addrs := cols[0:0:n], cols[n:n:2*n], cols[2*n:2*n:3*n]
	for j, k := range keys {
		if err := checkText("tenant", k.Tenant, MaxTenantBytes); err != nil {
			return nil, fmt.Errorf("suppression check: %w", err)
		}
		if !k.Stream.Valid() {
			return nil, fmt.Errorf("suppression check: %w stream %q: want transactional, bulk or *", ErrInvalid, k.Stream)
		}
		n, err := normalizeKey(k, false)
		if err != nil {
			of[j] = -1 // not an address: nothing can suppress it
			continue
		}
		i, ok := idx[n]
		if !ok {
			i = len(tenants)
			idx[n] = i
			tenants, streams, addrs = append(tenants, n.Tenant), append(streams, string(n.Stream)), append(addrs, n.Address)
		}
		of[j] = i
	}
	s.m.checks.Add(float64(len(keys)))
	if len(tenants) == 0 {
		return out, nil
	}
	start := time.Now()
	rows, err := s.db.Query(ctx, checkSQL, tenants, streams, addrs, s.cfg.NowFunc())
	// best holds the strongest entry per distinct key, made on the first
	// match: most checks match nothing.
	var best []Entry
	if err == nil {
		_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{}, error) {
			var (
				i       int64
				e       Entry
				expires *time.Time
			)
			if err := r.Scan(&i, &e.Tenant, &e.Stream, &e.Address, &e.Reason, &e.Source, &e.MessageID, &e.Note,
				&e.CreatedAt, &expires); err != nil {
				return struct{}{}, err
			}
			if expires != nil {
				e.ExpiresAt = *expires
			}
			if i < 1 || int(i) > len(tenants) {
				return struct{}{}, fmt.Errorf("key ordinal %d out of range", i)
			}
			if best == nil {
				best = make([]Entry, len(tenants))
			}
			if b := &best[i-1]; b.Reason == "" || stronger(e, *b) {
				*b = e
			}
			return struct{}{}, nil
		})
	}
	s.observe(ctx, opCheck, start, err)
	if err != nil {
		return nil, fmt.Errorf("suppression check of %d keys: %w", len(tenants), err)
	}
	if best == nil {
		return out, nil
	}
	for j, k := range keys {
		if of[j] < 0 {
			continue
		}
		if e := best[of[j]]; e.Reason != "" {
			out[k] = e
			s.m.hits.WithLabelValues(string(e.Reason)).Inc()
		}
	}
	return out, nil
}

// Add upserts entries in one statement and returns how many rows it
// inserted or replaced (an entry equal to the row it meets changes
// nothing). An existing entry is replaced only when the new
// one Supersedes it; of several entries of one key in entries, the one
// that supersedes the others is written. Entries are validated first
// (their addresses normalized, a soft bounce without expiry given
// Config.SoftBounceTTL); an invalid one fails the call, naming its index,
// before anything is written.
func (s *Store) Add(ctx context.Context, entries []Entry) (changed int, err error) {
	now := s.cfg.NowFunc()
	order := make([]Key, 0, len(entries))
	byKey := make(map[Key]Entry, len(entries))
	for i, e := range entries {
		p, err := prepare(e, now, s.cfg.SoftBounceTTL)
		if err != nil {
			return 0, fmt.Errorf("suppression add: entry %d: %w", i, err)
		}
		k := p.Key()
		if old, dup := byKey[k]; !dup {
			order = append(order, k)
			byKey[k] = p
		} else if Supersedes(p, old, now) {
			byKey[k] = p
		}
	}
	if len(order) == 0 {
		return 0, nil
	}
	// Rows are locked in key order, so concurrent Adds of overlapping keys
	// wait for each other instead of deadlocking.
	slices.SortFunc(order, compareKeys)
	n := len(order)
	var (
		tenants, streams, addrs, reasons, sources = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		messageIDs, notes                         = make([]*string, n), make([]*string, n)
		created                                   = make([]time.Time, n)
		expires                                   = make([]*time.Time, n)
	)
	for i, k := range order {
		e := byKey[k]
		tenants[i], streams[i], addrs[i], reasons[i], sources[i] = e.Tenant, string(e.Stream), e.Address, string(e.Reason), e.Source
		if e.MessageID != "" {
			messageIDs[i] = &e.MessageID
		}
		if e.Note != "" {
			notes[i] = &e.Note
		}
		created[i] = e.CreatedAt
		if !e.ExpiresAt.IsZero() {
			expires[i] = &e.ExpiresAt
		}
	}
	const never = `'infinity'::timestamptz`
	nextLife, oldLife := `coalesce(EXCLUDED.expires_at, `+never+`)`, `coalesce(s.expires_at, `+never+`)`
	nextRank, oldRank := rankSQL("EXCLUDED.reason"), rankSQL("s.reason")
	start := time.Now()
	tag, err := s.db.Exec(ctx, `INSERT INTO postline_suppressions AS s
			(tenant, stream, address, reason, source, message_id, note, created_at, expires_at)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::timestamptz[], $9::timestamptz[])
		ON CONFLICT (tenant, address, stream) DO UPDATE SET
			reason = EXCLUDED.reason, source = EXCLUDED.source, message_id = EXCLUDED.message_id,
			note = EXCLUDED.note, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
		WHERE (EXCLUDED.reason = 'manual' AND (s.reason, s.source, s.message_id, s.note, s.created_at, s.expires_at)
				IS DISTINCT FROM (EXCLUDED.reason, EXCLUDED.source, EXCLUDED.message_id, EXCLUDED.note,
				EXCLUDED.created_at, EXCLUDED.expires_at))
			OR (EXCLUDED.reason <> 'manual' AND s.expires_at <= $10)
			OR (`+nextRank+` >= `+oldRank+` AND `+nextLife+` >= `+oldLife+`
				AND (`+nextRank+` > `+oldRank+` OR `+nextLife+` > `+oldLife+`))`,
		tenants, streams, addrs, reasons, sources, messageIDs, notes, created, expires, now)
	s.observe(ctx, opAdd, start, err)
	if err != nil {
		return 0, fmt.Errorf("suppression add of %d entries: %w", n, err)
	}
	return int(tag.RowsAffected()), nil
}

// Remove deletes the entries of keys (a key with an empty Stream: the
// address's entries of every stream) in one statement and returns how many
// it deleted. An invalid key fails the call before anything is deleted.
func (s *Store) Remove(ctx context.Context, keys []Key) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	tenants, streams, addrs := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		n, err := normalizeKey(k, true)
		if err != nil {
			return 0, fmt.Errorf("suppression remove: key %d: %w", i, err)
		}
		tenants[i], streams[i], addrs[i] = n.Tenant, string(n.Stream), n.Address
	}
	start := time.Now()
	tag, err := s.db.Exec(ctx, `DELETE FROM postline_suppressions s
		USING unnest($1::text[], $2::text[], $3::text[]) AS k(tenant, stream, address)
		WHERE s.tenant = k.tenant AND s.address = k.address AND (k.stream = '' OR s.stream = k.stream)`,
		tenants, streams, addrs)
	s.observe(ctx, opRemove, start, err)
	if err != nil {
		return 0, fmt.Errorf("suppression remove of %d keys: %w", len(keys), err)
	}
	return int(tag.RowsAffected()), nil
}

// purgeSQL deletes the entries expired by $1, oldest expiry first, through
// postline_suppressions_expires_idx: it reads what expired and has not been
// deleted, however many entries never expire or expire later.
//
// One purge of the fleet's runs at a time: every worker's reaper purges,
// and of two at once, both would read the same expired entries and the
// second wait for the first's row locks to find them gone. The statement first tries an advisory lock (the
// one-time filter of the scan, evaluated before it reads a row); a purge
// that finds it taken reads and deletes nothing. The key is the table's own
// (its OID), so schemas of one database do not wait for each other; the
// lock ends with the transaction.
const purgeSQL = `DELETE FROM postline_suppressions WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM postline_suppressions
	WHERE expires_at <= $1 AND (SELECT pg_try_advisory_xact_lock('postline_suppressions'::regclass::oid::int, 1))
	ORDER BY expires_at LIMIT $2))`

// PurgeExpired deletes up to Config.PurgeBatch entries that have expired
// and returns how many it deleted; call it again while it returns
// PurgeBatch. While another purge runs (another worker's, as a rule) it
// returns 0 at once, having read nothing.
func (s *Store) PurgeExpired(ctx context.Context) (int, error) {
	start := time.Now()
	tag, err := s.db.Exec(ctx, purgeSQL, s.cfg.NowFunc(), s.cfg.PurgeBatch)
	s.observe(ctx, opPurge, start, err)
	if err != nil {
		return 0, fmt.Errorf("suppression purge of expired entries: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// LiftFromMessages removes the entries that the given mails' own failures
// added (entries with one of messageIDs and source), and returns how many
// it removed: an operator replaying mail that failed for a reason since
// fixed undoes what that failure put on the lists, and nothing else.
func (s *Store) LiftFromMessages(ctx context.Context, messageIDs []string, source string) (int, error) {
	if len(messageIDs) == 0 {
		return 0, nil
	}
	start := time.Now()
	tag, err := s.db.Exec(ctx, `DELETE FROM postline_suppressions WHERE message_id = ANY($1::text[]) AND source = $2`, messageIDs, source)
	s.observe(ctx, opLift, start, err)
	if err != nil {
		return 0, fmt.Errorf("suppression: lift the entries of %d mails: %w", len(messageIDs), err)
	}
	return int(tag.RowsAffected()), nil
}
