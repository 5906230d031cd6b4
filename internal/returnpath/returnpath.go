// Package returnpath makes and checks the return paths Postline sends with:
// one envelope sender per recipient, bounce+<token>@<bounce domain>, whose
// token names the mail and the recipient and carries an HMAC, so a report
// sent to it is about what the token says and a report to a made-up token
// is recognised as forged. It owns the token's format and keys; it does not
// look anything up: Ref is the message reference the caller stores and
// searches by.
//
// The token is 19 bytes in lower-case base32 (31 characters): an 8-byte
// reference of the Message-ID (the first bytes of its SHA-256), the
// recipient's index, and the first 10 bytes of an HMAC-SHA256 of both.
// With "bounce+" the local part is 38 characters, well inside SMTP's 64,
// and lower case survives servers that fold the case of local parts.
package returnpath

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
)

// Prefix starts the local part of every return path.
const Prefix = "bounce+"

// MinKeyBytes is the shortest key New accepts.
const MinKeyBytes = 16

const (
	refBytes   = 8
	macBytes   = 10
	tokenBytes = refBytes + 1 + macBytes
	// TokenLen is the length of a token in characters.
	TokenLen = (tokenBytes*8 + 4) / 5
	// MaxRecipients bounds the recipient index a token can name.
	MaxRecipients = 100
)

var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Ref is the reference of a Message-ID a token carries.
type Ref [refBytes]byte

// RefOf returns the reference of messageID.
func RefOf(messageID string) Ref {
	sum := sha256.Sum256([]byte(messageID))
	var r Ref
	copy(r[:], sum[:refBytes])
	return r
}

// Signer makes and verifies return paths for one bounce domain. It is safe
// for concurrent use.
type Signer struct {
	domain string
	keys   [][]byte
}

// New returns a Signer for domain. The first key signs; every key
// verifies, so a key can be rotated by putting the new one first and
// dropping the old one once its mail's reports stopped coming.
func New(domain string, keys [][]byte) (*Signer, error) {
	domain = strings.ToLower(strings.TrimSpace(domain))
	if domain == "" || strings.ContainsAny(domain, "@ \t\r\n<>") || !strings.Contains(domain, ".") {
		return nil, fmt.Errorf("returnpath: domain %q is not a domain name", domain)
	}
	if len(keys) == 0 {
		return nil, errors.New("returnpath: at least one key is required")
	}
	for i, k := range keys {
		if len(k) < MinKeyBytes {
			return nil, fmt.Errorf("returnpath: key %d has %d bytes, want at least %d", i, len(k), MinKeyBytes)
		}
	}
	return &Signer{domain: domain, keys: keys}, nil
}

// Domain returns the bounce domain.
func (s *Signer) Domain() string { return s.domain }

// Address returns the return path for recipient index idx of messageID.
func (s *Signer) Address(messageID string, idx int) string {
	return Prefix + s.Token(messageID, idx) + "@" + s.domain
}

// Token returns the token for recipient index idx (0 to MaxRecipients-1)
// of messageID.
func (s *Signer) Token(messageID string, idx int) string {
	if idx < 0 || idx >= MaxRecipients {
		panic(fmt.Sprintf("returnpath: recipient index %d out of range", idx))
	}
	ref := RefOf(messageID)
	var b [tokenBytes]byte
	copy(b[:], ref[:])
	b[refBytes] = byte(idx)
	copy(b[refBytes+1:], mac(s.keys[0], ref, byte(idx)))
	return encoding.EncodeToString(b[:])
}

// TokenOf returns the token of a return path of this Signer's domain
// ("bounce+<token>@<domain>", in any case, with or without angle
// brackets). It checks the syntax only; Verify checks the token.
func (s *Signer) TokenOf(address string) (string, bool) {
	a := strings.ToLower(strings.TrimSpace(address))
	a = strings.TrimSuffix(strings.TrimPrefix(a, "<"), ">")
	local, domain, ok := strings.Cut(a, "@")
	if !ok || domain != s.domain || !strings.HasPrefix(local, Prefix) {
		return "", false
	}
	token := local[len(Prefix):]
	if len(token) != TokenLen || strings.Trim(token, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return "", false
	}
	return token, true
}

// Verify checks a token against every key and returns the message
// reference and recipient index it names. ok is false for a token that is
// malformed or whose HMAC matches no key: a forged or corrupted one.
func (s *Signer) Verify(token string) (ref Ref, idx int, ok bool) {
	token = strings.ToLower(token)
	b, err := encoding.DecodeString(token)
	// The last character carries 3 bits beyond the 19 bytes; only the
	// spelling Token makes (those bits zero) is accepted, so a token has
	// exactly one form.
	if err != nil || len(b) != tokenBytes || int(b[refBytes]) >= MaxRecipients || encoding.EncodeToString(b) != token {
		return Ref{}, 0, false
	}
	copy(ref[:], b[:refBytes])
	for _, k := range s.keys {
		if hmac.Equal(b[refBytes+1:], mac(k, ref, b[refBytes])) {
			return ref, int(b[refBytes]), true
		}
	}
	return Ref{}, 0, false
}

func mac(key []byte, ref Ref, idx byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("postline return path\x00"))
	h.Write(ref[:])
	h.Write([]byte{idx})
	return h.Sum(nil)[:macBytes]
}

// ParseKeys reads keys from a comma-separated list, the signing key first.
// Keys are taken as written (their bytes); each needs MinKeyBytes.
func ParseKeys(list string) ([][]byte, error) {
	var keys [][]byte
	for i, k := range strings.Split(list, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if len(k) < MinKeyBytes {
			// The key itself never goes into the error.
			return nil, fmt.Errorf("returnpath: key %d has %d bytes, want at least %d", i, len(k), MinKeyBytes)
		}
		keys = append(keys, []byte(k))
	}
	if len(keys) == 0 {
		return nil, errors.New("returnpath: no keys")
	}
	return keys, nil
}
