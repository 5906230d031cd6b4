package fleet

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/relaystate"
	"github.com/postline/postline/kafkaconn"
)

// fakeGroups is Kafka's consumer groups as a test sets them.
type fakeGroups struct {
	members map[string]membership               // by group
	lags    map[string]map[string]map[int]int64 // group, topic: partition lag
	errs    map[string]error                    // by group, or group+"/"+topic
	// opened and closed count the connections.
	opened, closed int
}

func (f *fakeGroups) open() (groupReader, func()) {
	f.opened++
	return f, func() { f.closed++ }
}

func (f *fakeGroups) membership(_ context.Context, group string) (membership, error) {
	if err := f.errs[group]; err != nil {
		return membership{}, err
	}
	return f.members[group], nil
}

func (f *fakeGroups) lag(_ context.Context, group, topic string) (map[int]int64, error) {
	if err := f.errs[group+"/"+topic]; err != nil {
		return nil, err
	}
	return f.lags[group][topic], nil
}

// fakeRelays is the breakers and relay states as a test sets them.
type fakeRelays struct {
	listing               relaystate.Listing
	rows                  []BreakerRow
	statesErr, breakerErr error
}

func (f fakeRelays) states(context.Context) (relaystate.Listing, error) {
	return f.listing, f.statesErr
}
func (f fakeRelays) breakers(context.Context) ([]BreakerRow, error) { return f.rows, f.breakerErr }

// fakeDeadLetters is a dead-letter topic of the given letters, listed as
// redrive lists them: those the filter matches, in order.
type fakeDeadLetters struct {
	letters []redrive.DeadLetter
	err     error
	// since and filter are what the last histogram asked for.
	since  time.Time
	filter redrive.Filter
}

func (f *fakeDeadLetters) lister(since time.Time) (deadLetterLister, error) {
	f.since = since
	return f, nil
}

func (f *fakeDeadLetters) List(_ context.Context, filter redrive.Filter, fn func(redrive.DeadLetter) error) error {
	f.filter = filter
	for _, l := range f.letters {
		if !filter.Match(l) {
			continue
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	return f.err
}

// testCluster is a cluster that is never dialled: New only keeps it.
func testCluster(t *testing.T) *kafkaclient.Cluster {
	t.Helper()
	c, err := kafkaclient.New(kafkaconn.Config{Brokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
