package consumer

import "sort"

// tracker follows the messages of one partition from fetch to done and says
// how far the partition may be committed. It is a pure value type: the caller
// serialises access to it.
//
// Offsets are registered in fetch order (strictly increasing, gaps allowed:
// compaction and transaction markers leave holes). They may be marked done in
// any order. The commit point is the offset of the first registered message
// that is not done, or one past the last registered offset when every
// message is done; it never moves backwards.
type tracker struct {
	queue   []trackedOffset // registered offsets not yet retired, ascending
	head    int             // index of the first live entry in queue
	pending int             // entries in queue[head:] not yet done
	last    int64           // last registered offset; -1 before the first
	next    int64           // offset after the last retired (done) prefix
	retired bool            // whether any prefix has been retired
}

type trackedOffset struct {
	offset int64
	done   bool
}

func newTracker() *tracker {
	return &tracker{last: -1, next: -1}
}

// Register records a fetched offset. It returns false, and records nothing,
// when offset is not above every offset registered before.
func (t *tracker) Register(offset int64) bool {
	if offset < 0 || offset <= t.last {
		return false
	}
	t.queue = append(t.queue, trackedOffset{offset: offset})
	t.last = offset
	t.pending++
	return true
}

// Unregister removes offset if it is the last one registered and is not done:
// a message that was fetched but never handed to anyone. It reports whether
// it removed it.
func (t *tracker) Unregister(offset int64) bool {
	n := len(t.queue)
	if n == t.head || t.queue[n-1].offset != offset || t.queue[n-1].done {
		return false
	}
	t.queue = t.queue[:n-1]
	t.pending--
	t.last = -1
	if n-1 > t.head {
		t.last = t.queue[n-2].offset
	} else if t.retired {
		t.last = t.next - 1
	}
	t.compact()
	return true
}

// Done marks offset as finished. It returns false for offsets that were never
// registered, were already done or were already committed past.
func (t *tracker) Done(offset int64) bool {
	live := t.queue[t.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].offset >= offset })
	if i == len(live) || live[i].offset != offset || live[i].done {
		return false
	}
	live[i].done = true
	t.pending--
	for t.head < len(t.queue) && t.queue[t.head].done {
		t.next = t.queue[t.head].offset + 1
		t.retired = true
		t.head++
	}
	t.compact()
	return true
}

// CommitPoint returns the offset to commit (the next offset a new owner of
// the partition should read) and whether any message has been finished yet.
func (t *tracker) CommitPoint() (int64, bool) {
	if !t.retired {
		return 0, false
	}
	if t.head < len(t.queue) {
		return t.queue[t.head].offset, true
	}
	return t.next, true
}

// Pending returns the number of registered offsets that are not done.
func (t *tracker) Pending() int {
	return t.pending
}

// compact drops retired entries once they make up half the backing array, so
// a long-lived partition does not grow its queue without bound.
func (t *tracker) compact() {
	if t.head == len(t.queue) {
		t.queue = t.queue[:0]
		t.head = 0
		return
	}
	if t.head > 64 && t.head*2 >= len(t.queue) {
		n := copy(t.queue, t.queue[t.head:])
		t.queue = t.queue[:n]
		t.head = 0
	}
}
