package inbound

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestReadHead(t *testing.T) {
	errBroken := errors.New("connection broken")
	tests := []struct {
		name     string
		size     int   // bytes in the input
		n        int64 // bytes held at most
		wantHead int
		wantCut  bool
		err      error // the reader fails with it after size bytes
	}{
		{name: "empty", size: 0, n: 1024, wantHead: 0},
		{name: "under the cap", size: 1000, n: 1024, wantHead: 1000},
		{name: "at the cap", size: 1024, n: 1024, wantHead: 1024},
		{name: "one over the cap", size: 1025, n: 1024, wantHead: 1024, wantCut: true},
		{name: "far over the cap", size: 3 << 20, n: 256 << 10, wantHead: 256 << 10, wantCut: true},
		{name: "cap between growth steps", size: 100 << 10, n: 70 << 10, wantHead: 70 << 10, wantCut: true},
		{name: "error in the held part", size: 500, n: 1024, err: errBroken},
		{name: "error in the dropped part", size: 5000, n: 1024, err: errBroken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := make([]byte, tt.size)
			for i := range in {
				in[i] = byte('a' + i%26)
			}
			var r io.Reader = bytes.NewReader(in)
			if tt.err != nil {
				r = io.MultiReader(r, iotest.ErrReader(tt.err))
			}
			// One byte at a time and in odd chunks: the result must not
			// depend on how the data arrives.
			for _, rd := range []io.Reader{r, iotest.OneByteReader(bytes.NewReader(in)), iotest.HalfReader(bytes.NewReader(in))} {
				if tt.err != nil && rd != r {
					continue
				}
				head, cut, err := readHead(rd, tt.n)
				if tt.err != nil {
					if !errors.Is(err, tt.err) || head != nil {
						t.Fatalf("readHead = %d bytes, %v; want nil, %v", len(head), err, tt.err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(head) != tt.wantHead || cut != tt.wantCut || !bytes.Equal(head, in[:tt.wantHead]) {
					t.Errorf("readHead = %d bytes (equal to the start: %t), cut %t; want %d, cut %t",
						len(head), bytes.Equal(head, in[:min(len(in), len(head))]), cut, tt.wantHead, tt.wantCut)
				}
				if int64(cap(head)) > tt.n {
					t.Errorf("cap(head) = %d, over the cap %d", cap(head), tt.n)
				}
			}
		})
	}
}
