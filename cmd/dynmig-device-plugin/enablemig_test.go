package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/internal/wiring/cli/clitest"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/realize"
)

// syncBuffer is a log sink the plugin's goroutines may share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestEnableMIG runs the plugin on a fake node whose two GPUs have MIG
// mode off, the second running a process. With -enable-mig the idle GPU
// is switched to MIG mode and published; the busy one is left alone.
// Without it both are reported and left alone, and none is published.
func TestEnableMIG(t *testing.T) {
	for _, enable := range []bool{true, false} {
		t.Run(map[bool]string{true: "with -enable-mig", false: "without"}[enable], func(t *testing.T) {
			hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel), MIGDisabled: true})
			if _, err := hw.StartProcess(1, ""); err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			published := runUntilReady(t, hw, deviceplugin.Config{
				Manager: realize.Options{EnableMIG: enable},
				Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
			})
			idle, _ := hw.Device(0)
			busy, _ := hw.Device(1)
			if busy.MIGMode != capability.MIGDisabled || busy.PendingMIGMode != capability.MIGDisabled {
				t.Errorf("the GPU running a process: MIG %v (pending %v), want it left off", busy.MIGMode, busy.PendingMIGMode)
			}
			wantIdle, wantPublished := capability.MIGDisabled, 0
			if enable {
				wantIdle, wantPublished = capability.MIGEnabled, 1
			}
			if idle.MIGMode != wantIdle {
				t.Errorf("the idle GPU: MIG %v, want %v", idle.MIGMode, wantIdle)
			}
			if len(published) != wantPublished || wantPublished == 1 && (published[0].UUID != idle.UUID || len(published[0].Profiles) == 0) {
				t.Errorf("published %+v, want %d GPU (the idle one, with its profiles)", published, wantPublished)
			}
			if !strings.Contains(logs.String(), busy.UUID) {
				t.Errorf("the GPU left out is not reported in the log:\n%s", logs.String())
			}
		})
	}
}

// runUntilReady serves the plugin over hw on node n1 until it is ready,
// waits for its registration to settle, stops it and returns the GPUs its
// last registration published.
func runUntilReady(t *testing.T, hw *fakehal.Node, cfg deviceplugin.Config) []capability.GPU {
	t.Helper()
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	cfg.Node, cfg.Client, cfg.SocketDir = "n1", client, t.TempDir()
	addrs := make(chan net.Addr, 1)
	opsListening = func(a net.Addr) { addrs <- a }
	defer func() { opsListening = func(net.Addr) {} }()
	open := func(context.Context) (realize.Realizer, func(), error) { return hw, func() {}, nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, open, options{metricsAddr: "127.0.0.1:0"}, cfg) }()
	addr := <-addrs
	deadline := time.Now().Add(testwait.Bound())
	for code, _ := clitest.Scrape(t, addr, "/readyz"); code != http.StatusOK; code, _ = clitest.Scrape(t, addr, "/readyz") {
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	http.DefaultClient.CloseIdleConnections()
	n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gpus, _ := kube.NodeGPUs(n)
	return gpus
}
