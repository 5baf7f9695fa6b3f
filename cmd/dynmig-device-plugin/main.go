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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/internal/backend"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
)

var metricsAddr = flag.String("metrics-addr", "", `serve Prometheus metrics (dynmig_gpu_healthy per GPU, dynmig_deviceplugin_allocation_mismatches_total) on this address, e.g. ":9400"; "" serves none`)

var kubeconfig = flag.String("kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")

func main() {
	node := flag.String("node", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	backendName := flag.String("backend", "fake", "MIG backend: "+strings.Join(backend.Names(), ", "))
	fakeGPUs := flag.String("fake-gpus", backend.DefaultFakeGPUs, `fake backend: GPU models, "NxMODEL" or a comma-separated list`)
	socketDir := flag.String("socket-dir", v1beta1.DevicePluginPath, "kubelet device-plugin directory")
	checkpoint := flag.String("checkpoint", "", `the plugin's checkpoint file (what it observed and handed out, kept across restarts); "" means `+
		deviceplugin.CheckpointDir+"/"+deviceplugin.CheckpointFile+` under -socket-dir (a directory: the kubelet removes plain files there)`)
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	schedulers := flag.String("scheduler-names", deviceplugin.DefaultSchedulerName, "comma-separated spec.schedulerName values of the schedulers whose extender writes reservation records")
	podResources := flag.String("pod-resources-socket", deviceplugin.DefaultPodResourcesSocket, `kubelet PodResources API socket for the after-the-fact assignment check ("" skips it)`)
	allowMM := flag.Bool("allow-mig-manager", false, "mutate GPUs even while NVIDIA MIG Manager may own the node (dangerous)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	open := func(ctx context.Context) (realize.Realizer, func(), error) {
		return backend.Open(ctx, *backendName, *fakeGPUs, log)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, open, deviceplugin.Config{
		Node: *node, ResourceName: *resource, SchedulerNames: strings.Split(*schedulers, ","), SocketDir: *socketDir, Checkpoint: *checkpoint,
		KubeletSocket: *socketDir + "/kubelet.sock", PodResourcesSocket: *podResources, AllowMIGManager: *allowMM, Logger: log,
	}); err != nil {
		log.Error("device plugin failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, open func(context.Context) (realize.Realizer, func(), error), cfg deviceplugin.Config) error {
	rc, err := kube.RESTConfig(*kubeconfig)
	if err != nil {
		return err
	}
	if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	hw, closeHW, err := open(ctx)
	if err != nil {
		return fmt.Errorf("open backend: %w", err)
	}
	defer closeHW()
	cfg.Hardware = hw
	p, err := deviceplugin.New(cfg)
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
func serveMetrics(addr string, p *deviceplugin.Plugin, log *slog.Logger) func() {
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
