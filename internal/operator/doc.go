// Package operator owns the operator console's people: accounts with a
// role ([RoleViewer] reads, [RoleOperator] also acts) and an argon2id
// password hash; sessions kept server-side in PostgreSQL, of which only a
// hash of the token is stored, each with its CSRF token; the login
// throttle, shared by every console replica through PostgreSQL, that
// delays and then refuses an account or a client address after wrong
// passwords, for longer after each; and the audit log of what operators
// did and looked at.
//
// It never logs or returns a password, and returns a session token only
// once, to the login that made it.
package operator
