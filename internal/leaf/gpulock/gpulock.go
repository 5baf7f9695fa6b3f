package gpulock

import (
	"context"
	"sync"
)

// Set is a set of per-GPU locks. The zero value is ready to use.
type Set struct {
	mu    sync.Mutex
	locks map[int]chan struct{} // a 1-slot semaphore per GPU: full means held
}

// Lock takes the lock of gpu, waiting no longer than ctx allows. On success
// it returns the function that releases the lock, which must be called
// exactly once. If ctx is done before the lock is taken, Lock returns
// ctx.Err() and holds nothing.
func (s *Set) Lock(ctx context.Context, gpu int) (unlock func(), err error) {
	// Checked first because select picks at random between a free lock and
	// a done ctx: a cancelled caller must never get to mutate hardware.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := s.lock(gpu)
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// lock returns gpu's semaphore, making it on first use.
func (s *Set) lock(gpu int) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.locks[gpu]
	if !ok {
		if s.locks == nil {
			s.locks = make(map[int]chan struct{})
		}
		l = make(chan struct{}, 1)
		s.locks[gpu] = l
	}
	return l
}
