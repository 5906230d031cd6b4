package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

// pgTarget is the host:port of the real Postgres.
func pgTarget(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL())
	if err != nil || u.Host == "" {
		t.Fatalf("POSTLINE_TEST_DATABASE_URL must be a postgres:// URL for the proxy tests (parse: %v)", err)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "5432")
	}
	return u.Host
}

// postgresReason reports whether a /readyz answer blames the database.
func postgresReason(reason string) bool {
	r := strings.ToLower(reason)
	return strings.Contains(r, "postgres") || strings.Contains(r, "database") || strings.Contains(r, "store")
}

// TestPostgresDownAtStart starts the worker while Postgres is unreachable:
// it stays alive but not ready, commits nothing, and once Postgres is back
// it becomes ready by itself and delivers every job once.
func TestPostgresDownAtStart(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	proxy := startPGProxy(t, pgTarget(t))
	proxy.Down()
	const n = 200
	w := startWorker(t, s.workerEnv("pg-down-at-start", map[string]string{
		"POSTLINE_DATABASE_URL": proxy.URL(t, s.dbURL),
	}))
	ids := s.publish(newJobs(n, "postgres down at start")...)

	var reason string
	throughout(t, 3*time.Second, "while postgres is unreachable at start", func(ctx context.Context) error {
		if !w.running() {
			return fmt.Errorf("worker exited (%v)", w.state)
		}
		if !w.Healthy(ctx) {
			return errors.New("/healthz is not OK: the process should stay alive and wait")
		}
		var ready bool
		ready, reason = w.Ready(ctx)
		if ready {
			return errors.New("/readyz is OK without a database")
		}
		if !postgresReason(reason) {
			return fmt.Errorf("/readyz reason %q does not name the database", reason)
		}
		committed, err := s.committed(ctx)
		if err != nil {
			return err
		}
		for p, off := range committed {
			if off >= 0 {
				return fmt.Errorf("partition %d committed at %d before any fate could be recorded", p, off)
			}
		}
		return nil
	})
	t.Logf("not ready while postgres is down: %q", reason)

	proxy.Up()
	upAt := time.Now()
	w.WaitReady(30 * time.Second)
	t.Logf("ready %s after postgres came back", time.Since(upAt).Round(time.Millisecond))
	s.waitSent(n, 60*time.Second)
	s.waitCommittedToEnd(30 * time.Second)

	got := s.mailbox(ids)
	if got.Total != n || got.Distinct != n || len(got.Missing) != 0 || len(got.Unexpected) != 0 {
		t.Fatalf("want exactly %d messages, each once; got %s", n, got)
	}
}

// TestPostgresDownMidRun cuts Postgres under load: readiness turns false,
// committed offsets cover only records whose fate is in Postgres and stop
// moving, and once Postgres is back the worker recovers by itself and every
// job ends sent, each delivered once.
func TestPostgresDownMidRun(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	proxy := startPGProxy(t, pgTarget(t))
	const (
		n       = 3000
		senders = 4
		// settle is how long after the cut a commit of fates recorded
		// just before it may still land: a commit interval (500ms) and a
		// round trip, with room.
		settle = 1500 * time.Millisecond
	)
	// A claim whose reply is lost in the cut leaves the row leased to this
	// very worker; a short lease keeps the wait for it short.
	w := startWorker(t, s.workerEnv("pg-down-mid-run", map[string]string{
		"POSTLINE_DATABASE_URL": proxy.URL(t, s.dbURL),
		"POSTLINE_SENDERS":      strconv.Itoa(senders),
		"POSTLINE_LEASE":        "5s",
	}))
	w.WaitReady(readyTimeout)

	ids := s.publish(newJobs(n, "postgres down mid-run")...)
	s.waitSent(n/4, 60*time.Second)
	proxy.Down()
	downAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	sentAtCut := s.sentCount(ctx)
	cancel()

	var reason string
	testkit.Eventually(t, 5*time.Second, "readiness false after postgres was cut", func(ctx context.Context) (bool, string) {
		var ready bool
		ready, reason = w.Ready(ctx)
		return !ready, reason
	})
	t.Logf("cut postgres with %d of %d rows sent; not ready after %s: %q",
		sentAtCut, n, time.Since(downAt).Round(time.Millisecond), reason)
	if !postgresReason(reason) {
		t.Errorf("/readyz reason %q does not name the database", reason)
	}

	idx := s.indexJobs()
	var settled map[int]int64
	throughout(t, 4*time.Second, "while postgres is cut", func(ctx context.Context) error {
		if !w.running() {
			return fmt.Errorf("worker exited (%v)", w.state)
		}
		committed, err := s.checkCommittedRecorded(ctx, idx)
		if err != nil {
			return err
		}
		if time.Since(downAt) > settle {
			if settled == nil {
				settled = committed
			} else if !maps.Equal(settled, committed) {
				return fmt.Errorf("committed offsets moved from %v to %v while postgres was down", settled, committed)
			}
		}
		if ready, _ := w.Ready(ctx); ready {
			return errors.New("/readyz is OK while postgres is down")
		}
		return nil
	})
	t.Logf("committed offsets held at %v while postgres was down; all below them recorded", settled)

	proxy.Up()
	upAt := time.Now()
	w.WaitReady(30 * time.Second)
	t.Logf("ready %s after postgres came back", time.Since(upAt).Round(time.Millisecond))
	s.waitSent(n, 90*time.Second)
	s.waitCommittedToEnd(30 * time.Second)
	t.Logf("all %d rows sent %s after postgres came back", n, time.Since(upAt).Round(time.Millisecond))

	errs := w.mustMetric("postline_delivery_dependency_errors_total")
	if errs == 0 {
		t.Errorf("postline_delivery_dependency_errors_total = 0: the pipeline never met the outage")
	}
	got := s.mailbox(ids)
	// A send whose fate could not be recorded is recorded later, not
	// sent again, so the outage causes no duplicates.
	t.Logf("SMTP duplicates across the postgres outage: %d (%v failed store calls retried); mailpit: %s",
		got.Duplicates, errs, got)
	if got.Distinct != n || len(got.Missing) != 0 || len(got.Unexpected) != 0 {
		t.Fatalf("want all %d Message-IDs delivered; got %s", n, got)
	}
	if got.Duplicates != 0 {
		t.Errorf("%d messages sent twice across the outage, want 0", got.Duplicates)
	}
}
