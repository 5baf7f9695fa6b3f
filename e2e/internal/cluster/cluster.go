package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// DefaultAPIServerFlags are the kube-apiserver flags every Cluster uses,
// besides the etcd, certificate and client-CA flags the harness sets itself:
//
//   - RBAC (with the Node authorizer in front, as on a real cluster), so that
//     the components' ServiceAccounts get exactly what deploy/rbac grants;
//   - no ServiceAccount admission (no token controller runs, and pods need
//     no default ServiceAccount to be created) and no TaintNodesByCondition
//     (no node lifecycle controller runs to remove the not-ready taint it
//     adds).
var DefaultAPIServerFlags = []string{
	"--authorization-mode=Node,RBAC",
	"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
}

// Options configures a Cluster. The zero value works.
type Options struct {
	// APIServerFlags are appended to DefaultAPIServerFlags (a later flag
	// wins), e.g. "--feature-gates=...".
	APIServerFlags []string
}

// Cluster is a Kubernetes control plane running in the test process: an
// embedded etcd and a kube-apiserver built from k8s.io/kubernetes
// (cmd/kube-apiserver/app/testing.StartTestServer). Scheduler, extender,
// fake kubelet nodes and device plugins are started on it separately.
//
// The API server is reached through a front proxy whose address, serving
// certificate and client credentials stay the same across
// Cluster.RestartAPIServer, so every client built from the cluster keeps
// working after a restart (it sees connection errors while the server is
// down, as against a real control plane).
//
// Everything a Cluster writes lives under Cluster.Dir (a t.TempDir) or in
// the temporary directories StartTestServer makes for itself.
type Cluster struct {
	// Dir is the cluster's temporary directory.
	Dir string

	t       *testing.T
	opts    Options
	etcd    *Etcd
	pki     *pki
	proxy   *Proxy
	storage *storagebackend.Config
	files   struct{ ca, cert, key string }

	mu     sync.Mutex
	server *kubeapiservertesting.TestServer
}

// Start starts etcd and the API server and registers their shutdown with
// t.Cleanup. It fails the test if either does not start.
func Start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{Dir: t.TempDir(), t: t, opts: opts}
	logVersionOnce(t)

	var err error
	if c.pki, err = newPKI(); err != nil {
		t.Fatalf("cluster: certificates: %v", err)
	}
	c.files.ca = filepath.Join(c.Dir, "ca.crt")
	c.files.cert = filepath.Join(c.Dir, "apiserver.crt")
	c.files.key = filepath.Join(c.Dir, "apiserver.key")
	for name, data := range map[string][]byte{c.files.ca: c.pki.caPEM, c.files.cert: c.pki.serverCertPEM, c.files.key: c.pki.serverKeyPEM} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatalf("cluster: %v", err)
		}
	}

	etcdDir := filepath.Join(c.Dir, "etcd")
	if err := os.Mkdir(etcdDir, 0o700); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	if c.etcd, err = StartEtcd(etcdDir); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	t.Cleanup(c.etcd.Stop)

	if c.proxy, err = NewProxy(); err != nil {
		t.Fatalf("cluster: front proxy: %v", err)
	}
	t.Cleanup(c.proxy.Close)

	// One storage prefix for the cluster's life: a restarted API server
	// finds everything its predecessor stored.
	c.storage = storagebackend.NewDefaultConfig(path.Join("/dynmig-e2e", strconv.FormatInt(time.Now().UnixNano(), 36), "registry"), nil)
	c.storage.Transport.ServerList = []string{c.etcd.Endpoint()}

	if err := c.StartAPIServer(); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	// Registered after etcd's cleanup, so it runs before it.
	t.Cleanup(c.StopAPIServer)
	return c
}

// Etcd returns the cluster's etcd server.
func (c *Cluster) Etcd() *Etcd { return c.etcd }

// Host returns the API server's stable URL, "https://127.0.0.1:<port>".
func (c *Cluster) Host() string { return "https://" + c.proxy.Addr() }

// CAData returns the PEM CA bundle that verifies the API server.
func (c *Cluster) CAData() []byte { return append([]byte(nil), c.pki.caPEM...) }

