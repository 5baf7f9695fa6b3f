package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/internal/wiring/cli"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

const name = "dynmig-scheduler-extender"

// DefaultAddr is the extender's default listen address: loopback, as the
// extender serves unauthenticated HTTP to its own pod's kube-scheduler.
const DefaultAddr = "127.0.0.1:8888"

// DefaultMetricsAddr is the default address of /metrics, /healthz and
// /readyz.
const DefaultMetricsAddr = ":9395"

// opsListening is told the operations server's address (tests listen on
// port 0).
var opsListening = func(net.Addr) {}

type config struct {
	kubeconfig, addr, metricsAddr string
	legacyMetrics                 bool
	qps                           float64
	burst                         int
	opts                          extender.Options
	// api logs the API server requests that fail and names them in
	// /readyz; nil in tests that bring their own client.
	api *cli.APIMonitor
}

// DefaultAPIQPS and DefaultAPIBurst are kube-scheduler's own client limits
// (its clientConnection defaults). client-go's defaults (5 and 10) would
// hold the extender to about one MIG pod a second: each bind takes a list,
// a binding and an event.
const (
	DefaultAPIQPS   = 50
	DefaultAPIBurst = 100
)

// summary opens -h: what the binary is, in one sentence.
const summary = name + " is dynmig's kube-scheduler extender: beside kube-scheduler it filters, scores and binds MIG pods, reserving an exact MIG profile and placement for each before the pod is bound."

func main() { os.Exit(command(os.Args[1:], os.Stdout, os.Stderr)) }

// command is the binary: it parses and checks args, then serves the
// extender until SIGINT or SIGTERM, and returns the exit code (package
// internal/wiring/cli). Every flag is checked before the cluster is contacted.
func command(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cli.SetUsage(fs, summary)
	var c config
	fs.StringVar(&c.addr, "addr", DefaultAddr, "listen address of the extender's filter, prioritize and bind calls (unauthenticated: keep it on loopback)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", DefaultMetricsAddr, `address of /metrics, /healthz and /readyz; "" serves none`)
	fs.BoolVar(&c.legacyMetrics, "legacy-metrics", false, "also export the legacy nodeGPUMigInstance series")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file for running out of the cluster; empty means $KUBECONFIG, and with that empty too, the pod's service account")
	lock := fs.Duration("lock-timeout", extender.DefaultLockTimeout, "how long a bound but unrealized MIG pod keeps its node to itself before it is reported as stale (0: the default)")
	resource := fs.String("resource", string(kube.ResourceGPU), "the device plugin's extended resource (its -resource)")
	fs.Float64Var(&c.qps, "kube-api-qps", DefaultAPIQPS, "requests per second to the API server, sustained (kube-scheduler's own default)")
	fs.IntVar(&c.burst, "kube-api-burst", DefaultAPIBurst, "requests to the API server in a burst above -kube-api-qps")
	skipFresh := fs.Bool("skip-fresh-node-read", false, "bind from the informer's view alone, without re-listing the node's pods from the API server (unsafe after a leadership change)")
	common := cli.Register(fs)
	log, code, done := common.Start(fs, name, args, stdout, stderr, func() error {
		return errors.Join(
			cli.Required("addr", c.addr, "the address kube-scheduler calls, such as "+DefaultAddr),
			cli.Required("resource", *resource, "the device plugin's extended resource, such as nvidia.com/gpu"),
			cli.NotNegative("lock-timeout", *lock),
			cli.Positive("kube-api-qps", c.qps),
			cli.Positive("kube-api-burst", float64(c.burst)))
	})
	if done {
		return code
	}
	c.opts = extender.Options{LockTimeout: *lock, Resource: corev1.ResourceName(*resource), SkipFreshNodeRead: *skipFresh, Logger: log}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		log.Error("scheduler extender failed", "err", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

func run(ctx context.Context, c config) error {
	cfg, err := restConfig(c)
	if err != nil {
		return err
	}
	c.api = cli.NewAPIMonitor(c.opts.Logger)
	cfg.Wrap(c.api.Wrap)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return serve(ctx, client, c)
}

// restConfig returns the API client's configuration: c's kubeconfig (see
// kube.RESTConfig) with c's rate limit.
func restConfig(c config) (*rest.Config, error) {
	cfg, err := kube.RESTConfig(c.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(c.qps), c.burst
	return cfg, nil
}

// serve runs the extender over client until ctx is done.
func serve(ctx context.Context, client kubernetes.Interface, c config) error {
	log := c.opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ext := extender.New(client, c.opts)
	reg, err := cli.NewRegistry(ext.Collector(), ext.InstanceCollector(reservation.CollectorOptions{LegacyMetrics: c.legacyMetrics}))
	if err != nil {
		return err
	}
	stopOps, err := cli.StartOps(c.metricsAddr, cli.Ops{Ready: ext.Ready, Registry: reg, Logger: log, API: c.api}, opsListening)
	if err != nil {
		return err
	}
	defer stopOps()
	srv := &http.Server{Addr: c.addr, Handler: ext.Handler(), ReadHeaderTimeout: 10 * time.Second}

	// The informers run until the server has shut down: calls in flight
	// during the shutdown still see a live view.
	informers, stopInformers := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = ext.Run(informers); close(ran) }()
	defer func() { stopInformers(); <-ran }()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("scheduler extender listening", "addr", c.addr)
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
