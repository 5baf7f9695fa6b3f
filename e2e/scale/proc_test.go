package scale_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/schedplugin"
)

// The environment of a child process: the test binary re-executed as one
// component (TestMain, runChild), so that its CPU time is its own
// (/proc/<pid>/stat). childDirEnv names its directory, which holds its
// configuration (childConfig) and receives the address it serves its
// metrics on (childAddr) once it does.
const (
	roleEnv       = "DYNMIG_E2E_SCALE_ROLE"
	childDirEnv   = "DYNMIG_E2E_SCALE_DIR"
	childConfig   = "config.yaml"
	childAddr     = "addr"
	childMetrics  = "/metrics"
	childLog      = "log"
	roleScheduler = "kube-scheduler"        // upstream kube-scheduler (the extender's)
	rolePlugin    = "kube-scheduler-dynmig" // kube-scheduler built with DynMIG
	roleExtender  = "extender"
)

// runChild is the child process of the given role, with its files in dir.
// It serves its process's metrics registry (legacyregistry, where
// kube-scheduler's metrics are) on 127.0.0.1 and, as the extender, the
// extender's routes on the same port. It returns on SIGTERM, or when
// kube-scheduler does.
func runChild(role, dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+childMetrics, legacyregistry.Handler())
	// For a profile of one measurement, taken by hand while it runs
	// (the address is in the child's directory).
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", role)
	cfg := filepath.Join(dir, childConfig)
	var run func() error
	switch role {
	case roleScheduler, rolePlugin:
		var opts []schedulerapp.Option
		if role == rolePlugin {
			opts = append(opts, cluster.WithDynMIG(schedplugin.Options{Logger: log}, nil))
		}
		cmd := schedulerapp.NewSchedulerCommand(opts...)
		cmd.SetArgs([]string{"--config=" + cfg, "--leader-elect=false", "--secure-port=0"})
		run = func() error { return cmd.ExecuteContext(ctx) }
	case roleExtender:
		if run, err = serveExtender(ctx, cfg, mux, log); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s=%q: want %q, %q or %q", roleEnv, role, roleScheduler, rolePlugin, roleExtender)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if err := publish(filepath.Join(dir, childAddr), ln.Addr().String()); err != nil {
		return err
	}
	return run()
}

// serveExtender adds the extender's routes to mux and returns what runs
// its informers until ctx is done. kubeconfig is the file the extender's
// client reads.
func serveExtender(ctx context.Context, kubeconfig string, mux *http.ServeMux, log *slog.Logger) (func() error, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// As kube-scheduler's: client-go's defaults (5 QPS, burst 10) would
	// hold the extender to about one bind a second.
	cfg.QPS, cfg.Burst = schedulerQPS, schedulerBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ext := extender.New(client, extender.Options{Logger: log})
	mux.Handle("/", ext.Handler())
	return func() error {
		if err := ext.Run(ctx); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}, nil
}

// publish writes value to path atomically, so that a reader never sees
// part of it.
func publish(path, value string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(value), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// child is a component running as a child process (runChild).
type child struct {
	role string
	addr string // where it serves childMetrics
	cmd  *exec.Cmd
	log  string

	stopOnce sync.Once
}

// startChild re-executes the test binary as role with config (a
// kubeconfig for the extender, a KubeSchedulerConfiguration for the
// schedulers) and waits until it serves. t.Cleanup stops it and shows the
// end of its log when the test failed.
func startChild(t *testing.T, ctx context.Context, role string, config []byte) *child {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), role+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, childConfig), config, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &child{role: role, log: filepath.Join(dir, childLog)}
	logFile, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), roleEnv+"="+role, childDirEnv+"="+dir)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", role, err)
	}
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			if out, err := os.ReadFile(c.log); err == nil {
				t.Logf("log of %s (last 16 KiB):\n%s", role, out[max(0, len(out)-16<<10):])
			}
		}
	})
	err = cluster.WaitFor(ctx, 50*time.Millisecond, role+" serving", func(context.Context) (bool, error) {
		addr, err := os.ReadFile(filepath.Join(dir, childAddr))
		c.addr = string(addr)
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// stop asks the child to stop (SIGTERM) and waits for it, killing it
// after 30 seconds.
func (c *child) stop() {
	c.stopOnce.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { defer close(done); _ = c.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-done
		}
	})
}

// cpu is the child's user and system CPU time so far.
func (c *child) cpu(t *testing.T) time.Duration {
	t.Helper()
	d, err := procCPU(strconv.Itoa(c.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("CPU time of %s: %v", c.role, err)
	}
	return d
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procCPU reads utime and stime (fields 14 and 15) of /proc/<pid>/stat;
// pid "self" is this process.
func procCPU(pid string) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, errors.New("no command name in /proc/<pid>/stat")
	}
	f := strings.Fields(string(data[i+1:])) // from field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat has %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// schedulerConfig returns the configuration file src with the client's
// QPS and burst raised to schedulerQPS and schedulerBurst, its kubeconfig
// set to kubeconfig and, when extender is not "", its first extender
// pointed at that address.
func schedulerConfig(t *testing.T, src, kubeconfig, extender string) []byte {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	conn, _ := raw["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["qps"], conn["burst"], conn["kubeconfig"] = schedulerQPS, schedulerBurst, kubeconfig
	raw["clientConnection"] = conn
	if extender != "" {
		exts, _ := raw["extenders"].([]any)
		if len(exts) == 0 {
			t.Fatalf("%s configures no extender", src)
		}
		e, _ := exts[0].(map[string]any)
		prefix, _ := e["urlPrefix"].(string)
		u, err := url.Parse(prefix)
		if err != nil {
			t.Fatalf("%s: extender urlPrefix %q: %v", src, prefix, err)
		}
		u.Host = extender
		e["urlPrefix"] = u.String()
	}
	if data, err = yaml.Marshal(raw); err != nil {
		t.Fatal(err)
	}
	return data
}

// cpuTime is the test process's user and system CPU time so far: the
// machine's load does not inflate it as it does wall time. It leaves out
// the child processes.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
