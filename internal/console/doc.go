// Package console is the operator console's HTTP server: server-rendered
// pages to find mail by Message-ID, recipient, tenant, state, reason and
// time, to read a mail's whole life, to search, add, remove and import
// suppressions, to list and re-drive dead letters, to watch, enable,
// disable and replay webhook endpoints, to watch the queues' lag, the dead
// letters by reason and the relays' breakers and rates, and to read the
// audit log; and those reads as JSON under /api/v1. It owns the web side of access: the session cookie, the
// CSRF check of every state-changing request, the role check of every
// action, an audit entry for every search, view and action, the security
// headers, and the rule that it serves plain HTTP on loopback only.
//
// Accounts, sessions, the login throttle and the audit log's storage are
// package operator's; mail is read through the MailReader it declares
// (internal/mailquery's Reader), suppressions through internal/suppression,
// dead letters through a Redriver (internal/redrive), webhook endpoints
// through a WebhookQueue (internal/webhook), the queues and relays through
// a FleetReader (internal/fleet).
//
// An action is a POST registered with Server.action (answered with a
// redirect) or Server.guarded (answered with a page: a count or a preview
// before its confirmation): it gets the session, CSRF and role checks and
// its audit entry from there. A re-drive runs in the background of the
// console process, one at a time, tracked in its memory.
package console
