package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/postline/postline/bench/internal/benchmetrics"
	"github.com/postline/postline/bench/internal/benchproc"
)

// component is one shared process of the stack, found by its pid file.
type component struct {
	name    string // kafka, postgres, sink
	pidFile string
	tree    bool // count its children (PostgreSQL's backends)
}

// components are the shared processes whose CPU every row of the table
// counts in its whole-stack figure, as far as the options name them.
func (o options) components() []component {
	var cs []component
	for _, c := range []component{
		{name: "kafka", pidFile: o.kafkaPIDFile},
		{name: "postgres", pidFile: o.postgresPIDFile, tree: true},
		{name: "sink", pidFile: o.sinkPIDFile},
	} {
		if c.pidFile != "" {
			cs = append(cs, c)
		}
	}
	return cs
}

// sinkComponent is the smtp-sink alone: the one shared service in the path
// of the rows that use neither Kafka nor PostgreSQL (postfix, smtp-source).
func (o options) sinkComponent() []component {
	return slices.DeleteFunc(o.components(), func(c component) bool { return c.name != "sink" })
}

// cpuSample is one reading of the shared processes.
type cpuSample map[string]time.Duration

// sampleComponents reads the CPU time of every component now.
func sampleComponents(cs []component) (cpuSample, error) {
	s := cpuSample{}
	for _, c := range cs {
		pid, err := benchproc.PIDFromFile(c.pidFile)
		if err != nil {
			return nil, fmt.Errorf("whole-stack CPU: %s: %w", c.name, err)
		}
		read := benchproc.CPU
		if c.tree {
			read = benchproc.TreeCPU
		}
		if s[c.name], err = read(pid); err != nil {
			return nil, fmt.Errorf("whole-stack CPU: %s (pid %d): %w", c.name, pid, err)
		}
	}
	return s, nil
}

// since is the CPU each component used from a to s.
func (s cpuSample) since(a cpuSample) map[string]time.Duration {
	d := map[string]time.Duration{}
	for k, v := range s {
		d[k] = max(0, v-a[k])
	}
	return d
}

// selfCPU is the harness's own CPU time: the publisher of the Postline
// rows (and its polling, a small part).
func selfCPU() time.Duration {
	d, err := benchproc.CPU(os.Getpid())
	if err != nil {
		return 0
	}
	return d
}

// scrapeGoAllocs reads the worker's Go allocation counters from its
// /metrics (go_memstats_alloc_bytes_total and go_memstats_mallocs_total).
func scrapeGoAllocs(ctx context.Context, metricsURL string) (benchmetrics.Counters, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := benchmetrics.Scrape(ctx, http.DefaultClient, []string{metricsURL})
	if err == nil && !c.HasAllocs {
		err = fmt.Errorf("%s: no go_memstats_alloc_bytes_total or go_memstats_mallocs_total", metricsURL)
	}
	return c, err
}
