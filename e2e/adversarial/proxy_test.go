package adversarial_test

import (
	"net/url"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dynmig/dynmig/e2e/internal/cluster"
)

// partition is a pass-through between one component and the API server
// (a cluster.Proxy), which the test can cut: drop closes every connection
// through it (watches break, requests in flight fail), block also refuses
// new ones until unblock. The API server's certificate names 127.0.0.1,
// where the proxy listens too.
type partition struct {
	proxy   *cluster.Proxy
	backend string

	mu      sync.Mutex
	blocked bool
}

func startPartition(t *testing.T, host string) *partition {
	t.Helper()
	u, err := url.Parse(host)
	if err != nil {
		t.Fatalf("API server host %q: %v", host, err)
	}
	proxy, err := cluster.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	proxy.SetBackend(u.Host)
	return &partition{proxy: proxy, backend: u.Host}
}

// client returns a clientset like cfg's that reaches the API server
// through the partition.
func (p *partition) client(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://" + p.proxy.Addr()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// refused counts the connections refused while blocked.
func (p *partition) refused() int64 { return p.proxy.Refused() }

// drop closes every connection through the partition; new ones are
// accepted unless it is blocked.
func (p *partition) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked {
		p.proxy.SetBackend("")
	} else {
		p.proxy.SetBackend(p.backend)
	}
}

// block drops every connection and refuses new ones until unblock.
func (p *partition) block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = true
	p.proxy.SetBackend("")
}

func (p *partition) unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = false
	p.proxy.SetBackend(p.backend)
}
