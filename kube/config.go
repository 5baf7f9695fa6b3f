package kube

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ErrKubeconfig is wrapped by [RESTConfig]'s errors about a kubeconfig file
// that cannot be read or names no usable context; the underlying error
// (for example one matching fs.ErrNotExist) is wrapped too.
var ErrKubeconfig = errors.New("kube: kubeconfig")

// RESTConfig returns the API client configuration of a dynmig component,
// as kubectl would build it: the current context of the kubeconfig file at
// path; when path is empty, the files $KUBECONFIG lists; when that is empty
// too, the pod's service account (in-cluster, whose error out of a cluster
// matches rest.ErrNotInCluster). Unlike kubectl there is no fallback to
// ~/.kube/config: a component started without a kubeconfig in a cluster
// must not silently pick up an operator's credentials.
func RESTConfig(path string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	if path == "" {
		env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar)
		if env == "" {
			cfg, err := rest.InClusterConfig()
			if err != nil {
				return nil, fmt.Errorf("kube: in-cluster config (out of a cluster, pass a kubeconfig): %w", err)
			}
			return cfg, nil
		}
		rules.Precedence = filepath.SplitList(env)
		path = env
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrKubeconfig, path, err)
	}
	return cfg, nil
}
