// Package e2e holds the end-to-end tests: they build the real worker,
// retry-scheduler and postctl binaries, run them as separate processes
// against the real stack (Kafka, PostgreSQL, and SMTP relays over TCP: a
// Mailpit per test and scripted go-smtp servers for fault injection) and
// prove the guarantees from the outside: each Message-ID is sent once, bad
// input is dead-lettered with a reason, offsets are committed only for
// recorded fates, kill -9, SIGTERM and a Postgres outage lose nothing
// (tests without the failure_ prefix), and failures are routed by class
// through delay tiers, limits, shared circuit breakers, failover, pausing
// and DLQ replay (failure_*_test.go).
//
// The package has no non-test code besides this comment. The tests skip
// under `go test -short`; run them with the stack up (scripts/stack.sh up):
//
//	go test -race -count=1 -v ./test/e2e/
//
// Faults are injected in front of the real services, never by faking them:
// processes are killed with signals, and Postgres is cut by a TCP proxy that
// sits between the worker and the real database.
package e2e
