package bounce

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/report"
)

func addFixtures(f *testing.F) {
	files, err := filepath.Glob("testdata/*.eml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no fixtures: %v", err)
	}
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
}

// FuzzParse checks that every result validates and that parsing takes
// time in proportion to the input (TestParseAllocs bounds its memory).
func FuzzParse(f *testing.F) {
	addFixtures(f)
	f.Add([]byte("Content-Type: multipart/report; boundary=x\r\n\r\n--x\r\nContent-Type: message/delivery-status\r\n\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n--x--\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		start := time.Now()
		res, err := Parse(raw)
		elapsed := time.Since(start)
		limit := 250*time.Millisecond + time.Duration(len(raw))*2*time.Microsecond
		// A slow run is timed twice more, and the fastest counts: a
		// pause of the fuzzing worker is no cost of the input.
		for i := 0; i < 2 && elapsed > limit; i++ {
			start = time.Now()
			_, _ = Parse(raw)
			elapsed = min(elapsed, time.Since(start))
		}
		if err != nil {
			if errors.Is(err, ErrTooLarge) != (len(raw) > MaxReportBytes) {
				t.Fatalf("error %v for %d bytes", err, len(raw))
			}
			return
		}
		if err := checkResult(res); err != nil {
			t.Fatal(err)
		}
		if elapsed > limit {
			t.Errorf("parsing %d bytes took %v, over %v", len(raw), elapsed, limit)
		}
	})
}

// filter keeps the bytes of s that are in allowed, at most n of them.
func filter(s, allowed string, n int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < n; i++ {
		if strings.IndexByte(allowed, s[i]) >= 0 {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

const (
	localChars = "abcdefghijklmnopqrstuvwxyz0123456789.+-_"
	hostChars  = "abcdefghijklmnopqrstuvwxyz0123456789-"
)

// FuzzBuildDSN checks that Parse(BuildDSN(d)) gives d's recipients back.
func FuzzBuildDSN(f *testing.F) {
	f.Add(uint8(1), "nobody", uint16(101), uint16(550), "5.1.1 user unknown", "mx1", int64(1741083302), "welcome.42", "tok")
	f.Add(uint8(2), "slow", uint16(471), uint16(0), "greylisted", "", int64(0), "", "")
	f.Add(uint8(0), "ok", uint16(0), uint16(250), "250-2.0.0 ok 250 2.0.0 ok", "relay", int64(99), "x", "y")
	f.Fuzz(func(t *testing.T, sel uint8, local string, sub uint16, code uint16, diag, mta string, unix int64, msgid, token string) {
		kinds := []report.Kind{report.Delivered, report.Bounced, report.Delayed}
		classes := []int{2, 5, 4}
		k := int(sel) % 3
		local = filter(strings.ToLower(local), localChars, 40)
		if local == "" {
			local = "r"
		}
		diag = OneLine(diag, 300)
		if code >= 200 && code < 600 && leadingCode(diag) == 0 {
			diag = OneLine(fmt.Sprintf("%d %s", code, diag), 300)
		}
		diag = unrepeat(diag)
		if unix < 0 {
			unix = -unix
		}
		at := time.Unix(unix%(1<<33), 0).UTC()
		want := report.Report{
			Kind: kinds[k], Source: report.SourceDSN, MessageID: "m" + filter(msgid, localChars, 40) + "@app.example",
			Recipient: local + "@recipient.example", Status: fmt.Sprintf("%d.%d.%d", classes[k], sub/100%10, sub%100),
			Code: diagCode(diag), Diagnostic: diag, RemoteMTA: filter(strings.ToLower(mta), hostChars, 60), At: at,
		}
		d := DSN{Date: at.Add(time.Hour), ReturnPath: "bounce+" + filter(token, localChars, 60) + "@bounces.example",
			MessageID: want.MessageID, EnvelopeID: "env-" + filter(token, hostChars, 20), Recipients: []report.Report{want}}
		raw, err := BuildDSN(d)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkResult(res); err != nil {
			t.Fatal(err)
		}
		if want.RemoteMTA == "" {
			want.RemoteMTA = DefaultReportingMTA
		}
		if res.Type != TypeDSN || res.ReturnPath != d.ReturnPath || res.EnvelopeID != d.EnvelopeID || len(res.Reports) != 1 {
			t.Fatalf("result %+v of\n%s", res, raw)
		}
		if got := res.Reports[0]; got != want {
			t.Fatalf("round trip:\n got %+v\nwant %+v\nof\n%s", got, want, raw)
		}
	})
}

// FuzzBuildARF checks that Parse(BuildARF(a)) gives the complaint back.
func FuzzBuildARF(f *testing.F) {
	f.Add("abuse", "reader", int64(1741623600), "sale.5", "tok")
	f.Add("", "", int64(0), "", "")
	f.Fuzz(func(t *testing.T, ftype, local string, unix int64, msgid, token string) {
		ftype = filter(strings.ToLower(ftype), "abcdefghijklmnopqrstuvwxyz-", 30)
		if unix < 0 {
			unix = -unix
		}
		a := ARF{To: "fbl@bounces.example", Date: time.Unix(unix%(1<<33), 0).UTC(), FeedbackType: ftype,
			ReturnPath: "bounce+" + filter(token, localChars, 60) + "@bounces.example",
			MessageID:  "m" + filter(msgid, localChars, 40) + "@app.example", OriginalTo: "to@recipient.example",
			OriginalMailFrom: "bounce+other@bounces.example", EnvelopeID: "env-" + filter(token, hostChars, 20)}
		want := report.Report{Kind: report.Complained, Source: report.SourceARF, MessageID: a.MessageID,
			Recipient: a.OriginalTo, FeedbackType: cmpOr(ftype, "abuse"), RemoteMTA: DefaultReportingMTA, At: a.Date}
		if local = filter(strings.ToLower(local), localChars, 40); local != "" {
			a.Recipients = []string{local + "@recipient.example"}
			want.Recipient = a.Recipients[0]
		}
		raw, err := BuildARF(a)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkResult(res); err != nil {
			t.Fatal(err)
		}
		if res.Type != TypeARF || res.ReturnPath != a.ReturnPath || res.OriginalTo != a.OriginalTo || res.EnvelopeID != a.EnvelopeID || len(res.Reports) != 1 {
			t.Fatalf("result %+v of\n%s", res, raw)
		}
		if got := res.Reports[0]; got != want {
			t.Fatalf("round trip:\n got %+v\nwant %+v\nof\n%s", got, want, raw)
		}
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestParseAllocs bounds the memory Parse allocates per input byte, on
// fixtures grown towards MaxReportBytes (a long returned body, many
// recipient groups, many parts).
func TestParseAllocs(t *testing.T) {
	raw, err := os.ReadFile("testdata/gmail.eml")
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("Thank you for your order, a line of the body.\n"), (MaxReportBytes-len(raw))/48)
	long := bytes.Replace(raw, []byte("Thank you for your order."), body, 1)
	parts := []byte("Content-Type: multipart/mixed; boundary=b\r\n\r\n" + strings.Repeat("--b\r\nContent-Type: text/plain\r\n\r\n550 5.1.1 x\r\n", 2*MaxParts) + "--b--\r\n")
	for name, in := range map[string][]byte{"long original": long, "many parts": parts} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := Parse(in); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		runtime.ReadMemStats(&after)
		if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(8*len(in)+4<<20); alloc > limit {
			t.Errorf("%s: parsing %d bytes allocated %d, over %d", name, len(in), alloc, limit)
		}
	}
}
