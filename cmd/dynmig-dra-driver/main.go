package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
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
	"github.com/dynmig/dynmig/internal/backend"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
)

// readAllowlist reads the device config file's allowlist; "" means the
// default.
func readAllowlist(file string) (capability.Allowlist, error) {
	if file == "" {
		return capability.DefaultAllowlist(), nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	cfg, err := capability.ParseDeviceConfig(data)
	if err != nil {
		return nil, fmt.Errorf("-device-config %s: %w", file, err)
	}
	return cfg.Allowlist, nil
}

func main() {
	node := flag.String("node", os.Getenv("NODE_NAME"), "this node's name, also the resource pool's (default $NODE_NAME)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")
	backendName := flag.String("backend", "fake", "MIG backend: "+strings.Join(backend.Names(), ", "))
	fakeGPUs := flag.String("fake-gpus", backend.DefaultFakeGPUs, `fake backend: GPU models, "NxMODEL" or a comma-separated list`)
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "directory the container runtime reads CDI specs from; claim specs are written there")
	dataDir := flag.String("plugin-data-dir", path.Join(kubeletplugin.KubeletPluginsDir, dradriver.DriverName), "plugin data directory: the DRA socket and the checkpoint of prepared claims")
	registrarDir := flag.String("registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet plugin registration directory")
	deviceConfig := flag.String("device-config", "", "scheduler device config file whose nvidia.migProfileAllowlist is the profile policy (\"\" means the built-in default); SIGHUP reads it again")
	interval := flag.Duration("maintain-interval", 30*time.Second, "how often the hardware is reconciled against the claims")
	healthChecks := backend.HealthCheckFlags(flag.CommandLine)
	deviceNodes := flag.String("device-nodes", "auto", `inject MIG device nodes into CDI specs, read from the NVIDIA driver's /proc files: "auto" (with -backend=nvml), "on" or "off"`)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	checks, err := healthChecks()
	if err != nil {
		log.Error("DRA driver failed", "err", err)
		os.Exit(2)
	}

	open := func(ctx context.Context) (realize.Realizer, func(), error) {
		return backend.Open(ctx, *backendName, *fakeGPUs, log)
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
		if *backendName == "nvml" {
			cfg.DeviceNodes = dradriver.ProcNodes{}
		}
	case "off":
	default:
		log.Error("bad -device-nodes", "value", *deviceNodes)
		os.Exit(2)
	}
	err = run(ctx, log, open, *kubeconfig, *deviceConfig, cfg)
	if err != nil {
		log.Error("DRA driver failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, open func(context.Context) (realize.Realizer, func(), error), kubeconfig, deviceConfig string, cfg dradriver.Config) error {
	rc, err := kube.RESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	if cfg.Allowlist, err = readAllowlist(deviceConfig); err != nil {
		return err
	}
	hw, closeHW, err := open(ctx)
	if err != nil {
		return fmt.Errorf("open backend: %w", err)
	}
	defer closeHW()
	cfg.Hardware = hw
	d, err := dradriver.New(cfg)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for {
		select {
		case err := <-done:
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case <-hup:
			a, err := readAllowlist(deviceConfig)
			if err == nil {
				err = d.SetAllowlist(ctx, a)
			}
			if err != nil {
				log.Error("allowlist not changed", "err", err)
				continue
			}
			log.Info("allowlist changed; devices republished", "file", deviceConfig)
		}
	}
}
