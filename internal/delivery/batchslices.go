package delivery

import "sync"

// slicePool lends out the per-batch slices a claim or record round trip
// fills and hands to the store or the event stream, none of which keeps
// them after the call returns, so that a steady stream of batches reuses a
// few backing arrays instead of allocating one per batch. A slice is
// cleared when it comes back: what it held (addresses, error texts) must
// not outlive its batch. The zero value is ready to use.
type slicePool[T any] struct{ pool sync.Pool }

// get returns a slice of length n.
func (s *slicePool[T]) get(n int) *[]T {
	v, _ := s.pool.Get().(*[]T)
	if v == nil {
		v = new([]T)
	}
	if cap(*v) < n {
		*v = make([]T, n)
	}
	*v = (*v)[:n]
	return v
}

// put clears v and takes it back; v must not be used afterwards.
func (s *slicePool[T]) put(v *[]T) {
	clear((*v)[:cap(*v)])
	*v = (*v)[:0]
	s.pool.Put(v)
}
