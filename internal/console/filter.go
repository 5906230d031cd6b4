package console

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/timearg"
)

// Bounds of the search form's fields, in bytes.
const (
	maxMessageIDBytes = 998 // a header line
	maxAddressBytes   = 320
	maxTenantBytes    = 256
	maxReasonBytes    = 64
	maxCursorBytes    = 1024
)

// dayLayouts are what since and until take besides timearg's: the
// browser's datetime-local value, with or without seconds, and a day, in
// UTC.
var dayLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"}

// parseWhen reads a bound as typed: a day or a datetime-local value in UTC,
// an RFC 3339 time, or a duration before now ("2h", "7d", as postctl's
// --since takes).
func parseWhen(field, v string, now time.Time) (time.Time, error) {
	for _, layout := range dayLayouts {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	t, err := timearg.Parse(v, now)
	if err != nil {
		return time.Time{}, inputError{fmt.Sprintf("%s %q is not a time: use YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC), or a duration ago such as 2h or 7d.", field, v)}
	}
	return t.UTC(), nil
}

// parseFilter reads the search form (or the API's query) into a filter,
// durations ago counted from now; an inputError says which field is wrong. submitted reports whether any
// search was asked for at all.
func parseFilter(q url.Values, now time.Time) (f mailquery.Filter, submitted bool, err error) {
	get := func(name string) string { return strings.TrimSpace(q.Get(name)) }
	f = mailquery.Filter{MessageID: bareMessageID(q.Get("message_id")), Recipient: get("recipient"), Tenant: get("tenant"),
		State: get("state"), Reason: get("reason"), Cursor: get("cursor")}
	if err := checkFields(field{"Message-ID", f.MessageID, maxMessageIDBytes}, field{"Recipient", f.Recipient, maxAddressBytes},
		field{"Tenant", f.Tenant, maxTenantBytes}, field{"Reason", f.Reason, maxReasonBytes}, field{"Cursor", f.Cursor, maxCursorBytes},
		field{"Since", q.Get("since"), maxReasonBytes}, field{"Until", q.Get("until"), maxReasonBytes}); err != nil {
		return f, true, err
	}
	if f.State != "" && !slices.Contains(mailquery.States, f.State) {
		return f, true, inputError{fmt.Sprintf("State %q is not one of %s.", f.State, strings.Join(mailquery.States, ", "))}
	}
	if f.Since, err = parseWhen("Since", get("since"), now); err != nil {
		return f, true, err
	}
	if f.Until, err = parseWhen("Until", get("until"), now); err != nil {
		return f, true, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, true, inputError{"Since must be before Until."}
	}
	submitted = len(q) > 0
	return f, submitted, nil
}

// filterValues is the query that parseFilter reads back as f: the next
// page's link, and the form's values.
func filterValues(f mailquery.Filter) url.Values {
	q := url.Values{"search": {"1"}}
	set := func(name, v string) {
		if v != "" {
			q.Set(name, v)
		}
	}
	set("message_id", f.MessageID)
	set("recipient", f.Recipient)
	set("tenant", f.Tenant)
	set("state", f.State)
	set("reason", f.Reason)
	set("cursor", f.Cursor)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	return q
}

// auditedFilter is a filter as the audit log keeps it.
type auditedFilter struct {
	MessageID string     `json:"message_id,omitempty"`
	Recipient string     `json:"recipient,omitempty"`
	Tenant    string     `json:"tenant,omitempty"`
	State     string     `json:"state,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Since     *time.Time `json:"since,omitempty"`
	Until     *time.Time `json:"until,omitempty"`
	Page      bool       `json:"next_page,omitempty"`
}

func auditFilter(f mailquery.Filter) auditedFilter {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return auditedFilter{MessageID: f.MessageID, Recipient: f.Recipient, Tenant: f.Tenant, State: f.State, Reason: f.Reason,
		Since: opt(f.Since), Until: opt(f.Until), Page: f.Cursor != ""}
}
