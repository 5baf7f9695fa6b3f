package nvmlhal

import (
	"context"
	"sync"
)

// gate keeps [Backend.Shutdown] out of the backend's calls in flight: calls
// enter and leave it; Shutdown closes it, waits for the calls inside to
// leave, and holds new ones off until it is done. The zero gate is open.
type gate struct {
	mu      sync.Mutex
	active  int
	closed  chan struct{} // non-nil while Shutdown holds the gate; closed on release
	drained chan struct{} // closed when the last call leaves while Shutdown waits
}

// enter admits a call, waiting while Shutdown holds the gate and no longer
// than ctx allows. The returned func lets the call out.
func (g *gate) enter(ctx context.Context) (leave func(), err error) {
	for {
		g.mu.Lock()
		if g.closed == nil {
			g.active++
			g.mu.Unlock()
			return g.leave, nil
		}
		wait := g.closed
		g.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active--
	if g.active == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
}

// close holds new calls off and waits, no longer than ctx allows, for the
// calls inside to leave. release opens the gate again. Callers serialise
// close (Backend.initMu).
func (g *gate) close(ctx context.Context) (release func(), err error) {
	g.mu.Lock()
	g.closed = make(chan struct{})
	var drained chan struct{}
	if g.active > 0 {
		g.drained = make(chan struct{})
		drained = g.drained
	}
	g.mu.Unlock()
	release = func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		close(g.closed)
		g.closed, g.drained = nil, nil
	}
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
	}
	return release, nil
}
