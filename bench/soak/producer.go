package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postline/postline/bench/internal/benchjobs"
	"github.com/postline/postline/bench/internal/benchkafka"
	"github.com/postline/postline/job"
)

// producer publishes the soak's jobs, generated as it goes, in chunks from
// four goroutines, keeping at most lead jobs ahead of the mails sent.
type producer struct {
	o         options
	brokers   []string
	topic     string
	delivered *atomic.Int64

	waits atomic.Int64 // times the lead held the producer back
	took  time.Duration
}

const publishChunk = 500

func (p *producer) run(ctx context.Context) error {
	pub, err := job.NewPublisher(benchkafka.Cluster(p.brokers...).Config(), job.PublisherConfig{Topic: p.topic})
	if err != nil {
		return err
	}
	defer pub.Close()
	start := time.Now()
	body := benchjobs.Body(p.o.bodyBytes, bodyLine)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	next := make(chan []job.Job, 4)
	for range 4 {
		wg.Go(func() {
			for batch := range next {
				if _, err := pub.Publish(ctx, batch...); err != nil {
					cancel(fmt.Errorf("publish: %w", err))
				}
			}
		})
	}
	var published int64
	for published < p.o.total() && ctx.Err() == nil {
		if !p.wait(ctx, start, published) {
			break
		}
		n := min(publishChunk, p.o.total()-published)
		batch := make([]job.Job, n)
		for i := range batch {
			batch[i] = soakJob(published+int64(i), body)
		}
		select {
		case next <- batch:
			published += n
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	p.took = time.Since(start)
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if published < p.o.total() {
		return fmt.Errorf("publish: stopped after %s of %s jobs: %w", thousands(published), thousands(p.o.total()), ctx.Err())
	}
	return nil
}

// wait holds the producer while it is lead jobs ahead of the mails sent or
// ahead of -rate; false when ctx ended.
func (p *producer) wait(ctx context.Context, start time.Time, published int64) bool {
	for {
		ahead := published - p.delivered.Load()
		var early time.Duration
		if p.o.rate > 0 {
			early = time.Until(start.Add(time.Duration(float64(published) / p.o.rate * float64(time.Second))))
		}
		if ahead < p.o.lead && early <= 0 {
			return true
		}
		p.waits.Add(1)
		d := max(early, 50*time.Millisecond) // the lead shrinks with the monitor's polls
		t := time.NewTimer(min(d, time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

func (p *producer) describe() string {
	s := fmt.Sprintf("jobs of a %d-byte text body, one recipient, published concurrently with delivery at most %s ahead of the mails sent",
		p.o.bodyBytes, thousands(p.o.lead))
	if p.o.rate > 0 {
		s += fmt.Sprintf(" and at most %.0f/s", p.o.rate)
	}
	return s + fmt.Sprintf(" (publishing took %s, held back by the lead %s times)", p.took.Round(time.Second), thousands(p.waits.Load()))
}

// bodyLine is the text of the jobs' bodies.
const bodyLine = "Postline soak body: small and plain, 64 bytes to a line........\n"

// soakJob is job i: one recipient of its own, a message ID the publisher
// assigns (random, as production's are).
func soakJob(i int64, body string) job.Job {
	return job.Job{
		Version: job.SchemaVersion,
		From:    "Postline Soak <soak@postline.test>",
		To:      []string{fmt.Sprintf("rcpt%d@sink.postline.test", i)},
		Subject: fmt.Sprintf("soak mail %d", i),
		Text:    body,
	}
}
