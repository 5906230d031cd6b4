package backoff_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/postline/postline/internal/backoff"
)

func TestDo(t *testing.T) {
	flaky, fatal := errors.New("flaky"), errors.New("fatal")
	tests := []struct {
		name      string
		results   []error // op's results, in order; past the end it fails with flaky
		cancelAt  int     // cancel ctx during this attempt (0: never)
		want      error
		wantCalls int
		wantWaits []time.Duration // the waits OnWait saw
	}{
		{name: "first call succeeds", results: []error{nil}, wantCalls: 1},
		{name: "succeeds on the fourth call, the wait doubling to its cap",
			results: []error{flaky, flaky, flaky, nil}, wantCalls: 4,
			wantWaits: []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}},
		{name: "a permanent failure ends it at once", results: []error{flaky, fatal, nil}, want: fatal, wantCalls: 2,
			wantWaits: []time.Duration{time.Millisecond}},
		{name: "a failure once ctx ended is not tried again", results: []error{flaky, flaky, flaky}, cancelAt: 2,
			want: context.Canceled, wantCalls: 2, wantWaits: []time.Duration{time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var waits []time.Duration
			calls := 0
			r := backoff.Policy{
				First: time.Millisecond, Max: 3 * time.Millisecond,
				Permanent: func(err error) bool { return errors.Is(err, fatal) },
				OnWait: func(_ error, call int, wait time.Duration) {
					if call != len(waits)+1 {
						t.Errorf("OnWait call %d, want %d", call, len(waits)+1)
					}
					waits = append(waits, wait)
				},
			}
			err := r.Do(ctx, func() error {
				calls++
				if calls == tt.cancelAt {
					cancel()
				}
				if calls <= len(tt.results) {
					return tt.results[calls-1]
				}
				return flaky
			})
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Do = %v, want %v", err, tt.want)
			}
			if calls != tt.wantCalls {
				t.Errorf("%d calls, want %d", calls, tt.wantCalls)
			}
			if !slices.Equal(waits, tt.wantWaits) {
				t.Errorf("waits %v, want %v", waits, tt.wantWaits)
			}
		})
	}
}

// A context that ends during a wait ends Do at once.
func TestDoStopsWaitingWhenCtxEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := backoff.Policy{First: time.Hour, Max: time.Hour}.Do(ctx, func() error { return errors.New("down") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want the context's error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Do returned after %s, want soon after ctx ended", d)
	}
}

func TestSleep(t *testing.T) {
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on an ended context = %v, want context.Canceled", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("Sleep on an ended context waited %v", waited)
	}
}
