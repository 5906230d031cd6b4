// Package fleet owns the operators' fleet views: what waits in the queues
// (the worker group's lag per partition of the jobs topic, and the retries
// waiting in each delay tier), the dead letters by reason over time, and
// each relay's circuit breaker with every worker's send control for it.
//
// It only reads, and returns plain values without formatting: postctl lag,
// relays and dlq stats print them, and the console's Operate pages show
// them, so each view is computed in one place. Queues reads Kafka (group
// descriptions and committed offsets), Relays reads PostgreSQL
// (postline_circuits and postline_relay_state) and DeadLetterHistogram reads
// the dead-letter topic through internal/redrive's listing. What each view
// derives from what it read (owners of partitions, totals, tiers, stale
// workers, fleet rates, buckets) is a pure function of the values read, so
// it is tested without the services.
package fleet
