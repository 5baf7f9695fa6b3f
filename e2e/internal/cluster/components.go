package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/configz"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	kubeschedulertesting "k8s.io/kubernetes/cmd/kube-scheduler/app/testing"
	"k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/schedplugin"
)

// RepoRoot returns the dynmig repository root (the parent of the e2e
// module), located from this source file.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ".."
	}
	// e2e/internal/cluster/components.go -> repository root.
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// DeployDirEnv names an environment variable that, when set, replaces the
// repository's deploy/ directory, to run the tests against other
// manifests.
const DeployDirEnv = "DYNMIG_E2E_DEPLOY"

// DeployPath returns the path of a file under the repository's deploy/
// directory (or $DYNMIG_E2E_DEPLOY), e.g. DeployPath("rbac", "scheduler.yaml").
func DeployPath(elem ...string) string {
	dir := os.Getenv(DeployDirEnv)
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "deploy")
	}
	return filepath.Join(append([]string{dir}, elem...)...)
}

// SchedulerConfigPath is the deployed KubeSchedulerConfiguration.
func SchedulerConfigPath() string { return DeployPath("scheduler", "kube-scheduler-config.yaml") }

// PluginSchedulerConfigPath returns the path of
// schedplugin/deploy/kube-scheduler-config.yaml, the shipped configuration
// of kube-scheduler built with the DynMIG framework plugin.
func PluginSchedulerConfigPath() string {
	return filepath.Join(RepoRoot(), "schedplugin", "deploy", "kube-scheduler-config.yaml")
}

// WithDynMIG registers the DynMIG framework plugin with opts, as
// schedplugin/cmd/kube-scheduler does, for StartSchedulerWith or
// app.NewSchedulerCommand. built, when not nil, is handed every plugin
// the scheduler builds (one per profile that enables it), for inspection.
func WithDynMIG(opts schedplugin.Options, built func(*schedplugin.Plugin)) app.Option {
	factory := schedplugin.Factory(opts)
	return app.WithPlugin(schedplugin.Name, func(ctx context.Context, args k8sruntime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := factory(ctx, args, h)
		if pl, ok := p.(*schedplugin.Plugin); ok && err == nil && built != nil {
			built(pl)
		}
		return p, err
	})
}

// TokenOptions configures ServiceAccountToken. The zero value works.
type TokenOptions struct {
	// BoundPod, when set, binds the token to that pod (as the kubelet's
	// projected token for a pod is); the API server then adds the pod's
	// node to the token's user info (authentication.kubernetes.io/node-name),
	// which node-scoped admission policies read.
	BoundPod *corev1.Pod
	// Expiration; 0 means one hour.
	Expiration time.Duration
}

// ServiceAccountToken requests a token for the ServiceAccount
// namespace/name through the TokenRequest API (the ServiceAccount must
// exist).
func (c *Cluster) ServiceAccountToken(ctx context.Context, namespace, name string, opts TokenOptions) (string, error) {
	exp := int64(opts.Expiration / time.Second)
	if exp <= 0 {
		exp = 3600
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}
	if p := opts.BoundPod; p != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
	}
	tr, err := c.Admin().CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("cluster: token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountConfig returns a client config authenticated as the
// ServiceAccount namespace/name (a bearer token from ServiceAccountToken).
func (c *Cluster) ServiceAccountConfig(ctx context.Context, namespace, name string, opts TokenOptions) (*rest.Config, error) {
	tok, err := c.ServiceAccountToken(ctx, namespace, name, opts)
	if err != nil {
		return nil, err
	}
	return c.BearerConfig(tok), nil
}

// SchedulerConfig is what the harness reads from a KubeSchedulerConfiguration
// file. The file itself is used as it is.
type SchedulerConfig struct {
	// SchedulerNames are the profiles' schedulerName values ("" for the
	// default scheduler's name).
	SchedulerNames []string
	// ExtenderURLs are the extenders' urlPrefix values.
	ExtenderURLs []string
	raw          map[string]any
}

// ReadSchedulerConfig reads a KubeSchedulerConfiguration file.
func ReadSchedulerConfig(path string) (SchedulerConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return SchedulerConfig{}, err
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return SchedulerConfig{}, fmt.Errorf("cluster: %s: %w", path, err)
	}
	sc := SchedulerConfig{raw: raw}
	if profiles, ok := raw["profiles"].([]any); ok {
		for _, p := range profiles {
			m, _ := p.(map[string]any)
			name, _ := m["schedulerName"].(string)
			sc.SchedulerNames = append(sc.SchedulerNames, name)
		}
	}
	if exts, ok := raw["extenders"].([]any); ok {
		for _, e := range exts {
			m, _ := e.(map[string]any)
			u, _ := m["urlPrefix"].(string)
			sc.ExtenderURLs = append(sc.ExtenderURLs, u)
		}
	}
	return sc, nil
}

