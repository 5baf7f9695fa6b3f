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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/examples/dradriver/driver"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
)

// backend opens a MIG backend and returns it with its close function.
type backend func(ctx context.Context, log *slog.Logger) (realize.Realizer, func(), error)

// backends maps -backend values to constructors; backend_nvml.go adds
// "nvml" when built with cgo.
var backends = map[string]backend{"fake": fakeBackend}

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
	var names []string
	for name := range backends {
		names = append(names, name)
	}
	slices.Sort(names)
	node := flag.String("node", os.Getenv("NODE_NAME"), "this node's name, also the resource pool's (default $NODE_NAME)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")
	backendName := flag.String("backend", "fake", "MIG backend: "+strings.Join(names, ", "))
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "directory the container runtime reads CDI specs from; claim specs are written there")
	dataDir := flag.String("plugin-data-dir", path.Join(kubeletplugin.KubeletPluginsDir, driver.DriverName), "plugin data directory: the DRA socket and the checkpoint of prepared claims")
	registrarDir := flag.String("registrar-dir", kubeletplugin.KubeletRegistryDir, "kubelet plugin registration directory")
	deviceConfig := flag.String("device-config", "", "scheduler device config file whose nvidia.migProfileAllowlist is the profile policy (\"\" means the built-in default); SIGHUP reads it again")
	interval := flag.Duration("maintain-interval", 30*time.Second, "how often the hardware is reconciled against the claims")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	open, ok := backends[*backendName]
	if !ok {
		log.Error("unknown backend (nvml needs a cgo build)", "backend", *backendName, "available", names)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, log, open, *kubeconfig, *deviceConfig, driver.Config{
		Node: *node, CDIDir: *cdiDir, DataDir: *dataDir, RegistrarDir: *registrarDir,
		MaintainInterval: *interval, Logger: log,
	})
	if err != nil {
		log.Error("DRA driver failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, open backend, kubeconfig, deviceConfig string, cfg driver.Config) error {
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
	hw, closeHW, err := open(ctx, log)
	if err != nil {
		return fmt.Errorf("open backend: %w", err)
	}
	defer closeHW()
	cfg.Hardware = hw
	d, err := driver.New(cfg)
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
