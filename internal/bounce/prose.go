package bounce

import (
	"regexp"
	"strings"
	"time"

	"github.com/postline/postline/internal/report"
)

var (
	// copyMarkerRE finds the line where a prose bounce starts quoting the
	// original: qmail's "--- Below this line is a copy of the message.",
	// Exim's "------ This is a copy of the message, including all the
	// headers. ------", Gmail's "----- Original message -----",
	// Exchange's "Original message headers:".
	copyMarkerRE = regexp.MustCompile(`(?mi)^[ \t]*(?:-{2,}[^\n]*(?:copy of the message|original message|returned message|message headers|original headers|header of the original)[^\n]*|original message headers:[ \t]*|-{2,}[ \t]*original message[ \t]*-{2,}[^\n]*)\r?$`)
	// openerRE matches the prose of the common bounce generators.
	openerRE = regexp.MustCompile(`(?i)this is the qmail-send program|created automatically by mail delivery software|delivery to the following recipients? (?:failed|has been delayed)|could not be delivered to one or more|has not yet been delivered to one or more|i'm sorry to have to inform you|the original message was received at|delivery has failed to these recipients|your message (?:could not|was not|wasn't|cannot) (?:be )?delivered|message you sent (?:could not|has not yet) been delivered|the following address\(es\) failed|permanent fatal errors`)
	// subjectRE matches the subjects of bounces.
	subjectRE = regexp.MustCompile(`(?i)undeliver|delivery status notification|delivery (?:failure|failed|has failed|problem|notification|report)|mail delivery failed|mail failure|failure notice|returned mail|non[- ]?delivery|could not be delivered|mail system error|warning: message .* delayed|delayed mail`)
	// daemonRE matches the From of bounces (address or display name).
	daemonRE = regexp.MustCompile(`(?i)\b(?:mailer[-_]?daemon|mail-daemon|postmaster|mdaemon|mail delivery (?:system|subsystem))\b`)
	// triggerRE is a line after which a bounce lists its failed addresses.
	triggerRE = regexp.MustCompile(`(?i)following (?:address|recipient)|address\(es\) failed|failed to these recipients|could not be delivered to|permanent fatal errors|undeliverable to|delivery to the following`)
	// qmailRE is a qmail recipient line ("<user@example.com>:").
	qmailRE = regexp.MustCompile(`(?m)^<([^<>\s]+@[^<>\s]+)>:[ \t]*\r?$`)
	// addrRE is an address as bounces print them.
	addrRE = regexp.MustCompile(`[A-Za-z0-9.!#$%&'*+/=?^_{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+`)
	// lineAddrRE is a line that starts with an address.
	lineAddrRE = regexp.MustCompile(`^[ \t]*<?(` + addrRE.String() + `)`)
	delayedRE  = regexp.MustCompile(`(?i)\bdelayed\b|\(delay\)|has not yet been delivered|not been delivered yet|will (?:continue|keep) (?:to )?(?:try|retry)|attempts will continue|still (?:be )?trying|will be retried`)
	// permanentRE says a bounce is final even if it mentions a delay.
	permanentRE = regexp.MustCompile(`(?i)permanent(?:ly)?\b|given up|giving up|will not be retried|no further attempts|could not be delivered|failed permanently`)
)

