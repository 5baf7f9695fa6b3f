package charttest

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// ChartDir returns the chart's directory, next to this package.
func ChartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "dynmig")
}

// RenderedFile is the checked-in rendering of the chart with default
// values, images.registry registry.example.com/dynmig (the chart has no
// default registry), for a v1.37.2 cluster (release dynmig, namespace dynmig-system),
// as helm template prints it; TestRenderedFile keeps it current, and the
// e2e module installs it.
func RenderedFile() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "rendered.yaml")
}

// RenderedPluginFile is the checked-in rendering of the chart as
// RenderedFile, with scheduler.mode plugin: the dynmig scheduler is
// kube-scheduler built with the DynMIG framework plugin.
func RenderedPluginFile() string {
	return filepath.Join(filepath.Dir(RenderedFile()), "rendered-plugin.yaml")
}

// AdmissionPolicyFile is the checked-in rendering of the chart's
// admission policy (admissionPolicy.enabled, for a cluster serving
// MutatingAdmissionPolicy v1): the policy and its binding only.
func AdmissionPolicyFile() string {
	return filepath.Join(filepath.Dir(RenderedFile()), "admission-policy.yaml")
}

// RecordPolicyFile is the checked-in rendering of the chart's sealing
// policy for the allocation record with recordPolicy.writers
// ["e2e/migration-writer"]: the policy and its binding only. The e2e
// module installs it.
func RecordPolicyFile() string {
	return filepath.Join(filepath.Dir(RenderedFile()), "record-policy.yaml")
}

// Options says what to render the chart for.
type Options struct {
	// Release and Namespace name the release; "" means "dynmig" and
	// "dynmig-system".
	Release, Namespace string
	// KubeVersion is the cluster's version, e.g. "v1.37.2"; "" means
	// Helm's default.
	KubeVersion string
	// APIVersions are the cluster's extra API versions
	// ("group/version" or "group/version/Kind"), as helm template
	// --api-versions takes them.
	APIVersions []string
	// Values override the chart's values.yaml.
	Values map[string]any
}

// Render renders the chart as helm template does and returns its
// manifests, one YAML document per element, in a stable order (by
// template file, then as the file has them). NOTES.txt is left out.
func Render(opts Options) ([]string, error) {
	files, err := render(opts)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var docs []string
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for _, doc := range strings.Split(files[name], "\n---") {
			if body := strings.TrimSpace(stripComments(doc)); body != "" {
				docs = append(docs, fmt.Sprintf("# Source: %s\n%s\n", name, strings.TrimSpace(doc)))
			}
		}
	}
	return docs, nil
}

// Notes renders the chart as Render does and returns NOTES.txt, the text
// helm install prints.
func Notes(opts Options) (string, error) {
	files, err := render(opts)
	if err != nil {
		return "", err
	}
	return files["dynmig/templates/NOTES.txt"], nil
}

// render renders every template of the chart, by file name.
func render(opts Options) (map[string]string, error) {
	chrt, err := loader.Load(ChartDir())
	if err != nil {
		return nil, err
	}
	if opts.Release == "" {
		opts.Release = "dynmig"
	}
	if opts.Namespace == "" {
		opts.Namespace = "dynmig-system"
	}
	caps := chartutil.DefaultCapabilities.Copy()
	if opts.KubeVersion != "" {
		kv, err := chartutil.ParseKubeVersion(opts.KubeVersion)
		if err != nil {
			return nil, err
		}
		caps.KubeVersion = *kv
	}
	caps.APIVersions = append(caps.APIVersions, opts.APIVersions...)
	if err := chartutil.ProcessDependenciesWithMerge(chrt, opts.Values); err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(chrt, opts.Values, chartutil.ReleaseOptions{
		Name: opts.Release, Namespace: opts.Namespace, IsInstall: true, Revision: 1,
	}, caps)
	if err != nil {
		return nil, err
	}
	return engine.Render(chrt, vals)
}

// stripComments drops whole-line comments, to tell empty documents.
func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
