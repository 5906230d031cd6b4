// Package unsubscribe owns one-click unsubscribe (RFC 8058, with the
// mailto of RFC 2369 beside it): the token that names who asked, the
// List-Unsubscribe URIs the worker puts in each recipient's copy (Links),
// and taking an unsubscribe in at the bounce-receiver (Applier), over
// HTTPS (Handler) or by mail (the receiver's SMTP server hands it the
// token of an unsubscribe+<token> address).
//
// A token names one recipient of one mail: its tenant, stream, address,
// the mail's Message-ID, the recipient's index and the mail's life (so the
// unsubscribed event gets the ID event.NewLifeID gives it). It is signed
// with an HMAC-SHA256 under the return path keys (POSTLINE_RETURN_PATH_KEYS):
// the first key signs, every key verifies, so the keys rotate as the
// return paths' do. The HMAC covers a label of its own, so a return path
// token never verifies as an unsubscribe token, nor the other way round.
// The token is lower-case base32, safe in a URL path and in a local part
// whose case a server folds; it carries what it names rather than a
// reference to a row, so a link keeps working after the mail's row is
// purged.
//
// An unsubscribe is applied once: the address goes on the suppression list
// of the token's tenant and stream (reason unsubscribe) and an unsubscribed
// event is published. A token whose address is already suppressed that
// strongly on that stream changes nothing and publishes nothing (a repeated
// POST, a second click). A forged or malformed token changes nothing.
// Every request is counted by channel and result; neither the address nor
// the token is ever logged.
//
// The package decides nothing about which mail gets the headers: the
// worker's delivery pipeline does.
package unsubscribe
