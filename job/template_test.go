package job

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/postline/postline/internal/templatestore"
)

// templateJob is a valid template job: no bodies, no subject.
func templateJob() Job {
	j := validJob()
	j.Subject, j.Text = "", ""
	j.Template = &TemplateRef{Name: "order-confirmation", Data: map[string]any{"order": json.Number("4711"), "items": []any{map[string]any{"sku": "a"}}}, Locale: "fr-CA"}
	return j
}

// nestedData returns data nesting depth deep, the data object counting as 1.
func nestedData(depth int) map[string]any {
	var v any = "leaf"
	for range depth - 1 {
		v = map[string]any{"a": v}
	}
	return map[string]any{"a": v}
}

// manyKeys returns data with n keys.
func manyKeys(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[strconv.Itoa(i)] = i
	}
	return m
}

func TestValidateTemplate(t *testing.T) {
	small := Limits{MaxBodyBytes: 20}
	tests := []struct {
		name   string
		mutate func(*Job)
		limits Limits
		reason Reason // empty: valid
		field  string
	}{
		{name: "template job", mutate: func(*Job) {}},
		{name: "template job with subject", mutate: func(j *Job) { j.Subject = "Your order" }},
		{name: "template job name only", mutate: func(j *Job) { j.Template = &TemplateRef{Name: "w"} }},
		{name: "version number", mutate: func(j *Job) { j.Template.Version = "3" }},
		{name: "version 9 digits", mutate: func(j *Job) { j.Template.Version = "999999999" }},
		{name: "label active", mutate: func(j *Job) { j.Template.Version = "active" }},
		{name: "label canary", mutate: func(j *Job) { j.Template.Version = "canary" }},
		{name: "label fallback", mutate: func(j *Job) { j.Template.Version = "fallback" }},
		{name: "locale language only", mutate: func(j *Job) { j.Template.Locale = "de" }},
		{name: "locale script and region", mutate: func(j *Job) { j.Template.Locale = "zh-Hant-TW" }},
		{name: "null inside data", mutate: func(j *Job) { j.Template.Data = map[string]any{"coupon": nil} }},
		{name: "Go types in data", mutate: func(j *Job) {
			j.Template.Data = map[string]any{"n": 1.5, "s": []string{"a"}, "m": map[string]int{"x": 1}}
		}},
		{name: "data at depth limit", mutate: func(j *Job) { j.Template.Data = nestedData(maxTemplateDataDepth) }},
		{name: "data at key limit", mutate: func(j *Job) { j.Template.Data = manyKeys(maxTemplateDataKeys) }},
		{name: "data within body limit", limits: small, mutate: func(j *Job) { j.Template.Data = map[string]any{"k": "123456789012"} }}, // {"k":"123456789012"} is 20 bytes

		{name: "template job without name", mutate: func(j *Job) { j.Template.Name = "" }, reason: ReasonMissingField, field: "template.name"},
		{name: "no body, no template", mutate: func(j *Job) { j.Template = nil }, reason: ReasonMissingBody},
		{name: "name upper case", mutate: func(j *Job) { j.Template.Name = "Welcome" }, reason: ReasonInvalidField, field: "template.name"},
		{name: "name with space", mutate: func(j *Job) { j.Template.Name = "order confirmation" }, reason: ReasonInvalidField, field: "template.name"},
		{name: "name ends with dash", mutate: func(j *Job) { j.Template.Name = "order-" }, reason: ReasonInvalidField, field: "template.name"},
		{name: "name starts with underscore", mutate: func(j *Job) { j.Template.Name = "_order" }, reason: ReasonInvalidField, field: "template.name"},
		{name: "name 64 chars", mutate: func(j *Job) { j.Template.Name = strings.Repeat("a", 64) }},
		{name: "name 65 chars", mutate: func(j *Job) { j.Template.Name = strings.Repeat("a", 65) }, reason: ReasonOversizeField, field: "template.name"},
		{name: "name LF", mutate: func(j *Job) { j.Template.Name = "a\nb" }, reason: ReasonHeaderInjection, field: "template.name"},
		{name: "version v2", mutate: func(j *Job) { j.Template.Version = "v2" }, reason: ReasonInvalidField, field: "template.version"},
		{name: "version zero", mutate: func(j *Job) { j.Template.Version = "0" }, reason: ReasonInvalidField, field: "template.version"},
		{name: "version leading zero", mutate: func(j *Job) { j.Template.Version = "03" }, reason: ReasonInvalidField, field: "template.version"},
		{name: "version negative", mutate: func(j *Job) { j.Template.Version = "-1" }, reason: ReasonInvalidField, field: "template.version"},
		{name: "version 10 digits", mutate: func(j *Job) { j.Template.Version = "1000000000" }, reason: ReasonInvalidField, field: "template.version"},
		{name: "label in upper case", mutate: func(j *Job) { j.Template.Version = "Active" }, reason: ReasonInvalidField, field: "template.version"},
		{name: "unknown label", mutate: func(j *Job) { j.Template.Version = "beta" }, reason: ReasonInvalidField, field: "template.version"},
		{name: "locale underscore", mutate: func(j *Job) { j.Template.Locale = "fr_CA" }, reason: ReasonInvalidField, field: "template.locale"},
		{name: "locale one letter", mutate: func(j *Job) { j.Template.Locale = "f" }, reason: ReasonInvalidField, field: "template.locale"},
		{name: "locale trailing dash", mutate: func(j *Job) { j.Template.Locale = "fr-" }, reason: ReasonInvalidField, field: "template.locale"},
		{name: "locale empty subtag", mutate: func(j *Job) { j.Template.Locale = "fr--CA" }, reason: ReasonInvalidField, field: "template.locale"},
		{name: "locale digit first", mutate: func(j *Job) { j.Template.Locale = "1fr" }, reason: ReasonInvalidField, field: "template.locale"},
		{name: "locale too long", mutate: func(j *Job) { j.Template.Locale = "en" + strings.Repeat("-abcdefgh", 4) }, reason: ReasonOversizeField, field: "template.locale"},
		{name: "locale LF", mutate: func(j *Job) { j.Template.Locale = "fr\n" }, reason: ReasonHeaderInjection, field: "template.locale"},
		{name: "data too deep", mutate: func(j *Job) { j.Template.Data = nestedData(maxTemplateDataDepth + 1) }, reason: ReasonTooDeep, field: "template.data"},
		{name: "data arrays too deep", mutate: func(j *Job) {
			var v any = 1
			for range maxTemplateDataDepth {
				v = []any{v}
			}
			j.Template.Data = map[string]any{"a": v}
		}, reason: ReasonTooDeep, field: "template.data"},
		{name: "data too many keys", mutate: func(j *Job) { j.Template.Data = manyKeys(maxTemplateDataKeys + 1) }, reason: ReasonOversizeField, field: "template.data"},
		{name: "nested keys count", mutate: func(j *Job) {
			inner := manyKeys(maxTemplateDataKeys)
			j.Template.Data = map[string]any{"inner": inner}
		}, reason: ReasonOversizeField, field: "template.data"},
		{name: "data over body limit", limits: small, mutate: func(j *Job) { j.Template.Data = map[string]any{"k": "1234567890123"} }, reason: ReasonOversizeBody, field: "template.data"},
		{name: "data not encodable", mutate: func(j *Job) { j.Template.Data = map[string]any{"c": make(chan int)} }, reason: ReasonInvalidField, field: "template.data"},
		{name: "data NaN", mutate: func(j *Job) { j.Template.Data = map[string]any{"n": math.NaN()} }, reason: ReasonInvalidField, field: "template.data"},
		{name: "data cycle", mutate: func(j *Job) {
			m := map[string]any{}
			m["self"] = m
			j.Template.Data = m
		}, reason: ReasonInvalidField, field: "template.data"},

		// A job with a body keeps its template as a free-text audit
		// reference; only the new fields are checked on it.
		{name: "body job: free-form name and version", mutate: func(j *Job) {
			j.Text = "Hi"
			j.Template = &TemplateRef{Name: "Order Confirmation", Version: "v2.1-beta"}
		}},
		{name: "body job: bad locale", mutate: func(j *Job) { j.HTML = "<p>x</p>"; j.Template.Locale = "fr_CA" }, reason: ReasonInvalidField, field: "template.locale"},
		{name: "body job: data counts with the body", limits: small, mutate: func(j *Job) {
			j.Text = "1234567890"
			j.Template.Data = map[string]any{"k": "12"} // {"k":"12"} is 10 bytes
		}},
		{name: "body job: data over the body limit with the body", limits: small, mutate: func(j *Job) {
			j.Text = "1234567890"
			j.Template.Data = map[string]any{"k": "123"}
		}, reason: ReasonOversizeBody, field: "template.data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := templateJob()
			tt.mutate(&j)
			checkReason(t, j.Validate(tt.limits), tt.reason, tt.field)
		})
	}
}

