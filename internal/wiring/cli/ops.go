package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Ops configures the operations server. The zero value serves /healthz
// and an always-ready /readyz, and no /metrics.
type Ops struct {
	// Ready is the readiness check: nil error means ready. nil means
	// always ready.
	Ready func() error
	// Registry is served at /metrics; nil serves no /metrics.
	Registry *prometheus.Registry
	// Logger; nil discards.
	Logger *slog.Logger
	// API, when not nil, is the component's API server monitor: while
	// the component is not ready, /readyz names the API requests that
	// fail and why (most often the reason an informer has not synced).
	API *APIMonitor
}

// NewRegistry returns a registry holding the Go runtime and process
// collectors and cs.
func NewRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, cs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Handler returns the operations endpoints.
func (o Ops) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if o.Ready != nil {
			if err := o.Ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("not ready: " + errors.Join(err, o.API.Err()).Error() + "\n"))
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if o.Registry != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{}))
	}
	return mux
}

// StartOps serves o on addr ([ServeOps]) until the returned stop is
// called, which shuts the server down and waits for it; listening is told
// the address (tests listen on port 0). An empty addr serves nothing.
func StartOps(addr string, o Ops, listening func(net.Addr)) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	bound, stopOps, err := ServeOps(ctx, addr, o)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("metrics address: %w", err)
	}
	if listening != nil {
		listening(bound)
	}
	return func() { cancel(); stopOps() }, nil
}

// ServeOps listens on addr and serves [Ops.Handler] until ctx is done. It
// returns once listening (or with the listen error); the returned func
// shuts the server down and waits for it.
func ServeOps(ctx context.Context, addr string, o Ops) (net.Addr, func(), error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: o.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("operations server failed", "addr", addr, "err", err)
		}
	}()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-done:
		}
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		<-done
	}()
	log.Info("serving health, readiness and metrics", "addr", lis.Addr().String())
	stop := func() {
		_ = srv.Close()
		<-stopped
	}
	return lis.Addr(), stop, nil
}
