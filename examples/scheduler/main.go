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
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"

	"github.com/dynmig/dynmig/examples/scheduler/extender"
)

func main() {
	addr := flag.String("addr", ":8888", "listen address")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")
	lock := flag.Duration("lock-timeout", extender.DefaultLockTimeout, "how long a bound but unrealized MIG pod keeps its node to itself before it is reported as stale")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*kubeconfig, *addr, *lock, log); err != nil {
		log.Error("scheduler extender failed", "err", err)
		os.Exit(1)
	}
}

func run(kubeconfig, addr string, lock time.Duration, log *slog.Logger) error {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ext := extender.New(client, extender.Options{LockTimeout: lock, Logger: log})
	srv := &http.Server{Addr: addr, Handler: ext.Handler(), ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The informers run until the server has shut down: calls in flight
	// during the shutdown still see a live view.
	informers, stopInformers := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = ext.Run(informers); close(ran) }()
	defer func() { stopInformers(); <-ran }()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("scheduler extender listening", "addr", addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
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
