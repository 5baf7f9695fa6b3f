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
	"path"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/internal/wiring/backend"
	"github.com/dynmig/dynmig/internal/wiring/cli"
	"github.com/dynmig/dynmig/internal/wiring/devconfig"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
)

const name = "dynmig-dra-driver"

// DefaultMetricsAddr is the default address of /metrics, /healthz and
// /readyz (clear of dcgm-exporter's 9400 and the device plugin's 9396).
const DefaultMetricsAddr = ":9397"

// opsListening is told the operations server's address (tests listen on
// port 0).
var opsListening = func(net.Addr) {}

type options struct {
	kubeconfig, deviceConfig, metricsAddr string
	backendName, fakeGPUs                 string
	configPoll                            time.Duration
}

func main() {
	fs := flag.CommandLine
	var o options
	node := fs.String("node", os.Getenv("NODE_NAME"), "this node's name, also the resource pool's (default $NODE_NAME)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")
	fs.StringVar(&o.backendName, "backend", "", "MIG backend, required: "+strings.Join(backend.Names(), ", "))
	fs.StringVar(&o.fakeGPUs, "fake-gpus", backend.DefaultFakeGPUs, `fake backend: GPU models, "NxMODEL" or a comma-separated list`)
	cdiDir := fs.String("cdi-dir", "/var/run/cdi", "directory the container runtime reads CDI specs from; claim specs are written there")
	dataDir := fs.String("plugin-data-dir", path.Join(kubeletplugin.KubeletPluginsDir, dradriver.DriverName), "plugin data directory: the DRA socket and the checkpoint of prepared claims")
	registrarDir := fs.String("registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet plugin registration directory")
	fs.StringVar(&o.deviceConfig, "device-config", "", `scheduler device config file whose nvidia.migProfileAllowlist is the profile policy; "" means the built-in default. Reloaded on SIGHUP and when the file changes; a refused config keeps the last good one`)
	fs.DurationVar(&o.configPoll, "device-config-poll", devconfig.DefaultInterval, "how often -device-config is read for changes (below 0: only on SIGHUP)")
	interval := fs.Duration("maintain-interval", 30*time.Second, "how often the hardware is reconciled against the claims")
	fs.StringVar(&o.metricsAddr, "metrics-addr", DefaultMetricsAddr, `address of /metrics, /healthz and /readyz; "" serves none`)
	healthChecks := backend.HealthCheckFlags(fs)
	deviceNodes := fs.String("device-nodes", "auto", `inject MIG device nodes into CDI specs, read from the NVIDIA driver's /proc files: "auto" (with -backend=nvml), "on" or "off"`)
	common := cli.Register(fs)
	log, code, done := common.Start(fs, name, os.Args[1:], os.Stdout, os.Stderr)
	if done {
		os.Exit(code)
	}
	checks, err := healthChecks()
	if err != nil {
		log.Error("DRA driver failed", "err", err)
		os.Exit(cli.ExitUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := dradriver.Config{
		Node: *node, CDIDir: *cdiDir, DataDir: *dataDir, RegistrarDir: *registrarDir,
		MaintainInterval: *interval, HealthChecks: checks, Logger: log,
	}
	switch *deviceNodes {
	case "on":
		cfg.DeviceNodes = dradriver.ProcNodes{}
	case "auto":
		if o.backendName == "nvml" {
			cfg.DeviceNodes = dradriver.ProcNodes{}
		}
	case "off":
	default:
		log.Error("bad -device-nodes", "value", *deviceNodes)
		os.Exit(cli.ExitUsage)
	}
	err = run(ctx, log, o, cfg)
	if err != nil {
		log.Error("DRA driver failed", "err", err)
		os.Exit(cli.ExitFailure)
	}
}

func run(ctx context.Context, log *slog.Logger, o options, cfg dradriver.Config) error {
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
		return backend.Open(ctx, o.backendName, o.fakeGPUs, log)
	}
	return serve(ctx, log, open, o, cfg)
}

// serve opens the backend and runs the driver until ctx is done, with its
// operations server on o.metricsAddr and o.deviceConfig watched (package
// internal/wiring/devconfig: a refused config stops the start, and keeps the last
// good one on reload).
func serve(ctx context.Context, log *slog.Logger, open func(context.Context) (realize.Realizer, func(), error), o options, cfg dradriver.Config) error {
	opened, err := devconfig.Open(ctx, o.deviceConfig, open)
	if err != nil {
		return err
	}
	defer opened.Close()
	hw, applied := opened.Hardware, opened.Content
	cfg.Hardware, cfg.Allowlist = hw, opened.Allowlist
	d, err := dradriver.New(cfg)
	if err != nil {
		return err
	}
	reg, err := cli.NewRegistry()
	if err != nil {
		return err
	}
	stopOps, err := cli.StartOps(o.metricsAddr, cli.Ops{Ready: d.Ready, Registry: reg, Logger: log}, opsListening)
	if err != nil {
		return err
	}
	defer stopOps()
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	if o.deviceConfig == "" {
		close(watched)
	} else {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			defer close(watched)
			_ = devconfig.Watch(watchCtx, devconfig.WatchOptions{
				Path: o.deviceConfig, Applied: applied, Trigger: hup, Interval: o.configPoll, Logger: log,
				Apply: func(ctx context.Context, a capability.Allowlist) error {
					if _, err := devconfig.Check(ctx, o.deviceConfig, hw, a); err != nil {
						return err
					}
					return d.SetAllowlist(ctx, a)
				},
			})
		}()
	}
	err = d.Run(ctx)
	stopWatch()
	<-watched
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
