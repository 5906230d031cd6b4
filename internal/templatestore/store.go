package templatestore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultChangesLimit is the default for Config.ChangesLimit.
const DefaultChangesLimit = 1000

// Config configures a Store.
type Config struct {
	// ChangesLimit is how many label changes one Changes call returns at
	// most (the oldest first). Defaults to DefaultChangesLimit (1000).
	ChangesLimit int
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	cfg.ChangesLimit = cmp.Or(cfg.ChangesLimit, DefaultChangesLimit)
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg Config) Validate() error {
	if cfg.ChangesLimit < 1 {
		return fmt.Errorf("templatestore config: ChangesLimit %d is not positive", cfg.ChangesLimit)
	}
	return nil
}

// DB is what a Store runs its statements on: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes the template tables. Every method is one round
// trip. It is safe for concurrent use (when its DB is, as a pool is).
type Store struct {
	cfg    Config
	db     DB
	logger *slog.Logger
	m      *metrics
}

// New returns a Store on db, whose schema must be migrated (see
// schema.Migrate). A nil logger discards logs; a nil reg leaves the metrics
// unregistered. Several stores may register on one registry: they share the
// collectors.
func New(cfg Config, db DB, logger *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("templatestore: nil database")
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

// observe records one round trip of op and counts its failure, unless the
// failure is the caller's context ending (shutdown is not a database error).
func (s *Store) observe(ctx context.Context, op string, start time.Time, err error) {
	s.m.roundTrips.WithLabelValues(op).Inc()
	s.m.db.Observe(ctx, op, start, err)
}

// Push adds d as a new version of its template, creating the template on its
// first push, unless its content hash equals the latest version's. It returns
// the template's latest version and whether this push created it. A push also
// updates the template's description and default locale. Concurrent pushes of
// the same content create one version.
func (s *Store) Push(ctx context.Context, d Draft) (version int, created bool, err error) {
	d, err = d.validate()
	if err != nil {
		return 0, false, err
	}
	hash, err := contentHash(d)
	if err != nil {
		return 0, false, err
	}
	docs := make([][]byte, 3)
	for i, doc := range [][]byte{d.DataSchema, d.Locales, d.SampleData} {
		if docs[i], err = canonicalJSON(doc); err != nil {
			return 0, false, fmt.Errorf("push template %s: %w", d.Name, err)
		}
	}
	start := time.Now()
	var v *int32
	var kind string
	err = s.db.QueryRow(ctx, `SELECT version, created, kind FROM postline_template_push(
		$1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, $11::jsonb, $12, $13)`,
		d.Name, d.Kind, d.Description, d.DefaultLocale, d.Subject, d.TextBody, d.HTMLBody, d.Layout,
		docs[0], docs[1], docs[2], hash, d.CreatedBy).Scan(&v, &created, &kind)
	s.observe(ctx, opPush, start, err)
	if err != nil {
		return 0, false, fmt.Errorf("push template %s: %w", d.Name, err)
	}
	if v == nil {
		return 0, false, fmt.Errorf("push template %s: %w: it is a %s, the draft a %s", d.Name, ErrKindMismatch, kind, d.Kind)
	}
	if created {
		s.m.pushes.WithLabelValues("created").Inc()
		s.logger.InfoContext(ctx, "template version created", "template", d.Name, "version", *v, "by", d.CreatedBy)
	} else {
		s.m.pushes.WithLabelValues("unchanged").Inc()
	}
	return int(*v), created, nil
}

const versionColumns = `name, version, subject, text_body, html_body, layout, data_schema, locales, sample_data,
	content_hash, created_at, created_by,
	COALESCE((SELECT t.default_locale FROM postline_templates t WHERE t.name = postline_template_versions.name), '')`

func scanVersion(row pgx.Row) (Version, error) {
	var v Version
	var data, locales, sample []byte
	err := row.Scan(&v.Name, &v.Version, &v.Subject, &v.TextBody, &v.HTMLBody, &v.Layout,
		&data, &locales, &sample, &v.ContentHash, &v.CreatedAt, &v.CreatedBy, &v.DefaultLocale)
	v.DataSchema, v.Locales, v.SampleData = data, locales, sample
	return v, err
}

// Get returns version of the template name; ErrNotFound if there is none.
func (s *Store) Get(ctx context.Context, name string, version int) (Version, error) {
	if err := ValidateName(name); err != nil {
		return Version{}, err
	}
	return s.readVersion(ctx, opGet, fmt.Sprintf("get template %s version %d", name, version),
		`WHERE name = $1 AND version = $2`, name, version)
}

// Latest returns the highest version of the template name; ErrNotFound if
// there is none.
func (s *Store) Latest(ctx context.Context, name string) (Version, error) {
	if err := ValidateName(name); err != nil {
		return Version{}, err
	}
	return s.readVersion(ctx, opLatest, fmt.Sprintf("latest version of template %s", name),
		`WHERE name = $1 ORDER BY version DESC LIMIT 1`, name)
}

// readVersion reads the first version that where (and args) select, in one
// round trip of op; what names the read in errors. No version is
// ErrNotFound, which is not counted as a failed round trip.
func (s *Store) readVersion(ctx context.Context, op, what, where string, args ...any) (Version, error) {
	start := time.Now()
	v, err := scanVersion(s.db.QueryRow(ctx, `SELECT `+versionColumns+`
		FROM postline_template_versions `+where, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		s.observe(ctx, op, start, nil)
		return Version{}, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	s.observe(ctx, op, start, err)
	if err != nil {
		return Version{}, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// List returns every template, ordered by name, with its latest version and
// labels (ordered by label).
func (s *Store) List(ctx context.Context) ([]Template, error) {
	start := time.Now()
	rows, err := s.db.Query(ctx, `SELECT t.name, t.kind, t.description, t.default_locale, t.created_at, t.updated_at,
			coalesce((SELECT max(v.version) FROM postline_template_versions v WHERE v.name = t.name), 0),
			l.label, l.version, coalesce(l.percent, 0), l.revision, l.updated_at, l.updated_by
		FROM postline_templates t
		LEFT JOIN postline_template_labels l ON l.name = t.name
		ORDER BY t.name, l.label`)
	var out []Template
	if err == nil {
		for rows.Next() {
			var t Template
			var label, by *string
			var version, percent *int32
			var revision *int64
			var updated *time.Time
			if err = rows.Scan(&t.Name, &t.Kind, &t.Description, &t.DefaultLocale, &t.CreatedAt, &t.UpdatedAt,
				&t.LatestVersion, &label, &version, &percent, &revision, &updated, &by); err != nil {
				break
			}
			if n := len(out); n == 0 || out[n-1].Name != t.Name {
				out = append(out, t)
			}
			if label != nil {
				cur := &out[len(out)-1]
				cur.Labels = append(cur.Labels, Label{Name: t.Name, Label: *label, Version: int(*version),
					Percent: int(*percent), Revision: *revision, UpdatedAt: *updated, UpdatedBy: *by})
			}
		}
		rows.Close()
		err = cmp.Or(err, rows.Err())
	}
	s.observe(ctx, opList, start, err)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out, nil
}

// Versions returns the versions of the template name without their content,
// oldest first; ErrNotFound if the template does not exist.
func (s *Store) Versions(ctx context.Context, name string) ([]VersionInfo, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	start := time.Now()
	rows, err := s.db.Query(ctx, `SELECT version, subject, layout, content_hash, created_at, created_by
		FROM postline_template_versions WHERE name = $1 ORDER BY version`, name)
	var out []VersionInfo
	if err == nil {
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (VersionInfo, error) {
			var v VersionInfo
			err := row.Scan(&v.Version, &v.Subject, &v.Layout, &v.ContentHash, &v.CreatedAt, &v.CreatedBy)
			return v, err
		})
	}
	s.observe(ctx, opVersions, start, err)
	if err != nil {
		return nil, fmt.Errorf("versions of template %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("versions of template %s: %w", name, ErrNotFound)
	}
	return out, nil
}
