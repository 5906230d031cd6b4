package operator

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Password rules.
const (
	MinPasswordRunes = 12
	MaxPasswordBytes = 1024
)

// HashParams are argon2id's costs. DefaultHashParams follows OWASP's
// password storage guidance (19 MiB, two passes, one lane).
type HashParams struct {
	MemoryKiB uint32
	Passes    uint32
	Lanes     uint8
}

// DefaultHashParams are the costs new hashes are made with.
var DefaultHashParams = HashParams{MemoryKiB: 19 * 1024, Passes: 2, Lanes: 1}

// Bounds a stored hash's parameters must respect: a row edited by hand
// must not make a login allocate gigabytes or spin for minutes.
const (
	maxMemoryKiB = 256 * 1024
	maxPasses    = 16
	saltBytes    = 16
	keyBytes     = 32
)

// errBadHash is the error of a stored hash that is not one HashPassword
// makes; it never quotes the hash.
var errBadHash = errors.New("operator: stored password hash is not an argon2id PHC string this version reads")

// CheckPassword rejects a password too short or too long to set.
func CheckPassword(password string) error {
	if n := utf8.RuneCountInString(password); n < MinPasswordRunes {
		return fmt.Errorf("password: %d characters, want at least %d", n, MinPasswordRunes)
	}
	if len(password) > MaxPasswordBytes {
		return fmt.Errorf("password: %d bytes, want at most %d", len(password), MaxPasswordBytes)
	}
	return nil
}

// HashPassword returns the argon2id hash of password as a PHC string
// ($argon2id$v=19$m=...,t=...,p=...$salt$key) with a random salt.
func HashPassword(password string, p HashParams) (string, error) {
	salt := make([]byte, saltBytes)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("operator: salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, p.Passes, p.MemoryKiB, p.Lanes, keyBytes)
	return phc{params: p, salt: salt, key: key}.String(), nil
}

// VerifyPassword reports whether password matches the PHC string hash, in
// time independent of where they differ.
func VerifyPassword(hash, password string) (bool, error) {
	h, err := parsePHC(hash)
	if err != nil {
		return false, err
	}
	key := argon2.IDKey([]byte(password), h.salt, h.params.Passes, h.params.MemoryKiB, h.params.Lanes, uint32(len(h.key)))
	return subtle.ConstantTimeCompare(key, h.key) == 1, nil
}

// phc is a parsed argon2id hash.
type phc struct {
	params HashParams
	salt   []byte
	key    []byte
}

var b64 = base64.RawStdEncoding

func (h phc) String() string {
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version,
		h.params.MemoryKiB, h.params.Passes, h.params.Lanes, b64.EncodeToString(h.salt), b64.EncodeToString(h.key))
}

// parsePHC reads a hash String wrote, within the bounds above.
func parsePHC(s string) (phc, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return phc{}, errBadHash
	}
	var h phc
	for i, kv := range strings.Split(parts[3], ",") {
		name, value, ok := strings.Cut(kv, "=")
		want := [...]string{"m", "t", "p"}
		if !ok || i > 2 || name != want[i] {
			return phc{}, errBadHash
		}
		n, err := strconv.ParseUint(value, 10, 32)
		if err != nil || n == 0 || value != strconv.FormatUint(n, 10) {
			return phc{}, errBadHash
		}
		switch name {
		case "m":
			h.params.MemoryKiB = uint32(n)
		case "t":
			h.params.Passes = uint32(n)
		case "p":
			if n > 255 {
				return phc{}, errBadHash
			}
			h.params.Lanes = uint8(n)
		}
	}
	p := h.params
	if p.Lanes == 0 || p.Passes == 0 || p.Passes > maxPasses || p.MemoryKiB < 8*uint32(p.Lanes) || p.MemoryKiB > maxMemoryKiB {
		return phc{}, errBadHash
	}
	var ok bool
	if h.salt, ok = decodeB64(parts[4], 8, 64); !ok {
		return phc{}, errBadHash
	}
	if h.key, ok = decodeB64(parts[5], 16, 64); !ok {
		return phc{}, errBadHash
	}
	return h, nil
}

// decodeB64 decodes s, unpadded standard base64 of min to max bytes, in its
// one spelling: the decoder skips line breaks, which a hash never holds.
func decodeB64(s string, min, max int) ([]byte, bool) {
	b, err := b64.Strict().DecodeString(s)
	if err != nil || len(b) < min || len(b) > max || b64.EncodeToString(b) != s {
		return nil, false
	}
	return b, true
}