// SchedulerOptions configures StartScheduler. The zero value works.
type SchedulerOptions struct {
	// ConfigFile is the KubeSchedulerConfiguration; "" means
	// SchedulerConfigPath(). It is used verbatim except for
	// clientConnection.kubeconfig, which is pointed at Client.
	ConfigFile string
	// Client is the scheduler's identity; nil means AdminConfig.
	Client *rest.Config
	// Flags are extra kube-scheduler flags. Leader election is always off
	// (--leader-elect=false, which the scheduler honours with --config):
	// a leader-elected kube-scheduler exits the process when it stops
	// leading, so it cannot run inside a test binary.
	Flags []string
}

// Scheduler is a kube-scheduler built from k8s.io/kubernetes running in the
// test process (cmd/kube-scheduler/app/testing.StartTestServer, or app.Setup
// and app.Run with out-of-tree plugins).
type Scheduler struct {
	stopOnce sync.Once
	stop     func()
	sched    *scheduler.Scheduler // nil for StartScheduler's test server
}

// Plugins returns the plugins the running scheduler's profile
// schedulerName enables at each extension point, its configuration
// merged with kube-scheduler's defaults, as the scheduler built it. It
// reports false for an unknown profile and for a scheduler started by
// StartScheduler, whose test server does not expose them.
func (s *Scheduler) Plugins(schedulerName string) (*schedconfig.Plugins, bool) {
	if s.sched == nil {
		return nil, false
	}
	fw, ok := s.sched.Profiles[schedulerName]
	if !ok {
		return nil, false
	}
	return fw.ListPlugins(), true
}

// StartScheduler starts a kube-scheduler with the given configuration and
// waits until it is healthy. t.Cleanup stops it.
func (c *Cluster) StartScheduler(t *testing.T, opts SchedulerOptions) (*Scheduler, error) {
	file, err := c.schedulerConfigFile(opts)
	if err != nil {
		return nil, err
	}
	flags := append([]string{"--config=" + file, "--leader-elect=false"}, opts.Flags...)
	ctx := klog.NewContext(context.Background(), klog.Background().WithName("kube-scheduler"))
	srv, err := kubeschedulertesting.StartTestServer(t, ctx, flags)
	if err != nil {
		return nil, fmt.Errorf("cluster: start kube-scheduler: %w", err)
	}
	s := &Scheduler{stop: srv.TearDownFn}
	t.Cleanup(s.Stop)
	return s, nil
}

// StartSchedulerWith starts a kube-scheduler with the given configuration
// and the out-of-tree plugins of plugins (app.WithPlugin), as a scheduler
// binary built on kube-scheduler's command runs it: app.Setup, then
// app.Run until Stop. It serves no HTTPS endpoint (--secure-port=0), so
// it returns once the scheduler is set up, not once it is healthy; the
// caller waits for what it needs (a pod bound). t.Cleanup stops it.
func (c *Cluster) StartSchedulerWith(t *testing.T, opts SchedulerOptions, plugins ...app.Option) (*Scheduler, error) {
	file, err := c.schedulerConfigFile(opts)
	if err != nil {
		return nil, err
	}
	o := options.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range o.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(append([]string{"--config=" + file, "--leader-elect=false", "--secure-port=0"}, opts.Flags...)); err != nil {
		return nil, fmt.Errorf("cluster: kube-scheduler flags: %w", err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().WithName("kube-scheduler")))
	cc, sched, err := app.Setup(ctx, o, plugins...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: set up kube-scheduler: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := app.Run(ctx, cc, sched); err != nil && ctx.Err() == nil {
			t.Errorf("kube-scheduler: %v", err)
		}
	}()
	s := &Scheduler{sched: sched, stop: func() {
		cancel()
		<-done
		configz.Delete("componentconfig")
	}}
	t.Cleanup(s.Stop)
	return s, nil
}

