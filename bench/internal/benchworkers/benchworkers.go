// Package benchworkers runs the groups of worker processes the benchmark
// harnesses measure: it starts them each on a free HTTP address, waits
// until they answer /readyz and own the jobs topic's partitions, and stops
// them. What the workers are configured with stays with each harness.
package benchworkers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchproc"
	"github.com/postline/postline/internal/consumer"
)

// Fleet is a group of running worker processes, each serving HTTP on an
// address of its own.
type Fleet struct {
	Procs       []*benchproc.Proc
	ReadyURLs   []string // each process's /readyz, in the order of Procs
	MetricsURLs []string // each process's /metrics, in the order of Procs
}

// Start starts n processes, the i-th from spec(i) with POSTLINE_HTTP_ADDR
// added to its environment: a loopback address that was free a moment
// ago. On an error it stops those it started.
func Start(n int, spec func(i int) benchproc.Spec) (*Fleet, error) {
	f := &Fleet{}
	for i := range n {
		addr, err := benchenv.FreeAddr()
		if err != nil {
			f.Stop(5 * time.Second)
			return nil, err
		}
		s := spec(i)
		s.Env = append(s.Env[:len(s.Env):len(s.Env)], "POSTLINE_HTTP_ADDR="+addr)
		p, err := benchproc.Start(s)
		if err != nil {
			f.Stop(5 * time.Second)
			return nil, err
		}
		f.Procs = append(f.Procs, p)
		f.ReadyURLs = append(f.ReadyURLs, "http://"+addr+"/readyz")
		f.MetricsURLs = append(f.MetricsURLs, "http://"+addr+"/metrics")
	}
	return f, nil
}

// Stop stops every process with SIGTERM, each within grace, and returns
// their errors joined. It is safe to call more than once.
func (f *Fleet) Stop(grace time.Duration) error {
	var errs []error
	for _, p := range f.Procs {
		errs = append(errs, p.Stop(grace))
	}
	return errors.Join(errs...)
}

// CPU is the processes' user plus system time; call it after Stop.
func (f *Fleet) CPU() time.Duration {
	var d time.Duration
	for _, p := range f.Procs {
		d += p.CPU()
	}
	return d
}

// Exited returns the first process that has ended, nil while all run.
func (f *Fleet) Exited() *benchproc.Proc {
	for _, p := range f.Procs {
		if p.Exited() {
			return p
		}
	}
	return nil
}

// Process is what WaitReady watches: a process that must not end while it
// is waited for.
type Process interface {
	Name() string
	Exited() bool
	LogTail(n int) string
}

// Group is a consumer group that the processes must have formed.
type Group struct {
	Brokers    []string
	ID         string
	Topic      string // the topic whose partitions the group must own
	Partitions int    // how many partitions Topic has
	// Members, when positive, is how many members the group must have.
	Members int
}

// Ready is what WaitReady waits for.
type Ready struct {
	// What names what is waited for in the error when the time runs out.
	What string
	// URLs must each answer 200: a /readyz.
	URLs []string
	// Group, when set, must be stable with every partition of its topic
	// assigned.
	Group *Group
	// Timeout bounds the wait; zero leaves it to ctx.
	Timeout time.Duration
}

// pollEvery is how often WaitReady checks.
const pollEvery = 100 * time.Millisecond

// WaitReady polls until r holds. A process of procs that ends first ends
// the wait with the tail of its log; so do ctx and r.Timeout, with the last
// reason it was not ready.
func WaitReady[P Process](ctx context.Context, procs []P, r Ready) error {
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	httpc := &http.Client{Timeout: 2 * time.Second}
	var client *kafka.Client
	if r.Group != nil {
		client = &kafka.Client{Addr: kafka.TCP(r.Group.Brokers...), Timeout: 5 * time.Second}
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last error
	for {
		for _, p := range procs {
			if p.Exited() {
				return fmt.Errorf("%s exited before it was ready:\n%s", p.Name(), p.LogTail(20))
			}
		}
		err := check(ctx, httpc, client, r)
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil {
			last = err // a check cut short by the deadline says less than the one before
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %v)", r.What, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// check checks r once.
func check(ctx context.Context, httpc *http.Client, client *kafka.Client, r Ready) error {
	for _, u := range r.URLs {
		if err := answersOK(ctx, httpc, u); err != nil {
			return err
		}
	}
	g := r.Group
	if g == nil {
		return nil
	}
	if g.Members > 0 {
		resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{g.ID}})
		if err != nil {
			return fmt.Errorf("describe group: %w", err)
		}
		if len(resp.Groups) != 1 || len(resp.Groups[0].Members) != g.Members {
			return fmt.Errorf("group %s does not have %d members yet", g.ID, g.Members)
		}
	}
	return consumer.CheckAssigned(ctx, client, g.ID, g.Topic, g.Partitions)
}

// answersOK gets url and returns an error with the status and the start of
// the body unless it answers 200.
func answersOK(ctx context.Context, httpc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
