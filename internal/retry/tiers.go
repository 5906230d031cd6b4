package retry

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/internal/topic"
)

// DefaultPrefix is the name prefix of the delay topics: a tier's topic is
// "<prefix>.<tier>", such as mail.retry.5s.
const DefaultPrefix = "mail.retry"

// DefaultRetention is retention.ms of the delay topics: far longer than the
// largest default tier, so a scheduler that is down for days loses nothing.
const DefaultRetention = 7 * 24 * time.Hour

// DefaultTiers are the delays of the delay topics.
var DefaultTiers = Tiers{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour, 6 * time.Hour}

// Tiers are the fixed delays of the delay topics, ascending, positive and
// distinct. Every record in one tier's topic waits the same delay, so each
// partition is FIFO by due time.
type Tiers []time.Duration

// ParseTiers parses a comma-separated list of Go durations such as
// "5s,30s,2m". The tiers must be ascending, positive, whole milliseconds and
// without duplicates.
func ParseTiers(s string) (Tiers, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("retry tiers %q: want a comma-separated list of durations such as 5s,30s,2m", s)
	}
	var t Tiers
	for part := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("retry tiers %q: %w", s, err)
		}
		t = append(t, d)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("retry tiers %q: %w", s, err)
	}
	return t, nil
}

// Validate reports an empty list, a tier that is not positive or not a
// whole number of milliseconds, and tiers that are not strictly ascending.
func (t Tiers) Validate() error {
	if len(t) == 0 {
		return fmt.Errorf("no tiers")
	}
	for i, d := range t {
		switch {
		case d <= 0:
			return fmt.Errorf("tier %v is not positive", d)
		case d%time.Millisecond != 0:
			return fmt.Errorf("tier %v is not a whole number of milliseconds", d)
		case i > 0 && d == t[i-1]:
			return fmt.Errorf("tier %v is listed twice", d)
		case i > 0 && d < t[i-1]:
			return fmt.Errorf("tier %v follows the larger tier %v: list tiers in ascending order", d, t[i-1])
		}
	}
	return nil
}

// String formats t the way ParseTiers reads it, with the short tier names:
// "5s,30s,2m,10m,1h,6h".
func (t Tiers) String() string {
	names := make([]string, len(t))
	for i, d := range t {
		names[i] = TierName(d)
	}
	return strings.Join(names, ",")
}

// Pick returns the smallest tier at least delay; a delay above the largest
// tier gets the largest (the record comes back earlier and the worker picks
// again). It returns 0 for an empty t.
func (t Tiers) Pick(delay time.Duration) time.Duration {
	if len(t) == 0 {
		return 0
	}
	i, _ := slices.BinarySearch(t, delay)
	return t[min(i, len(t)-1)]
}

// Topics returns the delay topic names of t, in tier order.
func (t Tiers) Topics(prefix string) []string {
	out := make([]string, len(t))
	for i, d := range t {
		out[i] = TopicName(prefix, d)
	}
	return out
}

// TopicName returns the delay topic of tier: prefix, a dot and the tier in
// the largest unit that expresses it exactly ("mail.retry.5s",
// "mail.retry.90s", "mail.retry.2m", "mail.retry.90m", "mail.retry.6h",
// "mail.retry.500ms"). The name is stable: it depends only on the duration.
func TopicName(prefix string, tier time.Duration) string {
	return prefix + "." + TierName(tier)
}

// TierName is a tier's short name: the tier part of its topic name and the
// value of the tier label ("5s", "2m", "6h").
func TierName(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d != 0 && d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// TopicSpecs returns the specs of the delay topics of t: partitions
// partitions each (topic.DefaultJobsPartitions when zero), records up to
// topic.CopyMaxMessageBytes (a retry copy is a job plus a few headers), and retention DefaultRetention or ten times the tier,
// whichever is longer.
func TopicSpecs(prefix string, t Tiers, partitions int) []topic.Spec {
	specs := make([]topic.Spec, len(t))
	for i, d := range t {
		specs[i] = topic.Spec{
			Name:       TopicName(prefix, d),
			Partitions: cmp.Or(partitions, topic.DefaultJobsPartitions),
			Configs: map[string]string{
				"max.message.bytes": strconv.Itoa(topic.CopyMaxMessageBytes),
				"retention.ms":      strconv.FormatInt(max(DefaultRetention, 10*d).Milliseconds(), 10),
			},
		}
	}
	return specs
}
