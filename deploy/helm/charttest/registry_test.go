package charttest_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/deploy/helm/charttest"
)

// testRegistry is the images.registry the tests render with unless they
// set one: the chart has no default (TestImageRegistry).
const testRegistry = "registry.example.com/dynmig"

// withRegistry returns opts with images.registry set to testRegistry
// where its values leave it out.
func withRegistry(opts charttest.Options) charttest.Options {
	vals := maps.Clone(opts.Values)
	if vals == nil {
		vals = map[string]any{}
	}
	images, _ := vals["images"].(map[string]any)
	images = maps.Clone(images)
	if images == nil {
		images = map[string]any{}
	}
	if _, set := images["registry"]; !set {
		images["registry"] = testRegistry
	}
	vals["images"] = images
	opts.Values = vals
	return opts
}

// render is charttest.Render with withRegistry's images.registry.
func render(opts charttest.Options) ([]string, error) {
	return charttest.Render(withRegistry(opts))
}

// notes is charttest.Notes with withRegistry's images.registry.
func notes(opts charttest.Options) (string, error) {
	return charttest.Notes(withRegistry(opts))
}

// TestImageRegistry: without images.registry the render fails, pointing
// at hack/build-images.sh and naming the value, for every component whose
// image is ours; the DRA driver alone too. With it, every image of ours
// is under it.
func TestImageRegistry(t *testing.T) {
	for _, vals := range []map[string]any{
		{},
		{"scheduler": map[string]any{"mode": "plugin"}},
		{"scheduler": map[string]any{"enabled": false}},
		{"scheduler": map[string]any{"enabled": false}, "devicePlugin": map[string]any{"enabled": false}, "draDriver": map[string]any{"enabled": true}},
	} {
		vals["images"] = map[string]any{"registry": ""}
		_, err := charttest.Render(charttest.Options{KubeVersion: "v1.37.2", Values: vals})
		if err == nil || !strings.Contains(err.Error(), "images.registry") || !strings.Contains(err.Error(), "hack/build-images.sh") {
			t.Errorf("values %v without a registry: %v", vals, err)
		}
	}
	for _, mode := range []string{"extender", "plugin"} {
		objs := objects(t, charttest.Options{KubeVersion: "v1.37.2", Values: map[string]any{"scheduler": map[string]any{"mode": mode}}})
		for _, img := range images(objs) {
			if !strings.HasPrefix(img, testRegistry+"/") && !strings.HasPrefix(img, "registry.k8s.io/kube-scheduler:") {
				t.Errorf("mode %s: image %s is neither under images.registry nor upstream kube-scheduler", mode, img)
			}
		}
	}
}
