package templatestore_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/postline/postline/internal/templatestore"
)

// labelsOf returns the labels of name as "label=version" joined by commas.
func labelsOf(t *testing.T, s *templatestore.Store, name string) string {
	t.Helper()
	ls, err := s.Labels(t.Context(), []string{name})
	if err != nil {
		t.Fatalf("Labels(%s): %v", name, err)
	}
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%s=%d", l.Label, l.Version))
	}
	return strings.Join(out, ",")
}

// moves shows changes as "label:from>to".
func moves(cs []templatestore.Change) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s:%d>%d", c.Label, c.From, c.Version))
	}
	return strings.Join(out, " ")
}

// TestActivateKeepsLastKnownGood: activating a version makes the version
// active before it the fallback, in the same transaction, unless told to
// keep the fallback; History lists every move with where it came from, who
// made it and why.
func TestActivateKeepsLastKnownGood(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool)
	ctx := t.Context()
	for _, subj := range []string{"one", "two", "three"} {
		push(t, s, draft("welcome", subj))
	}
	push(t, s, draft("other", "x"))

	steps := []struct {
		version int
		keep    bool
		reason  string
		moves   string // what the activation changed
		labels  string // the labels after it
	}{
		// No active version before: nothing to keep.
		{1, false, "first version", "active:0>1", "active=1"},
		{2, false, "new footer", "fallback:0>1 active:1>2", "active=2,fallback=1"},
		// Already active: nothing changes.
		{2, false, "", "", "active=2,fallback=1"},
		{3, true, "try three, keep one", "active:2>3", "active=3,fallback=1"},
		// The fallback version activated again: the one it replaces is the
		// last known good now.
		{1, false, "three is broken", "fallback:1>3 active:3>1", "active=1,fallback=3"},
	}
	var lastRevision int64
	for i, st := range steps {
		a, err := s.Activate(ctx, "welcome", st.version, st.keep, "ops", st.reason)
		if err != nil {
			t.Fatalf("step %d: Activate(%d): %v", i, st.version, err)
		}
		if got := moves(a.Changes); got != st.moves {
			t.Errorf("step %d: Activate(%d) moved %q, want %q", i, st.version, got, st.moves)
		}
		if got := labelsOf(t, s, "welcome"); got != st.labels {
			t.Errorf("step %d: labels %s, want %s", i, got, st.labels)
		}
		if a.Active.Version != st.version || a.Active.Label != templatestore.LabelActive || a.Active.UpdatedBy != "ops" ||
			a.Active.Revision == 0 || a.Active.UpdatedAt.IsZero() {
			t.Errorf("step %d: active label %+v", i, a.Active)
		}
		// Each change has a revision of its own, in order; the
		// label revision is the last one.
		rev, err := s.LabelsVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range a.Changes {
			if c.Revision != lastRevision+1 {
				t.Errorf("step %d: change %+v has revision %d, want %d", i, c, c.Revision, lastRevision+1)
			}
			lastRevision = c.Revision
		}
		if rev.Revision != lastRevision || a.Active.Revision > lastRevision {
			t.Errorf("step %d: label revision %d, active's %d, want %d", i, rev.Revision, a.Active.Revision, lastRevision)
		}
		if fb, ok := a.FallbackMoved(); ok && !strings.Contains(fb.Reason, fmt.Sprintf("version %d was activated", st.version)) {
			t.Errorf("step %d: the fallback moved without saying why: %+v", i, fb)
		}
	}

	// Rollback returns to the fallback the last activation kept.
	if l, err := s.Rollback(ctx, "welcome", "ops"); err != nil || l.Version != 3 {
		t.Fatalf("Rollback = %+v, %v; want the fallback, version 3", l, err)
	}
	if _, err := s.SetFallback(ctx, "welcome", 2, "ops", "two is the safest"); err != nil {
		t.Fatal(err)
	}

	refusals := []struct {
		name    string
		version int
		reason  string
		want    error
	}{
		{"welcome", 9, "", templatestore.ErrNotFound},
		{"missing", 1, "", templatestore.ErrNotFound},
		{"welcome", 0, "", templatestore.ErrInvalidLabel},
		{"welcome", 1, strings.Repeat("x", templatestore.MaxReasonBytes+1), templatestore.ErrInvalidLabel},
		{"welcome", 1, "two\nlines", templatestore.ErrInvalidLabel},
		{"Bad Name", 1, "", templatestore.ErrInvalidName},
	}
	before, err := s.LabelsVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refusals {
		if _, err := s.Activate(ctx, r.name, r.version, false, "ops", r.reason); !errors.Is(err, r.want) {
			t.Errorf("Activate(%s, %d, reason of %d bytes) = %v, want %v", r.name, r.version, len(r.reason), err, r.want)
		}
	}
	if _, err := s.SetFallback(ctx, "welcome", 9, "ops", ""); !errors.Is(err, templatestore.ErrNotFound) {
		t.Errorf("SetFallback(9) = %v, want ErrNotFound", err)
	}
	if after, err := s.LabelsVersion(ctx); err != nil || after.Revision != before.Revision {
		t.Errorf("refusals moved the label revision from %d to %+v (%v)", before.Revision, after, err)
	}

	hist, err := s.History(ctx, "welcome")
	if err != nil {
		t.Fatal(err)
	}
	want := "active:0>1 fallback:0>1 active:1>2 active:2>3 fallback:1>3 active:3>1 active:1>3 fallback:3>2"
	if got := moves(hist); got != want {
		t.Errorf("History = %s\nwant      %s", got, want)
	}
	for i, c := range hist {
		if c.Name != "welcome" || c.ChangedBy != "ops" || c.ChangedAt.IsZero() || (i > 0 && c.Revision <= hist[i-1].Revision) {
			t.Errorf("history entry %d: %+v", i, c)
		}
	}
	reasons := []string{"first version", "", "new footer", "try three, keep one", "", "three is broken", "", "two is the safest"}
	for i, c := range hist {
		if reasons[i] != "" && c.Reason != reasons[i] {
			t.Errorf("history entry %d (%s) says %q, want %q", i, c.Label, c.Reason, reasons[i])
		}
		if c.Label == templatestore.LabelFallback && c.Reason == "" {
			t.Errorf("history entry %d: the fallback moved without a reason", i)
		}
	}
	// Changes reads the same rows.
	all, err := s.Changes(ctx, hist[0].ChangedAt.Add(-1))
	if err != nil || moves(all) != want {
		t.Errorf("Changes = %s, %v; want %s", moves(all), err, want)
	}

	if h, err := s.History(ctx, "other"); err != nil || len(h) != 0 {
		t.Errorf("History of a template never labelled = %+v, %v; want empty", h, err)
	}
	if _, err := s.History(ctx, "missing"); !errors.Is(err, templatestore.ErrNotFound) {
		t.Errorf("History of a missing template: %v, want ErrNotFound", err)
	}
	// One round trip per activation; of the refusals, only the missing
	// version and template reach the database.
	if n := counter(t, reg, "postline_templatestore_round_trips_total", "activate"); n != float64(len(steps)+2) {
		t.Errorf("round_trips_total{op=activate} = %v, want %d", n, len(steps)+2)
	}
}

