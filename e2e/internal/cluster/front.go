package cluster

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// HTTPFront serves the API server cfg reaches on a plain-HTTP loopback
// address, forwarding every request through cfg's transport (its
// credentials and its wraps, rest.Config.Wrap), and returns a config
// with no credentials for that address. A component configured only by a
// kubeconfig file (kube-scheduler, SchedulerOptions.Client) thus makes
// its requests through a transport the test wraps: to count, delay or
// change them, or to act between a request and its answer. Watches
// stream through it. t.Cleanup stops it, closing its connections.
func HTTPFront(t testing.TB, cfg *rest.Config) (*rest.Config, error) {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: front transport: %w", err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("cluster: front target %q: %w", cfg.Host, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     rt,
		FlushInterval: -1, // watches stream
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return &rest.Config{Host: "http://" + ln.Addr().String()}, nil
}
