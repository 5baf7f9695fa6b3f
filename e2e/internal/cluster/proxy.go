package cluster

import (
	"io"
	"net"
	"sync"
)

// frontProxy is a TCP pass-through that gives the API server an address
// which survives restarts: StartTestServer listens on a new random port
// every time. TLS is end to end (the proxy never looks into the stream).
// While no backend is set, connections are accepted and closed at once,
// which clients see as a server that is down.
type frontProxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	backend string
	conns   map[net.Conn]struct{}
	closed  bool
}

func newFrontProxy() (*frontProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &frontProxy{ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *frontProxy) addr() string { return p.ln.Addr().String() }

// setBackend points new connections at addr ("" for none) and closes every
// connection to the previous backend, so that clients notice at once.
func (p *frontProxy) setBackend(addr string) {
	p.mu.Lock()
	p.backend = addr
	conns := p.conns
	p.conns = make(map[net.Conn]struct{})
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

func (p *frontProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *frontProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		backend := p.backend
		p.mu.Unlock()
		if backend == "" || !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c, backend)
		}()
	}
}

func (p *frontProxy) pipe(c net.Conn, backend string) {
	defer c.Close()
	b, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	if !p.track(b) {
		b.Close()
		return
	}
	defer b.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
	// One direction ended: close both so the other copy returns too.
	c.Close()
	b.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, b)
	p.mu.Unlock()
}

// close stops accepting, closes every connection and waits for the proxy's
// goroutines.
func (p *frontProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.setBackend("")
	p.wg.Wait()
}
