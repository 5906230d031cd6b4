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
