package providerhook

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/postline/postline/internal/report"
)

// sesNotification is the part of an SES notification (or event publishing
// record) that reports are made of.
type sesNotification struct {
	NotificationType string `json:"notificationType"` // identity notifications
	EventType        string `json:"eventType"`        // event publishing through a configuration set
	Mail             struct {
		MessageID string `json:"messageId"` // SES's own id, not the mail's Message-ID
		Source    string `json:"source"`    // the envelope sender
		Headers   []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"headers"`
		CommonHeaders struct {
			MessageID string `json:"messageId"`
		} `json:"commonHeaders"`
	} `json:"mail"`
	Bounce *struct {
		BounceType        string `json:"bounceType"`
		BounceSubType     string `json:"bounceSubType"`
		BouncedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			Status         string `json:"status"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"bouncedRecipients"`
		Timestamp   string `json:"timestamp"`
		RemoteMtaIP string `json:"remoteMtaIp"`
	} `json:"bounce"`
	Complaint *struct {
		ComplainedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"complainedRecipients"`
		ComplaintFeedbackType string `json:"complaintFeedbackType"`
		Timestamp             string `json:"timestamp"`
	} `json:"complaint"`
	Delivery *struct {
		Recipients   []string `json:"recipients"`
		SMTPResponse string   `json:"smtpResponse"`
		Timestamp    string   `json:"timestamp"`
		RemoteMtaIP  string   `json:"remoteMtaIp"`
	} `json:"delivery"`
	DeliveryDelay *struct {
		DelayedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			Status         string `json:"status"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"delayedRecipients"`
		Timestamp string `json:"timestamp"`
	} `json:"deliveryDelay"`
}

// sesReports turns an SES notification, the Message of a verified SNS
// Notification, into one report per recipient. Notification types without
// a recipient's fate (Send, Open, Click, Reject, ...) give no reports and no
// error.
func sesReports(msg []byte, token TokenFunc) ([]report.Report, error) {
	var n sesNotification
	if err := json.Unmarshal(msg, &n); err != nil {
		return nil, fmt.Errorf("decode ses notification: %w", err)
	}
	base := report.Report{
		Source:    report.SourceSES,
		Token:     envelopeToken(token, n.Mail.Source),
		MessageID: n.messageID(),
	}
	var out []report.Report
	add := func(r report.Report) {
		if r.Recipient = address(r.Recipient); r.Recipient != "" {
			out = append(out, r)
		}
	}
	switch typ := strings.ToLower(cmp.Or(n.EventType, n.NotificationType)); typ {
	case "bounce":
		if n.Bounce == nil {
			return nil, fmt.Errorf("decode ses notification: %s without a bounce object", typ)
		}
		kind, permanent, hard := sesBounceVerdict(n.Bounce.BounceType, n.Bounce.BounceSubType)
		for _, br := range n.Bounce.BouncedRecipients {
			r := base
			r.Kind, r.Recipient, r.Permanent, r.Hard = kind, br.EmailAddress, permanent, hard
			r.Code, r.Status, r.Diagnostic = diagnostic(br.Status, br.DiagnosticCode)
			r.RemoteMTA, r.At = oneLine(n.Bounce.RemoteMtaIP), parseTime(n.Bounce.Timestamp)
			add(r)
		}
	case "complaint":
		if n.Complaint == nil {
			return nil, fmt.Errorf("decode ses notification: %s without a complaint object", typ)
		}
		for _, cr := range n.Complaint.ComplainedRecipients {
			r := base
			r.Kind, r.Recipient = report.Complained, cr.EmailAddress
			r.FeedbackType = oneLine(n.Complaint.ComplaintFeedbackType)
			r.At = parseTime(n.Complaint.Timestamp)
			add(r)
		}
	case "delivery":
		if n.Delivery == nil {
			return nil, fmt.Errorf("decode ses notification: %s without a delivery object", typ)
		}
		for _, rcpt := range n.Delivery.Recipients {
			r := base
			r.Kind, r.Recipient = report.Delivered, rcpt
			r.Code, r.Status, r.Diagnostic = diagnostic("", n.Delivery.SMTPResponse)
			r.RemoteMTA, r.At = oneLine(n.Delivery.RemoteMtaIP), parseTime(n.Delivery.Timestamp)
			add(r)
		}
	case "deliverydelay":
		if n.DeliveryDelay == nil {
			return nil, fmt.Errorf("decode ses notification: %s without a deliveryDelay object", typ)
		}
		for _, dr := range n.DeliveryDelay.DelayedRecipients {
			r := base
			r.Kind, r.Recipient = report.Delayed, dr.EmailAddress
			r.Code, r.Status, r.Diagnostic = diagnostic(dr.Status, dr.DiagnosticCode)
			r.At = parseTime(n.DeliveryDelay.Timestamp)
			add(r)
		}
	case "":
		return nil, fmt.Errorf("decode ses notification: neither notificationType nor eventType")
	}
	return out, nil
}

// sesBounceVerdict is what SES's own classification of a bounce makes of
// it:
//
//   - Permanent, with any bounceSubType but Undetermined (General, NoEmail,
//     Suppressed, OnAccountSuppressionList): SES says the address takes no
//     mail, a hard bounce, whether or not a DSN came with it (without one
//     the recipient has no status).
//   - Transient (General, MailboxFull, MessageTooLarge, ContentRejected,
//     AttachmentRejected): a soft bounce that resolves nothing. General is
//     often an auto-reply to mail that was delivered, and the others may
//     pass; the delivery report or the confirmation window decides.
//   - Undetermined, Permanent with subtype Undetermined, or a type SES may
//     add: SES could not tell. The bounce ends the recipient, and the rules
//     alone classify it from whatever status and diagnostic SES passed on
//     (with Permanent standing in for a missing status when SES said it),
//     so nothing is suppressed unless the reply itself says the address does
//     not exist.
func sesBounceVerdict(bounceType, subType string) (kind report.Kind, permanent *bool, hard bool) {
	switch strings.ToLower(bounceType) {
	case "permanent":
		return report.Bounced, boolPtr(true), !strings.EqualFold(subType, "undetermined")
	case "transient":
		return report.Delayed, boolPtr(false), false
	}
	return report.Bounced, nil, false
}

// messageID returns the mail's own Message-ID: the Message-ID header when
// SES passed the headers on, else commonHeaders.messageId unless that is
// only SES's id for the mail (SES puts its own there when the mail had
// none).
func (n *sesNotification) messageID() string {
	for _, h := range n.Mail.Headers {
		if strings.EqualFold(h.Name, "Message-ID") {
			if id := messageID(h.Value); id != "" {
				return id
			}
		}
	}
	id := messageID(n.Mail.CommonHeaders.MessageID)
	if id == "" || id == n.Mail.MessageID {
		return ""
	}
	return id
}

// diagnostic returns the code, status and one-line text of a recipient's
// status field and diagnostic; the status field wins over a status in the
// text.
func diagnostic(statusField, diag string) (code int, status, text string) {
	code, enhanced, text := smtpReply(diag)
	return code, cmp.Or(validStatus(statusField), enhanced), text
}
