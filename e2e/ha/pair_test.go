package ha_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/extender"
)

// The environment of a scheduler+extender subprocess. pairDirEnv names
// its directory, which holds the configuration template (pairConfig) and
// receives the extender's address (pairAddr) once it listens.
const (
	roleEnv       = "DYNMIG_E2E_HA_ROLE"
	roleScheduler = "scheduler-pair"
	pairDirEnv    = "DYNMIG_E2E_HA_DIR"
	pairConfig    = "config.yaml"
	pairAddr      = "extender.addr"
	bindsPath     = "/e2e/binds"
	// watchLagEnv, when set to a duration, delays every watch event the
	// pair's extender receives by that much (see lagWatches).
	watchLagEnv = "DYNMIG_E2E_HA_WATCH_LAG"
)

// TestMain runs a scheduler+extender pair instead of the tests when the
// binary is re-executed as one (see startPair). Otherwise it runs the
// tests and checks that no goroutine outlives them, ignoring, as the other
// e2e packages do, the control plane's process-lifetime goroutines
// (wait.Forever) and the watch cache's wake-up timer, which ends within
// 3 s of the API server stopping.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == roleScheduler {
		if err := runPair(os.Getenv(pairDirEnv)); err != nil {
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

// runPair is one replica of the deployed scheduler pod: the example
// extender on 127.0.0.1 (a port of its own, as a sidecar has one per pod)
// and kube-scheduler with the configuration template in dir, its extender
// URL pointed at that port. It returns when kube-scheduler does; a
// leader-elected kube-scheduler that stops leading exits the process
// itself.
func runPair(dir string) error {
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
	if v := os.Getenv(watchLagEnv); v != "" {
		lag, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %w", watchLagEnv, err)
		}
		cfg.Wrap(lagWatches(lag))
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if err := pointExtenderAt(raw, ln.Addr().String()); err != nil {
		return err
	}
	final := filepath.Join(dir, "kube-scheduler.yaml")
	if err := writeYAML(final, raw); err != nil {
		return err
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ext := extender.New(client, extender.Options{Logger: log})
	informers, stopInformers := context.WithCancel(context.Background())
	defer stopInformers()
	go func() { _ = ext.Run(informers) }()

	var binds atomic.Int64
	mux := http.NewServeMux()
	handler := ext.Handler()
	mux.HandleFunc("POST /bind", func(w http.ResponseWriter, r *http.Request) {
		binds.Add(1)
		handler.ServeHTTP(w, r)
	})
	mux.Handle("/", handler)
	mux.HandleFunc("GET "+bindsPath, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, binds.Load())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// Published only once the extender serves, so the test can ask it.
	tmp := filepath.Join(dir, pairAddr+".tmp")
	if err := os.WriteFile(tmp, []byte(ln.Addr().String()), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, pairAddr)); err != nil {
		return err
	}

	// No HTTPS endpoint: two replicas share the host, and the test needs
	// none of kube-scheduler's own endpoints.
	cmd := schedulerapp.NewSchedulerCommand()
	cmd.SetArgs([]string{"--config=" + final, "--secure-port=0", "--v=2"})
	return cmd.ExecuteContext(ctx)
}

// lagWatches returns a transport wrapper that delivers the body of every
// watch response lag late: each chunk read from the server is handed to
// the client lag after it arrived, in order. An extender whose informers
// watch through it sees the cluster as it was lag ago (its listings are
// current), like a replica whose watch stream is slow.
func lagWatches(lag time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err != nil || r.URL.Query().Get("watch") != "true" {
				return resp, err
			}
			resp.Body = newLaggingBody(resp.Body, lag)
			return resp, nil
		})
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type chunk struct {
	data []byte
	at   time.Time
	err  error
}

// laggingBody reads the real body on its own goroutine (which ends when
// the body does or is closed) and releases each chunk lag after it
// arrived.
type laggingBody struct {
	body    io.ReadCloser
	lag     time.Duration
	chunks  chan chunk
	closed  chan struct{}
	once    sync.Once
	pending []byte
	err     error
}

func newLaggingBody(body io.ReadCloser, lag time.Duration) *laggingBody {
	b := &laggingBody{body: body, lag: lag, chunks: make(chan chunk, 64), closed: make(chan struct{})}
	go func() {
		defer close(b.chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := body.Read(buf)
			select {
			case b.chunks <- chunk{data: buf[:n], at: time.Now(), err: err}:
			case <-b.closed:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return b
}

func (b *laggingBody) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		c, ok := <-b.chunks
		if !ok {
			return 0, io.EOF
		}
		select {
		case <-time.After(time.Until(c.at.Add(b.lag))):
		case <-b.closed:
			return 0, io.ErrClosedPipe
		}
		b.pending, b.err = c.data, c.err
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *laggingBody) Close() error {
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

// extenderBinds asks a pair's extender how many bind calls it received.
func extenderBinds(ctx context.Context, addr string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+bindsPath, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var buf [32]byte
	n, _ := resp.Body.Read(buf[:])
	return strconv.ParseInt(string(buf[:n]), 10, 64)
}
