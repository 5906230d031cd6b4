package job

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// nestedObjects returns a document of about size bytes whose metadata value
// is objects nested {"a":{"a":...}} until the budget runs out.
func nestedObjects(size int) []byte {
	const open, close = `{"a":`, `}`
	depth := (size - 64) / (len(open) + len(close))
	var b strings.Builder
	b.WriteString(`{"version":1,"metadata":`)
	b.WriteString(strings.Repeat(open, depth))
	b.WriteString(`""`)
	b.WriteString(strings.Repeat(close, depth))
	b.WriteString(`}`)
	return []byte(b.String())
}

// nestedArrays returns a document of about size bytes whose to value is
// arrays nested [[[...]]].
func nestedArrays(size int) []byte {
	depth := (size - 32) / 2
	return []byte(`{"version":1,"to":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
}

// allocatedBy returns the bytes the heap allocated while f ran.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeDeepNestingIsLinear is the regression test for the nesting
// bomb: the scanner used to build each value's path by concatenation, so a
// 96 KB record of nested objects allocated about 260 MB. Decode must stop at
// MaxDepth and allocate a small multiple of the input.
func TestDecodeDeepNestingIsLinear(t *testing.T) {
	for _, tt := range []struct {
		name  string
		data  []byte
		field string // the path to the first value too deep
	}{
		{"objects 96 KB", nestedObjects(96 << 10), "metadata" + strings.Repeat(".a", defaultMaxDepth-1)},
		{"objects 1 MB", nestedObjects(1 << 20), "metadata" + strings.Repeat(".a", defaultMaxDepth-1)},
		{"arrays 96 KB", nestedArrays(96 << 10), "to" + strings.Repeat("[0]", defaultMaxDepth-1)},
		{"arrays 1 MB", nestedArrays(1 << 20), "to" + strings.Repeat("[0]", defaultMaxDepth-1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			alloc := allocatedBy(func() { _, err = Decode(tt.data, Limits{}) })
			checkReason(t, err, ReasonTooDeep, tt.field)
			if limit := 64 * uint64(len(tt.data)); alloc > limit {
				t.Fatalf("Decode of %d bytes allocated %d bytes, limit %d (64x input)", len(tt.data), alloc, limit)
			}
			t.Logf("%d bytes in, %d bytes allocated (%.1fx)", len(tt.data), alloc, float64(alloc)/float64(len(tt.data)))
		})
	}
}

// TestDecodeKindErrors checks that a value of the wrong kind (a number where
// a string belongs) is reported at its path, and that nothing is decoded
// after it: a record of a million of them costs no more than its size.
func TestDecodeKindErrors(t *testing.T) {
	for _, tt := range []struct{ data, field string }{
		{doc(`,"cc":[1,1,1]`), "cc[0]"},
		{doc(`,"cc":["a@b.c",{}]`), "cc[1]"},
		{doc(`,"headers":[]`), "headers"},
		{doc(`,"metadata":{"k":1}`), "metadata.k"},
		{doc(`,"attachments":{}`), "attachments"},
		{doc(`,"attachments":[[]]`), "attachments[0]"},
		{doc(`,"attachments":[{"filename":"a","content":5}]`), "attachments[0].content"},
		{doc(`,"template":"w"`), "template"},
		{doc(`,"not_after":5`), "not_after"},
		{doc(`,"priority":true`), "priority"},
		{strings.Replace(validDoc, `"subject":"Hi"`, `"subject":{"a":1}`, 1), "subject"},
	} {
		_, err := Decode([]byte(tt.data), Limits{})
		checkReason(t, err, ReasonMalformedJSON, tt.field)
	}
	wide := []byte(doc(`,"cc":[1` + strings.Repeat(`,"a@b.c"`, 100_000) + `]`))
	var err error
	if alloc := allocatedBy(func() { _, err = Decode(wide, Limits{MaxMessageBytes: len(wide)}) }); alloc > uint64(len(wide))/8 {
		t.Errorf("Decode of %d bytes with a kind error first allocated %d bytes: it went on decoding", len(wide), alloc)
	}
	checkReason(t, err, ReasonMalformedJSON, "cc[0]")
	// What the kind does not tell, the string's content does.
	for _, data := range []string{
		doc(`,"attachments":[{"filename":"a","content":"!!"}]`),
		doc(`,"attachments":[{"filename":"a","content":[1,256]}]`),
		doc(`,"not_after":"tomorrow"`),
	} {
		_, err := Decode([]byte(data), Limits{})
		checkReason(t, err, ReasonMalformedJSON, "")
	}
}

// TestDecodeTooDeep checks that a document nested deeper than the limit is
// rejected as too deep, however deep it goes.
func TestDecodeTooDeep(t *testing.T) {
	for _, data := range [][]byte{nestedObjects(96 << 10), nestedArrays(96 << 10), nestedArrays(1 << 20)} {
		_, err := Decode(data, Limits{})
		checkReason(t, err, ReasonTooDeep, "")
	}
}

func TestDecodeMaxDepth(t *testing.T) {
	// nest wraps v in n arrays.
	nest := func(n int, v string) string { return strings.Repeat("[", n) + v + strings.Repeat("]", n) }
	tests := []struct {
		name   string
		data   string
		limits Limits
		reason Reason
		field  string
	}{
		// A valid job nests 3 deep: the document, attachments, one attachment.
		{name: "valid job at depth 3", data: doc(`,"attachments":[{"filename":"a","content":""}]`), limits: Limits{MaxDepth: 3}},
		{name: "depth 4 over a limit of 3", data: doc(`,"attachments":[{"filename":"a","content":[]}]`), limits: Limits{MaxDepth: 3},
			reason: ReasonTooDeep, field: "attachments[0].content"},
		// At the default limit the scanner reads on and the decoder gives
		// the type error; one deeper and it stops.
		{name: "depth 32 reads on", data: doc(`,"cc":` + nest(defaultMaxDepth-1, "")), reason: ReasonMalformedJSON, field: "cc[0]"},
		{name: "depth 33 stops", data: doc(`,"cc":` + nest(defaultMaxDepth, "")), reason: ReasonTooDeep, field: "cc" + strings.Repeat("[0]", defaultMaxDepth-1)},
		{name: "object at depth 33", data: doc(`,"cc":` + nest(defaultMaxDepth-1, "{}")), reason: ReasonTooDeep},
		{name: "scalars do not nest", data: doc(`,"cc":` + nest(defaultMaxDepth-1, `"a@b.c"`)), reason: ReasonMalformedJSON, field: "cc[0]"},
		{name: "too deep beats a later syntax error", data: `{"version":1,"to":` + nest(40, "") + `,}`, reason: ReasonTooDeep},
		{name: "earlier syntax error beats too deep", data: `{"version":1,,"to":` + nest(40, "") + `}`, reason: ReasonMalformedJSON},
		{name: "too deep beats version", data: `{"version":2,"to":` + nest(40, "") + `}`, reason: ReasonTooDeep},
		{name: "too deep after an unknown field", data: `{"version":1,"x":1,"to":` + nest(40, "") + `}`, reason: ReasonTooDeep},
		{name: "long keys are shortened in the field", data: `{"version":1,"metadata":{"` + strings.Repeat("k", 1000) + `":` + nest(40, "") + `}}`,
			reason: ReasonTooDeep, field: "metadata." + strings.Repeat("k", 64) + "..." + strings.Repeat("[0]", defaultMaxDepth-2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.data), tt.limits)
			checkReason(t, err, tt.reason, tt.field)
		})
	}
}

// TestDecodeWideDocumentsAreLinear checks the other shape a hostile
// producer can send: many small values side by side. Paths are rendered
// only for a problem and duplicate-key sets are reused, so allocation
// stays a bounded multiple of the input. The scanner rejects all but the
// lists of short strings and the many metadata keys before encoding/json
// sees them; those two reach the second pass, whose slices and maps grow a
// quarter at a time, and cost about 25x.
func TestDecodeWideDocumentsAreLinear(t *testing.T) {
	repeat := func(prefix, item, suffix string, size int) []byte {
		n := (size - len(validDoc) - len(prefix) - len(suffix)) / (len(item) + 1)
		items := strings.TrimSuffix(strings.Repeat(item+",", n), ",")
		return []byte(doc(prefix + items + suffix))
	}
	keys := func(size int) []byte {
		var b strings.Builder
		b.WriteString(strings.TrimSuffix(validDoc, "}") + `,"metadata":{`)
		for i := 0; b.Len() < size-16; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + strconv.Itoa(i) + `":""`)
		}
		b.WriteString("}}")
		return []byte(b.String())
	}
	const size = 1 << 20
	const wideAllocFactor = 64
	for _, tt := range []struct {
		name   string
		data   []byte
		reason Reason
	}{
		{"empty objects", repeat(`,"attachments":[`, `{}`, `]`, size), ReasonMissingField},
		{"objects with one key", repeat(`,"attachments":[`, `{"x":1}`, `]`, size), ReasonUnknownField},
		{"nested empty arrays", repeat(`,"cc":[`, `[]`, `]`, size), ReasonMalformedJSON},
		{"short strings", repeat(`,"cc":[`, `"a"`, `]`, size), ReasonTooManyRecipients},
		{"numbers", repeat(`,"cc":[`, `1`, `]`, size), ReasonMalformedJSON},
		{"nulls", repeat(`,"cc":[`, `null`, `]`, size), ReasonMalformedJSON},
		{"many metadata keys", keys(size), ReasonOversizeField},
		{"duplicate keys", repeat(`,"headers":{`, `"X-A":""`, `}`, size), ReasonMalformedJSON},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			alloc := allocatedBy(func() { _, err = Decode(tt.data, Limits{}) })
			checkReason(t, err, tt.reason, "")
			if limit := wideAllocFactor * uint64(len(tt.data)); alloc > limit {
				t.Fatalf("Decode of %d bytes allocated %d bytes, limit %d (%dx input)", len(tt.data), alloc, limit, wideAllocFactor)
			}
			t.Logf("%d bytes in, %d bytes allocated (%.1fx)", len(tt.data), alloc, float64(alloc)/float64(len(tt.data)))
		})
	}
}
