package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/internal/backend"
	"github.com/dynmig/dynmig/internal/cli"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
)

const name = "dynmig-device-plugin"

// DefaultMetricsAddr is the default address of /metrics, /healthz and
// /readyz: not dcgm-exporter's 9400 nor HAMi's device plugin monitor's
// 9394, which may run on the same node.
const DefaultMetricsAddr = ":9396"

// errNotRegistered is the readiness probe's answer until the plugin serves
// its socket and registered with the kubelet.
var errNotRegistered = errors.New("not yet registered with the kubelet")

// opsListening is told the operations server's address (tests listen on
// port 0).
var opsListening = func(net.Addr) {}

type options struct {
	kubeconfig, metricsAddr string
	backendName, fakeGPUs   string
}

func main() {
	fs := flag.CommandLine
	var o options
	node := fs.String("node", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.backendName, "backend", "", "MIG backend, required: "+strings.Join(backend.Names(), ", "))
	fs.StringVar(&o.fakeGPUs, "fake-gpus", backend.DefaultFakeGPUs, `fake backend: GPU models, "NxMODEL" or a comma-separated list`)
	socketDir := fs.String("socket-dir", v1beta1.DevicePluginPath, "kubelet device-plugin directory")
	resource := fs.String("resource", "nvidia.com/gpu", "extended resource name")
	schedulers := fs.String("scheduler-names", deviceplugin.DefaultSchedulerName, "comma-separated spec.schedulerName values of the schedulers whose extender writes reservation records")
	podResources := fs.String("pod-resources-socket", deviceplugin.DefaultPodResourcesSocket, `kubelet PodResources API socket for the after-the-fact assignment check ("" skips it)`)
	allowMM := fs.Bool("allow-mig-manager", false, "mutate GPUs even while NVIDIA MIG Manager may own the node (dangerous)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", DefaultMetricsAddr, `address of /metrics (dynmig_gpu_healthy, dynmig_deviceplugin_allocation_mismatches_total), /healthz and /readyz; "" serves none`)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")
	common := cli.Register(fs)
	flag.Parse()
	if common.ShowVersion {
		_ = cli.PrintVersion(os.Stdout, name)
		return
	}
	log, err := common.Logger(os.Stderr, name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, deviceplugin.Config{
		Node: *node, ResourceName: *resource, SchedulerNames: strings.Split(*schedulers, ","), SocketDir: *socketDir,
		KubeletSocket: *socketDir + "/kubelet.sock", PodResourcesSocket: *podResources, AllowMIGManager: *allowMM, Logger: log,
	}); err != nil {
		log.Error("device plugin failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, cfg deviceplugin.Config) error {
	if o.backendName == "" {
		// Before anything else: a production node must never start the
		// fake backend by omission.
		return fmt.Errorf("-backend: %w", backend.ErrNoBackend)
	}
	rc, err := kube.RESTConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	open := func(ctx context.Context) (realize.Realizer, func(), error) {
		return backend.Open(ctx, o.backendName, o.fakeGPUs, cfg.Logger)
	}
	return serve(ctx, open, o.metricsAddr, cfg)
}

// serve opens the backend and runs the plugin until ctx is done, with its
// operations server on metricsAddr.
func serve(ctx context.Context, open func(context.Context) (realize.Realizer, func(), error), metricsAddr string, cfg deviceplugin.Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
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
	if metricsAddr != "" {
		// dynmig_gpu_healthy and dynmig_deviceplugin_allocation_mismatches_total.
		reg, err := cli.NewRegistry(append(p.Collectors(), p.HealthCollector())...)
		if err != nil {
			return err
		}
		opsCtx, cancel := context.WithCancel(context.Background())
		addr, stopOps, err := cli.ServeOps(opsCtx, metricsAddr, cli.Ops{Ready: ready(p), Registry: reg, Logger: log})
		if err != nil {
			cancel()
			return fmt.Errorf("metrics address: %w", err)
		}
		opsListening(addr)
		defer func() { cancel(); stopOps() }()
	}
	return p.Run(ctx)
}

// ready is the readiness check: the plugin's pod cache synced, it serves
// its socket and registered with the kubelet ([deviceplugin.Plugin.Ready]).
func ready(p *deviceplugin.Plugin) func() error {
	return func() error {
		select {
		case <-p.Ready():
			return nil
		default:
			return errNotRegistered
		}
	}
}
