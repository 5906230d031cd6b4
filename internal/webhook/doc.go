// Package webhook owns delivering mail.events to operators' HTTP endpoints
// as signed webhooks (Standard Webhooks: webhook-id, webhook-timestamp and
// webhook-signature headers, HMAC-SHA256 over "id.timestamp.body").
//
// The endpoints come from a file (LoadEndpoints): each has an id, a URL, the
// name of the environment variable that holds its secret, and filters on
// event type and tenant. The Dispatcher consumes the events topic as a
// consumer group and POSTs every event, exactly as it was published, to
// each endpoint whose filters match. Each endpoint has its own bounded
// backlog, so an endpoint that is down delays no other; when a backlog is
// full, consumption waits (nothing is dropped). A failed attempt is redelivered
// with exponential backoff and jitter; a 410 Gone, or attempts or age used
// up, dead-letters the event for that endpoint (the dead-letter topic,
// mail.webhooks.dlq, gets the event with headers naming the endpoint, the
// reason, the last status and the attempts). A record is marked done only
// once every matching endpoint has delivered or dead-lettered it, so a
// crash delivers again: delivery is at least once, and the webhook-id (the
// event ID) lets receivers drop copies. Order is not kept: redeliveries overtake.
//
// Secrets never reach logs, metrics or errors; URLs are logged without
// user info or query.
package webhook
