// Command worker consumes mail jobs from Kafka and delivers them over SMTP.
// Run several replicas with the same consumer group to scale out; see the
// README for the settings (or run `worker -h`).
package main

import "github.com/postline/postline/internal/supervisor"

func main() { supervisor.Main("worker", run) }
