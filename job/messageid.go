package job

import (
	"cmp"
	"crypto/rand"
	"encoding/base32"
	"strconv"
	"time"
)

// DefaultMessageIDDomain is the id-right NewMessageID uses for an empty
// domain.
const DefaultMessageIDDomain = "postline.local"

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewMessageID returns a new globally unique message ID, without angle
// brackets: 128 random bits in lower-case base32, a dot, the Unix time in
// nanoseconds, "@" and domain (DefaultMessageIDDomain when empty). The
// domain should be one the sender controls.
func NewMessageID(domain string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails; it crashes the program instead.
	buf := make([]byte, 0, 26+1+19+1+len(domain)+len(DefaultMessageIDDomain))
	buf = idEncoding.AppendEncode(buf, b[:])
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, time.Now().UnixNano(), 10)
	buf = append(buf, '@')
	buf = append(buf, cmp.Or(domain, DefaultMessageIDDomain)...)
	return string(buf)
}
