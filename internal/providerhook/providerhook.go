package providerhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/postline/postline/internal/report"
)

// DefaultMaxBodyBytes is the default cap on a request body. Both providers
// post one notification or event per request, well under it.
const DefaultMaxBodyBytes = 256 << 10

// Reports takes the reports of a request whose signature verified. An error
// makes the handler answer 503, so the provider posts the request again.
type Reports interface {
	ApplySigned(ctx context.Context, reports []report.Report) error
}

// TokenFunc returns the token of an envelope sender address
// (bounce+<token>@<bounce domain>), and false when the address is not one
// of Postline's return paths.
type TokenFunc func(address string) (string, bool)

// Values of the requests_total result label.
const (
	resultOK           = "ok"            // reports applied, or a subscription confirmed
	resultIgnored      = "ignored"       // verified, but nothing to apply (an event kind we do not use)
	resultBadRequest   = "bad_request"   // not a POST, too large, not the provider's JSON
	resultBadSignature = "bad_signature" // the signature did not verify
	resultExpired      = "expired"       // Mailgun: the signed timestamp is outside the window
	resultReplayed     = "replayed"      // Mailgun: the signed token was already seen
	resultForbidden    = "forbidden"     // SNS: a topic outside the allow-list
	resultCertError    = "cert_error"    // SNS: the signing certificate could not be fetched
	resultConfirmError = "confirm_error" // SNS: following SubscribeURL failed
	resultApplyError   = "apply_error"   // Reports.ApplySigned failed
)

var results = []string{
	resultOK, resultIgnored, resultBadRequest, resultBadSignature, resultExpired,
	resultReplayed, resultForbidden, resultCertError, resultConfirmError, resultApplyError,
}

var kinds = []report.Kind{report.Delivered, report.Bounced, report.Delayed, report.Complained}

// errTooLarge marks a body over the cap.
var errTooLarge = errors.New("request body too large")

// readBody reads r's body, at most max bytes.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("%w: over %d bytes", errTooLarge, max)
		}
		return nil, fmt.Errorf("read request body: %w", err)
	}
	return body, nil
}

// servePost is every provider's ServeHTTP: it refuses anything but a POST
// whose body fits in max, hands the body to handle, counts handle's result
// and answers with its status (an empty 200, or the status text).
func servePost(w http.ResponseWriter, r *http.Request, max int64, m *metrics, handle func(*http.Request, []byte) (int, string)) {
	code, result := http.StatusMethodNotAllowed, resultBadRequest
	if r.Method == http.MethodPost {
		body, err := readBody(w, r, max)
		switch {
		case errors.Is(err, errTooLarge):
			code = http.StatusRequestEntityTooLarge
		case err != nil:
			code = http.StatusBadRequest
		default:
			code, result = handle(r, body)
		}
	}
	m.request(result)
	if code == http.StatusOK {
		w.WriteHeader(code)
		return
	}
	status(w, code)
}

// status writes code with its standard text as the body.
func status(w http.ResponseWriter, code int) {
	http.Error(w, http.StatusText(code), code)
}

// oneLine returns s on one line and at most report.MaxDiagnosticBytes long:
// every run of white space and control characters becomes one space, invalid
// UTF-8 becomes U+FFFD, and the text is cut at a character boundary.
func oneLine(s string) string {
	var b strings.Builder
	pending := false
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			pending = true
			continue
		}
		n := utf8.RuneLen(r)
		if n < 0 {
			r, n = utf8.RuneError, utf8.RuneLen(utf8.RuneError)
		}
		extra := 0
		if pending && b.Len() > 0 {
			extra = 1
		}
		if b.Len()+extra+n > report.MaxDiagnosticBytes {
			break
		}
		if extra == 1 {
			b.WriteByte(' ')
		}
		pending = false
		b.WriteRune(r)
	}
	return b.String()
}

// enhancedStatus matches an RFC 3463 enhanced status code.
var enhancedStatus = regexp.MustCompile(`^[245]\.[0-9]{1,3}\.[0-9]{1,3}$`)

// validStatus returns s when it is an enhanced status code, else "".
func validStatus(s string) string {
	s = strings.TrimSpace(s)
	if enhancedStatus.MatchString(s) {
		return s
	}
	return ""
}

// validCode returns c when it is an SMTP reply code, else 0. Mailgun uses
// codes of its own (605: not delivering to a previously bounced address)
// that are not replies of any server.
func validCode(c int) int {
	if c >= 200 && c <= 599 {
		return c
	}
	return 0
}

// smtpReply splits a diagnostic such as "smtp; 550 5.1.1 <a@b>... User" or
// "250 2.6.0 Message received": it drops the "smtp;" diagnostic type and
// returns the reply code and enhanced status it starts with (0 and "" when
// absent) and the text on one line.
func smtpReply(diag string) (code int, enhanced, text string) {
	d := strings.TrimSpace(diag)
	if len(d) >= 5 && strings.EqualFold(d[:5], "smtp;") {
		d = strings.TrimSpace(d[5:])
	}
	text = oneLine(d)
	if len(d) >= 3 && (len(d) == 3 || d[3] == ' ' || d[3] == '-') {
		if c, err := strconv.Atoi(d[:3]); err == nil {
			code = validCode(c)
		}
	}
	if code != 0 && len(d) > 4 {
		first, _, _ := strings.Cut(strings.TrimSpace(d[4:]), " ")
		enhanced = validStatus(first)
	}
	return code, enhanced, text
}

// envelopeToken applies token to the address in sender ("a@b" or
// "Name <a@b>"), "" when there is no sender, no TokenFunc or no token.
func envelopeToken(token TokenFunc, sender string) string {
	sender = strings.TrimSpace(sender)
	if token == nil || sender == "" {
		return ""
	}
	addr := sender
	if a, err := mail.ParseAddress(sender); err == nil {
		addr = a.Address
	} else {
		addr = strings.TrimSuffix(strings.TrimPrefix(addr, "<"), ">")
	}
	if t, ok := token(addr); ok {
		return t
	}
	return ""
}

// messageID returns a Message-ID header value without angle brackets and
// surrounding white space; "" when it is empty or not on one line.
func messageID(v string) string {
	v = strings.TrimSpace(v)
	v = strings.TrimSuffix(strings.TrimPrefix(v, "<"), ">")
	v = strings.TrimSpace(v)
	if strings.ContainsFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return ""
	}
	return v
}

// address returns a recipient address trimmed, "" when it is not on one
// line.
func address(v string) string {
	v = strings.TrimSpace(v)
	if strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) }) {
		return ""
	}
	return v
}

// boolPtr returns a pointer to a copy of b.
func boolPtr(b bool) *bool { return &b }

// parseTime parses an RFC 3339 time, zero when absent or malformed.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}
