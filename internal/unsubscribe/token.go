package unsubscribe

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/returnpath"
)

// Bounds of a token's fields. Sign refuses a token beyond them, and
// Verify a token that decodes to one.
const (
	// MaxTenantBytes is the longest tenant, as job.Limits documents it.
	MaxTenantBytes = 128
	// MaxAddressBytes is the longest address: the longest RFC 5321 path,
	// as the suppression lists hold it.
	MaxAddressBytes = 254
	// MaxMessageIDBytes is the longest Message-ID, as job.Limits documents
	// it.
	MaxMessageIDBytes = 250
	// MaxRecipients bounds the recipient index, as the return paths and
	// the events do.
	MaxRecipients = returnpath.MaxRecipients
)

const (
	version  = 1
	macBytes = 12
	// flagBulk marks a token of the bulk stream.
	flagBulk = 1
	// maxTokenBytes is the longest token in bytes: the version, the
	// flags, the recipient index, the life as a varint, three
	// length-prefixed strings and the HMAC.
	maxTokenBytes = 1 + 1 + 1 + binary.MaxVarintLen64 +
		2 + MaxTenantBytes + 2 + MaxAddressBytes + 2 + MaxMessageIDBytes + macBytes
	// minTokenBytes is the shortest: every string empty.
	minTokenBytes = 1 + 1 + 1 + 1 + 3 + macBytes
)

// MaxTokenLen is the length in characters of the longest token.
const MaxTokenLen = (maxTokenBytes*8 + 4) / 5

// macLabel starts what the HMAC covers. The return path tokens' HMAC
// starts with a label of their own, so neither token verifies as the
// other under the same keys.
const macLabel = "postline unsubscribe\x00"

var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Token is what an unsubscribe token names: one recipient of one mail.
type Token struct {
	// Tenant is the mail's tenant, "" for none.
	Tenant string
	// Stream is event.StreamBulk or event.StreamTransactional: the
	// suppression list the unsubscribe goes on.
	Stream string
	// Address is the recipient's bare address, as the job spelled it.
	Address string
	// MessageID is the mail's Message-ID.
	MessageID string
	// Recipient is the recipient's index in the job (To, Cc, Bcc).
	Recipient int
	// Life is the mail's life (event.NewLifeID); 0 for none.
	Life int64
}

// The errors of Verify.
var (
	// ErrMalformed: the string is not a token (wrong length, alphabet or
	// version), or its signed content does not read as one.
	ErrMalformed = errors.New("unsubscribe: malformed token")
	// ErrForged: a token whose HMAC matches none of the keys.
	ErrForged = errors.New("unsubscribe: forged token")
)

// Signer makes and verifies tokens with the return path keys. It is safe
// for concurrent use.
type Signer struct {
	keys [][]byte
}

// NewSigner returns a Signer. The first key signs; every key verifies. The
// keys are POSTLINE_RETURN_PATH_KEYS (returnpath.ParseKeys).
func NewSigner(keys [][]byte) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("unsubscribe: at least one key is required")
	}
	for i, k := range keys {
		if len(k) < returnpath.MinKeyBytes {
			// The key itself never goes into the error.
			return nil, fmt.Errorf("unsubscribe: key %d has %d bytes, want at least %d", i, len(k), returnpath.MinKeyBytes)
		}
	}
	return &Signer{keys: keys}, nil
}

// check reports the first field of t a token cannot carry.
func (t Token) check() error {
	switch {
	case t.Stream != event.StreamBulk && t.Stream != event.StreamTransactional:
		return fmt.Errorf("stream %q, want %s or %s", t.Stream, event.StreamBulk, event.StreamTransactional)
	case len(t.Tenant) > MaxTenantBytes:
		return fmt.Errorf("tenant of %d bytes, limit %d", len(t.Tenant), MaxTenantBytes)
	case t.Address == "" || len(t.Address) > MaxAddressBytes:
		return fmt.Errorf("address of %d bytes, want 1 to %d", len(t.Address), MaxAddressBytes)
	case t.MessageID == "" || len(t.MessageID) > MaxMessageIDBytes:
		return fmt.Errorf("message ID of %d bytes, want 1 to %d", len(t.MessageID), MaxMessageIDBytes)
	case t.Recipient < 0 || t.Recipient >= MaxRecipients:
		return fmt.Errorf("recipient index %d, want 0 to %d", t.Recipient, MaxRecipients-1)
	case !utf8.ValidString(t.Tenant) || !utf8.ValidString(t.Address) || !utf8.ValidString(t.MessageID):
		return errors.New("a field is not UTF-8")
	}
	return nil
}

