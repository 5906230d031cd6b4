package job

import (
	"encoding/binary"
	"testing"
)

// FuzzByteMasks holds the word-at-a-time byte tests to the byte-at-a-time
// ones, byte by byte.
func FuzzByteMasks(f *testing.F) {
	f.Add(uint64(0x2022_5c3c_3e26_1f80), byte('"'))
	f.Add(uint64(0), byte(0))
	f.Add(^uint64(0), byte(0xff))
	f.Fuzz(func(t *testing.T, x uint64, c byte) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], x)
		n := c & 0x7f
		below, equal := bytesBelow(x, n), bytesEqual(x, c)
		for i, v := range b {
			if got := below>>(8*i+7)&1 == 1; got != (v < n) {
				t.Fatalf("bytesBelow(%#x, %#x), byte %d (%#x): %v", x, n, i, v, got)
			}
			if got := equal>>(8*i+7)&1 == 1; got != (v == c) {
				t.Fatalf("bytesEqual(%#x, %#x), byte %d (%#x): %v", x, c, i, v, got)
			}
		}
		if below&^0x8080808080808080 != 0 || equal&^0x8080808080808080 != 0 {
			t.Fatalf("bits besides the high ones: %#x %#x", below, equal)
		}
	})
}

// FuzzPlainStringRun holds the word-at-a-time run scanners (plainStringRun,
// and copyPlainRun, which copies the run as it scans it into a buffer with
// or without room) to a byte-at-a-time reading of the same run.
func FuzzPlainStringRun(f *testing.F) {
	f.Add([]byte(`p class=\"body\"`), 0)
	f.Add([]byte("caf\xc3\xa9 au lait\x1f"), 3)
	f.Add([]byte("abcdefgh\"ijklmnop"), 8)
	f.Add([]byte("\xff\xfe\\"), 1)
	f.Fuzz(func(t *testing.T, b []byte, room int) {
		want, wantHigh := 0, false
		for ; want < len(b) && b[want] >= ' ' && b[want] != '"' && b[want] != '\\'; want++ {
			wantHigh = wantHigh || b[want] >= 0x80
		}
		if n, high := plainStringRun(b); n != want || high != wantHigh {
			t.Fatalf("plainStringRun(%q) = %d, %v; want %d, %v", b, n, high, want, wantHigh)
		}
		prefix := []byte("xy")
		out := append(make([]byte, 0, len(prefix)+room&15), prefix...)
		out, n, seen := copyPlainRun(out[:cap(out)], len(prefix), b, 0)
		if n != want || (seen&swarHighs != 0) != wantHigh {
			t.Fatalf("copyPlainRun(%q) = %d, %#x; want %d, %v", b, n, seen, want, wantHigh)
		}
		if string(out[:len(prefix)+n]) != string(prefix)+string(b[:want]) {
			t.Fatalf("copyPlainRun(%q) copied %q", b, out[:len(prefix)+n])
		}
		if len(out) != cap(out) {
			t.Fatalf("copyPlainRun(%q) returns a length of %d, capacity %d", b, len(out), cap(out))
		}
	})
}