func TestTemplated(t *testing.T) {
	tests := []struct {
		name string
		job  Job
		want bool
	}{
		{"template, no body", Job{Template: &TemplateRef{Name: "w"}}, true},
		{"template and text", Job{Template: &TemplateRef{Name: "w"}, Text: "x"}, false},
		{"template and html", Job{Template: &TemplateRef{Name: "w"}, HTML: "x"}, false},
		{"no template", Job{}, false},
	}
	for _, tt := range tests {
		if got := tt.job.Templated(); got != tt.want {
			t.Errorf("%s: Templated() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestTemplateNamePatternMatchesStore keeps the name rule of template jobs
// the template store's, so that every name a job may carry can exist.
func TestTemplateNamePatternMatchesStore(t *testing.T) {
	if templateNamePattern != templatestore.NamePattern {
		t.Fatalf("templateNamePattern %q, templatestore.NamePattern %q", templateNamePattern, templatestore.NamePattern)
	}
	if maxTemplateNameLength != 64 {
		t.Fatalf("maxTemplateNameLength %d disagrees with the pattern's 64", maxTemplateNameLength)
	}
}

func TestDecodeTemplateJob(t *testing.T) {
	const big = "123456789012345678901234567890"
	data := doc(`,"template":{"name":"order-confirmation","version":"canary","locale":"fr-CA","data":{"order":` + big + `,"total":12.50,"coupon":null,"items":[{"sku":"a","qty":2}]}}`)
	data = strings.Replace(data, `"subject":"Hi","text":"Hello"`, `"subject":""`, 1)
	j, err := Decode([]byte(data), Limits{})
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !j.Templated() {
		t.Fatal("decoded job is not Templated")
	}
	if got := j.Template.Data["order"]; got != json.Number(big) {
		t.Fatalf("order = %#v, want json.Number %s: numbers keep their digits", got, big)
	}
	if got := j.Template.Data["total"]; got != json.Number("12.50") {
		t.Fatalf("total = %#v, want json.Number 12.50", got)
	}
	if v, ok := j.Template.Data["coupon"]; !ok || v != nil {
		t.Fatalf("coupon = %#v, %v, want a nil value", v, ok)
	}
	again, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	j2, err := Decode(again, Limits{})
	if err != nil {
		t.Fatalf("re-encoded template job rejected: %v\n%s", err, again)
	}
	if !sameJob(j, j2) || !bytes.Equal(j.Hash(), j2.Hash()) {
		t.Fatalf("round trip changed the job:\n first  %+v\n second %+v", j.Template, j2.Template)
	}
	if !bytes.Contains(again, []byte(big)) {
		t.Fatalf("re-encoded document lost the digits of %s: %s", big, again)
	}
}

func TestDecodeTemplateRejections(t *testing.T) {
	noBody := func(extra string) string {
		return strings.Replace(doc(extra), `"subject":"Hi","text":"Hello"`, `"subject":""`, 1)
	}
	deep := func(depth int) string {
		return `{"a":` + strings.Repeat(`{"a":`, depth-1) + `1` + strings.Repeat(`}`, depth)
	}
	tests := []struct {
		name   string
		data   string
		reason Reason // empty: valid
		field  string
	}{
		{name: "data at depth limit", data: noBody(`,"template":{"name":"w","data":` + deep(maxTemplateDataDepth) + `}`)},
		{name: "data too deep", data: noBody(`,"template":{"name":"w","data":` + deep(maxTemplateDataDepth+1) + `}`), reason: ReasonTooDeep, field: "template.data"},
		{name: "data deeper than the document limit", data: noBody(`,"template":{"name":"w","data":` + deep(defaultMaxDepth) + `}`), reason: ReasonTooDeep},
		{name: "no name", data: noBody(`,"template":{"version":"3"}`), reason: ReasonMissingField, field: "template.name"},
		{name: "no body, no template", data: noBody(``), reason: ReasonMissingBody},
		{name: "null data", data: noBody(`,"template":{"name":"w","data":null}`), reason: ReasonMalformedJSON, field: "template.data"},
		{name: "data not an object", data: noBody(`,"template":{"name":"w","data":[1]}`), reason: ReasonMalformedJSON, field: "template.data"},
		{name: "duplicate key in data", data: noBody(`,"template":{"name":"w","data":{"a":1,"b":{"c":1,"\u0063":2}}}`), reason: ReasonMalformedJSON, field: "template.data.b.c"},
		{name: "null locale", data: noBody(`,"template":{"name":"w","locale":null}`), reason: ReasonMalformedJSON, field: "template.locale"},
		{name: "bad label", data: noBody(`,"template":{"name":"w","version":"latest"}`), reason: ReasonInvalidField, field: "template.version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.data), Limits{})
			checkReason(t, err, tt.reason, tt.field)
		})
	}
}

func TestHashTemplate(t *testing.T) {
	base := templateJob()
	tests := []struct {
		name   string
		mutate func(*Job)
		same   bool
	}{
		{"identical", func(*Job) {}, true},
		{"float and json.Number of the same value", func(j *Job) {
			j.Template.Data = map[string]any{"order": 4711, "items": []any{map[string]any{"sku": "a"}}}
		}, true},
		{"empty versus nil data", func(j *Job) { base2 := *j.Template; base2.Data = map[string]any{}; j.Template = &base2 }, false},
		{"data value", func(j *Job) {
			j.Template.Data = map[string]any{"order": json.Number("4712"), "items": []any{map[string]any{"sku": "a"}}}
		}, false},
		{"nested data value", func(j *Job) {
			j.Template.Data = map[string]any{"order": json.Number("4711"), "items": []any{map[string]any{"sku": "b"}}}
		}, false},
		{"locale", func(j *Job) { j.Template.Locale = "fr-FR" }, false},
		{"version", func(j *Job) { j.Template.Version = "canary" }, false},
		{"name", func(j *Job) { j.Template.Name = "other" }, false},
	}
	for _, tt := range tests {
		j := templateJob()
		tt.mutate(&j)
		if same := bytes.Equal(j.Hash(), base.Hash()); same != tt.same {
			t.Errorf("%s: same hash = %v, want %v", tt.name, same, tt.same)
		}
	}
	// Key order of a decoded document does not matter.
	a := noBodyDoc(`,"template":{"name":"w","data":{"x":1,"y":{"p":1,"q":2}}}`)
	b := noBodyDoc(`,"template":{"data":{"y":{"q":2,"p":1},"x":1},"name":"w"}`)
	ja, errA := Decode([]byte(a), Limits{})
	jb, errB := Decode([]byte(b), Limits{})
	if errA != nil || errB != nil {
		t.Fatalf("Decode: %v, %v", errA, errB)
	}
	if !bytes.Equal(ja.Hash(), jb.Hash()) {
		t.Error("template data in another key order hashes differently")
	}
}

// noBodyDoc is doc(extra) without a text body and with an empty subject.
func noBodyDoc(extra string) string {
	return strings.Replace(doc(extra), `"subject":"Hi","text":"Hello"`, `"subject":""`, 1)
}

// TestSchemaAgreesWithDecodeTemplates checks template jobs against the
// compiled schema as TestSchemaAgreesWithDecode checks other documents.
func TestSchemaAgreesWithDecodeTemplates(t *testing.T) {
	sch := compileSchema(t)
	full := templateJob()
	full.Template.Version = "7"
	fullDoc, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		data  string
		valid bool
	}{
		{"template job, as Publisher writes it", string(fullDoc), true},
		{"template job, name only", noBodyDoc(`,"template":{"name":"w"}`), true},
		{"template job, label", noBodyDoc(`,"template":{"name":"w","version":"canary"}`), true},
		{"template job, empty version", noBodyDoc(`,"template":{"name":"w","version":""}`), true},
		{"template job, null in data", noBodyDoc(`,"template":{"name":"w","data":{"a":null,"b":[null]}}`), true},
		{"template job, empty text and html", noBodyDoc(`,"text":"","html":"","template":{"name":"w"}`), true},
		{"template job, subject given", strings.Replace(noBodyDoc(`,"template":{"name":"w"}`), `"subject":""`, `"subject":"Hi"`, 1), true},
		{"body job, free-form template", doc(`,"template":{"name":"Order Confirmation","version":"v2.1"}`), true},
		{"body job, html only, free-form template", strings.Replace(doc(`,"html":"<p>x</p>","template":{"name":"Order Confirmation"}`), `"text":"Hello"`, `"text":""`, 1), true},
		{"body job, locale and data", doc(`,"template":{"name":"w","locale":"pt-BR","data":{"k":1}}`), true},

		{"no body, no template", noBodyDoc(``), false},
		{"empty bodies, no template", noBodyDoc(`,"text":"","html":""`), false},
		{"template job without name", noBodyDoc(`,"template":{"version":"3"}`), false},
		{"template job, empty name", noBodyDoc(`,"template":{"name":""}`), false},
		{"template job, bad name", noBodyDoc(`,"template":{"name":"Order Confirmation"}`), false},
		{"template job, name too long", noBodyDoc(`,"template":{"name":"` + strings.Repeat("a", 65) + `"}`), false},
		{"template job, bad version", noBodyDoc(`,"template":{"name":"w","version":"v2"}`), false},
		{"template job, version zero", noBodyDoc(`,"template":{"name":"w","version":"0"}`), false},
		{"template job, unknown label", noBodyDoc(`,"template":{"name":"w","version":"latest"}`), false},
		{"template job, bad locale", noBodyDoc(`,"template":{"name":"w","locale":"fr_CA"}`), false},
		{"body job, bad locale", doc(`,"template":{"name":"w","locale":"f"}`), false},
		{"template job, data not an object", noBodyDoc(`,"template":{"name":"w","data":"x"}`), false},
		{"template job, null data", noBodyDoc(`,"template":{"name":"w","data":null}`), false},
		{"template job, unknown template field", noBodyDoc(`,"template":{"name":"w","lang":"fr"}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			schemaErr := sch.Validate(inst)
			_, decodeErr := Decode([]byte(tt.data), Limits{})
			if (schemaErr == nil) != tt.valid || (decodeErr == nil) != tt.valid {
				t.Fatalf("want valid %v; schema says %v, Decode says %v", tt.valid, schemaErr, decodeErr)
			}
		})
	}
}

// FuzzTemplateData checks template jobs whose data is arbitrary bytes: an
// accepted job is a template job whose data's shape is within bounds by an
// independent count, that re-validates, and that re-encodes to a document
// decoding to the same job with the same hash.
func FuzzTemplateData(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"order":4711,"items":[{"sku":"a","qty":2}],"coupon":null}`,
		`{"n":1e400,"s":"\u00e9\"}{[","t":true}`,
		`{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":1}}}}}}}}}}}}}}}}`,
		`{"a":1,"a":2}`,
		`[1]`,
		`null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc := []byte(noBodyDoc(`,"template":{"name":"w","data":` + string(data) + `}`))
		j, err := Decode(doc, Limits{})
		if err != nil {
			return
		}
		if !j.Templated() {
			t.Fatal("accepted document without a body is not a template job")
		}
		if depth, keys := dataShape(j.Template.Data, 1); depth > maxTemplateDataDepth || keys > maxTemplateDataKeys {
			t.Fatalf("accepted data nests %d deep with %d keys, limits %d and %d", depth, keys, maxTemplateDataDepth, maxTemplateDataKeys)
		}
		if err := j.Validate(Limits{}); err != nil {
			t.Fatalf("decoded template job does not validate: %v", err)
		}
		again, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		j2, err := Decode(again, Limits{})
		if err != nil {
			t.Fatalf("re-encoded template job rejected: %v\n%s", err, again)
		}
		if !sameJob(j, j2) || !bytes.Equal(j.Hash(), j2.Hash()) {
			t.Fatalf("re-encode changed the job:\n first  %+v\n second %+v", j.Template, j2.Template)
		}
	})
}

// dataShape walks decoded data and returns its depth (v at depth d) and
// its number of keys, independently of checkDataShape.
func dataShape(v any, d int) (depth, keys int) {
	depth = d - 1
	var children []any
	switch x := v.(type) {
	case map[string]any:
		depth, keys = d, len(x)
		for _, c := range x {
			children = append(children, c)
		}
	case []any:
		depth, children = d, x
	}
	for _, c := range children {
		cd, ck := dataShape(c, d+1)
		depth, keys = max(depth, cd), keys+ck
	}
	return depth, keys
}

// TestDecodeWideTemplateDataIsLinear bounds what a record of wide template
// data costs: unlike other fields it reaches the second pass whatever its
// shape, and Validate encodes it once more to measure it. Objects with keys
// are stopped by the scanner's key count before the second pass (about
// 3x); an array of one-digit numbers is the worst shape measured, about
// 58x, as encoding/json grows the []any a quarter at a time and boxes each
// json.Number.
func TestDecodeWideTemplateDataIsLinear(t *testing.T) {
	const size = 1 << 20
	const wideAllocFactor = 64
	repeat := func(prefix, item, suffix string) []byte {
		head := noBodyDoc(`,"template":{"name":"w","data":{"a":` + prefix)
		n := (size - len(head) - len(suffix) - 3) / (len(item) + 1)
		items := strings.TrimSuffix(strings.Repeat(item+",", n), ",")
		return []byte(noBodyDoc(`,"template":{"name":"w","data":{"a":` + prefix + items + suffix + `}}`))
	}
	keys := func() []byte {
		var b strings.Builder
		for i := 0; b.Len() < size-64; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + strconv.Itoa(i) + `":0`)
		}
		return []byte(noBodyDoc(`,"template":{"name":"w","data":{` + b.String() + `}}`))
	}
	for _, tt := range []struct {
		name   string
		data   []byte
		reason Reason
	}{
		{"numbers", repeat(`[`, `1`, `]`), ReasonOversizeBody},
		{"nulls", repeat(`[`, `null`, `]`), ReasonOversizeBody},
		{"short strings", repeat(`[`, `""`, `]`), ReasonOversizeBody},
		{"empty objects", repeat(`[`, `{}`, `]`), ReasonOversizeBody},
		{"empty arrays", repeat(`[`, `[]`, `]`), ReasonOversizeBody},
		{"many keys", keys(), ReasonOversizeField},
		{"objects with one key", repeat(`[`, `{"":1}`, `]`), ReasonOversizeField},
		{"nested arrays", repeat(`[`, `[[1]]`, `]`), ReasonOversizeBody},
		{"objects of empty arrays", repeat(`[`, `{"":[]}`, `]`), ReasonOversizeField},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			alloc := allocatedBy(func() { _, err = Decode(tt.data, Limits{}) })
			checkReason(t, err, tt.reason, "template.data")
			if limit := wideAllocFactor * uint64(len(tt.data)); alloc > limit {
				t.Fatalf("Decode of %d bytes allocated %d bytes, limit %d (%dx input)", len(tt.data), alloc, limit, wideAllocFactor)
			}
			t.Logf("%d bytes in, %d bytes allocated (%.1fx)", len(tt.data), alloc, float64(alloc)/float64(len(tt.data)))
		})
	}
}