// schedulerConfigFile writes opts' configuration, with
// clientConnection.kubeconfig pointed at its client, to a file in the
// cluster's directory and returns the file's path.
func (c *Cluster) schedulerConfigFile(opts SchedulerOptions) (string, error) {
	src := opts.ConfigFile
	if src == "" {
		src = SchedulerConfigPath()
	}
	sc, err := ReadSchedulerConfig(src)
	if err != nil {
		return "", err
	}
	cfg := opts.Client
	if cfg == nil {
		cfg = c.AdminConfig()
	}
	kc, err := c.WriteKubeconfig("kube-scheduler", cfg)
	if err != nil {
		return "", err
	}
	conn, _ := sc.raw["clientConnection"].(map[string]any)
	if conn == nil {
		conn = map[string]any{}
	}
	conn["kubeconfig"] = kc
	sc.raw["clientConnection"] = conn
	data, err := yaml.Marshal(sc.raw)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(c.Dir, "kube-scheduler-config-*.yaml")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// Stop stops the scheduler and waits for it. It is safe to call more than
// once.
func (s *Scheduler) Stop() { s.stopOnce.Do(s.stop) }

// Extender is the scheduler extender
// (extender) served over HTTP in the test process, as
// cmd/dynmig-scheduler-extender's main does.
type Extender struct {
	// Extender is the running extender, for inspection.
	*extender.Extender

	srv      *http.Server
	lock     *os.File
	cancel   context.CancelFunc
	ran      chan struct{}
	served   chan struct{}
	stopOnce sync.Once
}

// ExtenderAddr returns the host:port of the first extender urlPrefix in
// the scheduler configuration file ("" means SchedulerConfigPath()).
func ExtenderAddr(configFile string) (string, error) {
	if configFile == "" {
		configFile = SchedulerConfigPath()
	}
	sc, err := ReadSchedulerConfig(configFile)
	if err != nil {
		return "", err
	}
	if len(sc.ExtenderURLs) == 0 {
		return "", fmt.Errorf("cluster: %s configures no extender", configFile)
	}
	u, err := url.Parse(sc.ExtenderURLs[0])
	if err != nil {
		return "", fmt.Errorf("cluster: %s: extender urlPrefix: %w", configFile, err)
	}
	return u.Host, nil
}

// StartExtender serves an extender built with client and opts on addr
// (host:port, normally ExtenderAddr's) and runs its informers. Because the
// scheduler configuration names a fixed port, the harness first takes an
// exclusive lock on a file named after the port in os.TempDir() (waiting
// for it until ctx is done), so that test binaries of several packages,
// which `go test ./...` runs in parallel, take turns on it. Extender.Stop
// (or t.Cleanup) releases it.
func StartExtender(ctx context.Context, t interface{ Cleanup(func()) }, client kubernetes.Interface, addr string, opts extender.Options) (*Extender, error) {
	lock, err := lockPort(ctx, addr)
	if err != nil {
		return nil, err
	}
	ln, err := listenRetry(ctx, addr)
	if err != nil {
		unlock(lock)
		return nil, err
	}
	ext := extender.New(client, opts)
	runCtx, cancel := context.WithCancel(context.Background())
	e := &Extender{
		Extender: ext,
		srv:      &http.Server{Handler: ext.Handler(), ReadHeaderTimeout: 10 * time.Second},
		lock:     lock,
		cancel:   cancel,
		ran:      make(chan struct{}),
		served:   make(chan struct{}),
	}
	go func() { defer close(e.ran); _ = ext.Run(runCtx) }()
	go func() { defer close(e.served); _ = e.srv.Serve(ln) }()
	t.Cleanup(e.Stop)
	return e, nil
}

// Stop shuts the HTTP server down, stops the informers and releases the
// port lock. It is safe to call more than once.
func (e *Extender) Stop() {
	e.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.srv.Shutdown(ctx)
		<-e.served
		e.cancel()
		<-e.ran
		unlock(e.lock)
	})
}

func lockPort(ctx context.Context, addr string) (*os.File, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: extender address %q: %w", addr, err)
	}
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "dynmig-e2e-port-"+port+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("cluster: lock port %s: %w", port, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("cluster: waiting for port %s lock: %w", port, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func unlock(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}

// listenRetry listens on addr, retrying while the port is still held (by
// a server of this process shutting down, or one in TIME_WAIT) until ctx
// is done.
func listenRetry(ctx context.Context, addr string) (net.Listener, error) {
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: listen on %s: %w (last error: %v)", addr, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Plugin is the device plugin (deviceplugin)
// running in the test process against a Node's device manager.
type Plugin struct {
	*deviceplugin.Plugin

	cancel   context.CancelFunc
	done     chan struct{}
	err      error
	stopOnce sync.Once
}

// StartPlugin builds a device plugin for this node from cfg (Node,
// SocketDir and KubeletSocket are filled in: the plugin registers with this
// node's device manager over its real registration socket), runs it, and
// waits until it serves its socket or ctx is done. t.Cleanup stops it.
func (n *Node) StartPlugin(ctx context.Context, t interface{ Cleanup(func()) }, cfg deviceplugin.Config) (*Plugin, error) {
	cfg.Node = n.Name
	cfg.SocketDir = n.SocketDir()
	cfg.KubeletSocket = n.KubeletSocket()
	p, err := deviceplugin.New(cfg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	rp := &Plugin{Plugin: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rp.done)
		rp.err = p.Run(runCtx)
	}()
	t.Cleanup(func() { _ = rp.Stop() })
	select {
	case <-p.Ready():
		return rp, nil
	case <-rp.done:
		cancel()
		return nil, fmt.Errorf("cluster: device plugin stopped while starting: %w", rp.err)
	case <-ctx.Done():
		_ = rp.Stop()
		return nil, fmt.Errorf("cluster: device plugin not ready: %w", ctx.Err())
	}
}

// Stop stops the plugin, waits for Run to return and returns its error.
// It is safe to call more than once.
func (p *Plugin) Stop() error {
	p.stopOnce.Do(func() {
		p.cancel()
		<-p.done
	})
	return p.err
}

// Done is closed when the plugin's Run has returned.
func (p *Plugin) Done() <-chan struct{} { return p.done }
