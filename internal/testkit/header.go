package testkit

import "github.com/segmentio/kafka-go"

// header is a Kafka record header of either client the module uses:
// kafka-go's kafka.Header and franz-go's kgo.RecordHeader have this shape.
type header interface {
	~struct {
		Key   string
		Value []byte
	}
}

// Header returns the value of the header key in hs as a reader of the
// record sees it: the last one given, "" when there is none (as
// job.HeaderCarrier reads headers).
func Header[H header](hs []H, key string) string {
	for i := len(hs) - 1; i >= 0; i-- {
		if h := kafka.Header(hs[i]); h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// HeaderValues returns the value of every header key in hs, in order: a
// test that a header is written exactly once compares it with one value.
func HeaderValues[H header](hs []H, key string) []string {
	var out []string
	for _, x := range hs {
		if h := kafka.Header(x); h.Key == key {
			out = append(out, string(h.Value))
		}
	}
	return out
}