// parseProse reads a bounce that has no machine-readable part, from its
// header and its text. It returns TypeNotReport when neither looks like a
// bounce, and the copy of the original the text quotes (nil if none).
func parseProse(head fields, text []byte, date time.Time) (Result, []byte) {
	body := string(text)
	explanation, copied := body, ""
	if loc := copyMarkerRE.FindStringIndex(body); loc != nil {
		explanation, copied = body[:loc[0]], body[loc[1]:]
	}
	failed := head.all("x-failed-recipients")
	subject := head.get("subject")
	daemon := daemonRE.MatchString(head.get("from"))
	isBounce := len(failed) > 0 || openerRE.MatchString(explanation) ||
		daemon && (subjectRE.MatchString(subject) || findStatus(explanation) != "")
	if !isBounce {
		return Result{Type: TypeNotReport}, nil
	}

	kind := report.Bounced
	if (delayedRE.MatchString(subject) || delayedRE.MatchString(explanation)) &&
		!permanentRE.MatchString(subject) && !permanentRE.MatchString(explanation) {
		kind = report.Delayed
	}
	res := Result{Type: TypeUnstructured}
	general := diagnosticLine(explanation)
	add := func(rcpt, detail string) {
		if len(res.Reports) == MaxRecipients {
			return
		}
		diag := diagnosticLine(detail)
		if diag == "" {
			diag = general
		}
		res.Reports = append(res.Reports, proseReport(kind, rcpt, diag, date))
	}

	if blocks := qmailRE.FindAllStringSubmatchIndex(explanation, MaxRecipients); len(blocks) > 0 {
		for i, m := range blocks {
			end := len(explanation)
			if i+1 < len(blocks) {
				end = blocks[i+1][0]
			}
			detail := explanation[m[1]:end]
			if j := strings.Index(detail, "\n\n"); j >= 0 {
				detail = detail[:j]
			}
			add(explanation[m[2]:m[3]], OneLine(detail, report.MaxDiagnosticBytes))
		}
	} else if listed := listedRecipients(explanation); len(listed) > 0 {
		for _, l := range listed {
			add(l.address, l.detail)
		}
	} else {
		for _, v := range failed {
			for _, a := range strings.Split(v, ",") {
				if a = cleanAddress(a); a != "" {
					add(a, "")
				}
			}
		}
	}
	if len(res.Reports) == 0 {
		add("", "")
	}
	if copied == "" {
		return res, nil
	}
	return res, []byte(copied)
}

// proseReport builds one report from a recipient and its diagnostic line.
func proseReport(kind report.Kind, rcpt, diag string, date time.Time) report.Report {
	return report.Report{
		Kind:       kind,
		Source:     report.SourceUnstructured,
		Recipient:  cleanAddress(rcpt),
		Status:     findStatus(diag),
		Code:       findCode(diag),
		Diagnostic: diag,
		At:         date,
	}
}

// diagnosticLine returns the first line of s that carries an SMTP reply
// code or an enhanced status, cleaned; "" if none does.
func diagnosticLine(s string) string {
	var out string
	lines([]byte(s), func(line []byte) bool {
		l := string(line)
		if findCode(l) != 0 || findStatus(l) != "" {
			out = OneLine(l, report.MaxDiagnosticBytes)
			return false
		}
		return true
	})
	return out
}

type listed struct{ address, detail string }

// listedRecipients reads the addresses a bounce lists after a line such as
// "The following address(es) failed:", each with the indented detail lines
// under it (Exim prints the remote server's reply there).
func listedRecipients(explanation string) []listed {
	for _, loc := range triggerRE.FindAllStringIndex(explanation, 8) {
		if out := listedAfter(explanation[loc[1]:]); len(out) > 0 {
			return out
		}
	}
	return nil
}

// listedAfter reads the addresses listed after the end of a trigger.
func listedAfter(rest string) []listed {
	var out []listed
	// An address on the trigger line itself ("could not be delivered to
	// a@b.example") counts.
	first, after, _ := strings.Cut(rest, "\n")
	if a := addrRE.FindString(first); a != "" {
		out = append(out, listed{address: a})
	}
	indent := -1
	started := false
	var detail strings.Builder
	flush := func() {
		if len(out) > 0 && detail.Len() > 0 {
			out[len(out)-1].detail = detail.String()
		}
		detail.Reset()
	}
	lines([]byte(after), func(line []byte) bool {
		l := string(line)
		trimmed := strings.TrimLeft(l, " \t")
		if trimmed == "" {
			return true
		}
		depth := len(l) - len(trimmed)
		if m := lineAddrRE.FindStringSubmatch(l); m != nil && (indent < 0 || depth <= indent) {
			if len(out) >= MaxRecipients {
				return false
			}
			flush()
			indent, started = depth, true
			out = append(out, listed{address: m[1]})
			return true
		}
		if !started || depth <= indent && depth == 0 {
			return false
		}
		if detail.Len() < report.MaxDiagnosticBytes*4 {
			detail.WriteString(l)
			detail.WriteByte('\n')
		}
		return true
	})
	flush()
	return out
}
