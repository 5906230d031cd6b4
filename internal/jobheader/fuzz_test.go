package jobheader

import (
	"bytes"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
)

// FuzzHeaders checks the readers and writer of record headers against
// arbitrary header lists: Attempt and Throttles stay within the range a
// Postgres integer holds and agree with an independent parse of the last
// value, and Set leaves exactly one header with the key, keeps the
// others in order and never writes to its input.
//
// The header list is raw split on '\n', each line split at its first ':'
// into key and value; key and value are what Set then writes.
func FuzzHeaders(f *testing.F) {
	for _, seed := range []struct{ raw, key, value string }{
		{"", KeyAttempt, "2"},
		{KeyAttempt + ":3", KeyAttempt, "4"},
		{KeyAttempt + ":2147483648", KeyThrottles, "1"},
		{KeyAttempt + ":99999999999999999999\n" + KeyThrottles + ":-1", KeyAttempt, "2147483647"},
		{KeyAttempt + ":1\n" + KeyAttempt + ": 3\n" + KeyAttempt + ":3\x00", KeyAttempt, "+3"},
		{KeyThrottles + ":0\nother:x\n" + KeyThrottles + ":7", "other", ""},
		{"traceparent:a\nb:c\ntraceparent:d", "traceparent", "e"},
		{KeyAttempt + ":" + strings.Repeat("9", 300), KeyAttempt, "-2147483649"},
	} {
		f.Add(seed.raw, seed.key, seed.value)
	}
	f.Fuzz(func(t *testing.T, raw, key, value string) {
		var headers []kafka.Header
		if raw != "" {
			for _, line := range strings.Split(raw, "\n") {
				k, v, _ := strings.Cut(line, ":")
				headers = append(headers, kafka.Header{Key: k, Value: []byte(v)})
			}
		}

		a, th := Attempt(headers), Throttles(headers)
		if a < 1 || a > math.MaxInt32 {
			t.Fatalf("Attempt = %d, outside [1, MaxInt32]", a)
		}
		if th < 0 || th > math.MaxInt32 {
			t.Fatalf("Throttles = %d, outside [0, MaxInt32]", th)
		}
		if want := refCount(headers, KeyAttempt, 1, 1); a != want {
			t.Fatalf("Attempt = %d, want %d", a, want)
		}
		if want := refCount(headers, KeyThrottles, 0, 0); th != want {
			t.Fatalf("Throttles = %d, want %d", th, want)
		}

		before := cloneHeaders(headers)
		out := Set(headers, key, value)
		if !reflect.DeepEqual(headers, before) {
			t.Fatalf("Set changed its input:\n before %q\n after  %q", before, headers)
		}
		n := 0
		for _, h := range out {
			if h.Key == key {
				n++
				if string(h.Value) != value {
					t.Fatalf("Set wrote %q, want %q", h.Value, value)
				}
			}
		}
		if n != 1 {
			t.Fatalf("Set left %d headers with key %q, want 1: %q", n, key, out)
		}
		others := func(hs []kafka.Header) []kafka.Header {
			return slices.DeleteFunc(slices.Clone(hs), func(h kafka.Header) bool { return h.Key == key })
		}
		sameHeader := func(a, b kafka.Header) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }
		if !slices.EqualFunc(others(out), others(before), sameHeader) {
			t.Fatalf("Set changed other headers:\n before %q\n after  %q", before, out)
		}
		// The result must not share the input's backing array: a consumed
		// record or a sibling message may own it.
		if len(out) > 0 && len(headers) > 0 {
			out[0].Key += "!"
			if !reflect.DeepEqual(headers, before) {
				t.Fatal("the result of Set shares its input's backing array")
			}
		}
	})
}

// refCount is the reference for Attempt and Throttles: the last value with
// key read as an arbitrary-precision decimal (so no overflow can hide a
// bug), or def when it is missing, not a decimal, below lo or above
// MaxInt32.
func refCount(headers []kafka.Header, key string, lo, def int) int {
	v, ok := lastHeader(headers, key)
	if !ok {
		return def
	}
	n, ok := new(big.Int).SetString(v, 10)
	if !ok || n.Cmp(big.NewInt(int64(lo))) < 0 || n.Cmp(big.NewInt(math.MaxInt32)) > 0 {
		return def
	}
	return int(n.Int64())
}

func cloneHeaders(hs []kafka.Header) []kafka.Header {
	if hs == nil {
		return nil
	}
	out := make([]kafka.Header, len(hs))
	for i, h := range hs {
		out[i] = kafka.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
	}
	return out
}