// Sign returns the token of t. It fails, naming the field but not its
// value, for a t beyond the bounds.
func (s *Signer) Sign(t Token) (string, error) {
	if err := t.check(); err != nil {
		return "", fmt.Errorf("unsubscribe: token: %w", err)
	}
	b := make([]byte, 0, 3+binary.MaxVarintLen64+6+len(t.Tenant)+len(t.Address)+len(t.MessageID)+macBytes)
	var flags byte
	if t.Stream == event.StreamBulk {
		flags |= flagBulk
	}
	b = append(b, version, flags, byte(t.Recipient))
	b = binary.AppendVarint(b, t.Life)
	for _, f := range []string{t.Tenant, t.Address, t.MessageID} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	b = append(b, mac(s.keys[0], b)...)
	return encoding.EncodeToString(b), nil
}

// Verify checks token against every key and returns what it names. Its
// error is ErrMalformed for a string that is not a token and ErrForged for
// one no key signed. Upper case is read as lower case (a server may fold a
// local part's case). Its time is linear in the token's length, which is
// bounded by MaxTokenLen before anything is decoded.
func (s *Signer) Verify(token string) (Token, error) {
	if len(token) == 0 || len(token) > MaxTokenLen {
		return Token{}, ErrMalformed
	}
	token = strings.ToLower(token)
	b, err := encoding.DecodeString(token)
	// The last character may carry bits beyond the bytes; only the
	// spelling Sign makes (those bits zero) is accepted, so a token has
	// exactly one form and a changed character never reads as the same
	// token.
	if err != nil || len(b) < minTokenBytes || b[0] != version || encoding.EncodeToString(b) != token {
		return Token{}, ErrMalformed
	}
	body, sum := b[:len(b)-macBytes], b[len(b)-macBytes:]
	signed := false
	for _, k := range s.keys {
		if hmac.Equal(sum, mac(k, body)) {
			signed = true
			break
		}
	}
	if !signed {
		return Token{}, ErrForged
	}
	t, ok := parse(body)
	if !ok {
		// Signed, yet not a token this package writes: a key shared with
		// something else, or a bug. Nothing is taken from it.
		return Token{}, ErrMalformed
	}
	return t, nil
}

// parse reads the signed content of a token, as Sign writes it and
// nothing else.
func parse(b []byte) (Token, bool) {
	var t Token
	flags, idx := b[1], b[2]
	if flags&^flagBulk != 0 {
		return Token{}, false
	}
	t.Stream = event.StreamTransactional
	if flags&flagBulk != 0 {
		t.Stream = event.StreamBulk
	}
	t.Recipient = int(idx)
	rest := b[3:]
	life, n := binary.Varint(rest)
	if n <= 0 {
		return Token{}, false
	}
	t.Life, rest = life, rest[n:]
	var fields [3]string
	for i := range fields {
		l, n := binary.Uvarint(rest)
		if n <= 0 || l > uint64(len(rest)-n) {
			return Token{}, false
		}
		fields[i], rest = string(rest[n:n+int(l)]), rest[n+int(l):]
	}
	if len(rest) != 0 {
		return Token{}, false
	}
	t.Tenant, t.Address, t.MessageID = fields[0], fields[1], fields[2]
	if t.check() != nil {
		return Token{}, false
	}
	return t, true
}

func mac(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(macLabel))
	h.Write(body)
	return h.Sum(nil)[:macBytes]
}
