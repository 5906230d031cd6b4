package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// Allocation bound of one Decode in FuzzDecode: fuzzAllocBase bytes for
// the fixed costs (decoders, the error, the fuzzing engine's own
// allocations while the input runs) plus fuzzAllocPerByte for each input
// byte. TestDecodeWideDocumentsAreLinear measures the worst known shapes at
// about 25 bytes per byte.
const (
	fuzzAllocBase    = 1 << 20
	fuzzAllocPerByte = 64
)

// maxFieldLength bounds ValidationError.Field: paths are rendered from
// shortened keys and a bounded depth, so a hostile key cannot make a dead
// letter's reason header large.
const maxFieldLength = 4 << 10

// FuzzDecode checks, for any record value, that Decode costs a bounded
// multiple of the input, that a rejection is a *ValidationError with a
// known reason and a small field, and that an accepted job re-encodes to a
// document that decodes to the same job and still validates.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		validDoc,
		doc(`,"headers":{"X-A":"1"},"attachments":[{"filename":"a","content":"aGk="}]`),
		doc(`,"cc":["b@example.test"],"bcc":["c@example.test"],"reply_to":["r@example.com"],"html":"<p>x</p>","headers":{"X-A":"1"},"attachments":[{"filename":"a.txt","content_type":"text/plain","content":"aGk="},{"filename":"e","content":null}],"priority":"urgent","tenant":"acme","template":{"name":"w","version":"2"},"not_after":"2030-01-01T00:00:00+02:00","metadata":{"k":"v"}`),
		strings.Replace(validDoc, `"a.1@postline.test"`, `"<a.1@postline.test>"`, 1),
		strings.Replace(validDoc, `"a.1@postline.test"`, `"<>"`, 1),
		strings.Replace(validDoc, `"a.1@postline.test"`, `"<a@b"`, 1),
		`{"version":2}`,
		`{"version":1,"metadata":` + strings.Repeat(`{"a":`, 40) + `""` + strings.Repeat(`}`, 40) + `}`,
		`{"version":1,"to":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
		doc(`,"cc":[` + strings.Repeat(`1,`, 100) + `1]`),
		doc(`,"headers":{"X-A":"1","X-A":"2"}`),
		doc(`,"Tenant":"x"`),
		doc(`,"unsubscribe":true,"priority":"bulk"`),
		doc(`,"unsubscribe":fals`),
		doc(`,"subject":"\u0000"`),
		`{"version":1e0}`,
		`{"\u0076ersion":1,"message_id":"a@b","from":"a@b.c","to":["d@e.f"],"subject":"\ud800\u00e9\n","text":"x\/"}`,
		doc(`,"attachments":[{"filename":"a","content":[1,2,255]}]`),
		doc(`,"attachments":[{"filename":"a","content":[256]}]`),
		doc(`,"attachments":[{"filename":"a","content":"aGk\u003d"}]`),
		doc(`,"not_after":"2030-01-01T00:00:00\u005a"`),
		doc(`,"metadata":{"a\u0000":"1","a\u0000":"2"}`),
		"{\"version\":1,\"subject\":\"\xff\xfe\"}",
		`{"version":-0.0E+1,"x":[1,-1.5e-3,true,false,null,{}]}`,
		`{"version":01}`,
		`{"version":1.}`,
		`{"version":tru}`,
		`{"version":1 "x":2}`,
		"{\"version\":\"\x01\"}",
		`[]`,
		``,
		noBodyDoc(`,"template":{"name":"order-confirmation","version":"canary","locale":"fr-CA","data":{"n":12345678901234567890123,"f":-1.5e-3,"z":null,"a":[{"b":{}},[],true]}}`),
		noBodyDoc(`,"template":{"name":"w","data":{}}`),
		noBodyDoc(`,"template":{"name":"w","version":"0"}`),
		noBodyDoc(`,"template":{"name":"w","data":{"a":1,"\u0061":2}}`),
	} {
		f.Add([]byte(seed))
	}
	known := make(map[Reason]bool)
	for _, r := range reasons() {
		known[r] = true
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScannerAgrees(t, data)
		if len(data) <= 8<<10 {
			checkDecodeMatchesReference(t, data)
		}
		var (
			j   Job
			err error
		)
		alloc := allocatedDuring(func() { j, err = Decode(data, Limits{}) })
		if limit := uint64(fuzzAllocBase + fuzzAllocPerByte*len(data)); alloc > limit {
			t.Fatalf("Decode of %d bytes allocated %d bytes, limit %d", len(data), alloc, limit)
		}
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || err != error(ve) {
				t.Fatalf("error %v is %T, want *ValidationError", err, err)
			}
			if !known[ve.Reason] {
				t.Fatalf("error %v has reason %q, not one of reasons()", err, ve.Reason)
			}
			if len(ve.Field) > maxFieldLength {
				t.Fatalf("error field is %d bytes, limit %d", len(ve.Field), maxFieldLength)
			}
			return
		}
		checkHashMatchesReference(t, j)
		if j.MessageID != trimAngle(j.MessageID) {
			t.Fatalf("accepted job keeps angle brackets in message ID %q", j.MessageID)
		}
		again, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		j2, err := Decode(again, Limits{})
		if err != nil {
			t.Fatalf("re-encoded document rejected: %v\n%s", err, again)
		}
		if err := j2.Validate(Limits{}); err != nil {
			t.Fatalf("re-decoded job does not validate: %v", err)
		}
		if !sameJob(j, j2) {
			t.Fatalf("re-encode changed the job:\n first  %+v\n second %+v", j, j2)
		}
		if !bytes.Equal(j.Hash(), j2.Hash()) {
			t.Fatal("hash changed across a re-encode")
		}
	})
}

// checkScannerAgrees checks the scanner against encoding/json, which stays
// the authority: the scanner accepts exactly the syntax json.Valid accepts
// (for an object), and, for a document without structural problems, it
// reports a value of the wrong type exactly when encoding/json fails to
// decode the document into a Job (the version aside, which checkVersion
// reads first). The second pass relies on the first
// half, the early missing_field on the second.
func checkScannerAgrees(t *testing.T, data []byte) {
	t.Helper()
	if len(data) > 8<<10 {
		return // json.Valid stops at depth 10000; keep well within it
	}
	s := scanner{data: data, maxDepth: math.MaxInt}
	err := s.document()
	valid := json.Valid(data)
	isObject := bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{"))
	switch {
	case err == nil && !valid:
		t.Fatalf("scanner accepts what json.Valid rejects: %q", data)
	case err != nil && valid && isObject:
		t.Fatalf("scanner rejects a valid JSON object: %v: %q", err, data)
	case err != nil || s.problem != nil || checkVersion(s.version, s.hasVersion) != nil:
		return // Decode stops before the type check matters
	}
	var j Job
	jsonErr := unmarshalJob(data, &j)
	if s.typeProblem == nil && jsonErr != nil {
		t.Fatalf("scanner found no type problem, encoding/json says %v: %q", jsonErr, data)
	}
	if s.typeProblem != nil && jsonErr == nil {
		t.Fatalf("scanner says %v, encoding/json decodes the document: %q", s.typeProblem, data)
	}
}

// allocatedDuring returns the bytes the heap allocated while f ran. Unlike
// allocatedBy it does not collect garbage first, which would dominate a
// fuzzing run; TotalAlloc counts allocations, not live memory.
func allocatedDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// sameJob reports whether a and b are the same job once encoding/json's
// unobservable differences are set aside: an empty list or map and a
// missing one (omitempty writes neither), and a deadline's *time.Location
// (compared by instant and offset).
func sameJob(a, b Job) bool {
	canon := func(j Job) Job {
		for _, l := range []*[]string{&j.To, &j.Cc, &j.Bcc, &j.ReplyTo} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		if len(j.Headers) == 0 {
			j.Headers = nil
		}
		if len(j.Metadata) == 0 {
			j.Metadata = nil
		}
		if len(j.Attachments) == 0 {
			j.Attachments = nil
		}
		j.NotAfter = nil
		if j.Template != nil && len(j.Template.Data) == 0 {
			t := *j.Template
			t.Data = nil
			j.Template = &t
		}
		return j
	}
	if (a.NotAfter == nil) != (b.NotAfter == nil) {
		return false
	}
	if a.NotAfter != nil {
		_, ao := a.NotAfter.Zone()
		_, bo := b.NotAfter.Zone()
		if !a.NotAfter.Equal(*b.NotAfter) || ao != bo {
			return false
		}
	}
	return reflect.DeepEqual(canon(a), canon(b))
}
