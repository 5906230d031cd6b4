// Command bounce-receiver takes in what comes back after a relay took a
// mail: delivery status notifications and complaint reports sent to the
// per-recipient return paths of the bounce domain (an SMTP server: point the
// domain's MX here), and, when configured, the signed event webhooks of
// Amazon SES (through SNS) and Mailgun. Each report that verifies moves its
// recipient on, with an event on the events topic; hard bounces and
// complaints go on the suppression lists. It also takes the one-click
// unsubscribes of bulk mail (RFC 8058: the links under /unsubscribe/ on the
// hooks address, and mail to unsubscribe+<token>@<bounce domain>). Run it with the same return path
// keys and rules file as the workers; see docs/configuration.md for the
// settings (or run `bounce-receiver -h`).
package main

import "github.com/postline/postline/internal/supervisor"

func main() { supervisor.Main("bounce-receiver", run) }
