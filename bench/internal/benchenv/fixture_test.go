package benchenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/topic"
)

func TestCleanupsRunNewestFirst(t *testing.T) {
	var c Cleanups
	var order []int
	for i := range 3 {
		c.Add(func() { order = append(order, i) })
	}
	c.Run()
	c.Run() // forgotten after the first run
	if !slices.Equal(order, []int{2, 1, 0}) {
		t.Errorf("ran %v, want [2 1 0] once", order)
	}
}

func TestScratchRemoveLater(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // an interrupted run still cleans up
	tests := []struct {
		name    string
		keep    bool
		err     error
		wantRan bool
		wantLog []string
	}{
		{name: "removed", wantRan: true},
		{name: "failure logged", err: errors.New("boom"), wantRan: true, wantLog: []string{"remove: boom"}},
		{name: "kept", keep: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logged []string
			s := Scratch{Keep: tt.keep, Logf: func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }}
			var c Cleanups
			ran := false
			s.removeLater(ctx, &c, "remove: %v", func(ctx context.Context) error {
				ran = true
				if ctx.Err() != nil {
					t.Errorf("removal context: %v", ctx.Err())
				}
				return tt.err
			})
			c.Run()
			if ran != tt.wantRan || !slices.Equal(logged, tt.wantLog) {
				t.Errorf("ran %v, logged %q; want %v, %q", ran, logged, tt.wantRan, tt.wantLog)
			}
		})
	}
}

func TestFixtureCreatesAndRemovesItsTopicsAndSchema(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	ctx := context.Background()
	f, err := NewFixture(ctx, FixtureOptions{Name: "fixture-test", Brokers: testenv.KafkaBrokers(),
		DatabaseURL: testenv.DatabaseURL(), Partitions: 2, Events: true, Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	infos, err := topic.Describe(ctx, testenv.Kafka(), f.JobsTopic, f.DLQTopic)
	if err != nil {
		f.Close()
		t.Fatalf("the fixture's topics: %v", err)
	}
	if n := len(infos[0].Partitions); n != 2 {
		t.Errorf("jobs topic has %d partitions, want 2", n)
	}
	var current string
	if err := f.Pool.QueryRow(ctx, "SELECT current_schema()").Scan(&current); err != nil || current == "public" {
		t.Errorf("the pool's schema is %q (%v), want the run's own", current, err)
	}
	for _, want := range []string{"POSTLINE_JOBS_TOPIC=" + f.JobsTopic, "POSTLINE_EVENTS_TOPIC=" + f.EventsTopic,
		"POSTLINE_CONSUMER_GROUP=" + f.Group, "POSTLINE_DATABASE_URL=" + f.DatabaseURL} {
		if !slices.Contains(f.Env, want) {
			t.Errorf("Env lacks %s", want)
		}
	}
	f.Close()
	if _, err := topic.Describe(ctx, testenv.Kafka(), f.JobsTopic); !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Errorf("after Close, describing the jobs topic gave %v, want unknown topic", err)
	}
	if err := DropSchema(ctx, testenv.DatabaseURL(), current); err == nil {
		t.Errorf("after Close, schema %s could still be dropped: Close did not drop it", current)
	}
}
