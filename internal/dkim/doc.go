// Package dkim owns the DKIM keys of outgoing mail (RFC 6376): it parses
// the signing-key setting (ParseKeys), loads and checks the PEM private
// keys it names (Load), picks the key for a From address's domain
// (Keyring.For), signs rendered messages with it (Key.Sign, Keyring.Sign)
// and prints the DNS TXT record that publishes each key (Key.TXTRecord,
// Key.ZoneRecord).
//
// Keys are RSA of at least MinRSABits bits (rsa-sha256) or Ed25519
// (ed25519-sha256, RFC 8463), in PKCS#1 ("RSA PRIVATE KEY") or PKCS#8
// ("PRIVATE KEY") PEM. Signatures use relaxed/relaxed canonicalization and
// cover the headers of SignedHeaders that the message carries, with From
// signed twice (over-signed) so a second From cannot be added without
// breaking the signature.
//
// A key is chosen by exact domain match only: mail from a subdomain is not
// signed with its parent's key. A key signs with its own d= domain, and a
// parent's d= only passes relaxed DMARC alignment; signing a subdomain with
// it silently would also sign domains nobody listed (for example customer
// subdomains). A domain that should be signed is listed, possibly with
// the same key file as another.
//
// Errors name the domain, selector and key file, never key material.
package dkim
