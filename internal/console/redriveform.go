package console

import (
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/internal/redrive"
)

// Bounds of the re-drive form's list fields (tenants, reasons, classes and
// Message-IDs, comma-separated), in bytes.
const (
	maxRedriveListBytes = 4096
	maxRateBytes        = 32
)

// redriveForm is the re-drive (and dead-letter) form's fields as typed.
// Once parsed, its times are absolute (RFC 3339) and its lists cleaned, so
// that the confirmation re-drives exactly the window that was counted.
type redriveForm struct {
	Since     string `json:"since,omitempty"`
	Until     string `json:"until,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Class     string `json:"class,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	Rate      string `json:"rate,omitempty"`
	Note      string `json:"note,omitempty"`
}

// readRedriveForm reads the form's fields from a query or a posted form.
func readRedriveForm(v url.Values) redriveForm {
	get := func(name string) string { return strings.TrimSpace(v.Get(name)) }
	return redriveForm{Since: get("since"), Until: get("until"), Tenant: get("tenant"), Reason: get("reason"), Class: get("class"),
		MessageID: get("message_id"), Rate: get("rate"), Note: get("note")}
}

// Query is the query that readRedriveForm reads back as f's filter, for
// links between the dead letters and a pre-filled re-drive form. It is
// url.Values' encoding, safe in an href as it is.
func (f redriveForm) Query() template.URL {
	q := url.Values{}
	for name, v := range map[string]string{"since": f.Since, "until": f.Until, "tenant": f.Tenant, "reason": f.Reason,
		"class": f.Class, "message_id": f.MessageID} {
		if v != "" {
			q.Set(name, v)
		}
	}
	return template.URL(q.Encode()) //nolint:gosec // url.Values.Encode escapes every value
}

// redriveLabel names a redrive field as the form labels it.
func redriveLabel(field string) string {
	switch field {
	case redrive.FieldMessageID:
		return "Message-ID"
	case "":
		return ""
	}
	return strings.ToUpper(field[:1]) + field[1:]
}

// parseRedriveFilter checks the form's filter fields and returns the
// filter and the form with absolute times and clean lists; an inputError
// names the field.
func parseRedriveFilter(f redriveForm, now time.Time) (redrive.Filter, redriveForm, error) {
	if err := checkFields(field{"Since", f.Since, maxReasonBytes}, field{"Until", f.Until, maxReasonBytes},
		field{"Tenant", f.Tenant, maxRedriveListBytes}, field{"Reason", f.Reason, maxRedriveListBytes},
		field{"Class", f.Class, maxRedriveListBytes}, field{"Message-ID", f.MessageID, maxRedriveListBytes},
		field{"Rate", f.Rate, maxRateBytes}, field{"Note", f.Note, redrive.MaxNoteBytes}); err != nil {
		return redrive.Filter{}, f, err
	}
	since, err := parseWhen("Since", f.Since, now)
	if err != nil {
		return redrive.Filter{}, f, err
	}
	until, err := parseWhen("Until", f.Until, now)
	if err != nil {
		return redrive.Filter{}, f, err
	}
	spec := redrive.FilterSpec{Since: absolute(since), Until: absolute(until), Tenants: []string{f.Tenant},
		Reasons: []string{f.Reason}, Classes: []string{f.Class}, MessageIDs: []string{f.MessageID}}
	filter, err := spec.Parse(now, redriveLabel)
	if fe := (*redrive.FieldError)(nil); errors.As(err, &fe) {
		return redrive.Filter{}, f, inputError{fe.Error() + "."}
	}
	if err != nil {
		return redrive.Filter{}, f, err
	}
	f.Since, f.Until = spec.Since, spec.Until
	f.Tenant, f.Reason, f.Class = strings.Join(filter.Tenants, ","), strings.Join(filter.Reasons, ","), strings.Join(filter.Classes, ",")
	f.MessageID = strings.Join(filter.MessageIDs, ",")
	return filter, f, nil
}

// absolute is t as RFC 3339 in UTC, "" for the zero time.
func absolute(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// redriveRequest is a checked re-drive form: what to select and how.
type redriveRequest struct {
	form   redriveForm
	filter redrive.Filter
	opts   redrive.Options
}

// parseRedrive checks the whole form: the filter, the rate (the default
// when empty, at most redrive.MaxRate) and the note, which is required.
func parseRedrive(f redriveForm, actor string, now time.Time) (redriveRequest, error) {
	filter, f, err := parseRedriveFilter(f, now)
	if err != nil {
		return redriveRequest{form: f}, err
	}
	rate := redrive.DefaultRate
	if f.Rate != "" {
		if rate, err = strconv.ParseFloat(f.Rate, 64); err != nil || math.IsInf(rate, 0) {
			return redriveRequest{form: f}, inputError{fmt.Sprintf("Rate %q is not a number: give re-drives a second, such as %g.", f.Rate, redrive.DefaultRate)}
		}
	}
	if f.Note == "" {
		return redriveRequest{form: f}, inputError{"Note is required: say why you re-drive, for the redriven events and the audit log."}
	}
	opts := redrive.Options{Rate: rate, Note: f.Note, Actor: actor}
	if err := opts.Validate(redriveLabel); err != nil {
		return redriveRequest{form: f}, inputError{err.Error() + "."}
	}
	f.Rate = strconv.FormatFloat(rate, 'g', -1, 64)
	return redriveRequest{form: f, filter: filter, opts: opts}, nil
}

// consoleActor names an operator on events and endpoint logs, as postctl
// names its user "postctl:NAME".
func consoleActor(name string) string { return "console:" + name }
