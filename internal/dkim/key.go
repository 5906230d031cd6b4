package dkim

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// MinRSABits is the smallest RSA key Load accepts: RFC 8301 requires at
// least 1024 bits of verifiers, and large mailbox providers treat keys
// below 2048 bits as weak.
const MinRSABits = 2048

// maxKeyFileBytes bounds what Load reads from a key file: a PEM private
// key is a few kilobytes; anything larger is not one.
const maxKeyFileBytes = 64 << 10

// The signature algorithms (a= tag).
const (
	AlgorithmRSA     = "rsa-sha256"
	AlgorithmEd25519 = "ed25519-sha256"
)

// SignedHeaders are the header fields a signature covers when the message
// carries them, in this order: the ones RFC 6376 section 5.4.1 advises
// signing plus the MIME and one-click unsubscribe fields. From is also
// signed once more than it occurs (over-signed).
var SignedHeaders = []string{
	"From", "Reply-To", "Subject", "Date", "To", "Cc", "Message-ID",
	"MIME-Version", "Content-Type", "Content-Transfer-Encoding",
	"List-Unsubscribe", "List-Unsubscribe-Post",
}

// Keyring is the loaded signing keys by domain. It is read-only after
// Load and safe for concurrent use.
type Keyring struct {
	keys    map[string]*Key
	domains []string // in configuration order
}

// Key is one domain's loaded signing key. It is safe for concurrent use.
type Key struct {
	domain, selector string
	signer           crypto.Signer // *rsa.PrivateKey or ed25519.PrivateKey
	algorithm        string
	now              func() time.Time
}

// Load reads and checks every key of cfg (after WithDefaults and
// Validate). It fails, naming the domain and file, on a file it cannot
// read, one without a PEM private key, a key it cannot parse, an RSA key
// below MinRSABits bits or a key type other than RSA and Ed25519.
func Load(cfg Config) (*Keyring, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kr := &Keyring{keys: make(map[string]*Key, len(cfg.Keys))}
	for _, kc := range cfg.Keys {
		signer, err := readKeyFile(kc.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("dkim: key of %s (selector %s, file %s): %w", kc.Domain, kc.Selector, kc.KeyFile, err)
		}
		k, err := newKey(kc.Domain, kc.Selector, signer, cfg.NowFunc)
		if err != nil {
			return nil, fmt.Errorf("dkim: key of %s (selector %s, file %s): %w", kc.Domain, kc.Selector, kc.KeyFile, err)
		}
		kr.keys[kc.Domain] = k
		kr.domains = append(kr.domains, kc.Domain)
	}
	return kr, nil
}

func readKeyFile(path string) (crypto.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	defer f.Close() //nolint:errcheck // read-only
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	if len(data) > maxKeyFileBytes {
		return nil, fmt.Errorf("key file is larger than %d bytes: not a PEM private key", maxKeyFileBytes)
	}
	return ParsePrivateKey(data)
}

// ParsePrivateKey parses the first PEM block of data as a DKIM private
// key: PKCS#1 RSA or PKCS#8 RSA or Ed25519, with an RSA key of at least
// MinRSABits bits. Its errors never quote the data.
func ParsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		if _, encrypted := block.Headers["DEK-Info"]; encrypted {
			return nil, errors.New("encrypted PEM keys are not supported")
		}
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "ENCRYPTED PRIVATE KEY":
		return nil, errors.New("encrypted PEM keys are not supported")
	case "EC PRIVATE KEY":
		return nil, errors.New("ECDSA keys are not supported by DKIM: use RSA or Ed25519")
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key (want \"RSA PRIVATE KEY\" or \"PRIVATE KEY\")", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", block.Type, err)
	}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if bits := k.N.BitLen(); bits < MinRSABits {
			return nil, fmt.Errorf("RSA key has %d bits, at least %d are required", bits, MinRSABits)
		}
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("%s keys are not supported by DKIM: use RSA or Ed25519", keyTypeName(key))
	}
}

func keyTypeName(key any) string {
	switch fmt.Sprintf("%T", key) {
	case "*ecdsa.PrivateKey":
		return "ECDSA"
	case "*ecdh.PrivateKey":
		return "ECDH"
	}
	return fmt.Sprintf("%T", key)
}

