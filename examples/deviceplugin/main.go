package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/examples/deviceplugin/plugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
)

// backend opens a MIG backend and returns it with its close function.
type backend func(ctx context.Context, log *slog.Logger) (realize.Realizer, func(), error)

// backends maps -backend values to constructors; backend_nvml.go adds
// "nvml" when built with cgo.
var backends = map[string]backend{"fake": fakeBackend}

var metricsAddr = flag.String("metrics-addr", "", `serve Prometheus metrics (dynmig_gpu_healthy per GPU, dynmig_deviceplugin_allocation_mismatches_total) on this address, e.g. ":9400"; "" serves none`)

var kubeconfig = flag.String("kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")

var fakeGPUs = flag.String("fake-gpus", "2x"+fakehal.DefaultModel, `fake backend: GPU models, "NxMODEL" or a comma-separated list`)

// maxFakeGPUs bounds "NxMODEL", so that a typo cannot ask for billions of
// GPUs.
const maxFakeGPUs = 64

func fakeBackend(context.Context, *slog.Logger) (realize.Realizer, func(), error) {
	models, err := parseFakeGPUs(*fakeGPUs)
	if err != nil {
		return nil, nil, err
	}
	hw, err := fakehal.New(fakehal.Options{GPUs: models})
	if err != nil {
		return nil, nil, err
	}
	return hw, func() {}, nil
}

// parseFakeGPUs reads -fake-gpus: "NxMODEL" (N of one model, 1..64) or a
// comma-separated list of models. Unknown models are fakehal's to refuse.
func parseFakeGPUs(v string) ([]string, error) {
	if n, model, ok := strings.Cut(v, "x"); ok && !strings.Contains(v, ",") {
		if count, err := strconv.Atoi(n); err == nil {
			if count < 1 || count > maxFakeGPUs {
				return nil, fmt.Errorf("-fake-gpus %q: want 1..%d GPUs", v, maxFakeGPUs)
			}
			return fakehal.Repeat(count, model), nil
		}
	}
	return strings.Split(v, ","), nil
}

func main() {
	var names []string
	for name := range backends {
		names = append(names, name)
	}
	slices.Sort(names)
	node := flag.String("node", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	backendName := flag.String("backend", "fake", "MIG backend: "+strings.Join(names, ", "))
	socketDir := flag.String("socket-dir", v1beta1.DevicePluginPath, "kubelet device-plugin directory")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	podResources := flag.String("pod-resources-socket", plugin.DefaultPodResourcesSocket, `kubelet PodResources API socket for the after-the-fact assignment check ("" skips it)`)
	allowMM := flag.Bool("allow-mig-manager", false, "mutate GPUs even while NVIDIA MIG Manager may own the node (dangerous)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	open, ok := backends[*backendName]
	if !ok {
		log.Error("unknown backend (nvml needs a cgo build)", "backend", *backendName, "available", names)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, open, plugin.Config{
		Node: *node, ResourceName: *resource, SocketDir: *socketDir,
		KubeletSocket: *socketDir + "/kubelet.sock", PodResourcesSocket: *podResources, AllowMIGManager: *allowMM, Logger: log,
	}); err != nil {
		log.Error("device plugin failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, open backend, cfg plugin.Config) error {
	rc, err := kube.RESTConfig(*kubeconfig)
	if err != nil {
		return err
	}
	if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	hw, closeHW, err := open(ctx, cfg.Logger)
	if err != nil {
		return fmt.Errorf("open backend: %w", err)
	}
	defer closeHW()
	cfg.Hardware = hw
	p, err := plugin.New(cfg)
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		stop := serveMetrics(*metricsAddr, p, cfg.Logger)
		defer stop()
	}
	return p.Run(ctx)
}

// serveMetrics serves the plugin's GPU health gauge and its assignment
// mismatch counter on addr until the returned func is called; that func
// waits for the server to stop.
func serveMetrics(addr string, p *plugin.Plugin, log *slog.Logger) func() {
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.HealthCollector())
	reg.MustRegister(p.Collectors()...) // dynmig_deviceplugin_allocation_mismatches_total
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "addr", addr, "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}
