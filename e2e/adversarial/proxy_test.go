package adversarial_test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// partition is a TCP pass-through between one component and the API
// server, which the test can cut: drop closes every connection through it
// (watches break, requests in flight fail), block also refuses new ones
// until unblock. TLS is end to end; the API server's certificate names
// 127.0.0.1, where the pass-through listens too.
type partition struct {
	ln      net.Listener
	backend string
	wg      sync.WaitGroup
	refused atomic.Int64 // connections refused while blocked

	mu      sync.Mutex
	blocked bool
	closed  bool
	conns   map[net.Conn]struct{}
}

func startPartition(t *testing.T, host string) *partition {
	t.Helper()
	u, err := url.Parse(host)
	if err != nil {
		t.Fatalf("API server host %q: %v", host, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partition{ln: ln, backend: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// client returns a clientset like cfg's that reaches the API server
// through the partition.
func (p *partition) client(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://" + p.ln.Addr().String()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (p *partition) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.blocked || p.closed {
			p.mu.Unlock()
			p.refused.Add(1)
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.pipe(c)
		}()
	}
}

func (p *partition) pipe(c net.Conn) {
	defer c.Close()
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.blocked || p.closed {
		p.mu.Unlock()
		b.Close()
		return
	}
	p.conns[b] = struct{}{}
	p.mu.Unlock()
	defer b.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
	c.Close()
	b.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, b)
	p.mu.Unlock()
}

// drop closes every connection through the partition; new ones are
// accepted unless it is blocked.
func (p *partition) drop() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// block drops every connection and refuses new ones until unblock.
func (p *partition) block() {
	p.mu.Lock()
	p.blocked = true
	p.mu.Unlock()
	p.drop()
}

func (p *partition) unblock() {
	p.mu.Lock()
	p.blocked = false
	p.mu.Unlock()
}

func (p *partition) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.drop()
	p.wg.Wait()
}