// TestConcurrentActivations: activations racing each other are applied one
// after the other: every fallback move keeps the version the activation
// before it left active.
func TestConcurrentActivations(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool)
	const n = 8
	for i := range n {
		push(t, s, draft("welcome", fmt.Sprintf("v%d", i+1)))
	}
	if _, err := s.Activate(t.Context(), "welcome", 1, false, "ops", ""); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for v := 2; v <= n; v++ {
		wg.Go(func() {
			if _, err := s.Activate(t.Context(), "welcome", v, false, fmt.Sprintf("op%d", v), ""); err != nil {
				t.Errorf("Activate(%d): %v", v, err)
			}
		})
	}
	wg.Wait()
	hist, err := s.History(t.Context(), "welcome")
	if err != nil {
		t.Fatal(err)
	}
	// active:0>1, then per activation a fallback move and an active move.
	if len(hist) != 1+2*(n-1) {
		t.Fatalf("History = %s; want %d changes", moves(hist), 1+2*(n-1))
	}
	active := 1
	for i := 1; i < len(hist); i += 2 {
		fb, ac := hist[i], hist[i+1]
		if fb.Label != templatestore.LabelFallback || ac.Label != templatestore.LabelActive ||
			fb.Version != active || ac.From != active || fb.ChangedBy != ac.ChangedBy || ac.Revision != fb.Revision+1 {
			t.Fatalf("changes %d and %d (%s) do not keep the active version before them (%d)", i, i+1, moves(hist[i:i+2]), active)
		}
		active = ac.Version
	}
	if got, want := labelsOf(t, s, "welcome"), fmt.Sprintf("active=%d,fallback=%d", active, hist[len(hist)-1].From); got != want {
		t.Errorf("labels %s, want %s", got, want)
	}
}
