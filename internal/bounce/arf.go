package bounce

import (
	"strings"
	"time"

	"github.com/postline/postline/internal/report"
)

// parseARF reads the body of a message/feedback-report part (RFC 5965
// section 3.1): one group of fields. Each Original-Rcpt-To yields a
// complaint; a report without one yields a single complaint whose
// recipient is the returned original's To. date is the report's Date, when
// the complaint was made; Arrival-Date (when the original arrived) stands
// in only when the report has no Date.
func parseARF(body []byte, date time.Time) Result {
	var g fields
	for _, grp := range parseGroups(body, 4) {
		g = append(g, grp...)
	}
	res := Result{Type: TypeARF, EnvelopeID: OneLine(g.get("original-envelope-id"), maxTokenBytes)}
	if from := g.get("original-mail-from"); from != "" {
		res.ReturnPath = cleanAddress(from)
	}
	if date.IsZero() {
		date = parseDate(g.get("arrival-date"))
	}
	if date.IsZero() {
		date = parseDate(g.get("received-date"))
	}
	base := report.Report{
		Kind:         report.Complained,
		Source:       report.SourceARF,
		FeedbackType: strings.ToLower(OneLine(g.get("feedback-type"), maxTokenBytes)),
		RemoteMTA:    OneLine(stripType(g.get("reporting-mta")), maxTokenBytes),
		At:           date,
	}
	if base.FeedbackType == "" {
		base.FeedbackType = "other"
	}
	for _, to := range g.all("original-rcpt-to") {
		if len(res.Reports) == MaxRecipients {
			break
		}
		r := base
		r.Recipient = cleanAddress(to)
		res.Reports = append(res.Reports, r)
	}
	if len(res.Reports) == 0 {
		res.Reports = append(res.Reports, base)
	}
	return res
}
