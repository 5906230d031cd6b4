package delivery

import "testing"

func TestSlicePoolLendsClearedSlicesOfTheLengthAsked(t *testing.T) {
	var p slicePool[string]
	for _, tc := range []struct {
		name string
		n    int
	}{{"empty", 0}, {"small", 3}, {"grows", 64}, {"shrinks", 2}, {"again", 64}} {
		t.Run(tc.name, func(t *testing.T) {
			v := p.get(tc.n)
			if len(*v) != tc.n {
				t.Fatalf("len = %d, want %d", len(*v), tc.n)
			}
			for i, s := range (*v)[:cap(*v)] {
				if s != "" {
					t.Fatalf("element %d of a lent slice holds %q from an earlier batch", i, s)
				}
			}
			for i := range *v {
				(*v)[i] = "rcpt@example.com"
			}
			p.put(v)
			if len(*v) != 0 {
				t.Fatalf("len after put = %d, want 0", len(*v))
			}
		})
	}
}
