package ha_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/schedplugin"
)

// The environment of a scheduler subprocess. pairDirEnv names its
// directory, which holds the configuration template (pairConfig) and
// receives the address it serves on (pairAddr) once it does; pairKindEnv
// names the deployment it runs (kindExtender or kindPlugin).
const (
	roleEnv       = "DYNMIG_E2E_HA_ROLE"
	roleScheduler = "scheduler-pair"
	pairDirEnv    = "DYNMIG_E2E_HA_DIR"
	pairKindEnv   = "DYNMIG_E2E_HA_KIND"
	pairConfig    = "config.yaml"
	pairAddr      = "pair.addr"
	bindsPath     = "/e2e/binds"
	// readsPath answers how many consistent reads of a node's pods
	// (listings by spec.nodeName) the pair's dynmig component made.
	readsPath = "/e2e/reads"
	// holdPath answers whether the pair's pod watches are held (GET) and
	// releases them (POST); see podGate.
	holdPath = "/e2e/hold"
	// holdAfterEnv, when set, holds the pod watches of the pair's dynmig
	// component from the first pod event that carries this string on
	// (see podGate).
	holdAfterEnv = "DYNMIG_E2E_HA_HOLD_AFTER"
)

// The scheduler deployments under test, by subtest name.
const (
	// kindExtender is the upstream kube-scheduler with the extender as a
	// localhost sidecar (deploy/scheduler/kube-scheduler-config.yaml).
	kindExtender = "extender"
	// kindPlugin is kube-scheduler built with the DynMIG framework plugin
	// (schedplugin/deploy/kube-scheduler-config.yaml).
	kindPlugin = "plugin"
)

// TestMain runs a scheduler replica instead of the tests when the binary
// is re-executed as one (see startPair). Otherwise it runs the tests and
// checks that no goroutine outlives them, ignoring, as the other e2e
// packages do, the control plane's process-lifetime goroutines
// (wait.Forever) and the watch cache's wake-up timer, which ends within
// 3 s of the API server stopping.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == roleScheduler {
		if err := runPair(os.Getenv(pairDirEnv), os.Getenv(pairKindEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "scheduler pair:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.Forever"),
		goleak.IgnoreTopFunction("k8s.io/apiserver/pkg/storage/cacher.(*watchCache).waitUntilFreshLocked.func2"),
	)
}

