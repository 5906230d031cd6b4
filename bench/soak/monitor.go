package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchmetrics"
	"github.com/postline/postline/bench/internal/benchproc"
)

// monitor polls the workers' progress and samples their memory and the
// tables, and ends the soak when every job is sent or something went wrong.
type monitor struct {
	o           options
	procs       []*benchproc.Proc
	metricsURLs []string
	pool        *pgxpool.Pool
	httpc       *http.Client
	stderr      io.Writer

	start     time.Time
	delivered atomic.Int64 // mails sent so far, for the producer's lead
	points    []point
	samples   []sample
	aged      *aging // set by the aging goroutine before it reports on its channel
}

// stallAfter ends a soak in which no mail was sent for this long.
const stallAfter = 60 * time.Second

// watch returns nil once every job is sent. prodErr is the producer's
// error, to be read once prodDone is closed.
func (m *monitor) watch(ctx context.Context, prodDone <-chan struct{}, prodErr *error) error {
	ctx, cancel := context.WithTimeout(ctx, m.o.timeout)
	defer cancel()
	poll := time.NewTicker(m.o.poll)
	defer poll.Stop()
	m.points = append(m.points, point{}) // nothing sent when publishing starts
	var (
		last                      benchmetrics.Counters
		lastSampleT, lastReportAt time.Duration
		lastProgress              = time.Now()
		lastSampleDelivered       int64
		agingStarted, agingDone   bool
		agedCh                    = make(chan error, 1)
		allSentAt                 time.Duration
	)
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s of %s mails sent: %w", thousands(last.Sent), thousands(m.o.total()), ctx.Err())
		case err := <-agedCh:
			if err != nil {
				return err
			}
			agingDone = true
			m.reportAged()
			continue
		case <-prodDone:
			if *prodErr != nil {
				return *prodErr
			}
			prodDone = nil // published everything: keep polling
		case <-poll.C:
		}
		if err := m.exited(last.Sent); err != nil {
			return err
		}
		c, err := benchmetrics.Scrape(ctx, m.httpc, m.metricsURLs)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("progress: %w", err)
		}
		t := time.Since(m.start)
		m.delivered.Store(c.Sent)
		if c.Sent != last.Sent {
			lastProgress = time.Now()
		} else if c.Sent < m.o.total() && time.Since(lastProgress) >= stallAfter {
			return fmt.Errorf("%s of %s mails sent and none more for %s (see the worker logs)", thousands(c.Sent), thousands(m.o.total()), stallAfter)
		}
		last = c
		m.points = append(m.points, point{T: t, Delivered: c.Sent})
		if c.Failed > 0 {
			return fmt.Errorf("%s jobs failed, dead or rejected (sent %s)", thousands(c.Failed), thousands(c.Sent))
		}
		if !agingStarted && m.agingDue(c.Sent) {
			// In its own goroutine: polls go on while the aging runs, so
			// the producer's lead stays current.
			agingStarted = true
			go m.age(ctx, t, c.Sent, agedCh)
		}
		if c.Sent >= m.o.total() && allSentAt == 0 {
			allSentAt = t
		}
		done := m.finished(t, c, agingDone, allSentAt)
		if t-lastSampleT < m.o.sampleEvery && !done {
			continue
		}
		x, err := m.sample(ctx, t, c)
		if err != nil {
			return err
		}
		x.Rate = float64(c.Sent-lastSampleDelivered) / (t - lastSampleT).Seconds()
		m.samples = append(m.samples, x)
		lastSampleT, lastSampleDelivered = t, c.Sent
		if t-lastReportAt >= 30*time.Second || done {
			m.reportProgress(t, c, x)
			lastReportAt = t
		}
		if !done {
			continue
		}
		if agingStarted && !agingDone {
			if err := <-agedCh; err != nil {
				return err
			}
		}
		return nil
	}
}

