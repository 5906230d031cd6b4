package templatestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// isForeignKeyViolation reports whether err is PostgreSQL's foreign key
// violation: the label's template or version does not exist.
func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}

// SetLabel points label of the template name at version, which must exist
// (ErrNotFound otherwise). percent is the canary's share of sends, 1-100,
// and must be 0 for active and fallback (ErrInvalidLabel otherwise). by says
// who made the change. It returns the label as stored. Setting a label to
// what it already is changes nothing (no revision, no entry in Changes).
func (s *Store) SetLabel(ctx context.Context, name, label string, version, percent int, by string) (Label, error) {
	if err := ValidateName(name); err != nil {
		return Label{}, err
	}
	if err := ValidateLabel(label, version, percent); err != nil {
		return Label{}, fmt.Errorf("set label of template %s: %w", name, err)
	}
	var pct *int16
	if label == LabelCanary {
		p := int16(percent)
		pct = &p
	}
	l := Label{Name: name, Label: label, Version: version, Percent: percent}
	start := time.Now()
	// A label already set as asked is left alone: no revision, no change.
	err := s.db.QueryRow(ctx, `WITH same AS (
			SELECT revision, updated_at, updated_by FROM postline_template_labels
			WHERE name = $1 AND label = $2 AND version = $3 AND percent IS NOT DISTINCT FROM $4
		), rev AS (
			UPDATE postline_template_label_revision SET revision = revision + 1, updated_at = clock_timestamp()
			WHERE NOT EXISTS (SELECT 1 FROM same)
			RETURNING revision, updated_at
		), up AS (
			INSERT INTO postline_template_labels AS l (name, label, version, percent, revision, updated_at, updated_by)
			SELECT $1, $2, $3, $4, rev.revision, rev.updated_at, $5 FROM rev
			ON CONFLICT (name, label) DO UPDATE SET version = EXCLUDED.version, percent = EXCLUDED.percent,
				revision = EXCLUDED.revision, updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by
			RETURNING l.revision, l.updated_at, l.updated_by
		), ch AS (
			INSERT INTO postline_template_label_changes (revision, name, label, version, percent, changed_at, changed_by)
			SELECT up.revision, $1, $2, $3, $4, up.updated_at, $5 FROM up
		)
		SELECT revision, updated_at, updated_by FROM up
		UNION ALL SELECT revision, updated_at, updated_by FROM same`,
		name, label, version, pct, by).Scan(&l.Revision, &l.UpdatedAt, &l.UpdatedBy)
	if isForeignKeyViolation(err) {
		s.observe(ctx, opSetLabel, start, nil)
		return Label{}, fmt.Errorf("set %s of template %s to version %d: %w", label, name, version, ErrNotFound)
	}
	s.observe(ctx, opSetLabel, start, err)
	if err != nil {
		return Label{}, fmt.Errorf("set %s of template %s to version %d: %w", label, name, version, err)
	}
	s.logger.InfoContext(ctx, "template label set", "template", name, "label", label, "version", version,
		"percent", percent, "by", by)
	return l, nil
}

// ClearLabel removes label from the template name (a canary that ends, say)
// and reports whether it was set.
func (s *Store) ClearLabel(ctx context.Context, name, label, by string) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if label != LabelActive && label != LabelCanary && label != LabelFallback {
		return false, fmt.Errorf("clear label of template %s: %w: %q is not active, canary or fallback", name, ErrInvalidLabel, label)
	}
	start := time.Now()
	var removed bool
	err := s.db.QueryRow(ctx, `WITH rev AS (
			UPDATE postline_template_label_revision SET revision = revision + 1, updated_at = clock_timestamp()
			WHERE EXISTS (SELECT 1 FROM postline_template_labels WHERE name = $1 AND label = $2)
			RETURNING revision, updated_at
		), del AS (
			DELETE FROM postline_template_labels l USING rev WHERE l.name = $1 AND l.label = $2
			RETURNING rev.revision, rev.updated_at
		), ch AS (
			INSERT INTO postline_template_label_changes (revision, name, label, version, percent, changed_at, changed_by)
			SELECT del.revision, $1, $2, NULL, NULL, del.updated_at, $3 FROM del
		)
		SELECT EXISTS (SELECT 1 FROM del)`, name, label, by).Scan(&removed)
	s.observe(ctx, opClearLabel, start, err)
	if err != nil {
		return false, fmt.Errorf("clear %s of template %s: %w", label, name, err)
	}
	if removed {
		s.logger.InfoContext(ctx, "template label cleared", "template", name, "label", label, "by", by)
	}
	return removed, nil
}

