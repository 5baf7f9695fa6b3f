package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/examples/deviceplugin/plugin"
	"github.com/dynmig/dynmig/fakehal"
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
	rc, err := restConfig(*kubeconfig)
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

// restConfig returns the API client configuration: the kubeconfig file at
// path, else the one $KUBECONFIG names, else the pod's service account
// (in-cluster). Out of the cluster, pass -kubeconfig or set $KUBECONFIG.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (out of a cluster, pass -kubeconfig): %w", err)
		}
		return cfg, nil
	}
	return loadKubeconfig(path)
}

// errKubeconfig: the kubeconfig file names no usable context, or uses a
// feature this loader does not support.
var errKubeconfig = errors.New("kubeconfig")

// loadKubeconfig reads the current context of one kubeconfig file, as
// kubectl would: the server, its CA (file or data), insecure-skip-tls-verify,
// tls-server-name and proxy-url, and the user's client certificate and key
// (file or data), token or token file, basic credentials or exec plugin.
// Relative file names are relative to the file's directory. Impersonation
// and auth-provider plugins are refused, as is a list of files.
func loadKubeconfig(path string) (*rest.Config, error) {
	if strings.ContainsRune(path, filepath.ListSeparator) {
		return nil, fmt.Errorf("%w: %q: name one file", errKubeconfig, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	obj, _, err := clientcmdlatest.Codec.Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errKubeconfig, path, err)
	}
	kc, ok := obj.(*clientcmdapi.Config)
	if !ok {
		return nil, fmt.Errorf("%w: %s: not a kubeconfig (%T)", errKubeconfig, path, obj)
	}
	kctx := kc.Contexts[kc.CurrentContext]
	if kctx == nil {
		return nil, fmt.Errorf("%w: %s: no context %q", errKubeconfig, path, kc.CurrentContext)
	}
	cluster := kc.Clusters[kctx.Cluster]
	if cluster == nil || cluster.Server == "" {
		return nil, fmt.Errorf("%w: %s: no cluster %q with a server", errKubeconfig, path, kctx.Cluster)
	}
	user := &clientcmdapi.AuthInfo{}
	if kctx.AuthInfo != "" {
		if user = kc.AuthInfos[kctx.AuthInfo]; user == nil {
			return nil, fmt.Errorf("%w: %s: no user %q", errKubeconfig, path, kctx.AuthInfo)
		}
	}
	if user.AuthProvider != nil || user.Impersonate != "" || user.ImpersonateUID != "" || len(user.ImpersonateGroups) > 0 || len(user.ImpersonateUserExtra) > 0 {
		return nil, fmt.Errorf("%w: %s: user %q: auth-provider and impersonation are not supported", errKubeconfig, path, kctx.AuthInfo)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	abs := func(name string) string {
		if name == "" || filepath.IsAbs(name) {
			return name
		}
		return filepath.Join(dir, name)
	}
	cfg := &rest.Config{
		Host:               cluster.Server,
		DisableCompression: cluster.DisableCompression,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure: cluster.InsecureSkipTLSVerify, ServerName: cluster.TLSServerName,
			CAFile: abs(cluster.CertificateAuthority), CAData: cluster.CertificateAuthorityData,
			CertFile: abs(user.ClientCertificate), CertData: user.ClientCertificateData,
			KeyFile: abs(user.ClientKey), KeyData: user.ClientKeyData,
		},
		BearerToken: user.Token, BearerTokenFile: abs(user.TokenFile),
		Username: user.Username, Password: user.Password,
	}
	if cluster.ProxyURL != "" {
		u, err := url.Parse(cluster.ProxyURL)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: proxy-url: %w", errKubeconfig, path, err)
		}
		cfg.Proxy = http.ProxyURL(u)
	}
	if user.Exec != nil {
		cfg.ExecProvider = user.Exec
		if strings.ContainsRune(user.Exec.Command, filepath.Separator) {
			cfg.ExecProvider.Command = abs(user.Exec.Command)
		}
		cfg.ExecProvider.Config = cluster.Extensions["client.authentication.k8s.io/exec"]
	}
	return cfg, nil
}
