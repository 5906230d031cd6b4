package testkit

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPoll(t *testing.T) {
	tests := []struct {
		name     string
		holdsAt  int // the check that holds first; 0: never
		timeout  time.Duration
		wantOK   bool
		wantSaw  string
		minCalls int
	}{
		{"holds at once", 1, time.Second, true, "check 1", 1},
		{"holds on the fifth check", 5, time.Second, true, "check 5", 5},
		{"never holds: the last report", 0, 30 * time.Millisecond, false, "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			start := time.Now()
			ok, saw := Poll(tt.timeout, func(ctx context.Context) (bool, string) {
				calls++
				if _, has := ctx.Deadline(); !has {
					t.Error("a check's context has no deadline")
				}
				return calls == tt.holdsAt, "check " + strconv.Itoa(calls)
			})
			if ok != tt.wantOK || calls < tt.minCalls {
				t.Fatalf("Poll = %v after %d checks, want %v after at least %d", ok, calls, tt.wantOK, tt.minCalls)
			}
			if want := cmpOr(tt.wantSaw, "check "+strconv.Itoa(calls)); saw != want {
				t.Errorf("saw %q, want the last check's %q", saw, want)
			}
			if !ok && time.Since(start) < tt.timeout {
				t.Errorf("gave up after %v, before the %v timeout", time.Since(start), tt.timeout)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestEventuallyTakesBothForms(t *testing.T) {
	n := 0
	took := Eventually(t, time.Second, "the third call", func() bool { n++; return n == 3 })
	if n != 3 || took <= 0 {
		t.Errorf("Eventually returned after %d calls, %v; want 3 calls", n, took)
	}
	Eventually(t, time.Second, "a condition", func(context.Context) (bool, string) { return true, "" })
	Eventually(t, time.Second, "a Condition", Condition(func(context.Context) (bool, string) { return true, "" }))
}

func TestHeader(t *testing.T) {
	hs := []kafka.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}, {Key: "a", Value: []byte("3")}}
	if got := Header(hs, "a"); got != "3" {
		t.Errorf(`Header(a) = %q, want the last value "3"`, got)
	}
	if got := Header(hs, "missing"); got != "" {
		t.Errorf("Header(missing) = %q, want empty", got)
	}
	if got := HeaderValues(hs, "a"); !slices.Equal(got, []string{"1", "3"}) {
		t.Errorf("HeaderValues(a) = %q, want [1 3]", got)
	}
	if got := HeaderValues(hs, "missing"); got != nil {
		t.Errorf("HeaderValues(missing) = %q, want none", got)
	}
	rec := []kgo.RecordHeader{{Key: "k", Value: []byte("v")}}
	if got := Header(rec, "k"); got != "v" {
		t.Errorf("Header of a franz-go record = %q, want v", got)
	}
}

func TestFakeKafkaListens(t *testing.T) {
	addrs := FakeKafka(t)
	if len(addrs) != 1 {
		t.Fatalf("FakeKafka = %v, want one broker", addrs)
	}
	c, err := net.DialTimeout("tcp", addrs[0], 5*time.Second)
	if err != nil {
		t.Fatalf("dial the fake broker: %v", err)
	}
	c.Close()
}

// failures records what Eventually fails a test with.
type failures struct {
	testing.TB
	got []string
}

func (f *failures) Fatalf(format string, args ...any) {
	f.got = append(f.got, fmt.Sprintf(format, args...))
}

func TestEventuallyFailsWithWhatItSaw(t *testing.T) {
	f := &failures{TB: t}
	Eventually(f, 20*time.Millisecond, "the queue to drain", func(context.Context) (bool, string) { return false, "3 left" })
	Eventually(f, 20*time.Millisecond, "a flag", func() bool { return false })
	want := []string{
		"timed out after 20ms waiting for the queue to drain; last: 3 left",
		"timed out after 20ms waiting for a flag",
	}
	if !slices.Equal(f.got, want) {
		t.Errorf("failures %q, want %q", f.got, want)
	}
}