// Rollback moves the active label of the template name to the version its
// fallback label names, or, without a fallback (or when active already is
// the fallback), to the version that was active before the current one was
// set (so two rollbacks without a fallback undo each other). It returns the
// new active label; ErrNoRollbackTarget when there is no such version (or no
// such template). Two rollbacks racing each other read the labels as they
// were when each began, so both may move active to the same version.
func (s *Store) Rollback(ctx context.Context, name, by string) (Label, error) {
	if err := ValidateName(name); err != nil {
		return Label{}, err
	}
	l := Label{Name: name, Label: LabelActive, UpdatedBy: by}
	start := time.Now()
	err := s.db.QueryRow(ctx, `WITH cur AS (
			SELECT version, revision FROM postline_template_labels WHERE name = $1 AND label = 'active'
		), target AS (
			SELECT coalesce(
				(SELECT f.version FROM postline_template_labels f
					WHERE f.name = $1 AND f.label = 'fallback'
					AND f.version IS DISTINCT FROM (SELECT version FROM cur)),
				(SELECT c.version FROM postline_template_label_changes c
					WHERE c.name = $1 AND c.label = 'active' AND c.version IS NOT NULL
					AND c.version IS DISTINCT FROM (SELECT version FROM cur)
					AND c.revision < coalesce((SELECT revision FROM cur), 9223372036854775807)
					AND EXISTS (SELECT 1 FROM postline_template_versions v WHERE v.name = $1 AND v.version = c.version)
					ORDER BY c.revision DESC LIMIT 1)
			) AS version
		), rev AS (
			UPDATE postline_template_label_revision SET revision = revision + 1, updated_at = clock_timestamp()
			WHERE (SELECT version FROM target) IS NOT NULL
			RETURNING revision, updated_at
		), up AS (
			INSERT INTO postline_template_labels AS l (name, label, version, percent, revision, updated_at, updated_by)
			SELECT $1, 'active', target.version, NULL, rev.revision, rev.updated_at, $2 FROM rev, target
			ON CONFLICT (name, label) DO UPDATE SET version = EXCLUDED.version, percent = NULL,
				revision = EXCLUDED.revision, updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by
			RETURNING l.version, l.revision, l.updated_at
		), ch AS (
			INSERT INTO postline_template_label_changes (revision, name, label, version, percent, changed_at, changed_by)
			SELECT up.revision, $1, 'active', up.version, NULL, up.updated_at, $2 FROM up
		)
		SELECT version, revision, updated_at FROM up`, name, by).Scan(&l.Version, &l.Revision, &l.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		s.observe(ctx, opRollback, start, nil)
		return Label{}, fmt.Errorf("roll back template %s: %w", name, ErrNoRollbackTarget)
	}
	s.observe(ctx, opRollback, start, err)
	if err != nil {
		return Label{}, fmt.Errorf("roll back template %s: %w", name, err)
	}
	s.logger.InfoContext(ctx, "template rolled back", "template", name, "version", l.Version, "by", by)
	return l, nil
}

// Labels returns the labels of the templates names, ordered by name and
// label; every template's labels when names is nil.
func (s *Store) Labels(ctx context.Context, names []string) ([]Label, error) {
	for _, n := range names {
		if err := ValidateName(n); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	rows, err := s.db.Query(ctx, `SELECT name, label, version, coalesce(percent, 0), revision, updated_at, updated_by
		FROM postline_template_labels WHERE $1::text[] IS NULL OR name = ANY ($1)
		ORDER BY name, label`, names)
	var out []Label
	if err == nil {
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Label, error) {
			var l Label
			err := row.Scan(&l.Name, &l.Label, &l.Version, &l.Percent, &l.Revision, &l.UpdatedAt, &l.UpdatedBy)
			return l, err
		})
	}
	s.observe(ctx, opLabels, start, err)
	if err != nil {
		return nil, fmt.Errorf("read template labels: %w", err)
	}
	return out, nil
}

// Changes returns the label changes made after since, oldest first, at most
// Config.ChangesLimit of them (ask again from the last one's ChangedAt for
// more). Times come from the database's clock; to learn cheaply whether
// anything changed at all, use LabelsVersion.
func (s *Store) Changes(ctx context.Context, since time.Time) ([]Change, error) {
	start := time.Now()
	rows, err := s.db.Query(ctx, `SELECT revision, name, label, coalesce(version, 0), coalesce(percent, 0), changed_at, changed_by
		FROM postline_template_label_changes WHERE changed_at > $1
		ORDER BY revision LIMIT $2`, since, s.cfg.ChangesLimit)
	var out []Change
	if err == nil {
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Change, error) {
			var c Change
			err := row.Scan(&c.Revision, &c.Name, &c.Label, &c.Version, &c.Percent, &c.ChangedAt, &c.ChangedBy)
			return c, err
		})
	}
	s.observe(ctx, opChanges, start, err)
	if err != nil {
		return nil, fmt.Errorf("read template label changes: %w", err)
	}
	return out, nil
}

// LabelsVersion returns the label revision: one row, so polling it is cheap.
// It changes with every label change.
func (s *Store) LabelsVersion(ctx context.Context) (Revision, error) {
	start := time.Now()
	var r Revision
	err := s.db.QueryRow(ctx, `SELECT revision, updated_at FROM postline_template_label_revision`).Scan(&r.Revision, &r.UpdatedAt)
	s.observe(ctx, opLabelsVersion, start, err)
	if err != nil {
		return Revision{}, fmt.Errorf("read template label revision: %w", err)
	}
	return r, nil
}
