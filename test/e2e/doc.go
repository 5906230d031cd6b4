// Package e2e holds the end-to-end tests of the worker: they build the real
// cmd/worker binary, run it as separate processes against the real stack
// (Kafka, PostgreSQL and a Mailpit SMTP server per test, all over TCP) and
// prove the delivery guarantees from the outside: each Message-ID is sent
// once, bad input is dead-lettered with a reason, offsets are committed only
// for recorded outcomes, and kill -9, SIGTERM and a Postgres outage lose
// nothing.
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
