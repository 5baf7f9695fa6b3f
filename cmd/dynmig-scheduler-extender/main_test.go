package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/internal/testwait"
	"github.com/dynmig/dynmig/kube/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDefaultAddrIsLoopback(t *testing.T) {
	host, _, err := net.SplitHostPort(DefaultAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("default listen address %q is not loopback", DefaultAddr)
	}
}

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

// TestProbesAndMetrics serves the extender over a fake cluster and scrapes
// its operations server: ready once the informers synced, /metrics with
// the stale-claims counter, the instance metric's family and the Go and
// process collectors.
func TestProbesAndMetrics(t *testing.T) {
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	addrs := make(chan net.Addr, 1)
	opsListening = func(a net.Addr) { addrs <- a }
	defer func() { opsListening = func(net.Addr) {} }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, client, config{addr: "127.0.0.1:0", metricsAddr: "127.0.0.1:0"}) }()
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
	for _, want := range []string{"dynmig_scheduler_stale_claims_total 0", "go_goroutines", "process_start_time_seconds"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
}
