// Package writertest owns the behaviour every Kafka writer of the module
// shares, as tests check it: [Run] is the suite a writer must pass (the
// dead-letter writer, the retry tiers' writer and the events writer run it
// on the local Kafka in their integration tests), and [Recorder] is the one
// in-memory stand-in for them ([DeadLetters], [Retries], [Events]), which
// passes the same suite.
//
// The rules: a batch is published in one call that returns once it is
// written, in order; an empty batch writes nothing; a batch with an item
// the writer refuses fails before anything of it is written; a call whose
// context has ended fails; concurrent calls are safe.
package writertest
