package cluster

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy is a TCP pass-through on 127.0.0.1. The cluster puts one in front
// of the API server to give it an address which survives restarts
// (StartTestServer listens on a new random port every time); tests put one
// between a component and the API server to cut it off. TLS is end to end
// (the proxy never looks into the stream). While no backend is set,
// connections are accepted and closed at once, which clients see as a
// server that is down.
type Proxy struct {
	ln      net.Listener
	wg      sync.WaitGroup
	refused atomic.Int64

	mu      sync.Mutex
	backend string
	conns   map[net.Conn]struct{}
	closed  bool
}

// NewProxy starts a proxy with no backend; Close stops it.
func NewProxy() (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Refused counts the connections closed at once for want of a backend.
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// SetBackend points new connections at addr ("" for none) and closes every
// connection through the proxy, so that clients notice at once (watches
// break, requests in flight fail).
func (p *Proxy) SetBackend(addr string) {
	p.mu.Lock()
	p.backend = addr
	conns := p.conns
	p.conns = make(map[net.Conn]struct{})
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		backend := p.backend
		p.mu.Unlock()
		if backend == "" {
			p.refused.Add(1)
			c.Close()
			continue
		}
		if !p.track(c) {
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

func (p *Proxy) pipe(c net.Conn, backend string) {
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

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.SetBackend("")
	p.wg.Wait()
}
