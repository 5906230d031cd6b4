package consumer

import (
	"fmt"
	"testing"
)

// trackerOp is one step applied to a tracker in a table test.
type trackerOp struct {
	kind       string
	offset     int64
	wantOK     bool
	wantCommit int64 // expected commit point after the step; -1 = none yet
	wantPend   int
}

func reg(off int64, ok bool, commit int64, pend int) trackerOp {
	return trackerOp{kind: "reg", offset: off, wantOK: ok, wantCommit: commit, wantPend: pend}
}

func done(off int64, ok bool, commit int64, pend int) trackerOp {
	return trackerOp{kind: "done", offset: off, wantOK: ok, wantCommit: commit, wantPend: pend}
}

func unreg(off int64, ok bool, commit int64, pend int) trackerOp {
	return trackerOp{kind: "unreg", offset: off, wantOK: ok, wantCommit: commit, wantPend: pend}
}

func TestTracker(t *testing.T) {
	tests := []struct {
		name string
		ops  []trackerOp
	}{
		{
			name: "in order",
			ops: []trackerOp{
				reg(0, true, -1, 1), reg(1, true, -1, 2), reg(2, true, -1, 3),
				done(0, true, 1, 2), done(1, true, 2, 1), done(2, true, 3, 0),
			},
		},
		{
			name: "out of order waits for the prefix",
			ops: []trackerOp{
				reg(10, true, -1, 1), reg(11, true, -1, 2), reg(12, true, -1, 3), reg(13, true, -1, 4),
				done(12, true, -1, 3), done(13, true, -1, 2), done(11, true, -1, 1),
				done(10, true, 14, 0),
			},
		},
		{
			name: "a hole in the middle holds the commit point",
			ops: []trackerOp{
				reg(0, true, -1, 1), reg(1, true, -1, 2), reg(2, true, -1, 3),
				done(0, true, 1, 2), done(2, true, 1, 1),
				reg(3, true, 1, 2), done(3, true, 1, 1),
				done(1, true, 4, 0),
			},
		},
		{
			name: "offset gaps (compaction, transaction markers)",
			ops: []trackerOp{
				reg(5, true, -1, 1), reg(7, true, -1, 2), reg(8, true, -1, 3), reg(20, true, -1, 4),
				done(5, true, 7, 3), // the next live offset, skipping the gap
				done(8, true, 7, 2),
				done(7, true, 20, 1),
				done(20, true, 21, 0),
			},
		},
		{
			name: "done of unknown, repeated and committed offsets is ignored",
			ops: []trackerOp{
				done(3, false, -1, 0),
				reg(3, true, -1, 1), reg(4, true, -1, 2),
				done(99, false, -1, 2), done(2, false, -1, 2),
				done(4, true, -1, 1), done(4, false, -1, 1),
				done(3, true, 5, 0), done(3, false, 5, 0), done(4, false, 5, 0),
			},
		},
		{
			name: "register must increase",
			ops: []trackerOp{
				reg(-1, false, -1, 0),
				reg(5, true, -1, 1), reg(5, false, -1, 1), reg(4, false, -1, 1),
				done(5, true, 6, 0), reg(5, false, 6, 0), reg(6, true, 6, 1),
			},
		},
		{
			name: "unregister only the undone tail",
			ops: []trackerOp{
				reg(0, true, -1, 1), reg(1, true, -1, 2), reg(2, true, -1, 3),
				unreg(1, false, -1, 3), // not the tail
				done(0, true, 1, 2),
				unreg(2, true, 1, 1),
				done(1, true, 2, 0),
				unreg(1, false, 2, 0), // done and retired
				reg(2, true, 2, 1),    // the fetcher may register it again
			},
		},
		{
			name: "unregister of the only pending message after a retired prefix",
			ops: []trackerOp{
				reg(0, true, -1, 1), done(0, true, 1, 0),
				reg(1, true, 1, 1), unreg(1, true, 1, 0),
				reg(1, true, 1, 1), done(1, true, 2, 0),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker()
			for i, op := range tt.ops {
				var ok bool
				switch op.kind {
				case "reg":
					ok = tr.Register(op.offset)
				case "done":
					ok = tr.Done(op.offset)
				case "unreg":
					ok = tr.Unregister(op.offset)
				}
				step := fmt.Sprintf("step %d (%s %d)", i, op.kind, op.offset)
				if ok != op.wantOK {
					t.Fatalf("%s: returned %v, want %v", step, ok, op.wantOK)
				}
				got, has := tr.CommitPoint()
				if !has {
					got = -1
				}
				if got != op.wantCommit {
					t.Fatalf("%s: commit point %d, want %d", step, got, op.wantCommit)
				}
				if p := tr.Pending(); p != op.wantPend {
					t.Fatalf("%s: pending %d, want %d", step, p, op.wantPend)
				}
			}
		})
	}
}

// TestTrackerCommitPointMonotonic marks a long run done in a scrambled order
// and checks that the commit point never decreases and ends past the last
// offset, and that the queue is compacted along the way.
func TestTrackerCommitPointMonotonic(t *testing.T) {
	const n = 10_000
	tr := newTracker()
	for off := int64(0); off < n; off++ {
		if !tr.Register(off * 2) { // even offsets only: every other one is a gap
			t.Fatalf("register %d refused", off*2)
		}
	}
	prev := int64(-1)
	// Mark done in blocks of 100, each block in reverse.
	for block := int64(0); block < n; block += 100 {
		for off := block + 99; off >= block; off-- {
			if !tr.Done(off * 2) {
				t.Fatalf("done %d refused", off*2)
			}
			cp, ok := tr.CommitPoint()
			if !ok {
				continue
			}
			if cp < prev {
				t.Fatalf("commit point went back from %d to %d", prev, cp)
			}
			prev = cp
		}
		if cap(tr.queue) > 2*n {
			t.Fatalf("queue capacity %d grew past %d", cap(tr.queue), 2*n)
		}
	}
	if cp, _ := tr.CommitPoint(); cp != 2*(n-1)+1 {
		t.Fatalf("final commit point %d, want %d", cp, 2*(n-1)+1)
	}
	if len(tr.queue)-tr.head != 0 || tr.Pending() != 0 {
		t.Fatalf("queue not empty: len %d head %d pending %d", len(tr.queue), tr.head, tr.Pending())
	}
}
