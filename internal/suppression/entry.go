package suppression

import (
	"fmt"
	"time"
)

// SourceRelayRefusal is the Source of an entry a worker added because a
// relay refused the address for good at RCPT.
const SourceRelayRefusal = "smtp"

// Key names the entries a check or removal is about.
type Key struct {
	// Tenant is the tenant, "" for mail without one.
	Tenant string
	// Stream is the stream of the mail. In Check it matches entries of
	// that stream and of StreamAll; in Remove it names the entry's stream,
	// and "" removes the address's entries of every stream.
	Stream Stream
	// Address is an RFC 5322 address; Check and Remove normalize it.
	Address string
}

// Entry is one suppressed address of a tenant and stream.
type Entry struct {
	// Tenant is the tenant, "" for mail without one.
	Tenant string
	// Stream is the stream the entry applies to; StreamAll applies to
	// every stream.
	Stream Stream
	// Address is the normalized address (Add normalizes it).
	Address string
	// Reason says why the address is suppressed.
	Reason Reason
	// Source says what added it, free text ("dsn", "ses", "postctl",
	// "import", ...).
	Source string
	// MessageID is the mail the entry came from (a bounce's or a
	// complaint's subject), "" when none.
	MessageID string
	// Note is an operator's note, "" when none.
	Note string
	// CreatedAt is when the entry was made; Add sets it to now when zero.
	CreatedAt time.Time
	// ExpiresAt is when the entry stops suppressing; zero means never.
	ExpiresAt time.Time
}

// Key returns the entry's key.
func (e Entry) Key() Key { return Key{Tenant: e.Tenant, Stream: e.Stream, Address: e.Address} }

// Active reports whether the entry suppresses mail at now.
func (e Entry) Active(now time.Time) bool { return e.ExpiresAt.IsZero() || e.ExpiresAt.After(now) }

// Supersedes reports whether Add replaces old with next (both of one key)
// at now. An operator's manual entry replaces anything it differs from,
// and anything replaces an entry that has expired. Otherwise next replaces old only
// when it is at least as strong on both counts, reason (complaint, then
// hard bounce, unsubscribe and manual, then soft bounce) and lifetime
// (never expiring, then the later expiry), and stronger on one: an entry
// never gets weaker on its own, and an equal one keeps the first evidence.
func Supersedes(next, old Entry, now time.Time) bool {
	if next.Reason == ReasonManual {
		return !same(next, old)
	}
	if !old.Active(now) {
		return true
	}
	nr, or := next.Reason.rank(), old.Reason.rank()
	cmpLife := compareExpiry(next.ExpiresAt, old.ExpiresAt)
	return nr >= or && cmpLife >= 0 && (nr > or || cmpLife > 0)
}

// same reports whether a and b hold the same values.
func same(a, b Entry) bool {
	return a.Key() == b.Key() && a.Reason == b.Reason && a.Source == b.Source && a.MessageID == b.MessageID &&
		a.Note == b.Note && a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

// compareExpiry compares two expiries where zero means never: -1 when a
// ends first, +1 when b does.
func compareExpiry(a, b time.Time) int {
	switch {
	case a.Equal(b):
		return 0
	case a.IsZero():
		return 1
	case b.IsZero():
		return -1
	case a.Before(b):
		return -1
	}
	return 1
}

// stronger reports whether a should be reported over b when both match one
// checked key: the stronger reason, then the longer lifetime, then the
// entry of the key's own stream over StreamAll's.
func stronger(a, b Entry) bool {
	if ar, br := a.Reason.rank(), b.Reason.rank(); ar != br {
		return ar > br
	}
	if c := compareExpiry(a.ExpiresAt, b.ExpiresAt); c != 0 {
		return c > 0
	}
	return a.Stream != StreamAll && b.Stream == StreamAll
}

// normalizeKey checks k's tenant and stream and normalizes its address.
// An empty stream is allowed only where emptyStream says so.
func normalizeKey(k Key, emptyStream bool) (Key, error) {
	if err := checkText("tenant", k.Tenant, MaxTenantBytes); err != nil {
		return Key{}, err
	}
	if !k.Stream.Valid() && !(emptyStream && k.Stream == "") {
		return Key{}, fmt.Errorf("%w stream %q: want transactional, bulk or *", ErrInvalid, k.Stream)
	}
	addr, err := Normalize(k.Address)
	if err != nil {
		return Key{}, err
	}
	k.Address = addr
	return k, nil
}

// Validate reports the first field of e the table cannot hold (its
// address is checked as Normalize would store it), wrapping ErrInvalid.
// Add validates every entry the same way.
func (e Entry) Validate() error {
	_, err := e.validated()
	return err
}

// validated is e checked, with its address normalized.
func (e Entry) validated() (Entry, error) {
	k, err := normalizeKey(e.Key(), false)
	if err != nil {
		return Entry{}, err
	}
	e.Address = k.Address
	if !e.Reason.Valid() {
		return Entry{}, fmt.Errorf("%w reason %q: want one of %s", ErrInvalid, e.Reason, joinReasons())
	}
	for _, f := range []struct {
		name, val string
		max       int
	}{{"source", e.Source, MaxSourceBytes}, {"message_id", e.MessageID, MaxMessageIDBytes}, {"note", e.Note, MaxNoteBytes}} {
		if err := checkText(f.name, f.val, f.max); err != nil {
			return Entry{}, err
		}
	}
	if !e.ExpiresAt.IsZero() && !e.CreatedAt.IsZero() && !e.ExpiresAt.After(e.CreatedAt) {
		return Entry{}, expiryError(e)
	}
	return e, nil
}

func expiryError(e Entry) error {
	return fmt.Errorf("%w expires_at %s: not after created_at %s", ErrInvalid,
		e.ExpiresAt.UTC().Format(time.RFC3339Nano), e.CreatedAt.UTC().Format(time.RFC3339Nano))
}

// prepare validates e for the table: its address normalized, CreatedAt
// set to now when zero, a soft bounce without expiry given softTTL, and
// times cut to the table's microseconds.
func prepare(e Entry, now time.Time, softTTL time.Duration) (Entry, error) {
	e, err := e.validated()
	if err != nil {
		return Entry{}, err
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = now
	}
	e.CreatedAt = e.CreatedAt.Truncate(time.Microsecond)
	if e.ExpiresAt.IsZero() && e.Reason == ReasonSoftBounce {
		e.ExpiresAt = e.CreatedAt.Add(softTTL)
	}
	if !e.ExpiresAt.IsZero() {
		e.ExpiresAt = e.ExpiresAt.Truncate(time.Microsecond)
		if !e.ExpiresAt.After(e.CreatedAt) {
			return Entry{}, expiryError(e)
		}
	}
	return e, nil
}
