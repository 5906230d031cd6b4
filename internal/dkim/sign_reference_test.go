package dkim

// The signer as it was before it was made to allocate less, kept to hold
// Sign to it byte for byte.

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sign returns msg, a whole message with CRLF line endings, with a
// DKIM-Signature field prepended: relaxed/relaxed, over the fields of
// SignedHeaders that msg carries with From over-signed, and the whole
// body. msg must have a From field.
//
// The field is folded at tag boundaries, between the names of h= and
// inside b=, where RFC 6376 allows folding whitespace, and the header hash
// is computed over the field exactly as emitted (with b= empty), so the
// folding cannot differ between what is signed and what is sent.
func (k *Key) signReference(msg []byte) ([]byte, error) {
	header, body, ok := refSplitMessage(msg)
	if !ok {
		return nil, errors.New("dkim sign: message has no end of header (CRLF CRLF)")
	}
	fields := refParseFields(header)
	present := map[string]bool{}
	for _, f := range fields {
		present[f.name] = true
	}
	if !present["from"] {
		return nil, errors.New("dkim sign: message has no From field")
	}
	names := make([]string, 0, len(SignedHeaders)+1)
	for _, h := range SignedHeaders {
		if present[strings.ToLower(h)] {
			names = append(names, h)
		}
	}
	names = append(names, "From") // over-signed: one more From than the message has

	bh := sha256.Sum256(refRelaxedBody(body))
	var atoms []refAtom
	for _, tag := range []string{
		"v=1", "a=" + k.algorithm, "c=relaxed/relaxed", "d=" + k.domain, "s=" + k.selector,
		"t=" + strconv.FormatInt(k.now().Unix(), 10),
	} {
		atoms = append(atoms, refAtom{text: tag + ";", sep: " "})
	}
	for i, n := range names {
		a := refAtom{text: n + ":"}
		if i == 0 {
			a = refAtom{text: "h=" + n + ":", sep: " "}
		}
		if i == len(names)-1 {
			a.text = strings.TrimSuffix(a.text, ":") + ";"
		}
		atoms = append(atoms, a)
	}
	atoms = append(atoms,
		refAtom{text: "bh=" + base64.StdEncoding.EncodeToString(bh[:]) + ";", sep: " "},
		refAtom{text: "b=", sep: " "})
	unsigned, col := refFold("DKIM-Signature:", atoms)

	// The header hash: the signed fields, bottom-most instance first for
	// repeated names (RFC 6376 section 5.4.2), then this field with b=
	// empty and without its CRLF.
	h := sha256.New()
	used := map[int]bool{}
	for _, n := range names {
		if i := refLastUnused(fields, strings.ToLower(n), used); i >= 0 {
			used[i] = true
			h.Write(refRelaxedHeader(fields[i].raw))
			h.Write([]byte("\r\n"))
		}
	}
	h.Write(refRelaxedHeader(unsigned))
	digest := h.Sum(nil)

	var sig []byte
	var err error
	switch key := k.signer.(type) {
	case ed25519.PrivateKey:
		sig = ed25519.Sign(key, digest) // RFC 8463: Ed25519 over the SHA-256 hash
	case *rsa.PrivateKey:
		sig, err = rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest)
	default:
		err = fmt.Errorf("%T keys are not supported", k.signer)
	}
	if err != nil {
		return nil, fmt.Errorf("dkim sign with %s (selector %s): %w", k.domain, k.selector, err)
	}

	var out bytes.Buffer
	out.Grow(len(unsigned) + 2*len(sig) + len(msg))
	out.WriteString(unsigned)
	b64 := base64.StdEncoding.EncodeToString(sig)
	for len(b64) > 0 {
		room := maxLineLength - col
		if room < 1 {
			out.WriteString("\r\n ")
			col, room = 1, maxLineLength-1
		}
		n := min(room, len(b64))
		out.WriteString(b64[:n])
		col += n
		b64 = b64[n:]
	}
	out.WriteString("\r\n")
	out.Write(msg)
	return out.Bytes(), nil
}

// atom is an unbreakable piece of a folded field; sep is what separates
// it from the previous piece when both fit on one line.
type refAtom struct{ text, sep string }

// fold lays atoms out after name, starting a continuation line (CRLF and a
// space) before an atom that would end past maxLineLength. It returns the
// field and the column its last line ends at.
func refFold(name string, atoms []refAtom) (string, int) {
	var b strings.Builder
	b.WriteString(name)
	col := len(name)
	for _, a := range atoms {
		if col > 1 && col+len(a.sep)+len(a.text) > maxLineLength {
			b.WriteString("\r\n ")
			col = 1
		} else {
			b.WriteString(a.sep)
			col += len(a.sep)
		}
		b.WriteString(a.text)
		col += len(a.text)
	}
	return b.String(), col
}

// field is one header field: its lower-cased name and its raw text,
// continuation lines included, without the final CRLF.
type refField struct{ name, raw string }