// runPair is one replica of the deployed scheduler pod, of the given kind,
// with the configuration template in dir. It serves on 127.0.0.1 (a port
// of its own, as each pod has its own loopback) how many bindings its
// dynmig component made (bindsPath), its podGate (holdPath), and:
//
//   - kindExtender: the extender, with kube-scheduler's extender URL
//     pointed at that port; the extender's client watches pods through
//     the gate.
//   - kindPlugin: a reverse proxy to the API server that kube-scheduler,
//     DynMIG included, reaches the API through (its kubeconfig is
//     rewritten to point there), counting pods/binding calls; pod watches
//     go through the gate.
//
// It returns when kube-scheduler does; a leader-elected kube-scheduler
// that stops leading exits the process itself.
func runPair(dir, kind string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	raw, err := readYAML(filepath.Join(dir, pairConfig))
	if err != nil {
		return err
	}
	conn, _ := raw["clientConnection"].(map[string]any)
	kubeconfig, _ := conn["kubeconfig"].(string)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	gate := newPodGate(os.Getenv(holdAfterEnv))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var binds atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+bindsPath, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, binds.Load())
	})
	mux.HandleFunc("GET "+readsPath, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, gate.reads.Load())
	})
	mux.HandleFunc("GET "+holdPath, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, gate.holding())
	})
	mux.HandleFunc("POST "+holdPath, func(w http.ResponseWriter, _ *http.Request) {
		gate.release()
	})
	var plugins []schedulerapp.Option
	switch kind {
	case kindExtender:
		cfg.Wrap(gate.wrap)
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		ext := extender.New(client, extender.Options{Logger: log})
		informers, stopInformers := context.WithCancel(context.Background())
		defer stopInformers()
		go func() { _ = ext.Run(informers) }()
		handler := ext.Handler()
		mux.HandleFunc("POST /bind", func(w http.ResponseWriter, r *http.Request) {
			binds.Add(1)
			handler.ServeHTTP(w, r)
		})
		mux.Handle("/", handler)
		if err := pointExtenderAt(raw, addr); err != nil {
			return err
		}
	case kindPlugin:
		proxy, err := apiProxy(cfg, func(rt http.RoundTripper) http.RoundTripper { return countBinds(gate.wrap(rt), &binds) })
		if err != nil {
			return err
		}
		mux.Handle("/", proxy)
		kc := filepath.Join(dir, "proxy.kubeconfig")
		if err := writeProxyKubeconfig(kc, addr); err != nil {
			return err
		}
		conn["kubeconfig"] = kc
		plugins = append(plugins, cluster.WithDynMIG(schedplugin.Options{Logger: log}, nil))
	default:
		return fmt.Errorf("%s=%q: want %q or %q", pairKindEnv, kind, kindExtender, kindPlugin)
	}
	final := filepath.Join(dir, "kube-scheduler.yaml")
	if err := writeYAML(final, raw); err != nil {
		return err
	}

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// Published only once the pair serves, so the test can ask it.
	tmp := filepath.Join(dir, pairAddr+".tmp")
	if err := os.WriteFile(tmp, []byte(addr), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, pairAddr)); err != nil {
		return err
	}

	// No HTTPS endpoint: two replicas share the host, and the test needs
	// none of kube-scheduler's own endpoints.
	cmd := schedulerapp.NewSchedulerCommand(plugins...)
	cmd.SetArgs([]string{"--config=" + final, "--secure-port=0", "--v=2"})
	return cmd.ExecuteContext(ctx)
}

// apiProxy returns a reverse proxy to cfg's API server that authenticates
// as cfg does; wrap wraps its transport. It asks the API server for gzip
// itself, so that wrap sees watch events uncompressed.
func apiProxy(cfg *rest.Config, wrap func(http.RoundTripper) http.RoundTripper) (*httputil.ReverseProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("API server %q: %w", cfg.Host, err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Del("Accept-Encoding")
		},
		Transport:     wrap(rt),
		FlushInterval: -1, // watch events as they come
	}, nil
}

// countBinds counts the pods/binding calls made through rt.
func countBinds(rt http.RoundTripper, n *atomic.Int64) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/binding") {
			n.Add(1)
		}
		return rt.RoundTrip(r)
	})
}

// writeProxyKubeconfig writes a kubeconfig for the plain-HTTP proxy on
// addr, which adds the credentials itself.
func writeProxyKubeconfig(path, addr string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: "http://" + addr}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	return clientcmd.WriteToFile(*kc, path)
}

// podGate holds back the pod watch events a replica receives, so that
// its view of pods stays as it was at one event while the cluster moves
// on (a replica whose pod watch stalls). Armed with a marker, it passes
// every pod watch response through until a chunk carrying the marker has
// passed, then holds everything after it, on every pod watch, until
// released; node watches and all other requests pass (listings are
// current). Unarmed, it never holds.
type podGate struct {
	marker []byte
	reads  atomic.Int64 // listings of one node's pods (spec.nodeName) that passed

	mu       sync.Mutex
	held     bool
	released bool
	changed  chan struct{} // closed and replaced when held or released changes
}

func newPodGate(marker string) *podGate {
	g := &podGate{changed: make(chan struct{})}
	if marker != "" {
		g.marker = []byte(marker)
	}
	return g
}

// holding reports whether the gate holds pod events now.
func (g *podGate) holding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held && !g.released
}

// release passes every held event, in order, and everything after.
func (g *podGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.released = true
	close(g.changed)
	g.changed = make(chan struct{})
}

