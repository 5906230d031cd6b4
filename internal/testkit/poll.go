package testkit

import (
	"context"
	"testing"
	"time"
)

// Poll intervals: a check is repeated after FirstInterval, and the wait
// doubles up to MaxInterval. A condition that holds soon is seen within a
// few milliseconds; a slow one (a broker, a database, another process) is
// asked at most every MaxInterval.
const (
	FirstInterval = time.Millisecond
	MaxInterval   = 25 * time.Millisecond
)

// CheckTimeout bounds the context of one check of a Condition.
const CheckTimeout = 10 * time.Second

// Condition reports whether what a test waits for holds and, when it does
// not, what it saw instead (for the failure message; may be empty). ctx
// bounds one check (CheckTimeout).
type Condition func(ctx context.Context) (ok bool, saw string)

// Check is a condition as a test writes it: a plain predicate, or a
// Condition that says what it saw.
type Check interface {
	func() bool | func(ctx context.Context) (ok bool, saw string) | Condition
}

// Eventually checks cond until it holds and returns how long that took,
// failing t once timeout has passed, with what and (for a Condition) what
// cond saw last. The first check is immediate.
func Eventually[C Check](t testing.TB, timeout time.Duration, what string, cond C) time.Duration {
	t.Helper()
	start := time.Now()
	ok, saw := Poll(timeout, asCondition(cond))
	switch {
	case !ok && saw != "":
		t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, saw)
	case !ok:
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
	return time.Since(start)
}

// Poll checks cond until it holds or timeout passes, and returns whether it
// held and what cond said last. It does not fail the test: a caller that
// wants its later checks to run anyway reports the failure itself.
func Poll(timeout time.Duration, cond Condition) (bool, string) {
	deadline := time.Now().Add(timeout)
	wait := FirstInterval
	for {
		ctx, cancel := context.WithTimeout(context.Background(), CheckTimeout)
		ok, saw := cond(ctx)
		cancel()
		if ok {
			return true, saw
		}
		if !time.Now().Before(deadline) {
			return false, saw
		}
		time.Sleep(min(wait, time.Until(deadline)+time.Millisecond))
		wait = min(2*wait, MaxInterval)
	}
}

func asCondition[C Check](cond C) Condition {
	switch c := any(cond).(type) {
	case func() bool:
		return func(context.Context) (bool, string) { return c(), "" }
	case func(context.Context) (bool, string):
		return c
	case Condition:
		return c
	}
	panic("unreachable: Check has three forms")
}
