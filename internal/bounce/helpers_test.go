package bounce

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/postline/postline/internal/report"
)

// checkReport reports what makes r unfit to store or publish.
func checkReport(r report.Report) error {
	if !r.Kind.Valid() {
		return fmt.Errorf("kind %q is not valid", r.Kind)
	}
	switch r.Source {
	case report.SourceDSN, report.SourceARF, report.SourceUnstructured:
	default:
		return fmt.Errorf("source %q", r.Source)
	}
	if r.Token != "" {
		return fmt.Errorf("token %q set by the parser", r.Token)
	}
	if len(r.Diagnostic) > report.MaxDiagnosticBytes {
		return fmt.Errorf("diagnostic of %d bytes", len(r.Diagnostic))
	}
	for name, v := range map[string]string{"diagnostic": r.Diagnostic, "recipient": r.Recipient, "message id": r.MessageID,
		"status": r.Status, "remote mta": r.RemoteMTA, "feedback type": r.FeedbackType} {
		if !utf8.ValidString(v) {
			return fmt.Errorf("%s is not UTF-8: %q", name, v)
		}
		if strings.TrimSpace(v) != v || strings.Contains(v, "  ") {
			return fmt.Errorf("%s is not trimmed and collapsed: %q", name, v)
		}
		for _, c := range v {
			if unicode.IsControl(c) || c != ' ' && unicode.IsSpace(c) {
				return fmt.Errorf("%s holds %U: %q", name, c, v)
			}
		}
	}
	if r.Status != "" && findStatus(r.Status) != r.Status {
		return fmt.Errorf("status %q", r.Status)
	}
	if r.Code != 0 && (r.Code < 200 || r.Code > 599) {
		return fmt.Errorf("code %d", r.Code)
	}
	if r.Kind == report.Complained && r.Source != report.SourceARF || r.Kind != report.Complained && r.FeedbackType != "" {
		return fmt.Errorf("kind %s from %s with feedback type %q", r.Kind, r.Source, r.FeedbackType)
	}
	return nil
}

// checkResult checks every report of res.
func checkResult(res Result) error {
	switch res.Type {
	case TypeDSN, TypeARF, TypeUnstructured:
		if len(res.Reports) == 0 || len(res.Reports) > MaxRecipients {
			return fmt.Errorf("%s with %d reports", res.Type, len(res.Reports))
		}
	case TypeNotReport:
		if len(res.Reports) != 0 || res.ReturnPath != "" {
			return fmt.Errorf("not a report, yet %d reports and return path %q", len(res.Reports), res.ReturnPath)
		}
	default:
		return fmt.Errorf("type %q", res.Type)
	}
	for i, r := range res.Reports {
		if r.Source != string(res.Type) {
			return fmt.Errorf("report %d: source %q in a %s", i, r.Source, res.Type)
		}
		if err := checkReport(r); err != nil {
			return fmt.Errorf("report %d: %w", i, err)
		}
	}
	for name, v := range map[string]string{"return path": res.ReturnPath, "original to": res.OriginalTo, "envelope id": res.EnvelopeID} {
		if v != OneLine(v, len(v)) {
			return fmt.Errorf("%s is not one clean line: %q", name, v)
		}
	}
	return nil
}
