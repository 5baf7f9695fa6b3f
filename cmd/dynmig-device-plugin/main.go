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
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/internal/wiring/backend"
	"github.com/dynmig/dynmig/internal/wiring/cli"
	"github.com/dynmig/dynmig/internal/wiring/devconfig"
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

// summary opens -h: what the binary is, in one sentence.
const summary = name + " is dynmig's kubelet device plugin: on a GPU node it creates each container's MIG instance at the placement the dynmig scheduler reserved, and destroys it when the pod ends."

type options struct {
	kubeconfig, metricsAddr, deviceConfig string
	backendName, fakeGPUs                 string
	configPoll                            time.Duration
	// api logs the API server requests that fail and names them in
	// /readyz; nil in tests that bring their own client.
	api *cli.APIMonitor
}

func main() { os.Exit(command(os.Args[1:], os.Stdout, os.Stderr)) }

// command is the binary: it parses and checks args, then runs the plugin
// until SIGINT or SIGTERM, and returns the exit code (package
// internal/wiring/cli). Every flag is checked before the cluster is contacted or
// the backend opened.
func command(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cli.SetUsage(fs, summary)
	var o options
	node := fs.String("node", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.backendName, "backend", "", "MIG backend, required: "+strings.Join(backend.Names(), ", ")+" (fake only for tests)")
	fs.StringVar(&o.fakeGPUs, "fake-gpus", backend.DefaultFakeGPUs, `fake backend: GPU models, "NxMODEL" or a comma-separated list`)
	socketDir := fs.String("socket-dir", v1beta1.DevicePluginPath, "kubelet device-plugin directory")
	checkpoint := fs.String("checkpoint", "", `the plugin's checkpoint file (what it observed and handed out, kept across restarts); "" means `+
		deviceplugin.CheckpointDir+"/"+deviceplugin.CheckpointFile+` under -socket-dir (a directory: the kubelet removes plain files there)`)
	resource := fs.String("resource", "nvidia.com/gpu", "extended resource name")
	schedulers := fs.String("scheduler-names", deviceplugin.DefaultSchedulerName, "comma-separated spec.schedulerName values of the schedulers whose extender writes reservation records")
	podResources := fs.String("pod-resources-socket", deviceplugin.DefaultPodResourcesSocket, `kubelet PodResources API socket for the after-the-fact assignment check ("" skips it)`)
	strategy := fs.String("device-list-strategy", string(deviceplugin.DeviceListEnvVar), "how Allocate hands a container its MIG devices, as NVIDIA's device plugin names it: "+strategyNames())
	cdiDir := fs.String("cdi-dir", deviceplugin.DefaultCDIDir, "directory the container runtime reads CDI specs from; with a cdi-* -device-list-strategy the plugin keeps one spec per MIG instance there")
	driverRoot := backend.DriverRootFlag(fs)
	allowMM := fs.Bool("allow-mig-manager", false, "mutate GPUs even while NVIDIA MIG Manager may own the node (dangerous)")
	enableMIG := backend.EnableMIGFlag(fs)
	fs.StringVar(&o.metricsAddr, "metrics-addr", DefaultMetricsAddr, `address of /metrics (dynmig_gpu_healthy, dynmig_deviceplugin_allocation_mismatches_total), /healthz and /readyz; "" serves none`)
	fs.StringVar(&o.deviceConfig, "device-config", "", `scheduler device config file (the ConfigMap the scheduler reads) whose nvidia.migProfileAllowlist is the profile policy; "" means the built-in default. Reloaded on SIGHUP and when the file changes; a refused config keeps the last good one`)
	fs.DurationVar(&o.configPoll, "device-config-poll", devconfig.DefaultInterval, "how often -device-config is read for changes (0: only on SIGHUP)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")
	healthChecks := backend.HealthCheckFlags(fs)
	common := cli.Register(fs)
	var checks realize.HealthChecks
	var listStrategy deviceplugin.DeviceListStrategy
	log, code, done := common.Start(fs, name, args, stdout, stderr, func() error {
		var err, strategyErr error
		checks, err = healthChecks()
		if listStrategy, strategyErr = deviceplugin.ParseDeviceListStrategy(*strategy); strategyErr != nil {
			strategyErr = fmt.Errorf("-device-list-strategy: %w", strategyErr)
		}
		return errors.Join(err, strategyErr,
			cli.Required("node", *node, "this node's name (or set $NODE_NAME, as the DaemonSet does from spec.nodeName)"),
			backend.CheckFlags(o.backendName, o.fakeGPUs),
			backend.CheckDriverRoot(*driverRoot),
			cli.Required("resource", *resource, "the extended resource the plugin advertises, such as nvidia.com/gpu"),
			cli.Required("socket-dir", *socketDir, "the kubelet's device-plugin directory"),
			cli.NotNegative("device-config-poll", o.configPoll))
	})
	if done {
		return code
	}
	if o.configPoll == 0 {
		o.configPoll = -1 // devconfig: below 0 reads only on the trigger
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	gen, err := cdiGenerator(o.backendName, *driverRoot, log)
	if err != nil {
		log.Error("CDI generator", "err", err)
		return cli.ExitFailure
	}
	if err := run(ctx, o, deviceplugin.Config{
		Node: *node, ResourceName: *resource, SchedulerNames: strings.Split(*schedulers, ","), SocketDir: *socketDir, Checkpoint: *checkpoint,
		KubeletSocket: *socketDir + "/kubelet.sock", PodResourcesSocket: *podResources, AllowMIGManager: *allowMM, HealthChecks: checks, Logger: log,
		Manager:            realize.Options{EnableMIG: *enableMIG},
		DeviceListStrategy: listStrategy, CDIDir: *cdiDir, CDIGenerator: gen,
	}); err != nil {
		log.Error("device plugin failed", "err", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// cdiGenerator describes the backend's MIG instances in CDI specs: with
// NVIDIA's container toolkit library for real GPUs (device nodes, the
// driver's libraries, the toolkit's hooks, all found under driverRoot),
// numbered nodes for fakehal.
func cdiGenerator(backendName, driverRoot string, log *slog.Logger) (deviceplugin.CDIGenerator, error) {
	switch backendName {
	case "fake":
		return deviceplugin.NewFakeCDI(), nil
	case "nvml":
		return backend.NVCDI(backend.CDIOptions{DriverRoot: driverRoot, Logger: log})
	}
	return deviceplugin.NewProcCDI(""), nil
}

// strategyNames lists the device list strategies for -help.
func strategyNames() string {
	var names []string
	for _, d := range deviceplugin.DeviceListStrategies() {
		names = append(names, string(d))
	}
	return strings.Join(names, ", ")
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
	o.api = cli.NewAPIMonitor(cfg.Logger)
	rc.Wrap(o.api.Wrap)
	if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	open := func(ctx context.Context) (realize.Realizer, func(), error) {
		return backend.Open(ctx, o.backendName, o.fakeGPUs, cfg.Logger)
	}
	return serve(ctx, open, o, cfg)
}

// serve opens the backend and runs the plugin until ctx is done, with its
// operations server on o.metricsAddr and o.deviceConfig watched (package
// internal/wiring/devconfig: a refused config stops the start, and keeps the last
// good one on reload).
func serve(ctx context.Context, open func(context.Context) (realize.Realizer, func(), error), o options, cfg deviceplugin.Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opened, err := devconfig.Open(ctx, o.deviceConfig, open)
	if err != nil {
		return err
	}
	defer opened.Close()
	hw, applied := opened.Hardware, opened.Content
	cfg.Hardware, cfg.Allowlist = hw, opened.Allowlist
	p, err := deviceplugin.New(cfg)
	if err != nil {
		return err
	}
	defer p.Close() // the checkpoint lock, should Run not be reached
	// dynmig_gpu_healthy and dynmig_deviceplugin_allocation_mismatches_total.
	reg, err := cli.NewRegistry(append(p.Collectors(), p.HealthCollector())...)
	if err != nil {
		return err
	}
	stopOps, err := cli.StartOps(o.metricsAddr, cli.Ops{Ready: ready(p), Registry: reg, Logger: log, API: o.api}, opsListening)
	if err != nil {
		return err
	}
	defer stopOps()
	if o.deviceConfig == "" {
		return p.Run(ctx)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-p.Ready(): // SetAllowlist needs the plugin running
		case <-watchCtx.Done():
			return
		}
		_ = devconfig.Watch(watchCtx, devconfig.WatchOptions{
			Path: o.deviceConfig, Applied: applied, Trigger: hup, Interval: o.configPoll, Logger: log,
			Apply: func(ctx context.Context, a capability.Allowlist) error {
				if _, err := devconfig.Check(ctx, o.deviceConfig, hw, a); err != nil {
					return err
				}
				return p.SetAllowlist(ctx, a)
			},
		})
	}()
	err = p.Run(ctx)
	stopWatch()
	<-watched
	return err
}

// ready is the readiness check: the plugin's pod cache synced, it serves
// its socket and is registered with the kubelet, also again after a
// kubelet restart ([deviceplugin.Plugin.Serving]).
func ready(p *deviceplugin.Plugin) func() error {
	return func() error {
		if !p.Serving() {
			return errNotRegistered
		}
		return nil
	}
}