// AdminConfig returns a new client config for a cluster administrator
// (system:masters, which RBAC never denies). It stays valid across API
// server restarts.
func (c *Cluster) AdminConfig() *rest.Config {
	return &rest.Config{
		Host: c.Host(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.CAData(),
			CertData: append([]byte(nil), c.pki.adminCertPEM...),
			KeyData:  append([]byte(nil), c.pki.adminKeyPEM...),
		},
		QPS:   1000,
		Burst: 1000,
	}
}

// Admin returns a clientset for AdminConfig.
func (c *Cluster) Admin() kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		// NewForConfig fails only on a malformed config, which AdminConfig
		// never builds.
		panic(fmt.Sprintf("cluster: admin client: %v", err))
	}
	return cs
}

// BearerConfig returns a client config that authenticates with token and
// trusts the API server's CA.
func (c *Cluster) BearerConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            c.Host(),
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData()},
		BearerToken:     token,
		QPS:             1000,
		Burst:           1000,
	}
}

// StartAPIServer starts the API server over the cluster's etcd and storage
// prefix and points the front proxy at it. It fails if one is running.
func (c *Cluster) StartAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.server != nil {
		return errors.New("cluster: API server already running")
	}
	flags := append([]string{
		"--etcd-servers=" + c.etcd.Endpoint(),
		"--tls-cert-file=" + c.files.cert,
		"--tls-private-key-file=" + c.files.key,
		"--client-ca-file=" + c.files.ca,
	}, DefaultAPIServerFlags...)
	flags = append(flags, c.opts.APIServerFlags...)
	opts := kubeapiservertesting.NewDefaultTestServerOptions()
	// The harness brings its own client CA (--client-ca-file). The test
	// server's cert auth would also point the peer proxy at a serving
	// certificate it expects to generate itself, which --tls-cert-file
	// replaces; no aggregated API server needs request-header auth here.
	opts.EnableCertAuth = false
	// The metrics invariant check at teardown scrapes the server with its
	// loopback client; a restarted server is another instance, and the
	// check says nothing about dynmig.
	opts.DisableInvariantChecks = true
	srv, err := kubeapiservertesting.StartTestServer(c.t, opts, flags, c.storage)
	if err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	c.server = &srv
	c.proxy.SetBackend(srv.ServerOpts.SecureServing.Listener.Addr().String())
	return nil
}

// StopAPIServer stops the API server (etcd keeps running). Clients see
// connection errors until StartAPIServer. It does nothing if none runs.
func (c *Cluster) StopAPIServer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.server == nil {
		return
	}
	c.proxy.SetBackend("")
	c.server.TearDownFn()
	c.server = nil
}

// RestartAPIServer stops the API server and starts a new one over the same
// etcd, at the same address, with the same certificates and ServiceAccount
// signing key (so issued tokens stay valid).
func (c *Cluster) RestartAPIServer() error {
	c.StopAPIServer()
	return c.StartAPIServer()
}

// WriteKubeconfig writes cfg (host, CA, client certificate or bearer
// token) as a kubeconfig file under Cluster.Dir and returns its path, for
// components that read one (kube-scheduler, subprocesses).
func (c *Cluster) WriteKubeconfig(name string, cfg *rest.Config) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "user"}
	kc.CurrentContext = "e2e"
	p := filepath.Join(c.Dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		return "", err
	}
	return p, nil
}

// WaitFor polls cond every interval until it returns true, returns an
// error, or ctx is done; it returns ctx's error in the last case, wrapped
// with what. Transient API errors should be reported by cond as false.
func WaitFor(ctx context.Context, interval time.Duration, what string, cond func(context.Context) (bool, error)) error {
	for {
		ok, err := cond(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// TestContext returns a context that ends shortly before the test binary's
// -timeout (or after fallback when there is none), cancelled at cleanup.
// Waits in e2e tests use it instead of short fixed bounds, which a loaded
// machine can exceed.
func TestContext(t *testing.T, fallback time.Duration) context.Context {
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(fallback)
	} else {
		// Leave time for cleanup and for the failure message.
		deadline = deadline.Add(-time.Until(deadline) / 10)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}
