// Package consumer owns reading Kafka topics (one, or several in one group,
// such as the delay topics) as a member of a consumer group and committing
// their offsets safely, per (topic, partition). It knows Kafka, not mail.
//
// Callers receive messages on Messages() and call MarkDone once a message's
// outcome is durably recorded; they never commit. The consumer commits, per
// owned partition, the offset after the longest prefix of done messages, only
// forwards, and only through the group generation that fetched the messages,
// so a commit after a rebalance is refused by the coordinator instead of
// moving an offset backwards (kafka.Reader with a GroupID does move it
// backwards: a message fetched before a rebalance and committed after it
// can set the committed offset back to where it was).
//
// Each generation of the group runs one fetcher per assigned partition and a
// committer, all started through kafka.Generation.Start, so the group does
// not join its next generation before they have drained and committed. When
// a generation ends (rebalance or shutdown) its fetchers stop fetching, wait
// up to Config.DrainTimeout for in-flight messages to be marked done, and the
// committer makes a final commit. MarkDone of a message whose generation has
// ended is ignored: its partition may belong to another member now, which
// reads it again from the last commit (delivery is at least once; the
// idempotency store absorbs the duplicates). On shutdown the generation, and
// its heartbeat, stay up while the partitions drain; the member leaves the
// group only after the final commit.
//
// Pause stops handing out messages without leaving the group: heartbeats,
// MarkDone and commits go on, so a caller that cannot make progress (every
// SMTP provider's circuit is open, say) holds its partitions instead of
// rebalancing them onto replicas that cannot either. Resume undoes it.
//
// The package does not decode payloads, retry, or publish anywhere.
package consumer
