package bounce

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/internal/report"
)

var (
	// statusRE finds an RFC 3463 enhanced status code not inside a longer
	// dotted number (an IP address).
	statusRE = regexp.MustCompile(`(?:^|[^0-9.])([245]\.[0-9]{1,3}\.[0-9]{1,3})(?:[^0-9.]|$)`)
	// codeRE finds an SMTP reply code: three digits on their own, followed
	// by a space, a hyphen or the end.
	codeRE = regexp.MustCompile(`(?:^|[^0-9.:#])([245][0-5][0-9])(?:[ -]|$)`)
	// leadingCodeRE is a reply code that starts a diagnostic.
	leadingCodeRE = regexp.MustCompile(`^([245][0-5][0-9])(?:[ -]|$)`)
)

// findStatus returns the first enhanced status code in s, "" if none.
func findStatus(s string) string {
	if m := statusRE.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

// findCode returns the first SMTP reply code in s, 0 if none.
func findCode(s string) int {
	if m := codeRE.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// leadingCode returns the reply code s starts with, 0 if none.
func leadingCode(s string) int {
	if m := leadingCodeRE.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// kindOfAction maps a DSN Action (RFC 3464 section 2.3.3) to a kind; an
// unknown action falls back to the status class.
func kindOfAction(action, status string) (report.Kind, bool) {
	action = strings.ToLower(strings.TrimSpace(action))
	if i := strings.IndexAny(action, " \t("); i >= 0 {
		action = action[:i]
	}
	switch action {
	case "failed":
		return report.Bounced, true
	case "delayed":
		return report.Delayed, true
	case "delivered", "relayed", "expanded":
		return report.Delivered, true
	}
	switch {
	case strings.HasPrefix(status, "5."):
		return report.Bounced, true
	case strings.HasPrefix(status, "4."):
		return report.Delayed, true
	case strings.HasPrefix(status, "2."):
		return report.Delivered, true
	}
	return "", false
}

// parseDSN reads the body of a message/delivery-status part: one group of
// per-message fields, then one group per recipient. date is the report's
// Date, the time of recipients that have no Last-Attempt-Date.
func parseDSN(body []byte, date time.Time) Result {
	groups := parseGroups(body, MaxRecipients+1)
	res := Result{Type: TypeDSN}
	var perMessage fields
	if len(groups) > 0 && groups[0].get("final-recipient") == "" && groups[0].get("original-recipient") == "" {
		perMessage, groups = groups[0], groups[1:]
	}
	res.EnvelopeID = OneLine(perMessage.get("original-envelope-id"), maxTokenBytes)
	if s := perMessage.get("x-postfix-sender"); s != "" {
		res.ReturnPath = cleanAddress(stripType(s))
	}
	reportingMTA := mtaName(perMessage.get("reporting-mta"))
	// Gmail names the original in the per-message group too.
	messageID := cleanMessageID(perMessage.get("x-original-message-id"))
	for _, g := range groups {
		if len(res.Reports) == MaxRecipients {
			break
		}
		r, ok := dsnRecipient(g, date)
		if !ok {
			continue
		}
		if r.RemoteMTA == "" {
			r.RemoteMTA = reportingMTA
		}
		r.MessageID = messageID
		res.Reports = append(res.Reports, r)
	}
	return res
}

// dsnRecipient reads one per-recipient group.
func dsnRecipient(g fields, date time.Time) (report.Report, bool) {
	recipient := cleanAddress(stripType(g.get("original-recipient")))
	if recipient == "" {
		recipient = cleanAddress(stripType(g.get("final-recipient")))
	}
	diag := unrepeat(OneLine(stripType(g.get("diagnostic-code")), maxFieldBytes))
	status := findStatus(" " + g.get("status"))
	if status == "" {
		status = findStatus(diag)
	}
	kind, ok := kindOfAction(g.get("action"), status)
	if !ok || recipient == "" && g.get("action") == "" {
		return report.Report{}, false
	}
	at := parseDate(g.get("last-attempt-date"))
	if at.IsZero() {
		at = date
	}
	code := diagCode(diag)
	return report.Report{
		Kind:       kind,
		Source:     report.SourceDSN,
		Recipient:  recipient,
		Status:     status,
		Code:       code,
		Diagnostic: diag,
		RemoteMTA:  mtaName(g.get("remote-mta")),
		At:         at,
	}, true
}

// mtaName returns the host of a Remote-MTA or Reporting-MTA field: its
// type, any comment after it and a trailing dot dropped.
func mtaName(v string) string {
	v = stripType(v)
	if i := strings.IndexAny(v, " \t("); i >= 0 {
		v = v[:i]
	}
	return OneLine(strings.TrimSuffix(v, "."), maxTokenBytes)
}

// unrepeat drops the reply code and status that a multi-line SMTP reply
// repeats on each of its lines ("550-5.1.1 a 550-5.1.1 b 550 5.1.1 c"
// becomes "550-5.1.1 a b c"), and cuts the result to
// report.MaxDiagnosticBytes.
func unrepeat(diag string) string {
	if code := leadingCode(diag); code != 0 && len(diag) > 4 {
		prefix := diag[:4]
		status := findStatus(diag[4:])
		rest := diag[4:]
		if status != "" && strings.HasPrefix(rest, status+" ") {
			prefix += status + " "
			rest = rest[len(status)+1:]
			c := strconv.Itoa(code)
			for _, p := range []string{" " + c + "-" + status + " ", " " + c + " " + status + " "} {
				rest = strings.ReplaceAll(rest, p, " ")
			}
		}
		diag = prefix + rest
	}
	return OneLine(diag, report.MaxDiagnosticBytes)
}

// diagCode returns the reply code a diagnostic starts with, else the first
// one in it, 0 if none.
func diagCode(diag string) int {
	if code := leadingCode(diag); code != 0 {
		return code
	}
	return findCode(diag)
}
