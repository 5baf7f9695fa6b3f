package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/kube"
)

func main() {
	addr := flag.String("addr", ":8888", "listen address")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")
	lock := flag.Duration("lock-timeout", extender.DefaultLockTimeout, "how long a bound but unrealized MIG pod keeps its node to itself before it is reported as stale")
	resource := flag.String("resource", string(kube.ResourceGPU), "the device plugin's extended resource (its -resource)")
	skipFresh := flag.Bool("skip-fresh-node-read", false, "bind from the informer's view alone, without re-listing the node's pods from the API server (unsafe after a leadership change)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts := extender.Options{LockTimeout: *lock, Resource: corev1.ResourceName(*resource), SkipFreshNodeRead: *skipFresh, Logger: log}
	if err := run(*kubeconfig, *addr, opts); err != nil {
		log.Error("scheduler extender failed", "err", err)
		os.Exit(1)
	}
}

func run(kubeconfig, addr string, opts extender.Options) error {
	log := opts.Logger
	cfg, err := kube.RESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ext := extender.New(client, opts)
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
