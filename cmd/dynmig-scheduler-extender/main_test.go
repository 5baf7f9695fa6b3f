package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/internal/wiring/cli/clitest"
	"github.com/dynmig/dynmig/kube/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDefaultAddrIsLoopback(t *testing.T) {
	host, _, err := net.SplitHostPort(DefaultAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("default listen address %q is not loopback", DefaultAddr)
	}
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
	if code, _ := clitest.Scrape(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	deadline := time.Now().Add(testwait.Bound())
	for {
		code, body := clitest.Scrape(t, addr, "/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body := clitest.Scrape(t, addr, "/metrics")
	for _, want := range []string{"dynmig_scheduler_stale_claims_total 0", "go_goroutines", "process_start_time_seconds"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
}

// TestAPIFailuresLogged: with the API server unreachable, or refusing the
// extender's credential, the extender logs each failing request at the
// default level with its cause, and /readyz names it beside the unsynced
// view. client-go's informers retry both quietly.
func TestAPIFailuresLogged(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "http://" + lis.Addr().String()
	lis.Close()
	forbidding := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`))
	}))
	defer forbidding.Close()
	for _, tc := range []struct{ server, cause string }{
		{unreachable, "connection refused"},
		{forbidding.URL, "403 Forbidden"},
	} {
		t.Run(tc.cause, func(t *testing.T) { checkAPIFailureLogged(t, tc.server, tc.cause) })
	}
}

func checkAPIFailureLogged(t *testing.T, server, cause string) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \""+server+
		"\"}\nusers:\n- name: u\n  user: {token: x}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil)) // the default level
	addrs := make(chan net.Addr, 1)
	opsListening = func(a net.Addr) { addrs <- a }
	defer func() { opsListening = func(net.Addr) {} }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{kubeconfig: kubeconfig, addr: "127.0.0.1:0", metricsAddr: "127.0.0.1:0", opts: extender.Options{Logger: log}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		http.DefaultClient.CloseIdleConnections()
	}()
	addr := <-addrs
	deadline := time.Now().Add(testwait.Bound())
	for {
		code, body := clitest.Scrape(t, addr, "/readyz")
		logged := logs.String()
		if code == http.StatusServiceUnavailable && strings.Contains(body, "not synced") && strings.Contains(body, cause) &&
			strings.Contains(logged, "level=ERROR") && strings.Contains(logged, "/api/v1/") && strings.Contains(logged, cause) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %q; logged:\n%s", code, body, logged)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a concurrency-safe log destination.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
