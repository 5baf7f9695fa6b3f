package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/backend"
	"github.com/dynmig/dynmig/internal/testwait"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/realize"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBackendRequired(t *testing.T) {
	err := run(context.Background(), options{}, deviceplugin.Config{})
	if !errors.Is(err, backend.ErrNoBackend) {
		t.Fatalf("run without -backend: %v, want ErrNoBackend", err)
	}
}

// scrape GETs path from the server at addr.
func scrape(t *testing.T, addr net.Addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr.String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestProbesAndMetrics runs the plugin on a fake node and scrapes its
// operations server: /healthz at once, /readyz once the plugin serves its
// socket, /metrics with the GPU health gauge and the Go collector.
func TestProbesAndMetrics(t *testing.T) {
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	addrs := make(chan net.Addr, 1)
	opsListening = func(a net.Addr) { addrs <- a }
	defer func() { opsListening = func(net.Addr) {} }()
	open := func(context.Context) (realize.Realizer, func(), error) {
		return fakehal.MustNew(fakehal.Options{}), func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, open, "127.0.0.1:0", deviceplugin.Config{Node: "n1", Client: client, SocketDir: t.TempDir()})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		http.DefaultClient.CloseIdleConnections()
	}()
	addr := <-addrs
	if code, _ := scrape(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	deadline := time.Now().Add(testwait.Bound())
	for {
		code, body := scrape(t, addr, "/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body := scrape(t, addr, "/metrics")
	for _, want := range []string{"dynmig_gpu_healthy{", "dynmig_deviceplugin_allocation_mismatches_total 0", "go_goroutines", "process_start_time_seconds"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
}

func TestDefaultMetricsPort(t *testing.T) {
	_, port, err := net.SplitHostPort(DefaultMetricsAddr)
	if err != nil || port == "9400" || port == "9394" {
		t.Errorf("default metrics address %q collides with dcgm-exporter (9400) or HAMi's monitor (9394)", DefaultMetricsAddr)
	}
}
