package realize

import (
	"context"
	"sync"
)

// containerRef names one container of one pod: the unit Allocate
// serialises on.
type containerRef struct {
	podUID    string
	container int
}

// containerLocks serialises Allocate calls for the same container. Two
// such calls may overlap (kubelet retrying after a timeout, two plugin
// processes during a rolling update); without the lock, one call's rollback
// could destroy an instance the other had just handed out as managed.
// Entries are removed when no caller holds or waits for them, so the map
// stays as small as the number of containers being allocated at once.
type containerLocks struct {
	mu    sync.Mutex
	locks map[containerRef]*containerLock
}

type containerLock struct {
	sem   chan struct{} // 1-slot semaphore: full means held
	users int           // holders and waiters
}

// lock takes the container's lock, waiting no longer than ctx allows. On
// success it returns the release function, to be called exactly once.
func (l *containerLocks) lock(ctx context.Context, ref containerRef) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[containerRef]*containerLock)
	}
	cl, ok := l.locks[ref]
	if !ok {
		cl = &containerLock{sem: make(chan struct{}, 1)}
		l.locks[ref] = cl
	}
	cl.users++
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		if cl.users--; cl.users == 0 {
			delete(l.locks, ref)
		}
		l.mu.Unlock()
	}
	select {
	case cl.sem <- struct{}{}:
		return func() { <-cl.sem; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
