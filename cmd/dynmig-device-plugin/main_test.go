package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/internal/wiring/backend"
	"github.com/dynmig/dynmig/internal/wiring/cli/clitest"
	"github.com/dynmig/dynmig/internal/wiring/devconfig"
	"github.com/dynmig/dynmig/kube"
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
		done <- serve(ctx, open, options{metricsAddr: "127.0.0.1:0"}, deviceplugin.Config{Node: "n1", Client: client, SocketDir: t.TempDir()})
	}()
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

// TestDeviceConfigRefusedAtStart: a malformed config or one whose profiles
// the node's GPUs do not know stops the start, before the plugin runs.
func TestDeviceConfigRefusedAtStart(t *testing.T) {
	for name, content := range map[string]string{
		"malformed":       "nvidia:\n  migProfileAllowlist:\n  - models: [A100-SXM4-40GB]\n    profiles: [big]\n",
		"unknown profile": "nvidia:\n  migProfileAllowlist:\n  - models: [A100-SXM4-40GB]\n    profiles: [5g.99gb]\n",
	} {
		path := filepath.Join(t.TempDir(), "device-config.yaml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		open := func(context.Context) (realize.Realizer, func(), error) {
			return fakehal.MustNew(fakehal.Options{}), func() {}, nil
		}
		client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
		err := serve(context.Background(), open, options{deviceConfig: path}, deviceplugin.Config{Node: "n1", Client: client, SocketDir: t.TempDir()})
		if !errors.Is(err, devconfig.ErrRefused) {
			t.Errorf("%s: serve returned %v, want a refusal", name, err)
		}
	}
}

// TestDeviceConfigReload: a changed file is read again and republished.
func TestDeviceConfigReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "device-config.yaml")
	write := func(profiles string) {
		data := "nvidia:\n  migProfileAllowlist:\n  - models: [A100-SXM4-40GB]\n    profiles: [" + profiles + "]\n"
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("3g.20gb")
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	open := func(context.Context) (realize.Realizer, func(), error) {
		return fakehal.MustNew(fakehal.Options{}), func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, open, options{deviceConfig: path, configPoll: time.Millisecond}, deviceplugin.Config{Node: "n1", Client: client, SocketDir: t.TempDir()})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	profiles := func() string {
		n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		gpus, _ := kube.NodeGPUs(n)
		if len(gpus) == 0 {
			return ""
		}
		var names []string
		for _, p := range gpus[0].Profiles {
			names = append(names, p.Name)
		}
		return strings.Join(names, ",")
	}
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(testwait.Bound())
		for profiles() != want {
			if time.Now().After(deadline) {
				t.Fatalf("registration publishes %q, want %q", profiles(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("3g.20gb")
	write("1g.5gb")
	waitFor("1g.5gb")
}
