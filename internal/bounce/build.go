package bounce

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/postline/postline/internal/report"
)

// DefaultReportingMTA names the reporter of built reports that name none.
const DefaultReportingMTA = "reports.invalid"

// DSN describes a delivery status notification for BuildDSN. The returned
// original is written as a text/rfc822-headers part holding ReturnPath,
// MessageID, OriginalTo and Subject.
type DSN struct {
	// ReportingMTA is the Reporting-MTA (without the "dns;" type).
	// Defaults to DefaultReportingMTA.
	ReportingMTA string
	// From is the report's From address. Defaults to MAILER-DAEMON at
	// ReportingMTA.
	From string
	// To is the address the report is sent to (the original's return path).
	// Defaults to ReturnPath.
	To string
	// Date is the report's Date, written to the second. Required.
	Date time.Time
	// EnvelopeID is written as Original-Envelope-Id when set.
	EnvelopeID string
	// ReturnPath, MessageID (without angle brackets), OriginalTo and
	// Subject make up the returned header.
	ReturnPath, MessageID, OriginalTo, Subject string
	// Recipients are written one group each: Kind (Delivered, Bounced or
	// Delayed) as the Action, Recipient as Final-Recipient, Status,
	// Diagnostic as an smtp Diagnostic-Code (Code is prefixed when the
	// Diagnostic does not carry it), RemoteMTA, and At as
	// Last-Attempt-Date when set. At least one is required.
	Recipients []report.Report
}

// ARF describes a complaint report for BuildARF. The original is written as
// a message/rfc822 part holding ReturnPath, MessageID, OriginalTo and
// Subject, and a one-line body.
type ARF struct {
	// ReportingMTA is the Reporting-MTA. Defaults to DefaultReportingMTA.
	ReportingMTA string
	// From is the report's From. Defaults to feedback at ReportingMTA.
	From string
	// To is the feedback address the report is sent to. Required.
	To string
	// Date is the report's Date, when the complaint was made, written to
	// the second. Required.
	Date time.Time
	// FeedbackType is the Feedback-Type. Defaults to "abuse".
	FeedbackType string
	// UserAgent is the User-Agent field. Defaults to "postline-bounce/1".
	UserAgent string
	// OriginalMailFrom is written as Original-Mail-From when set.
	OriginalMailFrom string
	// Recipients are written as Original-Rcpt-To fields.
	Recipients []string
	// ArrivalDate is written as Arrival-Date when set.
	ArrivalDate time.Time
	// EnvelopeID is written as Original-Envelope-Id when set.
	EnvelopeID string
	// ReturnPath, MessageID (without angle brackets), OriginalTo and
	// Subject make up the embedded original's header.
	ReturnPath, MessageID, OriginalTo, Subject string
}

// errLine is returned for a field that would break the report's syntax.
func checkLine(name, v string) error {
	if strings.ContainsAny(v, "\r\n\x00") {
		return fmt.Errorf("bounce: %s %q holds a line break or NUL", name, v)
	}
	return nil
}

func boundary() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "=_report_" + hex.EncodeToString(b[:])
}

const dateLayout = time.RFC1123Z

// writeHeaders writes the returned original's header fields.
func writeOriginal(b *bytes.Buffer, returnPath, messageID, to, subject string) {
	if returnPath != "" {
		fmt.Fprintf(b, "Return-Path: <%s>\r\n", returnPath)
	}
	if messageID != "" {
		fmt.Fprintf(b, "Message-ID: <%s>\r\n", messageID)
	}
	if to != "" {
		fmt.Fprintf(b, "To: <%s>\r\n", to)
	}
	if subject != "" {
		fmt.Fprintf(b, "Subject: %s\r\n", subject)
	}
}