// parseFields splits a header block (ending in CRLF) into its fields;
// lines that are neither a field nor a continuation are skipped.
func refParseFields(header []byte) []refField {
	var out []refField
	for line := range strings.SplitSeq(string(header), "\r\n") {
		if line == "" {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if len(out) > 0 {
				out[len(out)-1].raw += "\r\n" + line
			}
			continue
		}
		name, _, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		out = append(out, refField{name: strings.ToLower(strings.TrimRight(name, " \t")), raw: line})
	}
	return out
}

// lastUnused returns the index of the bottom-most field named name not in
// used, -1 if none.
func refLastUnused(fields []refField, name string, used map[int]bool) int {
	for i := len(fields) - 1; i >= 0; i-- {
		if fields[i].name == name && !used[i] {
			return i
		}
	}
	return -1
}

// relaxedHeader canonicalizes one field (RFC 6376 section 3.4.2): name in
// lower case, folding removed, runs of whitespace made one space, and
// whitespace around the value and before the colon dropped.
func refRelaxedHeader(raw string) []byte {
	name, value, _ := strings.Cut(raw, ":")
	value = strings.ReplaceAll(value, "\r\n", "")
	var b bytes.Buffer
	b.WriteString(strings.ToLower(strings.TrimRight(name, " \t")))
	b.WriteByte(':')
	b.Write(refCollapseWSP([]byte(strings.Trim(value, " \t"))))
	return b.Bytes()
}

// relaxedBody canonicalizes a body (RFC 6376 section 3.4.4): runs of
// whitespace within lines made one space, whitespace at line ends and
// empty lines at the end dropped, and a final CRLF ensured on a body that
// is not empty.
func refRelaxedBody(body []byte) []byte {
	lines := bytes.Split(body, []byte("\r\n"))
	out := make([]byte, 0, len(body)+2)
	pendingEmpty := 0
	for i, line := range lines {
		line = bytes.TrimRight(refCollapseWSP(line), " ")
		if i == len(lines)-1 && len(line) == 0 {
			break // what follows the last CRLF
		}
		if len(line) == 0 {
			pendingEmpty++
			continue
		}
		for ; pendingEmpty > 0; pendingEmpty-- {
			out = append(out, '\r', '\n')
		}
		out = append(out, line...)
		out = append(out, '\r', '\n')
	}
	return out
}

// collapseWSP replaces each run of spaces and tabs in s with one space.
func refCollapseWSP(s []byte) []byte {
	out := make([]byte, 0, len(s))
	inWSP := false
	for _, c := range s {
		if c == ' ' || c == '\t' {
			if !inWSP {
				out = append(out, ' ')
			}
			inWSP = true
			continue
		}
		inWSP = false
		out = append(out, c)
	}
	return out
}

// splitMessage splits msg after its header's final CRLF; body is what
// follows the empty line.
func refSplitMessage(msg []byte) (header, body []byte, ok bool) {
	i := bytes.Index(msg, []byte("\r\n\r\n"))
	if i < 0 {
		return nil, nil, false
	}
	return msg[:i+2], msg[i+4:], true
}

// FuzzSignMatchesReference holds Sign to the signer it replaced, byte for
// byte, for any message (the clock fixed, Ed25519 signatures being
// deterministic).
func FuzzSignMatchesReference(f *testing.F) {
	for _, s := range []string{
		"From: a@example.com\r\n\r\n",
		"From: a@example.com\r\nSubject: x\r\n y\r\n\r\nbody \t \r\n\r\n",
		"FROM : A <a@example.com>\r\nto:\t b@x \r\n\tc@y\r\nbroken line\r\n\tcont\r\n\tcont2\r\nsubject: \r\n\r\n\r\n  \r\nx  y\t\r\n\r\n \t\r\n",
		"From: a\r\nFrom: b\r\nDate: d\r\nMessage-ID: <m>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\nno final crlf",
		"X\u212a: v\r\nFrom: a\r\n\r\n",
		"no header end",
	} {
		f.Add([]byte(s))
	}
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		f.Fatal(err)
	}
	k, err := newKey("example.org", "ed1", priv, func() time.Time { return time.Unix(1796137200, 0) })
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		got, gotErr := k.Sign(msg)
		want, wantErr := k.signReference(msg)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !bytes.Equal(got, want) {
			t.Fatalf("Sign(%q):\n got  %q, %v\n want %q, %v", msg, got, gotErr, want, wantErr)
		}
	})
}

// TestSignAllocations bounds what Sign allocates beyond the signed message
// it returns: the pooled buffers are reused.
func TestSignAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers at random")
	}
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := newKey("example.org", "ed1", priv, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("From: a@example.org\r\nTo: b@example.test\r\nSubject: s\r\nDate: d\r\nMessage-ID: <m@x>\r\nMIME-Version: 1.0\r\n" +
		"Content-Type: text/plain\r\n\r\n" + strings.Repeat("a line of  text\t \r\n", 60))
	if _, err := k.Sign(msg); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = k.Sign(msg) }); n > 6 {
		t.Errorf("Sign allocated %.0f times per message, want at most 6", n)
	} else {
		t.Logf("%.0f allocations per message", n)
	}
}
