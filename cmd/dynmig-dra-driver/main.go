package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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

// summary opens -h: what the binary is, in one sentence.
const summary = name + " is dynmig's DRA kubelet plugin (driver " + dradriver.DriverName + "): on a GPU node it publishes every MIG profile and placement as a device, and creates a claim's MIG instance when the kubelet prepares it."

type options struct {
	kubeconfig, deviceConfig, metricsAddr string
	backendName, fakeGPUs                 string
	configPoll                            time.Duration
	// api logs the API server requests that fail and names them in
	// /readyz; nil in tests that bring their own client.
	api *cli.APIMonitor
}

func main() { os.Exit(command(os.Args[1:], os.Stdout, os.Stderr)) }

// command is the binary: it parses and checks args, then runs the driver
// until SIGINT or SIGTERM, and returns the exit code (package
// internal/wiring/cli). Every flag is checked before the cluster is contacted or
// the backend opened.
func command(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cli.SetUsage(fs, summary)
	var o options
	node := fs.String("node", os.Getenv("NODE_NAME"), "this node's name, also the resource pool's (default $NODE_NAME)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")
	fs.StringVar(&o.backendName, "backend", "", "MIG backend, required: "+strings.Join(backend.Names(), ", ")+" (fake only for tests)")
	fs.StringVar(&o.fakeGPUs, "fake-gpus", backend.DefaultFakeGPUs, `fake backend: GPU models, "NxMODEL" or a comma-separated list`)
	cdiDir := fs.String("cdi-dir", "/var/run/cdi", "directory the container runtime reads CDI specs from; claim specs are written there")
	dataDir := fs.String("plugin-data-dir", path.Join(kubeletplugin.KubeletPluginsDir, dradriver.DriverName), "plugin data directory: the DRA socket and the checkpoint of prepared claims")
	registrarDir := fs.String("registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet plugin registration directory")
	fs.StringVar(&o.deviceConfig, "device-config", "", `scheduler device config file whose nvidia.migProfileAllowlist is the profile policy; "" means the built-in default. Reloaded on SIGHUP and when the file changes; a refused config keeps the last good one`)
	fs.DurationVar(&o.configPoll, "device-config-poll", devconfig.DefaultInterval, "how often -device-config is read for changes (0: only on SIGHUP)")
	interval := fs.Duration("maintain-interval", 30*time.Second, "how often the hardware is reconciled against the claims (0: the default)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", DefaultMetricsAddr, `address of /metrics, /healthz and /readyz; "" serves none`)
	healthChecks := backend.HealthCheckFlags(fs)
	enableMIG := backend.EnableMIGFlag(fs)
	deviceNodes := fs.String("device-nodes", "auto", `what the claims' CDI specs inject: "auto" (-backend=nvml: device nodes, driver libraries and hooks from NVIDIA's container toolkit library; -backend=fake: numbered fake nodes), "on" (device nodes only, from the NVIDIA driver's /proc files) or "off" (none)`)
	driverRoot := backend.DriverRootFlag(fs)
	common := cli.Register(fs)
	var checks realize.HealthChecks
	log, code, done := common.Start(fs, name, args, stdout, stderr, func() error {
		var err error
		checks, err = healthChecks()
		if *deviceNodes != "auto" && *deviceNodes != "on" && *deviceNodes != "off" {
			err = errors.Join(err, &cli.FlagError{Flag: "device-nodes", Value: *deviceNodes, Reason: `must be "auto", "on" or "off"`})
		}
		return errors.Join(err,
			cli.Required("node", *node, "this node's name (or set $NODE_NAME, as the DaemonSet does from spec.nodeName)"),
			backend.CheckFlags(o.backendName, o.fakeGPUs),
			backend.CheckDriverRoot(*driverRoot),
			cli.Required("cdi-dir", *cdiDir, "the directory the container runtime reads CDI specs from"),
			cli.Required("plugin-data-dir", *dataDir, "the driver's socket and checkpoint directory"),
			cli.Required("registrar-dir", *registrarDir, "the kubelet's plugin registration directory"),
			cli.NotNegative("device-config-poll", o.configPoll),
			cli.NotNegative("maintain-interval", *interval))
	})
	if done {
		return code
	}
	cfg := dradriver.Config{
		Node: *node, CDIDir: *cdiDir, DataDir: *dataDir, RegistrarDir: *registrarDir,
		MaintainInterval: *interval, HealthChecks: checks, Logger: log,
		Manager: realize.Options{EnableMIG: *enableMIG},
	}
	if err := describeDevices(&cfg, *deviceNodes, o.backendName, *driverRoot, log); err != nil {
		log.Error("CDI generator", "err", err)
		return cli.ExitFailure
	}
	if o.configPoll == 0 {
		o.configPoll = -1 // devconfig: below 0 reads only on the trigger
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, o, cfg); err != nil {
		log.Error("DRA driver failed", "err", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
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
	o.api = cli.NewAPIMonitor(log)
	rc.Wrap(o.api.Wrap)
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
	stopOps, err := cli.StartOps(o.metricsAddr, cli.Ops{Ready: d.Ready, Registry: reg, Logger: log, API: o.api}, opsListening)
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

// describeDevices sets what the claims' CDI specs inject (-device-nodes):
// with "auto", NVIDIA's container toolkit library for real GPUs and
// numbered nodes for fakehal; with "on", device nodes read from the
// driver's /proc files. NVIDIA's library finds the driver under
// driverRoot.
func describeDevices(cfg *dradriver.Config, mode, backendName, driverRoot string, log *slog.Logger) error {
	switch {
	case mode == "on":
		cfg.DeviceNodes = dradriver.ProcNodes{}
	case mode == "auto" && backendName == "nvml":
		gen, err := backend.NVCDI(backend.CDIOptions{DriverRoot: driverRoot, Logger: log})
		if err != nil {
			return err
		}
		cfg.CDIGenerator = gen
	case mode == "auto" && backendName == "fake":
		cfg.CDIGenerator = dradriver.NewFakeCDI()
	}
	return nil
}