func checkAll(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := checkLine(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

var actions = map[report.Kind]string{report.Delivered: "delivered", report.Bounced: "failed", report.Delayed: "delayed"}

// BuildDSN writes an RFC 3464 multipart/report of report-type
// delivery-status with CRLF line endings.
func BuildDSN(d DSN) ([]byte, error) {
	d.ReportingMTA = cmp.Or(d.ReportingMTA, DefaultReportingMTA)
	d.From = cmp.Or(d.From, "MAILER-DAEMON@"+d.ReportingMTA)
	d.To = cmp.Or(d.To, d.ReturnPath)
	switch {
	case d.Date.IsZero():
		return nil, errors.New("bounce: DSN Date is required")
	case len(d.Recipients) == 0:
		return nil, errors.New("bounce: DSN has no Recipients")
	case len(d.Recipients) > MaxRecipients:
		return nil, fmt.Errorf("bounce: DSN has %d Recipients, over %d", len(d.Recipients), MaxRecipients)
	}
	if err := checkAll("ReportingMTA", d.ReportingMTA, "From", d.From, "To", d.To, "EnvelopeID", d.EnvelopeID,
		"ReturnPath", d.ReturnPath, "MessageID", d.MessageID, "OriginalTo", d.OriginalTo, "Subject", d.Subject); err != nil {
		return nil, err
	}
	var groups bytes.Buffer
	fmt.Fprintf(&groups, "Reporting-MTA: dns; %s\r\n", d.ReportingMTA)
	if d.EnvelopeID != "" {
		fmt.Fprintf(&groups, "Original-Envelope-Id: %s\r\n", d.EnvelopeID)
	}
	for i, r := range d.Recipients {
		action, ok := actions[r.Kind]
		switch {
		case !ok:
			return nil, fmt.Errorf("bounce: DSN recipient %d: Kind %q is not delivered, bounced or delayed", i, r.Kind)
		case r.Recipient == "":
			return nil, fmt.Errorf("bounce: DSN recipient %d has no Recipient", i)
		case findStatus(r.Status) != r.Status:
			return nil, fmt.Errorf("bounce: DSN recipient %d: Status %q is not an enhanced status code", i, r.Status)
		}
		if err := checkAll("Recipient", r.Recipient, "Diagnostic", r.Diagnostic, "RemoteMTA", r.RemoteMTA); err != nil {
			return nil, err
		}
		diag := r.Diagnostic
		if r.Code != 0 && diagCode(diag) != r.Code {
			diag = strings.TrimSpace(fmt.Sprintf("%d %s", r.Code, diag))
		}
		fmt.Fprintf(&groups, "\r\nFinal-Recipient: rfc822; %s\r\nAction: %s\r\nStatus: %s\r\n", r.Recipient, action, r.Status)
		if r.RemoteMTA != "" {
			fmt.Fprintf(&groups, "Remote-MTA: dns; %s\r\n", r.RemoteMTA)
		}
		if diag != "" {
			fmt.Fprintf(&groups, "Diagnostic-Code: smtp; %s\r\n", diag)
		}
		if !r.At.IsZero() {
			fmt.Fprintf(&groups, "Last-Attempt-Date: %s\r\n", r.At.Format(dateLayout))
		}
	}

	bnd := boundary()
	var b bytes.Buffer
	fmt.Fprintf(&b, "From: Mail Delivery System <%s>\r\n", d.From)
	if d.To != "" {
		fmt.Fprintf(&b, "To: <%s>\r\n", d.To)
	}
	fmt.Fprintf(&b, "Date: %s\r\nSubject: Delivery Status Notification\r\nAuto-Submitted: auto-replied\r\n", d.Date.Format(dateLayout))
	fmt.Fprintf(&b, "MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status;\r\n\tboundary=\"%s\"\r\n\r\n", bnd)
	fmt.Fprintf(&b, "This is a MIME-encapsulated message.\r\n\r\n--%s\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n", bnd)
	b.WriteString("This is the mail system. A message could not be delivered to one or more\r\nrecipients, or its delivery is delayed. The details follow.\r\n\r\n")
	fmt.Fprintf(&b, "--%s\r\nContent-Type: message/delivery-status\r\n\r\n", bnd)
	b.Write(groups.Bytes())
	fmt.Fprintf(&b, "\r\n--%s\r\nContent-Type: text/rfc822-headers\r\n\r\n", bnd)
	writeOriginal(&b, d.ReturnPath, d.MessageID, d.OriginalTo, d.Subject)
	fmt.Fprintf(&b, "\r\n--%s--\r\n", bnd)
	return b.Bytes(), nil
}

// BuildARF writes an RFC 5965 multipart/report of report-type
// feedback-report with CRLF line endings.
func BuildARF(a ARF) ([]byte, error) {
	a.ReportingMTA = cmp.Or(a.ReportingMTA, DefaultReportingMTA)
	a.From = cmp.Or(a.From, "feedback@"+a.ReportingMTA)
	a.FeedbackType = cmp.Or(a.FeedbackType, "abuse")
	a.UserAgent = cmp.Or(a.UserAgent, "postline-bounce/1")
	switch {
	case a.Date.IsZero():
		return nil, errors.New("bounce: ARF Date is required")
	case a.To == "":
		return nil, errors.New("bounce: ARF To is required")
	case len(a.Recipients) > MaxRecipients:
		return nil, fmt.Errorf("bounce: ARF has %d Recipients, over %d", len(a.Recipients), MaxRecipients)
	}
	if err := checkAll("ReportingMTA", a.ReportingMTA, "From", a.From, "To", a.To, "FeedbackType", a.FeedbackType,
		"UserAgent", a.UserAgent, "OriginalMailFrom", a.OriginalMailFrom, "ReturnPath", a.ReturnPath,
		"MessageID", a.MessageID, "OriginalTo", a.OriginalTo, "Subject", a.Subject, "EnvelopeID", a.EnvelopeID); err != nil {
		return nil, err
	}
	for i, r := range a.Recipients {
		if r == "" {
			return nil, fmt.Errorf("bounce: ARF recipient %d is empty", i)
		}
		if err := checkLine("Recipient", r); err != nil {
			return nil, err
		}
	}
	bnd := boundary()
	var b bytes.Buffer
	fmt.Fprintf(&b, "From: <%s>\r\nTo: <%s>\r\nDate: %s\r\nSubject: FW: %s\r\n", a.From, a.To, a.Date.Format(dateLayout), a.Subject)
	fmt.Fprintf(&b, "MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=feedback-report;\r\n\tboundary=\"%s\"\r\n\r\n", bnd)
	fmt.Fprintf(&b, "--%s\r\nContent-Type: text/plain; charset=us-ascii\r\nContent-Disposition: inline\r\n\r\n", bnd)
	b.WriteString("This is an email abuse report for a message received by the reporting\r\nmail system.\r\n\r\n")
	fmt.Fprintf(&b, "--%s\r\nContent-Type: message/feedback-report\r\n\r\n", bnd)
	fmt.Fprintf(&b, "Feedback-Type: %s\r\nUser-Agent: %s\r\nVersion: 1\r\n", a.FeedbackType, a.UserAgent)
	if a.OriginalMailFrom != "" {
		fmt.Fprintf(&b, "Original-Mail-From: <%s>\r\n", a.OriginalMailFrom)
	}
	for _, r := range a.Recipients {
		fmt.Fprintf(&b, "Original-Rcpt-To: <%s>\r\n", r)
	}
	if a.EnvelopeID != "" {
		fmt.Fprintf(&b, "Original-Envelope-Id: %s\r\n", a.EnvelopeID)
	}
	if !a.ArrivalDate.IsZero() {
		fmt.Fprintf(&b, "Arrival-Date: %s\r\n", a.ArrivalDate.Format(dateLayout))
	}
	fmt.Fprintf(&b, "Reporting-MTA: dns; %s\r\n", a.ReportingMTA)
	fmt.Fprintf(&b, "\r\n--%s\r\nContent-Type: message/rfc822\r\nContent-Disposition: inline\r\n\r\n", bnd)
	writeOriginal(&b, a.ReturnPath, a.MessageID, a.OriginalTo, a.Subject)
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n(the reported message's body)\r\n")
	fmt.Fprintf(&b, "\r\n--%s--\r\n", bnd)
	return b.Bytes(), nil
}
