// Command retry-scheduler re-injects retry copies of mail jobs from the delay
// topics (mail.retry.<tier>) into mail.jobs once they are due, with
// produce-then-commit, so a crash re-injects a copy twice at worst and never
// loses one. Run one or more replicas with the same consumer group; see the
// README for the settings (or run `retry-scheduler -h`).
package main

import "github.com/postline/postline/internal/supervisor"

func main() { supervisor.Main("retry-scheduler", run) }
