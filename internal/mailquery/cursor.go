package mailquery

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// cursor is where a listing continues: after the mail created at
// createdAt with ID messageID, in the order (created_at, message_id)
// descending, for the filter whose fingerprint is filter. The message ID
// breaks ties of equal creation times, so no page repeats or skips a mail.
type cursor struct {
	createdAt time.Time // to the microsecond, as PostgreSQL keeps it
	messageID string
	filter    [8]byte
}

// The cursor's encoding, base64url without padding (strict):
//
//	version (1) | created_at, Unix microseconds (8, big-endian) |
//	filter fingerprint (8) | message ID | check (8)
//
// check is the first 8 bytes of the SHA-256 of what precedes it. It is not
// a signature (a cursor only says where a listing the caller may read
// anyway continues): it makes a cursor that was cut, mistyped or edited
// fail to decode rather than continue somewhere else.
const (
	cursorVersion = 1
	cursorHead    = 1 + 8 + 8
	cursorCheck   = 8
)

var cursorEncoding = base64.RawURLEncoding.Strict()

var errCursor = errors.New("not a cursor of this listing (was it cut or edited?)")

func (c cursor) encode() string {
	b := make([]byte, cursorHead, cursorHead+len(c.messageID)+cursorCheck)
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(c.createdAt.UnixMicro()))
	copy(b[9:17], c.filter[:])
	b = append(b, c.messageID...)
	sum := sha256.Sum256(b)
	b = append(b, sum[:cursorCheck]...)
	return cursorEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	b, err := cursorEncoding.DecodeString(s)
	if err != nil || len(b) < cursorHead+1+cursorCheck {
		return cursor{}, errCursor
	}
	body, check := b[:len(b)-cursorCheck], b[len(b)-cursorCheck:]
	sum := sha256.Sum256(body)
	if !bytes.Equal(sum[:cursorCheck], check) {
		return cursor{}, errCursor
	}
	if body[0] != cursorVersion {
		return cursor{}, fmt.Errorf("cursor version %d, want %d", body[0], cursorVersion)
	}
	c := cursor{
		createdAt: time.UnixMicro(int64(binary.BigEndian.Uint64(body[1:9]))).UTC(),
		messageID: string(body[cursorHead:]),
	}
	copy(c.filter[:], body[9:17])
	return c, nil
}

// fingerprint identifies what f selects, without its cursor, page size
// and time bounds: a cursor continues only the listing it was made for.
// The page size may change between pages, and so may the time bounds: a
// listing of "the last two hours" computes them again for each page, and
// a cursor is a place in the one order of all mail, so moved bounds skip
// or repeat nothing.
func (f Filter) fingerprint() [8]byte {
	recipient := f.Recipient
	if m, err := ParseRecipient(recipient); err == nil {
		recipient = m.Address() // "Ada@EXAMPLE.com" lists what "Ada@example.com" does
	}
	h := sha256.New()
	for _, v := range []string{f.MessageID, recipient, f.Tenant, f.State, f.Reason} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(v)))
		h.Write(n[:])
		h.Write([]byte(v))
	}
	var out [8]byte
	copy(out[:], h.Sum(nil))
	return out
}