// agingDue reports whether the -aging mode, if any, starts once sent mails
// are sent.
func (m *monitor) agingDue(sent int64) bool {
	return m.o.aging != agingOff && sent >= int64(m.o.ageFrom*float64(m.o.jobs))
}

// finished reports whether the soak is over at t with the counters c.
// Without aging, and with the steady aging, the soak ends with the last
// mail; with the burst, once the aged rows are purged too, or -purge-wait
// after the last mail (sent at allSentAt).
func (m *monitor) finished(t time.Duration, c benchmetrics.Counters, agingDone bool, allSentAt time.Duration) bool {
	return c.Sent >= m.o.total() && (m.o.aging != agingBurst ||
		(agingDone && (c.Purged >= m.aged.Rows || t-allSentAt >= m.o.purgeWait)))
}

// reportAged says what the aging did, once it is done.
func (m *monitor) reportAged() {
	if m.o.aging == agingBurst {
		fmt.Fprintf(m.stderr, "soak: aged %s sent rows past the retention in %s\n", thousands(m.aged.Rows), m.aged.Took.Round(time.Millisecond))
	} else {
		fmt.Fprintf(m.stderr, "soak: aging defaults installed in %s: rows written from now on become purgeable %s after they are sent\n",
			m.aged.Took.Round(time.Millisecond), m.aged.Lag)
	}
}

// exited reports a worker that has exited, with the tail of its log.
func (m *monitor) exited(sent int64) error {
	for _, p := range m.procs {
		if p.Exited() {
			return fmt.Errorf("%s exited after %s mails:\n%s", p.Name(), thousands(sent), p.LogTail(20))
		}
	}
	return nil
}

// age runs the -aging mode once sent mails were sent at t, sets m.aged and
// sends its error (nil when done) on agedCh.
func (m *monitor) age(ctx context.Context, t time.Duration, sent int64, agedCh chan<- error) {
	var a *aging
	var err error
	if m.o.aging == agingBurst {
		a, err = burst(ctx, m.pool, m.o.ageShift, t, sent)
	} else {
		// A row becomes purgeable once its shifted timestamps are a
		// retention old: the retention less the shift after it was
		// sent, at once for a shift past the retention.
		a, err = steady(ctx, m.pool, m.o.ageShift, max(m.o.retention-m.o.ageShift, 0), t, sent)
	}
	m.aged = a
	agedCh <- err
}

// reportProgress prints one progress line at t.
func (m *monitor) reportProgress(t time.Duration, c benchmetrics.Counters, x sample) {
	fmt.Fprintf(m.stderr, "soak: %s: %s/%s sent, %.0f/s, RSS %s MiB, %s rows, %.0f MiB, %s purged, load %.2f\n",
		t.Round(time.Second), thousands(c.Sent), thousands(m.o.total()), x.Rate, mibList(x.RSS),
		thousands(x.Tables.MessagesRows), mib(x.Tables.AllBytes), thousands(c.Purged), x.Load1)
}

func (m *monitor) sample(ctx context.Context, t time.Duration, c benchmetrics.Counters) (sample, error) {
	rss, peak, err := readRSS(m.procs)
	if err != nil {
		return sample{}, err
	}
	tables, err := readTableStats(ctx, m.pool)
	if err != nil {
		return sample{}, err
	}
	wal, err := readWALStats(ctx, m.pool)
	if err != nil {
		return sample{}, err
	}
	var load float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = loadAverage(string(b))
	}
	cpu, err := readCPU(m.procs, m.o.pidFiles)
	if err != nil {
		return sample{}, err
	}
	return sample{T: t, Delivered: c.Sent, Failed: c.Failed, Purged: c.Purged, Takeovers: c.Takeovers,
		Duplicates: c.Duplicates, PurgeStatements: c.PurgeStatements, PurgeSeconds: c.PurgeSeconds, RSS: rss, Peak: peak,
		Tables: tables, WAL: wal, Load1: load, CPU: cpu}, nil
}

func (m *monitor) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(writeCSV(f, m.o.workers, m.samples), f.Close())
}
