package templatestore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// hashDomain prefixes the hashed encoding, so a later change of the encoding
// can change the prefix instead of colliding with old hashes.
const hashDomain = "postline-template-content-v1\x00"

// ContentHash returns the SHA-256 of d's versioned content (kind, subject,
// bodies, layout and the canonical form of its JSON documents), the hash Push
// compares with the latest version's. Metadata (description, default locale,
// CreatedBy) is not part of it. JSON documents are hashed in a canonical form
// (object keys sorted, insignificant whitespace dropped), so reformatting a
// document does not change the hash; an empty document and JSON null are
// both "none".
func ContentHash(d Draft) ([]byte, error) {
	d, err := d.validate()
	if err != nil {
		return nil, err
	}
	return contentHash(d)
}

func contentHash(d Draft) ([]byte, error) {
	h := sha256.New()
	h.Write([]byte(hashDomain))
	var n [binary.MaxVarintLen64]byte
	field := func(b []byte) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	for _, s := range []string{d.Kind, d.Subject, d.TextBody, d.HTMLBody, d.Layout} {
		field([]byte(s))
	}
	for _, doc := range []json.RawMessage{d.DataSchema, d.Locales, d.SampleData} {
		c, err := canonicalJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("hash template %s: %w", d.Name, err)
		}
		field(c)
	}
	return h.Sum(nil), nil
}

// canonicalJSON returns doc re-encoded with sorted object keys, no
// insignificant whitespace and numbers as written; nil for an empty document
// or JSON null.
func canonicalJSON(doc json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("canonical JSON: data after the document")
	}
	if v == nil {
		return nil, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
