package templatestore

import (
	"cmp"
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
//
// Setting active this way leaves the fallback where it is; Activate also
// keeps the version active pointed at before as the fallback.
func (s *Store) SetLabel(ctx context.Context, name, label string, version, percent int, by string) (Label, error) {
	return s.setLabel(ctx, name, label, version, percent, by, "")
}

// SetFallback points the fallback label of the template name at version,
// which must exist (ErrNotFound otherwise): the version mail is rendered
// with when the chosen one fails, and the one Rollback returns to. by says
// who made the change and reason why (see ValidateReason); History shows
// both. Setting it to what it already is changes nothing.
func (s *Store) SetFallback(ctx context.Context, name string, version int, by, reason string) (Label, error) {
	return s.setLabel(ctx, name, LabelFallback, version, 0, by, reason)
}

func (s *Store) setLabel(ctx context.Context, name, label string, version, percent int, by, reason string) (Label, error) {
	if err := ValidateName(name); err != nil {
		return Label{}, err
	}
	if err := ValidateLabel(label, version, percent); err != nil {
		return Label{}, fmt.Errorf("set label of template %s: %w", name, err)
	}
	if err := ValidateReason(reason); err != nil {
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
			INSERT INTO postline_template_label_changes (revision, name, label, version, percent, changed_at, changed_by, reason)
			SELECT up.revision, $1, $2, $3, $4, up.updated_at, $5, $6 FROM up
		)
		SELECT revision, updated_at, updated_by FROM up
		UNION ALL SELECT revision, updated_at, updated_by FROM same`,
		name, label, version, pct, by, reason).Scan(&l.Revision, &l.UpdatedAt, &l.UpdatedBy)
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

// Activate points the active label of the template name at version, which
// must exist (ErrNotFound otherwise), and, unless keepFallback, the fallback
// label at the version active pointed at before: the last known good one,
// which mail falls back to when the new version fails to render and which
// Rollback returns to. Both move in one transaction, as two changes (the
// fallback's first) with their own revisions. Without an active version
// before, or when it already is the fallback, only active moves; when active
// already points at version, nothing changes. by says who made the change
// and reason why (see ValidateReason); the fallback's change records why it
// moved.
//
// Concurrent activations of one template are applied one after the other,
// each on the labels the one before left.
func (s *Store) Activate(ctx context.Context, name string, version int, keepFallback bool, by, reason string) (Activation, error) {
	if err := ValidateName(name); err != nil {
		return Activation{}, err
	}
	if err := ValidateLabel(LabelActive, version, 0); err != nil {
		return Activation{}, fmt.Errorf("activate template %s: %w", name, err)
	}
	if err := ValidateReason(reason); err != nil {
		return Activation{}, fmt.Errorf("activate template %s: %w", name, err)
	}
	fallbackReason := fmt.Sprintf("kept as the last known good version when version %d was activated", version)
	start := time.Now()
	rows, err := s.db.Query(ctx, `SELECT r_exists, r_moved, coalesce(r_label, ''), coalesce(r_from, 0), coalesce(r_to, 0),
			coalesce(r_revision, 0), coalesce(r_at, 'epoch'), coalesce(r_by, '')
		FROM postline_template_activate($1, $2, $3, $4, $5, $6)`, name, version, keepFallback, by, reason, fallbackReason)
	var (
		a      = Activation{Active: Label{Name: name, Label: LabelActive, Version: version}}
		exists bool
	)
	if err == nil {
		for rows.Next() {
			var moved bool
			c := Change{Name: name}
			if err = rows.Scan(&exists, &moved, &c.Label, &c.From, &c.Version, &c.Revision, &c.ChangedAt, &c.ChangedBy); err != nil {
				break
			}
			if c.Label == LabelActive {
				a.Active.Revision, a.Active.UpdatedAt, a.Active.UpdatedBy = c.Revision, c.ChangedAt, c.ChangedBy
			}
			if moved {
				c.Reason = map[bool]string{true: fallbackReason, false: reason}[c.Label == LabelFallback]
				a.Changes = append(a.Changes, c)
			}
		}
		rows.Close()
		err = cmp.Or(err, rows.Err())
	}
	s.observe(ctx, opActivate, start, err)
	if err != nil {
		return Activation{}, fmt.Errorf("activate template %s version %d: %w", name, version, err)
	}
	if !exists {
		return Activation{}, fmt.Errorf("activate template %s version %d: %w", name, version, ErrNotFound)
	}
	if c, ok := a.FallbackMoved(); ok {
		s.logger.InfoContext(ctx, "template label set", "template", name, "label", LabelFallback, "version", c.Version,
			"from", c.From, "by", by)
	}
	if len(a.Changes) > 0 {
		s.logger.InfoContext(ctx, "template label set", "template", name, "label", LabelActive, "version", version,
			"from", a.Changes[len(a.Changes)-1].From, "by", by)
	}
	return a, nil
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

// changeColumns are the columns of a Change, of the label_changes row c:
// From is the version of the same label's change before it.
const changeColumns = `c.revision, c.name, c.label,
	coalesce((SELECT p.version FROM postline_template_label_changes p
		WHERE p.name = c.name AND p.label = c.label AND p.revision < c.revision
		ORDER BY p.revision DESC LIMIT 1), 0),
	coalesce(c.version, 0), coalesce(c.percent, 0), c.changed_at, c.changed_by, c.reason`

func scanChange(row pgx.CollectableRow) (Change, error) {
	var c Change
	err := row.Scan(&c.Revision, &c.Name, &c.Label, &c.From, &c.Version, &c.Percent, &c.ChangedAt, &c.ChangedBy, &c.Reason)
	return c, err
}

// Changes returns the label changes made after since, oldest first, at most
// Config.ChangesLimit of them (ask again from the last one's ChangedAt for
// more). Times come from the database's clock; to learn cheaply whether
// anything changed at all, use LabelsVersion.
func (s *Store) Changes(ctx context.Context, since time.Time) ([]Change, error) {
	start := time.Now()
	rows, err := s.db.Query(ctx, `SELECT `+changeColumns+`
		FROM postline_template_label_changes c WHERE c.changed_at > $1
		ORDER BY c.revision LIMIT $2`, since, s.cfg.ChangesLimit)
	var out []Change
	if err == nil {
		out, err = pgx.CollectRows(rows, scanChange)
	}
	s.observe(ctx, opChanges, start, err)
	if err != nil {
		return nil, fmt.Errorf("read template label changes: %w", err)
	}
	return out, nil
}

// History returns every label change of the template name, oldest first:
// each move of active, canary and fallback with the version it came from,
// when, by whom and why. ErrNotFound when there is no such template; a
// template whose labels never moved has an empty history.
func (s *Store) History(ctx context.Context, name string) ([]Change, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	start := time.Now()
	// The template's own row, revision 0, says it exists.
	rows, err := s.db.Query(ctx, `SELECT `+changeColumns+`, true
		FROM postline_template_label_changes c WHERE c.name = $1
		UNION ALL
		SELECT 0, t.name, '', 0, 0, 0, 'epoch'::timestamptz, '', '', false FROM postline_templates t WHERE t.name = $1
		ORDER BY 1`, name)
	var (
		out   []Change
		found bool
	)
	if err == nil {
		var (
			c      Change
			change bool
		)
		_, err = pgx.ForEachRow(rows, []any{&c.Revision, &c.Name, &c.Label, &c.From, &c.Version, &c.Percent,
			&c.ChangedAt, &c.ChangedBy, &c.Reason, &change}, func() error {
			found = true
			if change {
				out = append(out, c)
			}
			return nil
		})
	}
	s.observe(ctx, opHistory, start, err)
	if err != nil {
		return nil, fmt.Errorf("history of template %s: %w", name, err)
	}
	if !found {
		return nil, fmt.Errorf("history of template %s: %w", name, ErrNotFound)
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
