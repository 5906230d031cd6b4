package idempotency

import (
	"fmt"
	"math"
)

// The rules a batch must keep for the Store to take it, checked before any
// round trip. They are exported so that an in-memory stand-in
// (idempotencytest.Memory) refuses exactly what the Store refuses.

// maxRecipientIndex bounds a recipient's index (RecipientFate.Index,
// Resolution.Index): a job has at most 100 recipients.
const maxRecipientIndex = 100

// ValidateClaims reports the first request of reqs that Claim refuses: one
// without a message ID, or with an attempt out of range.
func ValidateClaims(reqs []ClaimRequest) error {
	for i, r := range reqs {
		if r.MessageID == "" {
			return fmt.Errorf("claim: request %d: empty message ID", i)
		}
		if r.Attempt < 1 || r.Attempt > math.MaxInt32 {
			return fmt.Errorf("claim %s: attempt %d out of range", r.MessageID, r.Attempt)
		}
	}
	return nil
}

// ValidateFates reports the first fate of outs that Record refuses: one
// without a message ID, with a status that is not a fate, with an attempt
// out of range for its status, or with a bad recipient. Only the first fate
// of an ID is written, so only its recipients are checked.
func ValidateFates(outs []Fate) error {
	first := make(map[string]bool, len(outs))
	for i, o := range outs {
		if o.MessageID == "" {
			return fmt.Errorf("record: fate %d: empty message ID", i)
		}
		switch o.Status {
		case StatusSent, StatusFailed, StatusDead, StatusRetrying, StatusSuppressed:
		default:
			return fmt.Errorf("record %s: status %q is not sent, failed, dead, suppressed or retrying", o.MessageID, o.Status)
		}
		if o.Attempt < 0 || o.Attempt > math.MaxInt32 || (o.Status == StatusRetrying && o.Attempt < 1) {
			return fmt.Errorf("record %s: attempt %d out of range for %s", o.MessageID, o.Attempt, o.Status)
		}
		if first[o.MessageID] {
			continue
		}
		first[o.MessageID] = true
		for _, r := range o.Recipients {
			switch {
			case r.Index < 0 || r.Index >= maxRecipientIndex:
				return fmt.Errorf("record %s: recipient index %d out of range", o.MessageID, r.Index)
			case r.Address == "":
				return fmt.Errorf("record %s: recipient %d: empty address", o.MessageID, r.Index)
			case !r.State.Valid():
				return fmt.Errorf("record %s: recipient %d: state %q", o.MessageID, r.Index, r.State)
			}
		}
	}
	return nil
}

// ValidateResolutions reports the first resolution of res that Resolve
// refuses: one whose index or states make no transition.
func ValidateResolutions(res []Resolution) error {
	for _, r := range res {
		if r.Index < 0 || r.Index >= maxRecipientIndex || !r.From.Valid() || !r.To.Valid() {
			return fmt.Errorf("resolve %s recipient %d: %s to %s is not a transition", r.MessageID, r.Index, r.From, r.To)
		}
	}
	return nil
}
