package main

// The latency rows (issue 32): what a user feels at moderate load and for a
// lone mail, where the full-throttle rows' p50 and p99 are mostly queueing.
//
//   - halfload: the postline worker and settings, fed by a steady publisher
//     at half the rate the postline row of the same run measured, for
//     -halfload-duration;
//   - lone: the same worker, idle, given one mail at a time: each published
//     after the previous one was sent and a pause.
//
// Latency is the other rows': sent_at - enqueued_at in SQL, where
// enqueued_at is the first-seen header job.Publisher stamps before it
// writes and sent_at the worker's clock when the sink's 250 came back
// (the fate's At), not when its row was written.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchjobs"
	"github.com/postline/postline/bench/internal/benchkafka"
	"github.com/postline/postline/job"
)

const (
	variantHalfLoad = "halfload"
	variantLone     = "lone"

	// The targets of issue 32.
	halfLoadMaxP50 = 10 * time.Millisecond
	halfLoadMaxP99 = 50 * time.Millisecond
	loneMaxP50     = 20 * time.Millisecond

	// paceTick is how often the paced publisher hands over the jobs come
	// due: fine enough that a row at thousands of mails/s is steady.
	paceTick = time.Millisecond
	// paceInFlight bounds the paced publisher's concurrent Publish calls,
	// each of which waits for the broker's acknowledgement.
	paceInFlight = 64
	// lonePoll is how often the lone row looks for its mail's sent row; the
	// latency comes from the row's timestamps, not from the poll.
	lonePoll = 2 * time.Millisecond
)

// halfLoadSpec is the halfload row's spec: the postline row's at half the
// capacity it measured in this run (an error when it did not run before),
// or at -halfload-rate.
func halfLoadSpec(o options, r int, host, port string, thisRun []result, stderr io.Writer) (workerSpec, error) {
	rate := o.halfLoadRate
	if rate == 0 {
		capacity, ok := findRow(thisRun, variantPostline)
		if !ok || capacity.Rate() <= 0 {
			return workerSpec{}, fmt.Errorf("%s needs the %s row before it in -variants: it runs at half that row's rate", variantHalfLoad, variantPostline)
		}
		rate = capacity.Rate() / 2
	}
	jobs := max(1, int(rate*o.halfLoadDuration.Seconds()))
	spec := plainSpec(o, variantHalfLoad, o.workerBin, jobs, r, host, port)
	spec.publish = func(ctx context.Context, topic string, _ *pgxpool.Pool, js []job.Job) error {
		pub, err := job.NewPublisher(benchkafka.Cluster(o.brokers...).Config(), job.PublisherConfig{Topic: topic})
		if err != nil {
			return err
		}
		defer pub.Close()
		// How long the publishes took (the broker's acknowledgement from
		// every in-sync replica): the part of the latency before the worker.
		var (
			mu   sync.Mutex
			took []time.Duration
		)
		publish := func(ctx context.Context, batch []job.Job) error {
			start := time.Now()
			_, err := pub.Publish(ctx, batch...)
			mu.Lock()
			took = append(took, time.Since(start))
			mu.Unlock()
			return err
		}
		_, err = pacedPublish(ctx, publish, js, rate, paceTick, paceInFlight)
		slices.Sort(took)
		if len(took) > 0 {
			fmt.Fprintf(stderr, "bench: %s: %d publish calls at %.0f mails/s took p50 %s, p99 %s\n", variantHalfLoad, len(took), rate,
				fmtMS(took[len(took)/2]), fmtMS(took[len(took)*99/100]))
		}
		return err
	}
	return spec, nil
}

