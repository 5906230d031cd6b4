// Command console serves the operator console: a web interface, and the
// same reads as JSON under /api/v1, to find mail by Message-ID, recipient,
// tenant, state, reason and time, read a mail's whole life, search, add
// and remove suppressions, and read the audit log of what operators did.
// Accounts are made with `postctl operators add`; the console keeps its
// sessions, login throttle and audit log in the workers' PostgreSQL. It
// serves plain HTTP on loopback only: anywhere else it needs a TLS
// certificate. Run `console -h` for the settings.
package main

import "github.com/postline/postline/internal/supervisor"

func main() { supervisor.Main("console", run) }
