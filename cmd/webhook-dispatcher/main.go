// Command webhook-dispatcher sends the events of mail.events to operators'
// HTTP endpoints as signed webhooks (Standard Webhooks), redelivering failed
// deliveries with backoff and dead-lettering what an endpoint gives up on
// to mail.webhooks.dlq. The endpoints are read from the file
// POSTLINE_WEBHOOKS_FILE; each names the environment variable holding its
// secret. Run one or more replicas with the same consumer group; run
// `webhook-dispatcher -h` for the settings.
package main

import "github.com/postline/postline/internal/supervisor"

func main() { supervisor.Main("webhook-dispatcher", run) }