// loneSpec is the lone row's spec: the postline settings, o.loneJobs
// mails one at a time.
func loneSpec(o options, r int, host, port string) workerSpec {
	spec := plainSpec(o, variantLone, o.workerBin, o.loneJobs, r, host, port)
	spec.publish = func(ctx context.Context, topic string, pool *pgxpool.Pool, js []job.Job) error {
		pub, err := job.NewPublisher(benchkafka.Cluster(o.brokers...).Config(), job.PublisherConfig{Topic: topic})
		if err != nil {
			return err
		}
		defer pub.Close()
		for i, j := range js {
			// The pause lets the worker fall idle: its batches, writers and
			// sessions are as a lone mail finds them.
			if err := sleepCtx(ctx, o.lonePause); err != nil {
				return err
			}
			if _, err := pub.Publish(ctx, j); err != nil {
				return fmt.Errorf("lone mail %d: %w", i, err)
			}
			if err := waitRowsSent(ctx, pool, i+1, 10*time.Second); err != nil {
				return fmt.Errorf("lone mail %d: %w", i, err)
			}
		}
		return nil
	}
	return spec
}

// waitRowsSent polls until n rows are sent; a failed row or the timeout
// ends it with an error.
func waitRowsSent(ctx context.Context, pool *pgxpool.Pool, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		sent, failed, err := benchjobs.CountRows(ctx, pool)
		switch {
		case err != nil:
			return err
		case failed > 0:
			return fmt.Errorf("%d mails failed", failed)
		case sent >= n:
			return nil
		}
		if err := sleepCtx(ctx, lonePoll); err != nil {
			return fmt.Errorf("%d of %d sent: %w", sent, n, err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dueBy is how many of n jobs are due elapsed after the start at rate per
// second: job i is due at i/rate, so the first one at once.
func dueBy(elapsed time.Duration, rate float64, n int) int {
	if elapsed < 0 || rate <= 0 {
		return min(n, 1)
	}
	return min(n, int(elapsed.Seconds()*rate)+1)
}

// pacedPublish publishes jobs steadily at rate per second: every tick, the
// jobs come due since the last one, in one publish call of their own, at
// most inFlight calls at once (a backlog goes in the next call). It returns
// how long it took and the first error.
func pacedPublish(ctx context.Context, publish func(context.Context, []job.Job) error, jobs []job.Job, rate float64, tick time.Duration, inFlight int) (time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
		}
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	slots := make(chan struct{}, inFlight)
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	sent := 0
	for sent < len(jobs) && !failed() {
		if due := dueBy(time.Since(start), rate, len(jobs)); due > sent {
			select {
			case slots <- struct{}{}:
				batch := jobs[sent:due]
				sent = due
				wg.Go(func() {
					defer func() { <-slots }()
					if err := publish(ctx, batch); err != nil {
						fail(fmt.Errorf("publish: %w", err))
					}
				})
			default: // every slot busy: the jobs wait for the next tick
			}
		}
		if sent == len(jobs) {
			break
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			fail(ctx.Err())
		}
	}
	wg.Wait()
	return time.Since(start), first
}

// latencyTargets judges the halfload row against p50 and p99 and the lone
// row against p50 (its max is shown beside); a missing row leaves its
// target not measured.
func latencyTargets(rows []result, halfLoad, lone string) []target {
	var ts []target
	t := target{Name: fmt.Sprintf("%s publish-to-250 p50 / p99 (max)", halfLoad), Measured: "n/a",
		Goal: fmt.Sprintf("≤ %s / %s", fmtMS(halfLoadMaxP50), fmtMS(halfLoadMaxP99))}
	if r, ok := findRow(rows, halfLoad); ok && r.Mails > 0 {
		t.Known, t.Pass = true, r.P50 <= halfLoadMaxP50 && r.P99 <= halfLoadMaxP99
		t.Measured = fmt.Sprintf("%s / %s (%s) at %.0f mails/s", fmtMS(r.P50), fmtMS(r.P99), fmtMS(r.Max), r.Rate())
	}
	ts = append(ts, t)
	t = target{Name: fmt.Sprintf("%s mail to an idle worker, publish-to-250 p50 (max)", lone), Measured: "n/a",
		Goal: "≤ " + fmtMS(loneMaxP50)}
	if r, ok := findRow(rows, lone); ok && r.Mails > 0 {
		t.Known, t.Pass = true, r.P50 <= loneMaxP50
		t.Measured = fmt.Sprintf("%s (%s) over %d mails", fmtMS(r.P50), fmtMS(r.Max), r.Mails)
	}
	return append(ts, t)
}

// fmtMS prints d in milliseconds.
func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
