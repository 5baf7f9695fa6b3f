package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// ReadManifests parses a multi-document YAML file into objects, skipping
// empty documents.
func ReadManifests(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: %s document %d: %w", path, i, err)
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("cluster: %s document %d: %w", path, i, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		out = append(out, obj)
	}
}

// ApplyManifests creates every object of the given multi-document YAML
// files with the admin client, in file and document order. An object that
// already exists is left as it is. Namespaced objects without a namespace
// go to "default".
func (c *Cluster) ApplyManifests(ctx context.Context, paths ...string) ([]*unstructured.Unstructured, error) {
	cfg := c.AdminConfig()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var created []*unstructured.Unstructured
	for _, p := range paths {
		objs, err := ReadManifests(p)
		if err != nil {
			return created, err
		}
		for i, obj := range objs {
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				mapper.Reset()
				if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
					return created, fmt.Errorf("cluster: %s document %d (%s): %w", p, i, gvk, err)
				}
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ns := obj.GetNamespace()
				if ns == "" {
					ns = metav1.NamespaceDefault
				}
				ri = dyn.Resource(m.Resource).Namespace(ns)
			}
			got, err := ri.Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return created, fmt.Errorf("cluster: %s document %d (%s %s): %w", p, i, gvk.Kind, obj.GetName(), err)
			}
			created = append(created, got)
		}
	}
	return created, nil
}
