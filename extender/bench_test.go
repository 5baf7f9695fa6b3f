package extender_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/extender"
)

// BenchmarkBindFreshNodeRead measures what the consistent listing of the
// node's pods (the default) adds to a MIG pod's Bind against the fake API
// server. Two extenders over two identical clusters, one with
// SkipFreshNodeRead, bind a pod each per iteration, interleaved so that
// machine load affects both alike; it reports each one's median Bind time
// (fresh-ns/bind, skip-ns/bind) and their ratio (fresh/skip). The node
// runs 100 other pods and the cluster 100 more elsewhere. The fake lists
// every pod and ignores the field selector, which a real API server
// answers from an index, so the ratio overstates the listing's CPU cost
// and leaves out its network round trip.
func BenchmarkBindFreshNodeRead(b *testing.B) {
	type side struct {
		client *fake.Clientset
		ext    *extender.Extender
		times  []time.Duration
	}
	ctx := context.Background()
	sides := make([]*side, 2)
	for i, skip := range []bool{false, true} {
		client := cluster(b)
		for j := range 200 {
			node := "n1"
			if j%2 == 1 {
				node = fmt.Sprintf("cpu-%d", j)
			}
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("bg-%d", j), UID: types.UID(fmt.Sprintf("uid-bg-%d", j))},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main"}}}}
			if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		ext := extender.New(client, extender.Options{SkipFreshNodeRead: skip})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = ext.Run(runCtx); close(done) }()
		defer func() { cancel(); <-done }()
		if err := ext.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		sides[i] = &side{client: client, ext: ext}
	}
	b.ResetTimer()
	for i := range b.N {
		for _, s := range sides {
			name := fmt.Sprintf("p%d", i)
			pod, err := s.client.CoreV1().Pods("default").Create(ctx, migPod(name, "4000"), metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC() // the setup's garbage is not the Bind's
			start := time.Now()
			if err := s.ext.Bind(ctx, bindArgs(pod, "n1")); err != nil {
				b.Fatal(err)
			}
			s.times = append(s.times, time.Since(start))
			// Delete it and wait until the view saw it, which frees the
			// node for the next round.
			if err := s.client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := s.ext.Sync(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2])
	}
	fresh, skip := median(sides[0].times), median(sides[1].times)
	b.ReportMetric(fresh, "fresh-ns/bind")
	b.ReportMetric(skip, "skip-ns/bind")
	b.ReportMetric(fresh/skip, "fresh/skip")
}

// BenchmarkFilterPrioritize measures the extender's Filter then
// Prioritize of one MIG pod (one 1g device) over 1,000 nodes, each a copy
// of n1 (one A100 registered, no pods), as a nodeCacheCapable extender
// receives them (node names only); every node passes. -benchmem shows the
// garbage per scheduling cycle beside the HTTP codec's, which this leaves
// out.
func BenchmarkFilterPrioritize(b *testing.B) {
	ctx := context.Background()
	client := cluster(b)
	ext := extender.New(client, extender.Options{})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = ext.Run(runCtx); close(done) }()
	defer func() { cancel(); <-done }()
	if err := ext.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	n1, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	nodes := make([]string, 1000)
	for i := range nodes {
		n := n1.DeepCopy()
		n.Name = fmt.Sprintf("gpu-%04d", i)
		ext.View().NodeHandler().OnAdd(n, false)
		nodes[i] = n.Name
	}
	args := extender.Args{Pod: migPod("p", "4000"), NodeNames: &nodes}
	b.ReportAllocs()
	for b.Loop() {
		res := ext.Filter(ctx, args)
		if res.Error != "" || len(*res.NodeNames) != len(nodes) {
			b.Fatalf("filter: %+v", res)
		}
		if _, err := ext.Prioritize(ctx, args); err != nil {
			b.Fatal(err)
		}
	}
}