// wrap is a transport wrapper that puts the body of every pod watch
// response behind the gate.
func (g *podGate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err != nil || r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/pods") {
			return resp, err
		}
		if q := r.URL.Query(); q.Get("watch") != "true" && strings.Contains(q.Get("fieldSelector"), "spec.nodeName=") {
			g.reads.Add(1)
		}
		if g.marker == nil {
			return resp, err
		}
		q := r.URL.Query()
		resp.Body = &gatedBody{body: resp.Body, gate: g, closed: make(chan struct{}),
			watch: q.Get("watch") == "true", listing: q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true"}
		return resp, nil
	})
}

// pass returns once data, the next chunk of a pod watch or listing, may
// be handed on, or with io.ErrClosedPipe when closed is closed first. A
// listing (listing) is never held, but the marker in it closes the gate
// too (the replica listed after the marker was written). tail is the end
// of the previous chunk, so that a marker split between chunks is found.
func (g *podGate) pass(listing bool, tail, data []byte, closed <-chan struct{}) error {
	for {
		g.mu.Lock()
		if !g.held || listing {
			if !g.held && bytes.Contains(append(slices.Clip(tail), data...), g.marker) {
				g.held = true
				close(g.changed)
				g.changed = make(chan struct{})
			}
			g.mu.Unlock()
			return nil // the chunk with the marker still passes
		}
		if g.released {
			g.mu.Unlock()
			return nil
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-closed:
			return io.ErrClosedPipe
		}
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// gatedBody reads a pod watch (watch) or listing response and hands each
// chunk on once its gate passes it. Close unblocks a Read waiting at the
// gate.
//
// A watch that asked for its initial events (client-go's streaming list,
// on by default since 1.35) is a listing until the bookmark that ends
// them has passed: holding it would keep the replica's informer from
// ever syncing, so a replica that started after the marker was written
// would never schedule at all.
type gatedBody struct {
	body    io.ReadCloser
	gate    *podGate
	watch   bool
	listing bool // a listing, or a watch still sending its initial events
	closed  chan struct{}
	once    sync.Once
	buf     [32 << 10]byte
	tail    []byte
	pending []byte
	err     error
}

func (b *gatedBody) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		n, err := b.body.Read(b.buf[:])
		if gerr := b.gate.pass(b.listing, b.tail, b.buf[:n], b.closed); gerr != nil {
			return 0, gerr
		}
		if b.listing && b.watch && bytes.Contains(append(slices.Clip(b.tail), b.buf[:n]...), initialEventsEnd) {
			b.listing = false
		}
		b.pending, b.err = b.buf[:n], err
		b.tail = append(b.tail[:0], b.buf[max(0, n-max(len(b.gate.marker), len(initialEventsEnd))):n]...)
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

// initialEventsEnd is the annotation on the bookmark that ends a watch's
// initial events.
var initialEventsEnd = []byte(metav1.InitialEventsAnnotationKey)

func (b *gatedBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.body.Close()
}

// pointExtenderAt rewrites the first extender's urlPrefix to the same
// path on addr.
func pointExtenderAt(raw map[string]any, addr string) error {
	exts, _ := raw["extenders"].([]any)
	if len(exts) == 0 {
		return errors.New("the scheduler configuration has no extender")
	}
	e, _ := exts[0].(map[string]any)
	prefix, _ := e["urlPrefix"].(string)
	u, err := url.Parse(prefix)
	if err != nil {
		return fmt.Errorf("extender urlPrefix %q: %w", prefix, err)
	}
	u.Host = addr
	e["urlPrefix"] = u.String()
	return nil
}

func readYAML(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return raw, nil
}

func writeYAML(path string, raw map[string]any) error {
	data, err := yaml.Marshal(raw)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// ask makes a request to a pair's endpoint path and returns the answer.
func ask(ctx context.Context, method, addr, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return string(body), err
}
