package kube_test

import (
	"encoding/pem"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dynmig/dynmig/kube"
)

// writeKubeconfig writes a kubeconfig for server into dir and returns its
// path; the CA file is named relative to the kubeconfig.
func writeKubeconfig(t *testing.T, dir string, srv *httptest.Server, user string) string {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	config := `apiVersion: v1
kind: Config
current-context: test
contexts:
- name: test
  context: {cluster: test, user: test}
- name: other
  context: {cluster: missing, user: test}
clusters:
- name: test
  cluster:
    server: ` + srv.URL + `
    certificate-authority: ca.crt
users:
- name: test
  user:
` + user
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// apiServer answers /version for requests bearing token.
func apiServer(t *testing.T, token string) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRESTConfigKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	srv := apiServer(t, "secret")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		user    string // the user stanza, indented
		fromEnv bool   // name the file in $KUBECONFIG instead of the flag
	}{
		{name: "token", user: "    token: secret\n"},
		{name: "relative token file", user: "    tokenFile: token\n"},
		{name: "from $KUBECONFIG", user: "    token: secret\n", fromEnv: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeKubeconfig(t, dir, srv, tt.user)
			flagValue := path
			if tt.fromEnv {
				t.Setenv("KUBECONFIG", path)
				flagValue = ""
			}
			cfg, err := kube.RESTConfig(flagValue)
			if err != nil {
				t.Fatalf("kube.RESTConfig(%q): %v", flagValue, err)
			}
			if got, want := cfg.Host, srv.URL; got != want {
				t.Errorf("Host = %q, want %q", got, want)
			}
			if got, want := cfg.CAFile, filepath.Join(dir, "ca.crt"); got != want {
				t.Errorf("CAFile = %q, want %q", got, want)
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			v, err := client.Discovery().ServerVersion()
			if err != nil {
				t.Fatalf("ServerVersion: %v", err)
			}
			if got, want := v.GitVersion, "v1.37.2"; got != want {
				t.Errorf("GitVersion = %q, want %q", got, want)
			}
		})
	}
}

func TestRESTConfigErrors(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	srv := apiServer(t, "secret")
	tests := []struct {
		name   string
		user   string
		edit   func(config string) string // rewrites the written file; nil keeps it
		flag   func(path string) string   // the -kubeconfig value; nil is path
		target error
	}{
		{name: "missing context", user: "    token: secret\n",
			edit: func(c string) string { return strings.Replace(c, "current-context: test", "current-context: nope", 1) }, target: kube.ErrKubeconfig},
		{name: "missing cluster", user: "    token: secret\n",
			edit: func(c string) string { return strings.Replace(c, "current-context: test", "current-context: other", 1) }, target: kube.ErrKubeconfig},
		{name: "not YAML", user: "    token: secret\n", edit: func(string) string { return "{" }, target: kube.ErrKubeconfig},
		{name: "no file", user: "    token: secret\n",
			flag: func(p string) string { return p + ".absent" }, target: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeKubeconfig(t, t.TempDir(), srv, tt.user)
			if tt.edit != nil {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tt.edit(string(data))), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			value := path
			if tt.flag != nil {
				value = tt.flag(path)
			}
			_, err := kube.RESTConfig(value)
			if !errors.Is(err, tt.target) {
				t.Errorf("restConfig: got %v, want %v", err, tt.target)
			}
		})
	}
}

func TestRESTConfigInCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	_, err := kube.RESTConfig("")
	if !errors.Is(err, rest.ErrNotInCluster) {
		t.Errorf("kube.RESTConfig(\"\") out of a cluster: got %v, want %v", err, rest.ErrNotInCluster)
	}
}

func TestRESTConfigExec(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	srv := apiServer(t, "secret")
	dir := t.TempDir()
	path := writeKubeconfig(t, dir, srv, `    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: bin/credentials
      args: [token]
      interactiveMode: Never
`)
	cfg, err := kube.RESTConfig(path)
	if err != nil {
		t.Fatalf("restConfig: %v", err)
	}
	if cfg.ExecProvider == nil {
		t.Fatal("ExecProvider = nil, want the user's exec plugin")
	}
	if got, want := cfg.ExecProvider.Command, filepath.Join(dir, "bin/credentials"); got != want {
		t.Errorf("exec command = %q, want %q (relative to the kubeconfig)", got, want)
	}
}