func newKey(domain, selector string, signer crypto.Signer, now func() time.Time) (*Key, error) {
	k := &Key{domain: domain, selector: selector, signer: signer, now: now}
	switch signer.(type) {
	case *rsa.PrivateKey:
		k.algorithm = AlgorithmRSA
	case ed25519.PrivateKey:
		k.algorithm = AlgorithmEd25519
	default:
		return nil, fmt.Errorf("%s keys are not supported by DKIM: use RSA or Ed25519", keyTypeName(signer))
	}
	// Sign once now, so a key that cannot sign fails at start, not on
	// the first message.
	if _, err := k.Sign([]byte("From: check@" + domain + "\r\n\r\n")); err != nil {
		return nil, fmt.Errorf("test signature: %w", err)
	}
	return k, nil
}

// For returns the key of domain, the domain of a From address: an exact,
// case-insensitive match (a trailing dot ignored), never a parent domain's
// key. A nil Keyring has no keys.
func (kr *Keyring) For(domain string) (*Key, bool) {
	if kr == nil {
		return nil, false
	}
	k, ok := kr.keys[canonicalDomain(domain)]
	return k, ok
}

// Keys returns the keys in configuration order.
func (kr *Keyring) Keys() []*Key {
	if kr == nil {
		return nil
	}
	out := make([]*Key, len(kr.domains))
	for i, d := range kr.domains {
		out[i] = kr.keys[d]
	}
	return out
}

// Sign signs msg with the key of domain, when there is one: it returns
// the message with a DKIM-Signature field prepended and true, or msg
// unchanged and false when the keyring has no key for domain.
func (kr *Keyring) Sign(domain string, msg []byte) ([]byte, bool, error) {
	return kr.AppendSign(nil, domain, msg)
}

// AppendSign is Sign appending the signed message to dst (see
// Key.AppendSign); msg comes back as it is, dst untouched, when the
// keyring has no key for domain.
func (kr *Keyring) AppendSign(dst []byte, domain string, msg []byte) ([]byte, bool, error) {
	k, ok := kr.For(domain)
	if !ok {
		return msg, false, nil
	}
	signed, err := k.AppendSign(dst, msg)
	if err != nil {
		return nil, true, err
	}
	return signed, true, nil
}

// Domain returns the signing domain (d=), in lower case.
func (k *Key) Domain() string { return k.domain }

// Selector returns the selector (s=).
func (k *Key) Selector() string { return k.selector }

// Algorithm returns the signature algorithm (a=): AlgorithmRSA or
// AlgorithmEd25519.
func (k *Key) Algorithm() string { return k.algorithm }

// Public returns the public key.
func (k *Key) Public() crypto.PublicKey { return k.signer.Public() }

// RecordName returns the DNS name the key is published under:
// <selector>._domainkey.<domain>.
func (k *Key) RecordName() string { return k.selector + "._domainkey." + k.domain }

// TXTRecord returns the value of the key's DNS TXT record,
// "v=DKIM1; k=rsa; p=<base64 SubjectPublicKeyInfo>" for RSA and
// "v=DKIM1; k=ed25519; p=<base64 raw key>" for Ed25519 (RFC 8463).
func (k *Key) TXTRecord() string {
	rec, err := TXTRecord(k.Public())
	if err != nil {
		// Load accepted only RSA and Ed25519 keys, which TXTRecord takes.
		panic("dkim: " + err.Error())
	}
	return rec
}

// ZoneRecord returns the key's record as a zone file line, its value split
// into the 255-byte character strings DNS TXT records are made of.
func (k *Key) ZoneRecord() string {
	rec := k.TXTRecord()
	var parts []string
	for len(rec) > 255 {
		parts = append(parts, strconvQuote(rec[:255]))
		rec = rec[255:]
	}
	parts = append(parts, strconvQuote(rec))
	return k.RecordName() + ". IN TXT ( " + strings.Join(parts, " ") + " )"
}

// strconvQuote quotes a record string; its bytes are base64, letters,
// digits, "=", ";" and spaces, none of which need escaping.
func strconvQuote(s string) string { return `"` + s + `"` }

// TXTRecord returns the DNS TXT record value publishing pub, an RSA or
// Ed25519 public key.
func TXTRecord(pub crypto.PublicKey) (string, error) {
	switch p := pub.(type) {
	case *rsa.PublicKey:
		der, err := x509.MarshalPKIXPublicKey(p)
		if err != nil {
			return "", fmt.Errorf("marshal RSA public key: %w", err)
		}
		return "v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(der), nil
	case ed25519.PublicKey:
		return "v=DKIM1; k=ed25519; p=" + base64.StdEncoding.EncodeToString(p), nil
	}
	return "", fmt.Errorf("%T keys are not supported by DKIM", pub)
}
