package suppression

import (
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"unicode/utf8"

	"github.com/postline/postline/internal/mailaddr"
)

// Size limits of an entry's fields, in bytes.
const (
	// MaxAddressBytes bounds a normalized address: the longest forward
	// path RFC 5321 allows, without its angle brackets.
	MaxAddressBytes = 254
	// MaxInputBytes bounds what Normalize reads: an address with its
	// display name and comments.
	MaxInputBytes = 1024
	// MaxTenantBytes bounds Entry.Tenant and Key.Tenant.
	MaxTenantBytes = 200
	// MaxSourceBytes bounds Entry.Source.
	MaxSourceBytes = 100
	// MaxMessageIDBytes bounds Entry.MessageID (a header line's limit).
	MaxMessageIDBytes = 998
	// MaxNoteBytes bounds Entry.Note.
	MaxNoteBytes = 1000
)

// ErrInvalid marks an entry, key or address the table cannot hold.
var ErrInvalid = errors.New("suppression: invalid")

// Normalize returns the form of address that entries are stored and
// matched under: the bare addr-spec (a display name, angle brackets and
// comments are dropped, as net/mail parses them), trimmed and lowercased,
// with the local part quoted only when it must be. Normalizing the result
// again returns it unchanged. It fails, wrapping ErrInvalid, on anything
// that is not one RFC 5322 address or is longer than MaxAddressBytes once
// normalized.
func Normalize(address string) (string, error) {
	s := strings.TrimSpace(address)
	switch {
	case s == "":
		return "", fmt.Errorf("%w address: empty", ErrInvalid)
	case len(s) > MaxInputBytes:
		return "", fmt.Errorf("%w address: %d bytes, want at most %d", ErrInvalid, len(s), MaxInputBytes)
	case !utf8.ValidString(s):
		return "", fmt.Errorf("%w address: not UTF-8", ErrInvalid)
	}
	if _, spec, ok := mailaddr.Simple(s); ok {
		// What the parse and String below give: the bare addr-spec,
		// lower-cased, unquoted (job's fuzz tests hold it to that).
		out := strings.ToLower(spec)
		if len(out) > MaxAddressBytes {
			return "", fmt.Errorf("%w address: %d bytes normalized, want at most %d", ErrInvalid, len(out), MaxAddressBytes)
		}
		return out, nil
	}
	a, err := mail.ParseAddress(s)
	if err != nil {
		return "", fmt.Errorf("%w address: %w", ErrInvalid, err)
	}
	at := strings.LastIndexByte(a.Address, '@')
	if at <= 0 || at == len(a.Address)-1 {
		return "", fmt.Errorf("%w address: want local-part@domain", ErrInvalid)
	}
	// String quotes the local part when it is not a dot-atom and wraps the
	// addr-spec in angle brackets (there is no display name).
	out := (&mail.Address{Address: strings.ToLower(a.Address)}).String()
	out = strings.TrimSuffix(strings.TrimPrefix(out, "<"), ">")
	if len(out) > MaxAddressBytes {
		return "", fmt.Errorf("%w address: %d bytes normalized, want at most %d", ErrInvalid, len(out), MaxAddressBytes)
	}
	return out, nil
}

// Reason says why an address is suppressed.
type Reason string

// The reasons. Their strength orders them for Supersedes: a complaint is
// the strongest, then a hard bounce, an unsubscribe and an operator's
// manual entry (equal), then a soft bounce.
const (
	// ReasonHardBounce: the address does not exist or never accepts mail
	// (a permanent failure).
	ReasonHardBounce Reason = "hard_bounce"
	// ReasonComplaint: the recipient reported mail as spam (a feedback
	// loop report).
	ReasonComplaint Reason = "complaint"
	// ReasonManual: an operator suppressed the address.
	ReasonManual Reason = "manual"
	// ReasonUnsubscribe: the recipient asked for no more mail.
	ReasonUnsubscribe Reason = "unsubscribe"
	// ReasonSoftBounce: repeated temporary failures; it expires.
	ReasonSoftBounce Reason = "soft_bounce"
)

// Reasons returns every reason, strongest first.
func Reasons() []Reason {
	return []Reason{ReasonComplaint, ReasonHardBounce, ReasonUnsubscribe, ReasonManual, ReasonSoftBounce}
}

// rank is a reason's strength; zero for an unknown reason.
func (r Reason) rank() int {
	switch r {
	case ReasonComplaint:
		return 3
	case ReasonHardBounce, ReasonUnsubscribe, ReasonManual:
		return 2
	case ReasonSoftBounce:
		return 1
	}
	return 0
}

// Valid reports whether r is one of the reasons.
func (r Reason) Valid() bool { return r.rank() > 0 }

// ParseReason returns the reason named s.
func ParseReason(s string) (Reason, error) {
	r := Reason(strings.TrimSpace(s))
	if !r.Valid() {
		return "", fmt.Errorf("%w reason %q: want one of %s", ErrInvalid, s, joinReasons())
	}
	return r, nil
}

func joinReasons() string {
	names := make([]string, len(Reasons()))
	for i, r := range Reasons() {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// Stream is a class of mail an entry applies to.
type Stream string

// The streams.
const (
	StreamTransactional Stream = "transactional"
	StreamBulk          Stream = "bulk"
	// StreamAll in an entry suppresses the address on every stream.
	StreamAll Stream = "*"
)

// Valid reports whether s is one of the streams.
func (s Stream) Valid() bool {
	return s == StreamTransactional || s == StreamBulk || s == StreamAll
}

// ParseStream returns the stream named s.
func ParseStream(s string) (Stream, error) {
	st := Stream(strings.TrimSpace(s))
	if !st.Valid() {
		return "", fmt.Errorf("%w stream %q: want transactional, bulk or * (every stream)", ErrInvalid, s)
	}
	return st, nil
}

// checkText rejects a free-text field the table cannot hold: longer than
// max bytes, not UTF-8, or holding a NUL.
func checkText(field, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%w %s: %d bytes, want at most %d", ErrInvalid, field, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w %s: not UTF-8", ErrInvalid, field)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w %s: holds a NUL byte", ErrInvalid, field)
	}
	return nil
}
