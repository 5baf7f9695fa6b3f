package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/internal/wiring/backend"
	"github.com/dynmig/dynmig/internal/wiring/cli/clitest"
	"github.com/dynmig/dynmig/realize"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBackendRequired(t *testing.T) {
	err := run(context.Background(), slog.New(slog.DiscardHandler), options{}, dradriver.Config{})
	if !errors.Is(err, backend.ErrNoBackend) {
		t.Fatalf("run without -backend: %v, want ErrNoBackend", err)
	}
}

// TestProbesAndMetrics runs the driver on a fake node and scrapes its
// operations server: ready once it serves the kubelet.
func TestProbesAndMetrics(t *testing.T) {
	base, err := os.MkdirTemp("", "dra") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	dirs := []string{filepath.Join(base, "p"), filepath.Join(base, "r"), filepath.Join(base, "c")}
	for _, dir := range dirs {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}})
	var generated atomic.Int64 // the API server fills generateName; the fake does not
	client.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			s.Name = s.GenerateName + strconv.FormatInt(generated.Add(1), 10)
		}
		return false, nil, nil
	})
	addrs := make(chan net.Addr, 1)
	opsListening = func(a net.Addr) { addrs <- a }
	defer func() { opsListening = func(net.Addr) {} }()
	open := func(context.Context) (realize.Realizer, func(), error) {
		return fakehal.MustNew(fakehal.Options{GPUs: []string{"NVIDIA A30"}}), func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.DiscardHandler)
	go func() {
		done <- serve(ctx, log, open, options{metricsAddr: "127.0.0.1:0"}, dradriver.Config{
			Node: "n1", Client: client, DataDir: dirs[0], RegistrarDir: dirs[1], CDIDir: dirs[2], Logger: log,
		})
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
	if code, body := clitest.Scrape(t, addr, "/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics %d lacks the Go collector", code)
	}
}
